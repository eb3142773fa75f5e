// Template names (api/daemon/template/template_manager.hpp): the names POST
// /v1/templates takes, and the implicit templates' names, which it never takes.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "api/daemon/template/template_manager.hpp"

namespace {

using nanovm::daemon::implicit_template_name;
using nanovm::daemon::valid_template_name;

TEST_CASE("template names: 1 to 63 of a-z 0-9 . _ -, starting with a letter or digit", "[daemon][template]") {
    for (const std::string& good : std::vector<std::string>{"a", "py", "py-3.12", "ml_base", "0day", std::string(63, 'x')}) {
        INFO(good);
        CHECK(valid_template_name(good));
    }
    for (const std::string& bad : std::vector<std::string>{"", "-a", ".a", "_a", "Py", "a/b", "a b", "a:b", "../x", std::string(64, 'x'),
                                  std::string("nul\0x", 5), "é"}) {
        INFO(bad);
        CHECK_FALSE(valid_template_name(bad));
    }
}

TEST_CASE("implicit template names carry the image and shape, and are never a valid named template",
          "[daemon][template]") {
    CHECK(implicit_template_name("default", 1, 256) == "auto:default:1x256");
    CHECK(implicit_template_name("tiny", 4, 8192) == "auto:tiny:4x8192");
    CHECK_FALSE(valid_template_name(implicit_template_name("default", 2, 1024)));
}

}  // namespace
