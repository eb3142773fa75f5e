// The vm.state container: round trip, and every truncation, flipped byte, newer
// version and unknown section refused with a message naming the part.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "snapshot/crc32c.hpp"
#include "snapshot/snapshot_error.hpp"
#include "snapshot/state_file.hpp"

using namespace nanovm::snapshot;

namespace {

std::vector<uint8_t> sample_file() {
    StateWriter w;
    const std::vector<uint8_t> a = {1, 2, 3, 4, 5};
    const std::vector<uint8_t> b(300, 0xab);
    w.add(SectionType::machine, 0, a);
    w.add(SectionType::vcpu_regs, 1, b);
    w.add(SectionType::clock, 0, {});
    return w.finish();
}

std::string error_of(const std::vector<uint8_t>& file) {
    try {
        parse_state_file(file, "vm.state");
    } catch (const SnapshotError& e) {
        return e.what();
    }
    return "";
}

// Rewrites the header's version and re-checksums it (what a newer writer would do).
void set_version(std::vector<uint8_t>& file, uint32_t version) {
    std::memcpy(file.data() + 8, &version, 4);
    const uint32_t crc = crc32c({file.data(), 28});
    std::memcpy(file.data() + 28, &crc, 4);
}

}  // namespace

TEST_CASE("crc32c matches the RFC 3720 check value", "[snapshot][unit]") {
    const std::string check = "123456789";
    CHECK(crc32c({reinterpret_cast<const uint8_t*>(check.data()), check.size()}) == 0xE3069283u);
    // Continuing over two halves gives the same value as one pass.
    const auto* p = reinterpret_cast<const uint8_t*>(check.data());
    CHECK(crc32c({p + 4, 5}, crc32c({p, 4})) == 0xE3069283u);
}

TEST_CASE("crc32c_zeros extends a CRC over zero bytes without reading them", "[snapshot][unit]") {
    const std::string check = "123456789";
    const auto* p = reinterpret_cast<const uint8_t*>(check.data());
    for (const uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{7}, uint64_t{4096}, uint64_t{100003}, uint64_t{1} << 20}) {
        std::vector<uint8_t> bytes(check.begin(), check.end());
        bytes.resize(bytes.size() + n, 0);
        INFO(n << " zero bytes");
        CHECK(crc32c_zeros(crc32c({p, 9}), n) == crc32c(bytes));
        CHECK(crc32c_zeros(0, n) == crc32c({bytes.data() + 9, n}));  // zeros from the start
    }
}

TEST_CASE("crc32c_combine joins two CRCs without the bytes", "[snapshot][unit]") {
    std::vector<uint8_t> bytes(3 * 4096 + 17);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
    for (const size_t cut : {size_t{0}, size_t{1}, size_t{4096}, size_t{5000}, bytes.size()}) {
        INFO("cut at " << cut);
        const std::span<const uint8_t> a(bytes.data(), cut), b(bytes.data() + cut, bytes.size() - cut);
        CHECK(crc32c_combine(crc32c(a), crc32c(b), b.size()) == crc32c(bytes));
        CHECK(crc32c_combine_with(crc32c_combine_op(b.size()), crc32c(a), crc32c(b)) == crc32c(bytes));
    }
    CHECK(crc32c_combine(crc32c({bytes.data(), 9}), 0, 0) == crc32c({bytes.data(), 9}));
}

TEST_CASE("a state file round-trips its sections in order", "[snapshot][unit]") {
    const std::vector<uint8_t> file = sample_file();
    const auto sections = parse_state_file(file, "vm.state");
    REQUIRE(sections.size() == 3);
    CHECK(sections[0].type == static_cast<uint32_t>(SectionType::machine));
    CHECK(std::vector<uint8_t>(sections[0].payload.begin(), sections[0].payload.end()) ==
          std::vector<uint8_t>{1, 2, 3, 4, 5});
    CHECK(sections[1].instance == 1);
    CHECK(sections[1].payload.size() == 300);
    CHECK(sections[2].payload.empty());
}

TEST_CASE("every truncation of a state file is refused with a message", "[snapshot][unit]") {
    const std::vector<uint8_t> file = sample_file();
    for (size_t n = 0; n < file.size(); ++n) {
        const std::vector<uint8_t> cut(file.begin(), file.begin() + static_cast<long>(n));
        const std::string message = error_of(cut);
        INFO("truncated to " << n << " bytes");
        CHECK(message.find("vm.state: ") == 0);
        CHECK(message.find("truncated") != std::string::npos);
    }
}

TEST_CASE("every flipped byte of a state file is refused, naming the header or the section", "[snapshot][unit]") {
    const std::vector<uint8_t> file = sample_file();
    for (size_t i = 0; i < file.size(); ++i) {
        std::vector<uint8_t> bad = file;
        bad[i] ^= 0x5a;
        const std::string message = error_of(bad);
        INFO("byte " << i << ": " << message);
        REQUIRE_FALSE(message.empty());
        if (i >= 32) CHECK(message.find("section") != std::string::npos);
    }
    // A flip inside the second section's payload names that section.
    std::vector<uint8_t> bad = file;
    bad[32 + 24 + 5 + 24 + 100] ^= 1;
    CHECK(error_of(bad).rfind("vm.state: section 1 (vcpu 1 regs): checksum mismatch", 0) == 0);
}

TEST_CASE("a state file of a newer format version is refused with a clear message", "[snapshot][unit]") {
    std::vector<uint8_t> file = sample_file();
    set_version(file, kStateFormatVersion + 1);
    const std::string message = error_of(file);
    CHECK(message.find("format version 2 was written by a newer nanovm") != std::string::npos);
}

TEST_CASE("unknown optional sections are skipped; unknown required ones are refused", "[snapshot][unit]") {
    StateWriter optional;
    optional.add(static_cast<SectionType>(kOptionalSection | 0x77), 0, std::vector<uint8_t>{9});
    optional.add(SectionType::clock, 0, {});
    const std::vector<uint8_t> file = optional.finish();
    const auto sections = parse_state_file(file, "vm.state");
    REQUIRE(sections.size() == 1);
    CHECK(sections[0].type == static_cast<uint32_t>(SectionType::clock));

    StateWriter required;
    required.add(static_cast<SectionType>(0x77), 0, std::vector<uint8_t>{9});
    CHECK(error_of(required.finish()).find("section 0 (type 0x77 instance 0): unknown required section type") !=
          std::string::npos);
}

TEST_CASE("a file that is not a state file is refused as such", "[snapshot][unit]") {
    std::vector<uint8_t> junk(64, 'x');
    CHECK(error_of(junk) == "vm.state: not a nanovm state file (bad magic)");
}
