// vmm/printable.hpp: guest text made safe for one line on a terminal.
#include <catch2/catch.hpp>

#include <string>

#include "vmm/printable.hpp"

using nanovm::printable;

TEST_CASE("printable keeps printable ASCII and UTF-8 text as it is", "[printable]") {
    CHECK(printable("open /etc/x: ENOENT") == "open /etc/x: ENOENT");
    CHECK(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\xa7") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\xa7");
    CHECK(printable("a\\x1b b") == "a\\x1b b");  // a backslash stays: the result is for reading
    CHECK(printable("") == "");
}

TEST_CASE("printable escapes controls, escape sequences and line breaks", "[printable]") {
    CHECK(printable("\x1b[2J\x1b]0;title\x07") == "\\x1b[2J\\x1b]0;title\\x07");
    CHECK(printable("one\ntwo\rthree\tfour") == "one\\x0atwo\\x0dthree\\x09four");
    CHECK(printable(std::string("nul\0byte", 8)) == "nul\\x00byte");
    CHECK(printable("\x7f") == "\\x7f");
}

TEST_CASE("printable escapes C1 controls, bidi and zero-width characters, and malformed UTF-8", "[printable]") {
    CHECK(printable("\xc2\x9b" "31m") == "\\xc2\\x9b31m");               // CSI as a C1 control
    CHECK(printable("a\xe2\x80\xae" "b") == "a\\xe2\\x80\\xaeb");            // RIGHT-TO-LEFT OVERRIDE
    CHECK(printable("\xe2\x81\xa6x\xe2\x81\xa9") == "\\xe2\\x81\\xa6x\\xe2\\x81\\xa9");  // isolates
    CHECK(printable("a\xe2\x80\x8b") == "a\\xe2\\x80\\x8b");              // ZERO WIDTH SPACE
    CHECK(printable("\xe2\x80\xa8") == "\\xe2\\x80\\xa8");                // LINE SEPARATOR
    CHECK(printable("\xff\xfe") == "\\xff\\xfe");                         // never UTF-8
    CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");                         // overlong '/'
    CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");                // a surrogate
    CHECK(printable("\xe2\x82") == "\\xe2\\x82");                         // truncated at the end
    CHECK(printable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");       // above U+10FFFF
}

TEST_CASE("printable is idempotent", "[printable]") {
    for (const std::string s : {"\x1b[31mred\n", "ok", "a\\b", "\xc2\x9b\xff"}) {
        const std::string once = printable(s);
        CHECK(printable(once) == once);
    }
}
