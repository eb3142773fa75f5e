#include <catch2/catch.hpp>

#include <ctime>

#include "devices/bus.hpp"
#include "devices/legacy/cmos_rtc.hpp"
#include "devices/legacy/control_port.hpp"
#include "devices/legacy/i8042.hpp"

using namespace nanovm;

namespace {

uint8_t in(BusDevice& d, uint64_t offset) {
    uint8_t v = 0;
    d.read(offset, std::span<uint8_t>(&v, 1));
    return v;
}
void out(BusDevice& d, uint64_t offset, uint8_t value) { d.write(offset, std::span<const uint8_t>(&value, 1)); }

constexpr uint64_t kData = 0, kStatus = 4;

}  // namespace

TEST_CASE("i8042: command 0xFE pulses the reset line", "[devices][i8042]") {
    int resets = 0;
    I8042 kbc([&] { ++resets; });
    CHECK((in(kbc, kStatus) & 0x02) == 0);  // input buffer empty: Linux's kb_wait() passes
    out(kbc, kStatus, 0xfe);
    CHECK(resets == 1);
}

TEST_CASE("i8042: writing the output port with bit 0 clear resets; other commands answer", "[devices][i8042]") {
    int resets = 0;
    I8042 kbc([&] { ++resets; });
    out(kbc, kStatus, 0xaa);  // self test
    CHECK((in(kbc, kStatus) & 0x01) == 1);
    CHECK(in(kbc, kData) == 0x55);
    CHECK((in(kbc, kStatus) & 0x01) == 0);
    out(kbc, kStatus, 0x60);  // write configuration byte
    out(kbc, kData, 0x65);
    out(kbc, kStatus, 0x20);  // read it back
    CHECK(in(kbc, kData) == 0x65);
    out(kbc, kStatus, 0xd1);
    out(kbc, kData, 0x03);  // reset line stays high
    CHECK(resets == 0);
    out(kbc, kStatus, 0xd1);
    out(kbc, kData, 0x02);  // reset line low
    CHECK(resets == 1);
    out(kbc, kStatus, 0xff);  // pulse nothing (bit 0 set)
    CHECK(resets == 1);
    CHECK(in(kbc, 1) == 0xff);  // ports 0x61-0x63 are not the controller's
}

TEST_CASE("CMOS RTC: host UTC time in BCD, 24-hour, never updating", "[devices][rtc]") {
    // 2024-02-29 13:45:07 UTC, a Thursday.
    std::tm tm{};
    tm.tm_year = 124;
    tm.tm_mon = 1;
    tm.tm_mday = 29;
    tm.tm_hour = 13;
    tm.tm_min = 45;
    tm.tm_sec = 7;
    const std::time_t when = ::timegm(&tm);
    CmosRtc rtc([when] { return when; });
    const auto reg = [&](uint8_t index) {
        out(rtc, 0, static_cast<uint8_t>(0x80 | index));  // NMI-disable bit is ignored
        return in(rtc, 1);
    };
    CHECK(reg(0x00) == 0x07);
    CHECK(reg(0x02) == 0x45);
    CHECK(reg(0x04) == 0x13);
    CHECK(reg(0x06) == 0x05);  // Thursday: 1 = Sunday
    CHECK(reg(0x07) == 0x29);
    CHECK(reg(0x08) == 0x02);
    CHECK(reg(0x09) == 0x24);
    CHECK(reg(0x32) == 0x20);
    CHECK((reg(0x0a) & 0x80) == 0);
    CHECK(reg(0x0b) == 0x02);
    CHECK(reg(0x0d) == 0x80);

    // Binary, 12-hour: 13:xx is 1 PM.
    out(rtc, 0, 0x0b);
    out(rtc, 1, 0x04);
    CHECK(reg(0x04) == (0x80 | 1));
    CHECK(reg(0x09) == 24);

    // CMOS RAM keeps what is written; the clock ignores writes; UIP cannot be set.
    out(rtc, 0, 0x40);
    out(rtc, 1, 0x5a);
    CHECK(reg(0x40) == 0x5a);
    out(rtc, 0, 0x00);
    out(rtc, 1, 0x33);
    CHECK(reg(0x00) == 7);
    out(rtc, 0, 0x0a);
    out(rtc, 1, 0xa6);
    CHECK((reg(0x0a) & 0x80) == 0);
}

TEST_CASE("control port: announcements, signature, and what a stop means", "[devices][control]") {
    ControlPort port;
    CHECK(in(port, 0) == control_port::kSignature);
    CHECK(port.announcement() == Announcement::none);
    out(port, 0, control_port::kPoweroff);
    CHECK(port.announcement() == Announcement::poweroff);
    out(port, 0, 0x77);  // unknown: ignored
    CHECK(port.announcement() == Announcement::poweroff);
    out(port, 0, control_port::kReboot);
    CHECK(port.announcement() == Announcement::reboot);
    out(port, 0, control_port::kClear);
    CHECK(port.announcement() == Announcement::none);

    const StopReason reset{StopReason::Kind::reset, {}, {}};
    const StopReason triple{StopReason::Kind::triple_fault, 0u, {}};
    CHECK(guest_outcome(reset, Announcement::poweroff) == GuestOutcome::poweroff);
    CHECK(guest_outcome(triple, Announcement::poweroff) == GuestOutcome::poweroff);
    CHECK(guest_outcome(reset, Announcement::reboot) == GuestOutcome::reboot);
    CHECK(guest_outcome(reset, Announcement::none) == GuestOutcome::crash);
    CHECK(guest_outcome(triple, Announcement::none) == GuestOutcome::crash);
    CHECK(guest_outcome({StopReason::Kind::requested, {}, {}}, Announcement::poweroff) == GuestOutcome::stopped);
    CHECK(guest_outcome({StopReason::Kind::error, {}, {}}, Announcement::poweroff) == GuestOutcome::error);
}

namespace {
struct Constant : BusDevice {
    explicit Constant(uint8_t v) : value(v) {}
    void read(uint64_t offset, std::span<uint8_t> data) override {
        last_offset = offset;
        for (auto& b : data) b = value;
    }
    void write(uint64_t offset, std::span<const uint8_t>) override { last_offset = offset; }
    uint8_t value;
    uint64_t last_offset = ~0ULL;
};
}  // namespace

TEST_CASE("buses: ranges map to devices with offsets; gaps read all ones; overlaps are refused", "[devices][bus]") {
    Constant a(0x11), b(0x22);
    IoBus io;
    io.add(0x60, 5, a, "a");
    io.add(0x70, 2, b, "b");
    CHECK_THROWS_WITH(io.add(0x64, 4, b, "c"), Catch::Contains("overlaps a"));
    CHECK_THROWS_WITH(io.add(0x6f, 2, b, "d"), Catch::Contains("overlaps b"));
    uint8_t byte = 0;
    io.pio_read(0x64, std::span<uint8_t>(&byte, 1));
    CHECK(byte == 0x11);
    CHECK(a.last_offset == 4);
    io.pio_read(0x71, std::span<uint8_t>(&byte, 1));
    CHECK(byte == 0x22);
    uint8_t word[2] = {0, 0};
    io.pio_read(0x71, word);  // would cross the end of b
    CHECK(word[0] == 0xff);
    io.pio_read(0x80, std::span<uint8_t>(&byte, 1));
    CHECK(byte == 0xff);
    io.pio_write(0x80, std::span<const uint8_t>(&byte, 1));  // ignored

    MmioBus mmio;
    mmio.add(Gpa(0xd0000000), 0x1000, a, "a");
    uint8_t dword[4] = {};
    mmio.mmio_read(Gpa(0xd0000ffc), dword);
    CHECK(dword[3] == 0x11);
    CHECK(a.last_offset == 0xffc);
    mmio.mmio_read(Gpa(0xe0000000), dword);
    CHECK(dword[0] == 0xff);
}
