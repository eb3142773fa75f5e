#include "devices/legacy/i8042.hpp"

namespace nanovm {

namespace {

constexpr uint64_t kDataOffset = 0;    // port 0x60
constexpr uint64_t kStatusOffset = 4;  // port 0x64

// Status register bits.
constexpr uint8_t kStatusOutputFull = 0x01;
constexpr uint8_t kStatusSystemFlag = 0x04;  // POST passed
constexpr uint8_t kStatusCommandLast = 0x08; // last write was to 0x64

// Commands.
constexpr uint8_t kReadConfig = 0x20, kWriteConfig = 0x60;
constexpr uint8_t kDisableAux = 0xa7, kEnableAux = 0xa8, kTestAux = 0xa9, kSelfTest = 0xaa, kTestKbd = 0xab;
constexpr uint8_t kDisableKbd = 0xad, kEnableKbd = 0xae;
constexpr uint8_t kReadOutputPort = 0xd0, kWriteOutputPort = 0xd1;
constexpr uint8_t kWriteKbdOutput = 0xd2, kWriteAuxOutput = 0xd3, kWriteAux = 0xd4;

}  // namespace

I8042::I8042(std::function<void()> on_reset) : on_reset_(std::move(on_reset)) {}

void I8042::read(uint64_t offset, std::span<uint8_t> data) {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < data.size(); ++i) data[i] = read_port(offset + i);
}

void I8042::write(uint64_t offset, std::span<const uint8_t> data) {
    bool reset = false;
    {
        std::lock_guard lock(mutex_);
        for (size_t i = 0; i < data.size(); ++i) reset |= write_port(offset + i, data[i]);
    }
    if (reset && on_reset_) on_reset_();
}

uint8_t I8042::read_port(uint64_t offset) {
    if (offset == kDataOffset) {
        const uint8_t value = output_.value_or(0);
        output_.reset();
        return value;
    }
    if (offset == kStatusOffset) {
        uint8_t status = kStatusSystemFlag;
        if (output_) status |= kStatusOutputFull;
        if (pending_cmd_) status |= kStatusCommandLast;
        return status;
    }
    return 0xff;
}

bool I8042::write_port(uint64_t offset, uint8_t value) {
    if (offset == kStatusOffset) return command(value);
    if (offset == kDataOffset) return data(value);
    return false;
}

bool I8042::command(uint8_t cmd) {
    pending_cmd_.reset();
    switch (cmd) {
        case kReadConfig: output_ = config_; return false;
        case kWriteConfig:
        case kWriteOutputPort:
        case kWriteKbdOutput:
        case kWriteAuxOutput:
        case kWriteAux: pending_cmd_ = cmd; return false;
        case kDisableAux: config_ |= 0x20; return false;
        case kEnableAux: config_ &= static_cast<uint8_t>(~0x20); return false;
        case kDisableKbd: config_ |= 0x10; return false;
        case kEnableKbd: config_ &= static_cast<uint8_t>(~0x10); return false;
        case kSelfTest: output_ = 0x55; return false;
        case kTestAux:
        case kTestKbd: output_ = 0x00; return false;
        case kReadOutputPort: output_ = output_port_; return false;
        default:
            // 0xF0-0xFF: pulse output port lines whose bit is 0 in the low nibble;
            // bit 0 is the CPU reset line.
            return cmd >= 0xf0 && (cmd & 0x01) == 0;
    }
}

bool I8042::data(uint8_t value) {
    if (!pending_cmd_) return false;  // a byte for the keyboard: none is attached
    const uint8_t cmd = *pending_cmd_;
    pending_cmd_.reset();
    switch (cmd) {
        case kWriteConfig: config_ = value; return false;
        case kWriteOutputPort:
            output_port_ = value;
            return (value & 0x01) == 0;  // reset line driven low
        case kWriteKbdOutput:
        case kWriteAuxOutput: output_ = value; return false;
        default: return false;  // kWriteAux: no mouse
    }
}

}  // namespace nanovm
