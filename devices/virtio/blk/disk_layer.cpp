#include "devices/virtio/blk/disk_layer.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include <fmt/format.h>

#include "snapshot/crc32c.hpp"
#include "vmm/error.hpp"

namespace nanovm::virtio::blk {

namespace {

using snapshot::crc32c;

constexpr uint64_t kDataAlign = uint64_t{1} << 20;
constexpr uint32_t kFlagFrozen = 1;
constexpr size_t kPathField = kLayerHeaderBytes - 128 - 4;

// The header as stored. Every byte is covered by header_crc (the last field).
struct Wire {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;       // kLayerHeaderBytes
    uint64_t disk_bytes;
    uint32_t block_size;         // kLayerBlockSize
    uint32_t parent_kind;        // ParentKind
    uint8_t id[16];
    uint8_t parent_id[16];
    uint64_t parent_raw_bytes;
    uint64_t bitmap_offset;      // kLayerHeaderBytes
    uint64_t bitmap_bytes;
    uint64_t data_offset;
    uint32_t bitmap_crc;
    uint32_t flags;              // kFlagFrozen
    uint32_t parent_path_bytes;
    uint8_t reserved[20];        // zero
    char parent_path[kPathField];  // parent_path_bytes, then zeros
    uint32_t header_crc;         // CRC-32C of every byte before it
};
static_assert(sizeof(Wire) == kLayerHeaderBytes);
static_assert(offsetof(Wire, parent_path) == 128);
static_assert(kMaxParentPathBytes <= kPathField);

[[noreturn]] void bad(const std::string& path, const std::string& what) {
    throw Error(fmt::format("disk layer {}: {}", path, what));
}

// Reads up to `len` bytes at `offset`, retrying short reads; returns the bytes read
// (fewer only at the end of the file). Throws SysError naming `path`.
size_t pread_full(int fd, const std::string& path, void* buf, size_t len, uint64_t offset) {
    size_t done = 0;
    while (done < len) {
        const ssize_t n = ::pread(fd, static_cast<uint8_t*>(buf) + done, len - done, static_cast<off_t>(offset + done));
        if (n < 0) {
            if (errno == EINTR) continue;
            throw_errno(fmt::format("pread({})", path));
        }
        if (n == 0) break;
        done += static_cast<size_t>(n);
    }
    return done;
}

void pwrite_full(int fd, const std::string& path, const void* buf, size_t len, uint64_t offset) {
    size_t done = 0;
    while (done < len) {
        const ssize_t n =
            ::pwrite(fd, static_cast<const uint8_t*>(buf) + done, len - done, static_cast<off_t>(offset + done));
        if (n < 0) {
            if (errno == EINTR) continue;
            throw_errno(fmt::format("pwrite({})", path));
        }
        done += static_cast<size_t>(n);
    }
}

bool all_zero(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    return std::all_of(b, b + n, [](uint8_t x) { return x == 0; });
}

// Why `parent` cannot be stored (empty: it can).
std::string parent_problem(const ParentRef& parent, uint64_t disk_bytes) {
    const LayerId zero{};
    switch (parent.kind) {
        case ParentKind::none:
            if (!parent.path.empty() || parent.id != zero || parent.raw_bytes != 0)
                return "parent kind none with a path, id or size";
            return {};
        case ParentKind::layer:
        case ParentKind::raw:
            break;
        default:
            return fmt::format("unknown parent kind {}", static_cast<uint32_t>(parent.kind));
    }
    const std::string& p = parent.path;
    if (p.empty()) return "empty parent path";
    if (p.size() > kMaxParentPathBytes) return fmt::format("parent path longer than {} bytes", kMaxParentPathBytes);
    if (p.find('\0') != std::string::npos) return "parent path contains a NUL byte";
    const bool plain = p.find('/') == std::string::npos;
    if (!plain && p.front() != '/') return fmt::format("parent path '{}' is neither a file name nor absolute", p);
    if (p == "." || p == "..") return fmt::format("parent path '{}' is not a file", p);
    if (parent.kind == ParentKind::layer && (parent.id == zero || parent.raw_bytes != 0))
        return "parent kind layer without an id (or with a size)";
    if (parent.kind == ParentKind::raw && (parent.id != zero || parent.raw_bytes != disk_bytes))
        return fmt::format("raw parent of {} bytes for a disk of {} bytes", parent.raw_bytes, disk_bytes);
    return {};
}

std::string disk_size_problem(uint64_t disk_bytes) {
    if (disk_bytes == 0 || disk_bytes % kLayerBlockSize != 0 || disk_bytes > kMaxLayerDiskBytes)
        return fmt::format("disk size {} is not a positive multiple of {} up to {}", disk_bytes, kLayerBlockSize,
                           kMaxLayerDiskBytes);
    return {};
}

}  // namespace

uint64_t LayerHeader::data_offset() const noexcept {
    return (kLayerHeaderBytes + bitmap_bytes() + kDataAlign - 1) / kDataAlign * kDataAlign;
}

bool is_layer_file(int fd) noexcept {
    char magic[kLayerMagic.size()];
    ssize_t n;
    do {
        n = ::pread(fd, magic, sizeof(magic), 0);
    } while (n < 0 && errno == EINTR);
    return n == static_cast<ssize_t>(sizeof(magic)) && std::memcmp(magic, kLayerMagic.data(), sizeof(magic)) == 0;
}

LayerHeader read_layer_header(int fd, const std::string& path) {
    Wire w{};
    const size_t got = pread_full(fd, path, &w, sizeof(w), 0);
    if (got < sizeof(w.magic) || std::memcmp(w.magic, kLayerMagic.data(), sizeof(w.magic)) != 0)
        bad(path, "not a layer file (no NANOVMDL magic)");
    if (got < sizeof(w)) bad(path, fmt::format("truncated header: {} of {} bytes", got, sizeof(w)));
    const uint32_t crc = crc32c({reinterpret_cast<const uint8_t*>(&w), offsetof(Wire, header_crc)});
    if (crc != w.header_crc)
        bad(path, fmt::format("header CRC-32C is {:#010x}, stored {:#010x} (corrupt header)", crc, w.header_crc));
    if (w.version != kLayerVersion) bad(path, fmt::format("format version {}, this nanovm reads {}", w.version, kLayerVersion));
    if (w.header_bytes != kLayerHeaderBytes || w.block_size != kLayerBlockSize)
        bad(path, fmt::format("header size {} / block size {}, expected {} / {}", w.header_bytes, w.block_size,
                              kLayerHeaderBytes, kLayerBlockSize));
    if (const std::string why = disk_size_problem(w.disk_bytes); !why.empty()) bad(path, why);
    if (w.flags & ~kFlagFrozen) bad(path, fmt::format("unknown flags {:#x}", w.flags));
    if (!all_zero(w.reserved, sizeof(w.reserved))) bad(path, "reserved header bytes are not zero");

    LayerHeader h;
    h.disk_bytes = w.disk_bytes;
    std::memcpy(h.id.data(), w.id, h.id.size());
    h.frozen = (w.flags & kFlagFrozen) != 0;
    h.bitmap_crc = w.bitmap_crc;
    if (w.bitmap_offset != kLayerHeaderBytes || w.bitmap_bytes != h.bitmap_bytes() ||
        w.data_offset != h.data_offset())
        bad(path, fmt::format("bitmap at {} ({} bytes), data at {}; a {}-byte disk needs {} ({} bytes), {}",
                              w.bitmap_offset, w.bitmap_bytes, w.data_offset, h.disk_bytes, kLayerHeaderBytes,
                              h.bitmap_bytes(), h.data_offset()));
    if (w.parent_path_bytes > kMaxParentPathBytes)
        bad(path, fmt::format("parent path of {} bytes (at most {})", w.parent_path_bytes, kMaxParentPathBytes));
    if (!all_zero(w.parent_path + w.parent_path_bytes, kPathField - w.parent_path_bytes))
        bad(path, "bytes after the parent path are not zero");
    h.parent.kind = static_cast<ParentKind>(w.parent_kind);
    h.parent.path.assign(w.parent_path, w.parent_path_bytes);
    std::memcpy(h.parent.id.data(), w.parent_id, h.parent.id.size());
    h.parent.raw_bytes = w.parent_raw_bytes;
    if (const std::string why = parent_problem(h.parent, h.disk_bytes); !why.empty()) bad(path, why);

    struct stat st {};
    if (::fstat(fd, &st) != 0) throw_errno(fmt::format("fstat({})", path));
    if (static_cast<uint64_t>(st.st_size) != h.file_bytes())
        bad(path, fmt::format("file has {} bytes, a layer of a {}-byte disk has {} (truncated?)", st.st_size,
                              h.disk_bytes, h.file_bytes()));
    return h;
}

std::vector<uint64_t> read_layer_bitmap(int fd, const std::string& path, const LayerHeader& header) {
    std::vector<uint64_t> words(header.bitmap_bytes() / 8);
    const size_t bytes = words.size() * 8;
    if (pread_full(fd, path, words.data(), bytes, kLayerHeaderBytes) != bytes) bad(path, "truncated bitmap");
    const uint32_t crc = crc32c({reinterpret_cast<const uint8_t*>(words.data()), bytes});
    if (crc != header.bitmap_crc)
        bad(path, fmt::format("bitmap CRC-32C is {:#010x}, header says {:#010x} (corrupt bitmap)", crc,
                              header.bitmap_crc));
    if (const uint64_t tail = header.blocks() % 64; tail != 0 && (words.back() >> tail) != 0)
        bad(path, "bitmap marks blocks past the end of the disk");
    return words;
}

void write_layer_header(int fd, const std::string& path, const LayerHeader& header) {
    if (const std::string why = disk_size_problem(header.disk_bytes); !why.empty()) bad(path, why);
    if (const std::string why = parent_problem(header.parent, header.disk_bytes); !why.empty()) bad(path, why);
    Wire w{};
    std::memcpy(w.magic, kLayerMagic.data(), sizeof(w.magic));
    w.version = kLayerVersion;
    w.header_bytes = kLayerHeaderBytes;
    w.disk_bytes = header.disk_bytes;
    w.block_size = kLayerBlockSize;
    w.parent_kind = static_cast<uint32_t>(header.parent.kind);
    std::memcpy(w.id, header.id.data(), sizeof(w.id));
    std::memcpy(w.parent_id, header.parent.id.data(), sizeof(w.parent_id));
    w.parent_raw_bytes = header.parent.raw_bytes;
    w.bitmap_offset = kLayerHeaderBytes;
    w.bitmap_bytes = header.bitmap_bytes();
    w.data_offset = header.data_offset();
    w.bitmap_crc = header.bitmap_crc;
    w.flags = header.frozen ? kFlagFrozen : 0;
    w.parent_path_bytes = static_cast<uint32_t>(header.parent.path.size());
    std::memcpy(w.parent_path, header.parent.path.data(), header.parent.path.size());
    w.header_crc = crc32c({reinterpret_cast<const uint8_t*>(&w), offsetof(Wire, header_crc)});
    pwrite_full(fd, path, &w, sizeof(w), 0);
}

LayerId new_layer_id() {
    LayerId id{};
    size_t done = 0;
    while (done < id.size()) {
        const ssize_t n = ::getrandom(id.data() + done, id.size() - done, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw_errno("getrandom(layer id)");
        }
        done += static_cast<size_t>(n);
    }
    return id;
}

Fd create_layer_file(const std::string& path, uint64_t disk_bytes, const ParentRef& parent, LayerHeader& header) {
    LayerHeader h;
    h.disk_bytes = disk_bytes;
    h.parent = parent;
    if (const std::string why = disk_size_problem(disk_bytes); !why.empty()) bad(path, why);
    if (const std::string why = parent_problem(parent, disk_bytes); !why.empty()) bad(path, why);
    h.id = new_layer_id();
    h.bitmap_crc = snapshot::crc32c_zeros(0, h.bitmap_bytes());  // the bitmap is a hole: zeros
    Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) throw_errno(fmt::format("create disk layer {}", path));
    try {
        if (::ftruncate(fd.get(), static_cast<off_t>(h.file_bytes())) != 0)
            throw_errno(fmt::format("ftruncate({}, {})", path, h.file_bytes()));
        write_layer_header(fd.get(), path, h);
    } catch (...) {
        ::unlink(path.c_str());
        throw;
    }
    header = h;
    return fd;
}

}  // namespace nanovm::virtio::blk
