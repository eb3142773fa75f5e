// The VMM-side dirty bitmap: GuestMemory writes and the virtio ChainWriter mark the
// pages they store to, and take() hands them over once.
#include <catch2/catch.hpp>

#include <vector>

#include "devices/virtio/chain_io.hpp"
#include "vmm/dirty_tracker.hpp"
#include "vmm/guest_memory.hpp"

using namespace nanovm;

namespace {

DirtyTracker tracker_for(const GuestMemory& memory) {
    std::vector<DirtyTracker::Range> ranges;
    for (const MemoryRegion& r : memory.regions()) ranges.push_back({r.gpa, r.size});
    return DirtyTracker(ranges);
}

}  // namespace

TEST_CASE("a marked GPA range sets every page it touches, and take clears them", "[snapshot][unit]") {
    DirtyTracker tracker({{Gpa(0), 1 * MiB}, {Gpa(4 * GiB), 1 * MiB}});
    tracker.mark(Gpa(0x1ffe), 4);                 // straddles pages 1 and 2
    tracker.mark(Gpa(4 * GiB + 0x5000), 1);       // second region, page 5
    tracker.mark(Gpa(2 * MiB), 4096);             // outside both: ignored
    CHECK(tracker.marked(0, 1));
    CHECK(tracker.marked(0, 2));
    CHECK_FALSE(tracker.marked(0, 3));
    const std::vector<uint64_t> low = tracker.take(0);
    CHECK(low[0] == 0b110);
    const std::vector<uint64_t> high = tracker.take(1);
    CHECK(high[0] == 1u << 5);
    CHECK(tracker.take(0)[0] == 0);  // taken once
}

TEST_CASE("GuestMemory writes and a device's ChainWriter mark the tracker", "[snapshot][unit]") {
    GuestMemory memory = GuestMemory::create(1 * MiB);
    DirtyTracker tracker = tracker_for(memory);
    memory.write<uint32_t>(Gpa(0x3000), 7);  // e.g. a used-ring index update
    CHECK_FALSE(tracker.marked(0, 3));       // no tracker attached yet
    memory.set_dirty_tracker(&tracker);
    memory.write<uint32_t>(Gpa(0x3000), 8);
    memory.write_bytes(Gpa(0x7ffc), std::vector<uint8_t>(8, 1));  // pages 7 and 8

    // A simulated device request: the driver's writable buffers at 0x20000 (2 pages)
    // and 0x40800 (a few bytes); the device writes 8200 bytes of response.
    virtio::DescriptorChain chain;
    chain.writable = {{Gpa(0x20000), 8192}, {Gpa(0x40800), 16}};
    chain.writable_bytes = 8208;
    virtio::ChainWriter writer(memory, chain);
    writer.write_exact(std::vector<uint8_t>(8200, 0xee), "response");
    const std::vector<uint64_t> bits = tracker.take(0);
    std::vector<uint64_t> pages;
    for (uint64_t p = 0; p < 256; ++p)
        if (bits[p / 64] >> (p % 64) & 1) pages.push_back(p);
    CHECK(pages == std::vector<uint64_t>{3, 7, 8, 0x20, 0x21, 0x40});
    memory.set_dirty_tracker(nullptr);
}
