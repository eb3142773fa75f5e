// Disk layer files and chains (devices/virtio/blk/disk_layer, layered_disk) on real
// files in a temporary directory: the format round trip, refusal of every truncation
// and corruption naming the file, parent checks, loops, depth, and the extent map.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "devices/virtio/blk/disk_layer.hpp"
#include "devices/virtio/blk/layered_disk.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/unit/devices/virtio/blk_rig.hpp"

using namespace nanovm;
using namespace nanovm::virtio::blk;
namespace fx = nanovm::test::blk_fixture;
using nanovm::test::TempDir;

namespace {

constexpr uint64_t kBlock = kLayerBlockSize;
constexpr uint64_t kSmallDisk = 64 * kBlock;  // 256 KiB: a one-word bitmap

LayerHeader header_of(const std::string& path) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    REQUIRE(fd);
    return read_layer_header(fd.get(), path);
}

// Writes `data` into the top at disk byte `offset` and marks it present.
void put(LayeredDisk& disk, uint64_t offset, const std::vector<uint8_t>& data) {
    REQUIRE(::pwrite(disk.top_fd(), data.data(), data.size(), static_cast<off_t>(disk.top_data_offset() + offset)) ==
            static_cast<ssize_t>(data.size()));
    disk.mark_present(offset, data.size());
}

// The disk's bytes [offset, +len) as the extent map says.
std::vector<uint8_t> read_disk(const LayeredDisk& disk, uint64_t offset, uint64_t len) {
    std::vector<uint8_t> out;
    for (const DiskExtent& e : disk.map(offset, len)) {
        std::vector<uint8_t> part(e.length, 0);
        if (e.fd >= 0)
            REQUIRE(::pread(e.fd, part.data(), part.size(), static_cast<off_t>(e.file_offset)) ==
                    static_cast<ssize_t>(part.size()));
        out.insert(out.end(), part.begin(), part.end());
    }
    return out;
}

void write_file(const std::string& path, uint64_t offset, const std::vector<uint8_t>& data) {
    Fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    REQUIRE(::pwrite(fd.get(), data.data(), data.size(), static_cast<off_t>(offset)) ==
            static_cast<ssize_t>(data.size()));
}

// A bottom layer with no parent (absent blocks read as zeros).
void make_empty_layer(const std::string& path, uint64_t disk_bytes) {
    LayerHeader h;
    create_layer_file(path, disk_bytes, ParentRef{}, h);
}

}  // namespace

TEST_CASE("disk layer: a new top over a raw file records the parent; the bitmap round-trips", "[blk][layers]") {
    TempDir dir;
    const std::string raw = dir.file("disk.img"), top = dir.file("disk.1.layer");
    fx::make_image(raw, kSmallDisk);
    write_file(raw, 0, fx::pattern(kSmallDisk, 1));
    LayeredDisk::create_top(top, raw, ParentKind::raw);
    struct stat st {};
    REQUIRE(::stat(top.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    CHECK(st.st_blocks <= 16);  // header only: the bitmap and data area are holes

    const LayerHeader h = header_of(top);
    CHECK(h.disk_bytes == kSmallDisk);
    CHECK(h.parent.kind == ParentKind::raw);
    CHECK(h.parent.path == "disk.img");  // same directory: by file name
    CHECK(h.parent.raw_bytes == kSmallDisk);
    CHECK_FALSE(h.frozen);
    CHECK(h.data_offset() == 1 * MiB);
    CHECK(static_cast<uint64_t>(st.st_size) == h.file_bytes());
    CHECK_THROWS_WITH(LayeredDisk::create_top(top, raw, ParentKind::raw), Catch::Contains("disk.1.layer"));  // O_EXCL
    // A raw file is no layer parent (its bytes are never taken for a header).
    CHECK_THROWS_WITH(LayeredDisk::create_top(dir.file("x.layer"), raw), Catch::Contains("disk.img"));
    CHECK_FALSE(std::filesystem::exists(dir.file("x.layer")));

    {
        LayeredDisk disk = LayeredDisk::open(top, true);
        CHECK(disk.chain_paths() == std::vector<std::string>{top, raw});
        CHECK(disk.depth() == 1);
        CHECK(disk.map(0, kSmallDisk).size() == 1);  // all in the raw base
        put(disk, 3 * kBlock, fx::pattern(2 * kBlock, 2));
        disk.save_bitmap();
    }
    const LayeredDisk again = LayeredDisk::open(top, false);
    const auto extents = again.map(0, kSmallDisk);
    REQUIRE(extents.size() == 3);
    CHECK(extents[1].length == 2 * kBlock);
    CHECK(extents[1].file_offset == h.data_offset() + 3 * kBlock);
    std::vector<uint8_t> want = fx::pattern(kSmallDisk, 1);
    const auto b = fx::pattern(2 * kBlock, 2);
    std::copy(b.begin(), b.end(), want.begin() + 3 * kBlock);
    CHECK(read_disk(again, 0, kSmallDisk) == want);
}

TEST_CASE("disk layer: a parent in another directory is referred to by absolute path", "[blk][layers]") {
    TempDir dir;
    std::filesystem::create_directory(dir.file("sub"));
    const std::string raw = dir.file("disk.img"), top = dir.file("sub/top.layer");
    fx::make_image(raw, kSmallDisk);
    LayeredDisk::create_top(top, raw, ParentKind::raw);
    CHECK(header_of(top).parent.path == std::filesystem::canonical(raw).string());
    CHECK(LayeredDisk::open(top, true).chain_paths().back() == std::filesystem::canonical(raw).string());
}

TEST_CASE("disk layer: every truncation and a flipped header or bitmap byte are refused naming the file",
          "[blk][layers]") {
    TempDir dir;
    const std::string raw = dir.file("disk.img"), l1 = dir.file("l1.layer"), l2 = dir.file("l2.layer");
    fx::make_image(raw, kSmallDisk);
    LayeredDisk::create_top(l1, raw, ParentKind::raw);
    {
        LayeredDisk disk = LayeredDisk::open(l1, true);
        put(disk, 5 * kBlock, fx::pattern(kBlock, 3));
        CHECK(disk.freeze(l2) == l1);
    }
    const LayerHeader h = header_of(l1);
    REQUIRE(h.frozen);
    REQUIRE(LayeredDisk::open(l1, false).map(5 * kBlock, kBlock)[0].fd >= 0);
    const std::string bad = dir.file("bad.layer");
    const auto fresh_copy = [&] {
        std::filesystem::remove(bad);
        std::filesystem::copy_file(l1, bad);
    };

    SECTION("truncated anywhere, or grown") {
        for (const uint64_t size : {uint64_t{0}, uint64_t{4}, uint64_t{8}, uint64_t{100}, kLayerHeaderBytes - 1,
                                    kLayerHeaderBytes, kLayerHeaderBytes + 4, h.data_offset(),
                                    h.file_bytes() - 1, h.file_bytes() + 1}) {
            fresh_copy();
            REQUIRE(::truncate(bad.c_str(), static_cast<off_t>(size)) == 0);
            INFO("size " << size);
            CHECK_THROWS_WITH(LayeredDisk::open(bad, false), Catch::Contains("bad.layer"));
        }
    }
    SECTION("a flipped byte") {
        for (const uint64_t at : {uint64_t{0}, uint64_t{7}, uint64_t{8}, uint64_t{16}, uint64_t{29}, uint64_t{40},
                                  uint64_t{64}, uint64_t{88}, uint64_t{100}, uint64_t{110}, uint64_t{128},
                                  uint64_t{2000}, kLayerHeaderBytes - 1, kLayerHeaderBytes,
                                  kLayerHeaderBytes + h.bitmap_bytes() - 1}) {
            fresh_copy();
            std::vector<uint8_t> byte = fx::read_file_range(bad, at, 1);
            byte[0] ^= 0x20;
            write_file(bad, at, byte);
            INFO("byte " << at);
            CHECK_THROWS_WITH(LayeredDisk::open(bad, false), Catch::Contains("disk layer") && Catch::Contains("bad.layer"));
        }
    }
    SECTION("a raw file is not a layer") {
        CHECK_THROWS_WITH(LayeredDisk::open(raw, false), Catch::Contains("disk.img") && Catch::Contains("magic"));
    }
}

TEST_CASE("disk layer: a parent with another id or size is refused", "[blk][layers]") {
    TempDir dir;
    const std::string raw = dir.file("disk.img"), l1 = dir.file("l1.layer"), l2 = dir.file("l2.layer");
    fx::make_image(raw, kSmallDisk);
    LayeredDisk::create_top(l1, raw, ParentKind::raw);
    LayeredDisk::open(l1, true).freeze(l2);
    REQUIRE(LayeredDisk::open(l2, true).depth() == 2);

    SECTION("a layer replaced by another one") {
        const std::string other = dir.file("other.layer");
        LayeredDisk::create_top(other, raw, ParentKind::raw);
        LayeredDisk::open(other, true).freeze(dir.file("other.2.layer"));
        std::filesystem::rename(other, l1);
        CHECK_THROWS_WITH(LayeredDisk::open(l2, true),
                          Catch::Contains("disk layer " + l2) && Catch::Contains("parent " + l1) &&
                              Catch::Contains("has id"));
    }
    SECTION("the raw base resized") {
        REQUIRE(::truncate(raw.c_str(), static_cast<off_t>(2 * kSmallDisk)) == 0);
        CHECK_THROWS_WITH(LayeredDisk::open(l2, true),
                          Catch::Equals(fmt::format("disk layer {}: parent {} has size {}, expected {}", l1, raw,
                                                    2 * kSmallDisk, kSmallDisk)));
    }
    SECTION("a parent missing") {
        std::filesystem::remove(raw);
        CHECK_THROWS_WITH(LayeredDisk::open(l2, true), Catch::Contains("disk.img"));
    }
    SECTION("a frozen layer is not reopened writable, and a top is no parent until frozen") {
        CHECK_THROWS_WITH(LayeredDisk::open(l1, true), Catch::Contains("frozen"));
        CHECK_THROWS_WITH(LayeredDisk::create_top(dir.file("l3.layer"), l2), Catch::Contains("not frozen"));
        CHECK_FALSE(std::filesystem::exists(dir.file("l3.layer")));
    }
}

TEST_CASE("disk layer: loops and chains deeper than 64 are refused", "[blk][layers]") {
    TempDir dir;
    const std::string a = dir.file("a.layer"), b = dir.file("b.layer");
    SECTION("two layers naming each other") {
        make_empty_layer(b, kSmallDisk);
        LayerHeader hb = header_of(b);
        LayerHeader ha;
        Fd fa = create_layer_file(a, kSmallDisk, ParentRef{ParentKind::layer, "b.layer", hb.id, 0}, ha);
        ha.frozen = true;
        write_layer_header(fa.get(), a, ha);
        Fd fb(::open(b.c_str(), O_RDWR | O_CLOEXEC));
        hb.parent = ParentRef{ParentKind::layer, "a.layer", ha.id, 0};
        hb.frozen = true;
        write_layer_header(fb.get(), b, hb);
        CHECK_THROWS_WITH(LayeredDisk::open(a, false), Catch::Contains("loop"));
    }
    SECTION("a layer naming itself") {
        make_empty_layer(a, kSmallDisk);
        LayerHeader h = header_of(a);
        Fd fd(::open(a.c_str(), O_RDWR | O_CLOEXEC));
        h.parent = ParentRef{ParentKind::layer, "a.layer", h.id, 0};
        h.frozen = true;
        write_layer_header(fd.get(), a, h);
        CHECK_THROWS_WITH(LayeredDisk::open(a, false), Catch::Contains("a.layer") && Catch::Contains("loop"));
    }
    SECTION("64 layers deep, then no further") {
        make_empty_layer(dir.file("0.layer"), kSmallDisk);
        LayeredDisk disk = LayeredDisk::open(dir.file("0.layer"), true);
        for (int i = 1; i < 64; ++i) disk.freeze(dir.file(fmt::format("{}.layer", i)));
        CHECK(disk.depth() == 64);
        CHECK_THROWS_WITH(disk.freeze(dir.file("64.layer")), Catch::Contains("64 layers"));
        CHECK_FALSE(std::filesystem::exists(dir.file("64.layer")));
        CHECK(LayeredDisk::open(dir.file("63.layer"), true).depth() == 64);
    }
}

TEST_CASE("disk layer: extents across three layers, with zero runs for blocks present nowhere", "[blk][layers]") {
    TempDir dir;
    const std::string l0 = dir.file("l0.layer"), l1 = dir.file("l1.layer"), l2 = dir.file("l2.layer");
    make_empty_layer(l0, kSmallDisk);
    const auto p0 = fx::pattern(2 * kBlock, 10), p1 = fx::pattern(2 * kBlock, 11), p2 = fx::pattern(2 * kBlock, 12);
    LayeredDisk disk = LayeredDisk::open(l0, true);
    put(disk, 0, p0);               // blocks 0, 1 in l0
    CHECK(disk.freeze(l1) == l0);
    put(disk, 1 * kBlock, p1);      // blocks 1, 2 in l1
    CHECK(disk.freeze(l2) == l1);
    put(disk, 2 * kBlock, p2);      // blocks 2, 3 in l2; 4.. nowhere
    CHECK(disk.chain_paths() == std::vector<std::string>{l2, l1, l0});

    const uint64_t data = header_of(l0).data_offset();
    const auto extents = disk.map(0, 6 * kBlock);
    REQUIRE(extents.size() == 4);
    CHECK(extents[0].file_offset == data);
    CHECK(extents[0].length == kBlock);
    CHECK(extents[1].file_offset == data + kBlock);
    CHECK(extents[1].length == kBlock);
    CHECK(extents[2].fd == disk.top_fd());
    CHECK(extents[2].file_offset == data + 2 * kBlock);
    CHECK(extents[2].length == 2 * kBlock);
    CHECK(extents[3].fd == -1);
    CHECK(extents[3].length == 2 * kBlock);
    CHECK(extents[0].fd != extents[1].fd);

    std::vector<uint8_t> want(6 * kBlock, 0);
    std::copy(p0.begin(), p0.begin() + kBlock, want.begin());
    std::copy(p1.begin(), p1.begin() + kBlock, want.begin() + kBlock);
    std::copy(p2.begin(), p2.end(), want.begin() + 2 * kBlock);
    CHECK(read_disk(disk, 0, 6 * kBlock) == want);
    // Unaligned ranges map too (only writes must be whole blocks).
    const auto mid = disk.map(100, 5000);
    REQUIRE(mid.size() == 2);
    CHECK(mid[0].length == kBlock - 100);
    CHECK(mid[1].length == 5000 - (kBlock - 100));
    CHECK(read_disk(disk, 100, 5000) == std::vector<uint8_t>(want.begin() + 100, want.begin() + 5100));
    CHECK_THROWS_AS(disk.mark_present(100, kBlock), Error);
    CHECK_THROWS_AS(disk.map(kSmallDisk - kBlock, 2 * kBlock), Error);

    // Reopened from its top (bitmaps saved), the chain reads the same.
    disk.save_bitmap();
    const LayeredDisk again = LayeredDisk::open(l2, false);
    CHECK(read_disk(again, 0, kSmallDisk) == read_disk(disk, 0, kSmallDisk));
}

TEST_CASE("disk layer timings on a 16 GiB disk: open, mark, freeze, reopen", "[.][bench][layers]") {
    TempDir dir;
    const std::string raw = dir.file("disk.img");
    fx::make_image(raw, 16 * GiB);
    const auto ms = [](auto since) {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
    };
    LayeredDisk::create_top(dir.file("0.layer"), raw, ParentKind::raw);
    auto t = std::chrono::steady_clock::now();
    LayeredDisk disk = LayeredDisk::open(dir.file("0.layer"), true);
    const double open_ms = ms(t);
    uint64_t x = 88172645463325252ull;
    const uint64_t blocks = 16 * GiB / kBlock;
    std::vector<double> freeze_ms;
    for (int layer = 1; layer <= 3; ++layer) {
        for (int i = 0; i < 100000; ++i) {  // 100k scattered 4 KiB writes (400 MiB) per layer
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            disk.mark_present((x % blocks) * kBlock, kBlock);
        }
        t = std::chrono::steady_clock::now();
        disk.freeze(dir.file(fmt::format("{}.layer", layer)));
        freeze_ms.push_back(ms(t));
    }
    t = std::chrono::steady_clock::now();
    const auto extents = disk.map(0, 16 * GiB);
    const double map_ms = ms(t);
    t = std::chrono::steady_clock::now();
    const LayeredDisk again = LayeredDisk::open(dir.file("3.layer"), false);
    const double reopen_ms = ms(t);
    WARN(fmt::format("16 GiB: open over raw {:.2f} ms; freeze after 100k writes {:.2f} / {:.2f} / {:.2f} ms; "
                     "reopen 3 deep + raw {:.2f} ms; map of the whole disk: {} extents in {:.1f} ms",
                     open_ms, freeze_ms[0], freeze_ms[1], freeze_ms[2], reopen_ms, extents.size(), map_ms));
    CHECK(again.depth() == 4);
}
