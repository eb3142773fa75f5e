// Compaction of a layer chain: plan, write, adopt (see layer_compaction.hpp). The
// plan and adopt steps are LayeredDisk members (they read and change its levels);
// they live here with the writer so that compaction is one file.
#include "devices/virtio/blk/layer_compaction.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <filesystem>
#include <cstring>
#include <optional>
#include <span>

#include <fmt/format.h>

#include "devices/virtio/blk/layered_disk.hpp"
#include "snapshot/crc32c.hpp"
#include "vmm/error.hpp"

namespace nanovm::virtio::blk {

namespace {

namespace fs = std::filesystem;

// Bytes moved per pread/pwrite when the kernel cannot copy_file_range.
constexpr size_t kCopyChunk = size_t{1} << 20;

bool same_parent(const ParentRef& a, const ParentRef& b) {
    return a.kind == b.kind && a.path == b.path && a.id == b.id && a.raw_bytes == b.raw_bytes;
}

std::string dir_of(const std::string& path) {
    const fs::path parent = fs::path(path).parent_path();
    return parent.empty() ? std::string(".") : parent.string();
}

// The (device, inode) of `path`, or nullopt if stat fails (errno kept).
std::optional<std::pair<dev_t, ino_t>> file_id(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return std::nullopt;
    return std::pair{st.st_dev, st.st_ino};
}

bool same_file(int a, int b) {
    struct stat sa {}, sb {};
    return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void pwrite_all(int fd, const std::string& path, const void* buf, size_t len, uint64_t offset) {
    size_t done = 0;
    while (done < len) {
        const ssize_t n =
            ::pwrite(fd, static_cast<const uint8_t*>(buf) + done, len - done, static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw_errno(fmt::format("pwrite({})", path));
        done += static_cast<size_t>(n);
    }
}

// Copies `len` bytes from `src` at `src_off` to `dst` at `dst_off`: copy_file_range
// while the kernel can (`use_copy` turns false for good when it cannot: another file
// system on an old kernel, no support), else pread/pwrite through `buf`.
class RangeCopier {
public:
    void copy(int src, const std::string& src_path, uint64_t src_off, int dst, const std::string& dst_path,
              uint64_t dst_off, uint64_t len) {
        while (len > 0 && use_copy_) {
            auto in = static_cast<off_t>(src_off), out = static_cast<off_t>(dst_off);
            const ssize_t n = ::copy_file_range(src, &in, dst, &out, len, 0);
            if (n < 0) {
                if (errno == EINTR) continue;
                if (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
                    use_copy_ = false;
                    break;
                }
                throw_errno(fmt::format("copy_file_range({} -> {})", src_path, dst_path));
            }
            if (n == 0) throw Error(fmt::format("disk layer {}: ends before byte {} (truncated?)", src_path, src_off));
            src_off += static_cast<uint64_t>(n);
            dst_off += static_cast<uint64_t>(n);
            len -= static_cast<uint64_t>(n);
        }
        if (len > 0 && buf_.empty()) buf_.resize(kCopyChunk);
        while (len > 0) {
            const size_t want = static_cast<size_t>(std::min<uint64_t>(len, buf_.size()));
            const ssize_t n = ::pread(src, buf_.data(), want, static_cast<off_t>(src_off));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) throw_errno(fmt::format("pread({})", src_path));
            if (n == 0) throw Error(fmt::format("disk layer {}: ends before byte {} (truncated?)", src_path, src_off));
            pwrite_all(dst, dst_path, buf_.data(), static_cast<size_t>(n), dst_off);
            src_off += static_cast<uint64_t>(n);
            dst_off += static_cast<uint64_t>(n);
            len -= static_cast<uint64_t>(n);
        }
    }

private:
    bool use_copy_ = true;
    std::vector<uint8_t> buf_;
};

}  // namespace

MergedLayerStats write_merged_layer(const CompactionPlan& plan, const std::string& temp_path) {
    const size_t n = plan.layers();
    if (n < 2 || plan.fds.size() != n || plan.top_path != plan.paths.back())
        throw Error(fmt::format("disk layer {}: not a compaction plan ({} layers, {} fds)", temp_path, n,
                                plan.fds.size()));
    if (n > LayeredDisk::kMaxDepth)
        throw Error(fmt::format("disk layer {}: a run of {} layers is longer than a chain", temp_path, n));
    // The run's headers and bitmaps, checked again: the plan only read two headers.
    std::vector<LayerHeader> headers;
    std::vector<std::vector<uint64_t>> bits;
    for (size_t k = 0; k < n; ++k) {
        const std::string& path = plan.paths[k];
        LayerHeader h = read_layer_header(plan.fds[k].get(), path);
        if (h.disk_bytes != plan.disk_bytes)
            throw Error(fmt::format("disk layer {}: a disk of {} bytes, the chain's has {}", path, h.disk_bytes,
                                    plan.disk_bytes));
        if (!h.frozen) throw Error(fmt::format("disk layer {}: not frozen (it may still change)", path));
        if (k == 0 && !same_parent(h.parent, plan.bottom_parent))
            throw Error(fmt::format("disk layer {}: its parent changed since the compaction was planned", path));
        if (k > 0 && (h.parent.kind != ParentKind::layer || h.parent.id != headers.back().id))
            throw Error(fmt::format("disk layer {}: its parent is not {}", path, plan.paths[k - 1]));
        if (k + 1 == n && h.id != plan.top_id)
            throw Error(fmt::format("disk layer {}: its id changed since the compaction was planned", path));
        bits.push_back(read_layer_bitmap(plan.fds[k].get(), path, h));
        headers.push_back(std::move(h));
    }

    if (::unlink(temp_path.c_str()) != 0 && errno != ENOENT) throw_errno(fmt::format("unlink({})", temp_path));
    LayerHeader merged;
    Fd out = create_layer_file(temp_path, plan.disk_bytes, plan.bottom_parent, merged);
    MergedLayerStats stats;
    try {
        merged.id = plan.top_id;
        std::vector<uint64_t> merged_bits(bits.front().size(), 0);
        // Per 64-block word: which run layer serves each present block (the highest
        // holding it); consecutive blocks served by one layer are copied together.
        struct Pending {
            size_t layer = 0;
            uint64_t first = 0;  // block
            uint64_t count = 0;  // blocks; 0: nothing pending
        } pending;
        RangeCopier copier;
        const auto flush = [&] {
            if (pending.count == 0) return;
            const uint64_t bytes = pending.count * kLayerBlockSize;
            const uint64_t at = pending.first * kLayerBlockSize;
            copier.copy(plan.fds[pending.layer].get(), plan.paths[pending.layer],
                        headers[pending.layer].data_offset() + at, out.get(), temp_path, merged.data_offset() + at,
                        bytes);
            stats.data_bytes += bytes;
            stats.copies += 1;
            pending.count = 0;
        };
        std::array<uint64_t, LayeredDisk::kMaxDepth> own{};  // per run layer: the word's blocks it serves
        for (size_t w = 0; w < merged_bits.size(); ++w) {
            uint64_t above = 0;
            for (size_t k = n; k-- > 0;) {
                own[k] = bits[k][w] & ~above;
                above |= bits[k][w];
            }
            merged_bits[w] = above;
            for (uint64_t word = above; word != 0; word &= word - 1) {
                const unsigned bit = static_cast<unsigned>(__builtin_ctzll(word));
                size_t k = n - 1;
                while (((own[k] >> bit) & 1) == 0) --k;  // some layer owns it: `above` is their union
                const uint64_t block = w * 64 + bit;
                if (pending.count != 0 && pending.layer == k && pending.first + pending.count == block) {
                    ++pending.count;
                    continue;
                }
                flush();
                pending = Pending{k, block, 1};
            }
        }
        flush();
        const auto* bitmap = reinterpret_cast<const uint8_t*>(merged_bits.data());
        const size_t bitmap_bytes = merged_bits.size() * 8;
        pwrite_all(out.get(), temp_path, bitmap, bitmap_bytes, kLayerHeaderBytes);
        merged.bitmap_crc = snapshot::crc32c({bitmap, bitmap_bytes});
        merged.frozen = true;
        write_layer_header(out.get(), temp_path, merged);
        if (::fsync(out.get()) != 0) throw_errno(fmt::format("fsync({})", temp_path));
    } catch (...) {
        ::unlink(temp_path.c_str());
        throw;
    }
    return stats;
}

std::optional<CompactionPlan> LayeredDisk::plan_compaction(const std::string& own_dir) const {
    const auto dir_id = file_id(own_dir);
    if (!dir_id) throw_errno(fmt::format("stat({})", own_dir));
    const auto in_own_dir = [&](const std::string& path) {
        if (path.empty()) return false;  // a zero base
        const auto id = file_id(dir_of(path));
        return id && *id == *dir_id;
    };
    // levels_: [0] the base, then the layers bottom-up; the last is the top.
    const size_t top = levels_.size() - 1;
    size_t first = top;
    while (first > 1 && in_own_dir(levels_[first - 1].path)) --first;
    if (top - first < 2) return std::nullopt;

    CompactionPlan plan;
    plan.disk_bytes = disk_bytes_;
    plan.first_level = first;
    for (size_t i = first; i < top; ++i) {
        const Level& level = levels_[i];
        Fd fd(::fcntl(level.fd.get(), F_DUPFD_CLOEXEC, 0));
        if (!fd) throw_errno(fmt::format("dup({})", level.path));
        plan.paths.push_back(level.path);
        plan.fds.push_back(std::move(fd));
    }
    const LayerHeader bottom = read_layer_header(plan.fds.front().get(), plan.paths.front());
    const LayerHeader topmost = read_layer_header(plan.fds.back().get(), plan.paths.back());
    if (!bottom.frozen || !topmost.frozen)
        throw Error(fmt::format("disk layer {}: a parent layer is not frozen", levels_.back().path));
    plan.bottom_parent = bottom.parent;
    plan.top_id = topmost.id;
    plan.top_path = plan.paths.back();
    return plan;
}

void LayeredDisk::adopt_compaction(const CompactionPlan& plan, const std::string& merged_path) {
    const size_t n = plan.layers();
    const size_t first = plan.first_level;
    const size_t last = first + n - 1;  // the topmost run layer's level
    const std::string top = levels_.back().path;  // a copy: the levels move below
    Fd merged;
    LayerHeader h;
    try {
        const auto refuse = [&](const std::string& why) {
            throw Error(fmt::format("disk layer {}: cannot adopt the compaction of {}: {}", top, plan.top_path, why));
        };
        // The run must sit at the same levels, below the top (layers frozen since the
        // plan are above it: the merged file's children are unchanged).
        if (n < 2 || plan.fds.size() != n || first < 1 || last + 1 >= levels_.size() ||
            plan.top_path != plan.paths.back() || plan.disk_bytes != disk_bytes_)
            refuse("the chain no longer holds the run");
        for (size_t k = 0; k < n; ++k) {
            const Level& level = levels_[first + k];
            if (level.path != plan.paths[k] || !same_file(level.fd.get(), plan.fds[k].get()))
                refuse(fmt::format("level {} is no longer {}", first + k, plan.paths[k]));
        }
        if (file_id(dir_of(merged_path)) != file_id(dir_of(plan.top_path)) || !file_id(dir_of(plan.top_path)))
            refuse(fmt::format("{} is not in the run's directory", merged_path));
        merged = Fd(::open(merged_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
        if (!merged) throw_errno(fmt::format("open({})", merged_path));
        h = read_layer_header(merged.get(), merged_path);
        if (h.id != plan.top_id || !same_parent(h.parent, plan.bottom_parent) || h.disk_bytes != disk_bytes_ ||
            !h.frozen)
            refuse(fmt::format("{} is not the run's merged layer", merged_path));
        if (::rename(merged_path.c_str(), plan.top_path.c_str()) != 0)
            throw_errno(fmt::format("rename({}, {})", merged_path, plan.top_path));
    } catch (...) {
        ::unlink(merged_path.c_str());
        throw;
    }

    // Committed: on disk the chain now reads the merged file. Nothing below throws
    // until the levels are switched.
    std::string problems;
    const std::string dir = dir_of(plan.top_path);
    bool dir_synced = false;
    if (Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); !dir_fd) {
        problems = fmt::format("open({}): {}", dir, ::strerror(errno));
    } else if (::fsync(dir_fd.get()) != 0) {
        problems = fmt::format("fsync({}): {}", dir, ::strerror(errno));
    } else {
        dir_synced = true;
    }

    std::vector<std::string> removed;
    for (size_t i = first; i < last; ++i) removed.push_back(levels_[i].path);
    levels_[last].fd = std::move(merged);
    levels_[last].data_offset = h.data_offset();
    levels_.erase(levels_.begin() + static_cast<std::ptrdiff_t>(first),
                  levels_.begin() + static_cast<std::ptrdiff_t>(last));
    std::array<uint8_t, 256> remap{};
    for (size_t o = 0; o < remap.size(); ++o)
        remap[o] = static_cast<uint8_t>(o < first ? o : o <= last ? first : o - (n - 1));
    uint8_t* owner = owner_.get();
    // Only changed entries are written: blocks the base owns (0 -> 0) stay untouched,
    // so the calloc'd pages the guest never wrote stay unallocated.
    for (uint64_t b = 0, blocks = disk_bytes_ / kLayerBlockSize; b < blocks; ++b)
        if (const uint8_t to = remap[owner[b]]; to != owner[b]) owner[b] = to;

    if (dir_synced) {
        for (const std::string& path : removed)
            if (::unlink(path.c_str()) != 0 && errno != ENOENT)
                problems += fmt::format("{}unlink({}): {}", problems.empty() ? "" : "; ", path, ::strerror(errno));
    } else {
        problems += "; the merged layers' old files were kept";
    }
    if (!problems.empty())
        throw Error(fmt::format("disk layer {}: compacted {} layers into {}, but {}", top, n, plan.top_path, problems));
}

}  // namespace nanovm::virtio::blk
