// Compaction of layer chains (devices/virtio/blk/layer_compaction) on real files in a
// temporary directory: a merged run reads block for block as the run did, the run's
// other files are gone while a snapshot directory's hard links keep the old chain,
// layers outside the VM's directory are never part of a run, and every refusal
// leaves the chain as it was with no temporary file. Also through BlockDevice, as the
// VMM drives it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "devices/virtio/blk/layer_compaction.hpp"
#include "devices/virtio/blk/layered_disk.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/unit/devices/virtio/blk_rig.hpp"

using namespace nanovm;
using namespace nanovm::virtio::blk;
namespace fx = nanovm::test::blk_fixture;
namespace fs = std::filesystem;
using nanovm::test::TempDir;

namespace {

constexpr uint64_t kBlock = kLayerBlockSize;
constexpr uint64_t kBlocks = 200;  // a bitmap of 4 words, the last one partial
constexpr uint64_t kDisk = kBlocks * kBlock;

LayerHeader header_of(const std::string& path) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    REQUIRE(fd);
    return read_layer_header(fd.get(), path);
}

void write_file(const std::string& path, uint64_t offset, const std::vector<uint8_t>& data) {
    Fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    REQUIRE(fd);
    REQUIRE(::pwrite(fd.get(), data.data(), data.size(), static_cast<off_t>(offset)) ==
            static_cast<ssize_t>(data.size()));
}

// Writes `data` into the top at disk byte `offset` and marks it present.
void put(LayeredDisk& disk, uint64_t offset, const std::vector<uint8_t>& data) {
    REQUIRE(::pwrite(disk.top_fd(), data.data(), data.size(), static_cast<off_t>(disk.top_data_offset() + offset)) ==
            static_cast<ssize_t>(data.size()));
    disk.mark_present(offset, data.size());
}

// Every block of the disk as the extent map says, one vector per 4 KiB block.
std::vector<std::vector<uint8_t>> blocks_of(const LayeredDisk& disk) {
    std::vector<std::vector<uint8_t>> out;
    for (uint64_t b = 0; b < disk.disk_bytes() / kBlock; ++b) {
        std::vector<uint8_t> block;
        for (const DiskExtent& e : disk.map(b * kBlock, kBlock)) {
            std::vector<uint8_t> part(e.length, 0);
            if (e.fd >= 0)
                REQUIRE(::pread(e.fd, part.data(), part.size(), static_cast<off_t>(e.file_offset)) ==
                        static_cast<ssize_t>(part.size()));
            block.insert(block.end(), part.begin(), part.end());
        }
        out.push_back(std::move(block));
    }
    return out;
}

// Writes of frozen layer `k` (1-based): overlapping runs that move up the disk, a
// word boundary crossed, and every (k+2)th block, each with pattern k.
void write_layer(LayeredDisk& disk, uint32_t k) {
    put(disk, (k * 23 % 160) * kBlock, fx::pattern(40 * kBlock, k));
    for (uint64_t b = 0; b < kBlocks; b += k + 2) put(disk, b * kBlock, fx::pattern(kBlock, 100 + k * 1000 + b));
}

std::string layer_path(const TempDir& dir, uint32_t k) { return dir.file(fmt::format("vm-disk1-{}.layer", k)); }

// raw base (pattern 0) <- 1 <- ... <- `frozen` frozen layers <- top `frozen + 1`,
// all in `dir`. Returns the open, writable chain.
LayeredDisk make_chain(const TempDir& dir, uint32_t frozen) {
    const std::string raw = dir.file("vm-disk1.img");
    fx::make_image(raw, kDisk);
    write_file(raw, 0, fx::pattern(kDisk, 0));
    LayeredDisk::create_top(layer_path(dir, 1), raw, ParentKind::raw);
    LayeredDisk disk = LayeredDisk::open(layer_path(dir, 1), true);
    for (uint32_t k = 1; k <= frozen; ++k) {
        write_layer(disk, k);
        disk.freeze(layer_path(dir, k + 1));
    }
    return disk;
}

bool exists(const std::string& path) { return fs::exists(fs::symlink_status(path)); }

}  // namespace

TEST_CASE("compaction: 5 frozen layers merge into 1 that reads block for block as the run did",
          "[blk][layers][compaction]") {
    TempDir dir;
    fs::create_directory(dir.file("snap"));
    LayeredDisk disk = make_chain(dir, 5);  // raw <- 1..5 frozen <- 6 top
    put(disk, 7 * kBlock, fx::pattern(3 * kBlock, 77));
    REQUIRE(disk.depth() == 6);
    // A snapshot taken at the third freeze holds hard links to its chain (as
    // place_frozen_file makes them): raw, 1, 2, 3.
    for (const char* name : {"vm-disk1.img", "vm-disk1-1.layer", "vm-disk1-2.layer", "vm-disk1-3.layer"})
        REQUIRE(::link(dir.file(name).c_str(), dir.file(std::string("snap/") + name).c_str()) == 0);
    const auto snap_before = blocks_of(LayeredDisk::open(dir.file("snap/vm-disk1-3.layer"), false));
    auto want = blocks_of(disk);
    const LayerId top_run_id = header_of(layer_path(dir, 5)).id;

    std::optional<CompactionPlan> plan = disk.plan_compaction(dir.path());
    REQUIRE(plan);
    CHECK(plan->layers() == 5);
    CHECK(plan->first_level == 1);
    CHECK(plan->paths.front() == layer_path(dir, 1));
    CHECK(plan->top_path == layer_path(dir, 5));
    CHECK(plan->top_id == top_run_id);
    CHECK(plan->bottom_parent.kind == ParentKind::raw);
    CHECK(plan->bottom_parent.path == "vm-disk1.img");

    const std::string temp = compaction_temp_path(*plan);
    const auto t0 = std::chrono::steady_clock::now();
    const MergedLayerStats stats = write_merged_layer(*plan, temp);
    const double write_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    CHECK(exists(temp));
    CHECK(stats.data_bytes % kBlock == 0);
    CHECK(stats.data_bytes <= kDisk);
    CHECK(stats.copies < stats.data_bytes / kBlock);  // consecutive blocks of a layer went in one copy
    // The guest writes on meanwhile (the write step runs while the VM runs).
    put(disk, 150 * kBlock, fx::pattern(2 * kBlock, 88));
    want = blocks_of(disk);

    const auto t1 = std::chrono::steady_clock::now();
    disk.adopt_compaction(*plan, temp);
    const double adopt_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
    WARN(fmt::format("compaction of 5 layers of a {} KiB disk: write {:.2f} ms ({} KiB in {} copies), adopt {:.2f} ms",
                     kDisk / 1024, write_ms, stats.data_bytes / 1024, stats.copies, adopt_ms));
    CHECK(disk.depth() == 2);
    CHECK(disk.chain_paths() ==
          std::vector<std::string>{layer_path(dir, 6), layer_path(dir, 5), dir.file("vm-disk1.img")});
    CHECK(blocks_of(disk) == want);
    for (uint32_t k = 1; k <= 4; ++k) CHECK_FALSE(exists(layer_path(dir, k)));
    CHECK_FALSE(exists(temp));
    const LayerHeader merged = header_of(layer_path(dir, 5));
    CHECK(merged.id == top_run_id);
    CHECK(merged.frozen);
    CHECK(merged.parent.kind == ParentKind::raw);
    CHECK(merged.parent.path == "vm-disk1.img");
    CHECK(merged.parent.raw_bytes == kDisk);

    // The guest keeps writing to the top; the chain reopens from its top as it is.
    put(disk, 0, fx::pattern(kBlock, 99));
    disk.save_bitmap();
    want = blocks_of(disk);
    {
        const LayeredDisk again = LayeredDisk::open(layer_path(dir, 6), false);
        CHECK(again.depth() == 2);
        CHECK(blocks_of(again) == want);
    }
    // The snapshot's own links still open its old chain with its old content.
    const LayeredDisk snap = LayeredDisk::open(dir.file("snap/vm-disk1-3.layer"), false);
    CHECK(snap.depth() == 3);
    CHECK(blocks_of(snap) == snap_before);
    // And the compacted chain freezes and compacts again.
    disk.freeze(layer_path(dir, 7));
    write_layer(disk, 7);
    disk.freeze(layer_path(dir, 8));
    want = blocks_of(disk);
    plan = disk.plan_compaction(dir.path());
    REQUIRE(plan);
    CHECK(plan->layers() == 3);  // 5 (merged), 6, 7
    write_merged_layer(*plan, compaction_temp_path(*plan));
    disk.adopt_compaction(*plan, compaction_temp_path(*plan));
    CHECK(disk.chain_paths() ==
          std::vector<std::string>{layer_path(dir, 8), layer_path(dir, 7), dir.file("vm-disk1.img")});
    CHECK(blocks_of(disk) == want);
}

TEST_CASE("compaction: layers in another directory are never part of a run", "[blk][layers][compaction]") {
    TempDir base_dir, dir;
    // A snapshot directory's chain (raw <- b1 <- b2, shared), then the VM's own layers.
    const std::string raw = base_dir.file("disk.img"), b1 = base_dir.file("b1.layer"), b2 = base_dir.file("b2.layer");
    fx::make_image(raw, kDisk);
    write_file(raw, 0, fx::pattern(kDisk, 0));
    LayeredDisk::create_top(b1, raw, ParentKind::raw);
    {
        LayeredDisk base = LayeredDisk::open(b1, true);
        write_layer(base, 1);
        base.freeze(b2);
        write_layer(base, 2);
        base.freeze(base_dir.file("b3.layer"));
    }
    struct stat b1_before {}, b2_before {};
    REQUIRE(::stat(b1.c_str(), &b1_before) == 0);
    REQUIRE(::stat(b2.c_str(), &b2_before) == 0);
    LayeredDisk::create_top(layer_path(dir, 1), b2);
    LayeredDisk disk = LayeredDisk::open(layer_path(dir, 1), true);
    for (uint32_t k = 1; k <= 3; ++k) {
        write_layer(disk, k + 2);
        disk.freeze(layer_path(dir, k + 1));
    }
    REQUIRE(disk.depth() == 6);
    const auto want = blocks_of(disk);

    CHECK_FALSE(disk.plan_compaction(base_dir.path()));  // the layer below the top is not there
    std::optional<CompactionPlan> plan = disk.plan_compaction(dir.path() + "/./");  // any spelling of the directory
    REQUIRE(plan);
    CHECK(plan->layers() == 3);
    CHECK(plan->first_level == 3);
    CHECK(plan->bottom_parent.kind == ParentKind::layer);
    CHECK(plan->bottom_parent.path == fs::canonical(b2).string());
    write_merged_layer(*plan, compaction_temp_path(*plan));
    disk.adopt_compaction(*plan, compaction_temp_path(*plan));
    CHECK(disk.chain_paths() == std::vector<std::string>{layer_path(dir, 4), layer_path(dir, 3),
                                                         fs::canonical(b2).string(), fs::canonical(b1).string(),
                                                         fs::canonical(raw).string()});
    CHECK(blocks_of(disk) == want);
    struct stat b1_after {}, b2_after {};
    REQUIRE(::stat(b1.c_str(), &b1_after) == 0);
    REQUIRE(::stat(b2.c_str(), &b2_after) == 0);
    CHECK(b1_after.st_ino == b1_before.st_ino);
    CHECK(b2_after.st_ino == b2_before.st_ino);
    CHECK(b2_after.st_mtim.tv_nsec == b2_before.st_mtim.tv_nsec);
}

TEST_CASE("compaction: fewer than 2 frozen layers in the directory give no plan", "[blk][layers][compaction]") {
    TempDir dir;
    {
        LayeredDisk disk = make_chain(dir, 0);  // raw <- top
        CHECK_FALSE(disk.plan_compaction(dir.path()));
        write_layer(disk, 1);
        disk.freeze(layer_path(dir, 2));  // raw <- 1 <- top: a run of 1
        CHECK_FALSE(disk.plan_compaction(dir.path()));
        disk.freeze(layer_path(dir, 3));
        CHECK(disk.plan_compaction(dir.path())->layers() == 2);
    }
    CHECK_THROWS_WITH(LayeredDisk::open(layer_path(dir, 3), true).plan_compaction(dir.file("missing")),
                      Catch::Contains("missing"));
}

TEST_CASE("compaction: a failed write or a refused adopt leaves the chain as it was, with no temporary file",
          "[blk][layers][compaction]") {
    TempDir dir;
    LayeredDisk disk = make_chain(dir, 4);
    const auto want = blocks_of(disk);
    const std::vector<std::string> paths = disk.chain_paths();
    std::optional<CompactionPlan> plan = disk.plan_compaction(dir.path());
    REQUIRE(plan);
    REQUIRE(plan->layers() == 4);
    const auto unchanged = [&] {
        CHECK(disk.chain_paths() == paths);
        CHECK(blocks_of(disk) == want);
        for (const std::string& path : paths) CHECK(exists(path));
        CHECK_FALSE(exists(compaction_temp_path(*plan)));
        std::vector<std::string> names;
        for (const auto& entry : fs::directory_iterator(dir.path())) names.push_back(entry.path().string());
        CHECK(names.size() == paths.size());  // nothing left behind
    };

    SECTION("the temporary file cannot be created") {
        const std::string missing = dir.file("missing/x.compact");
        CHECK_THROWS_WITH(write_merged_layer(*plan, missing), Catch::Contains("missing/x.compact"));
        CHECK_FALSE(exists(missing));
        unchanged();
    }
    SECTION("a run file changed under the plan (its header no longer checks out)") {
        write_file(plan->paths[1], 120, std::vector<uint8_t>{0xff});  // a reserved header byte
        CHECK_THROWS_WITH(write_merged_layer(*plan, compaction_temp_path(*plan)),
                          Catch::Contains(plan->paths[1]) && Catch::Contains("CRC"));
        write_file(plan->paths[1], 120, std::vector<uint8_t>{0});
        unchanged();
    }
    SECTION("the chain no longer holds the run at the planned levels") {
        write_merged_layer(*plan, compaction_temp_path(*plan));
        plan->first_level = 2;
        CHECK_THROWS_WITH(disk.adopt_compaction(*plan, compaction_temp_path(*plan)),
                          Catch::Contains("no longer"));
        plan->first_level = 1;
        unchanged();
    }
    SECTION("the merged file is not the plan's (another id)") {
        write_merged_layer(*plan, compaction_temp_path(*plan));
        plan->top_id[0] ^= 1;
        CHECK_THROWS_WITH(disk.adopt_compaction(*plan, compaction_temp_path(*plan)),
                          Catch::Contains("not the run's merged layer"));
        plan->top_id[0] ^= 1;
        unchanged();
    }
    SECTION("a freeze between plan and adopt is fine: the new layer goes above the merged one") {
        write_merged_layer(*plan, compaction_temp_path(*plan));
        put(disk, 0, fx::pattern(kBlock, 5));
        disk.freeze(layer_path(dir, 6));
        const auto now = blocks_of(disk);
        disk.adopt_compaction(*plan, compaction_temp_path(*plan));
        CHECK(disk.depth() == 3);
        CHECK(disk.chain_paths() == std::vector<std::string>{layer_path(dir, 6), layer_path(dir, 5),
                                                             layer_path(dir, 4), dir.file("vm-disk1.img")});
        CHECK(blocks_of(disk) == now);
        CHECK(blocks_of(LayeredDisk::open(layer_path(dir, 6), false)) == now);
    }
}

TEST_CASE("compaction lets a disk be frozen past the 64-layer limit", "[blk][layers][compaction]") {
    TempDir dir;
    LayeredDisk disk = make_chain(dir, 0);
    uint32_t next = 2;
    for (int snapshot = 0; snapshot < 100; ++snapshot) {
        put(disk, (snapshot % kBlocks) * kBlock, fx::pattern(kBlock, 1000 + static_cast<uint32_t>(snapshot)));
        disk.freeze(layer_path(dir, next++));
        if (std::optional<CompactionPlan> plan = disk.plan_compaction(dir.path()); plan && plan->layers() >= 4) {
            write_merged_layer(*plan, compaction_temp_path(*plan));
            disk.adopt_compaction(*plan, compaction_temp_path(*plan));
        }
    }
    CHECK(disk.depth() <= 4);
    const auto blocks = blocks_of(disk);
    for (int snapshot = 0; snapshot < 100; ++snapshot) {
        const uint64_t b = static_cast<uint64_t>(snapshot) % kBlocks;
        CHECK(blocks[b] == fx::pattern(kBlock, 1000 + static_cast<uint32_t>(snapshot)));
    }
    CHECK(blocks_of(LayeredDisk::open(disk.chain_paths().front(), false)) == blocks);
}
