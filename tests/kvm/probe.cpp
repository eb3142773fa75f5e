#include "tests/kvm/probe.hpp"

#include <condition_variable>
#include <cstring>
#include <thread>

namespace nanovm::test {

namespace {

constexpr uint64_t kCr0Pe = 1ULL << 0;
constexpr uint64_t kCr0Nw = 1ULL << 29;
constexpr uint64_t kCr0Cd = 1ULL << 30;

kvm_segment real_segment(uint16_t selector, uint8_t type) {
    kvm_segment s{};
    s.base = uint64_t{selector} << 4;
    s.limit = 0xffff;
    s.selector = selector;
    s.type = type;  // accessed code (0xb) or data (0x3)
    s.present = 1;
    s.s = 1;
    return s;
}

kvm_segment flat_segment(uint16_t selector, uint8_t type) {
    kvm_segment s{};
    s.base = 0;
    s.limit = 0xffffffff;
    s.selector = selector;
    s.type = type;
    s.present = 1;
    s.s = 1;
    s.db = 1;
    s.g = 1;
    return s;
}

void set_entry_regs(Vcpu& vcpu, uint64_t rip) {
    kvm_regs regs{};
    regs.rip = rip;
    regs.rflags = 0x2;  // reserved bit 1; IF = 0
    vcpu.set_regs(regs);
}

uint64_t little_endian(const std::vector<uint8_t>& bytes) {
    uint64_t value = 0;
    for (size_t i = 0; i < bytes.size() && i < 8; ++i) value |= uint64_t{bytes[i]} << (8 * i);
    return value;
}

void fill(std::span<uint8_t> data, uint64_t value) {
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i < 8 ? value >> (8 * i) : 0);
}

}  // namespace

void enter_real_mode(Vcpu& vcpu, uint32_t code) {
    kvm_sregs sregs = vcpu.sregs();
    sregs.cs = real_segment(static_cast<uint16_t>(code >> 4), 0xb);
    sregs.ds = sregs.es = sregs.fs = sregs.gs = sregs.ss = real_segment(0, 0x3);
    sregs.cr0 &= ~(kCr0Pe | kCr0Cd | kCr0Nw);
    vcpu.set_sregs(sregs);
    set_entry_regs(vcpu, 0);
}

void enter_flat32(Vcpu& vcpu, uint32_t entry, uint16_t idt_limit) {
    kvm_sregs sregs = vcpu.sregs();
    sregs.cs = flat_segment(0x08, 0xb);
    sregs.ds = sregs.es = sregs.fs = sregs.gs = sregs.ss = flat_segment(0x10, 0x3);
    sregs.idt.base = 0;
    sregs.idt.limit = idt_limit;
    sregs.cr0 = (sregs.cr0 & ~(kCr0Cd | kCr0Nw)) | kCr0Pe;
    vcpu.set_sregs(sregs);
    set_entry_regs(vcpu, entry);
}

uint64_t Access::value() const { return little_endian(data); }

void RecordingPio::pio_read(uint16_t port, std::span<uint8_t> data) {
    fill(data, read_value);
    std::lock_guard lock(mutex_);
    accesses_.push_back({port, false, {data.begin(), data.end()}});
}

void RecordingPio::pio_write(uint16_t port, std::span<const uint8_t> data) {
    std::lock_guard lock(mutex_);
    accesses_.push_back({port, true, {data.begin(), data.end()}});
}

std::vector<Access> RecordingPio::accesses() const {
    std::lock_guard lock(mutex_);
    return accesses_;
}

void RecordingMmio::mmio_read(Gpa addr, std::span<uint8_t> data) {
    fill(data, read_value);
    std::lock_guard lock(mutex_);
    accesses_.push_back({addr.value, false, {data.begin(), data.end()}});
}

void RecordingMmio::mmio_write(Gpa addr, std::span<const uint8_t> data) {
    std::lock_guard lock(mutex_);
    accesses_.push_back({addr.value, true, {data.begin(), data.end()}});
}

std::vector<Access> RecordingMmio::accesses() const {
    std::lock_guard lock(mutex_);
    return accesses_;
}

StopReason run_bounded(Machine& machine, PortIoHandler& pio, MmioHandler& mmio, std::chrono::milliseconds limit) {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
    std::thread watchdog([&] {
        std::unique_lock lock(mutex);
        if (!cv.wait_for(lock, limit, [&] { return done; })) machine.request_stop("watchdog");
    });
    StopReason reason = machine.run(pio, mmio);
    {
        std::lock_guard lock(mutex);
        done = true;
    }
    cv.notify_all();
    watchdog.join();
    return reason;
}

}  // namespace nanovm::test
