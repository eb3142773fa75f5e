// virtio-rng, the entropy device (virtio 1.2 §5.4): one queue (requestq) whose
// device-writable buffers the device fills with random bytes from the host kernel's
// getrandom(2). No feature bits, no configuration space.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "devices/virtio/device.hpp"

namespace nanovm::virtio {

/// Everything a snapshot keeps of a virtio-rng device: two counters (the queue's own
/// position lives in its QueueState). Plain data.
struct RngState {
    uint64_t requests = 0;  ///< chains completed since the device was created
    uint64_t bytes = 0;     ///< random bytes written into guest buffers
};

/// A virtio-rng device (device id 4). Each chain on the requestq gets up to
/// kMaxRequestBytes random bytes written into its writable buffers, front to back;
/// the used length is the number written. A chain without writable buffers is
/// returned with used length 0 (§5.4.6.1 allows the device to give fewer bytes than
/// asked). getrandom runs with GRND_NONBLOCK, so the event loop never blocks: if
/// the host's pool is not yet initialised the chain gets the bytes obtained so far.
class RngDevice final : public VirtioDevice {
public:
    /// Most bytes written into one chain (bounds the work one request costs).
    static constexpr uint32_t kMaxRequestBytes = 64 * 1024;
    /// QueueNumMax of the requestq.
    static constexpr uint16_t kQueueSize = 256;

    RngDevice() = default;

    uint32_t device_id() const override;
    std::string name() const override { return "virtio-rng"; }
    uint64_t device_features() const override { return 0; }
    std::vector<uint16_t> queue_max_sizes() const override { return {kQueueSize}; }
    /// No configuration space (§5.4.4): every byte reads as zero.
    void read_config(uint64_t offset, std::span<uint8_t> data) const override;
    void activate(ActiveDevice& active) override;
    /// Fills every available chain of the requestq. Throws QueueError on a bad ring.
    void queue_notify(uint16_t queue) override;
    void reset() noexcept override;

    /// A copy of the counters. Any thread.
    RngState save_state() const;
    /// Restores the counters (before the device is activated).
    void load_state(const RngState& state);

private:
    /// Writes random bytes into `chain`'s writable buffers; returns how many.
    uint32_t fill(const DescriptorChain& chain);

    ActiveDevice* active_ = nullptr;
    std::atomic<uint64_t> requests_{0};
    std::atomic<uint64_t> bytes_{0};
};

}  // namespace nanovm::virtio
