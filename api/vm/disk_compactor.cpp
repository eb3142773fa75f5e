// Background compaction of a VM's disk layer chains (see disk_compactor.hpp).
#include "api/vm/disk_compactor.hpp"

#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "devices/virtio/blk/block_device.hpp"
#include "vmm/address.hpp"
#include "vmm/error.hpp"
#include "vmm/log.hpp"

namespace nanovm {

using virtio::blk::BlockDevice;
using virtio::blk::CompactionPlan;

DiskCompactor::DiskCompactor(std::vector<BlockDevice*> disks, RunQuiesced run_quiesced)
    : disks_(std::move(disks)), run_quiesced_(std::move(run_quiesced)) {}

DiskCompactor::~DiskCompactor() { shutdown(); }

void DiskCompactor::Placement::finish(bool placed) noexcept {
    if (finished_.exchange(true)) return;
    if (const std::shared_ptr<DiskCompactor> owner = owner_.lock()) owner->placed(seq_, placed, own_dirs_);
}

std::shared_ptr<DiskCompactor::Placement> DiskCompactor::begin_snapshot(const std::shared_ptr<DiskCompactor>& self) {
    std::unique_lock lock(self->mutex_);
    const uint64_t seq = ++self->seq_;
    ++self->placing_;
    // From here no earlier snapshot starts a compaction (seq); wait for one running.
    auto placement = std::make_shared<Placement>(self, seq);
    self->wait_locked(lock);
    return placement;
}

void DiskCompactor::wait() {
    std::unique_lock lock(mutex_);
    wait_locked(lock);
}

void DiskCompactor::shutdown() {
    std::unique_lock lock(mutex_);
    stopped_ = true;
    wait_locked(lock);
}

void DiskCompactor::wait_locked(std::unique_lock<std::mutex>& lock) {
    idle_.wait(lock, [this] { return !running_; });
    if (thread_.joinable()) thread_.join();  // it has set running_ and only returns now
}

void DiskCompactor::placed(uint64_t seq, bool ok, const std::vector<std::string>& own_dirs) noexcept {
    std::lock_guard lock(mutex_);
    --placing_;
    // Only the newest snapshot, with nothing else outstanding, may start one.
    if (!ok || stopped_ || running_ || seq != seq_ || placing_ != 0) return;
    bool any = false;
    for (const std::string& dir : own_dirs) any = any || !dir.empty();
    if (!any) return;
    try {
        if (thread_.joinable()) thread_.join();  // finished: running_ is false
        running_ = true;
        thread_ = std::thread([this, own_dirs] { run(own_dirs); });
    } catch (const std::exception& e) {
        running_ = false;
        log_line(fmt::format("disk compaction not started: {}", e.what()));
    }
}

void DiskCompactor::run(const std::vector<std::string>& own_dirs) noexcept {
    for (size_t i = 0; i < own_dirs.size() && i < disks_.size(); ++i) {
        {
            std::lock_guard lock(mutex_);
            if (stopped_) break;
        }
        if (own_dirs[i].empty()) continue;
        try {
            compact_disk(i, own_dirs[i]);
        } catch (const std::exception& e) {
            log_line(fmt::format("disk {}: compaction failed: {}", i, e.what()));
        }
    }
    std::lock_guard lock(mutex_);
    running_ = false;
    idle_.notify_all();
}

void DiskCompactor::compact_disk(size_t index, const std::string& own_dir) {
    BlockDevice& disk = *disks_[index];
    std::optional<CompactionPlan> plan;
    run_quiesced_([&] { plan = disk.plan_compaction(own_dir); });
    if (!plan || plan->layers() < kCompactAtLayers) return;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string temp = virtio::blk::compaction_temp_path(*plan);
    const virtio::blk::MergedLayerStats stats = BlockDevice::write_compaction(*plan, temp);  // the guest runs on
    run_quiesced_([&] { disk.adopt_compaction(*plan, temp); });
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    log_line(fmt::format("disk {}: compacted {} layers into 1 ({:.1f} MiB, {} ms)", index, plan->layers(),
                         static_cast<double>(stats.data_bytes) / static_cast<double>(MiB), ms.count()));
}

}  // namespace nanovm
