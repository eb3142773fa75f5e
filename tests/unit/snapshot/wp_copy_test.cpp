// The background copy under userfaultfd write-protect (snapshot/wp_copy.hpp) without
// KVM: host threads keep writing random pages of a 64 MiB GuestMemory while the
// layer is copied, and the layer equals the memory at the snapshot instant exactly;
// no write is lost, and every page written after the instant is in the
// DirtyTracker for the next diff.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "snapshot/manifest.hpp"
#include "snapshot/memory_layer.hpp"
#include "snapshot/snapshot_writer.hpp"
#include "snapshot/state_file.hpp"
#include "snapshot/wp_copy.hpp"
#include "tests/support/temp_dir.hpp"
#include "vmm/dirty_tracker.hpp"
#include "vmm/guest_memory.hpp"

using namespace nanovm;
using namespace nanovm::snapshot;

namespace {

constexpr uint64_t kRam = 64 * MiB;
constexpr uint64_t kPages = kRam / kPageSize;
constexpr unsigned kWriters = 3;

std::vector<uint8_t> some_state() {
    StateWriter w;
    const std::vector<uint8_t> payload(64, 0x22);
    w.add(SectionType::machine, 0, payload);
    return w.finish();
}

// Writer w stores (w << 56 | n) at byte offset 64 * w of random pages and keeps
// the last value it stored in each page in its shadow. It parks while `hold` is set.
struct Writers {
    GuestMemory& memory;
    std::atomic<bool> hold{false}, stop{false};
    std::atomic<unsigned> parked{0};
    std::atomic<uint64_t> writes{0};
    std::vector<std::vector<uint64_t>> shadow;
    std::vector<std::thread> threads;

    explicit Writers(GuestMemory& m) : memory(m), shadow(kWriters, std::vector<uint64_t>(kPages, 0)) {
        for (unsigned w = 0; w < kWriters; ++w)
            threads.emplace_back([this, w] {
                std::mt19937_64 rng(1234 + w);
                uint64_t n = 0;
                while (!stop.load(std::memory_order_acquire)) {
                    if (hold.load(std::memory_order_acquire)) {
                        parked.fetch_add(1);
                        while (hold.load(std::memory_order_acquire)) std::this_thread::yield();
                        parked.fetch_sub(1);
                        continue;
                    }
                    const uint64_t page = rng() % kPages;
                    const uint64_t value = (uint64_t{w} << 56) | ++n;
                    memory.write<uint64_t>(Gpa(page * kPageSize + 64 * w), value);  // marks the DirtyTracker
                    shadow[w][page] = value;
                    writes.fetch_add(1, std::memory_order_relaxed);
                }
            });
    }
    void park() {
        hold.store(true);
        while (parked.load() != kWriters) std::this_thread::yield();
    }
    void release() { hold.store(false); }
    void join() {
        stop.store(true);
        hold.store(false);
        for (auto& t : threads) t.join();
    }
};

}  // namespace

TEST_CASE("a background snapshot under write-protect equals the memory at the snapshot instant while host threads "
          "write",
          "[snapshot][wp]") {
    GuestMemory memory = GuestMemory::create(kRam);
    const std::string reason = WriteProtectCopy::unsupported_reason(memory);
    INFO("unsupported: " << reason);
    REQUIRE(reason.empty());
    // Three quarters of the pages hold data, the rest were never written (holes).
    std::mt19937_64 fill(99);
    for (uint64_t p = 0; p < kPages; ++p) {
        if (p % 4 == 3) continue;
        std::vector<uint64_t> words(kPageSize / 8);
        for (auto& w : words) w = fill();
        memory.write_bytes(Gpa(p * kPageSize), {reinterpret_cast<const uint8_t*>(words.data()), kPageSize});
    }
    DirtyTracker tracker({{Gpa(0), kRam}});
    memory.set_dirty_tracker(&tracker);
    test::TempDir dir("wp");

    Writers writers(memory);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // The snapshot instant: writers parked (as a paused VM), the reference copy taken,
    // the tracker's epoch restarted, the copy armed, the writers let go.
    writers.park();
    const auto all = memory.slice(Gpa(0), kRam);
    const std::vector<uint8_t> expected(all.begin(), all.end());
    (void)tracker.take(0);
    SnapshotContent content;
    content.state = some_state();
    content.pages = populated_pages(memory);
    content.drop_zero_pages = true;
    PendingSnapshot snap(dir.file("s"), memory, std::move(content), CopyMode::background);
    const uint64_t writes_before = writers.writes.load();
    writers.release();
    const SnapshotStats& stats = snap.wait_durable();
    const uint64_t writes_during = writers.writes.load() - writes_before;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    writers.join();
    memory.set_dirty_tracker(nullptr);

    INFO("writes during the copy " << writes_during << ", wp faults " << stats.wp_faults << ", arm " << stats.arm_ms
                                   << " ms, copy " << stats.memory_ms << " ms");
    CHECK(stats.background);
    CHECK(stats.fallback.empty());
    CHECK(writes_during > 100);
    CHECK(stats.wp_faults > 0);  // writers did hit protected pages
    REQUIRE(is_durable(dir.file("s")));
    CHECK_NOTHROW(check_parts(dir.file("s"), read_manifest(dir.file("s")), PartCheck::full));

    // The layer is the memory at the instant, page for page.
    const LayerChain chain = LayerChain::open(dir.file("s/memory.layer"));
    const std::vector<uint8_t> zero(kPageSize, 0);
    uint64_t differing = 0, first_bad = ~0ULL;
    for (uint64_t p = 0; p < kPages; ++p) {
        const LayerFile* layer = chain.find(p);
        const uint8_t* got = layer ? layer->page_verified(p).data() : zero.data();
        if (std::memcmp(got, expected.data() + p * kPageSize, kPageSize) != 0) {
            ++differing;
            first_bad = std::min(first_bad, p);
        }
    }
    INFO("first differing page " << first_bad);
    CHECK(differing == 0);
    uint64_t nonzero_at_instant = 0;
    for (uint64_t p = 0; p < kPages; ++p)
        if (std::memcmp(expected.data() + p * kPageSize, zero.data(), kPageSize) != 0) ++nonzero_at_instant;
    CHECK(stats.data_pages == nonzero_at_instant);

    // No write was lost, and each page written after the instant is marked for the next diff.
    const std::vector<uint64_t> dirty = tracker.take(0);
    uint64_t lost = 0, unmarked = 0, after = 0;
    for (unsigned w = 0; w < kWriters; ++w)
        for (uint64_t p = 0; p < kPages; ++p) {
            if (!writers.shadow[w][p]) continue;
            if (memory.read<uint64_t>(Gpa(p * kPageSize + 64 * w)) != writers.shadow[w][p]) ++lost;
            uint64_t at_instant;
            std::memcpy(&at_instant, expected.data() + p * kPageSize + 64 * w, 8);
            if (at_instant != writers.shadow[w][p]) {
                ++after;
                if (!(dirty[p / 64] >> (p % 64) & 1)) ++unmarked;
            }
        }
    CHECK(lost == 0);
    CHECK(after > 0);
    CHECK(unmarked == 0);
}

TEST_CASE("a background diff layer holds the chosen pages as they were at the instant", "[snapshot][wp]") {
    GuestMemory memory = GuestMemory::create(kRam);
    for (uint64_t p = 0; p < kPages; p += 2) memory.write<uint64_t>(Gpa(p * kPageSize), p + 1);
    test::TempDir dir("wpdiff");
    PendingSnapshot base(dir.file("base"), memory,
                         SnapshotContent{some_state(), populated_pages(memory), std::nullopt, true},
                         CopyMode::in_pause);
    const SnapshotStats& b = base.wait_durable();
    // The diff: pages 0..4095, half of them zero now (a zero page must hide the parent's).
    PageBitmap pages(kPages / 64, 0);
    for (uint64_t p = 0; p < 4096; ++p) pages[p / 64] |= 1ULL << (p % 64);
    for (uint64_t p = 0; p < 4096; p += 4) memory.write<uint64_t>(Gpa(p * kPageSize), 0);
    std::vector<uint8_t> expected(kRam);
    Writers writers(memory);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    writers.park();
    std::memcpy(expected.data(), memory.slice(Gpa(0), kRam).data(), kRam);  // the instant
    PendingSnapshot diff(dir.file("diff"), memory,
                         SnapshotContent{some_state(), pages, ParentRef{"../base/memory.layer", b.layer_checksum}, false},
                         CopyMode::background);
    writers.release();
    const SnapshotStats& d = diff.wait_durable();
    writers.join();
    CHECK(d.background);
    CHECK(d.present_pages == 4096);
    const LayerChain chain = LayerChain::open(dir.file("diff/memory.layer"));
    REQUIRE(chain.layers().size() == 2);
    uint64_t differing = 0;
    for (uint64_t p = 0; p < 4096; ++p) {
        const LayerFile* layer = chain.find(p);
        REQUIRE(layer == &chain.layers().front());
        if (std::memcmp(layer->page_verified(p).data(), expected.data() + p * kPageSize, kPageSize) != 0) ++differing;
    }
    CHECK(differing == 0);
}
