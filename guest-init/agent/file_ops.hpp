// The agent's file operations, synchronous and self-contained: stat, list, mkdir -p,
// remove (-r), chmod, and writing through a temp file that is renamed into place.
// Paths are used as given (the server makes them absolute first). Every failure
// comes back as a Failure (errno + what), never as a crash.
#pragma once

#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "guest-init/agent/failure.hpp"
#include "guest-init/protocol/messages.hpp"
#include "vmm/fd.hpp"

namespace nanovm::agent {

/// `path` made absolute against "/" (the agent's notion of the working directory).
std::string absolute_path(const std::string& path);

/// The protocol's view of a struct stat.
proto::FileInfo file_info_from_stat(const struct stat& st);

/// stat(2), or lstat(2) without `follow_symlinks`.
bool stat_path(const std::string& path, bool follow_symlinks, proto::FileInfo& out, Failure& failure);

/// mkdir(2) with `mode` (exactly: the umask is not applied). `parents`: missing
/// parents are made too and an existing directory is fine (mkdir -p); anything else
/// existing at `path` fails with EEXIST.
bool make_directory(const std::string& path, uint32_t mode, bool parents, Failure& failure);

/// unlink(2) for a non-directory, rmdir(2) for a directory; `recursive` empties a
/// directory first (symlinks are removed, never followed; at most 256 levels deep:
/// ELOOP beyond).
bool remove_path(const std::string& path, bool recursive, Failure& failure);

/// chmod(2).
bool change_mode(const std::string& path, uint32_t mode, Failure& failure);

/// Lists a directory in batches (readdir order, "." and ".." left out, each entry
/// lstat'ed; entries that vanish meanwhile are skipped).
class DirectoryLister {
public:
    DirectoryLister() = default;
    DirectoryLister(const DirectoryLister&) = delete;
    DirectoryLister& operator=(const DirectoryLister&) = delete;
    ~DirectoryLister();

    bool open(const std::string& path, Failure& failure);
    /// Appends entries to `out` until their encoded size would pass `max_bytes`
    /// (at least one entry if any is left). Returns false on a read error.
    bool next_batch(proto::DirEntries& out, size_t max_bytes, Failure& failure);
    /// True once every entry has been returned.
    bool done() const { return done_; }

private:
    DIR* dir_ = nullptr;
    std::string path_;
    bool done_ = false;
    proto::DirEntry pending_;  // read but not yet fitting in the last batch
    bool has_pending_ = false;
};

/// Writes a file as `<dir>/.<name>.nanovm-XXXXXX` and renames it over `path` on
/// commit(); destroyed before commit, it removes the temp file.
class TempFileWriter {
public:
    TempFileWriter() = default;
    TempFileWriter(const TempFileWriter&) = delete;
    TempFileWriter& operator=(const TempFileWriter&) = delete;
    ~TempFileWriter() { abort(); }

    /// Creates the temp file with permission bits `mode`. Fails with EISDIR if `path`
    /// is a directory, ENOTDIR/ENOENT if its parent is not a directory / missing.
    bool open(const std::string& path, uint32_t mode, Failure& failure);
    /// Appends `data`.
    bool write(std::string_view data, Failure& failure);
    /// fsync (with `sync`), close, rename over the destination.
    bool commit(bool sync, Failure& failure);
    /// Removes the temp file (no-op after commit).
    void abort();
    /// Bytes written so far.
    uint64_t size() const { return size_; }

private:
    Fd fd_;
    std::string path_;
    std::string temp_path_;
    uint64_t size_ = 0;
};

}  // namespace nanovm::agent
