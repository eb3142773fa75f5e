// Memory layer files without KVM: a base layer holds exactly the non-zero pages, a
// diff layer exactly the pages it is given, a chain flattens to the memory it was
// taken from, and every kind of damage is refused naming the file and the part.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "snapshot/crc32c.hpp"
#include "snapshot/memory_layer.hpp"
#include "snapshot/snapshot_error.hpp"
#include "tests/support/temp_dir.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"
#include "vmm/guest_memory.hpp"

using namespace nanovm;
using namespace nanovm::snapshot;

namespace {

constexpr uint64_t kRam = 4 * MiB;  // 1024 pages

std::vector<uint64_t> pages_of(const PageBitmap& bits) {
    std::vector<uint64_t> out;
    for (uint64_t p = 0; p < bits.size() * 64; ++p)
        if (bits[p / 64] >> (p % 64) & 1) out.push_back(p);
    return out;
}

PageBitmap bitmap_of(std::initializer_list<uint64_t> pages) {
    PageBitmap bits((kRam / kPageSize + 63) / 64, 0);
    for (uint64_t p : pages) bits[p / 64] |= 1ULL << (p % 64);
    return bits;
}

std::vector<uint8_t> contents(const GuestMemory& memory) {
    const auto all = memory.slice(Gpa(0), memory.ram_bytes());
    return {all.begin(), all.end()};
}

void flip_byte(const std::string& path, uint64_t offset) {
    Fd fd(::open(path.c_str(), O_RDWR));
    REQUIRE(fd.valid());
    uint8_t b = 0;
    REQUIRE(::pread(fd.get(), &b, 1, static_cast<off_t>(offset)) == 1);
    b ^= 0x40;
    REQUIRE(::pwrite(fd.get(), &b, 1, static_cast<off_t>(offset)) == 1);
}

std::string open_error(const std::string& path) {
    try {
        LayerChain::open(path);
    } catch (const SnapshotError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("a base layer holds exactly the non-zero pages; a diff layer the given pages; the chain flattens back",
          "[snapshot][unit]") {
    test::TempDir dir("layer");
    GuestMemory memory = GuestMemory::create(kRam);
    memory.write<uint64_t>(Gpa(5 * kPageSize + 8), 0x1111);
    memory.write<uint64_t>(Gpa(6 * kPageSize), 0x2222);
    memory.write<uint64_t>(Gpa(1023 * kPageSize + 4088), 0x3333);
    memory.write<uint64_t>(Gpa(100 * kPageSize), 0);  // written, but zero: not in a base layer
    CHECK(pages_of(nonzero_pages(memory)) == std::vector<uint64_t>{5, 6, 1023});

    const std::string base = dir.file("base.layer");
    const LayerWriteResult r1 = write_layer(memory, nonzero_pages(memory), base, std::nullopt);
    CHECK(r1.present_pages == 3);
    CHECK(r1.data_pages == 3);
    const std::vector<uint8_t> at_base = contents(memory);

    // Change page 6, zero page 5, write page 700: the diff holds pages 5, 6, 700.
    memory.write<uint64_t>(Gpa(6 * kPageSize), 0x4444);
    memory.write<uint64_t>(Gpa(5 * kPageSize + 8), 0);
    memory.write<uint64_t>(Gpa(700 * kPageSize), 0x5555);
    const std::string diff = dir.file("diff.layer");
    const LayerWriteResult r2 = write_layer(memory, bitmap_of({5, 6, 700}), diff, ParentRef{"base.layer", r1.checksum});
    CHECK(r2.present_pages == 3);
    CHECK(r2.data_pages == 2);  // page 5 is zero now: present, but a hole

    const LayerChain chain = LayerChain::open(diff);
    REQUIRE(chain.layers().size() == 2);
    CHECK(chain.find(5) == &chain.layers()[0]);
    CHECK(chain.find(1023) == &chain.layers()[1]);
    CHECK(chain.find(7) == nullptr);

    const std::string flat = dir.file("memory.flat");
    flatten_chain(chain, flat, "diff.layer");
    Fd fd(::open(flat.c_str(), O_RDONLY | O_CLOEXEC));
    GuestMemory restored = GuestMemory::map_file_private(fd.get(), kRam, kLayerDataOffset);
    CHECK(restored.backing() == GuestMemory::Backing::private_file);
    CHECK(contents(restored) == contents(memory));
    // The restored copy's writes stay private: the flat file keeps the snapshot.
    restored.write<uint64_t>(Gpa(6 * kPageSize), 0x9999);
    GuestMemory again = GuestMemory::map_file_private(fd.get(), kRam, kLayerDataOffset);
    CHECK(again.read<uint64_t>(Gpa(6 * kPageSize)) == 0x4444);
    // A base layer of a privately mapped memory scans every page.
    CHECK(pages_of(nonzero_pages(restored)) == std::vector<uint64_t>{6, 700, 1023});

    // The base alone still flattens to the memory at its time.
    const LayerChain base_only = LayerChain::open(base);
    flatten_chain(base_only, dir.file("base.flat"), "base.layer");
    Fd fd2(::open(dir.file("base.flat").c_str(), O_RDONLY | O_CLOEXEC));
    CHECK(contents(GuestMemory::map_file_private(fd2.get(), kRam, kLayerDataOffset)) == at_base);
}

TEST_CASE("damaged layer files are refused naming the file and the part", "[snapshot][unit]") {
    test::TempDir dir("layer-bad");
    GuestMemory memory = GuestMemory::create(kRam);
    for (uint64_t p : {3, 4, 500}) memory.write<uint64_t>(Gpa(p * kPageSize), p + 1);
    const std::string base = dir.file("base.layer");
    const LayerWriteResult r1 = write_layer(memory, nonzero_pages(memory), base, std::nullopt);
    const std::string diff = dir.file("diff.layer");
    write_layer(memory, bitmap_of({4}), diff, ParentRef{"base.layer", r1.checksum});
    const std::string pristine = dir.file("pristine");
    std::filesystem::copy_file(base, pristine);
    const auto restore_base = [&] {
        std::filesystem::copy_file(pristine, base, std::filesystem::copy_options::overwrite_existing);
    };

    SECTION("a flipped header byte") {
        flip_byte(base, 20);
        CHECK(open_error(base) == base + ": header checksum mismatch (corrupt header)");
    }
    SECTION("a flipped page byte is found when the page is read") {
        flip_byte(base, kLayerDataOffset + 500 * kPageSize + 77);
        const LayerChain chain = LayerChain::open(base);
        CHECK_NOTHROW(chain.find(3)->page_verified(3));
        CHECK_THROWS_WITH(chain.find(500)->page_verified(500),
                          base + ": page 500 (of the RAM layout) checksum mismatch (corrupt page data)");
        CHECK_THROWS_AS(flatten_chain(chain, dir.file("x.flat"), "base.layer"), SnapshotError);
    }
    SECTION("a layer marked good whole skips the per-page check (the whole-file CRC vouched for it)") {
        flip_byte(base, kLayerDataOffset + 500 * kPageSize + 77);
        LayerChain chain = LayerChain::open(base);
        LayerFile& layer = chain.layers().front();
        CHECK_FALSE(layer.whole_verified());
        CHECK_THROWS_AS(layer.page_verified(500), SnapshotError);
        layer.mark_whole_verified();
        CHECK(layer.whole_verified());
        CHECK(layer.page_verified(500).data() == layer.page(500).data());
        LayerFile moved = std::move(layer);  // the mark goes with the file
        CHECK(moved.whole_verified());
    }
    SECTION("a flipped bitmap byte") {
        const LayerFile f = LayerFile::open(base);
        const uint64_t at = f.header().bitmap_offset;
        flip_byte(base, at);
        CHECK(open_error(base) == base + ": page bitmap checksum mismatch (corrupt bitmap)");
    }
    SECTION("every truncation") {
        const uint64_t size = std::filesystem::file_size(base);
        for (uint64_t n : {uint64_t{0}, uint64_t{100}, kLayerDataOffset, size - 1, size - 4, size - 100}) {
            restore_base();
            REQUIRE(::truncate(base.c_str(), static_cast<off_t>(n)) == 0);
            INFO("truncated to " << n);
            CHECK(open_error(base).find("truncated") != std::string::npos);
        }
    }
    SECTION("a newer layer version") {
        LayerFile f = LayerFile::open(base);
        LayerHeader h = f.header();
        h.version = kLayerFormatVersion + 1;
        h.header_crc = crc32c({reinterpret_cast<const uint8_t*>(&h), offsetof(LayerHeader, header_crc)});
        Fd fd(::open(base.c_str(), O_RDWR));
        REQUIRE(::pwrite(fd.get(), &h, sizeof(h), 0) == static_cast<ssize_t>(sizeof(h)));
        CHECK(open_error(base).find("layer format version 2 was written by a newer nanovm") != std::string::npos);
    }
    SECTION("a parent replaced by a different layer") {
        memory.write<uint64_t>(Gpa(9 * kPageSize), 1);
        write_layer(memory, nonzero_pages(memory), base, std::nullopt);
        CHECK(open_error(diff).find("parent layer " + base + " has checksum") != std::string::npos);
    }
    SECTION("a parent named by an absolute path") {
        write_layer(memory, bitmap_of({4}), diff, ParentRef{base, r1.checksum});
        CHECK(open_error(diff) == diff + ": parent layer path '" + base + "' must be relative to the layer's directory");
    }
    SECTION("a missing parent") {
        std::filesystem::remove(base);
        CHECK(open_error(diff) == diff + ": parent layer " + base + " is missing");
    }
}

TEST_CASE("LayerBuilder::file_crc32c is the whole file's CRC-32C without reading the pages", "[snapshot][unit]") {
    test::TempDir dir("layer-crc");
    for (const bool drop_zero : {true, false}) {
        INFO("drop_zero_pages " << drop_zero);
        const std::string path = dir.file(drop_zero ? "base.layer" : "diff.layer");
        LayerBuilder builder(path, kRam, std::nullopt, drop_zero);
        std::vector<uint8_t> pages(4 * kPageSize, 0);
        for (size_t i = 0; i < kPageSize; ++i) {
            pages[i] = static_cast<uint8_t>(i * 7 + 1);                  // page 0: data
            pages[2 * kPageSize + i] = static_cast<uint8_t>(i * 13 + 5);  // page 2: data; 1 and 3 zero
        }
        builder.put(10, 4, pages.data());
        builder.put(kRam / kPageSize - 1, 1, pages.data());  // the last page
        CHECK_THROWS_AS(builder.file_crc32c(), Error);        // before finish
        builder.finish();
        const auto bytes = [&] {
            std::vector<uint8_t> all(std::filesystem::file_size(path));
            Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
            REQUIRE(::pread(fd.get(), all.data(), all.size(), 0) == static_cast<ssize_t>(all.size()));
            return all;
        }();
        CHECK(builder.file_crc32c() == crc32c(bytes));
    }
}
