#include "devices/virtio/blk/block_device.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "vmm/error.hpp"

namespace nanovm::virtio::blk {

namespace {

Fd open_disk(const BlockOptions& options) {
    Fd fd(::open(options.path.c_str(), (options.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC));
    if (!fd) throw_errno(fmt::format("open({})", options.path));
    return fd;
}

// Disk size in bytes and the host's preferred I/O size (for the discard alignment).
std::pair<uint64_t, uint64_t> disk_geometry(const Fd& fd, const std::string& path) {
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw_errno(fmt::format("fstat({})", path));
    const uint64_t blksize = st.st_blksize > 0 ? static_cast<uint64_t>(st.st_blksize) : 4096;
    if (S_ISREG(st.st_mode)) return {static_cast<uint64_t>(st.st_size), blksize};
    if (S_ISBLK(st.st_mode)) {
        uint64_t bytes = 0;
        if (::ioctl(fd.get(), BLKGETSIZE64, &bytes) != 0) throw_errno(fmt::format("BLKGETSIZE64({})", path));
        return {bytes, blksize};
    }
    throw Error(fmt::format("virtio-blk: {} is neither a regular file nor a block device", path));
}

// Drops `bytes` from the front of iov[next...], adjusting the first partial iovec.
void consume_iovecs(std::vector<iovec>& iov, size_t& next, uint64_t bytes) {
    while (bytes > 0 && next < iov.size()) {
        const uint64_t n = std::min<uint64_t>(bytes, iov[next].iov_len);
        iov[next].iov_base = static_cast<uint8_t*>(iov[next].iov_base) + n;
        iov[next].iov_len -= n;
        bytes -= n;
        if (iov[next].iov_len == 0) ++next;
    }
}

bool transient(int result) { return result == -EINTR || result == -EAGAIN; }
// Resubmissions of one SQE after EINTR/EAGAIN before the request fails.
constexpr uint8_t kMaxRetries = 16;

// The logical block sizes BlockOptions::block_size may take (bytes).
bool valid_block_size(uint32_t bytes) { return bytes >= kSectorSize && bytes <= 4096 && (bytes & (bytes - 1)) == 0; }

}  // namespace

BlockDevice::BlockDevice(BlockOptions options)
    : options_(std::move(options)), file_(open_disk(options_)), ring_(kQueueSize), slots_(kQueueSize) {
    if (options_.serial.size() > kIdBytes)
        throw Error(fmt::format("virtio-blk {}: serial '{}' is longer than {} bytes", options_.path, options_.serial,
                                kIdBytes));
    if (!valid_block_size(options_.block_size))
        throw Error(fmt::format("virtio-blk {}: block size {} is not 512, 1024, 2048 or 4096", options_.path,
                                options_.block_size));
    auto [bytes, blksize] = disk_geometry(file_, options_.path);
    if (options_.format == DiskFormat::layer) {
        if (options_.block_size != kLayerBlockSize)
            throw Error(fmt::format("virtio-blk {}: a layered disk needs block size {}, not {}", options_.path,
                                    kLayerBlockSize, options_.block_size));
        layers_ = std::make_unique<LayeredDisk>(LayeredDisk::open(options_.path, !options_.read_only));
        file_.reset();
        bytes = layers_->disk_bytes();
    } else if (is_layer_file(file_.get())) {  // a forgotten format, or what the guest wrote: raw it is
        log_line(fmt::format("virtio-blk {}: starts with the disk layer magic but is opened as a raw disk",
                             options_.path));
    }
    config_.capacity = bytes / kSectorSize;
    config_.seg_max = kQueueSize - 2;  // the header and the status take a descriptor each
    config_.blk_size = options_.block_size;
    config_.num_queues = 1;
    const auto alignment = static_cast<uint32_t>(
        std::clamp<uint64_t>(std::max<uint64_t>(blksize, options_.block_size) / kSectorSize, 1, 2048));
    config_.max_discard_sectors = kMaxDiscardSectors;
    config_.max_discard_seg = kMaxDiscardSeg;
    config_.discard_sector_alignment = alignment;
    config_.max_write_zeroes_sectors = kMaxDiscardSectors;
    config_.max_write_zeroes_seg = kMaxDiscardSeg;
    config_.write_zeroes_may_unmap = 1;
    features_ = feature::kSegMax | feature::kBlkSize;
    features_ |= options_.read_only ? feature::kRo : feature::kFlush | feature::kDiscard | feature::kWriteZeroes;
    free_slots_.reserve(kQueueSize);
    for (uint16_t i = kQueueSize; i > 0; --i) free_slots_.push_back(static_cast<uint16_t>(i - 1));
}

BlockDevice::~BlockDevice() {
    // Normally a no-op: the transport resets the device before it goes. Never leave
    // the kernel writing into memory after the ring is gone.
    if (active_) {
        try {
            active_->loop.run_sync([this] { reset(); });
        } catch (...) {
        }
    }
    if (sqes_in_flight_ > 0) wait_idle(false);
    if (layers_ && layers_->writable()) {
        try {
            layers_->save_bitmap();
        } catch (const std::exception& e) {
            log_line(fmt::format("{}: saving the top layer's bitmap: {}", name(), e.what()));
        }
    }
}

uint32_t BlockDevice::device_id() const { return device_id::kBlock; }

std::string BlockDevice::name() const {
    return fmt::format("virtio-blk {}", options_.serial.empty() ? options_.path : options_.serial);
}

uint64_t BlockDevice::device_features() const { return features_; }

std::vector<uint16_t> BlockDevice::queue_max_sizes() const { return {kQueueSize}; }

void BlockDevice::read_config(uint64_t offset, std::span<uint8_t> data) const {
    if (offset >= sizeof(Config)) return;
    const auto* bytes = reinterpret_cast<const uint8_t*>(&config_);
    const size_t n = std::min<uint64_t>(data.size(), sizeof(Config) - offset);
    std::memcpy(data.data(), bytes + offset, n);
}

BlockCounters BlockDevice::counters() const noexcept {
    const auto get = [](const std::atomic<uint64_t>& v) { return v.load(std::memory_order_relaxed); };
    const AtomicCounters& c = counters_;
    return {get(c.reads),        get(c.writes),        get(c.flushes),   get(c.discards),
            get(c.write_zeroes), get(c.get_ids),       get(c.bytes_read), get(c.bytes_written),
            get(c.io_errors),    get(c.unsupported),   get(c.dropped_at_reset)};
}

void BlockDevice::activate(ActiveDevice& active) {
    active_ = &active;
    limits_ = RequestLimits{};
    limits_.capacity_sectors = config_.capacity;
    limits_.read_only = options_.read_only;
    limits_.discard = (active.features & feature::kDiscard) != 0;
    limits_.write_zeroes = (active.features & feature::kWriteZeroes) != 0;
    limits_.max_discard_sectors = config_.max_discard_sectors;
    limits_.max_discard_seg = config_.max_discard_seg;
    limits_.max_write_zeroes_sectors = config_.max_write_zeroes_sectors;
    limits_.max_write_zeroes_seg = config_.max_write_zeroes_seg;
    limits_.io_alignment = options_.block_size;
    // §5.2.6.2: FLUSH offered but not negotiated means the driver assumes a
    // write-through cache, so a write may complete only once it is stable.
    write_through_ = !options_.read_only && !(active.features & feature::kFlush);
    blocked_ = false;
    pushed_ = false;
    ring_.clear_eventfd();
    active.loop.add(ring_.eventfd(), EPOLLIN, [this](uint32_t) { on_ring_event(); });
}

void BlockDevice::queue_notify(uint16_t queue) {
    if (!active_ || queue != 0) return;
    process_queue();
}

// Pops chains while a slot is free, parses them and starts their I/O, then submits
// everything at once. Notifications stay off while we are busy (§2.7.10); when we
// run out of slots they stay off until a completion frees one (on_ring_event).
void BlockDevice::process_queue() {
    Virtqueue& queue = active_->queues[0];
    GuestMemory& memory = active_->memory;
    try {
        for (;;) {
            queue.enable_notification(memory, false);
            while (!free_slots_.empty()) {
                std::optional<DescriptorChain> chain = queue.pop(memory);
                if (!chain) break;
                start(parse_request(memory, *chain, limits_));
            }
            if (free_slots_.empty()) {
                blocked_ = true;
                break;
            }
            if (!queue.enable_notification(memory, true)) break;  // true: more arrived meanwhile
        }
    } catch (...) {
        // Whatever was started still goes to the kernel (reset waits for it).
        ring_.submit();
        signal_if_needed();
        throw;
    }
    ring_.submit();
    signal_if_needed();
}

void BlockDevice::start(BlockRequest&& request) {
    if (request.status != request_status::kOk) {
        log_limited(fmt::format("{}: request (head {}, type {}) refused: {}", name(), request.head, request.type,
                                request.error ? request.error : "?"));
        answer(request, request.status);
        return;
    }
    if (request.type == request_type::kGetId) {
        char id[kIdBytes] = {};
        std::memcpy(id, options_.serial.data(), options_.serial.size());
        uint64_t at = 0;
        for (const iovec& v : request.data) {  // data_bytes <= 20 in total
            std::memcpy(v.iov_base, id + at, v.iov_len);
            mark_guest_dirty(v.iov_base, v.iov_len);
            at += v.iov_len;
        }
        answer(request, request_status::kOk);
        return;
    }
    if (request.type == request_type::kFlush && options_.read_only) {
        answer(request, request_status::kOk);  // nothing can be dirty
        return;
    }
    const bool transfer = request.type == request_type::kIn || request.type == request_type::kOut;
    if (transfer && request.data_bytes == 0) {
        answer(request, request_status::kOk);  // a read or write of no sectors
        return;
    }
    const uint16_t slot = free_slots_.back();
    free_slots_.pop_back();
    in_flight_.fetch_add(1, std::memory_order_relaxed);
    slots_[slot] = Slot{std::move(request)};
    issue(slot);
}

// Prepares the next SQE of a request (user_data = slot). Each request has at most
// one SQE in flight, so the ring (kQueueSize entries) never overflows.
//
// Flush ordering: the FLUSH's fdatasync is submitted without IOSQE_IO_DRAIN/LINK.
// That is enough because a guest only relies on a flush for writes it has seen
// complete before it sends the flush (§5.2.6.2: "a write becomes stable once it is
// completed and" a flush "is sent after the write is completed"; Linux's block layer
// waits for those completions before issuing the flush). Such a write's data is in
// the page cache when its CQE arrives, and fdatasync covers everything in the page
// cache when it runs.
void BlockDevice::issue(uint16_t slot_index) {
    Slot& slot = slots_[slot_index];
    BlockRequest& r = slot.request;
    io_uring_sqe* sqe = nullptr;
    const auto get = [&]() {
        sqe = ring_.get_sqe();
        return sqe != nullptr;
    };
    // Layered: writes, flushes and zeroing go to the top layer's data area.
    const int fd = layers_ ? layers_->top_fd() : file_.get();
    const uint64_t data_offset = layers_ ? layers_->top_data_offset() : 0;
    switch (r.type) {
        case request_type::kIn:
        case request_type::kOut: {
            int io_fd = fd;
            uint64_t at = data_offset + r.offset + slot.done;
            const iovec* iov = r.data.data() + slot.iov_next;
            auto count = static_cast<unsigned>(r.data.size() - slot.iov_next);
            if (layers_ && r.type == request_type::kIn) {
                DiskExtent run;
                if (!next_read_run(slot, run)) {  // the rest was present nowhere: zeros
                    finish(slot_index, request_status::kOk);
                    return;
                }
                io_fd = run.fd;
                at = run.file_offset;
                iov = slot.piece.data();
                count = static_cast<unsigned>(slot.piece.size());
            }
            if (!get()) break;
            if (r.type == request_type::kIn) {
                io_uring_prep_readv(sqe, io_fd, iov, count, at);
            } else {
                io_uring_prep_writev2(sqe, io_fd, iov, count, at, write_through_ ? RWF_DSYNC : 0);
            }
            break;
        }
        case request_type::kFlush:
            if (layers_) {  // what the top holds must be in its file before the fdatasync
                try {
                    layers_->save_bitmap();
                } catch (const std::exception& e) {
                    log_limited(fmt::format("{}: flush (head {}): {}", name(), r.head, e.what()));
                    finish(slot_index, request_status::kIoErr);
                    return;
                }
            }
            if (get()) io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
            break;
        case request_type::kDiscard:
        case request_type::kWriteZeroes: {
            while (slot.range_next < r.ranges.size() && r.ranges[slot.range_next].length == 0) ++slot.range_next;
            if (slot.range_next == r.ranges.size()) {
                if (!write_through_ || slot.syncing) {
                    finish(slot_index, request_status::kOk);
                    return;
                }
                slot.syncing = true;
                if (get()) io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
                break;
            }
            const ByteRange& range = r.ranges[slot.range_next];
            // WRITE_ZEROES without unmap keeps the blocks allocated (ZERO_RANGE) where
            // the file system can; a DISCARD, or WRITE_ZEROES with unmap, punches.
            slot.zero_range = r.type == request_type::kWriteZeroes && !range.unmap && zero_range_supported_;
            const int mode = FALLOC_FL_KEEP_SIZE | (slot.zero_range ? FALLOC_FL_ZERO_RANGE : FALLOC_FL_PUNCH_HOLE);
            // Layered: the top's hole or zeroed range then reads as zeros, hiding the parents.
            if (get())
                io_uring_prep_fallocate(sqe, fd, mode, static_cast<off_t>(data_offset + range.offset),
                                        static_cast<off_t>(range.length));
            break;
        }
        default:
            break;
    }
    if (!sqe) {
        log_limited(fmt::format("{}: no io_uring submission slot; request (head {}) fails", name(), r.head));
        finish(slot_index, request_status::kIoErr);
        return;
    }
    io_uring_sqe_set_data64(sqe, slot_index);
    ++sqes_in_flight_;
}

void BlockDevice::on_completion(uint16_t slot_index, int result) {
    Slot& slot = slots_[slot_index];
    BlockRequest& r = slot.request;
    if (transient(result) && slot.retries++ < kMaxRetries) return issue(slot_index);
    const auto host_error = [&](const char* what) {
        log_limited(fmt::format("{}: {} (head {}): {}", name(), what, r.head,
                                result < 0 ? std::strerror(-result) : "no progress (end of file)"));
        finish(slot_index, request_status::kIoErr);
    };
    switch (r.type) {
        case request_type::kIn:
        case request_type::kOut: {
            // 0 bytes = the file shrank under us (or a write made no progress): an
            // error, never a loop and never a used length covering unread bytes.
            if (result <= 0) return host_error(r.type == request_type::kIn ? "read" : "write");
            transferred(slot, static_cast<uint64_t>(result));
            if (slot.done < r.data_bytes) return issue(slot_index);  // short, or the next run: the rest
            if (layers_ && r.type == request_type::kOut) layers_->mark_present(r.offset, r.data_bytes);
            return finish(slot_index, request_status::kOk);
        }
        case request_type::kFlush:
            if (result < 0) return host_error("fdatasync");
            return finish(slot_index, request_status::kOk);
        case request_type::kDiscard:
        case request_type::kWriteZeroes:
            if (slot.syncing) {
                if (result < 0) return host_error("fdatasync");
                return finish(slot_index, request_status::kOk);
            }
            if (result == -EOPNOTSUPP) {
                if (slot.zero_range) {  // no ZERO_RANGE here: punching also reads back zeros
                    zero_range_supported_ = false;
                    return issue(slot_index);
                }
                // §5.2.6.2: a discard MAY deallocate; a file system that cannot punch
                // holes simply keeps the data. A write-zeroes must zero: error.
                if (r.type == request_type::kWriteZeroes) return host_error("fallocate");
            } else if (result < 0) {
                return host_error("fallocate");
            } else if (layers_) {
                layers_->mark_present(r.ranges[slot.range_next].offset, r.ranges[slot.range_next].length);
            }
            ++slot.range_next;
            return issue(slot_index);
        default:
            return finish(slot_index, request_status::kIoErr);
    }
}

// Layered IN: zero-fills the runs at the request's position that no layer holds,
// then points slot.piece at the iovecs of the next run, which lives in `run`'s file.
// False when the request is complete.
bool BlockDevice::next_read_run(Slot& slot, DiskExtent& run) {
    BlockRequest& r = slot.request;
    for (;;) {
        if (slot.done >= r.data_bytes) return false;
        run = layers_->extent_at(r.offset + slot.done, r.data_bytes - slot.done);
        if (run.fd >= 0) break;
        uint64_t left = run.length;
        for (size_t i = slot.iov_next; left > 0 && i < r.data.size(); ++i) {
            const uint64_t n = std::min<uint64_t>(left, r.data[i].iov_len);
            std::memset(r.data[i].iov_base, 0, n);
            left -= n;
        }
        transferred(slot, run.length);
    }
    slot.piece.clear();
    uint64_t left = run.length;
    for (size_t i = slot.iov_next; left > 0 && i < r.data.size(); ++i) {
        const uint64_t n = std::min<uint64_t>(left, r.data[i].iov_len);
        slot.piece.push_back({r.data[i].iov_base, n});
        left -= n;
    }
    return true;
}

// Counts `bytes` of an IN/OUT as done: an IN's bytes are now in guest RAM (marked for
// the dirty tracker), and the iovecs move past them.
void BlockDevice::transferred(Slot& slot, uint64_t bytes) {
    BlockRequest& r = slot.request;
    if (r.type == request_type::kIn && active_ && active_->memory.dirty_tracker()) {
        uint64_t left = bytes;
        for (size_t i = slot.iov_next; left > 0 && i < r.data.size(); ++i) {
            const uint64_t n = std::min<uint64_t>(left, r.data[i].iov_len);
            mark_guest_dirty(r.data[i].iov_base, n);
            left -= n;
        }
    }
    slot.done += bytes;
    if (slot.done < r.data_bytes) consume_iovecs(r.data, slot.iov_next, bytes);
}

// Tells the snapshot's dirty tracker that the device stored `len` bytes at the host
// address `host` (inside one region of guest RAM: the parser checked it). KVM's dirty
// log does not see such writes (vmm/dirty_tracker.hpp). No-op without a tracker.
void BlockDevice::mark_guest_dirty(const void* host, uint64_t len) const noexcept {
    if (!active_ || !active_->memory.dirty_tracker()) return;
    const auto* p = static_cast<const uint8_t*>(host);
    for (const MemoryRegion& region : active_->memory.regions()) {
        if (p >= region.host && static_cast<uint64_t>(p - region.host) < region.size) {
            active_->memory.mark_dirty(region.gpa + static_cast<uint64_t>(p - region.host), len);
            return;
        }
    }
}

void BlockDevice::finish(uint16_t slot_index, uint8_t status) {
    answer(slots_[slot_index].request, status);
    slots_[slot_index] = Slot{};  // drops the iovecs
    free_slots_.push_back(slot_index);
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
}

// Status byte, then the used element (push_used orders them for the driver). A
// failed device (NEEDS_RESET) answers nothing: its rings are the driver's to reset,
// so the request is dropped and counted.
void BlockDevice::answer(const BlockRequest& request, uint8_t status) {
    if (active_->link.failed()) {
        counters_.dropped_at_reset.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    *request.status_byte = status;
    mark_guest_dirty(request.status_byte, 1);
    count(request, status);
    try {
        active_->queues[0].push_used(active_->memory, request.head, used_length(request, status));
        pushed_ = true;
    } catch (const std::exception& e) {
        fail_device(e.what());
    }
}

void BlockDevice::count(const BlockRequest& request, uint8_t status) {
    AtomicCounters& c = counters_;
    const auto add = [](std::atomic<uint64_t>& v, uint64_t n = 1) { v.fetch_add(n, std::memory_order_relaxed); };
    if (status == request_status::kIoErr) return add(c.io_errors);
    if (status == request_status::kUnsupp) return add(c.unsupported);
    if (request.type == request_type::kFlush && options_.read_only) return;  // answered without an fdatasync
    switch (request.type) {
        case request_type::kIn: add(c.reads); add(c.bytes_read, request.data_bytes); break;
        case request_type::kOut: add(c.writes); add(c.bytes_written, request.data_bytes); break;
        case request_type::kFlush: add(c.flushes); break;
        case request_type::kDiscard: add(c.discards); break;
        case request_type::kWriteZeroes: add(c.write_zeroes); break;
        case request_type::kGetId: add(c.get_ids); break;
        default: break;
    }
}

// Handles every completion that has arrived. With deliver == false (reset), or once
// the device failed, the requests are dropped without touching guest memory or the
// rings, and without issuing their next step.
void BlockDevice::reap(bool deliver) {
    io_uring* ring = ring_.get();
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(ring, &cqe) == 0) {
        const auto slot = static_cast<uint16_t>(io_uring_cqe_get_data64(cqe));
        const int result = cqe->res;
        io_uring_cqe_seen(ring, cqe);
        --sqes_in_flight_;
        if (deliver && !(active_ && active_->link.failed())) {
            on_completion(slot, result);
        } else {
            slots_[slot] = Slot{};
            free_slots_.push_back(slot);
            in_flight_.fetch_sub(1, std::memory_order_relaxed);
            counters_.dropped_at_reset.fetch_add(1, std::memory_order_relaxed);
        }
    }
}

// Blocks until no SQE of ours is in the kernel (submitting any still queued).
void BlockDevice::wait_idle(bool deliver) {
    while (sqes_in_flight_ > 0) {
        const int r = io_uring_submit_and_wait(ring_.get(), 1);
        if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY)
            log_limited(fmt::format("{}: io_uring_submit_and_wait: {}", name(), std::strerror(-r)));
        reap(deliver);
    }
}

void BlockDevice::signal_if_needed() {
    if (!pushed_ || !active_) return;
    pushed_ = false;
    try {
        if (active_->queues[0].needs_interrupt(active_->memory)) active_->link.signal_used();
    } catch (const std::exception& e) {
        fail_device(e.what());
    }
}

void BlockDevice::on_ring_event() noexcept {
    ring_.clear_eventfd();  // first: a completion after this read signals it again
    if (!active_) return;
    try {
        reap(true);
        ring_.submit();  // resubmissions of short transfers, next ranges
        if (blocked_ && !free_slots_.empty()) {
            blocked_ = false;
            if (!active_->link.failed()) process_queue();
        }
        signal_if_needed();
    } catch (const std::exception& e) {
        fail_device(e.what());
    }
}

void BlockDevice::reset() noexcept {
    if (!active_) return;
    const size_t dropped = in_flight();
    wait_idle(false);
    try {
        active_->loop.remove(ring_.eventfd());
    } catch (const std::exception& e) {
        log_line(fmt::format("{}: stop watching io_uring: {}", name(), e.what()));
    }
    ring_.clear_eventfd();
    if (dropped > 0) log_limited(fmt::format("{}: reset dropped {} requests in flight", name(), dropped));
    active_ = nullptr;
    blocked_ = false;
    pushed_ = false;
}

void BlockDevice::drain() noexcept {
    if (!active_) return;
    try {
        // Everything the driver has published, kicked or not, and everything in
        // flight; chains that wait for a slot go in once slots free up.
        for (;;) {
            if (!active_->link.failed()) process_queue();
            if (sqes_in_flight_ == 0) break;
            wait_idle(true);
        }
        signal_if_needed();
    } catch (const std::exception& e) {
        fail_device(e.what());
        try {
            wait_idle(true);
            signal_if_needed();
        } catch (...) {
        }
    }
}

BlockState BlockDevice::save_state() const {
    if (const size_t n = in_flight(); n > 0)
        throw Error(fmt::format("{}: cannot save state with {} requests in flight (drain first)", name(), n));
    return {config_.capacity, options_.read_only, counters()};
}

void BlockDevice::load_state(const BlockState& state) {
    if (state.capacity_sectors != config_.capacity || state.read_only != options_.read_only)
        throw Error(fmt::format("{}: saved state is for a {}-sector {} disk, this one has {} sectors and is {}", name(),
                                state.capacity_sectors, state.read_only ? "read-only" : "writable", config_.capacity,
                                options_.read_only ? "read-only" : "writable"));
    const BlockCounters& s = state.counters;
    AtomicCounters& c = counters_;
    const auto set = [](std::atomic<uint64_t>& v, uint64_t x) { v.store(x, std::memory_order_relaxed); };
    set(c.reads, s.reads);
    set(c.writes, s.writes);
    set(c.flushes, s.flushes);
    set(c.discards, s.discards);
    set(c.write_zeroes, s.write_zeroes);
    set(c.get_ids, s.get_ids);
    set(c.bytes_read, s.bytes_read);
    set(c.bytes_written, s.bytes_written);
    set(c.io_errors, s.io_errors);
    set(c.unsupported, s.unsupported);
    set(c.dropped_at_reset, s.dropped_at_reset);
}

std::string BlockDevice::freeze(const std::string& new_top_path) {
    if (in_flight() > 0 || sqes_in_flight_ > 0)
        throw Error(fmt::format("{}: cannot freeze with {} requests in flight (drain first)", name(), in_flight()));
    if (options_.read_only) throw Error(fmt::format("{}: a read-only disk cannot be frozen", name()));
    if (options_.block_size != kLayerBlockSize)
        throw Error(fmt::format("{}: freezing needs block size {}, this disk has {}", name(), kLayerBlockSize,
                                options_.block_size));
    if (layers_) return layers_->freeze(new_top_path);
    // The first freeze: the raw file becomes the read-only base of a chain.
    LayeredDisk::create_top(new_top_path, options_.path, ParentKind::raw);
    try {
        auto chain = std::make_unique<LayeredDisk>(LayeredDisk::open(new_top_path, true));
        if (chain->disk_bytes() != config_.capacity * kSectorSize)
            throw Error(fmt::format("{}: {} now has {} bytes, the guest's disk {}", name(), options_.path,
                                    chain->disk_bytes(), config_.capacity * kSectorSize));
        layers_ = std::move(chain);
    } catch (...) {
        ::unlink(new_top_path.c_str());
        throw;
    }
    file_.reset();
    return options_.path;
}

std::vector<std::string> BlockDevice::layer_paths() const {
    if (layers_) return layers_->chain_paths();
    return {options_.path};
}

std::optional<CompactionPlan> BlockDevice::plan_compaction(const std::string& own_dir) const {
    if (!layers_ || options_.read_only) return std::nullopt;
    return layers_->plan_compaction(own_dir);
}

MergedLayerStats BlockDevice::write_compaction(const CompactionPlan& plan, const std::string& temp_path) {
    return write_merged_layer(plan, temp_path);
}

void BlockDevice::adopt_compaction(const CompactionPlan& plan, const std::string& temp_path) {
    try {
        if (in_flight() > 0 || sqes_in_flight_ > 0)
            throw Error(fmt::format("{}: cannot adopt a compaction with {} requests in flight (drain first)", name(),
                                    in_flight()));
        if (!layers_ || options_.read_only)
            throw Error(fmt::format("{}: cannot adopt a compaction: not a writable layer chain", name()));
    } catch (...) {
        ::unlink(temp_path.c_str());
        throw;
    }
    layers_->adopt_compaction(plan, temp_path);
}

void BlockDevice::fail_device(const std::string& why) noexcept {
    if (active_) {
        active_->link.fail(why);
    } else {
        log_line(fmt::format("{}: {}", name(), why));
    }
}

void BlockDevice::log_limited(const std::string& line) {
    uint64_t suppressed = 0;
    if (!log_limit_.allow(suppressed)) return;
    if (suppressed > 0) log_line(fmt::format("{}: {} similar lines suppressed", name(), suppressed));
    log_line(line);
}

}  // namespace nanovm::virtio::blk
