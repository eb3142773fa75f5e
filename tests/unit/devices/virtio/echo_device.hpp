// A virtio device for tests (and the fuzz harnesses): echoes each chain's readable
// bytes into its writable buffers, on every queue. It counts its calls and can be
// told to fail, so transport tests can watch what the transport does with a device.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "devices/virtio/chain_io.hpp"
#include "devices/virtio/device.hpp"

namespace nanovm::test {

/// Echo device: device id kEchoDeviceId, one or more queues of the given max sizes.
/// Every queue_notify drains the kicked queue; each chain gets min(readable,
/// writable, kMaxEchoBytes) bytes echoed and is returned with that used length.
class EchoDevice : public virtio::VirtioDevice {
public:
    /// Not a real virtio device id (§5 stops far below); only tests use it.
    static constexpr uint32_t kEchoDeviceId = 0xffff;
    /// Bytes echoed per chain at most (the rest is skipped): bounds the work a
    /// fuzzed chain of GiB-sized buffers can cause.
    static constexpr uint64_t kMaxEchoBytes = 64 * 1024;

    explicit EchoDevice(std::vector<uint16_t> queue_sizes = {16}, uint64_t features = 0)
        : queue_sizes_(std::move(queue_sizes)), features_(features) {}

    uint32_t device_id() const override { return kEchoDeviceId; }
    std::string name() const override { return "echo"; }
    uint64_t device_features() const override { return features_; }
    std::vector<uint16_t> queue_max_sizes() const override { return queue_sizes_; }
    /// Config space byte at offset o reads as uint8_t(o): any width and offset can be checked.
    void read_config(uint64_t offset, std::span<uint8_t> data) const override {
        for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(offset + i);
    }
    void activate(virtio::ActiveDevice& active) override {
        active_ = &active;
        link_ = &active.link;
        ++activations;
    }
    /// Echoes every available chain of `queue`; throws QueueError when throw_on_notify
    /// is set or the ring is malformed. A kick while not activated (a transport bug)
    /// is counted in inactive_notifies and ignored.
    void queue_notify(uint16_t queue) override {
        if (!active_) {
            ++inactive_notifies;
            return;
        }
        ++notifies;
        if (throw_on_notify) throw virtio::QueueError("echo: told to fail");
        virtio::Virtqueue& q = active_->queues[queue];
        bool used = false;
        while (auto chain = q.pop(active_->memory)) {
            q.push_used(active_->memory, chain->head, echo(*chain));
            used = true;
        }
        if (used && q.needs_interrupt(active_->memory)) active_->link.signal_used();
    }
    void reset() noexcept override {
        active_ = nullptr;
        link_ = nullptr;
        ++resets;
    }

    /// The transport's link while active (any thread may signal through it), else null.
    virtio::DeviceLink* link() const { return link_.load(); }

    std::atomic<int> activations{0};
    std::atomic<int> notifies{0};
    std::atomic<int> resets{0};
    std::atomic<int> inactive_notifies{0};  ///< queue_notify before activate or after reset
    std::atomic<bool> throw_on_notify{false};

private:
    uint32_t echo(const virtio::DescriptorChain& chain) {
        virtio::ChainReader in(active_->memory, chain);
        virtio::ChainWriter out(active_->memory, chain);
        std::array<uint8_t, 4096> bounce;
        while (out.written() < kMaxEchoBytes && in.remaining() > 0 && out.remaining() > 0) {
            const uint64_t want = std::min({uint64_t{bounce.size()}, out.remaining(), kMaxEchoBytes - out.written()});
            const size_t n = in.read(std::span(bounce).first(want));
            out.write(std::span(bounce).first(n));
        }
        return static_cast<uint32_t>(out.written());
    }

    std::vector<uint16_t> queue_sizes_;
    uint64_t features_;
    virtio::ActiveDevice* active_ = nullptr;  // loop thread only
    std::atomic<virtio::DeviceLink*> link_{nullptr};
};

}  // namespace nanovm::test
