// The split-virtqueue parser (devices/virtio/queue.hpp) against a hostile driver: one
// test per malformed ring or chain, each checking that QueueError names the problem
// and that the queue serves a good chain again after a reset; then what well-formed
// but unusual rings must do (zero-length and indirect descriptors, index wrap-around,
// EVENT_IDX and notification suppression) and the layout checks made at QueueReady.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "devices/virtio/queue.hpp"
#include "tests/unit/devices/virtio/test_driver.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using Catch::Contains;

namespace {

constexpr uint16_t kSize = 16;
constexpr uint64_t kRings = 0x10000;    // descriptor table, avail and used ring
constexpr uint64_t kTables = 0x80000;   // indirect descriptor tables
constexpr uint64_t kBuffers = 0x100000;  // data buffers

constexpr uint16_t kNext = desc_flags::kNext;
constexpr uint16_t kWrite = desc_flags::kWrite;
constexpr uint16_t kIndirect = desc_flags::kIndirect;

/// What a queue negotiated (VIRTIO_F_INDIRECT_DESC, VIRTIO_F_EVENT_IDX).
struct Negotiated {
    bool indirect = true;
    bool event_idx = false;
};

/// One ready Virtqueue of kSize entries over simulated guest RAM, its rings at kRings
/// written through test::TestQueue (the driver's side).
struct QueueBench {
    explicit QueueBench(uint64_t ram_bytes = 16 * MiB, Negotiated negotiated = {})
        : memory(GuestMemory::create(ram_bytes)), negotiated_(negotiated) {
        configure();
    }

    /// Writes an indirect descriptor table at `gpa`.
    void table(uint64_t gpa, const std::vector<Descriptor>& entries) {
        for (size_t i = 0; i < entries.size(); ++i) memory.write(Gpa(gpa + 16 * i), entries[i]);
    }

    /// Publishes head 0 and expects pop to throw QueueError; returns its message.
    std::string pop_error(uint16_t head = 0) {
        ring->publish(head);
        try {
            (void)queue.pop(memory);
        } catch (const QueueError& e) {
            return e.what();
        }
        FAIL("pop accepted a malformed chain");
        return {};
    }

    /// Publishes head 0 and pops it, expecting a valid chain.
    DescriptorChain pop_ok(uint16_t head = 0) {
        ring->publish(head);
        std::optional<DescriptorChain> chain = queue.pop(memory);
        REQUIRE(chain);
        return *chain;
    }

    /// Resets the queue as the transport does on a driver reset, sets it up again on
    /// zeroed rings and checks that a good two-buffer chain goes through.
    void expect_good_chain_after_reset() {
        queue.reset();
        const std::vector<uint8_t> zeros(26 * kSize + 4096, 0);
        memory.write_bytes(Gpa(kRings), zeros);
        configure();
        ring->set_descriptor(0, {kBuffers, 4, kNext, 1});
        ring->set_descriptor(1, {kBuffers + 0x100, 8, kWrite, 0});
        const DescriptorChain chain = pop_ok();
        CHECK(chain.head == 0);
        CHECK(chain.readable_bytes == 4);
        CHECK(chain.writable_bytes == 8);
        queue.push_used(memory, chain.head, 8);
        CHECK(ring->used_idx() == 1);
        CHECK(ring->used(0).len == 8);
    }

    GuestMemory memory;
    std::optional<test::TestQueue> ring;
    Virtqueue queue{0, kSize};

private:
    void configure() {
        ring.emplace(memory, kSize, kRings);
        QueueState& s = queue.state();
        s.size = kSize;
        s.desc_table = ring->desc_table();
        s.avail_ring = ring->avail_ring();
        s.used_ring = ring->used_ring();
        s.indirect = negotiated_.indirect;
        s.event_idx = negotiated_.event_idx;
        queue.check_layout(memory);
        s.ready = true;
    }

    Negotiated negotiated_;
};

/// An indirect table of `n` chained one-byte readable buffers at kBuffers, kBuffers + 1...
std::vector<Descriptor> one_byte_buffers(uint32_t n) {
    std::vector<Descriptor> entries(n);
    for (uint32_t i = 0; i < n; ++i)
        entries[i] = {kBuffers + i, 1, static_cast<uint16_t>(i + 1 < n ? kNext : 0), static_cast<uint16_t>(i + 1)};
    return entries;
}

/// Queue `index` of kSize entries with its rings at kRings, + 0x1000 and + 0x2000.
Virtqueue laid_out_queue(uint16_t index) {
    Virtqueue q(index, kSize);
    q.state().desc_table = kRings;
    q.state().avail_ring = kRings + 0x1000;
    q.state().used_ring = kRings + 0x2000;
    return q;
}

/// Guest RAM with both regions: [0, 3 GiB) and [4 GiB, 4 GiB + 64 MiB). memfd-backed
/// and sparse, so only the pages a test touches cost memory.
constexpr uint64_t kTwoRegionRam = 3 * GiB + 64 * MiB;

}  // namespace

// ---- malformed rings and chains -------------------------------------------------

TEST_CASE("virtqueue: a descriptor loop is a QueueError", "[virtio][queue]") {
    QueueBench b;
    b.ring->set_descriptor(0, {kBuffers, 8, kNext, 1});
    b.ring->set_descriptor(1, {kBuffers + 8, 8, kNext, 2});
    b.ring->set_descriptor(2, {kBuffers + 16, 8, kNext, 0});
    CHECK_THAT(b.pop_error(), Contains("queue 0: descriptor chain from 0 loops"));
    b.expect_good_chain_after_reset();
}

TEST_CASE("virtqueue: a descriptor pointing at itself is a loop", "[virtio][queue]") {
    QueueBench b;
    b.ring->set_descriptor(5, {kBuffers, 8, kNext, 5});
    CHECK_THAT(b.pop_error(5), Contains("descriptor chain from 5 loops"));
    b.expect_good_chain_after_reset();
}

TEST_CASE("virtqueue: a loop inside an indirect table is a QueueError", "[virtio][queue]") {
    QueueBench b;
    b.table(kTables, {{kBuffers, 8, kNext, 1}, {kBuffers + 8, 8, kNext, 2}, {kBuffers + 16, 8, kNext, 1}});
    b.ring->set_descriptor(0, {kTables, 3 * 16, kIndirect, 0});
    CHECK_THAT(b.pop_error(), Contains("indirect descriptor chain from 0 loops"));
    b.expect_good_chain_after_reset();
}

TEST_CASE("virtqueue: a next index outside the table is a QueueError", "[virtio][queue]") {
    QueueBench b;
    b.ring->set_descriptor(0, {kBuffers, 8, kNext, kSize});
    CHECK_THAT(b.pop_error(), Contains("descriptor 0: next index 16 >= 16 entries"));
    b.expect_good_chain_after_reset();
}

TEST_CASE("virtqueue: a next index outside an indirect table is a QueueError", "[virtio][queue]") {
    QueueBench b;
    b.table(kTables, {{kBuffers, 8, kNext, 1}, {kBuffers + 8, 8, kNext, 2}});
    b.ring->set_descriptor(0, {kTables, 2 * 16, kIndirect, 0});
    CHECK_THAT(b.pop_error(), Contains("indirect descriptor 1: next index 2 >= 2 entries"));
    b.expect_good_chain_after_reset();
}

TEST_CASE("virtqueue: a head index outside the table is a QueueError", "[virtio][queue]") {
    QueueBench b;
    CHECK_THAT(b.pop_error(kSize), Contains("avail ring slot 0: head 16 >= queue size 16"));
    b.expect_good_chain_after_reset();
}

TEST_CASE("virtqueue: an avail index more than the queue size ahead is a QueueError", "[virtio][queue]") {
    QueueBench b;
    for (uint16_t i = 0; i < kSize; ++i) b.ring->set_descriptor(i, {kBuffers, 8, 0, 0});
    SECTION("exactly the queue size ahead is a full ring, not an error") {
        for (uint16_t i = 0; i < kSize; ++i) b.ring->publish(i);
        for (uint16_t i = 0; i < kSize; ++i) {
            const auto chain = b.queue.pop(b.memory);
            REQUIRE(chain);
            CHECK(chain->head == i);
        }
        CHECK_FALSE(b.queue.pop(b.memory));
    }
    SECTION("one more is an error") {
        b.ring->set_avail_idx(kSize + 1);
        CHECK_THROWS_WITH(b.queue.pop(b.memory), Contains("avail index 17 is 17 ahead of the device's 0"));
        b.expect_good_chain_after_reset();
    }
    SECTION("an index behind the device's is far ahead modulo 2^16") {
        b.queue.state().next_avail = 100;
        b.ring->set_avail_idx(99);
        CHECK_THROWS_WITH(b.queue.pop(b.memory), Contains("is 65535 ahead"));
        b.expect_good_chain_after_reset();
    }
}

TEST_CASE("virtqueue: a buffer outside guest RAM is a QueueError", "[virtio][queue]") {
    QueueBench b;  // 16 MiB of RAM
    SECTION("starting at the end of RAM") { b.ring->set_descriptor(0, {16 * MiB, 1, 0, 0}); }
    SECTION("running past the end of RAM") { b.ring->set_descriptor(0, {16 * MiB - 8, 16, 0, 0}); }
    SECTION("far above RAM") { b.ring->set_descriptor(0, {1ull << 40, 4096, kWrite, 0}); }
    CHECK_THAT(b.pop_error(), Contains("descriptor 0: buffer") && Contains("is not inside one region of guest RAM"));
    b.expect_good_chain_after_reset();
}

TEST_CASE("virtqueue: a buffer ending exactly at the end of RAM is accepted", "[virtio][queue]") {
    QueueBench b;
    b.ring->set_descriptor(0, {16 * MiB - 16, 16, kWrite, 0});
    const DescriptorChain chain = b.pop_ok();
    REQUIRE(chain.writable.size() == 1);
    CHECK(chain.writable[0].addr == Gpa(16 * MiB - 16));
}

TEST_CASE("virtqueue: a buffer straddling the end of a RAM region or the 3 GiB hole is a QueueError",
          "[virtio][queue]") {
    QueueBench b(kTwoRegionRam);
    REQUIRE(b.memory.regions().size() == 2);
    SECTION("from low RAM into the hole") { b.ring->set_descriptor(0, {3 * GiB - 8, 16, 0, 0}); }
    SECTION("from the hole into high RAM") { b.ring->set_descriptor(0, {4 * GiB - 8, 16, kWrite, 0}); }
    SECTION("across the whole hole") { b.ring->set_descriptor(0, {3 * GiB - 8, 1 * GiB + 16, 0, 0}); }
    SECTION("past the end of high RAM") { b.ring->set_descriptor(0, {4 * GiB + 64 * MiB - 8, 16, 0, 0}); }
    SECTION("an indirect table straddling the hole") { b.ring->set_descriptor(0, {3 * GiB - 16, 32, kIndirect, 0}); }
    CHECK_THAT(b.pop_error(), Contains("is not inside"));
    b.expect_good_chain_after_reset();
}

TEST_CASE("virtqueue: buffers at the edges of both RAM regions are accepted", "[virtio][queue]") {
    QueueBench b(kTwoRegionRam);
    b.ring->set_descriptor(0, {3 * GiB - 16, 16, kNext, 1});
    b.ring->set_descriptor(1, {4 * GiB, 16, kNext, 2});
    b.ring->set_descriptor(2, {4 * GiB + 64 * MiB - 16, 16, 0, 0});
    const DescriptorChain chain = b.pop_ok();
    REQUIRE(chain.readable.size() == 3);
    CHECK(chain.readable[1].addr == Gpa(4 * GiB));
    CHECK(chain.readable_bytes == 48);
}

TEST_CASE("virtqueue: addr + len wrapping past 2^64 is a QueueError", "[virtio][queue]") {
    QueueBench b;
    SECTION("a buffer") { b.ring->set_descriptor(0, {~0ull - 15, 32, 0, 0}); }
    SECTION("a buffer ending exactly at 2^64") { b.ring->set_descriptor(0, {~0ull - 15, 16, kWrite, 0}); }
    SECTION("an indirect table") { b.ring->set_descriptor(0, {~0ull - 15, 32, kIndirect, 0}); }
    CHECK_THAT(b.pop_error(), Contains("is not inside"));
    b.expect_good_chain_after_reset();
}

TEST_CASE("virtqueue: an indirect table of more than kMaxChainDescriptors entries is a QueueError",
          "[virtio][queue]") {
    QueueBench b;
    const std::vector<Descriptor> entries(kMaxChainDescriptors + 1, Descriptor{kBuffers, 1, kNext, 0});
    b.table(kTables, entries);
    b.ring->set_descriptor(0, {kTables, 16 * (kMaxChainDescriptors + 1), kIndirect, 0});
    CHECK_THAT(b.pop_error(), Contains("descriptor 0: indirect table of 1025 entries (max 1024)"));
    b.expect_good_chain_after_reset();
}

TEST_CASE("virtqueue: direct plus indirect descriptors beyond kMaxChainDescriptors are a QueueError",
          "[virtio][queue]") {
    QueueBench b;
    b.table(kTables, one_byte_buffers(kMaxChainDescriptors));
    b.ring->set_descriptor(0, {kBuffers, 1, kNext, 1});
    b.ring->set_descriptor(1, {kTables, 16 * kMaxChainDescriptors, kIndirect, 0});
    CHECK_THAT(b.pop_error(), Contains("chain from 0 has more than 1024 descriptors"));
    b.expect_good_chain_after_reset();
}

TEST_CASE("virtqueue: an indirect table of exactly kMaxChainDescriptors buffers is accepted", "[virtio][queue]") {
    QueueBench b;
    b.table(kTables, one_byte_buffers(kMaxChainDescriptors));
    b.ring->set_descriptor(0, {kTables, 16 * kMaxChainDescriptors, kIndirect, 0});
    const DescriptorChain chain = b.pop_ok();
    CHECK(chain.readable.size() == kMaxChainDescriptors);
    CHECK(chain.readable_bytes == kMaxChainDescriptors);
}

TEST_CASE("virtqueue: an indirect descriptor without VIRTIO_F_INDIRECT_DESC is a QueueError", "[virtio][queue]") {
    QueueBench b(16 * MiB, Negotiated{.indirect = false});
    b.table(kTables, {{kBuffers, 8, 0, 0}});
    b.ring->set_descriptor(0, {kTables, 16, kIndirect, 0});
    CHECK_THAT(b.pop_error(), Contains("descriptor 0: indirect table without VIRTIO_F_INDIRECT_DESC"));
    b.expect_good_chain_after_reset();
}

TEST_CASE("virtqueue: a nested indirect table is a QueueError", "[virtio][queue]") {
    QueueBench b;
    b.table(kTables, {{kBuffers, 8, kNext, 1}, {kTables + 0x1000, 16, kIndirect, 0}});
    b.table(kTables + 0x1000, {{kBuffers, 8, 0, 0}});
    b.ring->set_descriptor(0, {kTables, 32, kIndirect, 0});
    CHECK_THAT(b.pop_error(), Contains("indirect descriptor 1: nested indirect table"));
    b.expect_good_chain_after_reset();
}

TEST_CASE("virtqueue: INDIRECT together with NEXT is a QueueError", "[virtio][queue]") {
    QueueBench b;
    b.table(kTables, {{kBuffers, 8, 0, 0}});
    b.ring->set_descriptor(0, {kTables, 16, kIndirect | kNext, 1});
    b.ring->set_descriptor(1, {kBuffers, 8, 0, 0});
    CHECK_THAT(b.pop_error(), Contains("descriptor 0: both INDIRECT and NEXT set"));
    b.expect_good_chain_after_reset();
}

TEST_CASE("virtqueue: an indirect table length of 0 or not a multiple of 16 is a QueueError", "[virtio][queue]") {
    QueueBench b;
    b.table(kTables, {{kBuffers, 8, 0, 0}, {kBuffers, 8, 0, 0}});
    uint32_t len = 0;
    SECTION("length 0") { len = 0; }
    SECTION("length 24") { len = 24; }
    SECTION("length 15") { len = 15; }
    b.ring->set_descriptor(0, {kTables, len, kIndirect, 0});
    CHECK_THAT(b.pop_error(), Contains(fmt::format("indirect table length {} is not a non-zero multiple of 16", len)));
    b.expect_good_chain_after_reset();
}

TEST_CASE("virtqueue: a device-readable buffer after a device-writable one is a QueueError", "[virtio][queue]") {
    QueueBench b;
    SECTION("in the descriptor table") {
        b.ring->set_descriptor(0, {kBuffers, 8, kWrite | kNext, 1});
        b.ring->set_descriptor(1, {kBuffers + 8, 8, 0, 0});
        CHECK_THAT(b.pop_error(), Contains("descriptor 1: device-readable buffer after a device-writable one"));
    }
    SECTION("in an indirect table") {
        b.table(kTables, {{kBuffers, 8, kNext, 1}, {kBuffers + 8, 8, kWrite | kNext, 2}, {kBuffers + 16, 8, 0, 0}});
        b.ring->set_descriptor(0, {kTables, 48, kIndirect, 0});
        CHECK_THAT(b.pop_error(),
                   Contains("indirect descriptor 2: device-readable buffer after a device-writable one"));
    }
    SECTION("a writable direct descriptor followed by an indirect table of readable ones") {
        b.table(kTables, {{kBuffers + 8, 8, 0, 0}});
        b.ring->set_descriptor(0, {kBuffers, 8, kWrite | kNext, 1});
        b.ring->set_descriptor(1, {kTables, 16, kIndirect, 0});
        CHECK_THAT(b.pop_error(),
                   Contains("indirect descriptor 0: device-readable buffer after a device-writable one"));
    }
    b.expect_good_chain_after_reset();
}

TEST_CASE("virtqueue: a malformed chain does not consume the avail entry", "[virtio][queue]") {
    QueueBench b;
    b.ring->set_descriptor(0, {kBuffers, 8, kNext, 0});
    (void)b.pop_error();
    CHECK(b.queue.state().next_avail == 0);
    CHECK_THROWS_AS(b.queue.pop(b.memory), QueueError);  // still broken: the transport resets it
}

// ---- well-formed but unusual rings ----------------------------------------------

TEST_CASE("virtqueue: pop returns nothing when the queue is not ready or the ring is empty", "[virtio][queue]") {
    QueueBench b;
    CHECK_FALSE(b.queue.pop(b.memory));
    b.ring->set_descriptor(0, {kBuffers, 8, 0, 0});
    b.ring->publish(0);
    b.queue.state().ready = false;
    CHECK_FALSE(b.queue.pop(b.memory));
    b.queue.state().ready = true;
    CHECK(b.queue.pop(b.memory));
    CHECK_FALSE(b.queue.pop(b.memory));
}

TEST_CASE("virtqueue: a queue that is not ready publishes nothing, whatever its size", "[virtio][queue]") {
    // Issue 15: push_used on a queue whose size the driver set to 0 divided by zero.
    QueueBench b;
    b.ring->set_descriptor(0, {kBuffers, 8, desc_flags::kWrite, 0});
    b.ring->publish(0);
    const auto chain = b.queue.pop(b.memory);
    REQUIRE(chain);
    b.queue.state().ready = false;
    b.queue.state().size = 0;
    CHECK_THROWS_AS(b.queue.push_used(b.memory, chain->head, 8), QueueError);
    CHECK_FALSE(b.queue.needs_interrupt(b.memory));
    CHECK_FALSE(b.queue.enable_notification(b.memory, true));
    CHECK_THROWS_AS(b.queue.notify_on_next_avail(b.memory), QueueError);
    CHECK(b.ring->used_idx() == 0);
    b.queue.state().size = kSize;
    CHECK_THROWS_AS(b.queue.push_used(b.memory, chain->head, 8), QueueError);
    CHECK(b.ring->used_idx() == 0);
}

TEST_CASE("virtqueue: zero-length descriptors are skipped", "[virtio][queue]") {
    QueueBench b;
    b.ring->set_descriptor(0, {kBuffers, 0, kNext, 1});
    b.ring->set_descriptor(1, {kBuffers, 4, kNext, 2});
    b.ring->set_descriptor(2, {1ull << 50, 0, kNext, 3});  // not in RAM, but empty: never touched
    b.ring->set_descriptor(3, {kBuffers + 0x100, 0, kWrite | kNext, 4});
    b.ring->set_descriptor(4, {kBuffers + 0x200, 6, kWrite, 0});
    const DescriptorChain chain = b.pop_ok();
    REQUIRE(chain.readable.size() == 1);
    REQUIRE(chain.writable.size() == 1);
    CHECK(chain.readable[0].addr == Gpa(kBuffers));
    CHECK(chain.readable[0].len == 4);
    CHECK(chain.writable[0].addr == Gpa(kBuffers + 0x200));
    CHECK(chain.readable_bytes == 4);
    CHECK(chain.writable_bytes == 6);
}

TEST_CASE("virtqueue: an indirect chain with readable and writable buffers", "[virtio][queue]") {
    QueueBench b;
    b.table(kTables, {{kBuffers, 16, kNext, 3},
                      {kBuffers + 0x300, 512, kWrite, 0},
                      {0, 0, 0, 0},
                      {kBuffers + 0x100, 32, kNext, 4},
                      {kBuffers + 0x200, 1, kWrite | kNext, 1}});
    // WRITE on the descriptor that points at the table means nothing (§2.7.5.3.2).
    b.ring->set_descriptor(3, {kTables, 5 * 16, kIndirect | kWrite, 0});
    const DescriptorChain chain = b.pop_ok(3);
    CHECK(chain.head == 3);
    REQUIRE(chain.readable.size() == 2);
    REQUIRE(chain.writable.size() == 2);
    CHECK(chain.readable[0].addr == Gpa(kBuffers));
    CHECK(chain.readable[1].addr == Gpa(kBuffers + 0x100));
    CHECK(chain.writable[0].addr == Gpa(kBuffers + 0x200));
    CHECK(chain.writable[1].addr == Gpa(kBuffers + 0x300));
    CHECK(chain.readable_bytes == 48);
    CHECK(chain.writable_bytes == 513);
}

TEST_CASE("virtqueue: direct descriptors followed by an indirect table form one chain", "[virtio][queue]") {
    QueueBench b;
    b.table(kTables, {{kBuffers + 0x100, 8, kWrite, 0}});
    b.ring->set_descriptor(0, {kBuffers, 4, kNext, 7});
    b.ring->set_descriptor(7, {kTables, 16, kIndirect, 0});
    const DescriptorChain chain = b.pop_ok();
    CHECK(chain.readable_bytes == 4);
    CHECK(chain.writable_bytes == 8);
}

TEST_CASE("virtqueue: the 16-bit avail and used indices wrap around", "[virtio][queue]") {
    QueueBench b;
    b.queue.state().next_avail = 65530;
    b.queue.state().next_used = 65530;
    b.ring->set_avail_idx(65530);
    for (uint16_t i = 0; i < 10; ++i) {
        b.ring->set_descriptor(i, {kBuffers + 16ull * i, 16, kWrite, 0});
        b.ring->publish(i);
    }
    for (uint16_t i = 0; i < 10; ++i) {
        const auto chain = b.queue.pop(b.memory);
        REQUIRE(chain);
        CHECK(chain->head == i);
        b.queue.push_used(b.memory, chain->head, i);
    }
    CHECK_FALSE(b.queue.pop(b.memory));
    CHECK(b.queue.state().next_avail == 4);
    CHECK(b.ring->used_idx() == 4);
    for (uint16_t i = 0; i < 10; ++i) {
        const uint16_t used_index = static_cast<uint16_t>(65530 + i);
        CHECK(b.ring->used(used_index).id == i);
        CHECK(b.ring->used(used_index).len == i);
    }
}

TEST_CASE("virtqueue: with EVENT_IDX the driver is interrupted only when used_event is crossed", "[virtio][queue]") {
    QueueBench b(16 * MiB, Negotiated{.indirect = true, .event_idx = true});
    const auto push = [&](int n) {
        for (int i = 0; i < n; ++i) b.queue.push_used(b.memory, 0, 0);
    };
    push(1);
    CHECK(b.queue.needs_interrupt(b.memory));  // nothing signalled yet: always
    b.ring->set_used_event(3);
    push(2);  // used idx 1 -> 3: entry 3 not used yet
    CHECK_FALSE(b.queue.needs_interrupt(b.memory));
    push(1);  // 3 -> 4: crosses used_event 3
    CHECK(b.queue.needs_interrupt(b.memory));
    b.ring->set_used_event(2);  // behind the window [4, 5)
    push(1);
    CHECK_FALSE(b.queue.needs_interrupt(b.memory));
    b.ring->set_used_event(10);  // inside [5, 15)
    push(10);
    CHECK(b.queue.needs_interrupt(b.memory));
    CHECK_FALSE(b.queue.needs_interrupt(b.memory));  // nothing new since

    SECTION("the window wraps around 2^16") {
        b.queue.state().next_used = 65534;
        b.queue.state().signalled_used = 65534;
        SECTION("used_event inside [65534, 1)") {
            b.ring->set_used_event(65535);
            push(3);
            CHECK(b.queue.needs_interrupt(b.memory));
        }
        SECTION("used_event at the new index, outside") {
            b.ring->set_used_event(1);
            push(3);
            CHECK_FALSE(b.queue.needs_interrupt(b.memory));
        }
    }
    SECTION("a reset forgets what was signalled") {
        b.expect_good_chain_after_reset();
        CHECK(b.queue.needs_interrupt(b.memory));
    }
}

TEST_CASE("virtqueue: without EVENT_IDX, VIRTQ_AVAIL_F_NO_INTERRUPT suppresses interrupts", "[virtio][queue]") {
    QueueBench b;
    b.queue.push_used(b.memory, 0, 0);
    b.ring->set_avail_flags(kAvailFlagNoInterrupt);
    CHECK_FALSE(b.queue.needs_interrupt(b.memory));
    b.ring->set_avail_flags(0);
    CHECK(b.queue.needs_interrupt(b.memory));
    b.ring->set_used_event(100);  // ignored without EVENT_IDX
    CHECK(b.queue.needs_interrupt(b.memory));
}

TEST_CASE("virtqueue: enable_notification reports chains that arrived while notifications were off",
          "[virtio][queue]") {
    SECTION("without EVENT_IDX: VIRTQ_USED_F_NO_NOTIFY") {
        QueueBench b;
        const Gpa used_flags(b.ring->used_ring());
        CHECK_FALSE(b.queue.enable_notification(b.memory, false));
        CHECK(b.memory.read<uint16_t>(used_flags) == kUsedFlagNoNotify);
        CHECK_FALSE(b.queue.enable_notification(b.memory, true));
        CHECK(b.memory.read<uint16_t>(used_flags) == 0);
        b.queue.enable_notification(b.memory, false);
        b.ring->set_descriptor(0, {kBuffers, 8, 0, 0});
        b.ring->publish(0);
        CHECK(b.queue.enable_notification(b.memory, true));
        CHECK(b.memory.read<uint16_t>(used_flags) == 0);
        CHECK(b.queue.pop(b.memory));
        CHECK_FALSE(b.queue.enable_notification(b.memory, true));
    }
    SECTION("with EVENT_IDX: avail_event") {
        QueueBench b(16 * MiB, Negotiated{.indirect = true, .event_idx = true});
        CHECK_FALSE(b.queue.enable_notification(b.memory, true));
        CHECK(b.ring->avail_event() == 0);
        b.ring->set_descriptor(0, {kBuffers, 8, 0, 0});
        b.ring->publish(0);
        b.ring->publish(0);
        CHECK(b.queue.pop(b.memory));
        CHECK(b.queue.enable_notification(b.memory, true));
        CHECK(b.ring->avail_event() == 1);
        CHECK_FALSE(b.queue.enable_notification(b.memory, false));
        CHECK(b.ring->avail_event() == 1);  // disabling leaves it behind
        CHECK(b.memory.read<uint16_t>(Gpa(b.ring->used_ring())) == 0);  // flags untouched with EVENT_IDX
    }
}

// ---- layout checks made when the driver sets QueueReady --------------------------

TEST_CASE("virtqueue: check_layout refuses bad sizes", "[virtio][queue]") {
    GuestMemory memory = GuestMemory::create(16 * MiB);
    Virtqueue q = laid_out_queue(0);
    CHECK_NOTHROW(q.check_layout(memory));
    for (const uint16_t size : {uint16_t{0}, uint16_t{12}, uint16_t{32}, uint16_t{65535}}) {
        q.state().size = size;
        CHECK_THROWS_WITH(q.check_layout(memory),
                          Contains(fmt::format("size {} is not a power of two in [1, 16]", size)));
    }
    q.state().size = 1;
    CHECK_NOTHROW(q.check_layout(memory));
    CHECK_THROWS_WITH(Virtqueue(1, 12), Contains("max size 12 is not a power of two"));
    CHECK_THROWS_WITH(Virtqueue(1, 2048), Contains("max size 2048"));
}

TEST_CASE("virtqueue: check_layout refuses misaligned rings", "[virtio][queue]") {
    GuestMemory memory = GuestMemory::create(16 * MiB);
    Virtqueue q = laid_out_queue(2);
    SECTION("descriptor table") {
        q.state().desc_table += 8;
        CHECK_THROWS_WITH(q.check_layout(memory), Contains("queue 2: descriptor table 0x10008 is not 16-byte aligned"));
    }
    SECTION("avail ring") {
        q.state().avail_ring += 1;
        CHECK_THROWS_WITH(q.check_layout(memory), Contains("avail ring 0x11001 is not 2-byte aligned"));
    }
    SECTION("used ring") {
        q.state().used_ring += 2;
        CHECK_THROWS_WITH(q.check_layout(memory), Contains("used ring 0x12002 is not 4-byte aligned"));
    }
}

TEST_CASE("virtqueue: check_layout refuses rings outside guest RAM", "[virtio][queue]") {
    GuestMemory memory = GuestMemory::create(kTwoRegionRam);
    Virtqueue q = laid_out_queue(0);
    SECTION("descriptor table running past the end of low RAM") {
        q.state().desc_table = 3 * GiB - 16 * (kSize - 1);
        CHECK_THROWS_WITH(q.check_layout(memory), Contains("descriptor table [0xbfffff10, +0x100) is not inside"));
    }
    SECTION("avail ring in the hole") {
        q.state().avail_ring = 3 * GiB + 0x1000;
        CHECK_THROWS_WITH(q.check_layout(memory), Contains("avail ring [0xc0001000, +0x26) is not inside"));
    }
    SECTION("used ring running past the end of high RAM") {
        q.state().used_ring = 4 * GiB + 64 * MiB - 0x80;
        CHECK_THROWS_WITH(q.check_layout(memory), Contains("used ring [0x103ffff80, +0x86) is not inside"));
    }
    SECTION("used ring whose avail_event field alone is outside") {
        q.state().used_ring = 4 * GiB + 64 * MiB - (4 + 8 * kSize);
        CHECK_THROWS_WITH(q.check_layout(memory), Contains("used ring"));
    }
    SECTION("rings in high RAM are fine") {
        q.state().desc_table = 4 * GiB;
        q.state().avail_ring = 4 * GiB + 64 * MiB - (6 + 2 * kSize);
        q.state().used_ring = 4 * GiB + 0x1000;
        CHECK_NOTHROW(q.check_layout(memory));
    }
}

TEST_CASE("virtqueue: undo_pop gives the chain back, and the next pop returns it again", "[virtio][queue]") {
    QueueBench bench;
    bench.ring->set_descriptor(0, {kBuffers, 4, kNext, 1});
    bench.ring->set_descriptor(1, {kBuffers + 0x100, 8, kWrite, 0});
    const DescriptorChain first = bench.pop_ok();
    bench.queue.undo_pop();
    CHECK(bench.ring->used_idx() == 0);
    const std::optional<DescriptorChain> again = bench.queue.pop(bench.memory);
    REQUIRE(again);
    CHECK(again->head == first.head);
    CHECK(again->readable_bytes == 4);
    CHECK(again->writable_bytes == 8);
    CHECK_FALSE(bench.queue.pop(bench.memory));
}
