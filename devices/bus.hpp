// Address-range buses: which device answers a port or an MMIO address. The I/O port
// bus and the MMIO bus are what the vCPU loop (vmm/io_handler.hpp) dispatches to.
// Devices are added before the machine runs; lookups then take no lock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "devices/bus_device.hpp"
#include "vmm/io_handler.hpp"
#include "vmm/log.hpp"

namespace nanovm {

/// Non-overlapping address ranges, each mapped to a device. Does not own devices:
/// they must outlive the bus (and any Machine::run using it).
class Bus {
public:
    /// A device and the offset of an access inside its range.
    struct Target {
        BusDevice* device;
        uint64_t offset;
    };

    /// Maps [base, base + length) to `device`. `name` is for messages. Throws Error if
    /// the range is empty, wraps, or overlaps one already mapped.
    void add(uint64_t base, uint64_t length, BusDevice& device, std::string name);
    /// The device whose range holds all of [addr, addr + len), if any.
    std::optional<Target> find(uint64_t addr, uint64_t len) const;

private:
    struct Range {
        uint64_t length;
        BusDevice* device;
        std::string name;
    };
    std::map<uint64_t, Range> ranges_;  // by base
};

/// The port I/O bus. Ports no device claims read as all ones and ignore writes, like
/// an ISA bus with nothing on it (POST port 0x80, probes for absent hardware).
class IoBus : public PortIoHandler {
public:
    /// Maps ports [base, base + count) to `device`.
    void add(uint16_t base, uint16_t count, BusDevice& device, std::string name);
    void pio_read(uint16_t port, std::span<uint8_t> data) override;
    void pio_write(uint16_t port, std::span<const uint8_t> data) override;

private:
    Bus bus_;
};

/// The MMIO bus. Unclaimed reads return all ones, writes are dropped; both are logged
/// (rate-limited: a guest must not be able to flood the log).
class MmioBus : public MmioHandler {
public:
    /// Maps GPAs [base, base + length) to `device`.
    void add(Gpa base, uint64_t length, BusDevice& device, std::string name);
    void mmio_read(Gpa addr, std::span<uint8_t> data) override;
    void mmio_write(Gpa addr, std::span<const uint8_t> data) override;

private:
    void log_unclaimed(const char* what, Gpa addr, size_t len);
    Bus bus_;
    RateLimiter log_limit_;
};

}  // namespace nanovm
