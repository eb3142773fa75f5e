// The vm.state file format: versioned, self-describing, checksummed (DESIGN.md
// "snapshot/"). All integers little-endian.
//
//   file    = FileHeader, then section_count sections, nothing after them
//   header  = magic "NANOVMST" (8 bytes), u32 version, u32 section_count,
//             u64 file_bytes (the whole file), u32 flags (0), u32 header_crc
//   section = u32 type, u32 instance (vCPU index, device index, or 0),
//             u64 length (payload bytes), u32 payload_crc, u32 header_crc, payload
//
// Checksums are CRC-32C (snapshot/crc32c.hpp): header_crc covers the bytes before
// it in its header, payload_crc the payload. A type with bit 31 set is optional: a
// reader that does not know it skips it; an unknown type without that bit is
// refused. A file whose version is newer than kStateFormatVersion is refused with a
// message saying so. Section payloads are raw KVM structs of the x86-64 Linux 6.1
// uapi (their sizes are checked by snapshot/vm_state.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nanovm::snapshot {

/// The format version this nanovm writes and the newest it reads.
inline constexpr uint32_t kStateFormatVersion = 1;
/// Bit 31 of a section type: readers that do not know the type may skip it.
inline constexpr uint32_t kOptionalSection = 0x8000'0000u;

/// Section types. Numbers are part of the format: never reuse one.
enum class SectionType : uint32_t {
    machine = 1,        ///< MachineInfo (snapshot/vm_state.hpp)
    vcpu_regs = 2,      ///< kvm_regs
    vcpu_sregs = 3,     ///< kvm_sregs
    vcpu_xsave = 4,     ///< XSAVE area, >= 4096 bytes
    vcpu_xcrs = 5,      ///< kvm_xcrs
    vcpu_debugregs = 6, ///< kvm_debugregs
    vcpu_msrs = 7,      ///< kvm_msr_entry[]
    vcpu_lapic = 8,     ///< kvm_lapic_state
    vcpu_events = 9,    ///< kvm_vcpu_events
    vcpu_mp_state = 10, ///< kvm_mp_state
    vcpu_cpuid = 11,    ///< kvm_cpuid_entry2[]
    pic_master = 20,    ///< kvm_irqchip (chip_id KVM_IRQCHIP_PIC_MASTER)
    pic_slave = 21,     ///< kvm_irqchip (KVM_IRQCHIP_PIC_SLAVE)
    ioapic = 22,        ///< kvm_irqchip (KVM_IRQCHIP_IOAPIC)
    pit2 = 23,          ///< kvm_pit_state2
    clock = 24,         ///< kvm_clock_data
    /// The VM's devices (virtio transports + queues + device structs, legacy devices,
    /// disk chain names) as UTF-8 JSON written and read by the VMM layer that owns
    /// the devices (api/vm/vm_devices_state.cpp); absent for probe machines.
    devices = 30,
};

/// "vcpu 1 lapic", "ioapic", "type 0x63": a section's name for messages.
std::string section_name(uint32_t type, uint32_t instance);

/// Builds a state file in memory.
class StateWriter {
public:
    /// Appends a section; `payload` is copied.
    void add(SectionType type, uint32_t instance, std::span<const uint8_t> payload);
    /// Appends a trivially copyable object as a section.
    template <typename T>
    void add_object(SectionType type, uint32_t instance, const T& value) {
        add(type, instance, {reinterpret_cast<const uint8_t*>(&value), sizeof(T)});
    }
    /// The complete file (header with counts and checksums, then the sections).
    std::vector<uint8_t> finish() const;

private:
    std::vector<uint8_t> body_;
    uint32_t count_ = 0;
};

/// One section of a parsed file; payload points into the caller's buffer.
struct SectionView {
    uint32_t type = 0;
    uint32_t instance = 0;
    std::span<const uint8_t> payload;
};

/// Parses and verifies a whole state file (`file_name` only names it in errors).
/// Returns the sections in file order, optional unknown ones left out. Throws
/// SnapshotError naming the header or section (index and name) that is truncated,
/// has a bad checksum or an unknown type, or a version newer than this nanovm's.
std::vector<SectionView> parse_state_file(std::span<const uint8_t> file, std::string_view file_name);

/// Writes `bytes` to `path` atomically: `path`.tmp, fsync, rename, fsync of the
/// directory (without `sync`: no fsyncs, atomic but not durable). Throws SysError
/// naming the step.
void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes, bool sync = true);
/// Reads a whole file. Throws SysError("open <path>") etc.
std::vector<uint8_t> read_whole_file(const std::string& path);

}  // namespace nanovm::snapshot
