// A full snapshot's RAM frozen in the pause (snapshot/frozen_ram.hpp), without KVM:
// the layer holds the memory as it was at the freeze, while the memory goes on
// changing in copy-on-write pages at the same addresses; the memfds end sealed; a
// second freeze is refused (the memory is over a frozen layer now) and a snapshot
// of that memory still holds what it holds.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "snapshot/frozen_ram.hpp"
#include "snapshot/memory_layer.hpp"
#include "snapshot/snapshot_writer.hpp"
#include "snapshot/state_file.hpp"
#include "tests/support/temp_dir.hpp"
#include "vmm/error.hpp"
#include "vmm/guest_memory.hpp"

using namespace nanovm;
using namespace nanovm::snapshot;

namespace {

constexpr uint64_t kRam = 8 * MiB;

uint64_t word_at(const GuestMemory& memory, uint64_t page) { return memory.read<uint64_t>(Gpa(page * kPageSize + 8)); }

uint64_t layer_word(const LayerFile& layer, uint64_t page) {
    uint64_t v = 0;
    std::memcpy(&v, layer.page_verified(page).data() + 8, sizeof(v));
    return v;
}

}  // namespace

TEST_CASE("frozen RAM: the layer is the memory at the freeze; the memory runs on in copy-on-write pages",
          "[snapshot][frozen]") {
    test::TempDir dir("frozen");
    GuestMemory memory = GuestMemory::create(kRam);
    for (uint64_t p = 0; p < kRam / kPageSize; p += 4) memory.write<uint64_t>(Gpa(p * kPageSize + 8), 0x1000 + p);
    const uint8_t* host_before = memory.regions()[0].host;
    REQUIRE(freeze_unsupported_reason(memory).empty());

    FrozenRam ram = freeze_ram(memory);
    CHECK(memory.backing() == GuestMemory::Backing::private_memfd);
    CHECK(memory.regions()[0].host == host_before);  // same HVA: KVM's memslots stay valid
    CHECK(!freeze_unsupported_reason(memory).empty());
    CHECK_THROWS_AS(freeze_ram(memory), Error);
    // The VM runs on: it changes a frozen page and writes a page that was a hole.
    memory.write<uint64_t>(Gpa(0 * kPageSize + 8), 0xdead);
    memory.write<uint64_t>(Gpa(1 * kPageSize + 8), 0xbeef);
    CHECK(word_at(memory, 0) == 0xdead);
    CHECK(word_at(memory, 4) == 0x1004);  // unwritten pages read from the frozen layer

    const std::string path = dir.file("memory.layer");
    {
        LayerBuilder builder(path, kRam, std::nullopt, /*drop_zero_pages=*/true);
        const uint64_t read = write_frozen_ram(ram, builder);
        // The memfd's data extents, plus page 1: a write fault on a hole of a private
        // shmem mapping puts a zero page in the memfd before copying it (shmem_fault),
        // which the layer leaves out as a zero page.
        CHECK(read == kRam / kPageSize / 4 + 1);
        builder.finish();
    }
    const LayerFile layer = LayerFile::open(path);
    CHECK(layer.header().present_pages == kRam / kPageSize / 4);
    CHECK(layer_word(layer, 0) == 0x1000);  // as at the freeze, not 0xdead
    CHECK(!layer.has(1));                    // a hole at the freeze stays out
    CHECK(layer_word(layer, kRam / kPageSize - 4) == 0x1000 + kRam / kPageSize - 4);
    // Written and released: the layer's memfds are sealed, the memory unchanged.
    CHECK(::pwrite(ram.memfds[0].get(), "x", 1, 0) == -1);
    CHECK(::fcntl(ram.memfds[0].get(), F_GET_SEALS) & F_SEAL_WRITE);
    CHECK(word_at(memory, 0) == 0xdead);
    CHECK(word_at(memory, 1) == 0xbeef);
}

TEST_CASE("a snapshot with CopyMode::freeze of plain memfd RAM is frozen; of RAM over a frozen layer, copied",
          "[snapshot][frozen]") {
    test::TempDir dir("frozen-snap");
    GuestMemory memory = GuestMemory::create(kRam);
    for (uint64_t p = 0; p < kRam / kPageSize; p += 2) memory.write<uint64_t>(Gpa(p * kPageSize + 8), 0x2000 + p);
    StateWriter w;
    w.add(SectionType::machine, 0, std::vector<uint8_t>(64, 0x22));
    const std::vector<uint8_t> state = w.finish();

    SnapshotContent first;
    first.state = state;
    first.drop_zero_pages = true;
    first.frozen = std::make_unique<FrozenRam>(freeze_ram(memory));
    PendingSnapshot s1(dir.file("s1"), memory, std::move(first), CopyMode::freeze);
    memory.write<uint64_t>(Gpa(2 * kPageSize + 8), 0x5555);  // after the pause
    const SnapshotStats st1 = s1.wait_durable();
    CHECK(st1.frozen);
    CHECK(st1.background);
    CHECK(st1.present_pages == kRam / kPageSize / 2);

    // The second snapshot of the same memory: over its frozen layer, the pages it
    // holds are its layer's extents plus its own copies, copied as they are now.
    SnapshotContent second;
    second.state = state;
    second.drop_zero_pages = true;
    second.pages = populated_pages(memory);
    PendingSnapshot s2(dir.file("s2"), memory, std::move(second), CopyMode::freeze);
    const SnapshotStats st2 = s2.wait_durable();
    CHECK(!st2.frozen);
    const LayerFile l1 = LayerFile::open(dir.file("s1") + "/memory.layer");
    const LayerFile l2 = LayerFile::open(dir.file("s2") + "/memory.layer");
    CHECK(layer_word(l1, 2) == 0x2002);
    CHECK(layer_word(l2, 2) == 0x5555);
    CHECK(layer_word(l2, 4) == 0x2004);
}

TEST_CASE("frozen RAM dropped unwritten (a snapshot that failed) is still released and sealed", "[snapshot][frozen]") {
    GuestMemory memory = GuestMemory::create(kRam);
    memory.write<uint64_t>(Gpa(8), 0x77);
    Fd kept;
    {
        FrozenRam ram = freeze_ram(memory);
        kept = Fd(::fcntl(ram.memfds[0].get(), F_DUPFD_CLOEXEC, 0));
        REQUIRE(kept.valid());
        FrozenRam moved = std::move(ram);  // the snapshot took it, then failed
    }
    CHECK(::fcntl(kept.get(), F_GET_SEALS) & F_SEAL_WRITE);
    memory.write<uint64_t>(Gpa(8), 0x78);  // the VM goes on over its private mapping
    CHECK(memory.read<uint64_t>(Gpa(8)) == 0x78);
    uint64_t frozen = 0;
    REQUIRE(::pread(kept.get(), &frozen, sizeof(frozen), 8) == sizeof(frozen));
    CHECK(frozen == 0x77);
}

TEST_CASE("frozen RAM over two regions (RAM above 4 GiB) puts each region's pages at its linear indices",
          "[snapshot][frozen]") {
    test::TempDir dir("frozen-two");
    const uint64_t ram_bytes = kMmioHoleStart + 8 * MiB;  // 3 GiB below the hole, 8 MiB from 4 GiB
    GuestMemory memory = GuestMemory::create(ram_bytes);
    REQUIRE(memory.regions().size() == 2);
    const uint64_t low_pages = kMmioHoleStart / kPageSize;
    memory.write<uint64_t>(Gpa(5 * kPageSize + 8), 0x10);
    memory.write<uint64_t>(Gpa(kHighRamStart + 7 * kPageSize + 8), 0x20);
    FrozenRam ram = freeze_ram(memory);
    CHECK(ram.memfds.size() == 2);
    memory.write<uint64_t>(Gpa(kHighRamStart + 7 * kPageSize + 8), 0x21);
    const std::string path = dir.file("memory.layer");
    {
        LayerBuilder builder(path, ram_bytes, std::nullopt, /*drop_zero_pages=*/true);
        write_frozen_ram(ram, builder);
        builder.finish();
    }
    const LayerFile layer = LayerFile::open(path);
    CHECK(layer.header().present_pages == 2);
    CHECK(layer_word(layer, 5) == 0x10);
    CHECK(layer_word(layer, low_pages + 7) == 0x20);
    CHECK(memory.read<uint64_t>(Gpa(kHighRamStart + 7 * kPageSize + 8)) == 0x21);
}
