// The sandbox manager: the one owner of every sandbox's and snapshot's state. Every
// operation checks the transition table (transitions.hpp), records through the store
// (the only thing that persists), and reaches VMMs only through vm_driver.hpp.
// Requests come in already validated by the routes (typed, in range); what can only
// be known here (a state, a cap, a guest's answer) throws ApiError.
//
// Concurrency: state-changing operations on one sandbox are serialized by its own
// lock; execs and file calls run concurrently with each other and take that lock only
// to wake a sleeping sandbox. A watcher thread notices VMMs that died (state error,
// the reason from vmm.log), timeouts (end_at) and snapshots that became durable.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api/agent_client/agent_client.hpp"
#include "api/daemon/sandbox/autosleep.hpp"
#include "api/daemon/archive/blob_store.hpp"
#include "api/daemon/archive/snapshot_export.hpp"
#include "api/daemon/sandbox/transitions.hpp"
#include "api/daemon/sandbox/vm_driver.hpp"
#include "api/daemon/store/image_pins.hpp"
#include "api/daemon/store/store.hpp"

namespace nanovm::daemon {

/// Milliseconds from `from` to `to`: the parts of the daemon's log lines that say
/// where an operation's time went (create, sleep, wake).
inline double ms_between(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
    return std::chrono::duration<double, std::milli>(to - from).count();
}

class TemplateManager;
struct TemplateUse;

/// The manager's limits and places.
struct ManagerOptions {
    std::string state_dir;
    int64_t default_timeout_s = 0;  ///< 0: none
    uint32_t max_running = 16;      ///< sandboxes holding a VMM (creating, running, paused, sleeping)
    uint64_t max_memory_mb = 0;     ///< their memory_mb summed
    uint64_t max_file_bytes = 256u << 20;  ///< a file write at most (reads are streamed, any size)
    int64_t default_autosleep_s = 0;  ///< a sandbox created without autosleep_s gets this (0: never)
    IdlePolicy idle;                  ///< what autosleep counts as idle (autosleep.hpp)
};

/// POST /v1/sandboxes.
struct CreateRequest {
    std::string image = "default";  ///< a name (vm_driver image_path)
    std::string snapshot_id;        ///< set: restore this snapshot instead (its shape)
    std::string template_name;      ///< set: restore this named template (its shape; template_manager.hpp)
    std::optional<uint32_t> cpus;       ///< default 2; with snapshot_id must match the snapshot's
    std::optional<uint32_t> memory_mb;  ///< default 1024; likewise
    bool disable_internet = false;
    std::map<std::string, std::string> labels;
    std::optional<int64_t> timeout_s;  ///< nullopt: the daemon's default
    std::optional<int64_t> autosleep_s;  ///< nullopt: the daemon's default; 0: never
    std::string on_timeout = "delete";   ///< "delete" ("archive" is refused until archives exist)
};

/// PATCH /v1/sandboxes/{id}: only the fields that are set change.
struct PatchRequest {
    bool set_timeout = false;
    std::optional<int64_t> timeout_s;  ///< with set_timeout: nullopt = no timeout; else end_at = now + it
    /// Seconds of idleness before it sleeps (0: never); nullopt: unchanged. Idle time is
    /// counted as before (from the last call that needed the guest), not from the PATCH.
    std::optional<int64_t> autosleep_s;
    std::optional<std::map<std::string, std::string>> labels;
};

/// POST /v1/sandboxes/{id}/exec.
struct ExecRequest {
    agent::Command command;  ///< argv or shell, env, cwd, uid/gid, stdin, timeout
};

/// How an exec ended.
struct ExecOutcome {
    agent::ExecResult result;
    double duration_ms = 0;
    std::string start_error;  ///< the agent could not start it (ENOENT...): exit code 126/127
};

/// Streamed exec output: each returns false when the client is gone (the command is
/// then killed).
struct ExecSinks {
    std::function<bool(std::string_view)> on_stdout;
    std::function<bool(std::string_view)> on_stderr;
    /// Asked while the command writes nothing (every 100 ms): true once the client is
    /// gone (the command is then killed too). Unset: only the writes tell.
    std::function<bool()> client_gone;
};

/// POST /v1/sandboxes/{id}/sessions: the shell's start (it runs as root).
struct SessionRequest {
    std::string cwd;               ///< "" : "/"
    std::vector<std::string> env;  ///< "KEY=VALUE" over the agent's base environment
};

/// A background command (the agent's job; manager_commands.cpp).
struct CommandInfo {
    std::string id;  ///< the agent's job id, in decimal
    std::string sandbox_id;
    agent::JobInfo job;
    std::optional<int64_t> ended_ms;  ///< when the daemon saw it end (wall clock, ms)
};

/// A background command's output as it is read: the stream, the offset of the
/// chunk's first byte in it, the bytes. False: stop (the client is gone).
using CommandOutputSink = std::function<bool(agent::proto::JobStream, uint64_t, std::string_view)>;

/// POST /v1/sandboxes/{id}/snapshots.
struct SnapshotRequest {
    bool wait_durable = false;
    bool leave_paused = false;
};

/// One fork child: a sandbox or why it failed.
struct ForkChild {
    std::optional<store::SandboxRecord> sandbox;
    std::string error_code;
    std::string error;
};

/// An archive or unarchive that runs: its phase and bytes (the Sandbox's "progress").
/// Phases: archive "snapshot" (the VM paused and saved), "pack" (compressing RAM
/// and disks; bytes of them read), "stop"; unarchive "unpack" (archive bytes read),
/// "restore".
struct ArchiveProgress {
    std::string phase;
    uint64_t bytes_done = 0;
    uint64_t bytes_total = 0;
};

/// A snapshot export checked and ready to be written (manager_export.cpp).
struct SnapshotExport {
    store::SnapshotRecord snapshot;
    archive::SnapshotExportInfo info;
};

/// GET /v1/sandboxes/{id}/metrics: host-side figures only.
struct SandboxMetrics {
    std::string state;
    double cpu_time_ms = 0;     ///< the VMM process's user + system time
    int64_t vmm_rss_bytes = 0;  ///< the VMM process's resident set
    int64_t disk_bytes = 0;     ///< bytes allocated by the VM directory's files (disk layers, logs)
    bool vmm_running = false;
};

class SandboxManager {
public:
    /// `pins`: the daemon's one ImagePins (<state>/images), shared with the TemplateManager.
    SandboxManager(ManagerOptions options, store::Store& store, store::ImagePins& pins);
    ~SandboxManager();  ///< stops the watcher; VMMs keep running
    SandboxManager(const SandboxManager&) = delete;
    SandboxManager& operator=(const SandboxManager&) = delete;

    /// At start, before serving: finishes removals and deletes cut short, adopts
    /// every live VMM of a recorded sandbox, marks the others error (with the reason
    /// from vmm.log), stops VMMs no record names, releases or removes the fork bases
    /// of forks cut short, settles snapshots cut short, then starts the watcher.
    void recover_and_watch();
    /// Creates restore templates (template_manager.hpp) from here on: a create with
    /// "template", or with an image and shape (its implicit template); the templates'
    /// build VMs and standbys count against --max-memory. Set before serving.
    void set_templates(TemplateManager* templates);
    /// Guest memory the sandboxes that hold a VM commit, MiB (the store's records;
    /// takes no lock of this manager's: the template manager calls it under its own).
    int64_t sandbox_memory_mb();

    // Sandboxes.
    store::SandboxRecord create(const CreateRequest& request);
    store::SandboxRecord get(const std::string& id);
    std::vector<store::SandboxRecord> list(const store::SandboxFilter& filter);
    store::SandboxRecord patch(const std::string& id, const PatchRequest& request);
    void remove(const std::string& id);
    store::SandboxRecord pause(const std::string& id);
    store::SandboxRecord resume(const std::string& id);
    /// Sandboxes per state name, every state listed (0 included), for /metrics and health.
    std::map<std::string, int64_t> count_by_state();

    // Rest states (manager_rest.cpp).
    /// Stops the vCPUs until the next exec, file or session call (or resume) wakes
    /// the sandbox: state sleeping. Sleeping a sleeping one is a no-op.
    store::SandboxRecord sleep(const std::string& id);
    /// Boots the sandbox's guest cold over its kept writable disk (memory,
    /// processes and sessions are lost): stops its VMM if it runs, then rebooting
    /// until the agent answers, then running. From running, paused, sleeping or
    /// error (a crashed guest). A failed boot leaves it in error with the reason.
    store::SandboxRecord reboot(const std::string& id);
    /// While one of these lives, the sandbox counts as busy for autosleep: exec and
    /// file calls and session commands hold one while they run; a background command,
    /// which runs on after its call, is seen in the agent's job list (check_idle).
    /// Movable; ends the activity when destroyed.
    class Activity {
    public:
        Activity(SandboxManager* manager, std::string id);
        Activity(Activity&& other) noexcept;
        Activity& operator=(Activity&&) = delete;
        Activity(const Activity&) = delete;
        ~Activity();

    private:
        SandboxManager* manager_;
        std::string id_;
    };
    /// An Activity for sandbox `id` (not checked: a lower-case UUID of a sandbox).
    Activity hold_awake(const std::string& id) { return Activity(this, id); }

    // Commands and files (a sleeping sandbox is woken; a paused one is 409).
    /// Checks that the sandbox takes commands and file calls now, waking a sleeping
    /// one. Throws ApiError (sandbox_paused, wrong_state...).
    void get_usable(const std::string& id) { (void)use(id); }
    ExecOutcome exec(const std::string& id, const ExecRequest& request, const ExecSinks* sinks = nullptr);
    agent::proto::FileInfo stat_file(const std::string& id, const std::string& path);
    /// A guest file about to be read: its metadata, and the agent connection that
    /// asked for it, which the read then goes over (one connection for both).
    struct FileReader {
        agent::proto::FileInfo info;
        std::shared_ptr<agent::AgentClient> client;
    };
    /// Stats `path` for a read. Throws ApiError (path_not_found...).
    FileReader open_file(const std::string& id, const std::string& path);
    /// Streams the file `reader` was opened on into `sink` (false: stop). Returns the
    /// bytes sent.
    uint64_t read_file(const std::string& id, const std::string& path, FileReader& reader,
                       const std::function<bool(std::string_view)>& sink);
    /// Writes the file whole or not at all, making missing parent directories.
    uint64_t write_file(const std::string& id, const std::string& path, std::string_view data, uint32_t mode);
    std::vector<agent::proto::DirEntry> list_dir(const std::string& id, const std::string& path);
    void make_dir(const std::string& id, const std::string& path, bool parents);
    void remove_path(const std::string& id, const std::string& path, bool recursive);

    // Sessions (manager_sessions.cpp): shells whose cwd and variables carry over.
    store::SessionRecord create_session(const std::string& id, const SessionRequest& request);
    std::vector<store::SessionRecord> list_sessions(const std::string& id);
    /// Runs the shell text `line` in the session (timeout 0: none). Throws ApiError
    /// session_not_found, wrong_state (the session runs a command), as exec().
    ExecOutcome session_exec(const std::string& id, const std::string& session_id, const std::string& line,
                             std::chrono::seconds timeout, const ExecSinks* sinks = nullptr);
    void remove_session(const std::string& id, const std::string& session_id);

    // Background commands (manager_commands.cpp): the agent's jobs, which outlive
    // the client and the daemon. Throw ApiError command_not_found for an unknown id.
    CommandInfo start_command(const std::string& id, agent::Command command);
    std::vector<CommandInfo> list_commands(const std::string& id);
    CommandInfo get_command(const std::string& id, const std::string& command_id);
    /// Streams what the agent keeps of the output into `sink`, then (with `follow`)
    /// the live output until the command ends, or until `client_gone` (asked every
    /// 100 ms; the command runs on) says the reader left. Returns the command as it
    /// is then.
    CommandInfo command_output(const std::string& id, const std::string& command_id, bool follow,
                               const CommandOutputSink& sink, const std::function<bool()>& client_gone = {});
    /// Waits up to `timeout` for the end; returns the command either way.
    CommandInfo wait_command(const std::string& id, const std::string& command_id, std::chrono::milliseconds timeout);
    /// Feeds its stdin (then closes it with `eof`).
    void command_stdin(const std::string& id, const std::string& command_id, std::string_view data, bool eof);
    /// Sends `signal` to its process group (nothing if it ended); returns it after
    /// waiting up to 2 s for its end.
    CommandInfo kill_command(const std::string& id, const std::string& command_id, int signal);

    // Snapshots.
    store::SnapshotRecord snapshot(const std::string& sandbox_id, const SnapshotRequest& request);
    store::SnapshotRecord get_snapshot(const std::string& id);
    std::vector<store::SnapshotRecord> list_snapshots(const std::string& sandbox_id, const std::string& after,
                                                      int64_t limit);
    /// Waits up to `timeout` for the snapshot to be durable; returns it either way
    /// (the saving goes on after a timeout).
    store::SnapshotRecord wait_durable(const std::string& id, std::chrono::milliseconds timeout);
    store::SandboxRecord restore(const std::string& snapshot_id, const CreateRequest& request);
    void remove_snapshot(const std::string& id);
    /// Bytes only this snapshot holds (its files no other directory links).
    int64_t snapshot_size(const store::SnapshotRecord& snapshot);

    // Export and import (manager_export.cpp; the format: archive/snapshot_export.hpp).
    /// Checks that snapshot `id` can be exported (waiting up to 10 minutes until it
    /// is durable, as a restore does; its root image pinned) and says what the export
    /// will carry. Throws ApiError snapshot_not_found, wrong_state, image_not_found.
    SnapshotExport prepare_export(const std::string& id);
    /// Writes the export into `out` (streamed to the client). Throws as
    /// archive::export_snapshot, and what `out` throws (the client is gone).
    void write_export(const SnapshotExport& e, archive::BlobWriter& out);
    /// Imports the export file `file` (the spooled upload) as a new durable snapshot
    /// with a new id and no sandbox. Throws ApiError invalid_archive (malformed,
    /// corrupt, truncated, not a snapshot export, a vm.state naming host files),
    /// image_not_found (no file with the root image's digest on this host),
    /// disk_full; nothing of it is left on disk then.
    store::SnapshotRecord import_snapshot(const std::string& file);
    /// Where the HTTP server spools upload bodies: <state>/uploads.
    std::string upload_dir() const;

    /// n children (1-4), each a sandbox or an error.
    std::vector<ForkChild> fork(const std::string& id, uint32_t n);

    // Archives (manager_archive.cpp): the sandbox's RAM and disks packed into the
    // archive store (<state>/archives), its VMM ended; unarchive restores it under
    // the same id. `wait` false: returns at once in archiving / unarchiving and the
    // work goes on in the background (progress() tells how far).
    store::SandboxRecord archive(const std::string& id, bool wait);
    store::SandboxRecord unarchive(const std::string& id, bool wait);
    /// The progress of an archive or unarchive of `id` that runs now.
    std::optional<ArchiveProgress> progress(const std::string& id);

    SandboxMetrics metrics(const std::string& id);
    /// The last `max_bytes` of the sandbox's console ("console") or VMM log ("vmm").
    std::string log(const std::string& id, const std::string& which, size_t max_bytes);

    const ManagerOptions& options() const { return options_; }

private:
    struct Slot {
        std::mutex op;  ///< serializes state changes of one sandbox
        /// Its VMM was resumed with the guest's clock set back to a sleep's pause (the
        /// guest did not see the time asleep): its wall clock lags until the next
        /// agent_for() steps it (agent RESYNC) on the connection of the call that woke it.
        std::atomic<bool> clock_behind{false};
    };
    std::shared_ptr<Slot> slot(const std::string& id);
    store::SandboxRecord must_get(const std::string& id);
    /// A sandbox's record read under its slot's lock, which `lock` holds (declared
    /// after `slot`: released before it).
    struct LockedRecord {
        std::shared_ptr<Slot> slot;
        std::unique_lock<std::mutex> lock;
        store::SandboxRecord record;
    };
    /// The record of sandbox `id` with its slot locked, in one store read (not
    /// slot(must_get(id).id) then must_get(id): a read before the lock only to find
    /// the slot's key). Throws sandbox_not_found as must_get does, and then drops the
    /// slot it made for the unknown id.
    LockedRecord lock_record(const std::string& id);
    SandboxState state_of(const store::SandboxRecord& r) const;
    void set_state(store::SandboxRecord& r, SandboxState state, const std::string& error = "",
                   store::Sync sync = store::Sync::full);
    /// A state flip of a live VMM (running, paused, sleeping): state, error (cleared)
    /// and updated_ms set in `r` and written alone (Store::set_sandbox_state), with
    /// store::Sync::relaxed (a power loss ends every VMM, so the record is moot then),
    /// without the fsync each pause, resume, sleep and wake paid.
    void flip_state(store::SandboxRecord& r, SandboxState state);
    /// Records `records` (state creating) if they fit the caps; 503 over_capacity
    /// otherwise (nothing recorded).
    void reserve(const std::vector<store::SandboxRecord>& records);
    /// What check_fits does with the templates' held memory (warm VMs, standbys,
    /// build VMs: TemplateManager::held_memory_mb).
    enum class Held {
        yield,   ///< counted; over --max-memory, warm VMs and standbys yield theirs first
        ignore,  ///< not counted (a check before a create that may take a warm VM)
    };
    /// The sandboxes that hold a VM (holds_resources): how many, and their memory_mb, MiB.
    struct Committed {
        int64_t count = 0;
        int64_t memory_mb = 0;
    };
    Committed committed();
    /// Throws 503 over_capacity unless `n` more sandboxes of `want_memory` MiB in
    /// all fit the caps. Call with mutex_ held.
    void check_fits(int64_t n, int64_t want_memory, Held held = Held::yield);
    /// A new record in state creating (id, timestamps, timeout from `request`).
    store::SandboxRecord new_record(const CreateRequest& request) const;
    /// A new snapshot record `id` in state saving, its directory
    /// <state>/snapshots/<id>, created now, with the shape (cpus, memory_mb,
    /// disable_internet) and root image (image, image_digest) of `from`: the sandbox
    /// snapshotted, or an imported export's info.
    template <class Source>
    store::SnapshotRecord new_snapshot_record(std::string id, const Source& from) const {
        store::SnapshotRecord snap;
        snap.dir = options_.state_dir + "/snapshots/" + id;
        snap.id = std::move(id);
        snap.state = "saving";
        snap.cpus = from.cpus;
        snap.memory_mb = from.memory_mb;
        snap.disable_internet = from.disable_internet;
        snap.image = from.image;
        snap.image_digest = from.image_digest;
        snap.created_ms = store::now_ms();
        return snap;
    }
    /// Starts a VMM for the record (in state creating) and records the outcome.
    /// `timing`, if given: the VM start's and the records' milliseconds.
    struct LaunchTiming {
        double vm_ms = 0;     ///< VmDriver::start (process or standby, restore, agent, resync)
        double store_ms = 0;  ///< recording it running and its directory
        bool into_standby = false;
    };
    store::SandboxRecord launch(store::SandboxRecord record, const std::string& restore_dir,
                                const std::vector<std::string>& standby_sockets = {}, LaunchTiming* timing = nullptr);
    /// A create that restores a ready template (or takes its warm VM). `started`:
    /// when the create call began, and the template lookup's ms, for its log line
    /// ("sandbox ID: created from template NAME in N ms (...)": where a create's
    /// time goes inside the daemon).
    store::SandboxRecord create_from_template(const TemplateUse& from, const CreateRequest& request,
                                              std::chrono::steady_clock::time_point started, double use_ms);
    /// The sandbox ready for an exec or file call (woken if sleeping); its record.
    store::SandboxRecord use(const std::string& id);
    /// A connection to the agent of the sandbox (use()d: woken if sleeping), its
    /// guest's wall clock stepped first if a wake left it behind.
    agent::AgentClient agent_for(const std::string& id);
    /// Resumes the sandbox's VMM. A sleep pauses it with the guest's clock frozen (no
    /// jump of the guest's monotonic clock, so no timers to catch up at the wake):
    /// then its slot's clock_behind is set.
    void resume_vmm(const store::SandboxRecord& r);
    /// If the sandbox's guest clock is behind (resume_vmm), steps its wall clock to
    /// the host's and reseeds its RNG: sent ahead on `client` without waiting (the
    /// agent does it before the call's own request: agent::resync_guest_ahead), or
    /// over a new connection, waited for, when null. A refusal is logged, never
    /// thrown: the call goes on.
    void step_clock_if_behind(const store::SandboxRecord& r, agent::AgentClient* client);
    /// Runs the request `start` makes on `client` to its end, its output into
    /// `sinks` (or collected), the agent's refusal to start it as exit 126/127 (or
    /// given to `refused`, which throws).
    ExecOutcome run_request(agent::AgentClient& client,
                            const std::function<agent::RequestId(agent::OutputCallbacks)>& start,
                            const ExecSinks* sinks,
                            const std::function<void(const agent::AgentError&)>& refused = {});
    /// The command as the daemon shows it (its end time noted when first seen).
    CommandInfo command_info(const std::string& sandbox_id, const agent::JobInfo& job);
    void release(const std::string& dir);
    /// At start: fork bases a fork cut short left, released (recorded ones: nobody
    /// owns a fork base) or removed (ones the store never took).
    void recover_fork_bases();
    void watch();
    void check_sandboxes();
    /// The watcher's autosleep round for one running sandbox (manager_rest.cpp).
    void check_idle(const store::SandboxRecord& r, int64_t now);
    /// How many background commands run in `r`'s guest, from its agent's job list
    /// (not a call that needs the guest: it never counts as activity); 0 when the
    /// agent cannot tell (logged).
    size_t running_commands(const store::SandboxRecord& r);
    /// The watcher saw `r`'s VMM gone after its guest rebooted itself: rebooting,
    /// and a boot on a thread of its own (manager_rest.cpp).
    void reboot_in_background(const store::SandboxRecord& r);
    /// Runs `sync` in a running guest (5 s at most; a guest that cannot is logged and
    /// left): before a reboot's stop, which the guest sees as a power cut.
    void sync_guest(const store::SandboxRecord& r) noexcept;
    /// reboot() with the slot's lock held and the VMM stopped; `r` in rebooting.
    void boot_again(store::SandboxRecord& r);
    void check_snapshots();

    // manager_archive.cpp.
    void run_archive(const std::string& id, SandboxState before);
    void run_unarchive(const std::string& id);
    /// Packs the durable snapshot `work` into the archive `a` (committed) and records it ready.
    void pack_into(const store::SandboxRecord& r, store::ArchiveRecord& a, const std::string& work);
    /// The archive is committed: stops the VMM and records the sandbox archived.
    void finish_archive(store::SandboxRecord r);
    /// A sandbox unarchived from files not durable yet (Durability::deferred, its
    /// archive kept meanwhile): makes its unpack directories durable, releases them
    /// and removes the archive. A no-op for any other sandbox. With the slot's lock
    /// held: every call whose result depends on those files being on disk (archive,
    /// snapshot, fork) runs it first; a background job runs it after each unarchive.
    /// Throws SysError (an fsync failed: the archive stays, tried again at the next
    /// call or start).
    void settle_unarchived(const std::string& id);
    /// The unpack directories (store kind "unarchive") of sandbox `id` not released yet.
    std::vector<std::string> unarchive_dirs(const std::string& id);
    /// Releases them (collected with the last VM directory whose files name them).
    void release_unarchive_dirs(const std::string& id);
    /// settle_unarchived(id) on a background job, under the slot's lock.
    void settle_later(const std::string& id);
    /// At start: settles archiving / unarchiving records a killed daemon left.
    void recover_archives();
    /// At start: removes uploads and unpacked imports a stopped daemon left, and
    /// makes their directories (manager_export.cpp).
    void recover_imports();
    /// The root image file of an import: the pinned file of its digest, else this
    /// host's image of its name when that has the digest. Throws ApiError image_not_found.
    std::string import_root(const archive::SnapshotExportInfo& info);
    void set_progress(const std::string& id, const std::string& phase, uint64_t done, uint64_t total);
    void clear_progress(const std::string& id);
    /// Runs `work` on a background thread joined at destruction.
    void start_job(std::function<void()> work);

    ManagerOptions options_;
    store::Store& store_;
    VmDriver vms_;
    TemplateManager* templates_ = nullptr;
    std::mutex mutex_;  ///< slots_, and the caps' check-and-reserve
    std::map<std::string, std::shared_ptr<Slot>> slots_;
    std::mutex commands_mutex_;
    std::map<std::string, int64_t> command_ended_ms_;  ///< "sandbox/job" -> when first seen ended
    std::atomic<bool> stopping_{false};
    std::mutex watch_mutex_;
    std::condition_variable watch_wake_;
    std::thread watcher_;
    IdleTracker idle_;
    int background_ = 0;  ///< reboot threads running (watch_mutex_); the destructor waits for them
    archive::DirBlobStore blobs_;  ///< <state>/archives
    store::ImagePins& pins_;       ///< <state>/images (the daemon's)
    std::mutex progress_mutex_;
    std::map<std::string, ArchiveProgress> progress_;
    std::mutex jobs_mutex_;
    std::vector<std::thread> jobs_;
};

/// A fresh random UUID (version 4), lowercase.
std::string new_uuid();
/// True for a lowercase or uppercase UUID text (8-4-4-4-12 hex digits).
bool is_uuid(std::string_view text);

}  // namespace nanovm::daemon
