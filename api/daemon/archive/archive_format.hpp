// The archive file: a sandbox's images (vm.state, guest RAM, writable disks) as
// sparse byte runs, compressed with multithreaded zstd (libzstd's ZSTD_c_nbWorkers;
// zstd format: RFC 8878), self-contained. All integers little-endian.
//
//   header  = magic "NANOVMAR" (8 bytes), u32 version (1), u32 meta_bytes,
//             u32 meta_crc (CRC-32C of the meta), u32 header_crc (CRC-32C of the
//             20 bytes before it)
//   meta    = meta_bytes of UTF-8 JSON (at most kMaxMetaBytes):
//             {"images": [{"name", "bytes"}, ...], "info": {...the caller's...}}
//   body    = ONE zstd frame with its content checksum (XXH64), decompressing to
//             records, then nothing after it:
//   record  = u32 image (index into meta.images), u32 zero, u64 offset, u64 length,
//             then `length` bytes (at most kMaxRunBytes): bytes [offset, +length)
//             of that image; bytes no record covers are zeros (sparse)
//   end     = a record with image 0xFFFFFFFF, offset = the number of data records,
//             length = their bytes summed, and no payload
//
// Everything read is untrusted: sizes are bounded before anything is allocated, a
// run outside its image, a missing end record, bytes after it, a bad checksum or a
// truncated blob is an ArchiveError naming what is wrong; never a crash.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/daemon/archive/blob_store.hpp"
#include "vmm/error.hpp"

typedef struct ZSTD_CCtx_s ZSTD_CCtx;
typedef struct ZSTD_DCtx_s ZSTD_DCtx;

namespace nanovm::daemon::archive {

inline constexpr uint32_t kArchiveVersion = 1;
inline constexpr uint32_t kMaxMetaBytes = 1u << 20;
/// Largest payload of one record; longer runs are split.
inline constexpr uint64_t kMaxRunBytes = 1u << 20;
/// Largest image an archive may describe (1 TiB).
inline constexpr uint64_t kMaxImageBytes = uint64_t{1} << 40;
inline constexpr uint32_t kEndRecord = 0xFFFF'FFFFu;

/// A malformed, corrupt or truncated archive.
class ArchiveError : public Error {
public:
    using Error::Error;
};

/// One image of an archive.
struct ArchiveImage {
    std::string name;  ///< 1-64 bytes
    uint64_t bytes = 0;
    bool operator==(const ArchiveImage&) const = default;
};

/// The header's metadata.
struct ArchiveMeta {
    std::vector<ArchiveImage> images;
    nlohmann::json info = nlohmann::json::object();
    /// The index of image `name`. Throws ArchiveError if there is none.
    uint32_t index_of(const std::string& name) const;
};

/// Compression settings.
struct ZstdOptions {
    int level = 3;
    int workers = 0;  ///< ZSTD_c_nbWorkers; 0: one per online CPU (at least 1)
};

/// Writes an archive into `out` (not committed: the caller commits).
class ArchiveWriter {
public:
    /// Writes the header and meta. Throws Error (bad meta; a libzstd without
    /// multithreading when workers > 1), SysError from `out`.
    ArchiveWriter(BlobWriter& out, const ArchiveMeta& meta, ZstdOptions options = {});
    ~ArchiveWriter();
    ArchiveWriter(const ArchiveWriter&) = delete;
    ArchiveWriter& operator=(const ArchiveWriter&) = delete;

    /// Adds bytes [offset, offset + data.size()) of image `image` (split into
    /// records of at most kMaxRunBytes). Throws Error for a run outside the image.
    void add(uint32_t image, uint64_t offset, std::span<const uint8_t> data);
    /// Writes the end record and ends the zstd frame. Call once.
    void finish();

    uint64_t raw_bytes() const noexcept { return raw_bytes_; }   ///< payload bytes added
    uint64_t records() const noexcept { return records_; }
    int workers() const noexcept { return workers_; }

private:
    void compress(std::span<const uint8_t> in, bool end);
    BlobWriter& out_;
    ArchiveMeta meta_;
    ZSTD_CCtx* cctx_ = nullptr;
    std::vector<uint8_t> buffer_;
    uint64_t raw_bytes_ = 0;
    uint64_t records_ = 0;
    int workers_ = 1;
    bool finished_ = false;
};

/// One run read back.
struct ArchiveRun {
    uint32_t image = 0;
    uint64_t offset = 0;
    std::span<const uint8_t> data;  ///< valid until the next call
};

/// Reads an archive from `in`.
class ArchiveReader {
public:
    /// Reads and checks the header and meta. Throws ArchiveError, SysError.
    explicit ArchiveReader(BlobReader& in, std::string name = "archive");
    ~ArchiveReader();
    ArchiveReader(const ArchiveReader&) = delete;
    ArchiveReader& operator=(const ArchiveReader&) = delete;

    const ArchiveMeta& meta() const noexcept { return meta_; }
    /// The next run; false after the end record (checked: counts, the frame's
    /// end and checksum, nothing after it). Throws ArchiveError, SysError.
    bool next(ArchiveRun& run);
    /// Compressed bytes consumed so far (header included).
    uint64_t consumed() const noexcept { return consumed_; }

private:
    /// Fills `out` with exactly out.size() decompressed bytes; false if the frame
    /// ended cleanly before the first byte. Throws ArchiveError when it ends inside.
    bool read_exact(std::span<uint8_t> out);
    size_t read_some(std::span<uint8_t> out);
    [[noreturn]] void fail(const std::string& what) const;

    BlobReader& in_;
    std::string name_;
    ArchiveMeta meta_;
    ZSTD_DCtx* dctx_ = nullptr;
    std::vector<uint8_t> in_buf_;
    size_t in_pos_ = 0, in_size_ = 0;
    bool in_eof_ = false;
    bool frame_done_ = false;
    std::vector<uint8_t> payload_;
    uint64_t consumed_ = 0;
    uint64_t records_ = 0, bytes_ = 0;
    bool ended_ = false;
};

}  // namespace nanovm::daemon::archive
