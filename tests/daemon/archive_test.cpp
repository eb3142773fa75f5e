// Archives (api/daemon/archive/): the blob store's visibility and durability rules,
// the archive format's round trip and its refusals of corrupt, truncated and
// hostile input (an ArchiveError naming what is wrong, never a crash), and a
// snapshot directory over a memory chain and a disk chain in another directory
// packed, that directory deleted, and unpacked into a restorable directory with the
// same bytes.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/daemon/archive/archive_format.hpp"
#include "api/daemon/archive/blob_store.hpp"
#include "api/daemon/archive/sandbox_archive.hpp"
#include "devices/virtio/blk/layered_disk.hpp"
#include "snapshot/crc32c.hpp"
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

std::vector<uint8_t> read_all(BlobReader& r) {
    std::vector<uint8_t> out;
    uint8_t buf[4096];
    for (size_t n; (n = r.read(buf)) > 0;) out.insert(out.end(), buf, buf + n);
    return out;
}

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

// Writes `data` as blob `name` and commits it.
void put_blob(BlobStore& store, const std::string& name, const std::vector<uint8_t>& data) {
    auto w = store.put(name);
    w->write(data);
    w->commit();
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
    std::vector<uint8_t> out(n);
    std::mt19937 rng(seed);
    for (auto& b : out) b = static_cast<uint8_t>(rng() % 7);  // compressible, not zero
    return out;
}

// An archive of three images: a 3 MiB run (split into records), a small one, and
// a sparse 1 GiB image with two runs.
std::vector<uint8_t> sample_archive(BlobStore& store, int workers = 2) {
    ArchiveMeta meta;
    meta.images = {{"a", 4u << 20}, {"b", 100}, {"sparse", uint64_t{1} << 30}};
    meta.info = {{"sandbox_id", "s1"}, {"n", 7}};
    {
        auto w = store.put("sample");
        ArchiveWriter writer(*w, meta, ZstdOptions{3, workers});
        writer.add(0, 4096, pattern(3u << 20, 1));
        writer.add(1, 10, bytes_of("hello"));
        writer.add(2, 512u << 20, pattern(8192, 2));
        writer.add(2, (uint64_t{1} << 30) - 4096, pattern(4096, 3));
        CHECK_THROWS_WITH(writer.add(1, 98, bytes_of("abc")), Catch::Contains("outside image b"));
        writer.finish();
        CHECK(writer.records() == 3 + 1 + 1 + 1);
        CHECK(writer.raw_bytes() == (3u << 20) + 5 + 8192 + 4096);
        w->commit();
    }
    auto r = store.get("sample");
    return read_all(*r);
}

// Reads every run of `data` as an archive; returns the error, or "" when it reads.
std::string read_error(BlobStore& store, const std::vector<uint8_t>& data) {
    put_blob(store, "probe", data);
    try {
        auto r = store.get("probe");
        ArchiveReader reader(*r, "probe");
        ArchiveRun run;
        while (reader.next(run)) {
        }
    } catch (const ArchiveError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("blob store: a blob is visible only once committed, durable, and removable") {
    TempDir tmp("blobs");
    DirBlobStore store(tmp.file("archives"));
    {
        auto w = store.put("one.nva");
        w->write(bytes_of("partial"));
        CHECK_FALSE(store.exists("one.nva"));
        CHECK(store.list().empty());
    }  // dropped without commit
    CHECK_FALSE(store.exists("one.nva"));
    CHECK(fs::is_empty(tmp.file("archives")));
    put_blob(store, "one.nva", bytes_of("first"));
    put_blob(store, "two.nva", bytes_of("second"));
    CHECK(store.list() == std::vector<std::string>{"one.nva", "two.nva"});
    auto r = store.get("one.nva");
    CHECK(r->size() == 5);
    CHECK(read_all(*r) == bytes_of("first"));
    put_blob(store, "one.nva", bytes_of("replaced"));
    auto again = store.get("one.nva");
    CHECK(read_all(*again) == bytes_of("replaced"));
    store.remove("one.nva");
    store.remove("one.nva");  // no error the second time
    CHECK_FALSE(store.exists("one.nva"));
    CHECK_THROWS_AS(store.get("one.nva"), BlobNotFound);
    CHECK_THROWS_WITH(store.put("../x"), Catch::Contains("is not [A-Za-z0-9._-]"));
    CHECK_THROWS_WITH(store.get(".hidden"), Catch::Contains("is not"));
    CHECK_FALSE(valid_blob_name(std::string(129, 'a')));
    // A writer cut short by a crash leaves a partial file: invisible, and removed at start.
    std::ofstream(tmp.file("archives/.three.nva.partial")) << "cut short";
    CHECK(store.list() == std::vector<std::string>{"two.nva"});
    CHECK(store.remove_partials() == 1);
    CHECK(store.list() == std::vector<std::string>{"two.nva"});
}

TEST_CASE("archive format: round trip with multithreaded zstd, runs split into records") {
    TempDir tmp("arch");
    DirBlobStore store(tmp.path());
    for (int workers : {1, 2}) {
        const std::vector<uint8_t> data = sample_archive(store, workers);
        CHECK(data.size() < (3u << 20) / 2);  // the pattern compresses
        put_blob(store, "copy", data);
        auto r = store.get("copy");
        ArchiveReader reader(*r, "copy");
        CHECK(reader.meta().images.size() == 3);
        CHECK(reader.meta().images[2] == ArchiveImage{"sparse", uint64_t{1} << 30});
        CHECK(reader.meta().info["sandbox_id"] == "s1");
        std::vector<uint8_t> a(4u << 20, 0);
        std::string b;
        std::vector<std::pair<uint64_t, std::vector<uint8_t>>> sparse;
        ArchiveRun run;
        int records = 0;
        while (reader.next(run)) {
            ++records;
            CHECK(run.data.size() <= kMaxRunBytes);
            if (run.image == 0) std::memcpy(a.data() + run.offset, run.data.data(), run.data.size());
            if (run.image == 1) b.assign(run.data.begin(), run.data.end());
            if (run.image == 2) sparse.emplace_back(run.offset, std::vector<uint8_t>(run.data.begin(), run.data.end()));
        }
        CHECK_FALSE(reader.next(run));
        CHECK(records == 6);
        const std::vector<uint8_t> p1 = pattern(3u << 20, 1);
        CHECK(std::equal(p1.begin(), p1.end(), a.begin() + 4096));
        CHECK(std::all_of(a.begin(), a.begin() + 4096, [](uint8_t x) { return x == 0; }));
        CHECK(b == "hello");
        REQUIRE(sparse.size() == 2);
        CHECK(sparse[0] == std::make_pair(uint64_t{512} << 20, pattern(8192, 2)));
        CHECK(sparse[1].first == (uint64_t{1} << 30) - 4096);
        CHECK(reader.consumed() == data.size());
    }
}

TEST_CASE("archive format: corrupt, truncated and hostile archives give a clear error") {
    TempDir tmp("arch");
    DirBlobStore store(tmp.path());
    const std::vector<uint8_t> good = sample_archive(store);
    CHECK(read_error(store, good).empty());

    CHECK_THAT(read_error(store, {}), Catch::Contains("probe: empty"));
    CHECK_THAT(read_error(store, bytes_of("NANOVMXX and more bytes than a header")), Catch::Contains("bad magic"));
    std::vector<uint8_t> bad = good;
    bad[9] ^= 1;  // the version: the header checksum no longer matches
    CHECK_THAT(read_error(store, bad), Catch::Contains("header checksum mismatch"));
    bad = good;
    bad[30] ^= 1;  // inside the meta
    CHECK_THAT(read_error(store, bad), Catch::Contains("meta checksum mismatch"));

    // Every truncation fails, with a message, at every length (a sample of them).
    for (size_t n = 1; n < good.size(); n += std::max<size_t>(1, good.size() / 97)) {
        const std::string error = read_error(store, std::vector<uint8_t>(good.begin(), good.begin() + n));
        INFO("truncated to " << n << " of " << good.size());
        CHECK_FALSE(error.empty());
    }
    CHECK_THAT(read_error(store, std::vector<uint8_t>(good.begin(), good.end() - 1)), Catch::Contains("probe: "));

    // Flipped bytes in the compressed body: zstd's checksum or our record checks.
    for (size_t at : {good.size() / 2, good.size() - 6, good.size() / 3}) {
        bad = good;
        bad[at] ^= 0x5a;
        INFO("byte " << at << " flipped");
        CHECK_FALSE(read_error(store, bad).empty());
    }
    bad = good;
    bad.push_back(0);
    CHECK_THAT(read_error(store, bad), Catch::Contains("after the compressed frame"));

    // A hostile but well-formed meta: a run outside its image, an image too big.
    auto hostile = [&](const ArchiveMeta& meta, auto&& body) {
        auto w = store.put("h");
        ArchiveWriter writer(*w, meta);
        body(writer);
        writer.finish();
        w->commit();
        auto r = store.get("h");
        return read_all(*r);
    };
    ArchiveMeta meta;
    meta.images = {{"x", 8192}};
    CHECK_THROWS_WITH(hostile(meta, [](ArchiveWriter& w) { w.add(0, 8000, pattern(4096, 1)); }),
                      Catch::Contains("outside image x"));
    meta.images = {{"x", uint64_t{1} << 41}};
    CHECK_THROWS_WITH(hostile(meta, [](ArchiveWriter&) {}), Catch::Contains("at most 1 TiB"));
    meta.images = {{"x", 4096}, {"x", 4096}};
    CHECK_THROWS_WITH(hostile(meta, [](ArchiveWriter&) {}), Catch::Contains("listed twice"));
}

namespace {

// The devices section of a sandbox VM's vm.state (api/vm/vmm_process.cpp vm_config
// and linux_vm.cpp capture_devices), over root image `image` and a writable disk
// whose frozen layer is `frozen`.
std::string devices_json(const std::string& image, const std::string& frozen) {
    const json config{{"cpus", 1},
                      {"memory_mib", 4},
                      {"image", image},
                      {"user_disks", json::array()},
                      {"disk_options",
                       {{{"path", image}, {"read_only", true}, {"serial", "nanovm-root"}, {"block_size", 512}},
                        {{"path", "/old/vm/disk.ext4"}, {"read_only", false}, {"serial", "nanovm-upper"}, {"block_size", 4096}}}}};
    return json{{"version", 1},
                {"config", config},
                {"disks", {{{"frozen", nullptr}}, {{"frozen", frozen}, {"frozen_kind", "layer"}}}},
                {"devices", {{"version", 1}, {"virtio", json::array()}}},
                {"serial", json::object()}}
        .dump();
}


constexpr uint64_t kRam = 4u << 20;           // 1024 pages
constexpr uint64_t kDisk = nanovm::test::kChainDiskBytes;  // the chain's 1 GiB sparse disk

std::vector<uint8_t> page_of(uint8_t fill) { return std::vector<uint8_t>(4096, fill); }

}  // namespace

TEST_CASE("sandbox archive: a snapshot over another directory's chains packs self-contained and unpacks the same") {
    TempDir tmp("sarch");
    const std::string s1 = tmp.file("s1"), s2 = tmp.file("s2"), out = tmp.file("restore");
    // Memory: a base layer in s1 (pages 0, 1, 500, 3), a diff in s2 over it (pages 1, 700,
    // and 3 written as zeros); disk: a raw base in s1 (blocks 0 and 5), a frozen layer in
    // s2 over it (block 5 rewritten, block 9 new): tests/support/chained_snapshot.hpp.
    nanovm::test::write_chained_snapshot(
        s1, s2, kRam, snapshot::encode_vm_state(nanovm::test::one_vcpu_state(kRam, devices_json("/cache/rootfs/disk.ext4", "d-1.layer"))),
        /*zero_page_3=*/true);

    DirBlobStore store(tmp.file("archives"));
    uint64_t last_done = 0, last_total = 0;
    PackStats stats;
    {
        auto w = store.put("sb.nva");
        stats = pack_snapshot(s2, json{{"sandbox_id", "sb"}}, *w,
                              [&](uint64_t done, uint64_t total) {
                                  CHECK(done >= last_done);
                                  last_done = done;
                                  last_total = total;
                              },
                              ZstdOptions{3, 2});
        w->commit();
    }
    CHECK(last_done == last_total);
    CHECK(stats.workers == 2);
    // Non-zero RAM pages 0, 1, 500, 700 and their CRCs (4 bytes each), disk blocks 0,
    // 5, 9, plus vm.state.
    CHECK(stats.raw_bytes == 7 * 4096 + 4 * 4 + fs::file_size(s2 + "/vm.state"));
    CHECK(stats.compressed_bytes == fs::file_size(tmp.file("archives/sb.nva")));

    fs::remove_all(s1);  // self-contained: the chains' other directory is gone
    fs::remove_all(s2);
    auto r = store.get("sb.nva");
    CHECK(archive_info(*r, "sb.nva")["sandbox_id"] == "sb");
    auto r2 = store.get("sb.nva");
    const json info = unpack_archive(*r2, out, "/state/images/abc", nullptr, "sb.nva");
    CHECK(info["sandbox_id"] == "sb");
    CHECK(snapshot::is_durable(out));
    const snapshot::Manifest manifest = snapshot::read_manifest(out);
    CHECK(manifest.chain.empty());
    snapshot::check_parts(out, manifest, snapshot::PartCheck::full);

    const snapshot::VmState state = snapshot::decode_vm_state(snapshot::read_checked_state(out), "vm.state");
    CHECK(state.vcpus.at(0).regs.rip == 0x1234);
    const json saved = json::parse(state.devices);
    CHECK(saved["config"]["image"] == "/state/images/abc");
    CHECK(saved["config"]["disk_options"][0]["path"] == "/state/images/abc");
    CHECK(saved["disks"][0]["frozen"].is_null());
    CHECK(saved["disks"][1] == json{{"frozen", "disk1.raw"}, {"frozen_kind", "raw"}});

    const snapshot::LayerChain chain = snapshot::open_chain(out + "/memory.layer");
    CHECK(chain.layers().size() == 1);
    auto page = [&](uint64_t p) -> int {
        const snapshot::LayerFile* l = chain.find(p);
        if (!l) return 0;
        const auto bytes = l->page_verified(p);
        for (uint8_t b : bytes)
            if (b != bytes[0]) return -1;
        return bytes[0];
    };
    CHECK(page(0) == 0x10);
    CHECK(page(1) == 0x21);
    CHECK(page(3) == 0);
    CHECK(page(500) == 0x50);
    CHECK(page(700) == 0x70);
    CHECK(page(2) == 0);

    CHECK(fs::file_size(out + "/disk1.raw") == kDisk);
    Fd disk(::open((out + "/disk1.raw").c_str(), O_RDONLY));
    auto block = [&](uint64_t b) {
        std::vector<uint8_t> buf(4096);
        REQUIRE(::pread(disk.get(), buf.data(), 4096, static_cast<off_t>(b * 4096)) == 4096);
        return buf;
    };
    CHECK(block(0) == page_of(0xb0));
    CHECK(block(5) == page_of(0xc5));
    CHECK(block(9) == page_of(0xc9));
    CHECK(block(1) == page_of(0));
    CHECK(fs::status(out + "/disk1.raw").type() == fs::file_type::regular);

    // The parts' CRCs given to the manifest (the layer's combined from its pages',
    // the disk's from its runs) are the files' own.
    CHECK(manifest.parts.size() == 3);
    CHECK(manifest.find("disk1.raw") != nullptr);

    // Durability::deferred writes the same files and a manifest of vm.state and the
    // memory layer (the daemon restores from it at once), then make_durable fsyncs them.
    const std::string later = tmp.file("unpacked-deferred");
    auto r6 = store.get("sb.nva");
    UnpackStats deferred_stats;
    (void)unpack_archive(*r6, later, "/state/images/abc", nullptr, "sb.nva", &deferred_stats, Durability::deferred);
    const snapshot::Manifest deferred_manifest = snapshot::read_manifest(later);
    REQUIRE(deferred_manifest.parts.size() == 2);
    for (const snapshot::ManifestPart& part : deferred_manifest.parts) {
        INFO(part.name);
        REQUIRE(manifest.find(part.name) != nullptr);
        CHECK(part == *manifest.find(part.name));
    }
    CHECK(deferred_manifest.find("disk1.raw") == nullptr);
    snapshot::check_parts(later, deferred_manifest, snapshot::PartCheck::full);
    for (const char* file : {"disk1.raw", "memory.layer", "vm.state"}) {
        INFO(file);
        CHECK(snapshot::describe_part(later, file) == snapshot::describe_part(out, file));
    }
    CHECK(make_durable(later) >= 0);
    CHECK_THROWS_AS(make_durable(tmp.file("no-such-dir")), SysError);

    // Unpacking twice into the same directory is refused; a truncated copy fails cleanly.
    auto r3 = store.get("sb.nva");
    CHECK_THROWS_WITH(unpack_archive(*r3, out, "/x", nullptr), Catch::Contains("is not empty"));
    auto r4 = store.get("sb.nva");
    std::vector<uint8_t> whole = read_all(*r4);
    whole.resize(whole.size() - 100);
    put_blob(store, "cut.nva", whole);
    auto r5 = store.get("cut.nva");
    CHECK_THROWS_AS(unpack_archive(*r5, tmp.file("cut"), "/x", nullptr, "cut.nva"), ArchiveError);
    CHECK_FALSE(snapshot::is_durable(tmp.file("cut")));
}

namespace {

// An archive of a sandbox snapshot written by hand (kRam of RAM, a 1 GiB disk 1):
// RAM page 2 = 0x22 and page 3 = 0x33 in one run, preceded by `crcs` as the run of
// their CRCs if not empty (with the memory.crc32c image listed only then).
std::vector<uint8_t> hand_archive(BlobStore& store, const std::vector<uint32_t>& crcs) {
    ArchiveMeta meta;
    const std::vector<uint8_t> state = snapshot::encode_vm_state(
        nanovm::test::one_vcpu_state(kRam, devices_json("/cache/rootfs/disk.ext4", "d-1.layer")));
    meta.images = {{"vm.state", state.size()}, {"memory", kRam}, {"disk1", kDisk}};
    if (!crcs.empty()) meta.images.push_back({"memory.crc32c", kRam / 4096 * 4});
    meta.info = json{{"sandbox_id", "hand"}, {"disks", {{{"index", 1}, {"image", "disk1"}}}}};
    auto w = store.put("hand");
    {
        ArchiveWriter writer(*w, meta, ZstdOptions{3, 1});
        writer.add(0, 0, state);
        if (!crcs.empty()) writer.add(3, 2 * 4, {reinterpret_cast<const uint8_t*>(crcs.data()), crcs.size() * 4});
        std::vector<uint8_t> pages = page_of(0x22);
        const std::vector<uint8_t> p3 = page_of(0x33);
        pages.insert(pages.end(), p3.begin(), p3.end());
        writer.add(1, 2 * 4096, pages);
        writer.finish();
    }
    w->commit();
    auto r = store.get("hand");
    return read_all(*r);
}

}  // namespace

TEST_CASE("sandbox archive: RAM pages take the CRCs the archive carries, or computed ones without them") {
    TempDir tmp("sarch-crc");
    DirBlobStore store(tmp.file("archives"));
    const uint32_t crc22 = snapshot::crc32c(page_of(0x22)), crc33 = snapshot::crc32c(page_of(0x33));
    struct Case {
        std::vector<uint32_t> crcs;
        bool page3_ok;
    };
    int n = 0;
    for (const Case& c : {Case{{}, true}, Case{{crc22, crc33}, true}, Case{{crc22, crc33 ^ 1}, false}}) {
        INFO("case " << n);
        put_blob(store, "a.nva", hand_archive(store, c.crcs));
        const std::string out = tmp.file(fmt::format("out{}", n++));
        auto r = store.get("a.nva");
        unpack_archive(*r, out, "/state/images/abc", nullptr, "a.nva");
        const snapshot::LayerChain chain = snapshot::open_chain(out + "/memory.layer");
        CHECK(chain.find(2)->page_verified(2)[0] == 0x22);
        if (c.page3_ok) {
            CHECK(chain.find(3)->page_verified(3)[0] == 0x33);
        } else {
            // A wrong CRC from the archive: that page fails its check on use.
            CHECK_THROWS_WITH(chain.find(3)->page_verified(3), Catch::Contains("page 3"));
        }
    }
    // Hostile: a CRC image of the wrong size, a CRC run not in whole entries.
    ArchiveMeta meta;
    meta.images = {{"vm.state", 4096}, {"memory", kRam}, {"memory.crc32c", 8}};
    meta.info = json{{"disks", json::array()}};
    {
        auto w = store.put("bad.nva");
        ArchiveWriter writer(*w, meta, ZstdOptions{3, 1});
        writer.finish();
        w->commit();
    }
    auto r = store.get("bad.nva");
    CHECK_THROWS_WITH(unpack_archive(*r, tmp.file("bad"), "/x", nullptr, "bad.nva"),
                      Catch::Contains("memory.crc32c of 8 bytes for 1024 pages"));
    meta.images[2].bytes = kRam / 4096 * 4;
    {
        auto w = store.put("bad2.nva");
        ArchiveWriter writer(*w, meta, ZstdOptions{3, 1});
        writer.add(2, 2, std::vector<uint8_t>(4, 1));
        writer.finish();
        w->commit();
    }
    auto r2 = store.get("bad2.nva");
    CHECK_THROWS_WITH(unpack_archive(*r2, tmp.file("bad2"), "/x", nullptr, "bad2.nva"),
                      Catch::Contains("not in whole entries"));
}
