// The sandbox manager: sandboxes' lifecycle, caps, recovery and the watcher
// (manager.hpp). Commands and files: manager_guest.cpp; snapshots and forks:
// manager_snapshots.cpp.
#include "api/daemon/sandbox/manager.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "api/daemon/random_bytes.hpp"
#include "api/daemon/store/file_refs.hpp"
#include "api/daemon/template/template_manager.hpp"
#include "api/vm/state_dir.hpp"
#include "snapshot/manifest.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"
#include "vmm/log.hpp"

namespace nanovm::daemon {

namespace fs = std::filesystem;
using store::SandboxRecord;
using store::SnapshotRecord;

std::string new_uuid() {
    unsigned char b[16];
    random_bytes(b, sizeof(b));
    b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);  // version 4
    b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);  // RFC 4122 variant
    std::string out;
    for (int i = 0; i < 16; ++i) {
        if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
        out += fmt::format("{:02x}", b[i]);
    }
    return out;
}

bool is_uuid(std::string_view text) {
    if (text.size() != 36) return false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (c != '-') return false;
        } else if (!std::isxdigit(static_cast<unsigned char>(c))) {
            return false;
        }
    }
    return true;
}

namespace {

using Clock = std::chrono::steady_clock;

std::string lower(std::string_view text) {
    std::string out(text);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

}  // namespace

SandboxManager::SandboxManager(ManagerOptions options, store::Store& store, store::ImagePins& pins)
    : options_(std::move(options)),
      store_(store),
      vms_(options_.state_dir),
      idle_(options_.idle),
      blobs_(options_.state_dir + "/archives"),
      pins_(pins) {}

SandboxManager::~SandboxManager() {
    stopping_ = true;
    watch_wake_.notify_all();
    if (watcher_.joinable()) watcher_.join();
    {
        std::unique_lock lock(watch_mutex_);
        watch_wake_.wait(lock, [this] { return background_ == 0; });  // reboots under way end first
    }
    std::vector<std::thread> jobs;
    {
        std::lock_guard lock(jobs_mutex_);
        jobs.swap(jobs_);
    }
    for (std::thread& t : jobs)
        if (t.joinable()) t.join();
}

std::shared_ptr<SandboxManager::Slot> SandboxManager::slot(const std::string& id) {
    std::lock_guard lock(mutex_);
    auto& s = slots_[id];
    if (!s) s = std::make_shared<Slot>();
    return s;
}

namespace {

// The store's key of sandbox id `id` (lower case); throws sandbox_not_found for what
// is no UUID.
std::string sandbox_key(const std::string& id) {
    if (!is_uuid(id)) throw ApiError("sandbox_not_found", fmt::format("no sandbox {} (ids are UUIDs)", id.substr(0, 64)));
    return lower(id);
}

}  // namespace

SandboxRecord SandboxManager::must_get(const std::string& id) {
    auto r = store_.sandbox(sandbox_key(id));
    if (!r) throw ApiError("sandbox_not_found", fmt::format("no sandbox {}", id));
    return *r;
}

SandboxManager::LockedRecord SandboxManager::lock_record(const std::string& id) {
    const std::string key = sandbox_key(id);
    LockedRecord out{slot(key), {}, {}};
    out.lock = std::unique_lock(out.slot->op);
    if (auto r = store_.sandbox(key)) {
        out.record = std::move(*r);
        return out;
    }
    out.lock.unlock();
    {
        std::lock_guard lock(mutex_);
        const auto it = slots_.find(key);
        if (it != slots_.end() && it->second == out.slot && out.slot.use_count() == 2) slots_.erase(it);  // the map's and ours
    }
    throw ApiError("sandbox_not_found", fmt::format("no sandbox {}", id));
}

SandboxState SandboxManager::state_of(const SandboxRecord& r) const {
    return parse_state(r.state).value_or(SandboxState::error);
}

void SandboxManager::set_state(SandboxRecord& r, SandboxState state, const std::string& error, store::Sync sync) {
    r.state = std::string(to_string(state));
    r.error = error;
    r.updated_ms = store::now_ms();
    store_.put_sandbox(r, sync);
}

void SandboxManager::flip_state(SandboxRecord& r, SandboxState state) {
    r.state = std::string(to_string(state));
    r.error.clear();
    r.updated_ms = store::now_ms();
    // One UPDATE of three columns (the rest of the record is what the caller read
    // under the sandbox's lock). No row: deleted meanwhile, and not brought back.
    store_.set_sandbox_state(r.id, r.state, r.error, r.updated_ms, store::Sync::relaxed);
}

SandboxRecord SandboxManager::new_record(const CreateRequest& request) const {
    SandboxRecord r;
    r.id = new_uuid();
    r.state = std::string(to_string(SandboxState::creating));
    r.cpus = request.cpus.value_or(2);
    r.memory_mb = request.memory_mb.value_or(1024);
    r.disable_internet = request.disable_internet;
    r.labels = request.labels;
    r.created_ms = r.updated_ms = store::now_ms();
    r.autosleep_s = request.autosleep_s.value_or(options_.default_autosleep_s);
    r.on_timeout = request.on_timeout;
    const int64_t timeout = request.timeout_s ? *request.timeout_s : options_.default_timeout_s;
    if (timeout > 0) {
        r.timeout_s = timeout;
        r.end_at_ms = r.created_ms + timeout * 1000;
    }
    return r;
}

void SandboxManager::reserve(const std::vector<SandboxRecord>& records) {
    std::lock_guard lock(mutex_);
    int64_t want_memory = 0;
    for (const SandboxRecord& r : records) want_memory += r.memory_mb;
    check_fits(static_cast<int64_t>(records.size()), want_memory);
    for (const SandboxRecord& r : records) store_.put_sandbox(r);
}

void SandboxManager::set_templates(TemplateManager* templates) {
    templates_ = templates;
    if (templates_)
        templates_->set_memory_budget(static_cast<int64_t>(options_.max_memory_mb), [this] { return sandbox_memory_mb(); });
}

SandboxManager::Committed SandboxManager::committed() {
    Committed c;
    for (const SandboxRecord& r : store_.all_sandboxes()) {
        if (!holds_resources(state_of(r))) continue;
        ++c.count;
        c.memory_mb += r.memory_mb;
    }
    return c;
}

int64_t SandboxManager::sandbox_memory_mb() { return committed().memory_mb; }

void SandboxManager::check_fits(int64_t n, int64_t want_memory, Held held) {
    const auto [count, sandboxes_mb] = committed();
    int64_t memory = sandboxes_mb;
    if (count + n > options_.max_running)
        throw ApiError("over_capacity", fmt::format("{} sandboxes hold a VM and the daemon takes at most {} "
                                                    "(--max-sandboxes): delete one first",
                                                    count, options_.max_running));
    const auto cap = static_cast<int64_t>(options_.max_memory_mb);
    if (templates_ && held == Held::yield) {
        // Warm VMs and standbys are the templates' speed-ups, never a reason to refuse.
        int64_t template_memory = templates_->held_memory_mb();
        if (memory + template_memory + want_memory > cap) {
            templates_->yield_memory(memory + template_memory + want_memory - cap);
            template_memory = templates_->held_memory_mb();
        }
        memory += template_memory;  // what is left: build VMs (and any warm VM still starting)
    }
    if (memory + want_memory > cap)
        throw ApiError("over_capacity", fmt::format("{} MiB of guest memory is committed and {} more would pass the cap "
                                                    "of {} MiB (--max-memory)",
                                                    memory, want_memory, options_.max_memory_mb));
}

SandboxRecord SandboxManager::launch(SandboxRecord record, const std::string& restore_dir,
                                     const std::vector<std::string>& standby_sockets, LaunchTiming* timing) {
    const auto s = slot(record.id);
    std::lock_guard op(s->op);
    VmDriver::Started started;
    const auto t0 = Clock::now();
    try {
        started = vms_.start(static_cast<uint32_t>(record.cpus), static_cast<uint32_t>(record.memory_mb),
                             restore_dir.empty() ? pins_.path_of(record.image_digest) : std::string(), restore_dir,
                             standby_sockets, record.id);
    } catch (...) {
        store_.delete_sandbox(record.id);
        throw;
    }
    const auto t1 = Clock::now();
    record.vm_id = started.vm_id;
    // One fsync, not three: the directory and its references first, relaxed, then the
    // running record, full, whose commit makes the earlier ones durable with it (WAL
    // frames reach the disk in order). Cut between them, the record is still
    // `creating` without a vm_id, and recovery stops and releases the directory it owns.
    store::track_dir(store_, started.dir, "vm", record.id, store::Sync::relaxed);
    set_state(record, SandboxState::running);
    if (timing) {
        timing->vm_ms = ms_between(t0, t1);
        timing->store_ms = ms_between(t1, Clock::now());
        timing->into_standby = started.from_standby;
    }
    return record;
}

SandboxRecord SandboxManager::create(const CreateRequest& request) {
    if (!request.snapshot_id.empty()) return restore(request.snapshot_id, request);
    const auto started = Clock::now();
    if (templates_ && !request.template_name.empty()) {
        const TemplateUse from = templates_->use(request.template_name);
        if ((request.cpus && *request.cpus != from.cpus) || (request.memory_mb && *request.memory_mb != from.memory_mb))
            throw ApiError("shape_mismatch", fmt::format("template {} is {} cpus, {} MiB: a create from it takes that shape",
                                                         from.name, from.cpus, from.memory_mb));
        return create_from_template(from, request, started, ms_between(started, Clock::now()));
    }
    if (templates_) {
        (void)VmDriver::image_path(request.image);  // an unknown name stops here
        {
            std::lock_guard lock(mutex_);  // over a cap: refused before a template build starts
            check_fits(1, request.memory_mb.value_or(1024), Held::ignore);  // reserve() counts and yields
        }
        const auto from = templates_->use_implicit(request.image, request.cpus.value_or(2), request.memory_mb.value_or(1024));
        if (from) return create_from_template(*from, request, started, ms_between(started, Clock::now()));
    }
    SandboxRecord r = new_record(request);
    r.image = request.image;
    // An unknown name stops here; the VM boots over the pinned copy (store/image_pins.hpp).
    try {
        r.image_digest = pins_.pin(VmDriver::image_path(r.image)).digest;
    } catch (const ApiError&) {
        throw;
    } catch (const std::exception& e) {
        const std::string message = fmt::format("pinning root image {}: {}", r.image, e.what());
        throw ApiError(message.find("No space left on device") != std::string::npos ? "disk_full" : "vm_error", message);
    }
    reserve({r});
    pins_.recorded(r.image_digest);  // its record names the pin now
    return launch(std::move(r), "");
}

SandboxRecord SandboxManager::create_from_template(const TemplateUse& from, const CreateRequest& request,
                                                   Clock::time_point started, double use_ms) {
    CreateRequest shaped = request;
    shaped.cpus = from.cpus;
    shaped.memory_mb = from.memory_mb;
    SandboxRecord r = new_record(shaped);
    r.image = from.image;
    r.image_digest = from.image_digest;  // the image the template's snapshot runs over
    r.template_name = from.name;
    // A warm VM is taken before the caps are checked: taken, its memory is no longer
    // the template manager's (held_memory_mb) but this sandbox's, counted once.
    auto t = Clock::now();
    const std::optional<VmDriver::Started> warm = templates_->take_warm(from.name);
    const double take_ms = ms_between(t, Clock::now());
    t = Clock::now();
    try {
        reserve({r});
    } catch (...) {
        if (warm) templates_->release_warm(*warm);
        throw;
    }
    templates_->made_sandbox(from.name, r.id);
    const double record_ms = ms_between(t, Clock::now());
    // One line per create: where its time went inside the daemon (the VMM's log has
    // the restore and the agent's first answer; the client's time beyond the total
    // is the HTTP server's).
    const std::string id = r.id;  // r is moved into launch() below
    const auto done = [&](const std::string& path, const std::string& parts) {
        log_line(fmt::format("sandbox {}: created from template {} in {:.1f} ms ({}): template lookup {:.1f} ms, "
                             "reserve and record {:.1f} ms, {}",
                             id, from.name, ms_between(started, Clock::now()), path, use_ms, record_ms, parts));
    };
    if (warm) {
        // A VM restored from the template ahead and paused (template_manager.hpp "Warm
        // VMs"). It was restored before this sandbox's id existed: it is resumed, and
        // its agent gives the guest the sandbox id as hostname, reseeds its RNG and
        // steps its clock (paused since its restore) now, as a launched sandbox gets
        // them. A VM that cannot is stopped and the create restores.
        double resume_ms = 0;
        try {
            t = Clock::now();
            vms_.resume(warm->vm_id);
            resume_ms = ms_between(t, Clock::now());
            t = Clock::now();
            agent::AgentClient client = vms_.agent(warm->vm_id);
            agent::resync_guest(client, r.id);
        } catch (const std::exception& e) {
            log_line(fmt::format("sandbox {}: warm VM {} of template {} did not resume or refused its hostname ({}): "
                                 "restoring instead",
                                 r.id, warm->vm_id, from.name, e.what()));
            templates_->release_warm(*warm);  // stopped, its directory released
            return launch(std::move(r), from.restore_dir, from.standby_sockets);
        }
        const double resync_ms = ms_between(t, Clock::now());
        t = Clock::now();
        const auto s = slot(r.id);
        std::lock_guard op(s->op);
        r.vm_id = warm->vm_id;
        // Its owner now (its references stay); the running record's full commit below
        // makes this one durable with it (store::Sync::relaxed).
        store_.add_dir(warm->dir, "vm", r.id, store::Sync::relaxed);
        set_state(r, SandboxState::running);
        log_line(fmt::format("sandbox {}: took warm VM {} of template {}", r.id, r.vm_id, from.name));
        done("took a warm VM",
             fmt::format("take {:.1f} ms, resume {:.1f} ms, resync {:.1f} ms, store {:.1f} ms", take_ms, resume_ms,
                         resync_ms, ms_between(t, Clock::now())));
        return r;
    }
    LaunchTiming timing;
    SandboxRecord out = launch(std::move(r), from.restore_dir, from.standby_sockets, &timing);
    done(timing.into_standby ? "restored into a pre-made VMM" : "restored in a new VMM process",
         fmt::format("no warm VM {:.1f} ms, VM start {:.1f} ms (the VMM's restore, the agent's first answer, the resync: "
                     "its vmm.log), store {:.1f} ms",
                     take_ms, timing.vm_ms, timing.store_ms));
    return out;
}

SandboxRecord SandboxManager::get(const std::string& id) { return must_get(id); }

std::vector<SandboxRecord> SandboxManager::list(const store::SandboxFilter& filter) { return store_.sandboxes(filter); }

std::map<std::string, int64_t> SandboxManager::count_by_state() {
    // Every state has a line, 0 included (a gauge that vanishes reads as "unknown").
    std::map<std::string, int64_t> counts;
    for (const SandboxState st : all_states()) counts[std::string(to_string(st))] = 0;
    for (const auto& [state, n] : store_.count_by_state()) counts[state] = n;
    return counts;
}

SandboxRecord SandboxManager::patch(const std::string& id, const PatchRequest& request) {
    const auto s = slot(must_get(id).id);
    std::lock_guard op(s->op);
    SandboxRecord r = must_get(id);
    require_allowed(SandboxOp::patch, state_of(r));
    if (request.labels) r.labels = *request.labels;
    if (request.autosleep_s) r.autosleep_s = *request.autosleep_s;
    if (request.set_timeout) {
        r.timeout_s = request.timeout_s;
        // An archived sandbox's timeout starts again when it is unarchived.
        r.end_at_ms = request.timeout_s && state_of(r) != SandboxState::archived
                          ? std::optional<int64_t>(store::now_ms() + *request.timeout_s * 1000)
                          : std::nullopt;
    }
    r.updated_ms = store::now_ms();
    store_.put_sandbox(r);
    watch_wake_.notify_all();
    return r;
}

void SandboxManager::remove(const std::string& id) {
    const auto s = slot(must_get(id).id);
    {
        std::lock_guard op(s->op);
        SandboxRecord r = must_get(id);
        require_allowed(SandboxOp::remove, state_of(r));
        set_state(r, SandboxState::deleting, r.error);
        if (!r.vm_id.empty()) {
            const pid_t pid = vms_.pid(r.vm_id);
            if (!vms_.stop(r.vm_id)) log_line(fmt::format("sandbox {}: its VMM ({}) did not stop", r.id, r.vm_id));
            if (pid > 0) ::waitpid(pid, nullptr, WNOHANG);  // our child unless adopted after a restart
        }
        store_.delete_sandbox(r.id);
        if (!r.vm_id.empty()) release(vms_.paths(r.vm_id).dir);
        // An unarchive's files not settled yet (settle_unarchived): they go with it.
        release_unarchive_dirs(r.id);
        if (const auto a = store_.archive(r.id)) {
            try {
                blobs_.remove(a->blob);
            } catch (const std::exception& e) {
                log_line(fmt::format("sandbox {}: removing its archive {}: {}", r.id, a->blob, e.what()));
            }
            store_.delete_archive(r.id);
        }
    }
    idle_.forget(lower(id));
    pins_.collect();  // its image, if nothing else names it
    std::lock_guard lock(mutex_);
    slots_.erase(lower(id));
}

SandboxRecord SandboxManager::pause(const std::string& id) {
    LockedRecord locked = lock_record(id);
    SandboxRecord& r = locked.record;
    const SandboxState st = state_of(r);
    require_allowed(SandboxOp::pause, st);
    if (st == SandboxState::running) vms_.pause(r.vm_id);
    if (st != SandboxState::paused) flip_state(r, *transition(SandboxOp::pause).to);
    return r;
}

SandboxRecord SandboxManager::resume(const std::string& id) {
    LockedRecord locked = lock_record(id);
    SandboxRecord& r = locked.record;
    const SandboxState st = state_of(r);
    require_allowed(SandboxOp::resume, st);
    if (st != SandboxState::running) {
        resume_vmm(r);
        flip_state(r, *transition(SandboxOp::resume).to);
        idle_.reset(r.id, store::now_ms());
        step_clock_if_behind(r, nullptr);  // now: no call may follow to carry it
    }
    return r;
}

void SandboxManager::release(const std::string& dir) { store::release_and_collect(store_, dir); }

void SandboxManager::recover_and_watch() {
    for (const std::string& dir : store::finish_removals(store_)) log_line("removed " + dir + " (a removal cut short)");
    recover_archives();
    recover_imports();
    std::set<std::string> known_vms, tracked;
    for (const store::DirRecord& d : store_.dirs()) tracked.insert(d.path);
    for (SandboxRecord r : store_.all_sandboxes()) {
        const SandboxState st = state_of(r);
        if (st == SandboxState::creating && r.vm_id.empty()) {
            // The create never answered: undone. A warm VM it took was re-owned before
            // its running record (create_from_template): stopped, its directory released.
            store_.delete_sandbox(r.id);
            for (const store::DirRecord& d : store_.dirs()) {
                if (d.kind != "vm" || d.owner != r.id || d.released) continue;
                vms_.stop(fs::path(d.path).filename().string());
                release(d.path);
            }
            continue;
        }
        if (st == SandboxState::deleting) {
            if (!r.vm_id.empty()) vms_.stop(r.vm_id);
            store_.delete_sandbox(r.id);
            if (!r.vm_id.empty()) release(vms_.paths(r.vm_id).dir);
            continue;
        }
        if (!r.vm_id.empty()) {
            known_vms.insert(r.vm_id);
            // A create, restore or fork cut between recording the sandbox running and
            // recording its directory: taken now, or its delete would leave it on disk.
            const std::string dir = vms_.paths(r.vm_id).dir;
            if (!tracked.count(dir) && fs::is_directory(dir)) {
                log_line(fmt::format("sandbox {}: recording its VM directory {} (a create cut short)", r.id, dir));
                store::track_dir(store_, dir, "vm", r.id);
            }
        }
        if (!holds_resources(st)) continue;
        const vm::Adoption a = vms_.adopt(r.vm_id);
        if (a.state == vm::Adoption::State::dead && allowed(SandboxOp::vmm_died, st) && vms_.ended_in_reboot(r.vm_id)) {
            // Its guest rebooted itself while no daemon ran: the watcher boots it again.
            log_line(fmt::format("sandbox {}: its guest rebooted itself while the daemon was down", r.id));
            continue;
        }
        if (a.state != vm::Adoption::State::ready) {
            if (a.state != vm::Adoption::State::dead && a.state != vm::Adoption::State::missing) vms_.stop(r.vm_id);
            set_state(r, SandboxState::error,
                      fmt::format("its VMM was {} when the daemon started again: {}", vm::to_string(a.state),
                                  a.reason.empty() ? vms_.end_reason(r.vm_id) : a.reason));
            continue;
        }
        const std::string vmm_state = a.status.value("state", "");
        if (vmm_state == "running" && st != SandboxState::running) set_state(r, SandboxState::running);
        if (vmm_state == "paused" && st == SandboxState::running) set_state(r, SandboxState::paused);
        log_line(fmt::format("sandbox {}: adopted its running VMM {} ({})", r.id, r.vm_id, vmm_state));
    }
    // VMMs no record names (a create cut short): stopped, their directories removed.
    for (const vm::VmPaths& p : vms_.vm_dirs()) {
        if (known_vms.count(p.id)) continue;
        if (vms_.alive(p.id)) {
            log_line(fmt::format("stopping VMM {}: no sandbox names it (a create cut short)", p.id));
            vms_.stop(p.id);
        }
        vm::remove_if_dead(p);
    }
    recover_fork_bases();
    // Snapshots whose taking was cut short: kept if complete, else undone.
    for (SnapshotRecord s : store_.snapshots("", "", INT64_MAX)) {
        if (s.state != "saving") continue;
        if (snapshot::is_durable(s.dir)) {
            s.state = "ready";
            s.durable = true;
            store_.put_snapshot(s);
            store_.add_refs(s.dir, store::external_files(s.dir));
        } else {
            store_.delete_snapshot(s.id);
            release(s.dir);
        }
    }
    pins_.collect();  // images no record names (their last user went while the daemon was down)
    watcher_ = std::thread([this] { watch(); });
}

void SandboxManager::recover_fork_bases() {
    // Recorded but never released: the fork was cut after the store took its base
    // (its children that were recorded keep it through their references).
    std::set<std::string> recorded;
    for (const store::DirRecord& d : store_.dirs()) {
        recorded.insert(d.path);
        if (d.kind == "fork" && !d.released && !d.removing) {
            log_line(fmt::format("releasing fork base {} (a fork cut short)", d.path));
            release(d.path);
        }
    }
    // Never recorded: the fork was cut while its children started, so none of them
    // was recorded (their VMMs were stopped above). Removed unless a VMM still holds
    // its users.lock (vm::ForkBase), which nothing should.
    std::error_code ec;
    for (fs::directory_iterator it(options_.state_dir + "/forks", ec), end; !ec && it != end; it.increment(ec)) {
        const std::string path = it->path().string();
        if (recorded.count(path)) continue;
        Fd lock(::open((path + "/users.lock").c_str(), O_RDONLY | O_CLOEXEC));
        if (lock && ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
            // The fork was cut after the VMM froze its parent into this base and before
            // the store took it: the parent (adopted above) runs over it. It becomes the
            // store's as in fork(); released (collected with the last VM directory whose
            // files name it: the parent's disk chain, refreshed here) when one names it,
            // else kept recorded (released at a later start once no VMM holds it).
            bool named = false;
            for (const store::DirRecord& d : store_.dirs()) {
                if (d.kind != "vm" || d.removing) continue;
                const std::vector<std::string> files = store::external_files(d.path);
                store_.add_refs(d.path, files);
                for (const std::string& f : files) named = named || f.rfind(path + "/", 0) == 0;
            }
            store::track_dir(store_, path, "fork", "");
            if (named) release(path);
            log_line(fmt::format("fork base {}: no record named it, a VMM uses it: recorded{}", path,
                                 named ? ", kept while a sandbox's files name it" : ""));
            continue;
        }
        std::error_code rm;
        fs::remove_all(path, rm);
        log_line(fmt::format("removed fork base {} (a fork cut short){}", path, rm ? ": " + rm.message() : ""));
    }
}

void SandboxManager::watch() {
    while (!stopping_) {
        try {
            check_sandboxes();
            check_snapshots();
        } catch (const std::exception& e) {
            log_line(fmt::format("watcher: {}", e.what()));
        }
        std::unique_lock lock(watch_mutex_);
        watch_wake_.wait_for(lock, std::chrono::milliseconds(500), [this] { return stopping_.load(); });
    }
}

void SandboxManager::check_sandboxes() {
    const int64_t now = store::now_ms();
    for (SandboxRecord r : store_.all_sandboxes()) {
        if (stopping_) return;
        const SandboxState st = state_of(r);
        if (r.end_at_ms && now >= *r.end_at_ms && allowed(SandboxOp::expire, st)) {
            // on_timeout "archive": archived (end_at null from then on), unless it is in
            // error (nothing to pack) or the archive fails: then deleted as "delete" would.
            if (r.on_timeout == "archive" && st != SandboxState::error) {
                log_line(fmt::format("sandbox {}: its timeout passed: archiving it", r.id));
                try {
                    archive(r.id, /*wait=*/true);  // the watcher waits: a failure falls through to delete
                    continue;
                } catch (const std::exception& e) {
                    log_line(fmt::format("sandbox {}: archiving at its timeout: {}: deleting it", r.id, e.what()));
                }
            } else {
                log_line(fmt::format("sandbox {}: its timeout passed: deleting it", r.id));
            }
            try {
                remove(r.id);
            } catch (const std::exception& e) {
                log_line(fmt::format("sandbox {}: deleting at its timeout: {}", r.id, e.what()));
            }
            continue;
        }
        if (st == SandboxState::running && r.autosleep_s > 0 && vms_.alive(r.vm_id)) check_idle(r, now);
        if (st == SandboxState::creating || !allowed(SandboxOp::vmm_died, st) || vms_.alive(r.vm_id)) continue;
        const auto s = slot(r.id);
        std::unique_lock op(s->op, std::try_to_lock);
        if (!op.owns_lock()) continue;  // an operation runs: it will see the VMM gone itself
        auto again = store_.sandbox(r.id);
        if (!again || !allowed(SandboxOp::vmm_died, state_of(*again)) || vms_.alive(again->vm_id)) continue;
        if (const pid_t pid = vms_.pid(again->vm_id); pid > 0) ::waitpid(pid, nullptr, WNOHANG);
        if (vms_.ended_in_reboot(again->vm_id)) {
            // The guest rebooted itself: booted again over its disks, as POST .../reboot does.
            op.unlock();
            reboot_in_background(*again);
            continue;
        }
        set_state(*again, SandboxState::error, "its VMM exited: " + vms_.end_reason(again->vm_id));
        log_line(fmt::format("sandbox {}: {}", again->id, again->error));
    }
}

void SandboxManager::check_snapshots() {
    for (SnapshotRecord s : store_.snapshots("", "", INT64_MAX)) {
        if (s.state != "ready" || s.durable) continue;
        if (snapshot::is_durable(s.dir)) {
            s.durable = true;
            store_.add_refs(s.dir, store::external_files(s.dir));
            store_.put_snapshot(s);
            continue;
        }
        const auto owner = store_.sandbox(s.sandbox_id);
        if (!owner || owner->vm_id.empty() || !vms_.alive(owner->vm_id)) {
            if (snapshot::is_durable(s.dir)) continue;  // finished just now: next round
            s.state = "error";
            s.error = "its sandbox's VMM ended before the snapshot was saved";
            store_.put_snapshot(s);
        }
    }
}

}  // namespace nanovm::daemon
