// write_mptable(): an MP spec 1.4 table, so the kernel finds every vCPU's local APIC
// and the IOAPIC without ACPI. Linux looks for the floating pointer in the last KiB
// of base memory (639 KiB = 0x9fc00), where it goes; the configuration table follows.
#include <cstddef>
#include <cstring>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "vmm/error.hpp"
#include "vmm/x86/boot.hpp"
#include "vmm/x86/mptable_layout.hpp"

namespace nanovm::x86 {

namespace {

constexpr uint64_t kBaseMemoryEnd = 0xa0000;  ///< 640 KiB
constexpr uint32_t kCpuSignature = 0x600;     ///< family 6, model 0, stepping 0
constexpr uint32_t kCpuFeatures = (1u << 0) | (1u << 9);  ///< FPU, APIC
constexpr uint8_t kIsaBusId = 0;

static_assert(layout::kMpTable >= layout::kEbdaStart, "the MP table must be in the e820-reserved area");
static_assert(layout::kMpTable.value + mp::table_size(mp::kMaxVcpus) <= kBaseMemoryEnd,
              "the MP table for the largest guest does not fit below 640 KiB");

uint8_t checksum(const uint8_t* bytes, size_t len) {
    const unsigned sum = std::accumulate(bytes, bytes + len, 0u);
    return static_cast<uint8_t>(-sum);
}

template <typename T>
void append(std::vector<uint8_t>& out, const T& value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    out.insert(out.end(), p, p + sizeof(T));
}

mp::Interrupt interrupt(uint8_t type, uint8_t irq_type, uint8_t src_irq, uint8_t dst_apic, uint8_t dst_pin) {
    mp::Interrupt e{};
    e.type = type;
    e.irq_type = irq_type;
    e.flags = 0;
    e.src_bus = kIsaBusId;
    e.src_irq = src_irq;
    e.dst_apic = dst_apic;
    e.dst_pin = dst_pin;
    return e;
}

/// Configuration table (header + base entries) with its checksum set.
std::vector<uint8_t> config_table(uint32_t vcpus) {
    std::vector<uint8_t> entries;
    uint16_t count = 0;
    for (uint32_t i = 0; i < vcpus; ++i, ++count) {
        mp::Processor cpu{};
        cpu.type = mp::kProcessor;
        cpu.lapic_id = static_cast<uint8_t>(i);
        cpu.lapic_version = mp::kLapicVersion;
        cpu.flags = mp::kCpuEnabled | (i == 0 ? mp::kCpuBootstrap : 0);
        cpu.signature = kCpuSignature;
        cpu.features = kCpuFeatures;
        append(entries, cpu);
    }
    mp::Bus bus{};
    bus.type = mp::kBus;
    bus.bus_id = kIsaBusId;
    std::memcpy(bus.bus_type, "ISA   ", sizeof bus.bus_type);
    append(entries, bus);
    ++count;

    const auto ioapic_id = static_cast<uint8_t>(vcpus);  // after the local APIC ids
    mp::Ioapic ioapic{};
    ioapic.type = mp::kIoapic;
    ioapic.id = ioapic_id;
    ioapic.version = mp::kIoapicVersion;
    ioapic.flags = mp::kIoapicEnabled;
    ioapic.address = static_cast<uint32_t>(layout::kIoapicBase);
    append(entries, ioapic);
    ++count;

    // KVM routes GSI n to IOAPIC pin n, ISA IRQs included (the PIT is GSI 0).
    for (uint8_t irq = 0; irq < mp::kIoapicPins; ++irq, ++count)
        append(entries, interrupt(mp::kIoInterrupt, mp::kIntInt, irq, ioapic_id, irq));
    append(entries, interrupt(mp::kLocalInterrupt, mp::kIntExtInt, 0, mp::kAllLapics, 0));  // LINT0
    append(entries, interrupt(mp::kLocalInterrupt, mp::kIntNmi, 0, mp::kAllLapics, 1));     // LINT1
    count += 2;

    mp::ConfigHeader header{};
    std::memcpy(header.signature, "PCMP", 4);
    header.base_length = static_cast<uint16_t>(sizeof header + entries.size());
    header.spec_rev = mp::kSpecRev;
    std::memcpy(header.oem_id, "NANOVM  ", sizeof header.oem_id);
    std::memcpy(header.product_id, "NANOVM KVM  ", sizeof header.product_id);
    header.entry_count = count;
    header.lapic_address = static_cast<uint32_t>(layout::kLapicBase);

    std::vector<uint8_t> table;
    append(table, header);
    table.insert(table.end(), entries.begin(), entries.end());
    table[offsetof(mp::ConfigHeader, checksum)] = checksum(table.data(), table.size());
    return table;
}

}  // namespace

void write_mptable(GuestMemory& mem, uint32_t vcpus) {
    if (vcpus == 0 || vcpus > mp::kMaxVcpus)
        throw Error(fmt::format("MP table: {} vCPUs is outside 1..{}", vcpus, mp::kMaxVcpus));

    const uint64_t config_address = layout::kMpTable.value + sizeof(mp::FloatingPointer);
    mp::FloatingPointer fp{};
    std::memcpy(fp.signature, "_MP_", 4);
    fp.config_table = static_cast<uint32_t>(config_address);
    fp.length = 1;
    fp.spec_rev = mp::kSpecRev;
    fp.checksum = checksum(reinterpret_cast<const uint8_t*>(&fp), sizeof fp);

    // Clear the whole area first so nothing stale (an earlier boot's bigger table) stays.
    std::vector<uint8_t> area(kBaseMemoryEnd - layout::kMpTable.value, 0);
    std::memcpy(area.data(), &fp, sizeof fp);
    const std::vector<uint8_t> config = config_table(vcpus);
    std::memcpy(area.data() + sizeof fp, config.data(), config.size());
    mem.write_bytes(layout::kMpTable, area);
}

}  // namespace nanovm::x86
