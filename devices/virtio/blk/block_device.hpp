// virtio-blk (virtio 1.2 §5.2) over a raw image file, on io_uring: reads and writes go
// straight between the file and guest RAM (the chain's buffers, as host iovecs),
// flush is an fdatasync of the file, discard and write-zeroes punch holes. One
// request queue of 256 entries; up to 256 requests in flight.
//
// The disk may instead be a chain of copy-on-write layers (layered_disk.hpp): opened
// from a layer file, or made so by freeze() (the O(1) disk snapshot). Then a read is
// split into runs that live in one layer (one io_uring read each, one after the
// other; runs present nowhere are zero-filled here), writes go to the top layer and
// mark their 4 KiB blocks present once complete, DISCARD / WRITE_ZEROES zero the
// range in the top (so it reads as zeros whatever the parents hold) and mark it,
// and FLUSH saves the top's bitmap, then fdatasyncs the top. A raw disk never frozen
// works exactly as before: one fd, the request's iovecs as they are. (Without FLUSH
// negotiated, a layered disk's writes are RWF_DSYNC but the top's bitmap is saved
// only at the next freeze or close: a host crash in between forgets those blocks.)
//
// Every byte the device stores into guest RAM (read data, GET_ID, status bytes) is
// reported to the memory's dirty tracker, when one is attached, as it is stored.
//
// Threading: everything but the constant config/feature reads and the counters runs
// on the EventLoop thread (activate, queue_notify, reset, the io_uring completion
// handler, drain, freeze). The ring's completion eventfd is watched on that loop while
// the device is active.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "devices/virtio/blk/blk_request.hpp"
#include "devices/virtio/blk/blk_spec.hpp"
#include "devices/virtio/blk/io_ring.hpp"
#include "devices/virtio/blk/layer_compaction.hpp"
#include "devices/virtio/blk/layered_disk.hpp"
#include "devices/virtio/device.hpp"
#include "vmm/fd.hpp"
#include "vmm/log.hpp"

namespace nanovm::virtio::blk {

/// What BlockOptions::path is. Said by the caller, never guessed from the file's
/// bytes: a raw disk's first sector is the guest's to write, and a forged layer
/// header there would name any host file as its parent.
enum class DiskFormat {
    raw,    ///< a raw image: the disk is the file's bytes
    layer,  ///< the top file of a layer chain (layered_disk.hpp); needs block_size 4096
};

/// How to open one disk.
struct BlockOptions {
    /// A raw image file (a regular file or a block device), or the top file of a
    /// layer chain (format layer).
    std::string path;
    bool read_only = false;   ///< open O_RDONLY, offer VIRTIO_BLK_F_RO: every write is IOERR
    std::string serial;       ///< the GET_ID string, at most 20 bytes (NUL-padded to 20)
    /// Logical block size in bytes, offered as blk_size with VIRTIO_BLK_F_BLK_SIZE
    /// (§5.2.4; Linux makes it the disk's logical block size, so it never issues
    /// smaller or less aligned I/O): 512, 1024, 2048 or 4096. Requests whose offset or
    /// length is not a multiple of it are IOERR. 4096 (kLayerBlockSize) is required
    /// for a layered disk and for freeze().
    uint32_t block_size = 512;
    DiskFormat format = DiskFormat::raw;
};

/// What the device has done since it was created (or since load_state). Every field
/// counts requests answered to the driver unless it says otherwise.
struct BlockCounters {
    uint64_t reads = 0;         ///< IN completed OK
    uint64_t writes = 0;        ///< OUT completed OK
    uint64_t flushes = 0;       ///< FLUSH completed OK = fdatasyncs of the backing file that succeeded
    uint64_t discards = 0;      ///< DISCARD completed OK
    uint64_t write_zeroes = 0;  ///< WRITE_ZEROES completed OK
    uint64_t get_ids = 0;       ///< GET_ID completed OK
    uint64_t bytes_read = 0;    ///< data bytes of the OK reads
    uint64_t bytes_written = 0; ///< data bytes of the OK writes
    uint64_t io_errors = 0;     ///< answered VIRTIO_BLK_S_IOERR (bad request or host I/O error)
    uint64_t unsupported = 0;   ///< answered VIRTIO_BLK_S_UNSUPP
    /// Requests never returned to the driver: in flight when it reset the device
    /// (their I/O was waited for, the rings were gone), or completed after the
    /// device failed (NEEDS_RESET: nothing more goes into its rings until the reset).
    uint64_t dropped_at_reset = 0;
};

/// The device's snapshot state. Small on purpose: the VM is paused and drain()ed
/// before a snapshot, so no request is in flight and nothing about the queue lives
/// here (the transport saves the QueueState). The disk's identity is saved so a
/// restore onto a different-sized or writable-vs-read-only disk is refused.
struct BlockState {
    uint64_t capacity_sectors = 0;  ///< disk size the guest saw, 512-byte sectors
    bool read_only = false;
    BlockCounters counters;
};

/// One virtio-blk device. Give it to an MmioTransport; destroy the transport first
/// (its destructor resets the device, which waits for in-flight I/O).
class BlockDevice final : public VirtioDevice {
public:
    /// QueueNumMax of the one request queue, and the most requests in flight.
    static constexpr uint16_t kQueueSize = 256;
    /// Segments per DISCARD / WRITE_ZEROES request, and sectors per segment (2 GiB).
    static constexpr uint32_t kMaxDiscardSeg = 32;
    static constexpr uint32_t kMaxDiscardSectors = 1u << 22;

    /// Opens `options.path` (O_RDWR or O_RDONLY, O_CLOEXEC) and sets up the io_uring.
    /// A raw disk's capacity = file size / 512 (a partial last sector is not
    /// visible); a layer chain's is its disk size (LayeredDisk::open checks the
    /// chain). Throws SysError (open, fstat, BLKGETSIZE64, io_uring setup) naming the
    /// path, or Error if the serial is longer than 20 bytes, the block size is not
    /// one of the four, the path is not a regular file or block device, or a layer
    /// chain is refused (or opened with a block size other than 4096).
    explicit BlockDevice(BlockOptions options);
    /// Waits for any I/O still in flight (normally none: the transport reset us). A
    /// writable layered disk saves its top's bitmap (no fsync; failures are logged),
    /// so that the top can be reopened with what the guest wrote.
    ~BlockDevice() override;
    BlockDevice(const BlockDevice&) = delete;
    BlockDevice& operator=(const BlockDevice&) = delete;

    uint32_t device_id() const override;
    std::string name() const override;
    /// SEG_MAX, BLK_SIZE and, if writable, FLUSH, DISCARD, WRITE_ZEROES; if
    /// read-only, RO.
    uint64_t device_features() const override;
    std::vector<uint16_t> queue_max_sizes() const override;
    /// virtio_blk_config (§5.2.4); constant for the device's life.
    void read_config(uint64_t offset, std::span<uint8_t> data) const override;
    /// Starts serving the request queue: watches the ring's eventfd on active.loop.
    /// Chains are taken on kicks (a snapshot is taken after drain(), so a restored
    /// queue has none waiting). Throws SysError if the loop refuses the fd.
    void activate(ActiveDevice& active) override;
    void queue_notify(uint16_t queue) override;
    /// Waits until every submitted I/O has completed (io_uring_submit_and_wait), drops
    /// those requests without touching guest memory, stops watching the ring. After
    /// it returns no I/O of this device reads or writes guest RAM.
    void reset() noexcept override;

    const BlockOptions& options() const noexcept { return options_; }
    /// Disk size in 512-byte sectors (the config space's capacity).
    uint64_t capacity_sectors() const noexcept { return config_.capacity; }
    /// Successful fdatasyncs for FLUSH requests (= counters().flushes). Any thread.
    uint64_t flush_count() const noexcept { return counters_.flushes.load(std::memory_order_relaxed); }
    /// A copy of the counters. Any thread; fields are read one by one (not one snapshot).
    BlockCounters counters() const noexcept;
    /// Requests taken from the queue and not yet returned to the driver. Any thread.
    size_t in_flight() const noexcept { return in_flight_.load(std::memory_order_relaxed); }

    /// For pause (vCPUs stopped): takes every chain the driver has published, kicked
    /// or not, and completes it and everything already in flight, returning them to
    /// the driver (with interrupt), so that in_flight() == 0 and the avail ring is
    /// empty. Loop thread only; a no-op when not active. A malformed chain met
    /// meanwhile fails the device (DeviceLink::fail) instead of throwing.
    void drain() noexcept;
    /// The state to snapshot. Throws Error if requests are in flight (drain() first).
    BlockState save_state() const;
    /// Restores the counters. Throws Error if `state` was saved from a disk of another
    /// capacity or read-only setting. Call before activation.
    void load_state(const BlockState& state);

    /// The disk snapshot: freezes the current top and continues on a new empty top
    /// layer created at `new_top_path` (O_EXCL, 0600) over it; returns the frozen
    /// file's path. On a raw disk (the first freeze) the raw file itself becomes the
    /// read-only base (kind raw) and is returned; it must not change afterwards. O(1)
    /// in the disk size apart from writing the top's bitmap (pwrite); nothing is
    /// fsync'd: run LayeredDisk::sync_frozen(returned path) before relying on it.
    /// Call on the loop thread or with the device not active, with no request in
    /// flight (drain() first; vCPUs stopped). Throws Error (requests in flight,
    /// read-only disk, block_size not 4096, raw size not a multiple of 4096, chain
    /// too deep) or SysError; on failure the disk is unchanged.
    std::string freeze(const std::string& new_top_path);
    /// The disk's files, top first: {path} for a raw disk never frozen, else the
    /// layer chain's files (LayeredDisk::chain_paths). Same threading as freeze().
    std::vector<std::string> layer_paths() const;
    /// True once the disk is a layer chain (opened from a layer file, or frozen).
    bool layered() const noexcept { return layers_ != nullptr; }

    // Compaction of the layer chain (layer_compaction.hpp), in three steps: plan and
    // adopt on the loop thread, the long write in between on any thread while the
    // guest runs on.

    /// Step 1: the run of frozen layers in `own_dir` (the VM's own directory) directly
    /// below the top, if it has >= 2 layers (LayeredDisk::plan_compaction); nullopt
    /// for a raw or read-only disk. Cheap (two header reads, no data). Same threading
    /// as freeze() (no request need be drained). Throws Error / SysError.
    std::optional<CompactionPlan> plan_compaction(const std::string& own_dir) const;
    /// Step 2: writes the merged layer of `plan` to `temp_path`
    /// (write_merged_layer; compaction_temp_path gives the usual name). Any thread,
    /// no lock, the device running: it reads only the plan's fds of frozen files.
    static MergedLayerStats write_compaction(const CompactionPlan& plan, const std::string& temp_path);
    /// Step 3: puts the merged layer in place of the run (LayeredDisk::adopt_compaction).
    /// Only while the device is quiesced: on the loop thread with no request in
    /// flight and none started until it returns -- inside VmDevices::run_quiesced
    /// (disks drained, the loop busy with this call), or with the device not active.
    /// The vCPUs may run. A freeze since the plan is fine. Throws Error (requests in
    /// flight, not layered, the chain no longer holds the run) or what adopt throws;
    /// before the rename the chain is unchanged and `temp_path` removed.
    void adopt_compaction(const CompactionPlan& plan, const std::string& temp_path);

private:
    /// One request in flight: the parsed request and how far its I/O got.
    struct Slot {
        BlockRequest request;
        size_t iov_next = 0;    // IN/OUT: first iovec not completely transferred
        uint64_t done = 0;      // IN/OUT: bytes transferred
        size_t range_next = 0;  // DISCARD/WRITE_ZEROES: next range
        bool zero_range = false;  // the fallocate in flight is a ZERO_RANGE (not a PUNCH_HOLE)
        bool syncing = false;   // the final write-through fdatasync is in flight
        uint8_t retries = 0;    // resubmissions after EINTR/EAGAIN
        std::vector<iovec> piece{};  // layered IN: the iovecs of the run being read (kept for the kernel)
    };
    struct AtomicCounters {
        std::atomic<uint64_t> reads{0}, writes{0}, flushes{0}, discards{0}, write_zeroes{0}, get_ids{0},
            bytes_read{0}, bytes_written{0}, io_errors{0}, unsupported{0}, dropped_at_reset{0};
    };

    void process_queue();
    void start(BlockRequest&& request);
    void issue(uint16_t slot);
    bool next_read_run(Slot& slot, DiskExtent& run);
    void transferred(Slot& slot, uint64_t bytes);
    void mark_guest_dirty(const void* host, uint64_t len) const noexcept;
    void on_completion(uint16_t slot, int result);
    void finish(uint16_t slot, uint8_t status);
    void answer(const BlockRequest& request, uint8_t status);
    void count(const BlockRequest& request, uint8_t status);
    void reap(bool deliver);
    void wait_idle(bool deliver);
    void signal_if_needed();
    void on_ring_event() noexcept;
    void fail_device(const std::string& why) noexcept;
    void log_limited(const std::string& line);

    const BlockOptions options_;
    Fd file_;                                // the raw disk; empty once layered
    std::unique_ptr<LayeredDisk> layers_;    // the layer chain, when layered
    Config config_{};
    uint64_t features_ = 0;
    IoRing ring_;

    ActiveDevice* active_ = nullptr;  // between activate() and reset()
    RequestLimits limits_;
    bool write_through_ = false;      // FLUSH offered but not negotiated: writes must be stable (§5.2.6.2)
    bool zero_range_supported_ = true;

    std::vector<Slot> slots_;              // kQueueSize, never reallocated (the kernel holds iovec pointers)
    std::vector<uint16_t> free_slots_;
    std::atomic<size_t> in_flight_{0};     // busy slots
    uint32_t sqes_in_flight_ = 0;          // SQEs prepared whose CQE is not reaped yet
    bool blocked_ = false;                 // stopped popping for lack of slots; completions resume
    bool pushed_ = false;                  // used elements published since the last interrupt check
    AtomicCounters counters_;
    RateLimiter log_limit_;
};

}  // namespace nanovm::virtio::blk
