// What ties the daemon's directories together on disk: a disk layer file names its
// parent (devices/virtio/blk/disk_layer.hpp: a plain name is a file of its own
// directory, anything else an absolute path). A snapshot of a restored or forked
// sandbox holds layers whose parents live in another snapshot or a fork base; those
// are the references the store counts (store.hpp).
#pragma once

#include <string>
#include <vector>

#include "api/daemon/store/store.hpp"

namespace nanovm::daemon::store {

/// The files outside `dir` that the layer files in `dir` name as parents (their
/// chains followed through `dir`'s own files), and the memory layers its manifest's
/// chain lines name (snapshot/manifest.hpp), sorted, each once. Files that are not
/// layers are skipped; an unreadable layer header is skipped too (it names nothing
/// we could keep). Never throws for a missing `dir` (empty result).
std::vector<std::string> external_files(const std::string& dir);

/// Records `dir` (kind "vm", "snapshot" or "fork") with its external files as
/// references, in one go; `sync` as Store::add_dir (relaxed: a full write must follow
/// before anyone is answered).
void track_dir(Store& store, const std::string& dir, const std::string& kind, const std::string& owner,
               Sync sync = Sync::full);

/// Marks `dir` released, then removes from disk every directory the store's
/// collect() gives (and forgets it). Returns the directories removed.
std::vector<std::string> release_and_collect(Store& store, const std::string& dir);

/// Finishes removals a previous daemon began (directories marked removing), then
/// collects. Returns the directories removed.
std::vector<std::string> finish_removals(Store& store);

}  // namespace nanovm::daemon::store
