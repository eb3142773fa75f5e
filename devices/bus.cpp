#include "devices/bus.hpp"

#include <cstring>
#include <iterator>

#include <fmt/format.h>

#include "vmm/error.hpp"

namespace nanovm {

void Bus::add(uint64_t base, uint64_t length, BusDevice& device, std::string name) {
    if (length == 0 || base + length < base)
        throw Error(fmt::format("bus: device {} has an invalid range [{:#x}, +{:#x})", name, base, length));
    const uint64_t end = base + length;
    auto next = ranges_.lower_bound(base);
    if (next != ranges_.end() && next->first < end)
        throw Error(fmt::format("bus: device {} at {:#x} overlaps {} at {:#x}", name, base, next->second.name,
                                next->first));
    if (next != ranges_.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second.length > base)
            throw Error(fmt::format("bus: device {} at {:#x} overlaps {} at {:#x}", name, base, prev->second.name,
                                    prev->first));
    }
    ranges_.emplace(base, Range{length, &device, std::move(name)});
}

std::optional<Bus::Target> Bus::find(uint64_t addr, uint64_t len) const {
    auto it = ranges_.upper_bound(addr);
    if (it == ranges_.begin()) return std::nullopt;
    --it;
    const uint64_t offset = addr - it->first;
    if (offset >= it->second.length || len > it->second.length - offset) return std::nullopt;
    return Target{it->second.device, offset};
}

void IoBus::add(uint16_t base, uint16_t count, BusDevice& device, std::string name) {
    bus_.add(base, count, device, std::move(name));
}

void IoBus::pio_read(uint16_t port, std::span<uint8_t> data) {
    if (auto target = bus_.find(port, data.size()))
        target->device->read(target->offset, data);
    else
        std::memset(data.data(), 0xff, data.size());
}

void IoBus::pio_write(uint16_t port, std::span<const uint8_t> data) {
    if (auto target = bus_.find(port, data.size())) target->device->write(target->offset, data);
}

void MmioBus::add(Gpa base, uint64_t length, BusDevice& device, std::string name) {
    bus_.add(base.value, length, device, std::move(name));
}

void MmioBus::log_unclaimed(const char* what, Gpa addr, size_t len) {
    uint64_t suppressed = 0;
    const bool allowed = log_limit_.allow(suppressed);
    if (suppressed > 0) log_line(fmt::format("{} more unclaimed MMIO accesses not shown", suppressed));
    if (allowed) log_line(fmt::format("unclaimed MMIO {} of {} bytes at {:#x}", what, len, addr.value));
}

void MmioBus::mmio_read(Gpa addr, std::span<uint8_t> data) {
    if (auto target = bus_.find(addr.value, data.size())) {
        target->device->read(target->offset, data);
        return;
    }
    std::memset(data.data(), 0xff, data.size());
    log_unclaimed("read", addr, data.size());
}

void MmioBus::mmio_write(Gpa addr, std::span<const uint8_t> data) {
    if (auto target = bus_.find(addr.value, data.size())) {
        target->device->write(target->offset, data);
        return;
    }
    log_unclaimed("write", addr, data.size());
}

}  // namespace nanovm
