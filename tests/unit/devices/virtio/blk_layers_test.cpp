// virtio-blk over copy-on-write disk layers, through the real BlockDevice on real
// files (blk_rig.hpp): freeze of a raw disk and of a layer, reads that mix layers
// and zeros, discard/write-zeroes hiding a parent, reopening a chain from its top
// (as a restore does), the 4 KiB alignment rule, and the dirty tracker.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "devices/virtio/blk/layered_disk.hpp"
#include "tests/unit/devices/virtio/blk_rig.hpp"
#include "vmm/dirty_tracker.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using namespace nanovm::virtio::blk;
namespace fx = nanovm::test::blk_fixture;
using fx::BlkRig;
using fx::PostedRequest;
using nanovm::test::TempDir;

namespace {

constexpr uint64_t kBlock = 4096;
constexpr uint64_t kDisk = 128 * kBlock;  // 512 KiB
constexpr uint64_t kSectorsPerBlock = kBlock / 512;

BlockOptions layer_options(const std::string& path, bool read_only = false, uint32_t block_size = 4096,
                           DiskFormat format = DiskFormat::raw) {
    BlockOptions o{path, read_only, ""};
    o.block_size = block_size;
    o.format = format;
    return o;
}
BlockOptions chain_options(const std::string& top, bool read_only = false) {
    return layer_options(top, read_only, 4096, DiskFormat::layer);
}

std::string freeze(BlkRig& rig, const std::string& new_top) {
    std::string frozen;
    rig.loop.run_sync([&] { frozen = rig.device.freeze(new_top); });
    return frozen;
}

uint8_t write_blocks(BlkRig& rig, uint64_t block, const std::vector<uint8_t>& data) {
    // Split unevenly across two descriptors: only the total must be whole blocks.
    const size_t cut = std::min<size_t>(data.size(), 1000);
    const PostedRequest w = rig.post_write(block * kSectorsPerBlock, {{data.begin(), data.begin() + cut},
                                                                      {data.begin() + cut, data.end()}});
    REQUIRE(rig.complete());
    return rig.status(w);
}

std::vector<uint8_t> read_all(BlkRig& rig) {
    // Uneven segments crossing run boundaries.
    const PostedRequest r = rig.post_read(0, {5 * kBlock + 512, 10 * kBlock - 512, kDisk - 15 * kBlock});
    REQUIRE(rig.complete());
    REQUIRE(rig.status(r) == request_status::kOk);
    REQUIRE(rig.used_of(r.head)->len == kDisk + 1);
    return rig.data(r);
}

uint8_t zero_blocks(BlkRig& rig, uint32_t type, uint64_t block, uint32_t blocks, uint32_t flags = 0) {
    const PostedRequest z = rig.post(
        type, 0, {fx::blk_segments({{block * kSectorsPerBlock, static_cast<uint32_t>(blocks * kSectorsPerBlock), flags}})},
        {});
    REQUIRE(rig.complete());
    return rig.status(z);
}

void patch(std::vector<uint8_t>& disk, uint64_t block, const std::vector<uint8_t>& data) {
    std::copy(data.begin(), data.end(), disk.begin() + static_cast<ptrdiff_t>(block * kBlock));
}

}  // namespace

TEST_CASE("virtio-blk layers: freezing keeps what the guest wrote, later writes go to the new top", "[blk][layers]") {
    TempDir dir;
    const std::string raw = dir.file("disk.img"), l1 = dir.file("disk.1.layer"), l2 = dir.file("disk.2.layer"),
                      l3 = dir.file("disk.3.layer"), restored = dir.file("restored.layer");
    fx::make_image(raw, kDisk);
    std::vector<uint8_t> want = fx::pattern(kDisk, 1);  // pattern A
    std::vector<uint8_t> at_third_freeze;
    {
        BlkRig rig(layer_options(raw));
        CHECK(rig.driver.reg(mmio::kConfig + offsetof(Config, blk_size)) == 4096);
        rig.up();
        REQUIRE(write_blocks(rig, 0, want) == request_status::kOk);
        CHECK(rig.device.layer_paths() == std::vector<std::string>{raw});
        CHECK_FALSE(rig.device.layered());

        CHECK(freeze(rig, l1) == raw);
        CHECK(rig.device.layered());
        CHECK(rig.device.layer_paths() == std::vector<std::string>{l1, raw});
        const auto b1 = fx::pattern(kBlock, 2), b2 = fx::pattern(3 * kBlock, 3);  // pattern B
        REQUIRE(write_blocks(rig, 3, b1) == request_status::kOk);
        REQUIRE(write_blocks(rig, 10, b2) == request_status::kOk);
        patch(want, 3, b1);
        patch(want, 10, b2);
        CHECK(read_all(rig) == want);
        CHECK(fx::read_file_range(raw, 0, kDisk) == fx::pattern(kDisk, 1));  // the frozen base is untouched

        CHECK(freeze(rig, l2) == l1);  // three deep
        CHECK(rig.device.layer_paths() == std::vector<std::string>{l2, l1, raw});
        const auto c = fx::pattern(kBlock, 4);
        REQUIRE(write_blocks(rig, 11, c) == request_status::kOk);  // over a block l1 holds
        patch(want, 11, c);
        // Zeroing blocks the parents hold: they must read as zeros now.
        CHECK(zero_blocks(rig, request_type::kDiscard, 20, 1) == request_status::kOk);  // raw's
        CHECK(zero_blocks(rig, request_type::kWriteZeroes, 3, 1) == request_status::kOk);  // l1's
        CHECK(zero_blocks(rig, request_type::kWriteZeroes, 40, 2, kSegmentFlagUnmap) == request_status::kOk);
        std::fill(want.begin() + 20 * kBlock, want.begin() + 21 * kBlock, 0);
        std::fill(want.begin() + 3 * kBlock, want.begin() + 4 * kBlock, 0);
        std::fill(want.begin() + 40 * kBlock, want.begin() + 42 * kBlock, 0);
        CHECK(read_all(rig) == want);
        const PostedRequest f = rig.post(request_type::kFlush, 0, {}, {});
        REQUIRE(rig.complete());
        CHECK(rig.status(f) == request_status::kOk);

        CHECK(freeze(rig, l3) == l2);
        LayeredDisk::sync_frozen(l2);
        at_third_freeze = want;
        const auto d = fx::pattern(2 * kBlock, 5);
        REQUIRE(write_blocks(rig, 0, d) == request_status::kOk);
        patch(want, 0, d);
        CHECK(read_all(rig) == want);
        CHECK(rig.device.counters().io_errors == 0);
    }

    SECTION("a restore: a new top over the frozen layer reads the disk as it was at the freeze") {
        LayeredDisk::create_top(restored, l2);
        BlkRig rig(chain_options(restored));
        CHECK(rig.device.capacity_sectors() == kDisk / 512);
        CHECK(rig.device.layer_paths() == std::vector<std::string>{restored, l2, l1, raw});
        rig.up();
        CHECK(read_all(rig) == at_third_freeze);
    }
    SECTION("the top reopened after the device closed has everything the guest wrote") {
        BlkRig rig(chain_options(l3));
        rig.up();
        CHECK(read_all(rig) == want);
    }
    SECTION("a frozen layer is not reopened writable") {
        CHECK_THROWS_WITH(BlockDevice(chain_options(l2)), Catch::Contains("frozen"));
        BlkRig rig(chain_options(l2, true));  // read-only is fine
        rig.up();
        CHECK(read_all(rig) == at_third_freeze);
    }
}

TEST_CASE("virtio-blk layers: a request not aligned to 4096 is IOERR and the device keeps working", "[blk][layers]") {
    TempDir dir;
    const std::string raw = dir.file("disk.img");
    fx::make_image(raw, kDisk);
    BlkRig rig(layer_options(raw));
    rig.up();
    const bool frozen = GENERATE(false, true);  // raw with block size 4096: may become layered
    if (frozen) freeze(rig, dir.file("top.layer"));
    REQUIRE(rig.device.layered() == frozen);
    const PostedRequest off = rig.post_read(1, {kBlock});                       // offset 512
    const PostedRequest len = rig.post_read(0, {512});                          // length 512
    const PostedRequest wr = rig.post_write(8, {fx::pattern(2048, 1)});         // 2 KiB write
    const PostedRequest dis = rig.post(request_type::kDiscard, 0, {fx::blk_segments({{4, 8, 0}})}, {});
    const PostedRequest wz = rig.post(request_type::kWriteZeroes, 0, {fx::blk_segments({{8, 4, 0}})}, {});
    REQUIRE(rig.complete(5));
    for (const PostedRequest* r : {&off, &len, &wr, &dis, &wz}) {
        CHECK(rig.status(*r) == request_status::kIoErr);
        CHECK(rig.used_of(r->head)->len == 1);
    }
    CHECK((rig.status_register() & status::kDeviceNeedsReset) == 0);
    REQUIRE(write_blocks(rig, 1, fx::pattern(kBlock, 7)) == request_status::kOk);
    const PostedRequest r = rig.post_read(kSectorsPerBlock, {kBlock});
    REQUIRE(rig.complete());
    CHECK(rig.status(r) == request_status::kOk);
    CHECK(rig.data(r) == fx::pattern(kBlock, 7));
    CHECK(rig.device.counters().io_errors == 5);
}

TEST_CASE("virtio-blk layers: freezing and layer files need block size 4096 and a writable disk", "[blk][layers]") {
    TempDir dir;
    const std::string raw = dir.file("disk.img"), top = dir.file("top.layer");
    fx::make_image(raw, kDisk);
    CHECK_THROWS_WITH(BlockDevice(layer_options(raw, false, 1000)), Catch::Contains("block size 1000"));
    {
        BlkRig rig(layer_options(raw, false, 512));
        CHECK_THROWS_WITH(freeze(rig, top), Catch::Contains("4096"));
        CHECK_FALSE(std::filesystem::exists(top));
        CHECK(rig.device.layer_paths() == std::vector<std::string>{raw});
    }
    {
        BlkRig rig(layer_options(raw, true));
        CHECK_THROWS_WITH(freeze(rig, top), Catch::Contains("read-only"));
    }
    {
        BlkRig rig(layer_options(raw));
        fx::make_image(dir.file("taken"), 0);
        CHECK_THROWS_WITH(freeze(rig, dir.file("taken")), Catch::Contains("taken"));
        CHECK_FALSE(rig.device.layered());
        rig.up();
        REQUIRE(write_blocks(rig, 0, fx::pattern(kBlock, 1)) == request_status::kOk);  // still the raw disk
        CHECK(fx::read_file_range(raw, 0, kBlock) == fx::pattern(kBlock, 1));
        CHECK(freeze(rig, top) == raw);
    }
    CHECK_THROWS_WITH(BlockDevice(layer_options(top, false, 512, DiskFormat::layer)),
                      Catch::Contains("needs block size 4096"));
    CHECK_THROWS_WITH(BlockDevice(chain_options(raw)), Catch::Contains("disk.img") && Catch::Contains("magic"));
    fx::make_image(dir.file("odd.img"), kDisk + 512);
    BlkRig odd(layer_options(dir.file("odd.img")));
    CHECK_THROWS_WITH(freeze(odd, dir.file("odd.layer")), Catch::Contains("odd.img"));
}

TEST_CASE("virtio-blk marks the guest pages its reads fill (file and zero runs) for the dirty tracker",
          "[blk][layers]") {
    TempDir dir;
    const std::string raw = dir.file("disk.img"), zero_base = dir.file("zero.layer");
    fx::make_image(raw, kDisk);
    LayerHeader h;
    create_layer_file(zero_base, kDisk, ParentRef{}, h);
    const std::string path = GENERATE_COPY(raw, zero_base);
    BlkRig rig(layer_options(path, false, 4096, path == raw ? DiskFormat::raw : DiskFormat::layer));
    DirtyTracker tracker({{Gpa(0), rig.memory.ram_bytes()}});
    rig.up();
    rig.memory.set_dirty_tracker(&tracker);
    const PostedRequest r = rig.post_read(0, {2 * kBlock});
    REQUIRE(rig.complete());
    CHECK(rig.status(r) == request_status::kOk);
    rig.memory.set_dirty_tracker(nullptr);
    INFO(path);
    CHECK(tracker.marked(0, r.data_gpas[0] / kBlock));
    CHECK(tracker.marked(0, (r.data_gpas[0] + 2 * kBlock - 1) / kBlock));
    CHECK(tracker.marked(0, r.status_gpa / kBlock));
}

TEST_CASE("virtio-blk layers: a guest cannot make its raw disk a layer chain that reads host files", "[blk][layers]") {
    TempDir dir;
    const std::string raw = dir.file("guest.img"), secret = dir.file("secret"), forged = dir.file("forged.layer");
    constexpr uint64_t kForgedDisk = 16 * kBlock;
    fx::make_image(secret, kForgedDisk);
    {
        Fd fd(::open(secret.c_str(), O_RDWR | O_CLOEXEC));
        const auto bytes = fx::pattern(kForgedDisk, 66);
        REQUIRE(::pwrite(fd.get(), bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
    }
    // A header with a valid CRC naming the host file as a raw parent, on a raw disk of
    // exactly the size that header needs: were the disk sniffed, it would pass.
    LayerHeader h;
    create_layer_file(forged, kForgedDisk, ParentRef{ParentKind::raw, secret, {}, kForgedDisk}, h);
    const auto header = fx::read_file_range(forged, 0, kBlock);
    fx::make_image(raw, h.file_bytes());
    {
        BlkRig rig(layer_options(raw));
        rig.up();
        REQUIRE(write_blocks(rig, 0, header) == request_status::kOk);
    }
    CHECK(LayeredDisk::open(raw, false).chain_paths().back() == secret);  // the threat is real

    BlkRig rig(layer_options(raw));
    CHECK_FALSE(rig.device.layered());
    CHECK(rig.device.capacity_sectors() == h.file_bytes() / 512);
    rig.up();
    const auto block0 = [&] {
        const PostedRequest r = rig.post_read(0, {kBlock});
        REQUIRE(rig.complete());
        REQUIRE(rig.status(r) == request_status::kOk);
        return rig.data(r);
    };
    CHECK(block0() == header);
    CHECK(freeze(rig, dir.file("top.layer")) == raw);
    CHECK(rig.device.layer_paths() == std::vector<std::string>{dir.file("top.layer"), raw});
    CHECK(block0() == header);
}
