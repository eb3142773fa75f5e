// Snapshot export files (api/daemon/archive/snapshot_export.hpp) over real files: a
// snapshot whose memory and disk chains reach into another directory is exported,
// both directories are deleted, and the import is a restorable directory with the
// same RAM pages and disk blocks (the disk sparse again) over this host's root
// image; an export of the import imports to the same bytes. Corrupt, truncated,
// foreign and hostile files (a vm.state naming a host file, a shape that is not the
// info's), an unknown root image: each refused with a clear error, and nothing
// left where the import would have been.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/daemon/archive/archive_format.hpp"
#include "api/daemon/archive/blob_store.hpp"
#include "api/daemon/archive/snapshot_export.hpp"
#include "devices/virtio/blk/layered_disk.hpp"
#include "snapshot/manifest.hpp"
#include "snapshot/memory_layer.hpp"
#include "snapshot/snapshot_dir.hpp"
#include "snapshot/snapshot_writer.hpp"
#include "snapshot/state_file.hpp"
#include "snapshot/vm_state.hpp"
#include "tests/support/chained_snapshot.hpp"
#include "tests/support/temp_dir.hpp"
#include "vmm/fd.hpp"

namespace {

using namespace nanovm;
using namespace nanovm::daemon::archive;
using nanovm::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

constexpr uint64_t kMiB = 1u << 20;
constexpr int64_t kMemoryMb = 128;              // the smallest shape the info takes
constexpr uint64_t kDisk = nanovm::test::kChainDiskBytes;  // the chain's 1 GiB sparse disk
const std::string kDigest(64, 'a');
const std::string kOldRoot = "/cache/rootfs/default/disk.ext4";  // the exporting host's root image

std::vector<uint8_t> page_of(uint8_t fill) { return std::vector<uint8_t>(4096, fill); }

// The devices section of a sandbox VM's vm.state (api/vm/vmm_process.cpp vm_config):
// the root image read-only, a writable disk frozen as `frozen`, and `extra` disks.
std::string devices_json(int64_t cpus, int64_t memory_mib, const std::string& frozen, const json& extra = json::array()) {
    json options = {{{"path", kOldRoot}, {"read_only", true}, {"serial", "nanovm-root"}, {"block_size", 512}},
                    {{"path", "/old/vm/disk.ext4"}, {"read_only", false}, {"serial", "nanovm-upper"}, {"block_size", 4096}}};
    json disks = {{{"frozen", nullptr}}, {{"frozen", frozen}, {"frozen_kind", "layer"}}};
    for (const json& e : extra) {
        options.push_back(e);
        disks.push_back({{"frozen", nullptr}});
    }
    const json config{{"cpus", cpus},          {"memory_mib", memory_mib},  {"image", kOldRoot},
                      {"user_disks", json::array()}, {"disk_options", options}};
    return json{{"version", 1},
                {"config", config},
                {"disks", disks},
                {"devices", {{"version", 1}, {"virtio", json::array()}}},
                {"serial", json::object()}}
        .dump();
}

// A snapshot in `s2` whose memory and disk chains start in `s1`: RAM pages 0, 1
// (rewritten in s2), 500, 700 (s2); disk blocks 0, 5 (rewritten in s2), 9 (s2)
// (tests/support/chained_snapshot.hpp).
void make_snapshot(const std::string& s1, const std::string& s2, const std::string& devices) {
    const uint64_t ram = kMemoryMb * kMiB;
    nanovm::test::write_chained_snapshot(s1, s2, ram, snapshot::encode_vm_state(nanovm::test::one_vcpu_state(ram, devices)));
}

SnapshotExportInfo sample_info() {
    SnapshotExportInfo info;
    info.snapshot_id = "11111111-2222-4333-8444-555555555555";
    info.created_ms = 1'700'000'000'000;
    info.cpus = 1;
    info.memory_mb = kMemoryMb;
    info.disable_internet = true;
    info.image = "default";
    info.image_digest = kDigest;
    info.image_bytes = 4096;
    return info;
}

// Exports `dir` into <store>/<name>; returns the file's path.
std::string export_to(DirBlobStore& store, const std::string& name, const std::string& dir, const SnapshotExportInfo& info) {
    auto w = store.put(name);
    export_snapshot(dir, info, *w, nullptr, ZstdOptions{3, 1});
    w->commit();
    return store.dir() + "/" + name;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& data) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

// The first byte of RAM page `p` of the snapshot `dir` if the page is uniform, -1 if not, 0 if absent.
int ram_page(const std::string& dir, uint64_t p) {
    const snapshot::LayerChain chain = snapshot::open_chain(dir + "/memory.layer");
    const snapshot::LayerFile* l = chain.find(p);
    if (!l) return 0;
    const auto bytes = l->page_verified(p);
    for (uint8_t b : bytes)
        if (b != bytes[0]) return -1;
    return bytes[0];
}

std::vector<uint8_t> disk_block(const std::string& file, uint64_t block) {
    Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    std::vector<uint8_t> buf(4096);
    REQUIRE(::pread(fd.get(), buf.data(), 4096, static_cast<off_t>(block * 4096)) == 4096);
    return buf;
}

}  // namespace

TEST_CASE("snapshot export: a chain over two directories exports self-contained and imports the same bytes") {
    TempDir tmp("sexport");
    const std::string s1 = tmp.file("s1"), s2 = tmp.file("s2"), root = tmp.file("images/" + kDigest);
    fs::create_directories(tmp.file("images"));
    write_bytes(root, page_of(0xee));
    fs::create_directories(tmp.file("imports"));
    make_snapshot(s1, s2, devices_json(1, kMemoryMb, "d-1.layer"));
    DirBlobStore store(tmp.file("exports"));
    const std::string file = export_to(store, "s.nvsnap", s2, sample_info());
    fs::remove_all(s1);  // self-contained: neither directory of the chain is needed
    fs::remove_all(s2);

    int asked = 0;
    const RootImageFn resolve = [&](const SnapshotExportInfo& i) {
        ++asked;
        CHECK(i.image_digest == kDigest);
        return root;
    };
    const std::string dir = tmp.file("imports/one");
    const SnapshotExportInfo info = import_snapshot(file, dir, resolve, nullptr);
    CHECK(asked == 1);
    CHECK(info.snapshot_id == sample_info().snapshot_id);
    CHECK(info.cpus == 1);
    CHECK(info.memory_mb == kMemoryMb);
    CHECK(info.disable_internet);
    CHECK(info.image == "default");
    CHECK(info.image_bytes == 4096);
    CHECK(snapshot::is_durable(dir));
    snapshot::check_parts(dir, snapshot::read_manifest(dir), snapshot::PartCheck::full);

    // The vm.state names only this host's root image and the directory's own disk.
    const snapshot::VmState state = snapshot::decode_vm_state(snapshot::read_checked_state(dir), "vm.state");
    CHECK(state.vcpus.at(0).regs.rip == 0x1234);
    const json saved = json::parse(state.devices);
    CHECK(saved["config"]["image"] == root);
    CHECK(saved["config"]["disk_options"][0]["path"] == root);
    CHECK(saved["disks"][1] == json{{"frozen", "disk1.raw"}, {"frozen_kind", "raw"}});

    // RAM through the flattened chain: s2's pages over s1's.
    CHECK(ram_page(dir, 0) == 0x10);
    CHECK(ram_page(dir, 1) == 0x21);
    CHECK(ram_page(dir, 500) == 0x50);
    CHECK(ram_page(dir, 700) == 0x70);
    CHECK(ram_page(dir, 2) == 0);
    // The disk: every block as the chain had it, and sparse (3 blocks of data in 1 GiB).
    const std::string raw = dir + "/disk1.raw";
    CHECK(fs::file_size(raw) == kDisk);
    CHECK(disk_block(raw, 0) == page_of(0xb0));
    CHECK(disk_block(raw, 5) == page_of(0xc5));
    CHECK(disk_block(raw, 9) == page_of(0xc9));
    CHECK(disk_block(raw, 1) == page_of(0));
    struct stat st {};
    REQUIRE(::stat(raw.c_str(), &st) == 0);
    CHECK(static_cast<uint64_t>(st.st_blocks) * 512 <= 1 * kMiB);

    // The export of the import imports to the same bytes.
    const std::string again = export_to(store, "again.nvsnap", dir, sample_info());
    const std::string dir2 = tmp.file("imports/two");
    (void)import_snapshot(again, dir2, resolve, nullptr);
    for (uint64_t p : {0, 1, 2, 500, 700}) CHECK(ram_page(dir2, p) == ram_page(dir, p));
    CHECK(fs::file_size(dir2 + "/disk1.raw") == kDisk);
    for (uint64_t b : {0, 1, 5, 9, 100}) CHECK(disk_block(dir2 + "/disk1.raw", b) == disk_block(raw, b));
    CHECK(json::parse(snapshot::decode_vm_state(snapshot::read_checked_state(dir2), "vm.state").devices) == saved);
}

TEST_CASE("snapshot import: corrupt, truncated, foreign and hostile files are refused, nothing left behind") {
    TempDir tmp("simport");
    const std::string root = tmp.file("root.img");
    write_bytes(root, page_of(0xee));
    const RootImageFn resolve = [&](const SnapshotExportInfo&) { return root; };
    make_snapshot(tmp.file("s1"), tmp.file("s2"), devices_json(1, kMemoryMb, "d-1.layer"));
    DirBlobStore store(tmp.file("exports"));
    const std::string good = export_to(store, "good.nvsnap", tmp.file("s2"), sample_info());
    const std::vector<uint8_t> bytes = read_bytes(good);
    REQUIRE(bytes.size() > 200);
    fs::create_directories(tmp.file("imports"));
    const std::string dir = tmp.file("imports/x");

    // The error of importing `data`; the import directory must be gone after it.
    auto refused = [&](const std::vector<uint8_t>& data, const RootImageFn& root_fn = {}) -> std::string {
        const std::string path = tmp.file("probe.nvsnap");
        write_bytes(path, data);
        std::string error;
        try {
            (void)import_snapshot(path, dir, root_fn ? root_fn : resolve, nullptr);
        } catch (const ArchiveError& e) {
            error = e.what();
        }
        CHECK_FALSE(fs::exists(dir));
        CHECK(fs::is_empty(tmp.file("imports")));
        return error;
    };

    CHECK_THAT(refused({}), Catch::Contains("the import"));
    std::vector<uint8_t> cut(bytes.begin(), bytes.end() - 64);
    CHECK_FALSE(refused(cut).empty());
    std::vector<uint8_t> half(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / 2));
    CHECK_FALSE(refused(half).empty());
    std::vector<uint8_t> flipped = bytes;
    flipped[flipped.size() - 40] ^= 0x5a;  // inside the zstd frame: its XXH64 or a record breaks
    CHECK_FALSE(refused(flipped).empty());
    std::vector<uint8_t> header = bytes;
    header[10] ^= 1;  // the header's CRC
    CHECK_THAT(refused(header), Catch::Contains("the import"));
    std::vector<uint8_t> longer = bytes;
    longer.insert(longer.end(), {1, 2, 3, 4});  // bytes after the archive
    CHECK_FALSE(refused(longer).empty());
    std::vector<uint8_t> noise(1 << 16);
    for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<uint8_t>(i * 131 + 7);
    CHECK_THAT(refused(noise), Catch::Contains("the import"));

    // A sandbox archive (no snapshot format in its info) is not a snapshot export.
    {
        auto w = store.put("sandbox.nva");
        pack_snapshot(tmp.file("s2"), json{{"sandbox_id", "sb"}}, *w, nullptr, ZstdOptions{3, 1});
        w->commit();
    }
    CHECK_THAT(refused(read_bytes(store.dir() + "/sandbox.nva")), Catch::Contains("not a snapshot export"));
    // An info out of range.
    SnapshotExportInfo big = sample_info();
    big.cpus = 64;
    CHECK_THAT(refused(read_bytes(export_to(store, "big.nvsnap", tmp.file("s2"), big))), Catch::Contains("\"cpus\""));
    SnapshotExportInfo no_digest = sample_info();
    no_digest.image_digest = "../../etc/passwd";
    CHECK_THAT(refused(read_bytes(export_to(store, "nd.nvsnap", tmp.file("s2"), no_digest))),
               Catch::Contains("image_digest"));
    // The info's shape is not the vm.state's.
    SnapshotExportInfo other = sample_info();
    other.memory_mb = 256;
    CHECK_THAT(refused(read_bytes(export_to(store, "shape.nvsnap", tmp.file("s2"), other))),
               Catch::Contains("not the info's"));

    // A vm.state with a read-only host file as a disk, and one with a writable disk
    // outside the file: refused after the unpack, which is removed.
    make_snapshot(tmp.file("h1"), tmp.file("h2"),
                  devices_json(1, kMemoryMb, "d-1.layer",
                               json::array({{{"path", "/etc/shadow"}, {"read_only", true}, {"serial", "x"}, {"block_size", 512}}})));
    CHECK_THAT(refused(read_bytes(export_to(store, "host.nvsnap", tmp.file("h2"), sample_info()))),
               Catch::Contains("/etc/shadow"));
    make_snapshot(tmp.file("w1"), tmp.file("w2"),
                  devices_json(1, kMemoryMb, "d-1.layer",
                               json::array({{{"path", "/dev/sda"}, {"read_only", false}, {"serial", "x"}, {"block_size", 512}}})));
    CHECK_THAT(refused(read_bytes(export_to(store, "rw.nvsnap", tmp.file("w2"), sample_info()))),
               Catch::Contains("writable /dev/sda"));

    // No root image with the digest here: the resolver's error, nothing unpacked.
    const RootImageFn none = [](const SnapshotExportInfo& i) -> std::string {
        throw std::runtime_error("no root image " + i.image_digest);
    };
    CHECK_THROWS_WITH(import_snapshot(good, dir, none, nullptr), Catch::Contains(kDigest));
    CHECK_FALSE(fs::exists(dir));
    // An existing directory is never written into.
    fs::create_directories(dir);
    CHECK_THROWS_WITH(import_snapshot(good, dir, resolve, nullptr), Catch::Contains("exists"));
    CHECK(fs::is_empty(dir));
    fs::remove(dir);
    // And the good file still imports.
    CHECK(import_snapshot(good, dir, resolve, nullptr).cpus == 1);
    CHECK(snapshot::is_durable(dir));
}
