// Device-side virtio-blk throughput, without a guest: TestDriver keeps `depth`
// requests outstanding on fixed buffers (a busy-polling "driver" on the test thread)
// against an image in the page cache. Hidden: run with
//   build/tests/unit/unit_tests "[bench]"
// It measures the device model + io_uring + copy cost, not a disk, and not the guest.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "tests/unit/devices/virtio/blk_rig.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using namespace nanovm::virtio::blk;
namespace fx = nanovm::test::blk_fixture;

namespace {

// Runs `total` requests of `bytes` each with `depth` in flight; returns seconds.
double run(fx::BlkRig& rig, uint32_t type, uint32_t bytes, uint32_t depth, uint32_t total, bool random,
           uint64_t disk_sectors) {
    test::TestQueue& q = rig.driver.queue(0);
    struct Fixed {
        uint64_t header, data, status;
    };
    std::vector<Fixed> fixed(depth);
    for (uint32_t i = 0; i < depth; ++i) {
        fixed[i] = {rig.driver.alloc(16), rig.driver.alloc(bytes), rig.driver.alloc(1)};
        const auto head = static_cast<uint16_t>(3 * i);
        const uint16_t data_flags = type == request_type::kIn ? desc_flags::kWrite : 0;
        q.set_descriptor(head, {fixed[i].header, 16, desc_flags::kNext, static_cast<uint16_t>(head + 1)});
        q.set_descriptor(head + 1, {fixed[i].data, bytes, static_cast<uint16_t>(data_flags | desc_flags::kNext),
                                    static_cast<uint16_t>(head + 2)});
        q.set_descriptor(head + 2, {fixed[i].status, 1, desc_flags::kWrite, 0});
    }
    std::mt19937_64 rng(42);
    const uint64_t sectors = bytes / 512;
    uint64_t next_sector = 0;
    const auto submit = [&](uint16_t head) {
        uint64_t sector;
        if (random) {
            sector = (rng() % (disk_sectors / sectors)) * sectors;
        } else {
            sector = next_sector;
            next_sector = (next_sector + sectors) % disk_sectors;
        }
        rig.memory.write(Gpa(fixed[head / 3].header), RequestHeader{type, 0, sector});
        q.publish(head);
    };
    const auto start = std::chrono::steady_clock::now();
    uint32_t submitted = 0, done = 0;
    for (; submitted < std::min(depth, total); ++submitted) submit(static_cast<uint16_t>(3 * submitted));
    rig.driver.kick(0);
    uint16_t seen = rig.used;
    while (done < total) {
        const uint16_t idx = q.used_idx();
        bool posted = false;
        for (; seen != idx; ++seen, ++done) {
            const UsedElement e = q.used(seen);
            if (rig.memory.read<uint8_t>(Gpa(fixed[e.id / 3].status)) != request_status::kOk) FAIL("request failed");
            if (submitted < total) {
                submit(static_cast<uint16_t>(e.id));
                ++submitted;
                posted = true;
            }
        }
        if (posted) rig.driver.kick(0);
        if (seen == idx) std::this_thread::yield();  // leave the core to the device thread
    }
    rig.used = seen;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("virtio-blk device throughput against the page cache", "[.][bench]") {
    nanovm::test::TempDir dir;
    const std::string path = dir.file("bench.img");
    constexpr uint64_t kDisk = 256 * MiB;
    fx::make_image(path, kDisk);
    fx::BlkRig rig(BlockOptions{path, false, "bench"}, 512 * MiB);
    rig.up();
    const uint64_t sectors = kDisk / 512;
    // Write the whole disk first so reads hit allocated, cached pages.
    const double wt = run(rig, request_type::kOut, 1 * MiB, 16, 256, false, sectors);
    const double rt = run(rig, request_type::kIn, 1 * MiB, 16, 1024, false, sectors);
    const double r4 = run(rig, request_type::kIn, 4096, 64, 200000, true, sectors);
    const double w4 = run(rig, request_type::kOut, 4096, 64, 100000, true, sectors);
    std::printf("virtio-blk device model, page cache, no guest:\n");
    std::printf("  1 MiB sequential write, depth 16: %8.0f MB/s\n", 256.0 * MiB / wt / 1e6);
    std::printf("  1 MiB sequential read,  depth 16: %8.0f MB/s\n", 1024.0 * MiB / rt / 1e6);
    std::printf("  4 KiB random read,      depth 64: %8.0f IOPS\n", 200000 / r4);
    std::printf("  4 KiB random write,     depth 64: %8.0f IOPS\n", 100000 / w4);
    CHECK(rig.device.counters().io_errors == 0);
}
