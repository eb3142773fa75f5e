// The daemon's store: the one place that persists (SQLite in WAL mode at
// <state>/store.db). Sandboxes, snapshots, and the directories that hold their
// files with the references between them:
//
//   dirs      one row per directory the daemon made: a sandbox's VM directory, a
//             snapshot's directory, a fork base. `released` once its owner (the
//             sandbox or snapshot) is deleted; `removing` while it is being removed.
//   dir_refs  (from_dir, to_path): a file of from_dir names to_path, a file outside
//             it (a layer's parent: another snapshot's layer, a fork base's layer,
//             the root image).
//
// A released directory is removed once no directory that is not being removed
// holds a reference into it (collect()): deleting sandboxes and snapshots in any
// order never breaks a kept snapshot's chain, and frees the files once nothing
// uses them. Schema changes are ordered migrations (schema_version table).
// Thread-safe (one connection behind a mutex). Throws store::SqliteError
// (disk_full() when the file system is full).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/daemon/store/sqlite.hpp"

namespace nanovm::daemon::store {

/// The schema version this build writes (and the migrations up to it).
int latest_schema_version();

struct SandboxRecord {
    std::string id;     ///< UUID
    std::string vm_id;  ///< the VMM's 12-hex id ("" before its VMM started)
    std::string state;  ///< creating, running, paused, sleeping, deleting, error
    std::string error;  ///< why, in state error
    int64_t cpus = 2;
    int64_t memory_mb = 1024;
    bool disable_internet = false;
    std::string image;        ///< image name ("" for a restore or fork)
    std::string snapshot_id;  ///< restored from ("" if none)
    std::string parent_id;    ///< forked from ("" if none)
    std::map<std::string, std::string> labels;
    std::optional<int64_t> timeout_s;
    std::optional<int64_t> end_at_ms;  ///< wall clock, ms since the epoch
    int64_t created_ms = 0;
    int64_t updated_ms = 0;
    int64_t autosleep_s = 0;            ///< idle this long: put to sleep (0: never)
    std::string on_timeout = "delete";  ///< at end_at: "delete" or "archive"
    std::string image_digest;  ///< SHA-256 of its pinned root image ("" before pinning)
    /// The template it was restored from: a named one or an implicit
    /// auto:IMAGE:CPUSxMiB ("" for a boot, a snapshot's restore or a fork child).
    std::string template_name;

    bool operator==(const SandboxRecord&) const = default;
};

struct SnapshotRecord {
    std::string id;          ///< UUID
    std::string sandbox_id;  ///< taken from (the sandbox may be gone)
    std::string dir;         ///< its directory
    std::string state;       ///< saving, ready, error
    bool durable = false;
    std::string error;
    int64_t cpus = 0;
    int64_t memory_mb = 0;
    bool disable_internet = false;
    std::string image;
    int64_t created_ms = 0;
    std::string image_digest;  ///< SHA-256 of the pinned root image its disks read

    bool operator==(const SnapshotRecord&) const = default;
};

/// A template (api/daemon/template/template_manager.hpp): an (image, shape) booted
/// once (with setup lines run) and snapshotted, or a snapshot taken as it is.
/// Persisted by template_store.cpp (table templates, migration 2).
struct TemplateRecord {
    std::string name;       ///< named: [a-z0-9][a-z0-9._-]*; implicit: "auto:<image>:<cpus>x<memory_mb>"
    bool implicit = false;  ///< made by a create of a new (image, shape); collected LRU
    std::string state;      ///< building, ready, failed
    std::string error;      ///< why, when failed
    std::string image;      ///< image name ("" for one from a snapshot of a restore)
    std::string image_digest;  ///< the pinned root image its snapshot runs over (its build pins it, or its snapshot's); "" for one built before pins
    int64_t cpus = 0;
    int64_t memory_mb = 0;
    std::string snapshot_id;  ///< made from this snapshot ("" if booted)
    std::vector<std::string> setup;  ///< shell lines run once before the checkpoint
    std::string dir;          ///< its own directory (the store's dir, kind "template")
    std::string restore_dir;  ///< the snapshot a create restores (dir/snapshot, or the snapshot's dir)
    int64_t created_ms = 0;
    int64_t used_ms = 0;      ///< last create from it (LRU)
    int64_t uses = 0;         ///< creates from it

    bool operator==(const TemplateRecord&) const = default;
};

/// A sandbox's archive (sandbox/manager_archive.cpp): a blob in the archive store.
struct ArchiveRecord {
    std::string sandbox_id;
    std::string blob;          ///< its name in the archive store (archive/blob_store.hpp)
    std::string state;         ///< "writing" (not committed yet), "ready"
    std::string image_digest;  ///< the pinned root image it runs over
    int64_t raw_bytes = 0;         ///< payload before compression
    int64_t compressed_bytes = 0;  ///< the blob's size
    int64_t created_ms = 0;

    bool operator==(const ArchiveRecord&) const = default;
};

/// A root image file as last seen (the digest cache of store/image_pins.hpp).
struct ImageSource {
    std::string path;  ///< canonical path
    int64_t dev = 0, ino = 0, bytes = 0, mtime_ns = 0;
};

/// A session: a shell in a sandbox's guest (its agent's session named by the id).
struct SessionRecord {
    std::string id;          ///< UUID, also the agent's session name
    std::string sandbox_id;
    int64_t created_ms = 0;
    bool operator==(const SessionRecord&) const = default;
};

/// Which sandboxes list() returns: a state, a label, and a page after an id.
struct SandboxFilter {
    std::string state;              ///< "" : any
    std::map<std::string, std::string> labels;  ///< every one must match
    std::string after;              ///< ids greater than this ("" : from the start)
    int64_t limit = 100;
};

/// A directory the store knows.
struct DirRecord {
    std::string path;
    std::string kind;   ///< "vm", "snapshot", "fork"
    std::string owner;  ///< the sandbox or snapshot id ("" for a fork base)
    bool released = false;
    bool removing = false;
};

/// How a write reaches the disk.
enum class Sync {
    /// On disk before the call returns (synchronous=FULL: the WAL is fsynced at the
    /// commit): survives a power loss. Every record that says something is done.
    full,
    /// Atomic and kept when the daemon dies (kill -9), but on disk only with the next
    /// full write or checkpoint (synchronous=NORMAL in WAL mode, sqlite.org/pragma.html
    /// #pragma_synchronous): a power loss may take it back. Only for what a host restart
    /// makes moot: the state flips of a live VMM (running, paused, sleeping), since
    /// with the power every VMM ends and the restarted daemon finds them dead whatever
    /// the record said. Saves an fsync per pause and resume (~2 ms in the test host).
    /// Also for a write another full one follows before anyone is answered (a create's
    /// steps): WAL frames reach the disk in order, so the last full commit makes the
    /// earlier relaxed ones durable with it.
    relaxed,
};

class Store {
public:
    /// Opens (creating) the store at `path` and migrates it to the latest schema.
    /// Throws SqliteError, or std::runtime_error for a store newer than this build.
    explicit Store(const std::string& path);

    int schema_version();

    // Sandboxes.
    /// Inserts or replaces the record.
    void put_sandbox(const SandboxRecord& record, Sync sync = Sync::full);
    /// Sets only the state, error and updated_ms of sandbox `id` (one UPDATE of its
    /// row, not the whole record: the flips of a live VMM, pause, resume, sleep and
    /// wake, whose other fields the caller holds unchanged under the sandbox's lock).
    /// False if there is no such sandbox.
    bool set_sandbox_state(const std::string& id, const std::string& state, const std::string& error,
                           int64_t updated_ms, Sync sync);
    std::optional<SandboxRecord> sandbox(const std::string& id);
    std::vector<SandboxRecord> sandboxes(const SandboxFilter& filter);
    std::vector<SandboxRecord> all_sandboxes();
    void delete_sandbox(const std::string& id);
    std::map<std::string, int64_t> count_by_state();

    // Snapshots.
    void put_snapshot(const SnapshotRecord& record);
    std::optional<SnapshotRecord> snapshot(const std::string& id);
    /// Snapshots ordered by id, after `after`, at most `limit`; of one sandbox if
    /// `sandbox_id` is set.
    std::vector<SnapshotRecord> snapshots(const std::string& sandbox_id, const std::string& after, int64_t limit);
    void delete_snapshot(const std::string& id);

    // Templates (template_store.cpp).
    void put_template(const TemplateRecord& record, Sync sync = Sync::full);  ///< insert or replace
    std::optional<TemplateRecord> template_record(const std::string& name);
    std::vector<TemplateRecord> templates();  ///< by name
    void delete_template(const std::string& name);
    /// Records that sandbox `sandbox_id` was made from template `name`.
    void add_template_sandbox(const std::string& name, const std::string& sandbox_id, Sync sync = Sync::full);
    /// The sandboxes made from template `name` that still exist (by id); forgets the
    /// ones that are gone.
    std::vector<std::string> template_sandboxes(const std::string& name);

    // Sessions (store_sessions.cpp; deleting the sandbox deletes its sessions).
    void put_session(const SessionRecord& record);
    std::optional<SessionRecord> session(const std::string& id);
    /// A sandbox's sessions, oldest first.
    std::vector<SessionRecord> sessions(const std::string& sandbox_id);
    void delete_session(const std::string& id);

    // Directories and references.
    /// Records a directory (kept until released and unreferenced).
    void add_dir(const std::string& path, const std::string& kind, const std::string& owner, Sync sync = Sync::full);
    /// Records that files of `from_dir` name `to_paths` (absolute; duplicates ignored).
    void add_refs(const std::string& from_dir, const std::vector<std::string>& to_paths, Sync sync = Sync::full);
    /// The owner of `path` is gone: remove it once nothing references it.
    void release_dir(const std::string& path);
    /// Marks every released directory that no kept directory references as
    /// removing (transitively: a directory being removed holds nothing) and returns
    /// them. The caller removes them from disk, then calls forget_dir().
    std::vector<std::string> collect();
    /// Directories marked removing (a removal the daemon did not finish).
    std::vector<std::string> removing_dirs();
    /// Drops a removed directory and its references.
    void forget_dir(const std::string& path);
    std::vector<DirRecord> dirs();
    /// The references of `from_dir`.
    std::vector<std::string> refs(const std::string& from_dir);

    // Archives (store/archives.cpp).
    void put_archive(const ArchiveRecord& record);  ///< insert or replace
    std::optional<ArchiveRecord> archive(const std::string& sandbox_id);
    std::vector<ArchiveRecord> archives();
    void delete_archive(const std::string& sandbox_id);

    // Pinned images (store/image_pins.cpp).
    /// The digest recorded for `source` if the file is still the one seen then
    /// (same path, device, inode, size and mtime).
    /// Every image digest a sandbox, snapshot, template or archive record names
    /// (image_pins.cpp: what ImagePins::collect keeps).
    std::vector<std::string> image_digests_in_use();
    std::optional<std::string> image_source_digest(const ImageSource& source);
    void put_image_source(const ImageSource& source, const std::string& digest);

private:
    void migrate();
    /// With mutex_ held: the connection commits with `sync` until this ends (then
    /// synchronous=FULL again).
    class SyncScope {
    public:
        SyncScope(Database& db, Sync sync);
        ~SyncScope();
        SyncScope(const SyncScope&) = delete;
        SyncScope& operator=(const SyncScope&) = delete;

    private:
        Database& db_;
        bool relaxed_;
    };
    std::mutex mutex_;
    Database db_;
};

/// Wall clock now, ms since the epoch.
int64_t now_ms();

}  // namespace nanovm::daemon::store
