// vmm/text_encoding.hpp: output bytes as base64 or as valid UTF-8 (nanovmd's
// output_encoding).
#include <catch2/catch.hpp>

#include <string>

#include "vmm/text_encoding.hpp"

using namespace nanovm;
using namespace std::string_literals;

namespace {

const std::string kFffd = "\xef\xbf\xbd";

}  // namespace

TEST_CASE("base64 encodes RFC 4648's test vectors and decodes them back", "[text_encoding]") {
    // RFC 4648 section 10.
    const std::pair<std::string, std::string> vectors[] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                                                           {"foo", "Zm9v"},  {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                                                           {"foobar", "Zm9vYmFy"}};
    for (const auto& [plain, encoded] : vectors) {
        CHECK(base64_encode(plain) == encoded);
        CHECK(base64_decode(encoded) == plain);
    }
    CHECK(base64_encode("\xff\xfe\x00\x80"s) == "//4AgA==");
}

TEST_CASE("base64 round-trips every byte value exactly", "[text_encoding]") {
    std::string all;
    for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
    for (size_t n = 0; n <= all.size(); n += 37) CHECK(base64_decode(base64_encode(all.substr(0, n))) == all.substr(0, n));
}

TEST_CASE("base64_decode refuses what base64_encode never makes", "[text_encoding]") {
    CHECK_FALSE(base64_decode("Zg=").has_value());       // not a multiple of 4
    CHECK_FALSE(base64_decode("Zg==Zg==").has_value());  // padding before the end
    CHECK_FALSE(base64_decode("Z===").has_value());
    CHECK_FALSE(base64_decode("Zm9v\n").has_value());
    CHECK_FALSE(base64_decode("Zm-v").has_value());      // the URL alphabet
    CHECK_FALSE(base64_decode("Zg=a").has_value());
}

TEST_CASE("utf8_sanitize keeps valid text and replaces each maximal invalid subpart by U+FFFD", "[text_encoding]") {
    CHECK(utf8_sanitize("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\xa7") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\xa7");
    CHECK(utf8_sanitize("a\xff" "b") == "a" + kFffd + "b");
    CHECK(utf8_sanitize("\x80\x80") == kFffd + kFffd);              // stray continuations: one each
    CHECK(utf8_sanitize("\xc0\xaf") == kFffd + kFffd);              // overlong '/'
    CHECK(utf8_sanitize("\xe0\x80\xaf") == kFffd + kFffd + kFffd);  // overlong: E0 needs A0..BF next
    CHECK(utf8_sanitize("\xed\xa0\x80") == kFffd + kFffd + kFffd);  // a surrogate
    CHECK(utf8_sanitize("\xf4\x90\x80\x80") == kFffd + kFffd + kFffd + kFffd);  // above U+10FFFF
    CHECK(utf8_sanitize("\xe2\x82" "x") == kFffd + "x");            // truncated: one U+FFFD for the subpart
    CHECK(utf8_sanitize("x\xf0\x9f\x90") == "x" + kFffd);           // truncated at the end
    CHECK(utf8_sanitize(std::string("nul\0!", 5)) == std::string("nul\0!", 5));
}

TEST_CASE("Utf8Sanitizer keeps a character cut between two chunks whole", "[text_encoding]") {
    const std::string text = "\xe2\x82\xac\xf0\x9f\x90\xa7!";
    for (size_t cut = 0; cut <= text.size(); ++cut) {
        Utf8Sanitizer s;
        std::string out = s.feed(text.substr(0, cut));
        out += s.feed(text.substr(cut));
        out += s.finish();
        CHECK(out == text);
    }
    Utf8Sanitizer s;
    CHECK(s.feed("a\xe2") == "a");
    CHECK(s.feed("\x82") == "");
    CHECK(s.finish() == kFffd);  // never completed
    CHECK(s.feed("b") == "b");
}
