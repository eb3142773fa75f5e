#include "devices/virtio/mmio_devices.hpp"

#include <fmt/format.h>

#include "vmm/error.hpp"

namespace nanovm::virtio {

std::string virtio_mmio_cmdline_param(uint32_t index) {
    if (index >= kMaxVirtioDevices)
        throw Error(fmt::format("too many virtio devices: at most {} per VM", kMaxVirtioDevices));
    return fmt::format("virtio_mmio.device=4K@{:#x}:{}", kVirtioMmioBase + index * mmio::kWindowSize,
                       kFirstVirtioGsi + index);
}

std::string virtio_mmio_cmdline(uint32_t count) {
    std::string out;
    for (uint32_t i = 0; i < count; ++i) {
        if (i) out += ' ';
        out += virtio_mmio_cmdline_param(i);
    }
    return out;
}

MmioDevices::~MmioDevices() {
    // Transports first (each resets its device), then the devices they refer to.
    for (Slot& slot : slots_) slot.transport.reset();
}

MmioTransport& MmioDevices::add(std::unique_ptr<VirtioDevice> device) {
    const auto index = static_cast<uint32_t>(slots_.size());
    if (index >= kMaxVirtioDevices)
        throw Error(fmt::format("{}: too many virtio devices (at most {} per VM)", device->name(), kMaxVirtioDevices));
    Slot slot{std::move(device), nullptr, Gpa(kVirtioMmioBase + index * mmio::kWindowSize), kFirstVirtioGsi + index};
    slot.transport = std::make_unique<MmioTransport>(*slot.device, memory_, loop_);
    MmioTransport& transport = *slot.transport;
    for (uint16_t q = 0; q < transport.queue_count(); ++q)
        vm_.add_ioeventfd(transport.notify_eventfd(q),
                          {IoEventAddress::Space::mmio, slot.base.value + mmio::kQueueNotify, 4}, q);
    vm_.add_irqfd(transport.interrupt_eventfd(), slot.gsi);
    bus_.add(slot.base, mmio::kWindowSize, transport, slot.device->name());
    slots_.push_back(std::move(slot));
    return transport;
}

}  // namespace nanovm::virtio
