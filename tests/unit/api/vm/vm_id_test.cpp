// Sandbox ids (api/vm/vm_id.hpp).
#include <catch2/catch.hpp>

#include <set>

#include "api/vm/vm_id.hpp"

using namespace nanovm::vm;

TEST_CASE("new VM ids are 12 lowercase hex digits and differ", "[api][vm]") {
    std::set<std::string> seen;
    for (int i = 0; i < 200; ++i) {
        const std::string id = new_vm_id();
        CHECK(is_vm_id(id));
        seen.insert(id);
    }
    CHECK(seen.size() == 200);
}

TEST_CASE("only hex digits of the right length are ids or id prefixes", "[api][vm]") {
    CHECK(is_vm_id("0123456789ab"));
    CHECK_FALSE(is_vm_id("0123456789a"));
    CHECK_FALSE(is_vm_id("0123456789abc"));
    CHECK_FALSE(is_vm_id("0123456789AB"));
    CHECK_FALSE(is_vm_id("../../etc/pw"));
    CHECK(is_vm_id_prefix("a"));
    CHECK(is_vm_id_prefix("0123456789ab"));
    CHECK_FALSE(is_vm_id_prefix(""));
    CHECK_FALSE(is_vm_id_prefix("0123456789abc"));
    CHECK_FALSE(is_vm_id_prefix("g"));
    CHECK_FALSE(is_vm_id_prefix("ab/"));
    CHECK_FALSE(is_vm_id_prefix(std::string("ab\0c", 4)));
}
