// Background compaction of a VM's disk layer chains (issue 5, "Layer chains are
// compacted"). Every snapshot freezes each writable disk's top into a new layer file
// in the VM's own directory; once the run of such frozen layers below a disk's top
// reaches kCompactAtLayers, one thread merges it into one layer
// (devices/virtio/blk/layer_compaction.hpp): the plan and the adopt run on the
// device thread (VmDevices::run_quiesced), the write in between while the guest runs.
//
// Ordering with snapshots. A snapshot lists the frozen files of the VM's directory
// and links them into its own directory later, in the background (the extra_parts of
// snapshot::start_full_snapshot); a compaction renames and unlinks exactly such
// files. So:
//   - a compaction starts only once the newest snapshot's files are placed and no
//     older snapshot's placement is outstanding (the Placement token below), and
//   - a snapshot waits for a running compaction before it freezes
//     (begin_snapshot; call wait() before pausing the VM so that the wait is not
//     inside the pause).
// Hence a compaction never overlaps a snapshot between its freeze and its placement,
// and snapshot directories always hold the files their manifests name. The waiting
// side was chosen over "adopt re-plans and skips if the chain changed" because a VM
// snapshotted more often than a compaction takes would never get compacted.
//
// A failed compaction is logged and leaves the chain as it was; it is never fatal.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nanovm {

namespace virtio::blk {
class BlockDevice;
}

class DiskCompactor {
public:
    /// A disk is compacted when this many frozen layers of the VM's own directory lie
    /// below its top. Each snapshot hard-links every such layer into its directory
    /// and lists it, with its CRC, in its manifest, and a restore opens and checks
    /// each: 4 bounds that work (and the chain's depth in the VM's directory, far
    /// from LayeredDisk::kMaxDepth) while the merged layer is rewritten only once
    /// every 3 snapshots (at 2 it would be copied again at every snapshot).
    static constexpr size_t kCompactAtLayers = 4;

    /// Runs `work` on the device thread with every disk drained (VmDevices::run_quiesced).
    using RunQuiesced = std::function<void(const std::function<void()>& work)>;

    /// `disks` in bus order; they and `run_quiesced` must stay usable until shutdown().
    DiskCompactor(std::vector<virtio::blk::BlockDevice*> disks, RunQuiesced run_quiesced);
    /// Calls shutdown().
    ~DiskCompactor();
    DiskCompactor(const DiskCompactor&) = delete;
    DiskCompactor& operator=(const DiskCompactor&) = delete;

    /// One snapshot's claim on its frozen files, from begin_snapshot() until its
    /// files are placed. finish(true) once they are (this may start a compaction, on
    /// its own thread), finish(false) if the snapshot failed; destroyed unfinished, it
    /// counts as failed. Any thread; finish() more than once is ignored.
    class Placement {
    public:
        Placement(std::weak_ptr<DiskCompactor> owner, uint64_t seq) : owner_(std::move(owner)), seq_(seq) {}
        ~Placement() { finish(false); }
        Placement(const Placement&) = delete;
        Placement& operator=(const Placement&) = delete;
        /// The VM's own directory of each disk (bus order; empty: not compacted, e.g.
        /// read-only). Set before finish().
        void set_own_dirs(std::vector<std::string> dirs) { own_dirs_ = std::move(dirs); }
        void finish(bool placed) noexcept;

    private:
        std::weak_ptr<DiskCompactor> owner_;
        uint64_t seq_;
        std::vector<std::string> own_dirs_;
        std::atomic<bool> finished_{false};
    };

    /// Before a snapshot freezes anything: waits for a running compaction, and makes
    /// every earlier snapshot's placement too old to start one. `self` is this
    /// compactor's owning pointer (the token refers to it weakly). Control thread.
    static std::shared_ptr<Placement> begin_snapshot(const std::shared_ptr<DiskCompactor>& self);
    /// Waits for a running compaction to end. Any thread but the compaction's.
    void wait();
    /// Waits for a running compaction and starts no more. Idempotent.
    void shutdown();

private:
    void placed(uint64_t seq, bool ok, const std::vector<std::string>& own_dirs) noexcept;
    void run(const std::vector<std::string>& own_dirs) noexcept;
    void compact_disk(size_t index, const std::string& own_dir);
    // Waits (with `lock` on mutex_) until no compaction runs, and joins its thread.
    void wait_locked(std::unique_lock<std::mutex>& lock);

    const std::vector<virtio::blk::BlockDevice*> disks_;
    const RunQuiesced run_quiesced_;
    std::mutex mutex_;       // guards everything below
    uint64_t seq_ = 0;       // snapshots begun
    size_t placing_ = 0;     // snapshots begun whose placement has not finished
    bool running_ = false;   // a compaction thread is working
    bool stopped_ = false;   // shutdown(): no more compactions
    std::condition_variable idle_;  // running_ turned false
    std::thread thread_;     // the last compaction thread (joined before the next)
};

}  // namespace nanovm
