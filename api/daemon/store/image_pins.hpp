// Pinned root images: the daemon keeps every root image it boots a sandbox from
// under <state>/images/<sha256 hex of its bytes>, and starts VMMs over that file,
// so every snapshot's vm.state, every archive and every template (its build boots
// over the pin and records the digest; the sandboxes made from it record it too)
// names a file that never changes. The cache's images (<cache>/rootfs/<name> ->
// <name>-<key>/disk.ext4) are repointed by tools/rootfs/build when guest-init
// changes, and only the last 3 are kept: a restore over the new one would run a
// guest's page cache over a different disk.
//
// A pin is a hard link to the source file when it is on the state directory's file
// system (tools/rootfs/build writes new files and renames directories, never
// rewrites an image in place), else a reflink or sparse copy (vm::copy_sparse),
// made as images/.<random>.partial, hashed (SHA-256 over the whole file, holes
// as zeros; a copy is hashed in the same read that copies it), fsync'd, renamed to
// its digest and the directory fsync'd. Two sources with the same bytes share one
// pin. The digest of a source is cached in the store by (path, device, inode, size,
// mtime), and beside the image as <image>.sha256 ("<digest> <bytes> <mtime ns>",
// written when the image's directory is writable) by size and mtime: a daemon on
// another state directory, or in the test host where the cache is read-only over 9p,
// then copies without hashing (in the test host a first create took 47.6 s when it
// hashed and copied the 495 MiB image).
//
// Collection: a pin that no sandbox, snapshot, template or archive record names by
// its digest (Store::image_digests_in_use) is removed by collect(), except one held:
// a create, template build or archive pins first and stores the record naming the
// digest after, so pin() holds the digest until the caller says recorded() (or the
// grace period passes: a caller that failed before its record). One ImagePins serves
// the whole daemon, so every hold is known. `.partial` files left by a daemon killed
// while pinning go too. A pin that is the present content of a file an image name
// resolves to now (the `current_sources` given at construction: the daemon's
// <cache>/rootfs/<name>/disk.ext4, symlinks followed, unchanged since it was pinned)
// stays without a record: the next create of that image would pin the same bytes
// again, which without a hard link (the cache on another file system) is a copy of
// the whole image (472 MiB, ~11 s in the test host, on every create after the last
// sandbox went). It goes once the name points elsewhere or the file changes.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "api/daemon/store/store.hpp"

namespace nanovm::daemon::store {

/// One pinned image.
struct ImagePin {
    std::string digest;  ///< 64 lower-case hex digits
    std::string path;    ///< <images_dir>/<digest>
};

class ImagePins {
public:
    /// The files the image names resolve to now (paths; symlinks are followed, missing
    /// ones skipped).
    using CurrentSources = std::function<std::vector<std::string>()>;
    /// Pins go to `images_dir` (created if missing); `current_sources` (may be empty)
    /// names the files whose pins collect() keeps while they are unchanged.
    ImagePins(Store& store, std::string images_dir, CurrentSources current_sources = {});

    /// Pins the root image file `source` (a symlink is followed: the file it names
    /// now is pinned). Thread-safe. Throws Error (not a regular file), SysError
    /// (open, link, copy, read, fsync, rename; ENOSPC).
    ImagePin pin(const std::string& source);
    /// The record naming a digest pin() returned is stored: that hold ends.
    void recorded(const std::string& digest);
    /// Removes every pin whose digest no record of the store names, except those
    /// held (pin() returned them less than `grace` ago, recorded() not called yet)
    /// and those that are the unchanged content of a current source, and leftover
    /// `.partial` files. Returns
    /// the digests (and `.partial` names) removed; a file that cannot be removed is
    /// left (tried again next time). Never throws: a failure (the store's query) is
    /// logged and nothing is removed. Thread-safe (waits for a pin() in progress).
    std::vector<std::string> collect(std::chrono::milliseconds grace = std::chrono::minutes(10)) noexcept;
    /// The pinned file of `digest`, or "" if there is none (an unknown or malformed digest).
    std::string path_of(const std::string& digest) const;
    const std::string& dir() const noexcept { return dir_; }

private:
    /// Digests of the current sources whose content the store knows and that are
    /// unchanged since (stat: device, inode, size, mtime). Never throws.
    std::vector<std::string> current_digests() noexcept;

    Store& store_;
    std::string dir_;
    CurrentSources current_sources_;
    std::mutex mutex_;
    void hold(const std::string& digest);  ///< under mutex_
    struct Hold {
        int count = 0;                               ///< pin() calls not yet recorded()
        std::chrono::steady_clock::time_point last;  ///< the last pin()
    };
    std::map<std::string, Hold> holds_;  ///< by digest
};

/// SHA-256 of the whole file `path` (holes read as zeros, not read), as 64
/// lower-case hex digits. Throws SysError.
std::string sha256_file(const std::string& path);

/// True for 64 lower-case hex digits.
bool is_digest(const std::string& text) noexcept;

}  // namespace nanovm::daemon::store
