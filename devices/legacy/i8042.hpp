// The i8042 keyboard controller, just enough for a guest to reset the machine:
// ports 0x60 (data) and 0x64 (status / command). No keyboard or mouse is attached.
// Commands: 0x20 read / 0x60 write the controller configuration byte, 0xAA self test
// (0x55), 0xAB / 0xA9 port tests (0x00), 0xAD / 0xAE / 0xA7 / 0xA8 port disable /
// enable, 0xD0 / 0xD1 read / write the output port (bit 0 clear = reset), and 0xF0-
// 0xFF pulse output lines: an even value (bit 0 = reset line, e.g. 0xFE) resets the
// CPU. Linux reboot=k writes 0xFE to 0x64. Source: IBM PC/AT technical reference;
// OSDev "8042 PS/2 Controller".
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>

#include "devices/bus_device.hpp"

namespace nanovm {

class I8042 : public BusDevice {
public:
    static constexpr uint16_t kBase = 0x60;       ///< data port
    static constexpr uint16_t kPortCount = 5;     ///< 0x60..0x64 (0x61-0x63 are not ours)
    static constexpr uint8_t kCommandReset = 0xfe;

    /// `on_reset` runs (on the vCPU thread) when the guest pulses the reset line.
    explicit I8042(std::function<void()> on_reset);

    void read(uint64_t offset, std::span<uint8_t> data) override;
    void write(uint64_t offset, std::span<const uint8_t> data) override;

private:
    uint8_t read_port(uint64_t offset);
    // Returns true when the reset line was pulsed (the callback runs unlocked).
    bool write_port(uint64_t offset, uint8_t value);
    bool command(uint8_t cmd);
    bool data(uint8_t value);

    std::function<void()> on_reset_;
    std::mutex mutex_;
    uint8_t config_ = 0x47;               // kbd IRQ, aux IRQ, system flag, translation
    uint8_t output_port_ = 0x03;          // reset line high (not in reset), A20 enabled
    std::optional<uint8_t> output_;       // byte waiting in the output buffer
    std::optional<uint8_t> pending_cmd_;  // command waiting for its data byte
};

}  // namespace nanovm
