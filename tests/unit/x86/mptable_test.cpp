// write_mptable(): MP spec 1.4 floating pointer + configuration table, parsed here
// from the spec's byte offsets.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>

#include "tests/unit/x86/gpa_printer.hpp"
#include "vmm/error.hpp"
#include "vmm/x86/boot.hpp"

using namespace nanovm;
using namespace nanovm::x86;

namespace {

uint8_t byte_sum(std::span<const uint8_t> bytes) {
    unsigned sum = 0;
    for (uint8_t b : bytes) sum += b;
    return static_cast<uint8_t>(sum);
}

template <typename T>
T at(std::span<const uint8_t> bytes, size_t offset) {
    T v;
    std::memcpy(&v, bytes.data() + offset, sizeof v);
    return v;
}

struct ParsedTable {
    std::span<const uint8_t> fp, config;
    struct Cpu { uint8_t apic_id, version, flags; };
    struct Irq { uint8_t type, irq_type; uint16_t flags; uint8_t bus, src, dst_apic, dst_pin; };
    std::vector<Cpu> cpus;
    std::vector<std::string> buses;
    std::vector<uint8_t> ioapic_ids;
    std::vector<uint32_t> ioapic_addresses;
    std::vector<uint8_t> ioapic_versions;
    std::vector<Irq> io_irqs, local_irqs;
    size_t entries = 0;
};

ParsedTable parse(const GuestMemory& mem) {
    ParsedTable t;
    t.fp = mem.slice(layout::kMpTable, 16);
    const uint32_t config_at = at<uint32_t>(t.fp, 4);
    const uint16_t length = mem.read<uint16_t>(Gpa(config_at + 4));
    t.config = mem.slice(Gpa(config_at), length);
    size_t off = 44;
    while (off < t.config.size()) {
        const uint8_t type = t.config[off];
        ++t.entries;
        switch (type) {
        case 0:
            t.cpus.push_back({t.config[off + 1], t.config[off + 2], t.config[off + 3]});
            off += 20;
            break;
        case 1:
            t.buses.emplace_back(reinterpret_cast<const char*>(&t.config[off + 2]), 6);
            off += 8;
            break;
        case 2:
            t.ioapic_ids.push_back(t.config[off + 1]);
            t.ioapic_versions.push_back(t.config[off + 2]);
            REQUIRE(t.config[off + 3] == 1);  // enabled
            t.ioapic_addresses.push_back(at<uint32_t>(t.config, off + 4));
            off += 8;
            break;
        case 3:
        case 4: {
            const ParsedTable::Irq irq{type, t.config[off + 1], at<uint16_t>(t.config, off + 2), t.config[off + 4],
                                       t.config[off + 5], t.config[off + 6], t.config[off + 7]};
            (type == 3 ? t.io_irqs : t.local_irqs).push_back(irq);
            off += 8;
            break;
        }
        default:
            FAIL("unknown MP entry type " << int(type));
        }
    }
    REQUIRE(off == t.config.size());
    return t;
}

}  // namespace

TEST_CASE("MP table: both checksums sum to 0 and the header is MP 1.4", "[x86][mptable]") {
    auto mem = GuestMemory::create(128 * MiB);
    const uint32_t vcpus = GENERATE(1u, 2u, 4u, 32u);
    CAPTURE(vcpus);
    write_mptable(mem, vcpus);
    const ParsedTable t = parse(mem);

    CHECK(std::memcmp(t.fp.data(), "_MP_", 4) == 0);
    CHECK(t.fp[8] == 1);   // length: one 16-byte paragraph
    CHECK(t.fp[9] == 4);   // spec rev 1.4
    CHECK(t.fp[11] == 0);  // feature1: the configuration table is present
    CHECK(byte_sum(t.fp) == 0);

    CHECK(std::memcmp(t.config.data(), "PCMP", 4) == 0);
    CHECK(t.config[6] == 4);
    CHECK(std::memcmp(t.config.data() + 8, "NANOVM  ", 8) == 0);
    CHECK(at<uint32_t>(t.config, 36) == 0xfee00000);  // local APIC address
    CHECK(at<uint16_t>(t.config, 34) == t.entries);   // entry count
    CHECK(byte_sum(t.config) == 0);

    // Everything lies in [EBDA, 640 KiB), which e820 reserves.
    const uint64_t config_at = at<uint32_t>(t.fp, 4);
    CHECK(config_at >= layout::kEbdaStart.value);
    CHECK(config_at + t.config.size() <= 0xa0000);
}

TEST_CASE("MP table: one enabled processor per vCPU, APIC ids 0..n-1, exactly one BSP", "[x86][mptable]") {
    auto mem = GuestMemory::create(128 * MiB);
    const uint32_t vcpus = GENERATE(1u, 3u, 32u);
    CAPTURE(vcpus);
    write_mptable(mem, vcpus);
    const ParsedTable t = parse(mem);

    REQUIRE(t.cpus.size() == vcpus);
    int bsps = 0;
    for (size_t i = 0; i < t.cpus.size(); ++i) {
        CHECK(t.cpus[i].apic_id == i);
        CHECK((t.cpus[i].flags & 1) == 1);  // enabled
        CHECK(t.cpus[i].version == 0x14);
        if (t.cpus[i].flags & 2) {
            ++bsps;
            CHECK(t.cpus[i].apic_id == 0);
        }
    }
    CHECK(bsps == 1);
}

TEST_CASE("MP table: ISA bus, IOAPIC after the CPUs, IRQ n -> pin n, ExtINT/NMI on LINT0/1", "[x86][mptable]") {
    auto mem = GuestMemory::create(128 * MiB);
    write_mptable(mem, 4);
    const ParsedTable t = parse(mem);

    REQUIRE(t.buses.size() == 1);
    CHECK(t.buses[0] == "ISA   ");
    REQUIRE(t.ioapic_ids.size() == 1);
    CHECK(t.ioapic_ids[0] == 4);
    CHECK(t.ioapic_versions[0] == 0x11);
    CHECK(t.ioapic_addresses[0] == 0xfec00000);

    REQUIRE(t.io_irqs.size() == 24);
    for (size_t i = 0; i < 24; ++i) {
        CAPTURE(i);
        CHECK(t.io_irqs[i].irq_type == 0);  // INT
        CHECK(t.io_irqs[i].flags == 0);     // conforms to the bus
        CHECK(t.io_irqs[i].bus == 0);
        CHECK(t.io_irqs[i].src == i);
        CHECK(t.io_irqs[i].dst_apic == 4);
        CHECK(t.io_irqs[i].dst_pin == i);
    }
    REQUIRE(t.local_irqs.size() == 2);
    CHECK(t.local_irqs[0].irq_type == 3);   // ExtINT
    CHECK(t.local_irqs[0].dst_apic == 0xff);
    CHECK(t.local_irqs[0].dst_pin == 0);    // LINT0
    CHECK(t.local_irqs[1].irq_type == 1);   // NMI
    CHECK(t.local_irqs[1].dst_apic == 0xff);
    CHECK(t.local_irqs[1].dst_pin == 1);    // LINT1
}

TEST_CASE("MP table: a smaller table leaves nothing of a bigger earlier one", "[x86][mptable]") {
    auto mem = GuestMemory::create(128 * MiB);
    write_mptable(mem, 32);
    write_mptable(mem, 1);
    const ParsedTable t = parse(mem);
    const uint64_t end = at<uint32_t>(t.fp, 4) + t.config.size();
    const auto rest = mem.slice(Gpa(end), 0xa0000 - end);
    CHECK(std::all_of(rest.begin(), rest.end(), [](uint8_t b) { return b == 0; }));
}

TEST_CASE("MP table: 0 or more than 32 vCPUs are rejected", "[x86][mptable]") {
    auto mem = GuestMemory::create(128 * MiB);
    CHECK_THROWS_AS(write_mptable(mem, 0), Error);
    CHECK_THROWS_AS(write_mptable(mem, 33), Error);
}
