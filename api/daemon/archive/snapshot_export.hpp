// A snapshot as one portable, self-contained file, and back: the body of
// GET /v1/snapshots/{id}/export and of POST /v1/snapshots/import (docs/api.md).
//
// The file is the archive format (archive_format.hpp) as pack_snapshot writes it:
// the snapshot's whole chain flattened (vm.state; the guest RAM read through its
// memory layer chain, every page's CRC checked on the way; each writable disk read
// through its layer chain down to the raw base), zero pages, zero blocks and holes
// left out (sparse on both sides: unpacked disks are sparse files again), zstd
// compressed. The meta's info says what it is:
//
//   {"format": "nanovm-snapshot", "format_version": 1, "snapshot_id", "created_ms",
//    "cpus", "memory_mb", "disable_internet", "image", "image_digest", "image_bytes",
//    "disks": [{"index", "image"}...]}
//
// The read-only root image is not in the file (495 MiB for `default`, the same on
// every host): it is named by the SHA-256 of its bytes (store/image_pins.hpp), and
// the importing host must have a file with those bytes.
//
// import_snapshot checks everything before a snapshot exists: the header's and the
// meta's CRC-32C, the meta against the format (names, sizes, bounds), every record
// against its image, the zstd frame's XXH64 over all records, the end record's
// count and bytes (the manifest of the records), nothing after it; then the info,
// the root image, and the unpacked vm.state: its shape is the info's, and it names
// no host file but the root image and its own disk files (an import is untrusted:
// a vm.state with a read-only disk at /etc/shadow, a writable disk with no layer in
// the file, or extra user disks is refused). Any failure removes what was unpacked.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "api/daemon/archive/sandbox_archive.hpp"

namespace nanovm::daemon::archive {

inline constexpr const char* kSnapshotFormat = "nanovm-snapshot";
inline constexpr int kSnapshotFormatVersion = 1;

/// What an export says of its snapshot (the meta's info without "disks").
struct SnapshotExportInfo {
    std::string snapshot_id;  ///< its id where it was exported
    int64_t created_ms = 0;   ///< when it was taken, ms since the epoch
    int64_t cpus = 0;         ///< 1-4
    int64_t memory_mb = 0;    ///< 128-8192
    bool disable_internet = false;
    std::string image;         ///< the root image's name where it was taken ("default", "tiny"; may be "")
    std::string image_digest;  ///< SHA-256 of the root image's bytes, 64 lower-case hex digits
    uint64_t image_bytes = 0;  ///< the root image's size

    nlohmann::json to_json() const;
};

/// The checked info of an export's meta: its format and version, the shape in range
/// (cpus 1-4, memory_mb 128-8192), a digest of 64 lower-case hex digits. Throws
/// ArchiveError naming `name` and the field.
SnapshotExportInfo parse_export_info(const nlohmann::json& info, const std::string& name);

/// Writes the export of the durable snapshot directory `dir` into `out` (not
/// committed). Throws as pack_snapshot.
PackStats export_snapshot(const std::string& dir, const SnapshotExportInfo& info, BlobWriter& out,
                          const ProgressFn& progress, ZstdOptions zstd = {});

/// Finds the root image of an import: the path of a file whose bytes have the
/// info's digest. Throws (an error the caller chooses) when there is none.
using RootImageFn = std::function<std::string(const SnapshotExportInfo&)>;

/// Imports the export file `file` into the snapshot directory `dir` (which must not
/// exist; its parent must): reads and checks the info, asks `root` for the root
/// image, unpacks (durably: the manifest last), and checks the unpacked vm.state.
/// Returns the info. On any failure `dir` is removed. Throws ArchiveError (the file
/// is malformed, corrupt, truncated, or not a snapshot export; its vm.state names
/// host files), SysError (ENOSPC...), what `root` and `progress` throw.
SnapshotExportInfo import_snapshot(const std::string& file, const std::string& dir, const RootImageFn& root,
                                   const ProgressFn& progress);

}  // namespace nanovm::daemon::archive
