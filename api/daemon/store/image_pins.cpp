// Pinned root images (image_pins.hpp) and the store's digest cache.
#include "api/daemon/store/image_pins.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "api/daemon/random_bytes.hpp"
#include "api/daemon/store/sha256.hpp"
#include "api/vm/scratch_disk.hpp"
#include "snapshot/memory_layer.hpp"
#include "vmm/fd.hpp"
#include "vmm/log.hpp"

namespace nanovm::daemon::store {

namespace fs = std::filesystem;

namespace {

void fsync_path(const std::string& path, bool directory) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0)));
    if (!fd) throw_errno("open " + path);
    if (::fsync(fd.get()) != 0) throw_errno("fsync " + path);
}

ImageSource describe(const std::string& path, int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw_errno("fstat " + path);
    if (!S_ISREG(st.st_mode)) throw Error(fmt::format("root image {}: not a regular file", path));
    return ImageSource{path, static_cast<int64_t>(st.st_dev), static_cast<int64_t>(st.st_ino),
                       static_cast<int64_t>(st.st_size),
                       static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

}  // namespace

bool is_digest(const std::string& text) noexcept {
    return text.size() == 64 &&
           std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

namespace {

// SHA-256 of the file open at `fd` (`path` for messages), holes as zeros; with
// `copy` >= 0 its data extents are written there too (at the same offsets) and it is
// sized like the source: a sparse copy and the digest in one read.
std::string sha256_fd(int fd, const std::string& path, int copy) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw_errno("fstat " + path);
    const auto size = static_cast<uint64_t>(st.st_size);
    Sha256 hash;
    constexpr size_t kChunk = 1u << 20;
    std::vector<uint8_t> buffer(kChunk);
    static const std::vector<uint8_t> zeros(kChunk, 0);
    uint64_t at = 0;
    auto zeros_to = [&](uint64_t end) {
        while (at < end) {
            const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, end - at));
            hash.update(zeros.data(), n);
            at += n;
        }
    };
    snapshot::for_each_data_extent(fd, 0, size, [&](uint64_t from, uint64_t bytes) {
        zeros_to(from);
        const uint64_t end = from + bytes;
        while (at < end) {
            const size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, end - at));
            const ssize_t n = ::pread(fd, buffer.data(), want, static_cast<off_t>(at));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) throw_errno("pread " + path);
            if (n == 0) throw Error(fmt::format("{}: shrank while being hashed", path));
            hash.update(buffer.data(), static_cast<size_t>(n));
            if (copy >= 0) snapshot::pwrite_all(copy, buffer.data(), static_cast<uint64_t>(n), at, "the image copy");
            at += static_cast<uint64_t>(n);
        }
    });
    zeros_to(size);
    if (copy >= 0 && ::ftruncate(copy, static_cast<off_t>(size)) != 0) throw_errno("ftruncate (the image copy)");
    return hash.hex_digest();
}

// The digest cache beside an image (<image>.sha256: "<digest> <bytes> <mtime ns>"),
// written by the first daemon that hashed it when the image's directory is writable,
// and read by the others (a test host sees the cache read-only): valid while the
// image has that size and mtime.
std::optional<std::string> read_sidecar(const std::string& image, const ImageSource& seen) {
    std::ifstream f(image + ".sha256");
    std::string digest;
    int64_t bytes = -1, mtime = -1;
    if (!(f >> digest >> bytes >> mtime) || !is_digest(digest) || bytes != seen.bytes || mtime != seen.mtime_ns)
        return std::nullopt;
    return digest;
}

void write_sidecar(const std::string& image, const ImageSource& seen, const std::string& digest) noexcept {
    const std::string tmp = fmt::format("{}.sha256.{}", image, ::getpid());
    {
        std::ofstream f(tmp);
        if (!(f << digest << ' ' << seen.bytes << ' ' << seen.mtime_ns << '\n')) {
            ::unlink(tmp.c_str());
            return;
        }
    }
    if (::rename(tmp.c_str(), (image + ".sha256").c_str()) != 0) ::unlink(tmp.c_str());
}

}  // namespace

std::string sha256_file(const std::string& path) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) throw_errno("open " + path);
    return sha256_fd(fd.get(), path, -1);
}

ImagePins::ImagePins(Store& store, std::string images_dir, CurrentSources current_sources)
    : store_(store), dir_(std::move(images_dir)), current_sources_(std::move(current_sources)) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) throw SysError("mkdir " + dir_, ec.value());
}

std::string ImagePins::path_of(const std::string& digest) const {
    if (!is_digest(digest)) return "";
    const std::string path = dir_ + "/" + digest;
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? path : "";
}

ImagePin ImagePins::pin(const std::string& source) {
    std::lock_guard lock(mutex_);
    std::error_code ec;
    const std::string real = fs::canonical(source, ec).string();
    if (ec) throw SysError("root image " + source, ec.value());
    Fd fd(::open(real.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) throw_errno("open " + real);
    const ImageSource seen = describe(real, fd.get());
    std::optional<std::string> known = store_.image_source_digest(seen);
    if (!known) known = read_sidecar(real, seen);
    if (known) {
        if (std::string path = path_of(*known); !path.empty()) {
            store_.put_image_source(seen, *known);
            hold(*known);
            return ImagePin{*known, path};
        }
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::string how;
    unsigned char r[8];
    random_bytes(r, sizeof(r));
    const std::string tmp = fmt::format("{}/.{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}.partial", dir_, r[0], r[1],
                                        r[2], r[3], r[4], r[5], r[6], r[7]);
    try {
        std::string digest;
        if (::link(real.c_str(), tmp.c_str()) == 0) {
            how = "linked";
            digest = known ? *known : sha256_file(tmp);
        } else {
            if (errno != EXDEV && errno != EPERM && errno != EMLINK) throw_errno(fmt::format("link {} {}", real, tmp));
            Fd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444));
            if (!out) throw_errno("open " + tmp);
            if (::ioctl(out.get(), FICLONE, fd.get()) == 0) {
                how = "reflinked";
                digest = known ? *known : sha256_file(tmp);  // a reflink: hashed from the pin itself
            } else if (known) {
                how = "copied";
                vm::copy_sparse(real, tmp);
            } else {
                how = "copied";
                digest = sha256_fd(fd.get(), real, out.get());  // copied and hashed in one read
            }
            if (known) digest = *known;
        }
        const std::string target = dir_ + "/" + digest;
        fsync_path(tmp, false);
        if (path_of(digest).empty()) {
            if (::rename(tmp.c_str(), target.c_str()) != 0) throw_errno(fmt::format("rename {} {}", tmp, target));
        } else {
            ::unlink(tmp.c_str());  // the same bytes are pinned already (another source)
        }
        fsync_path(dir_, true);
        store_.put_image_source(seen, digest);
        if (!known) write_sidecar(real, seen, digest);
        log_line(fmt::format("pinned {} as images/{}: {} ({} MiB), {} in {:.0f} ms", real, digest, how,
                             seen.bytes >> 20, known ? "its digest known" : "hashed",
                             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()));
        hold(digest);
        return ImagePin{digest, target};
    } catch (...) {
        ::unlink(tmp.c_str());
        throw;
    }
}

void ImagePins::hold(const std::string& digest) {
    Hold& h = holds_[digest];
    ++h.count;
    h.last = std::chrono::steady_clock::now();
}

void ImagePins::recorded(const std::string& digest) {
    std::lock_guard lock(mutex_);
    const auto h = holds_.find(digest);
    if (h != holds_.end() && --h->second.count <= 0) holds_.erase(h);
}

std::vector<std::string> ImagePins::current_digests() noexcept {
    std::vector<std::string> out;
    if (!current_sources_) return out;
    try {
        for (const std::string& source : current_sources_()) {
            std::error_code ec;
            const std::string real = fs::canonical(source, ec).string();
            if (ec) continue;  // no such image now
            Fd fd(::open(real.c_str(), O_RDONLY | O_CLOEXEC));
            if (!fd) continue;
            if (const auto digest = store_.image_source_digest(describe(real, fd.get()))) out.push_back(*digest);
        }
    } catch (const std::exception& e) {
        log_line(fmt::format("images: the current images' pins are not kept apart: {}", e.what()));
    }
    return out;
}

std::vector<std::string> ImagePins::collect(std::chrono::milliseconds grace) noexcept {
    std::lock_guard lock(mutex_);  // no pin() of this daemon is in progress meanwhile
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::string> removed;
    std::vector<std::string> in_use;
    try {
        in_use = store_.image_digests_in_use();
    } catch (const std::exception& e) {
        log_line(fmt::format("images: not collected: {}", e.what()));
        return removed;
    }
    for (std::string& d : current_digests()) in_use.push_back(std::move(d));
    std::sort(in_use.begin(), in_use.end());
    std::error_code ec;
    for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        const bool partial = name.size() > 9 && name.front() == '.' && name.ends_with(".partial");
        if (!partial) {
            if (!is_digest(name) || std::binary_search(in_use.begin(), in_use.end(), name)) continue;
            if (const auto h = holds_.find(name); h != holds_.end() && h->second.count > 0 && now - h->second.last < grace)
                continue;
        }
        if (::unlink(it->path().c_str()) == 0) {
            removed.push_back(name);
            holds_.erase(name);
        } else {
            log_line(fmt::format("images: cannot remove {}: {}", it->path().string(), std::strerror(errno)));
        }
    }
    if (ec) log_line(fmt::format("images: listing {}: {}", dir_, ec.message()));
    if (!removed.empty()) {
        try {
            fsync_path(dir_, true);  // the removals durable (a crash could only bring a pin back: collected again)
        } catch (const std::exception& e) {
            log_line(fmt::format("images: {}", e.what()));
        }
        for (const std::string& name : removed)
            log_line(fmt::format("images: removed {} ({})", name,
                                 is_digest(name) ? "no record names it, no image name has it now" : "a pin cut short"));
    }
    return removed;
}

std::vector<std::string> Store::image_digests_in_use() {
    std::lock_guard lock(mutex_);
    Statement q = db_.prepare(
        "SELECT image_digest FROM sandboxes WHERE image_digest != '' UNION "
        "SELECT image_digest FROM snapshots WHERE image_digest != '' UNION "
        "SELECT image_digest FROM templates WHERE image_digest != '' UNION "
        "SELECT image_digest FROM archives WHERE image_digest != ''");
    std::vector<std::string> out;
    while (q.step()) out.push_back(q.text(0));
    return out;
}

std::optional<std::string> Store::image_source_digest(const ImageSource& s) {
    std::lock_guard lock(mutex_);
    Statement q = db_.prepare("SELECT digest FROM image_sources WHERE path = ? AND dev = ? AND ino = ? AND bytes = ? "
                              "AND mtime_ns = ?");
    q.bind(1, s.path).bind(2, s.dev).bind(3, s.ino).bind(4, s.bytes).bind(5, s.mtime_ns);
    if (!q.step()) return std::nullopt;
    return q.text(0);
}

void Store::put_image_source(const ImageSource& s, const std::string& digest) {
    std::lock_guard lock(mutex_);
    db_.prepare("INSERT OR REPLACE INTO image_sources (path, dev, ino, bytes, mtime_ns, digest) VALUES (?,?,?,?,?,?)")
        .bind(1, s.path)
        .bind(2, s.dev)
        .bind(3, s.ino)
        .bind(4, s.bytes)
        .bind(5, s.mtime_ns)
        .bind(6, digest)
        .run();
}

}  // namespace nanovm::daemon::store
