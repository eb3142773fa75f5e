// The sandbox manager: snapshots, restore, fork, and host-side figures (manager.hpp).
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "api/daemon/sandbox/process_stats.hpp"
#include "api/daemon/sandbox/manager.hpp"
#include "api/daemon/store/file_refs.hpp"
#include "api/vm/state_dir.hpp"
#include "snapshot/manifest.hpp"
#include "vmm/log.hpp"

namespace nanovm::daemon {

namespace fs = std::filesystem;
using store::SandboxRecord;
using store::SnapshotRecord;

namespace {

// How long a restore waits for its snapshot to become durable.
constexpr auto kRestoreWait = std::chrono::minutes(10);

// Allocated bytes of the regular files in `dir` (not following links); with
// `only_unshared`, only files no other directory links (st_nlink == 1).
int64_t allocated_bytes(const std::string& dir, bool only_unshared) {
    int64_t total = 0;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        struct stat st {};
        if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (only_unshared && st.st_nlink > 1) continue;
        total += static_cast<int64_t>(st.st_blocks) * 512;
    }
    return total;
}

}  // namespace

SnapshotRecord SandboxManager::snapshot(const std::string& sandbox_id, const SnapshotRequest& request) {
    const auto s = slot(must_get(sandbox_id).id);
    std::lock_guard op(s->op);
    SandboxRecord r = must_get(sandbox_id);
    const SandboxState st = state_of(r);
    require_allowed(SandboxOp::snapshot, st);
    settle_unarchived(r.id);  // a snapshot's layer may chain onto the unpacked RAM: durable first
    SnapshotRecord snap = new_snapshot_record(new_uuid(), r);
    snap.sandbox_id = r.id;
    std::error_code ec;
    fs::create_directories(options_.state_dir + "/snapshots", ec);
    store_.put_snapshot(snap);
    store_.add_dir(snap.dir, "snapshot", snap.id);
    bool durable = false;
    try {
        durable = vms_.snapshot(r.vm_id, snap.dir, request.wait_durable, request.leave_paused);
    } catch (const ApiError&) {
        store_.delete_snapshot(snap.id);
        release(snap.dir);
        throw;
    }
    snap.state = "ready";
    snap.durable = durable && snapshot::is_durable(snap.dir);
    if (snap.durable) store_.add_refs(snap.dir, store::external_files(snap.dir));
    store_.put_snapshot(snap);
    if (request.leave_paused && st == SandboxState::running) set_state(r, SandboxState::sleeping);
    return snap;
}

SnapshotRecord SandboxManager::get_snapshot(const std::string& id) {
    if (!is_uuid(id)) throw ApiError("snapshot_not_found", fmt::format("no snapshot {} (ids are UUIDs)", id.substr(0, 64)));
    std::string key(id);
    for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto s = store_.snapshot(key);
    if (!s) throw ApiError("snapshot_not_found", fmt::format("no snapshot {}", id));
    return *s;
}

std::vector<SnapshotRecord> SandboxManager::list_snapshots(const std::string& sandbox_id, const std::string& after,
                                                           int64_t limit) {
    return store_.snapshots(sandbox_id, after, limit);
}

SnapshotRecord SandboxManager::wait_durable(const std::string& id, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        SnapshotRecord s = get_snapshot(id);
        if (s.durable || s.state == "error") return s;
        if (snapshot::is_durable(s.dir)) {
            watch_wake_.notify_all();  // the watcher records it (and its references)
        }
        if (std::chrono::steady_clock::now() >= deadline) return s;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

SandboxRecord SandboxManager::restore(const std::string& snapshot_id, const CreateRequest& request) {
    SnapshotRecord snap = get_snapshot(snapshot_id);
    if ((request.cpus && *request.cpus != snap.cpus) || (request.memory_mb && *request.memory_mb != snap.memory_mb))
        throw ApiError("shape_mismatch", fmt::format("the snapshot's shape is {} cpus, {} MiB: a restore takes it as it is",
                                                     snap.cpus, snap.memory_mb));
    if (snap.state == "error") throw ApiError("wrong_state", fmt::format("snapshot {} failed: {}", snap.id, snap.error));
    if (!snap.durable) snap = wait_durable(snap.id, kRestoreWait);
    if (!snap.durable) throw ApiError("wrong_state", fmt::format("snapshot {} is not saved yet", snap.id));
    CreateRequest shaped = request;
    shaped.cpus = static_cast<uint32_t>(snap.cpus);
    shaped.memory_mb = static_cast<uint32_t>(snap.memory_mb);
    SandboxRecord r = new_record(shaped);
    r.disable_internet = snap.disable_internet;
    r.image = snap.image;
    r.image_digest = snap.image_digest;
    r.snapshot_id = snap.id;
    reserve({r});
    return launch(std::move(r), snap.dir);
}

void SandboxManager::remove_snapshot(const std::string& id) {
    SnapshotRecord s = get_snapshot(id);
    if (s.state == "saving" || (s.state == "ready" && !s.durable && !snapshot::is_durable(s.dir)))
        throw ApiError("wrong_state", fmt::format("snapshot {} is still being saved: wait until it is durable", s.id));
    store_.delete_snapshot(s.id);
    release(s.dir);
    pins_.collect();  // its image, if nothing else names it
}

int64_t SandboxManager::snapshot_size(const SnapshotRecord& snapshot) { return allocated_bytes(snapshot.dir, true); }

std::vector<ForkChild> SandboxManager::fork(const std::string& id, uint32_t n) {
    const auto s = slot(must_get(id).id);
    std::lock_guard op(s->op);
    SandboxRecord parent = must_get(id);
    require_allowed(SandboxOp::fork, state_of(parent));
    settle_unarchived(parent.id);  // the children's base may chain onto the unpacked RAM
    std::vector<SandboxRecord> children;
    for (uint32_t i = 0; i < n; ++i) {
        CreateRequest shape;
        shape.cpus = static_cast<uint32_t>(parent.cpus);
        shape.memory_mb = static_cast<uint32_t>(parent.memory_mb);
        shape.disable_internet = parent.disable_internet;
        shape.timeout_s = 0;  // the daemon's default applies below
        SandboxRecord c = new_record(shape);
        if (options_.default_timeout_s > 0) {
            c.timeout_s = options_.default_timeout_s;
            c.end_at_ms = c.created_ms + options_.default_timeout_s * 1000;
        }
        c.image = parent.image;
        c.image_digest = parent.image_digest;
        c.parent_id = parent.id;
        c.labels = parent.labels;
        c.autosleep_s = parent.autosleep_s;
        children.push_back(std::move(c));
    }
    reserve(children);
    VmDriver::Fork made;
    try {
        made = vms_.fork(parent.vm_id, n);
    } catch (const ApiError&) {
        for (const SandboxRecord& c : children) store_.delete_sandbox(c.id);
        throw;
    }
    // The fork base (the parent's frozen disks and state, and the memory chain it
    // names) is the store's from here: the children's directories reference it.
    store_.add_dir(made.base_root, "fork", "");
    store_.add_refs(made.base_root, store::external_files(made.base_dir));
    std::vector<ForkChild> out(n);
    for (uint32_t i = 0; i < n; ++i) {
        const VmDriver::ForkChild& child = made.children.at(i);
        if (child.started.vm_id.empty()) {
            store_.delete_sandbox(children[i].id);
            out[i].error_code = child.error.find("No space left on device") != std::string::npos ? "disk_full" : "vm_error";
            out[i].error = "the fork child did not start: " + child.error;
            continue;
        }
        SandboxRecord c = children[i];
        c.vm_id = child.started.vm_id;
        set_state(c, SandboxState::running);
        store::track_dir(store_, child.started.dir, "vm", c.id);
        out[i].sandbox = c;
    }
    // Nobody owns a fork base: the children's VM directories (and snapshots of them)
    // keep it through their references.
    release(made.base_root);
    return out;
}

SandboxMetrics SandboxManager::metrics(const std::string& id) {
    const SandboxRecord r = must_get(id);
    SandboxMetrics m;
    m.state = r.state;
    if (r.vm_id.empty()) return m;
    m.disk_bytes = allocated_bytes(vms_.paths(r.vm_id).dir, false);
    m.vmm_running = vms_.alive(r.vm_id);
    const pid_t pid = vms_.pid(r.vm_id);
    if (!m.vmm_running || pid <= 0) return m;
    m.cpu_time_ms = process_cpu_ms(pid).value_or(0);
    std::ifstream statm(fmt::format("/proc/{}/statm", pid));
    int64_t size_pages = 0, resident_pages = 0;
    if (statm >> size_pages >> resident_pages) m.vmm_rss_bytes = resident_pages * ::sysconf(_SC_PAGESIZE);
    return m;
}

std::string SandboxManager::log(const std::string& id, const std::string& which, size_t max_bytes) {
    const SandboxRecord r = must_get(id);
    if (r.vm_id.empty()) return {};
    const vm::VmPaths p = vms_.paths(r.vm_id);
    const std::string path = which == "console" ? p.console_log() : p.vmm_log();
    std::ifstream f(path, std::ios::binary);
    if (!f) return {};
    f.seekg(0, std::ios::end);
    const auto size = static_cast<int64_t>(f.tellg());
    const int64_t start = size > static_cast<int64_t>(max_bytes) ? size - static_cast<int64_t>(max_bytes) : 0;
    f.seekg(start);
    std::string out(static_cast<size_t>(size - start), '\0');
    f.read(out.data(), static_cast<std::streamsize>(out.size()));
    out.resize(static_cast<size_t>(f.gcount()));
    return out;
}

}  // namespace nanovm::daemon
