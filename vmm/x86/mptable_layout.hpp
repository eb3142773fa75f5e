// Internal to vmm/x86/: the byte layout of the Intel MultiProcessor Specification 1.4
// structures (chapter 4: floating pointer, configuration table header, base table
// entries). Sizes are pinned by static_asserts.
#pragma once

#include <cstdint>

namespace nanovm::x86::mp {

inline constexpr uint8_t kSpecRev = 4;            ///< MP spec 1.4
inline constexpr uint8_t kLapicVersion = 0x14;    ///< integrated local APIC
inline constexpr uint8_t kIoapicVersion = 0x11;
inline constexpr uint8_t kIoapicPins = 24;        ///< KVM's in-kernel IOAPIC
inline constexpr uint32_t kMaxVcpus = 32;

// Entry types (table 4-3).
inline constexpr uint8_t kProcessor = 0;
inline constexpr uint8_t kBus = 1;
inline constexpr uint8_t kIoapic = 2;
inline constexpr uint8_t kIoInterrupt = 3;
inline constexpr uint8_t kLocalInterrupt = 4;

// Interrupt types (table 4-8).
inline constexpr uint8_t kIntInt = 0;
inline constexpr uint8_t kIntNmi = 1;
inline constexpr uint8_t kIntExtInt = 3;

inline constexpr uint8_t kCpuEnabled = 0x01;
inline constexpr uint8_t kCpuBootstrap = 0x02;
inline constexpr uint8_t kIoapicEnabled = 0x01;
inline constexpr uint8_t kAllLapics = 0xff;  ///< destination "all local APICs"

#pragma pack(push, 1)

struct FloatingPointer {  // 16 bytes
    char signature[4];     // "_MP_"
    uint32_t config_table;  // physical address of the configuration table
    uint8_t length;        // in 16-byte paragraphs: 1
    uint8_t spec_rev;
    uint8_t checksum;      // all 16 bytes sum to 0
    uint8_t feature1;      // 0: a configuration table is present
    uint8_t feature2;      // bit 7 IMCRP = 0: virtual wire mode
    uint8_t feature3_5[3];
};

struct ConfigHeader {  // 44 bytes
    char signature[4];  // "PCMP"
    uint16_t base_length;  // header + base entries, bytes
    uint8_t spec_rev;
    uint8_t checksum;   // the whole base table sums to 0
    char oem_id[8];
    char product_id[12];
    uint32_t oem_table;
    uint16_t oem_table_size;
    uint16_t entry_count;
    uint32_t lapic_address;
    uint16_t ext_length;
    uint8_t ext_checksum;
    uint8_t reserved;
};

struct Processor {  // 20 bytes
    uint8_t type;
    uint8_t lapic_id;
    uint8_t lapic_version;
    uint8_t flags;
    uint32_t signature;  // CPUID family/model/stepping
    uint32_t features;   // CPUID.1 EDX
    uint8_t reserved[8];
};

struct Bus {  // 8 bytes
    uint8_t type;
    uint8_t bus_id;
    char bus_type[6];
};

struct Ioapic {  // 8 bytes
    uint8_t type;
    uint8_t id;
    uint8_t version;
    uint8_t flags;
    uint32_t address;
};

struct Interrupt {  // 8 bytes: I/O (type 3) and local (type 4) interrupt assignments
    uint8_t type;
    uint8_t irq_type;
    uint16_t flags;  // polarity / trigger; 0 = conforms to the bus
    uint8_t src_bus;
    uint8_t src_irq;
    uint8_t dst_apic;  // IOAPIC id (type 3) or local APIC id (type 4)
    uint8_t dst_pin;   // IOAPIC INTIN (type 3) or LINTIN (type 4)
};

#pragma pack(pop)

static_assert(sizeof(FloatingPointer) == 16);
static_assert(sizeof(ConfigHeader) == 44);
static_assert(sizeof(Processor) == 20);
static_assert(sizeof(Bus) == 8);
static_assert(sizeof(Ioapic) == 8);
static_assert(sizeof(Interrupt) == 8);

/// Bytes of floating pointer + configuration table for `vcpus` processors.
constexpr uint64_t table_size(uint32_t vcpus) {
    return sizeof(FloatingPointer) + sizeof(ConfigHeader) + vcpus * sizeof(Processor) + sizeof(Bus) +
           sizeof(Ioapic) + kIoapicPins * sizeof(Interrupt) + 2 * sizeof(Interrupt);
}

}  // namespace nanovm::x86::mp
