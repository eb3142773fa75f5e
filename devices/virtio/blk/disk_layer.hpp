// One disk layer file: copy-on-write over a read-only parent (issue 5, "Disk
// layers"). A chain of them (layered_disk.hpp) is one virtio-blk disk; taking a disk
// snapshot freezes the top layer and starts a new empty one, O(1) in the disk size.
//
// File layout (little endian, x86 hosts only):
//   [0, 4096)                      header (LayerHeaderWire below), CRC-32C protected
//   [4096, 4096 + bitmap_bytes)    presence bitmap: bit b (bit b%64 of u64 word b/64)
//                                  set = 4 KiB block b of the disk is in this layer;
//                                  bits past the last block are 0; CRC in the header
//   [data_offset, + disk_bytes)    data area: block b at data_offset + b*4096. The
//                                  file is sized to data_offset + disk_bytes and sparse:
//                                  only blocks written allocate.
// data_offset = bitmap end rounded up to 1 MiB.
//
// A block whose bit is clear reads from the parent: a frozen layer (kind layer), a
// raw image in which every block is present (kind raw), or zeros (kind none). The
// writable top layer's bitmap lives in memory and is written at save/freeze; its
// header then gets the bitmap's CRC (and, at freeze, the frozen flag: the file never
// changes again and may be the parent of other layers).
//
// Everything read from a layer file is untrusted: read_layer_header() checks every
// field and both CRCs, and its errors are one line naming the file.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "vmm/fd.hpp"

namespace nanovm::virtio::blk {

/// Granularity of copy-on-write and of the presence bitmap, bytes.
inline constexpr uint64_t kLayerBlockSize = 4096;
/// The first 8 bytes of every layer file.
inline constexpr std::array<char, 8> kLayerMagic = {'N', 'A', 'N', 'O', 'V', 'M', 'D', 'L'};
/// The format version this code writes and reads.
inline constexpr uint32_t kLayerVersion = 1;
/// Bytes of the header; the bitmap starts right after it.
inline constexpr uint64_t kLayerHeaderBytes = 4096;
/// Largest disk a layer may describe, bytes (1 TiB: a 32 MiB bitmap). Bounds what
/// a hostile header can make us allocate.
inline constexpr uint64_t kMaxLayerDiskBytes = uint64_t{1} << 40;
/// Longest parent path stored in a header, bytes.
inline constexpr size_t kMaxParentPathBytes = 3072;

/// Random identity of one layer file (its parent's children name it).
using LayerId = std::array<uint8_t, 16>;

/// What a layer's absent blocks read from.
enum class ParentKind : uint32_t {
    none = 0,   ///< nothing: zeros
    layer = 1,  ///< another (frozen) layer file
    raw = 2,    ///< a raw image file: every block present
};

/// A layer's reference to its parent.
struct ParentRef {
    ParentKind kind = ParentKind::none;
    /// The parent's path as stored: a plain file name (no '/') means "in this layer's
    /// directory", anything else is absolute. Empty for kind none.
    std::string path;
    LayerId id{};           ///< kind layer: the parent's LayerHeader::id; else zeros
    uint64_t raw_bytes = 0; ///< kind raw: the raw file's size in bytes; else 0
};

/// A layer file's header, decoded and checked.
struct LayerHeader {
    uint64_t disk_bytes = 0;  ///< disk size, bytes (a positive multiple of 4096)
    LayerId id{};
    ParentRef parent;
    bool frozen = false;      ///< read-only for ever: may be a parent
    uint32_t bitmap_crc = 0;  ///< CRC-32C of the bitmap's bitmap_bytes()

    /// Disk size in 4 KiB blocks.
    uint64_t blocks() const noexcept { return disk_bytes / kLayerBlockSize; }
    /// Bytes of the presence bitmap: whole 64-bit words.
    uint64_t bitmap_bytes() const noexcept { return (blocks() + 63) / 64 * 8; }
    /// File offset of the data area, bytes (the bitmap's end rounded up to 1 MiB).
    uint64_t data_offset() const noexcept;
    /// The file's size, bytes: data_offset() + disk_bytes.
    uint64_t file_bytes() const noexcept { return data_offset() + disk_bytes; }
};

/// True if the file open at `fd` starts with kLayerMagic (reads 8 bytes at offset 0;
/// a shorter file or a failed read is "no"). Used to tell layer files from raw disks.
bool is_layer_file(int fd) noexcept;

/// Reads and checks the header of the layer file open at `fd` (`path` for messages):
/// magic, version, block size, sizes and offsets, parent path syntax, header CRC,
/// file size == file_bytes(). Throws Error "disk layer <path>: <what is wrong>".
LayerHeader read_layer_header(int fd, const std::string& path);

/// Reads the presence bitmap (header.bitmap_bytes() / 8 words) and checks its CRC
/// and that no bit past the last block is set. Throws Error naming `path`, SysError
/// for a failed read.
std::vector<uint64_t> read_layer_bitmap(int fd, const std::string& path, const LayerHeader& header);

/// Writes `header` (with a freshly computed header CRC) at offset 0. Throws SysError
/// (pwrite) naming `path`. No fsync.
void write_layer_header(int fd, const std::string& path, const LayerHeader& header);

/// A new random layer id (getrandom). Throws SysError.
LayerId new_layer_id();

/// Creates the layer file `path` (O_CREAT | O_EXCL, mode 0600) with an empty bitmap
/// over `parent`, sized sparse to file_bytes(); returns the open O_RDWR fd and fills
/// `header` (a new id, the bitmap CRC of zeros, not frozen). `disk_bytes` must be a
/// positive multiple of 4096 up to kMaxLayerDiskBytes. Throws Error (bad size or
/// parent path) or SysError (open, ftruncate, pwrite) naming `path`; on failure
/// after creating the file, removes it.
Fd create_layer_file(const std::string& path, uint64_t disk_bytes, const ParentRef& parent, LayerHeader& header);

}  // namespace nanovm::virtio::blk
