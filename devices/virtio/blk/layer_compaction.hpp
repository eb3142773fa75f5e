// Compaction of a layer chain (issue 5, "Layer chains are compacted"): every disk
// snapshot freezes the top layer into a new file, so a chain grows by one layer per
// snapshot (and LayeredDisk refuses to freeze once it is kMaxDepth deep). Compaction
// merges a run of frozen layers that only this VM uses into one file, in three steps:
//
//   1. plan (LayeredDisk::plan_compaction, device thread): the longest run of
//      consecutive frozen layers directly below the top whose files are in the VM's
//      own directory; layers elsewhere (a snapshot directory's, a fork base's: shared
//      with other VMs, listed with CRCs in their manifests) are never rewritten. The
//      plan holds dup'd read-only fds of the run, so it stays valid whatever happens
//      to the names.
//   2. write (write_merged_layer, any thread, no lock: frozen files never change): a
//      new frozen layer at a temporary path holding, for every block present in any
//      run layer, the block of the highest run layer holding it. It carries the
//      TOPMOST run layer's id and the BOTTOM run layer's parent reference: seen
//      through the chain, its content is exactly the topmost run layer's, so every
//      child naming that id stays valid.
//   3. adopt (LayeredDisk::adopt_compaction, device thread, no I/O in flight):
//      rename(temp, topmost run layer's path) -- atomic: before it the old chain is
//      valid on disk, after it the merged file is -- then the run's levels become one
//      and the other run files are unlinked. A snapshot directory holds its own hard
//      links to those inodes, so snapshots taken earlier keep their old chain.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "devices/virtio/blk/disk_layer.hpp"
#include "vmm/fd.hpp"

namespace nanovm::virtio::blk {

/// A run of frozen layers to merge (LayeredDisk::plan_compaction). Move-only: it
/// owns read-only fds of the run's files.
struct CompactionPlan {
    uint64_t disk_bytes = 0;          ///< the chain's disk size, bytes
    /// Index of the run's bottom layer in its chain, counted from the base (0 = the
    /// raw or zero base, 1 = the lowest layer file).
    size_t first_level = 0;
    std::vector<std::string> paths;   ///< the run's files, bottom to top (>= 2)
    std::vector<Fd> fds;              ///< O_RDONLY fds of `paths` (dup'd), same order
    ParentRef bottom_parent;          ///< the bottom run layer's parent, as stored
    LayerId top_id{};                 ///< the topmost run layer's id
    std::string top_path;             ///< the topmost run layer's path (= paths.back())

    /// Layers in the run.
    size_t layers() const noexcept { return paths.size(); }
};

/// What write_merged_layer wrote.
struct MergedLayerStats {
    uint64_t data_bytes = 0;  ///< bytes of block data copied (present blocks * 4096)
    uint64_t copies = 0;      ///< runs of consecutive blocks copied (one copy each)
};

/// The temporary path of `plan`'s merged layer: "<topmost run layer's path>.compact"
/// (in the run's directory, as adopt needs; not named *.layer).
inline std::string compaction_temp_path(const CompactionPlan& plan) { return plan.top_path + ".compact"; }

/// Step 2: writes the merged layer of `plan` to `temp_path` (a file name in the
/// run's directory, so that adopt can rename it into place; an existing file there,
/// left by a crash, is replaced): same disk size, the topmost run layer's id, the
/// bottom run layer's parent reference, the OR of the run's bitmaps, and each present
/// block's data from the highest run layer holding it (sparse: only present blocks
/// are written, consecutive blocks of one layer in one copy_file_range, or
/// pread/pwrite where the kernel cannot copy). Marked frozen, both CRCs set,
/// fsync'd (the file; adopt syncs the directory). Any thread; reads only the plan's
/// fds. Re-checks the run's headers and bitmaps (disk size, frozen, each layer's
/// parent id = the id below it, bitmap CRCs). Throws Error (a run file does not
/// fit: naming it) or SysError (open, read, copy, write, fsync: naming the file);
/// on failure `temp_path` does not exist.
MergedLayerStats write_merged_layer(const CompactionPlan& plan, const std::string& temp_path);

}  // namespace nanovm::virtio::blk
