// Every sandbox's 16 GiB sparse writable disk (DESIGN.md "the product contract"):
// an empty ext4 file system that the guest mounts as the upper layer of its overlay
// root (guest-init: nanovm.overlay=/dev/vdb).
//
// Formatting 16 GiB with mkfs.ext4 takes ~0.2 s even with lazy inode-table and
// journal init; copying an already formatted file, sparse, takes a few ms (only its
// ~4 MiB of metadata is data). So each machine formats one template once, and each
// VM gets a sparse copy of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nanovm::vm {

/// The size of the scratch disk the guest sees.
inline constexpr uint64_t kScratchDiskBytes = uint64_t{16} << 30;

/// The template's file name: bump the version when the mkfs options change.
inline constexpr const char* kScratchTemplateName = "scratch-ext4-16g-v1.img";

/// Makes a new sparse file `path` of `bytes` and formats it ext4 with mkfs.ext4
/// (-m 0, lazy inode table and journal init, no discard), found on $PATH or in
/// /usr/sbin, /sbin. Throws Error: "mkfs.ext4 not found (install e2fsprogs)", or
/// "mkfs.ext4 PATH failed (status N): <its last line>".
void make_ext4_image(const std::string& path, uint64_t bytes);

/// Copies `from` to a new file `to` (replaced if present) keeping holes: the data
/// extents (SEEK_DATA/SEEK_HOLE) are copied with copy_file_range (read + write when
/// it cannot cross the two file systems), then the size is set. A reflink (FICLONE)
/// when the file system offers one. Throws SysError naming
/// the call and path.
void copy_sparse(const std::string& from, const std::string& to);

/// The scratch template's path: an existing one in the first of `dirs` that has it,
/// else a new one made (atomically: temp file + rename) in the first of `dirs` where
/// that works (the cache may be read-only, as in the test host). Throws Error when
/// none works (with the last failure).
std::string ensure_scratch_template(const std::vector<std::string>& dirs);

/// The default places for the template: <cache_dir()>/scratch, then <run_dir()>.
std::vector<std::string> default_template_dirs();

/// Creates the scratch disk of one VM at `path`: a sparse copy of the template.
void create_scratch_disk(const std::string& path);

}  // namespace nanovm::vm
