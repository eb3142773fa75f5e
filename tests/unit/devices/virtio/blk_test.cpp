// virtio-blk against a temporary image file, simulated guest memory and TestDriver:
// every request type, the guest-error paths, concurrency, reset with I/O in flight,
// and the sparse scratch disk.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <thread>

#include "devices/virtio/blk/sparse_disk.hpp"
#include "tests/unit/devices/virtio/blk_rig.hpp"
#include "tests/unit/vmm/event_loop_waits.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using namespace nanovm::virtio::blk;
namespace fx = nanovm::test::blk_fixture;
using fx::BlkRig;
using fx::PostedRequest;
using nanovm::test::TempDir;

namespace {

constexpr uint64_t kDiskBytes = 8 * MiB;

BlockOptions disk_options(const std::string& path, bool read_only = false, std::string serial = "") {
    return BlockOptions{path, read_only, std::move(serial)};
}

uint32_t config_u32(BlkRig& rig, uint32_t offset) { return rig.driver.reg(mmio::kConfig + offset); }

// Fills the file with non-zero bytes over [offset, +len) and makes them allocated on disk.
void fill_file(const std::string& path, uint64_t offset, size_t len) {
    Fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    const auto bytes = fx::pattern(len, 99);
    REQUIRE(::pwrite(fd.get(), bytes.data(), len, static_cast<off_t>(offset)) == static_cast<ssize_t>(len));
    REQUIRE(::fsync(fd.get()) == 0);
}

}  // namespace

TEST_CASE("virtio-blk offers its features and a config space with the capacity and limits") {
    TempDir dir;
    fx::make_image(dir.file("disk.img"), kDiskBytes + 100);  // a partial last sector is not visible
    BlkRig rig(disk_options(dir.file("disk.img")));
    CHECK(rig.driver.reg(mmio::kDeviceId) == device_id::kBlock);
    const uint64_t f = rig.driver.device_features();
    CHECK((f & blk::feature::kFlush) != 0);
    CHECK((f & blk::feature::kDiscard) != 0);
    CHECK((f & blk::feature::kWriteZeroes) != 0);
    CHECK((f & blk::feature::kSegMax) != 0);
    CHECK((f & blk::feature::kRo) == 0);
    CHECK(rig.driver.reg(mmio::kQueueNumMax) == 256);
    CHECK(config_u32(rig, 0) == kDiskBytes / 512);  // capacity, low half
    CHECK(config_u32(rig, 4) == 0);
    CHECK(config_u32(rig, offsetof(Config, seg_max)) == 254);
    CHECK(config_u32(rig, offsetof(Config, blk_size)) == 512);
    CHECK(config_u32(rig, offsetof(Config, max_discard_seg)) == BlockDevice::kMaxDiscardSeg);
    CHECK(config_u32(rig, offsetof(Config, max_write_zeroes_sectors)) == BlockDevice::kMaxDiscardSectors);
    CHECK((config_u32(rig, offsetof(Config, write_zeroes_may_unmap)) & 0xff) == 1);
    CHECK(config_u32(rig, 200) == 0);  // past the struct: zero
    CHECK(rig.device.capacity_sectors() == kDiskBytes / 512);
}

TEST_CASE("virtio-blk reads back what it wrote, with both split across several segments") {
    TempDir dir;
    const std::string path = dir.file("disk.img");
    fx::make_image(path, kDiskBytes);
    BlkRig rig(disk_options(path));
    rig.up();
    const auto a = fx::pattern(512, 1), b = fx::pattern(4096, 2), c = fx::pattern(1024, 3);
    std::vector<uint8_t> all(a);
    all.insert(all.end(), b.begin(), b.end());
    all.insert(all.end(), c.begin(), c.end());

    const PostedRequest w = rig.post_write(7, {a, b, c});
    REQUIRE(rig.complete());
    CHECK(rig.status(w) == request_status::kOk);
    CHECK(rig.used_of(w.head)->len == 1);  // only the status byte was written
    CHECK(fx::read_file_range(path, 7 * 512, all.size()) == all);

    const PostedRequest r = rig.post_read(7, {1536, 2048, 2048});
    REQUIRE(rig.complete());
    CHECK(rig.status(r) == request_status::kOk);
    CHECK(rig.used_of(r.head)->len == all.size() + 1);
    CHECK(rig.data(r) == all);
    CHECK(rig.driver.take_interrupts() >= 1);

    const BlockCounters n = rig.device.counters();
    CHECK(n.reads == 1);
    CHECK(n.writes == 1);
    CHECK(n.bytes_read == all.size());
    CHECK(n.bytes_written == all.size());
    CHECK(n.io_errors == 0);
}

TEST_CASE("virtio-blk takes the header, data and status in any descriptor layout") {
    TempDir dir;
    const std::string path = dir.file("disk.img");
    fx::make_image(path, kDiskBytes);
    BlkRig rig(disk_options(path));
    rig.up();
    // Write: header split 4 + 12, header's tail and the data in one descriptor.
    const auto data = fx::pattern(1024, 5);
    const auto h = fx::blk_header(request_type::kOut, 3);
    std::vector<uint8_t> tail(h.begin() + 4, h.end());
    tail.insert(tail.end(), data.begin(), data.end());
    const auto w = rig.driver.post(0, {test::TestBuffer::in({h.begin(), h.begin() + 4}), test::TestBuffer::in(tail),
                                       test::TestBuffer::out(1)});
    REQUIRE(rig.complete());
    CHECK(rig.driver.read_guest(w.writable_gpas[0], 1)[0] == request_status::kOk);
    // Read: data and status in one writable descriptor of 1025 bytes.
    const auto r = rig.driver.post(0, {test::TestBuffer::in(fx::blk_header(request_type::kIn, 3)),
                                       test::TestBuffer::out(1025)});
    REQUIRE(rig.complete());
    const auto got = rig.driver.read_guest(r.writable_gpas[0], 1025);
    CHECK(got[1024] == request_status::kOk);
    CHECK(std::vector<uint8_t>(got.begin(), got.begin() + 1024) == data);
    CHECK(rig.used_of(r.head)->len == 1025);
}

TEST_CASE("virtio-blk: a flush after a write is exactly one fdatasync of the backing file") {
    TempDir dir;
    const std::string path = dir.file("disk.img");
    fx::make_image(path, kDiskBytes);
    BlkRig rig(disk_options(path));
    rig.up();
    const PostedRequest w = rig.post_write(0, {fx::pattern(4096, 9)});
    REQUIRE(rig.complete());
    CHECK(rig.status(w) == request_status::kOk);
    CHECK(rig.device.flush_count() == 0);  // a write alone syncs nothing
    const PostedRequest f = rig.post(request_type::kFlush, 0, {}, {});
    REQUIRE(rig.complete());
    CHECK(rig.status(f) == request_status::kOk);
    CHECK(rig.used_of(f.head)->len == 1);
    CHECK(rig.device.flush_count() == 1);
    CHECK(rig.device.counters().flushes == 1);
}

TEST_CASE("virtio-blk GET_ID returns the serial, NUL-padded to 20 bytes") {
    TempDir dir;
    fx::make_image(dir.file("disk.img"), kDiskBytes);
    SECTION("short serial") {
        BlkRig rig(disk_options(dir.file("disk.img"), false, "nanovm-scratch"));
        rig.up();
        const PostedRequest r = rig.post(request_type::kGetId, 0, {}, {20});
        REQUIRE(rig.complete());
        CHECK(rig.status(r) == request_status::kOk);
        CHECK(rig.used_of(r.head)->len == 21);
        std::vector<uint8_t> want(20, 0);
        std::memcpy(want.data(), "nanovm-scratch", 14);
        CHECK(rig.data(r) == want);
        CHECK(rig.device.counters().get_ids == 1);
    }
    SECTION("20-byte serial has no NUL") {
        BlkRig rig(disk_options(dir.file("disk.img"), false, "ABCDEFGHIJKLMNOPQRST"));
        rig.up();
        const PostedRequest r = rig.post(request_type::kGetId, 0, {}, {20});
        REQUIRE(rig.complete());
        const auto got = rig.data(r);
        CHECK(std::string(got.begin(), got.end()) == "ABCDEFGHIJKLMNOPQRST");
    }
    SECTION("a serial longer than 20 bytes is refused") {
        CHECK_THROWS_AS(BlockDevice(disk_options(dir.file("disk.img"), false, "123456789012345678901")), Error);
    }
}

TEST_CASE("virtio-blk DISCARD punches a hole in the backing file") {
    TempDir dir;
    const std::string path = dir.file("disk.img");
    fx::make_image(path, kDiskBytes);
    fill_file(path, 1 * MiB, 2 * MiB);
    const uint64_t before = fx::allocated_blocks(path);
    REQUIRE(before >= 4096);
    BlkRig rig(disk_options(path));
    rig.up();
    const PostedRequest d = rig.post(request_type::kDiscard, 0,
                                     {fx::blk_segments({{2048, 2048, 0}, {4096, 2048, 0}})}, {});
    REQUIRE(rig.complete());
    CHECK(rig.status(d) == request_status::kOk);
    CHECK(rig.used_of(d.head)->len == 1);
    const uint64_t after = fx::allocated_blocks(path);
    INFO("st_blocks before " << before << ", after " << after);
    CHECK(after + 4000 <= before);
    CHECK(rig.device.counters().discards == 1);

    SECTION("the unmap flag on a DISCARD is UNSUPP (virtio 1.2 §5.2.6.2)") {
        const PostedRequest u = rig.post(request_type::kDiscard, 0, {fx::blk_segments({{0, 8, 1}})}, {});
        REQUIRE(rig.complete());
        CHECK(rig.status(u) == request_status::kUnsupp);
    }
    SECTION("more segments than max_discard_seg is IOERR") {
        std::vector<DiscardWriteZeroesSegment> many(BlockDevice::kMaxDiscardSeg + 1, {0, 8, 0});
        const PostedRequest m = rig.post(request_type::kDiscard, 0, {fx::blk_segments(many)}, {});
        REQUIRE(rig.complete());
        CHECK(rig.status(m) == request_status::kIoErr);
    }
    SECTION("a segment beyond the capacity is IOERR") {
        const PostedRequest m =
            rig.post(request_type::kDiscard, 0, {fx::blk_segments({{kDiskBytes / 512 - 4, 8, 0}})}, {});
        REQUIRE(rig.complete());
        CHECK(rig.status(m) == request_status::kIoErr);
    }
}

TEST_CASE("virtio-blk WRITE_ZEROES reads back zeros, with and without unmap") {
    TempDir dir;
    const std::string path = dir.file("disk.img");
    fx::make_image(path, kDiskBytes);
    BlkRig rig(disk_options(path));
    rig.up();
    const auto data = fx::pattern(64 * 1024, 4);
    const PostedRequest w = rig.post_write(0, {data});
    REQUIRE(rig.complete());
    REQUIRE(rig.status(w) == request_status::kOk);
    // Sectors 8..23 without unmap, 64..127 with unmap; the rest keeps the data.
    const PostedRequest z = rig.post(request_type::kWriteZeroes, 0,
                                     {fx::blk_segments({{8, 16, 0}, {64, 64, kSegmentFlagUnmap}})}, {});
    REQUIRE(rig.complete());
    CHECK(rig.status(z) == request_status::kOk);
    const PostedRequest r = rig.post_read(0, {64 * 1024});
    REQUIRE(rig.complete());
    const auto got = rig.data(r);
    std::vector<uint8_t> want(data);
    std::fill(want.begin() + 8 * 512, want.begin() + 24 * 512, 0);
    std::fill(want.begin() + 64 * 512, want.begin() + 128 * 512, 0);
    CHECK(got == want);
    CHECK(rig.device.counters().write_zeroes == 1);
}

TEST_CASE("virtio-blk: DISCARD and WRITE_ZEROES are UNSUPP when not negotiated") {
    TempDir dir;
    fx::make_image(dir.file("disk.img"), kDiskBytes);
    BlkRig rig(disk_options(dir.file("disk.img")));
    rig.up(rig.driver.device_features() & ~(blk::feature::kDiscard | blk::feature::kWriteZeroes));
    const PostedRequest d = rig.post(request_type::kDiscard, 0, {fx::blk_segments({{0, 8, 0}})}, {});
    const PostedRequest z = rig.post(request_type::kWriteZeroes, 0, {fx::blk_segments({{0, 8, 0}})}, {});
    REQUIRE(rig.complete(2));
    CHECK(rig.status(d) == request_status::kUnsupp);
    CHECK(rig.status(z) == request_status::kUnsupp);
    CHECK(rig.device.counters().unsupported == 2);
}

TEST_CASE("virtio-blk read-only disk: RO offered, writes are IOERR and change nothing") {
    TempDir dir;
    const std::string path = dir.file("ro.img");
    fx::make_image(path, kDiskBytes);
    fill_file(path, 0, 4096);
    const auto original = fx::read_file_range(path, 0, 4096);
    ::chmod(path.c_str(), 0400);  // a read-only disk needs only read access
    BlkRig rig(disk_options(path, true));
    const uint64_t f = rig.driver.device_features();
    CHECK((f & blk::feature::kRo) != 0);
    CHECK((f & (blk::feature::kFlush | blk::feature::kDiscard | blk::feature::kWriteZeroes)) == 0);
    rig.up();
    const PostedRequest w = rig.post_write(0, {fx::pattern(4096, 77)});
    const PostedRequest z = rig.post(request_type::kWriteZeroes, 0, {fx::blk_segments({{0, 8, 0}})}, {});
    const PostedRequest fl = rig.post(request_type::kFlush, 0, {}, {});
    const PostedRequest r = rig.post_read(0, {4096});
    REQUIRE(rig.complete(4));
    CHECK(rig.status(w) == request_status::kIoErr);
    CHECK(rig.used_of(w.head)->len == 1);
    CHECK(rig.status(z) == request_status::kUnsupp);  // not negotiated: not offered on a read-only disk
    CHECK(rig.status(fl) == request_status::kOk);     // nothing to flush
    CHECK(rig.device.flush_count() == 0);
    CHECK(rig.status(r) == request_status::kOk);
    CHECK(rig.data(r) == original);
    CHECK(fx::read_file_range(path, 0, 4096) == original);
}

TEST_CASE("virtio-blk answers IOERR for requests beyond the capacity, overflowing sectors and odd lengths") {
    TempDir dir;
    fx::make_image(dir.file("disk.img"), kDiskBytes);
    BlkRig rig(disk_options(dir.file("disk.img")));
    rig.up();
    const uint64_t last = kDiskBytes / 512 - 1;
    const PostedRequest ok = rig.post_read(last, {512});                   // the last sector: fine
    const PostedRequest past = rig.post_read(last, {1024});                // one sector too far
    const PostedRequest wrap = rig.post_read(~0ull - 1, {1024});           // sector + count overflows
    const PostedRequest huge = rig.post_write(~0ull >> 9, {fx::pattern(512, 1)});  // offset overflows
    const PostedRequest odd = rig.post_read(0, {700});                     // not a multiple of 512
    const PostedRequest odd_w = rig.post_write(0, {fx::pattern(100, 1)});
    const PostedRequest empty = rig.post_read(last + 1, {});               // no sectors, at the end: fine
    REQUIRE(rig.complete(7));
    CHECK(rig.status(ok) == request_status::kOk);
    CHECK(rig.status(empty) == request_status::kOk);
    CHECK(rig.used_of(empty.head)->len == 1);
    for (const PostedRequest* r : {&past, &wrap, &huge, &odd, &odd_w}) {
        CHECK(rig.status(*r) == request_status::kIoErr);
        CHECK(rig.used_of(r->head)->len == 1);
    }
    CHECK(rig.device.counters().io_errors == 5);
    CHECK((rig.status_register() & status::kDeviceNeedsReset) == 0);  // request errors, not queue errors
}

TEST_CASE("virtio-blk answers malformed requests that still have a status byte") {
    TempDir dir;
    fx::make_image(dir.file("disk.img"), kDiskBytes);
    BlkRig rig(disk_options(dir.file("disk.img")));
    rig.up();
    // Header only 8 bytes.
    const auto short_header = rig.driver.post(0, {test::TestBuffer::in({0, 0, 0, 0, 0, 0, 0, 0}), test::TestBuffer::out(1)});
    // A read with readable data after the header.
    const PostedRequest wrong_dir = rig.post(request_type::kIn, 0, {fx::pattern(512, 1)}, {512});
    // A write with writable data before the status.
    const PostedRequest wrong_dir_w = rig.post(request_type::kOut, 0, {fx::pattern(512, 1)}, {512});
    // An unknown type and GET_LIFETIME.
    const PostedRequest unknown = rig.post(0x1234, 0, {}, {});
    const PostedRequest lifetime = rig.post(request_type::kGetLifetime, 0, {}, {8});
    REQUIRE(rig.complete(5));
    CHECK(rig.driver.read_guest(short_header.writable_gpas[0], 1)[0] == request_status::kIoErr);
    CHECK(rig.status(wrong_dir) == request_status::kIoErr);
    CHECK(rig.status(wrong_dir_w) == request_status::kIoErr);
    CHECK(rig.status(unknown) == request_status::kUnsupp);
    CHECK(rig.status(lifetime) == request_status::kUnsupp);
    CHECK((rig.status_register() & status::kDeviceNeedsReset) == 0);
}

TEST_CASE("virtio-blk: a chain without a status byte puts the device in NEEDS_RESET; another device keeps working") {
    TempDir dir;
    fx::make_image(dir.file("a.img"), kDiskBytes);
    fx::make_image(dir.file("b.img"), kDiskBytes);
    GuestMemory memory = GuestMemory::create(64 * MiB);
    EventLoop loop;
    BlkRig bad(disk_options(dir.file("a.img")), 0, &loop, &memory, 0x10000, 0x100000);
    BlkRig good(disk_options(dir.file("b.img")), 0, &loop, &memory, 0x40000, 0x2000000);
    bad.up();
    good.up();
    // Only a readable header: no writable byte, so no status byte to answer in.
    bad.driver.post(0, {test::TestBuffer::in(fx::blk_header(request_type::kFlush, 0))});
    bad.driver.kick(0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!(bad.status_register() & status::kDeviceNeedsReset) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK((bad.status_register() & status::kDeviceNeedsReset) != 0);

    const PostedRequest w = good.post_write(1, {fx::pattern(512, 3)});
    REQUIRE(good.complete());
    const PostedRequest r = good.post_read(1, {512});
    REQUIRE(good.complete());
    CHECK(good.status(w) == request_status::kOk);
    CHECK(good.data(r) == fx::pattern(512, 3));
    CHECK((good.status_register() & status::kDeviceNeedsReset) == 0);

    // The broken device comes back after the driver resets it.
    bad.up();
    const PostedRequest again = bad.post_read(0, {512});
    REQUIRE(bad.complete());
    CHECK(bad.status(again) == request_status::kOk);
}

TEST_CASE("virtio-blk: 64 concurrent requests all complete with the right data") {
    TempDir dir;
    const std::string path = dir.file("disk.img");
    fx::make_image(path, kDiskBytes);
    BlkRig rig(disk_options(path));
    rig.up();
    std::vector<PostedRequest> writes;
    for (uint32_t i = 0; i < 64; ++i) writes.push_back(rig.post_write(i * 16, {fx::pattern(8192, i)}));
    REQUIRE(rig.complete(64));
    for (const auto& w : writes) CHECK(rig.status(w) == request_status::kOk);
    std::vector<PostedRequest> reads;
    for (uint32_t i = 0; i < 64; ++i) reads.push_back(rig.post_read(i * 16, {4096, 4096}));
    REQUIRE(rig.complete(64));
    std::vector<bool> seen(256, false);
    for (uint16_t i = 64; i < 128; ++i) {  // the reads' heads, each returned once
        const UsedElement e = rig.driver.queue(0).used(i);
        CHECK_FALSE(seen.at(e.id));
        seen.at(e.id) = true;
    }
    for (uint32_t i = 0; i < 64; ++i) {
        CHECK(rig.status(reads[i]) == request_status::kOk);
        CHECK(rig.data(reads[i]) == fx::pattern(8192, i));
    }
    CHECK(rig.device.in_flight() == 0);
    CHECK(rig.device.counters().writes == 64);
    CHECK(rig.device.counters().reads == 64);
}

TEST_CASE("virtio-blk reset with requests in flight waits for their I/O and touches no guest memory after") {
    TempDir dir;
    const std::string path = dir.file("disk.img");
    constexpr uint32_t kRequests = 64;
    constexpr uint32_t kChunk = 256 * KiB;
    fx::make_image(path, kRequests * uint64_t{kChunk});
    fill_file(path, 0, kRequests * kChunk);
    {  // evict the file from the page cache so that the reads really go to the disk
        Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
    }
    BlkRig rig(disk_options(path), 128 * MiB);
    rig.up();
    std::vector<PostedRequest> reads;
    for (uint32_t i = 0; i < kRequests; ++i) reads.push_back(rig.post_read(uint64_t{i} * kChunk / 512, {kChunk}));
    rig.driver.kick(0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (rig.device.in_flight() == 0 && rig.driver.queue(0).used_idx() == 0 &&
           std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
    rig.driver.set_reg(mmio::kStatus, 0);  // reset: returns once the device has dropped everything
    CHECK(rig.device.in_flight() == 0);
    const uint16_t used_at_reset = rig.driver.queue(0).used_idx();
    const uint64_t dropped = rig.device.counters().dropped_at_reset;
    INFO("completed before the reset: " << used_at_reset << ", dropped at reset: " << dropped);
    CHECK(used_at_reset + dropped == kRequests);
    if (dropped == 0) WARN("no request was in flight at the reset this time");
    // Nothing writes into the buffers after reset returned.
    for (const auto& r : reads) std::memset(rig.memory.slice(Gpa(r.data_gpas[0]), kChunk).data(), 0xa5, kChunk);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (const auto& r : reads) {
        const auto s = rig.memory.slice(Gpa(r.data_gpas[0]), kChunk);
        CHECK(std::all_of(s.begin(), s.end(), [](uint8_t b) { return b == 0xa5; }));
    }
    CHECK(rig.driver.queue(0).used_idx() == used_at_reset);
    // And the device works after the driver brings it up again.
    rig.up();
    const PostedRequest r = rig.post_read(0, {4096});
    REQUIRE(rig.complete());
    CHECK(rig.status(r) == request_status::kOk);
    CHECK(rig.data(r) == fx::read_file_range(path, 0, 4096));
}

TEST_CASE("virtio-blk: I/O completing after NEEDS_RESET is dropped, and the failed queue cannot be unset") {
    // Issue 15: writes in flight, then a malformed chain fails the device; the driver
    // writes QueueReady=0 and QueueNum=0; the writes then complete. That divided by
    // zero in push_used (SIGFPE, the VMM died). Now the registers are refused while
    // the device is activated and the completions are dropped (counted), not pushed.
    TempDir dir;
    const std::string path = dir.file("disk.img");
    fx::make_image(path, kDiskBytes);
    BlkRig rig(disk_options(path));
    rig.up(rig.driver.device_features() & ~blk::feature::kFlush);  // write-through (RWF_DSYNC)
    constexpr uint32_t kWrites = 4;
    std::vector<PostedRequest> writes;
    for (uint32_t i = 0; i < kWrites; ++i) writes.push_back(rig.post_write(i * 128, {fx::pattern(64 * KiB, i)}));
    for (const auto& w : writes) rig.memory.write(Gpa(w.status_gpa), uint8_t{0xee});
    // Only a readable header: no status byte to answer in, so the device fails.
    rig.driver.post(0, {test::TestBuffer::in(fx::blk_header(request_type::kFlush, 0))});

    // The kick is handled in one loop turn (writes submitted, device failed); the task
    // posted meanwhile runs right after that turn, before any completion is reaped.
    // Then the completions are reaped by the loop, or by a snapshot's drain() first.
    bool drain = false;
    SECTION("completions reaped by the loop") {}
    SECTION("completions reaped by drain()") { drain = true; }
    std::atomic<bool> holding{false}, release{false};
    rig.loop.run_sync([&] {
        rig.driver.kick(0);
        rig.loop.post([&] {
            holding = true;
            while (!release) std::this_thread::sleep_for(std::chrono::microseconds(100));
            if (drain) rig.device.drain();
        });
    });
    REQUIRE(test::eventually([&] { return holding.load(); }));
    CHECK((rig.status_register() & status::kDeviceNeedsReset) != 0);
    CHECK(rig.device.in_flight() == kWrites);
    rig.driver.set_reg(mmio::kQueueSel, 0);
    rig.driver.set_reg(mmio::kQueueReady, 0);
    rig.driver.set_reg(mmio::kQueueNum, 0);
    CHECK(rig.driver.reg(mmio::kQueueReady) == 1);
    CHECK(rig.driver.reg(mmio::kQueueNum) == BlockDevice::kQueueSize);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the writes complete meanwhile
    release = true;
    REQUIRE(test::eventually([&] { return rig.device.in_flight() == 0; }));
    test::settle(rig.loop);
    CHECK(rig.driver.queue(0).used_idx() == 0);
    for (const auto& w : writes) CHECK(rig.status(w) == 0xee);
    CHECK(rig.device.counters().dropped_at_reset == kWrites);
    CHECK(rig.device.counters().writes == 0);

    // The driver resets the device and it works again.
    rig.driver.set_reg(mmio::kStatus, 0);
    rig.memory.write_bytes(Gpa(0x10000), std::vector<uint8_t>(0x10000, 0));
    rig.up();
    const PostedRequest r = rig.post_read(0, {4096});
    REQUIRE(rig.complete());
    CHECK(rig.status(r) == request_status::kOk);
}

TEST_CASE("virtio-blk: a read past the end of a file that shrank is IOERR with used length 1") {
    TempDir dir;
    const std::string path = dir.file("disk.img");
    fx::make_image(path, kDiskBytes);
    BlkRig rig(disk_options(path));
    rig.up();
    REQUIRE(::truncate(path.c_str(), kDiskBytes - 4096 - 512) == 0);  // behind the device's back
    const PostedRequest spans = rig.post_read(kDiskBytes / 512 - 16, {8192});  // short read, then EOF
    const PostedRequest beyond = rig.post_read(kDiskBytes / 512 - 2, {1024});  // EOF at once
    REQUIRE(rig.complete(2));
    CHECK(rig.status(spans) == request_status::kIoErr);
    CHECK(rig.used_of(spans.head)->len == 1);
    CHECK(rig.status(beyond) == request_status::kIoErr);
    CHECK(rig.used_of(beyond.head)->len == 1);
}

TEST_CASE("virtio-blk without FLUSH negotiated writes through (RWF_DSYNC) and still works") {
    TempDir dir;
    const std::string path = dir.file("disk.img");
    fx::make_image(path, kDiskBytes);
    BlkRig rig(disk_options(path));
    rig.up(rig.driver.device_features() & ~blk::feature::kFlush);
    const PostedRequest w = rig.post_write(0, {fx::pattern(4096, 8)});
    const PostedRequest z = rig.post(request_type::kWriteZeroes, 0, {fx::blk_segments({{16, 8, 0}})}, {});
    REQUIRE(rig.complete(2));
    CHECK(rig.status(w) == request_status::kOk);
    CHECK(rig.status(z) == request_status::kOk);
    CHECK(fx::read_file_range(path, 0, 4096) == fx::pattern(4096, 8));
}

TEST_CASE("virtio-blk drain() completes everything in flight; state saves and loads") {
    TempDir dir;
    const std::string path = dir.file("disk.img");
    fx::make_image(path, kDiskBytes);
    BlkRig rig(disk_options(path));
    rig.up();
    for (uint32_t i = 0; i < 32; ++i) rig.post_write(i * 8, {fx::pattern(4096, i)});
    rig.driver.kick(0);
    rig.loop.run_sync([&] { rig.device.drain(); });
    CHECK(rig.device.in_flight() == 0);
    CHECK(rig.driver.queue(0).used_idx() == 32);
    const BlockState state = rig.device.save_state();
    CHECK(state.capacity_sectors == kDiskBytes / 512);
    CHECK(state.counters.writes == 32);

    BlockDevice other(disk_options(path));
    other.load_state(state);
    CHECK(other.counters().writes == 32);
    fx::make_image(dir.file("small.img"), kDiskBytes / 2);
    BlockDevice small(disk_options(dir.file("small.img")));
    CHECK_THROWS_AS(small.load_state(state), Error);
}

TEST_CASE("create_sparse_disk makes a 16 GiB file that allocates nothing until written") {
    TempDir dir;
    const std::string path = dir.file("scratch.img");
    REQUIRE(create_sparse_disk(path));
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK(static_cast<uint64_t>(st.st_size) == 16 * GiB);
    CHECK(st.st_blocks <= 8);
    CHECK((st.st_mode & 0777) == 0600);
    CHECK_FALSE(create_sparse_disk(path));  // already there: kept as is

    BlkRig rig(disk_options(path));
    CHECK(rig.device.capacity_sectors() == 16 * GiB / 512);
    rig.up();
    const PostedRequest w = rig.post_write(12345678, {fx::pattern(4096, 1)});
    REQUIRE(rig.complete());
    CHECK(rig.status(w) == request_status::kOk);
    REQUIRE(::stat(path.c_str(), &st) == 0);
    INFO("st_blocks after one 4 KiB write: " << st.st_blocks);
    CHECK(st.st_blocks <= 64);  // the host allocates what the guest wrote, not 16 GiB
    CHECK(static_cast<uint64_t>(st.st_size) == 16 * GiB);

    SECTION("a file of another size is not resized") {
        fx::make_image(dir.file("other.img"), 1 * GiB);
        CHECK_THROWS_AS(create_sparse_disk(dir.file("other.img")), Error);
    }
    SECTION("an empty file left by a crash is sized") {
        fx::make_image(dir.file("empty.img"), 0);
        CHECK(create_sparse_disk(dir.file("empty.img"), 1 * GiB));
        CHECK(::stat(dir.file("empty.img").c_str(), &st) == 0);
        CHECK(static_cast<uint64_t>(st.st_size) == 1 * GiB);
    }
    SECTION("a directory or a FIFO is never clobbered") {
        REQUIRE(::mkdir(dir.file("d").c_str(), 0700) == 0);
        CHECK_THROWS_AS(create_sparse_disk(dir.file("d")), Error);
        REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
        CHECK_THROWS_AS(create_sparse_disk(dir.file("fifo")), Error);
        CHECK_THROWS_AS(create_sparse_disk("/dev/null"), Error);
    }
    SECTION("sizes that are not whole sectors are refused") {
        CHECK_THROWS_AS(create_sparse_disk(dir.file("x.img"), 1000), Error);
        CHECK_THROWS_AS(create_sparse_disk(dir.file("x.img"), 0), Error);
    }
}

TEST_CASE("BlockDevice refuses paths that are not disks, naming them") {
    TempDir dir;
    CHECK_THROWS_WITH(BlockDevice(disk_options(dir.file("missing.img"))), Catch::Contains("missing.img"));
    REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
    // O_RDWR on a FIFO does not block; the device then refuses it.
    CHECK_THROWS_WITH(BlockDevice(disk_options(dir.file("fifo"))), Catch::Contains("neither a regular file"));
}
