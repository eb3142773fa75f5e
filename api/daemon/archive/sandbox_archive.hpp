// A sandbox's snapshot as one self-contained archive (archive_format.hpp), and back.
//
// pack_snapshot reads a durable snapshot directory (snapshot/manifest.hpp) and
// writes its images: "vm.state" (the file as it is), "memory" (the guest RAM read
// through the memory layer chain, every page checked against its CRC; zero pages
// left out), "memory.crc32c" (a u32 little-endian CRC-32C per RAM page, the
// layers' own: each run of non-zero pages comes right after the run of its CRCs, so
// unpack writes them rather than computing them again: in the test host under TCG
// that computing was most of the RAM pages' 11.9 s of a 44.5 s unpack) and
// "disk<i>" for each writable disk (its whole layer chain down to the raw base, read
// through devices/virtio/blk/layered_disk.hpp; holes and zero blocks left out). Nothing in the archive names another snapshot, a fork base or a
// template: deleting those never harms it. The read-only root image is not copied:
// the caller records its digest (the daemon's pinned images, store/image_pins.hpp).
//
// unpack_archive writes a snapshot directory a VMM restores: vm.state with each
// writable disk's frozen layer renamed to its raw file "disk<i>.raw" (frozen_kind
// raw) and the root image path replaced by `root_image`, a base "memory.layer" (no
// parent), the sparse raw disks, and the manifest last (durable). An archive without
// "memory.crc32c" (written before it existed) unpacks with the CRCs computed; a RAM
// run not right after its CRC run too.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "api/daemon/archive/archive_format.hpp"
#include "api/daemon/archive/blob_store.hpp"

namespace nanovm::daemon::archive {

/// Called with bytes done and bytes in all; may throw to stop the work.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

/// What pack_snapshot wrote.
struct PackStats {
    uint64_t raw_bytes = 0;         ///< payload bytes (non-zero RAM pages, their CRCs, disk blocks, vm.state)
    uint64_t compressed_bytes = 0;  ///< the blob's size
    int workers = 1;                ///< zstd worker threads
    double ms = 0;
};

/// Packs the durable snapshot `dir` into `out` (not committed) with `info` as the
/// archive's meta info. Throws SnapshotError (no manifest, a corrupt layer or
/// page), Error (a disk chain that does not open), SysError, what `progress` throws.
PackStats pack_snapshot(const std::string& dir, const nlohmann::json& info, BlobWriter& out, const ProgressFn& progress,
                        ZstdOptions zstd = {});

/// The root image file the snapshot `dir`'s VM ran over (its vm.state's config.image).
/// Throws SnapshotError, SysError.
std::string snapshot_root_image(const std::string& dir);

/// Reads only the header's info of an archive. Throws ArchiveError, SysError.
nlohmann::json archive_info(BlobReader& in, const std::string& name = "archive");

/// Where unpack_archive's time went (wall ms, steady clock), for the daemon's log
/// and tools/bench: reading and decompressing the blob, writing RAM pages into the
/// memory layer (zero check, CRC-32C, pwrite), writing disk runs, and the syncs
/// (sync_ms: all of the end's work, of which layer_ms the memory layer's finish,
/// disk_sync_ms the disks' fsync and manifest_ms vm.state and the manifest, whose
/// writing reads every part for its CRC-32C).
struct UnpackStats {
    uint64_t raw_bytes = 0;  ///< payload bytes read back
    double ms = 0, read_ms = 0, ram_ms = 0, disk_ms = 0, sync_ms = 0;
    double layer_ms = 0, disk_sync_ms = 0, manifest_ms = 0;
};

/// Whether unpack_archive waits for its files to reach the disk.
enum class Durability {
    durable,  ///< every part fsync'd, the manifest and directory too: a durable snapshot
    /// The same files (restorable: a VMM restores from them at once) left in the page
    /// cache, their writeback started, and a manifest that lists vm.state and the
    /// memory layer only (the raw disks' CRC-32C, which only a second restore of the
    /// directory would check, is not computed); make_durable(dir) later puts them on
    /// disk. For a caller that restores the directory once, whose VM needs the files
    /// only while the host runs, and that keeps another durable copy (the archive)
    /// until make_durable returned.
    deferred,
};

/// Unpacks `in` into the snapshot directory `dir` (created; must not exist or be
/// empty) over root image `root_image`; returns the archive's info. On failure the
/// directory is left incomplete (no manifest) for the caller to remove. Throws
/// ArchiveError (malformed, corrupt, truncated; an archive whose images are not a
/// sandbox's), SnapshotError, SysError, what `progress` throws. `stats`, if given,
/// receives the phases' times.
nlohmann::json unpack_archive(BlobReader& in, const std::string& dir, const std::string& root_image,
                              const ProgressFn& progress, const std::string& name = "archive",
                              UnpackStats* stats = nullptr, Durability durability = Durability::durable);

/// Makes the snapshot directory `dir` an unpack_archive with Durability::deferred
/// wrote durable: fsync of every regular file in it, then of `dir` and its parent
/// (the entry naming it). Returns the wall ms it took. Throws SysError naming the file.
double make_durable(const std::string& dir);

}  // namespace nanovm::daemon::archive
