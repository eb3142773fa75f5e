// A disk made of a chain of layer files (disk_layer.hpp): a writable top layer over
// frozen read-only layers over a base (a raw image, or zeros). Answers where each
// byte of the disk lives, records what the top now holds, and freezes the top
// (the O(1) disk snapshot of issue 5).
//
// Block b of the disk is owned by the highest layer whose presence bit b is set, else
// by the base. The owner of every block is kept in memory, one byte per 4 KiB block
// (4 MiB for a 16 GiB disk; allocated zero-filled by calloc, so pages the guest never
// touches cost nothing while the base owns them); lookups are O(blocks in the range),
// freezing does not touch it. Only the top's bitmap is kept besides (disk/32768 bytes).
//
// Not thread-safe: one thread (the device's loop) uses it; sync_frozen() is static
// and may run anywhere.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "devices/virtio/blk/disk_layer.hpp"
#include "vmm/fd.hpp"

namespace nanovm::virtio::blk {

struct CompactionPlan;  // layer_compaction.hpp

/// A run of disk bytes stored contiguously in one file (or nowhere).
struct DiskExtent {
    int fd = -1;               ///< the file to read, or -1: the bytes are zeros
    uint64_t file_offset = 0;  ///< bytes, where the run starts in `fd` (0 for zeros)
    uint64_t length = 0;       ///< bytes
};

/// One open chain of layers. Move-only.
class LayeredDisk {
public:
    /// Most layer files in one chain (a raw base not counted).
    static constexpr size_t kMaxDepth = 64;

    /// Creates `top_path` (O_EXCL, mode 0600): an empty, writable layer over
    /// `parent_path`. `parent_kind` says what the parent is, never guessed from its
    /// bytes (a raw disk's first bytes are the guest's to write, including a forged
    /// layer header): ParentKind::layer, a frozen layer file (its id is recorded, as
    /// for a restore over a snapshot's layer); ParentKind::raw, a raw image (a regular
    /// file whose size, a positive multiple of 4096, is recorded; its content is never
    /// interpreted). The parent is referred to by file name when it is in the top's
    /// directory, else by its absolute canonical path. Throws Error (kind none; the
    /// parent is not frozen, not a regular file, has a bad size or is a corrupt
    /// layer: naming the file) or SysError (open, ftruncate, pwrite).
    static void create_top(const std::string& top_path, const std::string& parent_path,
                           ParentKind parent_kind = ParentKind::layer);

    /// Opens the chain whose top layer is `top_path`, following parent references to
    /// the base. The top is opened O_RDWR if `writable` (then it must not be frozen),
    /// every parent O_RDONLY. Each file's header and bitmap are checked; every parent
    /// layer must be frozen, carry the id and disk size its child recorded; a raw
    /// parent must have the recorded size. Refuses loops and chains deeper than
    /// kMaxDepth. Throws Error "disk layer <file>: <what>" or SysError (open, read).
    static LayeredDisk open(const std::string& top_path, bool writable);

    /// Makes a frozen layer (or a raw base) durable: fsync of `frozen_path` and of its
    /// directory (which also holds the new top's entry). Any thread; meant to run in
    /// the background after freeze(). Throws SysError naming the path.
    static void sync_frozen(const std::string& frozen_path);

    LayeredDisk(LayeredDisk&&) noexcept = default;
    LayeredDisk& operator=(LayeredDisk&&) noexcept = default;
    LayeredDisk(const LayeredDisk&) = delete;
    LayeredDisk& operator=(const LayeredDisk&) = delete;
    ~LayeredDisk() = default;

    /// Disk size, bytes (a multiple of 4096).
    uint64_t disk_bytes() const noexcept { return disk_bytes_; }
    /// The chain's files, top first: the layers, then the raw base if there is one.
    std::vector<std::string> chain_paths() const;
    /// Layer files in the chain (the raw base not counted).
    size_t depth() const noexcept { return levels_.size() - 1; }
    bool writable() const noexcept { return writable_; }
    /// The top layer's fd (O_RDWR if writable) and its data area's file offset.
    int top_fd() const noexcept { return levels_.back().fd.get(); }
    uint64_t top_data_offset() const noexcept { return levels_.back().data_offset; }

    /// The first run of [offset, offset + length) (bytes, inside the disk, length > 0)
    /// that lives in one place: the longest prefix whose blocks have one owner. Any
    /// alignment. Throws Error if the range is outside the disk.
    DiskExtent extent_at(uint64_t offset, uint64_t length) const;
    /// All of [offset, offset + length) as consecutive extents (empty for length 0).
    std::vector<DiskExtent> map(uint64_t offset, uint64_t length) const;

    /// Records that the top now holds [offset, offset + length) (bytes, 4096-aligned
    /// at both ends): call after the data was written (or zeroed) there. Throws Error
    /// if not writable, misaligned or outside the disk.
    void mark_present(uint64_t offset, uint64_t length);
    /// Writes the top's changed bitmap pages and its header (with the new bitmap CRC)
    /// to the top file, if anything changed since the last save; no fsync (fdatasync
    /// the top for durability). Cost: the changed 4 KiB bitmap pages plus a CRC over
    /// the bitmap (disk/32768 bytes: 512 KiB for 16 GiB). Throws Error if not
    /// writable, SysError (pwrite).
    void save_bitmap();
    /// Freezes the top: creates `new_top_path` (O_EXCL, 0600) as an empty layer over
    /// it, writes the top's bitmap and its header marked frozen (pwrite, no fsync:
    /// see sync_frozen), keeps the old top open read-only as a parent, and continues
    /// with the new top. O(1) in the disk size apart from the bitmap write. Returns
    /// the frozen file's path. Must not race with I/O on this disk. Throws Error (not
    /// writable, chain already kMaxDepth deep) or SysError; on failure the chain is
    /// unchanged and `new_top_path` does not exist.
    std::string freeze(const std::string& new_top_path);

    /// Compaction step 1 (layer_compaction.hpp): the longest run of consecutive
    /// frozen layers directly below the top whose files are in directory `own_dir`
    /// (compared by device and inode, so any spelling of it works), if it has at
    /// least 2 layers; else nullopt. The top is never part of a run, nor is the base.
    /// Reads the run's bottom and topmost headers and dups the run's fds (O_RDONLY).
    /// Same thread as the I/O. Throws Error (a run header is corrupt) or SysError
    /// (stat of `own_dir`, fstat, open, read).
    std::optional<CompactionPlan> plan_compaction(const std::string& own_dir) const;
    /// Compaction step 3: puts the merged layer `merged_path` (write_merged_layer of
    /// `plan`, in the run's directory) in place of the run. Checks that the chain
    /// still holds the run at the same levels (same files by device and inode, and
    /// paths: a freeze since the plan is fine, it only adds layers above) and that
    /// the merged file's header is the plan's (id, parent, disk size, frozen); opens
    /// it O_RDONLY; rename(merged_path, plan.top_path); fsync of the directory; the
    /// run's levels become one level (block owners inside the run move to it, those
    /// above shift down); unlinks the other run files. Call on the I/O thread with no
    /// I/O in flight (extents handed out before are invalid afterwards: their fds
    /// are closed). Throws Error / SysError; if it throws before the rename the chain
    /// is unchanged and `merged_path` is removed. After the rename it does not fail
    /// but for the directory fsync or an unlink: then the chain in memory is the
    /// compacted one (both are valid), the error names what failed, and the other
    /// run files are kept when the fsync failed (they then only cost space).
    void adopt_compaction(const CompactionPlan& plan, const std::string& merged_path);

private:
    struct Level {
        std::string path;          // as resolved when opened; empty for a zero base
        Fd fd;                     // -1 for a zero base
        uint64_t data_offset = 0;  // file offset of block 0 (0 for a raw base)
    };
    struct FreeDeleter {
        void operator()(uint8_t* p) const noexcept { std::free(p); }
    };

    LayeredDisk() = default;
    void set_top_bit(uint64_t block) noexcept;
    void write_top();

    uint64_t disk_bytes_ = 0;
    bool writable_ = false;
    std::vector<Level> levels_;  // [0] = base (raw or zeros), then layers bottom-up
    std::unique_ptr<uint8_t[], FreeDeleter> owner_;  // per block: index into levels_
    LayerHeader top_header_;
    std::vector<uint64_t> top_bits_;     // the top's presence bitmap
    std::vector<uint8_t> dirty_pages_;   // per 4 KiB page of top_bits_: changed since saved
    bool unsaved_ = false;               // some page of dirty_pages_ is set
};

}  // namespace nanovm::virtio::blk
