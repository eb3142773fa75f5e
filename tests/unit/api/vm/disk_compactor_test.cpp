// The VMM's background disk compaction (api/vm/disk_compactor) over a real BlockDevice
// on real files (blk_rig.hpp), its loop standing in for the device thread: a disk is
// compacted once 4 frozen layers of its directory lie below its top, the guest reads
// the same disk afterwards, and only the newest snapshot, once placed, starts one.
#include <catch2/catch.hpp>
#include <filesystem>

#include <fmt/format.h>

#include "api/vm/disk_compactor.hpp"
#include "devices/virtio/blk/block_device.hpp"
#include "tests/unit/devices/virtio/blk_rig.hpp"

using namespace nanovm;
using namespace nanovm::virtio;
using namespace nanovm::virtio::blk;
namespace fx = nanovm::test::blk_fixture;
using fx::BlkRig;
using fx::PostedRequest;
using nanovm::test::TempDir;

namespace {

constexpr uint64_t kBlock = 4096;
constexpr uint64_t kDisk = 128 * kBlock;
constexpr uint64_t kSectorsPerBlock = kBlock / 512;

BlockOptions writable_4k(const std::string& path) {
    BlockOptions o{path, false, ""};
    o.block_size = 4096;
    return o;
}

void write_blocks(BlkRig& rig, uint64_t block, const std::vector<uint8_t>& data) {
    const PostedRequest w = rig.post_write(block * kSectorsPerBlock, {data});
    REQUIRE(rig.complete());
    REQUIRE(rig.status(w) == request_status::kOk);
}

std::vector<uint8_t> read_all(BlkRig& rig) {
    const PostedRequest r = rig.post_read(0, {5 * kBlock + 512, 10 * kBlock - 512, kDisk - 15 * kBlock});
    REQUIRE(rig.complete());
    REQUIRE(rig.status(r) == request_status::kOk);
    return rig.data(r);
}

struct Vm {
    TempDir dir;
    std::string raw = dir.file("vm-disk1.img");
    BlkRig rig{(fx::make_image(raw, kDisk), writable_4k(raw))};
    std::shared_ptr<DiskCompactor> compactor = std::make_shared<DiskCompactor>(
        std::vector<BlockDevice*>{&rig.device},
        [this](const std::function<void()>& work) { rig.loop.run_sync([&] { rig.device.drain(); work(); }); });
    std::vector<uint8_t> want = std::vector<uint8_t>(kDisk, 0);
    uint32_t snapshots = 0;

    Vm() { rig.up(); }
    ~Vm() { compactor->shutdown(); }
    std::string layer(uint32_t n) const { return dir.file(fmt::format("vm-disk1-{}.layer", n)); }
    // The guest writes, then a snapshot begins and freezes the disk; returns its
    // placement, not finished.
    std::shared_ptr<DiskCompactor::Placement> snapshot() {
        ++snapshots;
        const std::vector<uint8_t> data = fx::pattern(2 * kBlock, snapshots);
        write_blocks(rig, snapshots * 3, data);
        std::copy(data.begin(), data.end(), want.begin() + static_cast<ptrdiff_t>(snapshots * 3 * kBlock));
        auto placement = DiskCompactor::begin_snapshot(compactor);
        rig.loop.run_sync([&] { rig.device.freeze(layer(snapshots)); });
        placement->set_own_dirs({dir.path()});
        return placement;
    }
};

}  // namespace

TEST_CASE("disk compactor: the 5th snapshot's placement merges the 4 frozen layers; the guest reads the same disk",
          "[blk][layers][compaction]") {
    Vm vm;
    for (uint32_t s = 1; s <= 4; ++s) {
        vm.snapshot()->finish(true);
        vm.compactor->wait();
        CHECK(vm.rig.device.layer_paths().size() == s + 1);  // raw, then s layers: nothing merged yet
    }
    vm.snapshot()->finish(true);
    vm.compactor->wait();
    CHECK(vm.rig.device.layer_paths() == std::vector<std::string>{vm.layer(5), vm.layer(4), vm.raw});
    for (uint32_t n = 1; n <= 3; ++n) CHECK_FALSE(std::filesystem::exists(vm.layer(n)));
    CHECK(read_all(vm.rig) == vm.want);
    write_blocks(vm.rig, 100, fx::pattern(kBlock, 42));  // and writes on
    std::copy_n(fx::pattern(kBlock, 42).begin(), kBlock, vm.want.begin() + 100 * kBlock);
    CHECK(read_all(vm.rig) == vm.want);
}

TEST_CASE("disk compactor: only the newest snapshot, once placed and with no other outstanding, starts a compaction",
          "[blk][layers][compaction]") {
    Vm vm;
    for (uint32_t s = 1; s <= 4; ++s) vm.snapshot()->finish(true);
    auto fifth = vm.snapshot();
    auto sixth = vm.snapshot();  // begun before the fifth placed its files
    fifth->finish(true);         // too old: the sixth may still be placing the files
    vm.compactor->wait();
    CHECK(vm.rig.device.layer_paths().size() == 7);
    sixth.reset();  // never placed (failed): counts as failed, starts nothing
    vm.compactor->wait();
    CHECK(vm.rig.device.layer_paths().size() == 7);
    auto seventh = vm.snapshot();
    seventh->finish(false);  // failed
    vm.compactor->wait();
    CHECK(vm.rig.device.layer_paths().size() == 8);
    vm.snapshot()->finish(true);
    vm.compactor->wait();
    CHECK(vm.rig.device.layer_paths() == std::vector<std::string>{vm.layer(8), vm.layer(7), vm.raw});
    CHECK(read_all(vm.rig) == vm.want);
}
