// The manifest of a snapshot directory (DESIGN.md "snapshot/", issue 5
// "Durability"): the list of every part (vm.state, memory layers, later disk
// layers) with its size and CRC-32C, written LAST and atomically (manifest.tmp,
// fsync, rename, fsync of the directory). A directory is a snapshot only if it has
// a valid manifest; a snapshot is durable exactly when its manifest exists, since
// every part was fsync'd before the manifest was written.
//
// Format (text, one record a line, '\n' endings, at most kMaxManifestBytes):
//   nanovm-manifest 1                                        (2 when there are chain lines)
//   part <name> <bytes> <crc32c as 8 lower-case hex digits>     (1..kMaxParts lines)
//   chain <path> <layer checksum, 8 hex digits>               (0..kMaxChainLayers lines; version 2)
//   end <crc32c of every byte before this line, 8 hex digits>
// "chain" lists the memory layers OUTSIDE this directory that its memory.layer
// depends on, nearest first: the layer's parent, the parent's parent, ... (a
// snapshot of a VM restored from another snapshot is a diff over that snapshot's
// layer: snapshot/snapshot_dir.hpp). <path> is relative to this directory
// ("../s1/memory.layer"), bytes outside [A-Za-z0-9._/+,=@~-] written as %XX; the
// checksum is that layer's header CRC (memory_layer.hpp LayerFile::checksum), which
// its child recorded. A store counts references by it: every snapshot directory
// named by a chain line must be kept while this one is. A fork base lists the chain
// whose pages fill the holes of the frozen RAM its children map. Layers are never
// rewritten: a merge (once a chain reaches kMaxLayerChain) writes a full layer into
// the new snapshot, whose chain is then empty.
// <name> is a plain file name in the snapshot directory ([A-Za-z0-9._-], 1..64
// bytes, not "." or ".."); <bytes> decimal. The checksum is CRC-32C (Castagnoli,
// snapshot/crc32c.hpp) of the whole part file, holes read as zeros.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nanovm::snapshot {

inline constexpr const char* kManifestFileName = "manifest";
inline constexpr uint32_t kManifestVersion = 2;
inline constexpr size_t kMaxParts = 64;
inline constexpr size_t kMaxChainLayers = 64;
inline constexpr size_t kMaxManifestBytes = 64 * 1024;

/// One part of a snapshot: a file of the snapshot directory.
struct ManifestPart {
    std::string name;    ///< file name inside the snapshot directory
    uint64_t bytes = 0;  ///< file size in bytes
    uint32_t crc32c = 0; ///< CRC-32C of the whole file
    bool operator==(const ManifestPart&) const = default;
};

/// One memory layer outside the snapshot directory that its memory depends on.
struct ChainLayer {
    std::string path;      ///< relative to the snapshot directory, e.g. "../s1/memory.layer" (1..4096 bytes)
    uint32_t checksum = 0; ///< the layer's header CRC-32C (LayerFile::checksum)
    bool operator==(const ChainLayer&) const = default;
};

/// The parsed manifest.
struct Manifest {
    std::vector<ManifestPart> parts;
    /// The memory layers outside the directory that it depends on, nearest first
    /// (empty: self-contained). See the format above.
    std::vector<ChainLayer> chain;
    /// The entry named `name`, or nullptr.
    const ManifestPart* find(std::string_view name) const noexcept;
};

/// The manifest's text (format above): version 1 without chain lines, else 2.
/// Throws Error for a bad part name, too many parts or chain layers, an empty or
/// absolute chain path.
std::string encode_manifest(const Manifest& manifest);
/// Parses and checks manifest text (`where` names it in errors). Throws
/// SnapshotError("<where>: line N: ...") for anything malformed, truncated, a
/// checksum mismatch, duplicate or unsafe names, or a newer version.
Manifest decode_manifest(std::string_view text, const std::string& where);

/// Size and CRC-32C of file `dir`/`name` (reads it whole). Throws SysError.
ManifestPart describe_part(const std::string& dir, const std::string& name);

/// Describes `names` and writes `dir`/manifest atomically (tmp, fsync, rename,
/// fsync dir; without `sync` the same steps minus both fsyncs: complete, not
/// durable). For a durable manifest the parts must already be fsync'd. Honours the test stall points
/// "manifest-tmp" (tmp written and fsync'd, not yet renamed). Returns what it wrote.
/// A part whose size and CRC-32C the writer knows without reading the file.
struct DescribedPart {
    ManifestPart part;
    /// The CRC was computed over the very bytes written to the file (as good as
    /// reading them back): recorded in parts.verified. False for one derived
    /// otherwise (LayerBuilder::file_crc32c, from the pages' given CRCs): checked
    /// in full by the first check_parts_cached.
    bool from_bytes = false;
};

/// `chain`: the manifest's chain lines (see the format). `described`: parts among
/// `names` taken as given instead of read.
Manifest write_manifest(const std::string& dir, const std::vector<std::string>& names, bool sync = true,
                        const std::vector<ChainLayer>& chain = {}, const std::vector<DescribedPart>& described = {});

/// Removes `dir`/manifest if present and fsyncs `dir`, so that a snapshot being
/// rewritten is never taken for the old one. Throws SysError.
void remove_manifest(const std::string& dir);

/// Reads `dir`/manifest. Throws SnapshotError "incomplete snapshot (no manifest):
/// <dir>" when it is missing, or naming the manifest when it is corrupt.
Manifest read_manifest(const std::string& dir);

/// How much of each part check_parts reads.
enum class PartCheck {
    full,   ///< size and CRC-32C of every part
    sizes,  ///< sizes only (memory layers carry their own per-page CRCs)
};

/// Checks every part listed in `manifest` against the files in `dir`: present, of
/// the recorded size, and (PartCheck::full) of the recorded CRC-32C. Throws
/// SnapshotError naming the part: "<dir>/<name>: part checksum mismatch ...".
void check_parts(const std::string& dir, const Manifest& manifest, PartCheck check);

/// The cache of parts found good: `dir`/parts.verified (not a part). One line per
/// part, "<name> <inode> <bytes> <mtime ns> <crc32c hex>": the file had those
/// inode, size and mtime when its CRC-32C was last computed and equalled the
/// manifest's (by write_manifest, which reads every part anyway, or by
/// check_parts_cached). Anything unreadable in it only means "check again".
inline constexpr const char* kVerifiedFileName = "parts.verified";

/// check_parts(PartCheck::full) for the parts `names` of `manifest` (all listed
/// there, else SnapshotError), except that a part whose file still has the inode,
/// size and mtime recorded in parts.verified with the manifest's CRC is not read
/// again: a restore (or N fork children) reads each part of a snapshot once, not
/// once each. Records what it verified. Throws SnapshotError naming a missing,
/// resized or corrupt part, SysError.
void check_parts_cached(const std::string& dir, const Manifest& manifest, const std::vector<std::string>& names);

/// True if part `name` of `manifest` is recorded in `dir`/parts.verified as checked
/// whole (its CRC-32C the manifest's) and the file still has the inode, size and
/// mtime recorded there: what check_parts_cached would skip. Reads no part data
/// (a stat and the small cache file); anything missing or unreadable is false.
/// A file swapped in (another inode) or rewritten (another mtime) is not.
bool part_verified_cached(const std::string& dir, const Manifest& manifest, const std::string& name) noexcept;

/// True if `dir` holds a valid manifest (does not read the parts).
bool is_durable(const std::string& dir);

}  // namespace nanovm::snapshot
