// `nanovm vm cp` operands (api/vm/copy_spec.hpp).
#include <catch2/catch.hpp>

#include "api/vm/copy_spec.hpp"
#include "vmm/error.hpp"

using namespace nanovm::vm;

TEST_CASE("cp operands: ID:/path is in a VM, anything else on the host", "[api][vm][cp]") {
    CHECK(parse_copy_location("3f9c:/etc/hosts") == CopyLocation{"3f9c", "/etc/hosts"});
    CHECK(parse_copy_location("3f9c0a1b2c4d:/a:b") == CopyLocation{"3f9c0a1b2c4d", "/a:b"});
    CHECK(parse_copy_location("./3f9c:/x") == CopyLocation{std::nullopt, "./3f9c:/x"});
    CHECK(parse_copy_location("notes.txt") == CopyLocation{std::nullopt, "notes.txt"});
    CHECK(parse_copy_location("host:/x") == CopyLocation{std::nullopt, "host:/x"});  // 'h' is not hex
    CHECK(parse_copy_location("/tmp/a") == CopyLocation{std::nullopt, "/tmp/a"});
}

TEST_CASE("cp operands: a relative or empty guest path is refused", "[api][vm][cp]") {
    CHECK_THROWS_WITH(parse_copy_location("3f9c:etc/x"), Catch::Contains("must be absolute"));
    CHECK_THROWS_WITH(parse_copy_location("3f9c:"), Catch::Contains("must be absolute"));
    CHECK_THROWS_AS(parse_copy_location(""), nanovm::Error);
}

TEST_CASE("cp needs exactly one side in a VM", "[api][vm][cp]") {
    const CopySpec in = parse_copy_spec("a.txt", "abc:/root/a.txt");
    CHECK(in.into_guest());
    CHECK(in.to.path == "/root/a.txt");
    const CopySpec out = parse_copy_spec("abc:/root/a.txt", "a.txt");
    CHECK_FALSE(out.into_guest());
    CHECK(*out.from.vm == "abc");
    CHECK_THROWS_WITH(parse_copy_spec("a:/x", "b:/y"), Catch::Contains("one side must be a host path"));
    CHECK_THROWS_WITH(parse_copy_spec("x", "y"), Catch::Contains("ID:/GUEST_PATH"));
}

TEST_CASE("path_basename is what follows the last slash", "[api][vm][cp]") {
    CHECK(path_basename("/a/b/c.txt") == "c.txt");
    CHECK(path_basename("c.txt") == "c.txt");
    CHECK(path_basename("/a/") == "");
}
