// A minimal MC146818 CMOS RTC at ports 0x70 (index; bit 7 = NMI mask) and 0x71
// (data). The clock registers read the host's UTC time, in BCD or binary and 12- or
// 24-hour format as status register B selects (default BCD, 24-hour). Status A never
// shows "update in progress" (Linux polls ~1 s for it otherwise, NOTES.md); status D
// reports valid RAM and time. Writes to the clock registers are ignored (the guest
// cannot set the host's clock); the other bytes are plain CMOS RAM. No interrupts.
// Source: Motorola MC146818A datasheet; Linux drivers/rtc/mc146818-lib.c.
#pragma once

#include <array>
#include <cstdint>
#include <ctime>
#include <functional>
#include <mutex>

#include "devices/bus_device.hpp"

namespace nanovm {

class CmosRtc : public BusDevice {
public:
    /// Seconds since the epoch (UTC). Injectable for tests.
    using Clock = std::function<std::time_t()>;

    static constexpr uint16_t kBase = 0x70;
    static constexpr uint16_t kPortCount = 2;

    /// `clock` defaults to the host's time(2).
    explicit CmosRtc(Clock clock = {});

    void read(uint64_t offset, std::span<uint8_t> data) override;
    void write(uint64_t offset, std::span<const uint8_t> data) override;

private:
    uint8_t read_register(uint8_t index) const;
    uint8_t encode(int value) const;

    Clock clock_;
    mutable std::mutex mutex_;
    uint8_t index_ = 0;
    std::array<uint8_t, 128> ram_{};
};

}  // namespace nanovm
