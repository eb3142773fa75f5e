#include "devices/legacy/cmos_rtc.hpp"

namespace nanovm {

namespace {

// Register indexes.
constexpr uint8_t kSeconds = 0x00, kMinutes = 0x02, kHours = 0x04, kWeekday = 0x06, kDay = 0x07, kMonth = 0x08,
                  kYear = 0x09, kStatusA = 0x0a, kStatusB = 0x0b, kStatusC = 0x0c, kStatusD = 0x0d,
                  kCentury = 0x32;
// Status bits.
constexpr uint8_t kStatusAUpdateInProgress = 0x80;
constexpr uint8_t kStatusBBinary = 0x04, kStatusB24Hour = 0x02;
constexpr uint8_t kStatusDValid = 0x80;

}  // namespace

CmosRtc::CmosRtc(Clock clock) : clock_(std::move(clock)) {
    if (!clock_) clock_ = [] { return std::time(nullptr); };
    ram_[kStatusA] = 0x26;  // 32.768 kHz time base, 1024 Hz periodic rate
    ram_[kStatusB] = kStatusB24Hour;
    ram_[kStatusD] = kStatusDValid;
}

void CmosRtc::read(uint64_t offset, std::span<uint8_t> data) {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < data.size(); ++i) {
        // The index port is write-only on real hardware; reading it gives all ones.
        data[i] = offset + i == 1 ? read_register(index_) : 0xff;
    }
}

void CmosRtc::write(uint64_t offset, std::span<const uint8_t> data) {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < data.size(); ++i) {
        const uint8_t value = data[i];
        if (offset + i == 0) {
            index_ = value & 0x7f;  // bit 7 masks NMIs: nothing to mask here
        } else if (offset + i == 1) {
            switch (index_) {
                case kSeconds: case kMinutes: case kHours: case kWeekday: case kDay: case kMonth: case kYear:
                case kCentury: case kStatusC: case kStatusD: break;  // clock and read-only registers
                case kStatusA: ram_[kStatusA] = value & static_cast<uint8_t>(~kStatusAUpdateInProgress); break;
                default: ram_[index_] = value; break;
            }
        }
    }
}

uint8_t CmosRtc::encode(int value) const {
    if (ram_[kStatusB] & kStatusBBinary) return static_cast<uint8_t>(value);
    return static_cast<uint8_t>(((value / 10) << 4) | (value % 10));
}

uint8_t CmosRtc::read_register(uint8_t index) const {
    const std::time_t now = clock_();
    std::tm tm{};
    ::gmtime_r(&now, &tm);
    switch (index) {
        case kSeconds: return encode(tm.tm_sec > 59 ? 59 : tm.tm_sec);
        case kMinutes: return encode(tm.tm_min);
        case kHours: {
            if (ram_[kStatusB] & kStatusB24Hour) return encode(tm.tm_hour);
            const int hour12 = tm.tm_hour % 12 == 0 ? 12 : tm.tm_hour % 12;
            return static_cast<uint8_t>(encode(hour12) | (tm.tm_hour >= 12 ? 0x80 : 0));
        }
        case kWeekday: return encode(tm.tm_wday + 1);  // 1 = Sunday
        case kDay: return encode(tm.tm_mday);
        case kMonth: return encode(tm.tm_mon + 1);
        case kYear: return encode((tm.tm_year + 1900) % 100);
        case kCentury: return encode((tm.tm_year + 1900) / 100);
        case kStatusA: return ram_[kStatusA];  // update-in-progress never set
        case kStatusC: return 0;               // no interrupt flags
        default: return ram_[index];
    }
}

}  // namespace nanovm
