#include "devices/virtio/rng/rng_device.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "devices/virtio/chain_io.hpp"
#include "devices/virtio/virtio_spec.hpp"
#include "vmm/log.hpp"

namespace nanovm::virtio {

uint32_t RngDevice::device_id() const { return device_id::kRng; }

void RngDevice::read_config(uint64_t /*offset*/, std::span<uint8_t> data) const {
    std::memset(data.data(), 0, data.size());
}

void RngDevice::activate(ActiveDevice& active) { active_ = &active; }

void RngDevice::reset() noexcept { active_ = nullptr; }

uint32_t RngDevice::fill(const DescriptorChain& chain) {
    ChainWriter writer(active_->memory, chain);
    // Straight into guest memory: the iovecs cover at most kMaxRequestBytes.
    for (const iovec& piece : writer.peek_iovecs(kMaxRequestBytes)) {
        auto* at = static_cast<uint8_t*>(piece.iov_base);
        size_t left = piece.iov_len;
        while (left > 0) {
            const ssize_t n = ::getrandom(at, left, GRND_NONBLOCK);
            if (n < 0) {
                if (errno == EINTR) continue;
                log_line(fmt::format("{}: getrandom: {}; request gets {} bytes", name(), ::strerror(errno),
                                     writer.written()));
                return static_cast<uint32_t>(writer.written());
            }
            writer.advance(static_cast<uint64_t>(n));
            at += n;
            left -= static_cast<size_t>(n);
        }
    }
    return static_cast<uint32_t>(writer.written());
}

void RngDevice::queue_notify(uint16_t queue) {
    if (!active_ || queue != 0) return;
    Virtqueue& requestq = active_->queues[0];
    bool used = false;
    for (;;) {
        std::optional<DescriptorChain> chain = requestq.pop(active_->memory);
        if (!chain) {
            if (requestq.enable_notification(active_->memory, true)) continue;  // raced with the driver
            break;
        }
        const uint32_t written = fill(*chain);
        requestq.push_used(active_->memory, chain->head, written);
        requests_.fetch_add(1, std::memory_order_relaxed);
        bytes_.fetch_add(written, std::memory_order_relaxed);
        used = true;
    }
    if (used && requestq.needs_interrupt(active_->memory)) active_->link.signal_used();
}

RngState RngDevice::save_state() const {
    return {requests_.load(std::memory_order_relaxed), bytes_.load(std::memory_order_relaxed)};
}

void RngDevice::load_state(const RngState& state) {
    requests_.store(state.requests, std::memory_order_relaxed);
    bytes_.store(state.bytes, std::memory_order_relaxed);
}

}  // namespace nanovm::virtio
