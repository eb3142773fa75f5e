// Where archives live: named blobs behind a small interface (put by streaming, get
// by streaming, remove), so that an object store can take the place of the local
// directory later. A blob is visible under its name only once it is complete and
// durable: a writer that is never committed leaves nothing a reader can see.
//
// DirBlobStore, the one implementation today: <dir>/<name>, written as
// <dir>/.<name>.partial, fsync'd, renamed into place, then the directory fsync'd
// (the durability rule of DESIGN.md: data, then the name, each on stable storage
// before the next step relies on it).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "vmm/error.hpp"

namespace nanovm::daemon::archive {

/// A blob name: 1-128 bytes of [A-Za-z0-9._-], not starting with '.'.
bool valid_blob_name(const std::string& name) noexcept;

/// No blob has the name (BlobStore::get).
class BlobNotFound : public Error {
public:
    using Error::Error;
};

/// One blob being written. Destroyed without commit(): the partial data is dropped.
class BlobWriter {
public:
    virtual ~BlobWriter() = default;
    /// Appends bytes. Throws SysError (ENOSPC...).
    virtual void write(std::span<const uint8_t> bytes) = 0;
    /// Makes the blob durable and visible under its name (replacing an older one).
    /// Throws SysError; the blob is then not visible.
    virtual void commit() = 0;
    /// Bytes written so far.
    virtual uint64_t bytes() const noexcept = 0;
};

/// One blob being read from the start.
class BlobReader {
public:
    virtual ~BlobReader() = default;
    /// Reads up to out.size() bytes; 0 at the end. Throws SysError.
    virtual size_t read(std::span<uint8_t> out) = 0;
    /// The blob's size in bytes.
    virtual uint64_t size() const noexcept = 0;
};

/// Named blobs. Thread-safe for distinct names.
class BlobStore {
public:
    virtual ~BlobStore() = default;
    /// A writer for `name` (Error for an invalid name; SysError).
    virtual std::unique_ptr<BlobWriter> put(const std::string& name) = 0;
    /// A reader of `name`. Throws BlobNotFound, SysError.
    virtual std::unique_ptr<BlobReader> get(const std::string& name) = 0;
    /// True if a committed blob has the name.
    virtual bool exists(const std::string& name) = 0;
    /// Removes `name` durably; no error when it does not exist. Throws SysError.
    virtual void remove(const std::string& name) = 0;
    /// Committed blob names, sorted.
    virtual std::vector<std::string> list() = 0;
};

/// Blobs as files of one local directory (created if missing, mode 0700).
class DirBlobStore : public BlobStore {
public:
    /// Throws SysError if `dir` cannot be made.
    explicit DirBlobStore(std::string dir);

    std::unique_ptr<BlobWriter> put(const std::string& name) override;
    std::unique_ptr<BlobReader> get(const std::string& name) override;
    bool exists(const std::string& name) override;
    void remove(const std::string& name) override;
    std::vector<std::string> list() override;

    /// Removes the partial files a writer cut short left (a crash mid-put); for
    /// daemon start, when no writer runs. Returns how many.
    size_t remove_partials();
    const std::string& dir() const noexcept { return dir_; }

private:
    std::string dir_;
};

/// A reader of the regular file `path` (not a store's blob: an uploaded file).
/// Throws SysError, Error (not a regular file).
std::unique_ptr<BlobReader> open_blob_file(const std::string& path);

/// fsync of directory `dir`. Throws SysError("fsync DIR").
void sync_dir(const std::string& dir);

}  // namespace nanovm::daemon::archive
