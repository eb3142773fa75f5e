// Memory layer files: guest RAM pages in a sparse file plus a bitmap of the pages
// present (DESIGN.md "snapshot/"). Pages (4 KiB) are numbered linearly over the RAM
// layout of GuestMemory::layout(ram_bytes): region 0's pages, then region 1's; page
// p sits at file offset data_offset + p * 4096, so the file has holes where pages
// are absent or zero. A full layer holds the non-zero pages (absent = zero); a diff
// layer holds the pages dirtied since its parent (absent = look in the parent),
// and names its parent by relative path and header checksum.
//
// Layout: a 4096-byte LayerHeader, the page data, the bitmap (u64 words, bit p%64
// of word p/64), then one CRC-32C per present page in page order. The header
// checksums the bitmap and the CRC table, so its own CRC identifies the whole
// layer. A flat file (kLayerFlat) is a layer with every page in place and no
// bitmap: the restore "file" backend maps it MAP_PRIVATE.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vmm/fd.hpp"
#include "vmm/guest_memory.hpp"

namespace nanovm::snapshot {

inline constexpr uint32_t kLayerFormatVersion = 1;
inline constexpr uint32_t kLayerHasParent = 1u << 0;
inline constexpr uint32_t kLayerFlat = 1u << 1;
inline constexpr uint64_t kLayerDataOffset = 4096;  ///< bytes: page 0's file offset
inline constexpr size_t kParentNameBytes = 256;

/// The first 4096 bytes of a layer file (little-endian; zero padded).
struct LayerHeader {
    char magic[8];             ///< "NVMLAYER"
    uint32_t version;          ///< kLayerFormatVersion
    uint32_t flags;            ///< kLayerHasParent, kLayerFlat
    uint64_t ram_bytes;        ///< the guest's RAM size; fixes the region layout
    uint64_t total_pages;      ///< ram_bytes / 4096
    uint64_t present_pages;    ///< bits set in the bitmap
    uint64_t data_offset;      ///< kLayerDataOffset
    uint64_t bitmap_offset;    ///< bytes; after the data
    uint64_t bitmap_bytes;     ///< ceil(total_pages / 64) * 8 (0 for a flat file)
    uint64_t crc_table_offset; ///< bytes; after the bitmap
    uint64_t crc_table_bytes;  ///< present_pages * 4 (0 for a flat file)
    uint32_t bitmap_crc;       ///< CRC-32C of the bitmap
    uint32_t crc_table_crc;    ///< CRC-32C of the page CRC table
    uint32_t parent_checksum;  ///< the parent's header_crc (with kLayerHasParent)
    uint32_t reserved;
    char parent[kParentNameBytes];  ///< parent layer path, relative to this file's directory, NUL-terminated
    uint32_t header_crc;       ///< CRC-32C of every byte above
};

/// A layer's parent: `path` relative to the child's directory, its header CRC.
struct ParentRef {
    std::string path;
    uint32_t checksum = 0;
};

/// What write_layer did.
struct LayerWriteResult {
    uint64_t present_pages = 0;  ///< pages marked present in the bitmap
    uint64_t data_pages = 0;     ///< of those, non-zero pages written as data
    uint32_t checksum = 0;       ///< the new layer's header_crc (its identity)
};

/// A bitmap over the linear pages of `memory` (bit p set = page p).
using PageBitmap = std::vector<uint64_t>;

/// True if page `p` is set in `bits` (the caller keeps p inside the bitmap).
inline bool page_set(const PageBitmap& bits, uint64_t p) noexcept { return bits[p / 64] >> (p % 64) & 1; }

/// Calls f(offset, count) for each maximal run of set pages among pages
/// [first, first + pages) of `bits`; offset is relative to `first` (pages).
template <typename F>
void for_each_page_run(const PageBitmap& bits, uint64_t first, uint64_t pages, F&& f) {
    uint64_t p = 0;
    while (p < pages) {
        if (!page_set(bits, first + p)) {
            ++p;
            continue;
        }
        uint64_t n = 1;
        while (p + n < pages && page_set(bits, first + p + n)) ++n;
        f(p, n);
        p += n;
    }
}

/// Writes all `bytes` at `offset` of `fd` (pwrite, retried on EINTR and short
/// writes). Throws SysError("pwrite <what>").
void pwrite_all(int fd, const uint8_t* data, uint64_t bytes, uint64_t offset, const std::string& what);

/// Calls f(from, bytes) for each data extent of file `fd` inside [offset, offset +
/// bytes) (lseek SEEK_DATA/SEEK_HOLE: a hole reads as zero), `from` relative to
/// `offset`, in order. Throws SysError (lseek), or what f throws.
void for_each_data_extent(int fd, uint64_t offset, uint64_t bytes,
                          const std::function<void(uint64_t from, uint64_t bytes)>& f);

/// The non-zero pages of `memory`. For Backing::memfd only the memfd's data extents
/// (SEEK_DATA/SEEK_HOLE) are read; for private_memfd those plus the pages this
/// process holds privately (/proc/self/pagemap); other backings are read page by
/// page through the mapping (a lazily served memory is faulted in).
PageBitmap nonzero_pages(const GuestMemory& memory);

/// The pages of `memory` that may hold data, without reading them: for
/// Backing::memfd the memfd's data extents (SEEK_DATA/SEEK_HOLE; a page written
/// and then zeroed is included), for private_memfd those plus the pages held as
/// private copies or swapped (/proc/self/pagemap), for private_file
/// nonzero_pages(memory). For the lazy backings (lazy_memfd, lazy_private_memfd)
/// the pages this VM holds the same way: every other page is its layer chain's
/// (snapshot/uffd_backend.hpp), so these are what a layer over that chain needs.
/// Cheap enough to run inside a snapshot's pause.
PageBitmap populated_pages(const GuestMemory& memory);

/// The pages this process holds as private anonymous copies (or in swap) in the
/// mappings of `memory`: for a MAP_PRIVATE backing, the pages written since it was
/// mapped (/proc/self/pagemap; Documentation/admin-guide/mm/pagemap.rst). Throws
/// SysError (open, pread of pagemap).
PageBitmap private_pages(const GuestMemory& memory);

/// Builds a layer file page by page, from one thread or several (each page is put
/// at most once), then finish() writes the bitmap, CRC table and header and
/// fdatasyncs. write_layer and the background copy (snapshot/wp_copy.hpp) use it.
class LayerBuilder {
public:
    /// Creates (truncates) `path` for a layer of `ram_bytes` of RAM. With
    /// `drop_zero_pages` (base layers only: absent = zero) zero pages are left out of
    /// the bitmap; otherwise they are present, as holes. Throws SysError, Error.
    LayerBuilder(const std::string& path, uint64_t ram_bytes, const std::optional<ParentRef>& parent,
                 bool drop_zero_pages);
    LayerBuilder(const LayerBuilder&) = delete;
    LayerBuilder& operator=(const LayerBuilder&) = delete;
    ~LayerBuilder();

    /// Stores linear pages [first, first + count), whose bytes are contiguous at
    /// `host` and must not change during the call. Zero pages stay holes. Thread-safe
    /// for distinct pages. Throws SysError("pwrite <path>").
    void put(uint64_t first, uint64_t count, const uint8_t* host);
    /// As put, with each data page's CRC-32C given (crcs[i] for page first + i)
    /// instead of computed: for a writer that has them already (an archive carries
    /// its pages' CRCs, api/daemon/archive/sandbox_archive.hpp). A wrong one makes
    /// that page fail its check on use (LayerFile::page_verified).
    void put_with_crcs(uint64_t first, uint64_t count, const uint8_t* host, const uint32_t* crcs);
    /// Starts the writeback of pages [first, first + count) already put
    /// (sync_file_range SYNC_FILE_RANGE_WRITE, which does not wait for it): a writer
    /// of much data overlaps the device's writes with its own work instead of
    /// leaving them all to finish()'s fdatasync, which still makes the file durable.
    /// Best effort: an error here is left to that fdatasync.
    void start_writeback(uint64_t first, uint64_t count) noexcept;
    /// Writes bitmap, CRC table and header; fdatasync (unless skip_sync()). Call
    /// once, after every put.
    LayerWriteResult finish();
    /// After finish(): the CRC-32C of the whole file (the manifest's part checksum)
    /// from the header, the pages' own CRCs and the tables, without reading the
    /// pages (combined: crc32c_combine), so a writer of much RAM need not read it
    /// all back to describe it (write_manifest's `described`). A page put with a
    /// wrong CRC (put_with_crcs) makes it differ from the file's real one, which a
    /// full check of the part then reports. Throws SysError (pread, fstat), Error
    /// (called before finish()).
    uint32_t file_crc32c() const;
    /// True if page `page` was put (zero or data).
    bool has(uint64_t page) const noexcept;
    /// finish() leaves the file in the page cache (a fork base: never needed after
    /// a host crash).
    void skip_sync() noexcept { sync_ = false; }
    const std::string& path() const noexcept { return path_; }

private:
    void store(uint64_t first, uint64_t count, const uint8_t* host, const uint32_t* crcs);
    /// The present-page bitmap and the CRC table finish() writes.
    void tables(PageBitmap& present, std::vector<uint32_t>& crcs, LayerWriteResult& result) const;
    bool finished_ = false;
    std::string path_;
    Fd fd_;
    LayerHeader header_{};
    bool drop_zero_ = false;
    bool sync_ = true;
    uint64_t total_ = 0;
    /// Per page: 0 not put, 1 zero, 2 data.
    std::unique_ptr<std::atomic<uint8_t>[]> kind_;
    std::unique_ptr<uint32_t[]> crc_;  ///< per page, valid when kind_ == 2
};

/// Puts every page of memfd `memfd`'s first `bytes` that lies in a data extent
/// (zero pages among them stay holes, as put does) into `builder` as linear pages
/// from `first`, read with pread in 2 MiB runs: the writer of a snapshot whose RAM
/// was frozen (snapshot/frozen_ram.hpp). The memfd must not change meanwhile.
/// Returns the pages read. Throws SysError (lseek, pread, pwrite), Error.
uint64_t put_memfd(LayerBuilder& builder, int memfd, uint64_t bytes, uint64_t first);

/// Puts the pages set in `pages` (a bitmap over the linear pages) of `memory` into
/// `builder`, runs of consecutive pages in one call. Throws as LayerBuilder::put.
void put_pages(LayerBuilder& builder, const GuestMemory& memory, const PageBitmap& pages);

/// Writes a layer of `memory` holding the pages set in `pages` to `path` (created
/// or truncated, then fsync'd). Zero pages stay holes but are marked present.
/// `parent` empty makes a base layer (absent pages are zero). Throws SysError
/// naming the step, or Error if `pages` has the wrong size.
LayerWriteResult write_layer(const GuestMemory& memory, const PageBitmap& pages, const std::string& path,
                             const std::optional<ParentRef>& parent);

/// One opened, validated layer file (read-only mapping of the whole file).
class LayerFile {
public:
    /// Opens `path` and checks magic, version, header CRC, every size and offset
    /// against the file size, the bitmap and CRC-table checksums, and that
    /// present_pages matches the bitmap. Page data is checked per page on use
    /// (page_verified). Throws SnapshotError naming the file and the part.
    static LayerFile open(const std::string& path);

    LayerFile(LayerFile&&) noexcept;
    LayerFile& operator=(LayerFile&&) noexcept;
    LayerFile(const LayerFile&) = delete;
    LayerFile& operator=(const LayerFile&) = delete;
    ~LayerFile();

    const std::string& path() const noexcept { return path_; }
    const LayerHeader& header() const noexcept { return header_; }
    uint32_t checksum() const noexcept { return header_.header_crc; }
    bool flat() const noexcept { return header_.flags & kLayerFlat; }
    std::optional<ParentRef> parent() const;
    /// True if page p (linear index) is present in this layer.
    bool has(uint64_t page) const noexcept;
    /// Page p's 4096 bytes (p must be present), checked against its stored CRC
    /// (unless whole_verified()). Throws SnapshotError naming the file and the page's
    /// linear index on mismatch.
    std::span<const uint8_t> page_verified(uint64_t page) const;
    /// Records that this file was found good whole, against its snapshot's manifest
    /// (the part's CRC-32C over every byte: check_parts_cached, or its cache
    /// parts.verified for this very inode, size and mtime: part_verified_cached):
    /// page_verified then skips the per-page CRC, which the whole-file CRC covers.
    /// In the test host a page's CRC-32C costs 30-54 us (issue 19: 60-110 ms of a
    /// template restore's prefetch of ~2090 pages). Call before sharing the file
    /// between threads.
    void mark_whole_verified() noexcept { whole_verified_ = true; }
    bool whole_verified() const noexcept { return whole_verified_; }
    /// The CRC-32C stored for page p (p must be present; not for flat files, which
    /// store none).
    uint32_t stored_crc(uint64_t page) const noexcept;
    /// Page p's bytes without the check (flat files; callers that verified already).
    std::span<const uint8_t> page(uint64_t page) const noexcept {
        return {map_ + header_.data_offset + page * kPageSize, kPageSize};
    }
    int fd() const noexcept { return fd_.get(); }

private:
    LayerFile() = default;
    std::string path_;
    LayerHeader header_{};
    Fd fd_;
    const uint8_t* map_ = nullptr;
    uint64_t map_bytes_ = 0;
    std::vector<uint64_t> bitmap_;
    std::vector<uint32_t> rank_;  ///< present pages before word w
    std::vector<uint32_t> crcs_;  ///< one per present page
    bool whole_verified_ = false; ///< mark_whole_verified()
};

/// A layer and its ancestors, top first. Parents are found by relative path and
/// must have the checksum their child recorded and the same RAM size.
class LayerChain {
public:
    /// Opens `top` and follows parents (at most 64 layers). Throws SnapshotError
    /// naming the layer whose parent is missing, different or corrupt.
    static LayerChain open(const std::string& top);

    const std::vector<LayerFile>& layers() const noexcept { return layers_; }
    /// The same, to mark a layer found good whole (LayerFile::mark_whole_verified).
    std::vector<LayerFile>& layers() noexcept { return layers_; }
    uint64_t ram_bytes() const noexcept { return layers_.front().header().ram_bytes; }
    uint64_t total_pages() const noexcept { return layers_.front().header().total_pages; }
    /// The topmost layer holding page p, or nullptr (the page is zero).
    const LayerFile* find(uint64_t page) const noexcept;

private:
    std::vector<LayerFile> layers_;
};

/// Puts every page that `chain` holds and `builder` does not have yet (checked
/// against its CRC): a merged layer, the VM's own pages over its chain's. Call
/// after every other put. Returns the pages added. Throws SnapshotError (corrupt
/// page), SysError (pwrite).
uint64_t put_chain_rest(LayerBuilder& builder, const LayerChain& chain);

/// Writes `chain` as one flat file at `path` (page p at kLayerDataOffset + p*4096,
/// zero pages as holes), checking every page's CRC on the way; its header's
/// parent names chain's top layer (`top_name`, relative to path's directory).
/// Throws SnapshotError for a corrupt page (naming layer and page), SysError.
void flatten_chain(const LayerChain& chain, const std::string& path, const std::string& top_name);

}  // namespace nanovm::snapshot
