#include "snapshot/memory_layer.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "snapshot/crc32c.hpp"
#include "snapshot/snapshot_error.hpp"
#include "vmm/error.hpp"

namespace nanovm::snapshot {

namespace {

constexpr char kMagic[8] = {'N', 'V', 'M', 'L', 'A', 'Y', 'E', 'R'};
constexpr size_t kMaxChain = 64;

uint32_t header_crc(const LayerHeader& h) {
    return crc32c({reinterpret_cast<const uint8_t*>(&h), offsetof(LayerHeader, header_crc)});
}

bool is_zero(const uint8_t* page) noexcept {
    const auto* w = reinterpret_cast<const uint64_t*>(page);
    for (size_t i = 0; i < kPageSize / 8; i += 8) {
        if (w[i] | w[i + 1] | w[i + 2] | w[i + 3] | w[i + 4] | w[i + 5] | w[i + 6] | w[i + 7]) return false;
    }
    return true;
}


LayerHeader make_header(uint64_t ram_bytes, uint32_t flags) {
    LayerHeader h{};
    std::memcpy(h.magic, kMagic, sizeof(kMagic));
    h.version = kLayerFormatVersion;
    h.flags = flags;
    h.ram_bytes = ram_bytes;
    h.total_pages = ram_bytes / kPageSize;
    h.data_offset = kLayerDataOffset;
    return h;
}

void write_header(int fd, LayerHeader& h, const std::string& path) {
    h.header_crc = header_crc(h);
    std::vector<uint8_t> block(kLayerDataOffset, 0);
    std::memcpy(block.data(), &h, sizeof(h));
    pwrite_all(fd, block.data(), block.size(), 0, path);
}

void set_parent(LayerHeader& h, const ParentRef& parent) {
    if (parent.path.empty() || parent.path.size() >= kParentNameBytes)
        throw Error(fmt::format("parent layer path '{}' must be 1 to {} bytes", parent.path, kParentNameBytes - 1));
    h.flags |= kLayerHasParent;
    h.parent_checksum = parent.checksum;
    std::memcpy(h.parent, parent.path.data(), parent.path.size());
}

}  // namespace

namespace {

/// Sets bit (first + p) of `out` for every page p of `r` in the memfd's data
/// extents (SEEK_DATA/SEEK_HOLE): a hole reads as zero.
void add_memfd_extents(const MemoryRegion& r, uint64_t first, PageBitmap& out) {
    for_each_data_extent(r.memfd.get(), r.file_offset, r.size, [&](uint64_t from, uint64_t bytes) {
        const uint64_t to = (from + bytes + kPageSize - 1) / kPageSize;
        for (uint64_t p = from / kPageSize; p < to; ++p) out[(first + p) / 64] |= 1ULL << ((first + p) % 64);
    });
}

/// Sets bit (first + p) for every page p of `r` that this process holds as a private
/// anonymous copy or in swap: /proc/self/pagemap (Documentation/admin-guide/mm/
/// pagemap.rst: bit 63 present, 62 swapped, 61 file page or shared anonymous).
void add_private_copies(const MemoryRegion& r, uint64_t first, PageBitmap& out) {
    static constexpr uint64_t kPresent = 1ULL << 63, kSwapped = 1ULL << 62, kFilePage = 1ULL << 61;
    const Fd pagemap(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
    if (!pagemap) throw_errno("open /proc/self/pagemap");
    const uint64_t pages = r.size / kPageSize;
    std::vector<uint64_t> entries(std::min<uint64_t>(pages, 65536));
    for (uint64_t done = 0; done < pages;) {
        const uint64_t n = std::min<uint64_t>(entries.size(), pages - done);
        const uint64_t at = (reinterpret_cast<uint64_t>(r.host) / kPageSize + done) * sizeof(uint64_t);
        const ssize_t got = ::pread(pagemap.get(), entries.data(), n * sizeof(uint64_t), static_cast<off_t>(at));
        if (got < 0) {
            if (errno == EINTR) continue;
            throw_errno("pread /proc/self/pagemap");
        }
        if (got == 0) throw Error("/proc/self/pagemap: short read over guest RAM");
        const uint64_t read = static_cast<uint64_t>(got) / sizeof(uint64_t);
        for (uint64_t i = 0; i < read; ++i) {
            const uint64_t e = entries[i];
            if ((e & kSwapped) || ((e & kPresent) && !(e & kFilePage))) {
                const uint64_t p = first + done + i;
                out[p / 64] |= 1ULL << (p % 64);
            }
        }
        done += read;
    }
}

/// The pages of `memory` that may hold data without reading them, or nullopt for a
/// backing where only reading tells (private_file: its holes say nothing). For the
/// lazy backings: the pages this VM holds (its memfds' extents, its private copies);
/// the others are its chain's.
std::optional<PageBitmap> candidate_pages(const GuestMemory& memory) {
    const GuestMemory::Backing backing = memory.backing();
    if (backing == GuestMemory::Backing::private_file) return std::nullopt;
    const bool private_copies =
        backing == GuestMemory::Backing::private_memfd || backing == GuestMemory::Backing::lazy_private_memfd;
    PageBitmap out((memory.ram_bytes() / kPageSize + 63) / 64, 0);
    uint64_t first = 0;  // linear index of the region's page 0
    for (const MemoryRegion& r : memory.regions()) {
        add_memfd_extents(r, first, out);
        // A private mapping also holds the pages this process wrote since it was made.
        if (private_copies) add_private_copies(r, first, out);
        first += r.size / kPageSize;
    }
    return out;
}

bool lazy(const GuestMemory& memory) {
    return memory.backing() == GuestMemory::Backing::lazy_memfd ||
           memory.backing() == GuestMemory::Backing::lazy_private_memfd;
}

}  // namespace

void pwrite_all(int fd, const uint8_t* data, uint64_t bytes, uint64_t offset, const std::string& path) {
    while (bytes > 0) {
        const ssize_t n = ::pwrite(fd, data, std::min<uint64_t>(bytes, 1ULL << 30), static_cast<off_t>(offset));
        if (n < 0) {
            if (errno == EINTR) continue;
            throw_errno("pwrite " + path);
        }
        data += n;
        bytes -= static_cast<uint64_t>(n);
        offset += static_cast<uint64_t>(n);
    }
}

void for_each_data_extent(int fd, uint64_t offset, uint64_t bytes,
                          const std::function<void(uint64_t from, uint64_t bytes)>& f) {
    off_t at = static_cast<off_t>(offset);
    const off_t end = static_cast<off_t>(offset + bytes);
    while (at < end) {
        const off_t data = ::lseek(fd, at, SEEK_DATA);
        if (data < 0) {
            if (errno == ENXIO) break;  // no data after `at`
            throw_errno("lseek(SEEK_DATA) guest RAM");
        }
        if (data >= end) break;
        off_t hole = ::lseek(fd, data, SEEK_HOLE);
        if (hole < 0) throw_errno("lseek(SEEK_HOLE) guest RAM");
        hole = std::min(hole, end);
        f(static_cast<uint64_t>(data) - offset, static_cast<uint64_t>(hole - data));
        at = hole;
    }
}

uint64_t put_memfd(LayerBuilder& builder, int memfd, uint64_t bytes, uint64_t first) {
    constexpr uint64_t kChunk = 2 * 1024 * 1024;  // one pread and one put per 2 MiB
    std::vector<uint8_t> buffer(kChunk);
    uint64_t pages = 0;
    for_each_data_extent(memfd, 0, bytes, [&](uint64_t from, uint64_t length) {
        // Whole pages: an extent edge inside a page still covers that page.
        uint64_t at = from / kPageSize * kPageSize;
        const uint64_t end = std::min(bytes, (from + length + kPageSize - 1) / kPageSize * kPageSize);
        while (at < end) {
            const uint64_t n = std::min(kChunk, end - at);
            uint64_t got = 0;
            while (got < n) {
                const ssize_t r = ::pread(memfd, buffer.data() + got, n - got, static_cast<off_t>(at + got));
                if (r < 0 && errno == EINTR) continue;
                if (r < 0) throw_errno("pread(frozen guest RAM)");
                if (r == 0) throw Error(fmt::format("frozen guest RAM: ends at byte {} of {}", at + got, bytes));
                got += static_cast<uint64_t>(r);
            }
            builder.put(first + at / kPageSize, n / kPageSize, buffer.data());
            pages += n / kPageSize;
            at += n;
        }
    });
    return pages;
}

PageBitmap nonzero_pages(const GuestMemory& memory) {
    const uint64_t total = memory.ram_bytes() / kPageSize;
    // Lazily served RAM: a hole is a page not fetched yet, read it through the mapping too.
    const std::optional<PageBitmap> candidates = lazy(memory) ? std::nullopt : candidate_pages(memory);
    PageBitmap out((total + 63) / 64, 0);
    uint64_t first = 0;  // linear index of the region's page 0
    for (const MemoryRegion& r : memory.regions()) {
        const uint64_t pages = r.size / kPageSize;
        for (uint64_t p = 0; p < pages; ++p) {
            const uint64_t linear = first + p;
            if (candidates && !page_set(*candidates, linear)) continue;
            if (!is_zero(r.host + p * kPageSize)) out[linear / 64] |= 1ULL << (linear % 64);
        }
        first += pages;
    }
    return out;
}

PageBitmap private_pages(const GuestMemory& memory) {
    PageBitmap out((memory.ram_bytes() / kPageSize + 63) / 64, 0);
    uint64_t first = 0;
    for (const MemoryRegion& r : memory.regions()) {
        add_private_copies(r, first, out);
        first += r.size / kPageSize;
    }
    return out;
}

PageBitmap populated_pages(const GuestMemory& memory) {
    std::optional<PageBitmap> candidates = candidate_pages(memory);
    return candidates ? std::move(*candidates) : nonzero_pages(memory);
}

LayerBuilder::LayerBuilder(const std::string& path, uint64_t ram_bytes, const std::optional<ParentRef>& parent,
                           bool drop_zero_pages)
    : path_(path), drop_zero_(drop_zero_pages) {
    if (drop_zero_pages && parent) throw Error("a diff layer must keep its zero pages (they hide the parent's)");
    header_ = make_header(ram_bytes, 0);
    if (parent) set_parent(header_, *parent);
    total_ = header_.total_pages;
    kind_ = std::make_unique<std::atomic<uint8_t>[]>(total_);
    for (uint64_t p = 0; p < total_; ++p) kind_[p].store(0, std::memory_order_relaxed);
    crc_ = std::make_unique<uint32_t[]>(total_);
    fd_ = Fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd_) throw_errno("open " + path);
}

LayerBuilder::~LayerBuilder() = default;

bool LayerBuilder::has(uint64_t page) const noexcept {
    return page < total_ && kind_[page].load(std::memory_order_acquire) != 0;
}

uint64_t put_chain_rest(LayerBuilder& builder, const LayerChain& chain) {
    uint64_t pages = 0;
    for (uint64_t p = 0; p < chain.total_pages(); ++p) {
        if (builder.has(p)) continue;
        const LayerFile* layer = chain.find(p);
        if (!layer) continue;  // zero
        builder.put(p, 1, layer->page_verified(p).data());
        ++pages;
    }
    return pages;
}

void LayerBuilder::put(uint64_t first, uint64_t count, const uint8_t* host) { store(first, count, host, nullptr); }

void LayerBuilder::put_with_crcs(uint64_t first, uint64_t count, const uint8_t* host, const uint32_t* crcs) {
    store(first, count, host, crcs);
}

void LayerBuilder::store(uint64_t first, uint64_t count, const uint8_t* host, const uint32_t* crcs) {
    if (first > total_ || count > total_ - first)
        throw Error(fmt::format("{}: pages [{}, +{}) beyond the {} pages of RAM", path_, first, count, total_));
    uint64_t run = 0;  // data pages pending before page i
    const auto flush = [&](uint64_t i) {
        if (run)
            pwrite_all(fd_.get(), host + (i - run) * kPageSize, run * kPageSize,
                       header_.data_offset + (first + i - run) * kPageSize, path_);
        run = 0;
    };
    for (uint64_t i = 0; i < count; ++i) {
        const uint8_t* page = host + i * kPageSize;
        if (is_zero(page)) {
            flush(i);
            kind_[first + i].store(1, std::memory_order_release);
            continue;
        }
        crc_[first + i] = crcs ? crcs[i] : crc32c({page, kPageSize});
        kind_[first + i].store(2, std::memory_order_release);
        ++run;
    }
    flush(count);
}

void LayerBuilder::start_writeback(uint64_t first, uint64_t count) noexcept {
    if (first >= total_ || count == 0) return;
    count = std::min(count, total_ - first);
    ::sync_file_range(fd_.get(), static_cast<off_t>(header_.data_offset + first * kPageSize),
                      static_cast<off_t>(count * kPageSize), SYNC_FILE_RANGE_WRITE);
}

void LayerBuilder::tables(PageBitmap& present, std::vector<uint32_t>& crcs, LayerWriteResult& result) const {
    present.assign((total_ + 63) / 64, 0);
    crcs.clear();
    const uint32_t zero_crc = [] {
        std::vector<uint8_t> zero(kPageSize, 0);
        return crc32c(zero);
    }();
    for (uint64_t p = 0; p < total_; ++p) {
        const uint8_t kind = kind_[p].load(std::memory_order_acquire);
        if (kind == 0 || (kind == 1 && drop_zero_)) continue;
        present[p / 64] |= 1ULL << (p % 64);
        ++result.present_pages;
        if (kind == 2) ++result.data_pages;
        crcs.push_back(kind == 2 ? crc_[p] : zero_crc);
    }
}

uint32_t LayerBuilder::file_crc32c() const {
    if (!finished_) throw Error(fmt::format("{}: file_crc32c before finish", path_));
    const LayerHeader& h = header_;
    std::vector<uint8_t> head(static_cast<size_t>(h.data_offset));
    for (size_t at = 0; at < head.size();) {
        const ssize_t n = ::pread(fd_.get(), head.data() + at, head.size() - at, static_cast<off_t>(at));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw_errno("pread " + path_);
        if (n == 0) throw Error(fmt::format("{}: ends inside its header", path_));
        at += static_cast<size_t>(n);
    }
    uint32_t crc = crc32c(head);
    const uint32_t page_op = crc32c_combine_op(kPageSize);
    uint64_t zeros = 0;  // zero bytes pending (holes: absent or zero pages)
    for (uint64_t p = 0; p < total_; ++p) {
        if (kind_[p].load(std::memory_order_acquire) != 2) {
            zeros += kPageSize;
            continue;
        }
        crc = crc32c_zeros(crc, zeros);
        zeros = 0;
        crc = crc32c_combine_with(page_op, crc, crc_[p]);
    }
    crc = crc32c_zeros(crc, zeros);
    PageBitmap present;
    std::vector<uint32_t> crcs;
    LayerWriteResult unused;
    tables(present, crcs, unused);
    crc = crc32c({reinterpret_cast<const uint8_t*>(present.data()), h.bitmap_bytes}, crc);
    crc = crc32c({reinterpret_cast<const uint8_t*>(crcs.data()), h.crc_table_bytes}, crc);
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) throw_errno("fstat " + path_);
    const uint64_t end = h.crc_table_offset + h.crc_table_bytes;
    if (static_cast<uint64_t>(st.st_size) != end)
        throw Error(fmt::format("{}: {} bytes, its tables end at {}", path_, st.st_size, end));
    return crc;
}

LayerWriteResult LayerBuilder::finish() {
    LayerHeader& h = header_;
    PageBitmap present;
    std::vector<uint32_t> crcs;
    LayerWriteResult result;
    tables(present, crcs, result);
    h.present_pages = result.present_pages;
    h.bitmap_offset = h.data_offset + total_ * kPageSize;
    h.bitmap_bytes = present.size() * 8;
    h.crc_table_offset = h.bitmap_offset + h.bitmap_bytes;
    h.crc_table_bytes = crcs.size() * 4;
    h.bitmap_crc = crc32c({reinterpret_cast<const uint8_t*>(present.data()), h.bitmap_bytes});
    h.crc_table_crc = crc32c({reinterpret_cast<const uint8_t*>(crcs.data()), h.crc_table_bytes});
    pwrite_all(fd_.get(), reinterpret_cast<const uint8_t*>(present.data()), h.bitmap_bytes, h.bitmap_offset, path_);
    pwrite_all(fd_.get(), reinterpret_cast<const uint8_t*>(crcs.data()), h.crc_table_bytes, h.crc_table_offset, path_);
    write_header(fd_.get(), h, path_);
    if (sync_ && ::fdatasync(fd_.get()) != 0) throw_errno("fdatasync " + path_);
    result.checksum = h.header_crc;
    finished_ = true;
    return result;
}

LayerWriteResult write_layer(const GuestMemory& memory, const PageBitmap& pages, const std::string& path,
                             const std::optional<ParentRef>& parent) {
    const uint64_t total = memory.ram_bytes() / kPageSize;
    if (pages.size() != (total + 63) / 64)
        throw Error(fmt::format("page bitmap of {} words for {} pages", pages.size(), total));
    LayerBuilder builder(path, memory.ram_bytes(), parent, false);
    put_pages(builder, memory, pages);
    return builder.finish();
}

void put_pages(LayerBuilder& builder, const GuestMemory& memory, const PageBitmap& pages) {
    if (pages.size() != (memory.ram_bytes() / kPageSize + 63) / 64)
        throw Error(fmt::format("page bitmap of {} words for {} bytes of RAM", pages.size(), memory.ram_bytes()));
    // Runs of consecutive pages contiguous in host memory go out in one put.
    uint64_t first = 0;
    for (const MemoryRegion& r : memory.regions()) {
        const uint64_t pages_in = r.size / kPageSize;
        for_each_page_run(pages, first, pages_in,
                          [&](uint64_t p, uint64_t n) { builder.put(first + p, n, r.host + p * kPageSize); });
        first += pages_in;
    }
}

LayerFile LayerFile::open(const std::string& path) {
    const auto fail = [&](const std::string& what) { return SnapshotError(fmt::format("{}: {}", path, what)); };
    LayerFile f;
    f.path_ = path;
    f.fd_ = Fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!f.fd_) throw_errno("open " + path);
    struct stat st {};
    if (::fstat(f.fd_.get(), &st) != 0) throw_errno("fstat " + path);
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size < kLayerDataOffset)
        throw fail(fmt::format("truncated: the header needs {} bytes, the file has {}", kLayerDataOffset, size));
    LayerHeader& h = f.header_;
    if (::pread(f.fd_.get(), &h, sizeof(h), 0) != static_cast<ssize_t>(sizeof(h))) throw_errno("read " + path);
    if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) throw fail("not a nanovm memory layer (bad magic)");
    if (header_crc(h) != h.header_crc) throw fail("header checksum mismatch (corrupt header)");
    if (h.version > kLayerFormatVersion)
        throw fail(fmt::format("layer format version {} was written by a newer nanovm; this nanovm reads 1 to {}",
                               h.version, kLayerFormatVersion));
    if (h.version == 0) throw fail("layer format version 0 is not valid");
    if (h.flags & ~(kLayerHasParent | kLayerFlat)) throw fail(fmt::format("unknown flags {:#x}", h.flags));
    if (h.ram_bytes == 0 || h.ram_bytes % kPageSize != 0 || h.ram_bytes > (1ULL << 40) ||
        h.total_pages != h.ram_bytes / kPageSize)
        throw fail(fmt::format("header: RAM size {} / {} pages is inconsistent", h.ram_bytes, h.total_pages));
    if (h.data_offset != kLayerDataOffset) throw fail(fmt::format("header: data offset {}", h.data_offset));
    if (h.parent[kParentNameBytes - 1] != 0) throw fail("header: parent name is not NUL-terminated");
    const uint64_t data_end = h.data_offset + h.total_pages * kPageSize;
    if (h.flags & kLayerFlat) {
        if (size < data_end) throw fail(fmt::format("truncated: {} bytes of page data expected, file has {}", data_end, size));
    } else {
        const uint64_t words = (h.total_pages + 63) / 64;
        if (h.bitmap_offset != data_end || h.bitmap_bytes != words * 8 ||
            h.crc_table_offset != h.bitmap_offset + h.bitmap_bytes || h.present_pages > h.total_pages ||
            h.crc_table_bytes != h.present_pages * 4)
            throw fail("header: bitmap or CRC table placement is inconsistent");
        if (size != h.crc_table_offset + h.crc_table_bytes)
            throw fail(fmt::format("truncated or padded: {} bytes expected, the file has {}",
                                   h.crc_table_offset + h.crc_table_bytes, size));
        f.bitmap_.resize(words);
        if (::pread(f.fd_.get(), f.bitmap_.data(), h.bitmap_bytes, static_cast<off_t>(h.bitmap_offset)) !=
            static_cast<ssize_t>(h.bitmap_bytes))
            throw_errno("read bitmap " + path);
        if (crc32c({reinterpret_cast<const uint8_t*>(f.bitmap_.data()), h.bitmap_bytes}) != h.bitmap_crc)
            throw fail("page bitmap checksum mismatch (corrupt bitmap)");
        if (h.total_pages % 64 && (f.bitmap_.back() >> (h.total_pages % 64)))
            throw fail("page bitmap marks pages beyond the end of RAM");
        f.rank_.resize(words);
        uint64_t count = 0;
        for (uint64_t w = 0; w < words; ++w) {
            f.rank_[w] = static_cast<uint32_t>(count);
            count += static_cast<uint64_t>(std::popcount(f.bitmap_[w]));
        }
        if (count != h.present_pages)
            throw fail(fmt::format("bitmap has {} pages, the header says {}", count, h.present_pages));
        f.crcs_.resize(h.present_pages);
        if (h.crc_table_bytes &&
            ::pread(f.fd_.get(), f.crcs_.data(), h.crc_table_bytes, static_cast<off_t>(h.crc_table_offset)) !=
                static_cast<ssize_t>(h.crc_table_bytes))
            throw_errno("read CRC table " + path);
        if (crc32c({reinterpret_cast<const uint8_t*>(f.crcs_.data()), h.crc_table_bytes}) != h.crc_table_crc)
            throw fail("page CRC table checksum mismatch (corrupt table)");
    }
    f.map_bytes_ = size;
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, f.fd_.get(), 0);
    if (map == MAP_FAILED) throw_errno("mmap " + path);
    f.map_ = static_cast<const uint8_t*>(map);
    return f;
}

LayerFile::LayerFile(LayerFile&& o) noexcept
    : path_(std::move(o.path_)),
      header_(o.header_),
      fd_(std::move(o.fd_)),
      map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)),
      bitmap_(std::move(o.bitmap_)),
      rank_(std::move(o.rank_)),
      crcs_(std::move(o.crcs_)),
      whole_verified_(o.whole_verified_) {}

LayerFile& LayerFile::operator=(LayerFile&& o) noexcept {
    if (this != &o) {
        if (map_) ::munmap(const_cast<uint8_t*>(map_), map_bytes_);
        path_ = std::move(o.path_);
        header_ = o.header_;
        fd_ = std::move(o.fd_);
        map_ = std::exchange(o.map_, nullptr);
        map_bytes_ = std::exchange(o.map_bytes_, 0);
        bitmap_ = std::move(o.bitmap_);
        rank_ = std::move(o.rank_);
        crcs_ = std::move(o.crcs_);
        whole_verified_ = o.whole_verified_;
    }
    return *this;
}

LayerFile::~LayerFile() {
    if (map_) ::munmap(const_cast<uint8_t*>(map_), map_bytes_);
}

std::optional<ParentRef> LayerFile::parent() const {
    if (!(header_.flags & kLayerHasParent)) return std::nullopt;
    return ParentRef{std::string(header_.parent), header_.parent_checksum};
}

bool LayerFile::has(uint64_t page) const noexcept {
    if (flat()) return page < header_.total_pages;
    return page < header_.total_pages && page_set(bitmap_, page);
}

uint32_t LayerFile::stored_crc(uint64_t p) const noexcept {
    const uint64_t below = p % 64 ? std::popcount(bitmap_[p / 64] & ((1ULL << (p % 64)) - 1)) : 0;
    return crcs_[rank_[p / 64] + below];
}

std::span<const uint8_t> LayerFile::page_verified(uint64_t p) const {
    const std::span<const uint8_t> data = page(p);
    if (flat() || whole_verified_) return data;
    const uint64_t below = p % 64 ? std::popcount(bitmap_[p / 64] & ((1ULL << (p % 64)) - 1)) : 0;
    const uint32_t expected = crcs_[rank_[p / 64] + below];
    const uint32_t got = crc32c(data);
    if (got != expected)
        throw SnapshotError(fmt::format("{}: page {} (of the RAM layout) checksum mismatch (corrupt page data)", path_, p));
    return data;
}

LayerChain LayerChain::open(const std::string& top) {
    LayerChain chain;
    chain.layers_.push_back(LayerFile::open(top));
    while (auto parent = chain.layers_.back().parent()) {
        const LayerFile& child = chain.layers_.back();
        if (chain.layers_.size() >= kMaxChain)
            throw SnapshotError(fmt::format("{}: layer chain longer than {}", top, kMaxChain));
        if (parent->path.empty() || parent->path.front() == '/')
            throw SnapshotError(fmt::format("{}: parent layer path '{}' must be relative to the layer's directory",
                                            child.path(), parent->path));
        const std::filesystem::path dir = std::filesystem::path(child.path()).parent_path();
        const std::string path = (dir / parent->path).lexically_normal().string();
        if (!std::filesystem::exists(path))
            throw SnapshotError(fmt::format("{}: parent layer {} is missing", child.path(), path));
        LayerFile next = LayerFile::open(path);
        if (next.checksum() != parent->checksum)
            throw SnapshotError(fmt::format("{}: parent layer {} has checksum {:#010x}, expected {:#010x} (a different "
                                            "or rewritten layer)",
                                            child.path(), path, next.checksum(), parent->checksum));
        if (next.header().ram_bytes != child.header().ram_bytes || next.flat())
            throw SnapshotError(fmt::format("{}: parent layer {} has a different RAM size", child.path(), path));
        chain.layers_.push_back(std::move(next));
    }
    return chain;
}

const LayerFile* LayerChain::find(uint64_t page) const noexcept {
    for (const LayerFile& layer : layers_)
        if (layer.has(page)) return &layer;
    return nullptr;
}

void flatten_chain(const LayerChain& chain, const std::string& path, const std::string& top_name) {
    // Per process: restores of one snapshot may flatten it at the same time.
    const std::string tmp = fmt::format("{}.{}.tmp", path, ::getpid());
    Fd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd) throw_errno("open " + tmp);
    LayerHeader h = make_header(chain.ram_bytes(), kLayerFlat);
    set_parent(h, {top_name, chain.layers().front().checksum()});
    const uint64_t total = chain.total_pages();
    if (::ftruncate(fd.get(), static_cast<off_t>(h.data_offset + total * kPageSize)) != 0)
        throw_errno("ftruncate " + tmp);
    // One pass over the pages; runs of pages coming from consecutive pages of the
    // same layer go out in one pwrite from that layer's mapping.
    const LayerFile* run_layer = nullptr;
    uint64_t run_first = 0, run_pages = 0;
    const auto flush = [&] {
        if (run_pages)
            pwrite_all(fd.get(), run_layer->page(run_first).data(), run_pages * kPageSize,
                       h.data_offset + run_first * kPageSize, tmp);
        run_pages = 0;
    };
    for (uint64_t p = 0; p < total; ++p) {
        const LayerFile* layer = chain.find(p);
        if (!layer || is_zero(layer->page_verified(p).data())) {
            flush();
            continue;
        }
        if (run_pages && run_layer == layer && run_first + run_pages == p) {
            ++run_pages;
        } else {
            flush();
            run_layer = layer;
            run_first = p;
            run_pages = 1;
        }
    }
    flush();
    write_header(fd.get(), h, tmp);
    if (::fdatasync(fd.get()) != 0) throw_errno("fdatasync " + tmp);
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw_errno("rename " + tmp);
}

}  // namespace nanovm::snapshot
