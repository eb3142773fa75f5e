// The snapshot manifest (snapshot/manifest.hpp) without KVM: it round-trips, a
// directory without one is an incomplete snapshot, and a truncated, corrupt or
// hostile manifest is refused naming the manifest.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <fmt/format.h>

#include "snapshot/crc32c.hpp"
#include "snapshot/manifest.hpp"
#include "snapshot/snapshot_error.hpp"
#include "tests/support/temp_dir.hpp"

using namespace nanovm;
using namespace nanovm::snapshot;

namespace {

void write_text(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
}

uint32_t crc32c_of(const std::string& text) {
    return crc32c({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

std::string decode_error(const std::string& text) {
    try {
        decode_manifest(text, "m");
    } catch (const SnapshotError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("a manifest round-trips through its text and through the directory", "[snapshot][manifest]") {
    test::TempDir dir("manifest");
    write_text(dir.file("vm.state"), "state bytes");
    write_text(dir.file("memory.layer"), std::string(10000, 'x'));
    const Manifest written = write_manifest(dir.path(), {"vm.state", "memory.layer"});
    REQUIRE(written.parts.size() == 2);
    CHECK(written.parts[0].name == "vm.state");
    CHECK(written.parts[0].bytes == 11);
    CHECK(written.parts[1].bytes == 10000);
    CHECK(!std::filesystem::exists(dir.file("manifest.tmp")));
    const Manifest read = read_manifest(dir.path());
    CHECK(read.parts == written.parts);
    CHECK(decode_manifest(encode_manifest(written), "m").parts == written.parts);
    CHECK(is_durable(dir.path()));
    CHECK_NOTHROW(check_parts(dir.path(), read, PartCheck::full));
    REQUIRE(read.find("memory.layer") != nullptr);
    CHECK(read.find("memory.flat") == nullptr);
}

TEST_CASE("a manifest's chain lists the layers outside its directory, nearest first, for a store to count",
          "[snapshot][manifest]") {
    test::TempDir dir("chain");
    write_text(dir.file("vm.state"), "state bytes");
    const std::vector<ChainLayer> chain = {{"../s2/memory.layer", 0x1234abcd},
                                           {"../my snaps/s 1/memory.layer", 0xdeadbeef},
                                           {"../100%/memory.layer", 0}};
    const Manifest written = write_manifest(dir.path(), {"vm.state"}, /*sync=*/false, chain);
    std::ifstream in(dir.file("manifest"));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Version 2, one line per layer, nearest first; spaces and '%' escaped.
    CHECK(text.rfind("nanovm-manifest 2\n", 0) == 0);
    CHECK(text.find("\nchain ../s2/memory.layer 1234abcd\nchain ../my%20snaps/s%201/memory.layer deadbeef\n"
                    "chain ../100%25/memory.layer 00000000\nend ") != std::string::npos);
    const Manifest read = read_manifest(dir.path());
    CHECK(read.chain == chain);
    CHECK(read.parts == written.parts);
    // Without a chain the manifest stays version 1 (older readers read it).
    const Manifest plain = write_manifest(dir.path(), {"vm.state"}, false);
    CHECK(plain.chain.empty());
    CHECK(encode_manifest(plain).rfind("nanovm-manifest 1\n", 0) == 0);
    CHECK(read_manifest(dir.path()).chain.empty());
    // Absolute or empty paths are refused both ways; so is a chain line in version 1
    // and a malformed escape.
    CHECK_THROWS_AS(encode_manifest(Manifest{{{"vm.state", 1, 0}}, {{"/abs/memory.layer", 0}}}), Error);
    CHECK_THROWS_AS(encode_manifest(Manifest{{{"vm.state", 1, 0}}, {{"", 0}}}), Error);
    const auto with_crc = [](std::string body) { return body + fmt::format("end {:08x}\n", crc32c_of(body)); };
    CHECK(decode_error(with_crc("nanovm-manifest 1\npart a 1 00000000\nchain ../x 00000000\n"))
              .find("line 3: a chain line in a version 1 manifest") != std::string::npos);
    CHECK(decode_error(with_crc("nanovm-manifest 2\npart a 1 00000000\nchain /x 00000000\n"))
              .find("line 3: chain path") != std::string::npos);
    CHECK(decode_error(with_crc("nanovm-manifest 2\npart a 1 00000000\nchain ../x%2 00000000\n"))
              .find("line 3: chain path") != std::string::npos);
    CHECK(decode_error(with_crc("nanovm-manifest 2\npart a 1 00000000\nchain ../x 1234\n"))
              .find("line 3: chain checksum") != std::string::npos);
    CHECK(decode_manifest(with_crc("nanovm-manifest 2\npart a 1 00000000\nchain ../a%20b 00000001\n"), "m").chain ==
          std::vector<ChainLayer>{{"../a b", 1}});
}

TEST_CASE("a directory without a manifest is an incomplete snapshot", "[snapshot][manifest]") {
    test::TempDir dir("nomanifest");
    write_text(dir.file("vm.state"), "state");
    CHECK(!is_durable(dir.path()));
    CHECK_THROWS_WITH(read_manifest(dir.path()), "incomplete snapshot (no manifest): " + dir.path());
    write_text(dir.file("manifest.tmp"), "whatever");  // a manifest cut short before its rename
    CHECK_THROWS_WITH(read_manifest(dir.path()), "incomplete snapshot (no manifest): " + dir.path());
}

TEST_CASE("a truncated or corrupt manifest is refused naming the manifest", "[snapshot][manifest]") {
    Manifest m;
    m.parts = {{"vm.state", 123, 0xdeadbeef}, {"memory.layer", 1ULL << 30, 0x01234567}};
    const std::string text = encode_manifest(m);
    for (size_t cut = 0; cut < text.size(); ++cut) {
        INFO("cut at " << cut);
        CHECK_THROWS_AS(decode_manifest(text.substr(0, cut), "m"), SnapshotError);
    }
    for (size_t at = 0; at < text.size(); ++at) {
        for (const uint8_t mask : {0x01, 0x20, 0x80}) {
            std::string bad = text;
            bad[at] = static_cast<char>(bad[at] ^ mask);
            INFO("byte " << at << " ^ " << int(mask));
            CHECK_THROWS_AS(decode_manifest(bad, "m"), SnapshotError);
        }
    }
    CHECK(decode_error(text + "part x 1 00000000\n").find("m: line 5: text after the end line") == 0);

    test::TempDir dir("badmanifest");
    write_text(dir.file("manifest"), text.substr(0, text.size() - 3));
    CHECK_THROWS_WITH(read_manifest(dir.path()), Catch::StartsWith(dir.file("manifest") + ": line 4: "));
    CHECK(!is_durable(dir.path()));
}

TEST_CASE("hostile manifests are refused: unsafe names, duplicates, bad numbers, newer versions", "[snapshot][manifest]") {
    CHECK(decode_error("nanovm-manifest 1\npart ../etc 1 00000000\nend 00000000\n").find("line 2: part name") !=
          std::string::npos);
    CHECK(decode_error("nanovm-manifest 1\npart a/b 1 00000000\nend 00000000\n").find("line 2: part name") !=
          std::string::npos);
    CHECK(decode_error("nanovm-manifest 1\npart .. 1 00000000\nend 00000000\n").find("line 2: part name") !=
          std::string::npos);
    CHECK(decode_error("nanovm-manifest 1\npart a 99999999999999999999999 00000000\nend 00000000\n")
              .find("line 2: part size") != std::string::npos);
    CHECK(decode_error("nanovm-manifest 1\npart a -1 00000000\nend 00000000\n").find("line 2: part size") !=
          std::string::npos);
    CHECK(decode_error("nanovm-manifest 1\npart a 1 0000000G\nend 00000000\n").find("line 2: part checksum") !=
          std::string::npos);
    CHECK(decode_error("nanovm-manifest 1\npart a 1 00000000\npart a 2 00000000\nend 00000000\n")
              .find("line 3: part a listed twice") != std::string::npos);
    CHECK(decode_error("nanovm-manifest 3\npart a 1 00000000\nend 00000000\n").find("newer nanovm") !=
          std::string::npos);
    CHECK(decode_error("nanovm-manifest 1\nend 00000000\n").find("line 2: checksum mismatch") != std::string::npos);
    CHECK(decode_error(std::string(kMaxManifestBytes + 1, 'x')).find("more than a manifest can have") !=
          std::string::npos);
    Manifest too_many;
    for (size_t i = 0; i <= kMaxParts; ++i) too_many.parts.push_back({"p" + std::to_string(i), 0, 0});
    CHECK_THROWS_AS(encode_manifest(too_many), Error);
    CHECK_THROWS_AS(encode_manifest(Manifest{{{"../x", 0, 0}}}), Error);
}

TEST_CASE("a part that does not match the manifest is refused naming the part", "[snapshot][manifest]") {
    test::TempDir dir("parts");
    write_text(dir.file("vm.state"), "state bytes");
    write_text(dir.file("memory.layer"), std::string(10000, 'x'));
    const Manifest m = write_manifest(dir.path(), {"vm.state", "memory.layer"});
    write_text(dir.file("memory.layer"), std::string(9999, 'x'));
    CHECK_THROWS_WITH(check_parts(dir.path(), m, PartCheck::sizes),
                      Catch::StartsWith(dir.file("memory.layer") + ": part has 9999 bytes"));
    std::filesystem::remove(dir.file("memory.layer"));
    CHECK_THROWS_WITH(check_parts(dir.path(), m, PartCheck::sizes),
                      Catch::StartsWith(dir.file("memory.layer") + ": part listed in the manifest is missing"));
}

TEST_CASE("check_parts_cached reads a part once: again only when its file changed", "[snapshot][manifest]") {
    test::TempDir dir("verified");
    write_text(dir.file("disk.layer"), std::string(8192, 'd'));
    write_text(dir.file("vm.state"), "state");
    const Manifest m = write_manifest(dir.path(), {"vm.state", "disk.layer"});
    CHECK(std::filesystem::exists(dir.file(kVerifiedFileName)));  // write_manifest read them all

    // Corrupt a byte but give the file back its mtime: the cache vouches for it, so it
    // is not read (the point of the cache: N restores of one snapshot read it once).
    const auto mtime = std::filesystem::last_write_time(dir.file("disk.layer"));
    {
        std::fstream f(dir.file("disk.layer"), std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(100);
        f.put('X');
    }
    std::filesystem::last_write_time(dir.file("disk.layer"), mtime);
    CHECK_NOTHROW(check_parts_cached(dir.path(), m, {"disk.layer"}));

    // A rewrite that moves the mtime is read again and refused, naming the part.
    std::filesystem::last_write_time(dir.file("disk.layer"), mtime + std::chrono::seconds(1));
    CHECK_THROWS_WITH(check_parts_cached(dir.path(), m, {"disk.layer"}),
                      Catch::Contains("disk.layer: part checksum mismatch"));
    // Without a cache every part is read; a part the manifest does not list is refused.
    std::filesystem::remove(dir.file(kVerifiedFileName));
    CHECK_THROWS_WITH(check_parts_cached(dir.path(), m, {"disk.layer"}), Catch::Contains("corrupt part"));
    CHECK_NOTHROW(check_parts_cached(dir.path(), m, {"vm.state"}));
    CHECK_THROWS_WITH(check_parts_cached(dir.path(), m, {"other"}), Catch::Contains("other is not listed"));
    // A damaged cache file is only a reason to read again.
    write_text(dir.file(kVerifiedFileName), "vm.state garbage\n\x01\x02");
    CHECK_NOTHROW(check_parts_cached(dir.path(), m, {"vm.state"}));
}

TEST_CASE("part_verified_cached: only the very file checked whole, without reading it", "[snapshot][manifest]") {
    test::TempDir dir("verified-cached");
    write_text(dir.file("memory.layer"), std::string(8192, 'm'));
    write_text(dir.file("vm.state"), "state");
    const Manifest m = write_manifest(dir.path(), {"vm.state", "memory.layer"});
    CHECK(part_verified_cached(dir.path(), m, "memory.layer"));
    CHECK_FALSE(part_verified_cached(dir.path(), m, "other"));  // not listed

    // Rewritten in place (the mtime moves): no longer vouched for.
    const auto mtime = std::filesystem::last_write_time(dir.file("memory.layer"));
    std::filesystem::last_write_time(dir.file("memory.layer"), mtime + std::chrono::seconds(1));
    CHECK_FALSE(part_verified_cached(dir.path(), m, "memory.layer"));
    std::filesystem::last_write_time(dir.file("memory.layer"), mtime);
    CHECK(part_verified_cached(dir.path(), m, "memory.layer"));

    // Another file swapped in under the name (another inode, same bytes and mtime): not either.
    write_text(dir.file("swap"), std::string(8192, 'm'));
    std::filesystem::last_write_time(dir.file("swap"), mtime);
    std::filesystem::rename(dir.file("swap"), dir.file("memory.layer"));
    CHECK_FALSE(part_verified_cached(dir.path(), m, "memory.layer"));

    // No cache, or a damaged one: false, never a throw.
    check_parts_cached(dir.path(), m, {"memory.layer"});  // reads the new file: same bytes, recorded
    CHECK(part_verified_cached(dir.path(), m, "memory.layer"));
    write_text(dir.file(kVerifiedFileName), "memory.layer garbage\n");
    CHECK_FALSE(part_verified_cached(dir.path(), m, "memory.layer"));
    std::filesystem::remove(dir.file(kVerifiedFileName));
    CHECK_FALSE(part_verified_cached(dir.path(), m, "memory.layer"));
}
