#include "devices/virtio/blk/layered_disk.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "snapshot/crc32c.hpp"
#include "vmm/error.hpp"

namespace nanovm::virtio::blk {

namespace {

namespace fs = std::filesystem;

constexpr uint64_t kBitmapPage = 4096;              // bytes of bitmap written as one unit
constexpr uint64_t kWordsPerPage = kBitmapPage / 8;

std::string hex(const LayerId& id) {
    std::string s;
    for (uint8_t b : id) s += fmt::format("{:02x}", b);
    return s;
}

Fd open_file(const std::string& path, int flags) {
    Fd fd(::open(path.c_str(), flags | O_CLOEXEC));
    if (!fd) throw_errno(fmt::format("open({})", path));
    return fd;
}

struct stat stat_fd(const Fd& fd, const std::string& path) {
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw_errno(fmt::format("fstat({})", path));
    return st;
}

// The path a parent reference names, seen from the child layer at `child`.
std::string resolve_parent(const std::string& child, const std::string& stored) {
    if (stored.front() == '/') return stored;
    return (fs::path(child).parent_path() / stored).string();
}

// How a layer at `top` should name `parent`: its file name when both are in one
// directory, else its absolute canonical path.
std::string parent_reference(const std::string& top, const std::string& parent) {
    std::error_code ec;
    const fs::path target = fs::canonical(parent, ec);
    if (ec) throw Error(fmt::format("disk layer {}: parent {}: {}", top, parent, ec.message()));
    fs::path dir = fs::absolute(fs::path(top), ec).parent_path();
    const fs::path dir_canonical = fs::canonical(dir, ec);
    if (!ec && dir_canonical == target.parent_path()) return target.filename().string();
    return target.string();
}

}  // namespace

void LayeredDisk::create_top(const std::string& top_path, const std::string& parent_path, ParentKind parent_kind) {
    if (parent_kind != ParentKind::layer && parent_kind != ParentKind::raw)
        throw Error(fmt::format("disk layer {}: a new top needs a layer or raw parent", top_path));
    const Fd parent = open_file(parent_path, O_RDONLY);
    const struct stat st = stat_fd(parent, parent_path);
    if (!S_ISREG(st.st_mode))
        throw Error(fmt::format("disk layer {}: parent {} is not a regular file", top_path, parent_path));
    ParentRef ref;
    ref.path = parent_reference(top_path, parent_path);
    uint64_t disk_bytes = 0;
    if (parent_kind == ParentKind::layer) {
        const LayerHeader h = read_layer_header(parent.get(), parent_path);
        if (!h.frozen)
            throw Error(fmt::format("disk layer {}: parent {} is not frozen (it may still change)", top_path,
                                    parent_path));
        ref.kind = ParentKind::layer;
        ref.id = h.id;
        disk_bytes = h.disk_bytes;
    } else {
        disk_bytes = static_cast<uint64_t>(st.st_size);
        if (disk_bytes == 0 || disk_bytes % kLayerBlockSize != 0)
            throw Error(fmt::format("disk layer {}: raw parent {} has {} bytes, not a positive multiple of {}",
                                    top_path, parent_path, disk_bytes, kLayerBlockSize));
        ref.kind = ParentKind::raw;
        ref.raw_bytes = disk_bytes;
    }
    LayerHeader header;
    create_layer_file(top_path, disk_bytes, ref, header);
}

LayeredDisk LayeredDisk::open(const std::string& top_path, bool writable) {
    LayeredDisk disk;
    disk.writable_ = writable;
    std::vector<Level> layers;  // top first while walking down
    std::vector<std::vector<uint64_t>> bitmaps;
    std::set<std::pair<dev_t, ino_t>> seen;
    const auto visit = [&](const Fd& fd, const std::string& path, const std::string& child) {
        const struct stat st = stat_fd(fd, path);
        if (!S_ISREG(st.st_mode)) throw Error(fmt::format("disk layer {}: {} is not a regular file", child, path));
        if (!seen.insert({st.st_dev, st.st_ino}).second)
            throw Error(fmt::format("disk layer {}: parent {} is already in the chain (a loop)", child, path));
        return st;
    };

    std::string path = top_path;
    std::string child = top_path;  // the layer naming `path`, for messages
    LayerHeader expect;            // what the child recorded about `path` (not for the top)
    for (;;) {
        const bool top = layers.empty();
        Fd fd = open_file(path, top && writable ? O_RDWR : O_RDONLY);
        visit(fd, path, child);
        const LayerHeader h = read_layer_header(fd.get(), path);
        if (top) {
            if (writable && h.frozen)
                throw Error(fmt::format("disk layer {}: is frozen (a parent of other layers); create a new top over it",
                                        path));
        } else {
            if (h.id != expect.parent.id)
                throw Error(fmt::format("disk layer {}: parent {} has id {}, expected {}", child, path, hex(h.id),
                                        hex(expect.parent.id)));
            if (h.disk_bytes != expect.disk_bytes)
                throw Error(fmt::format("disk layer {}: parent {} has a disk of {} bytes, expected {}", child, path,
                                        h.disk_bytes, expect.disk_bytes));
            if (!h.frozen) throw Error(fmt::format("disk layer {}: parent {} is not frozen", child, path));
        }
        if (layers.size() == kMaxDepth)
            throw Error(fmt::format("disk layer {}: chain is deeper than {} layers", top_path, kMaxDepth));
        bitmaps.push_back(read_layer_bitmap(fd.get(), path, h));
        layers.push_back(Level{path, std::move(fd), h.data_offset()});
        if (top) disk.top_header_ = h;
        if (h.parent.kind != ParentKind::layer) {
            Level base;
            if (h.parent.kind == ParentKind::raw) {
                base.path = resolve_parent(path, h.parent.path);
                base.fd = open_file(base.path, O_RDONLY);
                const struct stat st = visit(base.fd, base.path, path);
                if (static_cast<uint64_t>(st.st_size) != h.parent.raw_bytes)
                    throw Error(fmt::format("disk layer {}: parent {} has size {}, expected {}", path, base.path,
                                            st.st_size, h.parent.raw_bytes));
            }
            disk.levels_.push_back(std::move(base));
            break;
        }
        child = path;
        expect = h;
        path = resolve_parent(child, h.parent.path);
    }

    disk.disk_bytes_ = disk.top_header_.disk_bytes;
    const uint64_t blocks = disk.top_header_.blocks();
    disk.owner_.reset(static_cast<uint8_t*>(std::calloc(blocks, 1)));  // 0: the base
    if (!disk.owner_) throw Error(fmt::format("disk layer {}: no memory for a map of {} blocks", top_path, blocks));
    // Bottom-up, so that the highest layer holding a block wins.
    for (size_t i = layers.size(); i-- > 0;) {
        const auto level = static_cast<uint8_t>(disk.levels_.size());
        const std::vector<uint64_t>& bits = bitmaps[i];
        for (size_t w = 0; w < bits.size(); ++w) {
            for (uint64_t word = bits[w]; word != 0; word &= word - 1)
                disk.owner_[w * 64 + static_cast<unsigned>(__builtin_ctzll(word))] = level;
        }
        disk.levels_.push_back(std::move(layers[i]));
    }
    disk.top_bits_ = std::move(bitmaps.front());
    disk.dirty_pages_.assign((disk.top_bits_.size() + kWordsPerPage - 1) / kWordsPerPage, 0);
    return disk;
}

void LayeredDisk::sync_frozen(const std::string& frozen_path) {
    const Fd fd = open_file(frozen_path, O_RDONLY);
    if (::fsync(fd.get()) != 0) throw_errno(fmt::format("fsync({})", frozen_path));
    const fs::path parent = fs::path(frozen_path).parent_path();
    const std::string dir = parent.empty() ? std::string(".") : parent.string();
    const Fd dir_fd = open_file(dir, O_RDONLY | O_DIRECTORY);
    if (::fsync(dir_fd.get()) != 0) throw_errno(fmt::format("fsync({})", dir));
}

std::vector<std::string> LayeredDisk::chain_paths() const {
    std::vector<std::string> out;
    for (auto it = levels_.rbegin(); it != levels_.rend(); ++it)
        if (!it->path.empty()) out.push_back(it->path);
    return out;
}

DiskExtent LayeredDisk::extent_at(uint64_t offset, uint64_t length) const {
    if (length == 0 || offset > disk_bytes_ || length > disk_bytes_ - offset)
        throw Error(fmt::format("disk layer {}: range [{}, +{}) is not inside the {}-byte disk", levels_.back().path,
                                offset, length, disk_bytes_));
    const uint64_t first = offset / kLayerBlockSize;
    const uint64_t last = (offset + length - 1) / kLayerBlockSize;
    const uint8_t owner = owner_[first];
    uint64_t b = first + 1;
    while (b <= last && owner_[b] == owner) ++b;
    const uint64_t run_end = std::min(offset + length, b * kLayerBlockSize);
    const Level& level = levels_[owner];
    if (!level.fd) return {-1, 0, run_end - offset};
    return {level.fd.get(), level.data_offset + offset, run_end - offset};
}

std::vector<DiskExtent> LayeredDisk::map(uint64_t offset, uint64_t length) const {
    std::vector<DiskExtent> out;
    while (length > 0) {
        out.push_back(extent_at(offset, length));
        offset += out.back().length;
        length -= out.back().length;
    }
    return out;
}

void LayeredDisk::set_top_bit(uint64_t block) noexcept {
    top_bits_[block / 64] |= uint64_t{1} << (block % 64);
    dirty_pages_[block / 64 / kWordsPerPage] = 1;
    unsaved_ = true;
}

void LayeredDisk::mark_present(uint64_t offset, uint64_t length) {
    const std::string& top = levels_.back().path;
    if (!writable_) throw Error(fmt::format("disk layer {}: opened read-only", top));
    if (offset % kLayerBlockSize != 0 || length % kLayerBlockSize != 0 || offset > disk_bytes_ ||
        length > disk_bytes_ - offset)
        throw Error(fmt::format("disk layer {}: range [{}, +{}) is not whole 4 KiB blocks inside the disk", top,
                                offset, length));
    const auto level = static_cast<uint8_t>(levels_.size() - 1);
    for (uint64_t b = offset / kLayerBlockSize, end = (offset + length) / kLayerBlockSize; b < end; ++b) {
        if (owner_[b] == level) continue;
        owner_[b] = level;
        set_top_bit(b);
    }
}

void LayeredDisk::save_bitmap() {
    if (!writable_) throw Error(fmt::format("disk layer {}: opened read-only", levels_.back().path));
    if (unsaved_) write_top();
}

// The changed bitmap pages, then the header with the bitmap's CRC (and flags).
void LayeredDisk::write_top() {
    const Level& top = levels_.back();
    const uint64_t bytes = top_bits_.size() * 8;
    for (size_t page = 0; page < dirty_pages_.size(); ++page) {
        if (!dirty_pages_[page]) continue;
        const uint64_t at = page * kBitmapPage;
        const uint64_t n = std::min(kBitmapPage, bytes - at);
        const auto* src = reinterpret_cast<const uint8_t*>(top_bits_.data()) + at;
        for (uint64_t done = 0; done < n;) {
            const ssize_t w = ::pwrite(top.fd.get(), src + done, n - done,
                                       static_cast<off_t>(kLayerHeaderBytes + at + done));
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) throw_errno(fmt::format("pwrite({})", top.path));
            done += static_cast<uint64_t>(w);
        }
        dirty_pages_[page] = 0;
    }
    top_header_.bitmap_crc = snapshot::crc32c({reinterpret_cast<const uint8_t*>(top_bits_.data()), bytes});
    write_layer_header(top.fd.get(), top.path, top_header_);
    unsaved_ = false;
}

std::string LayeredDisk::freeze(const std::string& new_top_path) {
    const std::string old_path = levels_.back().path;
    if (!writable_) throw Error(fmt::format("disk layer {}: opened read-only, cannot freeze", old_path));
    if (depth() >= kMaxDepth)
        throw Error(fmt::format("disk layer {}: chain is already {} layers deep; cannot freeze", old_path, kMaxDepth));
    ParentRef ref;
    ref.kind = ParentKind::layer;
    ref.path = parent_reference(new_top_path, old_path);
    ref.id = top_header_.id;
    LayerHeader new_header;
    Fd new_fd = create_layer_file(new_top_path, disk_bytes_, ref, new_header);
    try {
        top_header_.frozen = true;
        write_top();
    } catch (...) {
        top_header_.frozen = false;
        ::unlink(new_top_path.c_str());
        throw;
    }
    // The frozen file is only read from now on: hold it read-only (same file, by fd).
    Level& old = levels_.back();
    if (Fd ro(::open(fmt::format("/proc/self/fd/{}", old.fd.get()).c_str(), O_RDONLY | O_CLOEXEC)); ro) old.fd = std::move(ro);

    levels_.push_back(Level{new_top_path, std::move(new_fd), new_header.data_offset()});
    top_header_ = new_header;
    std::fill(top_bits_.begin(), top_bits_.end(), 0);
    std::fill(dirty_pages_.begin(), dirty_pages_.end(), 0);
    unsaved_ = false;
    return old_path;
}

}  // namespace nanovm::virtio::blk
