// The one interface every device on a bus implements: reads and writes at an offset
// inside the address range the device was registered for. The bus never names a
// device (kvmtool and Firecracker do the same).
#pragma once

#include <cstdint>
#include <span>

namespace nanovm {

/// A device that answers guest accesses to a range of ports or MMIO addresses.
/// Called from vCPU threads, possibly several at once: a device guards its own state.
class BusDevice {
public:
    virtual ~BusDevice() = default;
    /// Guest read of data.size() bytes at `offset` from the start of the device's
    /// range. Must fill all of `data`.
    virtual void read(uint64_t offset, std::span<uint8_t> data) = 0;
    /// Guest write of data.size() bytes at `offset`.
    virtual void write(uint64_t offset, std::span<const uint8_t> data) = 0;
};

}  // namespace nanovm
