// The VMM's unpacking of a bzImage's LZ4 vmlinux (vmm/x86/bzimage_unpack.cpp): LZ4
// blocks decoded to known bytes, malformed blocks refused; payloads it does not
// unpack left to the guest's decompressor. The real kernel's unpack is checked in
// real_kernel_test.cpp (NANOVM_KERNEL_DIR).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tests/unit/x86/fake_kernels.hpp"
#include "vmm/error.hpp"
#include "vmm/x86/kernel_formats.hpp"

using namespace nanovm;
using nanovm::x86::detail::lz4_block_decompress;

namespace {

std::string decode(const std::vector<uint8_t>& block, size_t room = 64) {
    std::vector<uint8_t> out(room, 0xee);
    const size_t n = lz4_block_decompress(block, out);
    return std::string(out.begin(), out.begin() + static_cast<long>(n));
}

std::string decode_error(const std::vector<uint8_t>& block, size_t room = 64) {
    try {
        decode(block, room);
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("LZ4 block: literals only", "[x86][kernel][lz4]") {
    CHECK(decode({0x50, 'h', 'e', 'l', 'l', 'o'}) == "hello");
}

TEST_CASE("LZ4 block: a match overlapping its own output repeats the last bytes", "[x86][kernel][lz4]") {
    // "ab", then a match at offset 2 of 1 + 4 bytes, then the closing literal "!".
    CHECK(decode({0x21, 'a', 'b', 0x02, 0x00, 0x10, '!'}) == "abababa!");
    // offset 1: a run of one byte, 15 + 3 + 4 = 22 long.
    CHECK(decode({0x1f, 'z', 0x01, 0x00, 0x03}) == std::string(23, 'z'));
}

TEST_CASE("LZ4 block: a far match copies earlier bytes", "[x86][kernel][lz4]") {
    // 10 literals, then 8 bytes from offset 10 (4 + 4), then "." : no overlap.
    CHECK(decode({0xa4, '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 0x0a, 0x00, 0x10, '.'}) ==
          "012345678901234567.");
}

TEST_CASE("LZ4 block: a literal length of 15 goes on in the next bytes", "[x86][kernel][lz4]") {
    std::vector<uint8_t> block{0xf0, 0x05};  // 15 + 5 = 20 literals
    for (char c : std::string("abcdefghijklmnopqrst")) block.push_back(static_cast<uint8_t>(c));
    CHECK(decode(block) == "abcdefghijklmnopqrst");
}

TEST_CASE("LZ4 block: malformed blocks are refused with a reason", "[x86][kernel][lz4]") {
    CHECK(decode_error({0x10, 'a', 0x00, 0x00}) == "kernel image: LZ4 block: match offset before the output");
    CHECK(decode_error({0x10, 'a', 0x02, 0x00}) == "kernel image: LZ4 block: match offset before the output");
    CHECK(decode_error({0x50, 'h', 'i'}) == "kernel image: LZ4 block: literals past the input");
    CHECK(decode_error({0x50, 'h', 'e', 'l', 'l', 'o'}, 3) == "kernel image: LZ4 block: literals past the output");
    CHECK(decode_error({0x1f, 'z', 0x01, 0x00, 0x03}, 20) == "kernel image: LZ4 block: match past the output");
    CHECK(decode_error({0x1f, 'z', 0x01, 0x00, 0x03}, 10) == "kernel image: LZ4 block: length beyond the output");
    CHECK(decode_error({0x10, 'a', 0x01}) == "kernel image: LZ4 block: truncated match offset");
    CHECK(decode_error({0xf0}) == "kernel image: LZ4 block: truncated length");
}

TEST_CASE("a bzImage whose payload is not LZ4 is left to the guest's decompressor", "[x86][kernel][lz4]") {
    const auto image = nanovm::x86::test::FakeBzImage{}.build();
    CHECK_FALSE(nanovm::x86::detail::unpack_bzimage_vmlinux(image).has_value());
}
