// What the vCPU loop hands guest port I/O and MMIO to. vmm/ names no device: the
// buses in devices/ implement these, and tests can implement them directly.
#pragma once

#include <cstdint>
#include <span>

#include "vmm/address.hpp"

namespace nanovm {

/// Receives the guest's port I/O (KVM_EXIT_IO), one access at a time. Called on vCPU
/// threads, possibly several at once: implementations synchronise themselves.
class PortIoHandler {
public:
    virtual ~PortIoHandler() = default;
    /// An `in` of data.size() (1, 2 or 4) bytes from `port`: fill all of `data`.
    virtual void pio_read(uint16_t port, std::span<uint8_t> data) = 0;
    /// An `out` of data.size() bytes to `port`.
    virtual void pio_write(uint16_t port, std::span<const uint8_t> data) = 0;
};

/// Receives the guest's accesses to GPAs that are not RAM (KVM_EXIT_MMIO). Same
/// threading rules as PortIoHandler.
class MmioHandler {
public:
    virtual ~MmioHandler() = default;
    /// A read of data.size() (1..8) bytes at `addr`: fill all of `data`.
    virtual void mmio_read(Gpa addr, std::span<uint8_t> data) = 0;
    /// A write of data.size() bytes at `addr`.
    virtual void mmio_write(Gpa addr, std::span<const uint8_t> data) = 0;
};

}  // namespace nanovm
