// Helpers for probe guests: a few bytes of machine code in guest RAM, run on a vCPU
// put straight into real mode or 32-bit flat protected mode, plus recording I/O
// handlers and a bounded Machine::run.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include "vmm/io_handler.hpp"
#include "vmm/machine.hpp"
#include "vmm/vcpu.hpp"

namespace nanovm::test {

/// Real mode with CS based at `code` (CS = code >> 4, IP = 0; `code` 16-byte
/// aligned, below 1 MiB), data segments at 0, interrupts off.
void enter_real_mode(Vcpu& vcpu, uint32_t code);

/// 32-bit flat protected mode (4 GiB code/data segments straight into the hidden
/// descriptor caches, no GDT in memory, no paging), EIP = `entry`, interrupts off.
/// `idt_limit` 0 makes any exception a triple fault.
void enter_flat32(Vcpu& vcpu, uint32_t entry, uint16_t idt_limit = 0);

/// One access seen by a recording handler.
struct Access {
    uint64_t addr;  ///< port or GPA
    bool write;
    std::vector<uint8_t> data;
    /// The accessed bytes as a little-endian integer.
    uint64_t value() const;
};

/// Records every port access; reads return `read_value` (little-endian, truncated).
class RecordingPio : public PortIoHandler {
public:
    uint64_t read_value = ~0ULL;
    void pio_read(uint16_t port, std::span<uint8_t> data) override;
    void pio_write(uint16_t port, std::span<const uint8_t> data) override;
    std::vector<Access> accesses() const;

private:
    mutable std::mutex mutex_;
    std::vector<Access> accesses_;
};

/// Records every MMIO access the same way.
class RecordingMmio : public MmioHandler {
public:
    uint64_t read_value = ~0ULL;
    void mmio_read(Gpa addr, std::span<uint8_t> data) override;
    void mmio_write(Gpa addr, std::span<const uint8_t> data) override;
    std::vector<Access> accesses() const;

private:
    mutable std::mutex mutex_;
    std::vector<Access> accesses_;
};

/// Machine::run with a watchdog: after `limit` it requests a stop with detail
/// "watchdog", so a broken test fails instead of hanging.
StopReason run_bounded(Machine& machine, PortIoHandler& pio, MmioHandler& mmio,
                       std::chrono::milliseconds limit = std::chrono::seconds(60));

}  // namespace nanovm::test
