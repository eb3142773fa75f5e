// boot.json and the current top of a dead VM's writable disk (api/vm/boot_record.hpp),
// over real layer files: a raw disk never frozen, a chain of frozen layers with one
// unfrozen top, a freeze cut short (two unfrozen, parent and child), and layers that
// do not fit.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "api/vm/boot_record.hpp"
#include "devices/virtio/blk/disk_layer.hpp"
#include "tests/support/temp_dir.hpp"
#include "vmm/error.hpp"

using namespace nanovm;
using namespace nanovm::vm;
namespace blk = nanovm::virtio::blk;

namespace {

constexpr uint64_t kDiskBytes = 1 << 20;
const std::string kId = "0123456789ab";

// A layer file `name` in `dir` over the file `parent` of the same directory ("":
// none), frozen or not; returns its id.
blk::LayerId make_layer(const VmPaths& p, const std::string& name, const std::string& parent,
                        const blk::LayerId& parent_id, bool frozen) {
    blk::ParentRef ref;
    if (!parent.empty()) {
        ref.kind = blk::ParentKind::layer;
        ref.path = parent;
        ref.id = parent_id;
    }
    blk::LayerHeader header;
    const std::string path = p.dir + "/" + name;
    Fd fd = blk::create_layer_file(path, kDiskBytes, ref, header);
    if (frozen) {
        header.frozen = true;
        blk::write_layer_header(fd.get(), path, header);
    }
    return header.id;
}

// A sandbox's record: the root image read-only, the upper disk writable.
BootRecord sandbox_record(const VmPaths& p) {
    BootRecord r;
    r.cpus = 1;
    r.memory_mib = 256;
    r.image = "/images/root.ext4";
    r.disks = {DiskOption{"/images/root.ext4", true, "nanovm-root"}, DiskOption{p.disk(), false, "nanovm-upper", 4096}};
    return r;
}

}  // namespace

TEST_CASE("boot record: written and read back", "[api][vm][boot]") {
    test::TempDir dir("boot");
    const VmPaths p{kId, dir.path()};
    BootRecord r = sandbox_record(p);
    r.user_disks = {"/data/x.img,ro"};
    write_boot_record(p.boot_file(), r);
    CHECK(read_boot_record(p.boot_file()) == r);
    CHECK_THROWS_AS(read_boot_record(dir.file("missing.json")), SysError);
}

TEST_CASE("boot record: the current top of a writable disk", "[api][vm][boot]") {
    test::TempDir dir("boot");
    const VmPaths p{kId, dir.path()};
    SECTION("no layer: the raw disk it started with") {
        CHECK(current_top(p, 1, p.disk()) == p.disk());
        CHECK(last_layer_number(p) == 0);
    }
    SECTION("frozen layers below one that is not: that one, whatever its number") {
        const auto a = make_layer(p, kId + "-disk1-0.layer", "", {}, true);
        const auto b = make_layer(p, kId + "-disk1-1.layer", kId + "-disk1-0.layer", a, true);
        make_layer(p, kId + "-disk1-2.layer", kId + "-disk1-1.layer", b, false);
        // Another disk's layers and other files are not this disk's.
        make_layer(p, kId + "-disk2-7.layer", "", {}, false);
        make_layer(p, "fedcba987654-disk1-9.layer", "", {}, false);
        CHECK(current_top(p, 1, p.disk()) == p.dir + "/" + kId + "-disk1-2.layer");
        CHECK(current_top(p, 2, "x") == p.dir + "/" + kId + "-disk2-7.layer");
        CHECK(last_layer_number(p) == 7);
    }
    SECTION("a freeze cut short: the empty child goes, its parent is the top") {
        const auto a = make_layer(p, kId + "-disk1-3.layer", "", {}, false);
        make_layer(p, kId + "-disk1-4.layer", kId + "-disk1-3.layer", a, false);
        CHECK(current_top(p, 1, p.disk()) == p.dir + "/" + kId + "-disk1-3.layer");
        CHECK_FALSE(std::filesystem::exists(p.dir + "/" + kId + "-disk1-4.layer"));
    }
    SECTION("two unfrozen layers that are not parent and child: refused") {
        make_layer(p, kId + "-disk1-1.layer", "", {}, false);
        make_layer(p, kId + "-disk1-2.layer", "", {}, false);
        CHECK_THROWS_WITH(current_top(p, 1, p.disk()), Catch::Contains("not frozen"));
    }
}

TEST_CASE("boot record: kept_disks puts each writable disk at its top", "[api][vm][boot]") {
    test::TempDir dir("boot");
    const VmPaths p{kId, dir.path()};
    const BootRecord r = sandbox_record(p);
    write_boot_record(p.boot_file(), r);
    CHECK(kept_disks(p) == r);  // never snapshotted: the raw disk
    make_layer(p, kId + "-disk1-1.layer", "", {}, false);
    const BootRecord k = kept_disks(p);
    CHECK(k.disks[0].path == "/images/root.ext4");
    CHECK(k.disks[1].path == p.dir + "/" + kId + "-disk1-1.layer");
    CHECK(k.disks[1].layer_file);
    CHECK(k.disks[1].block_size == 4096);
}
