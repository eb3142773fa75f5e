// Templates (template_manager.hpp).
#include "api/daemon/template/template_manager.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "api/agent_client/agent_client.hpp"
#include "api/daemon/random_bytes.hpp"
#include "api/daemon/store/file_refs.hpp"
#include "snapshot/manifest.hpp"
#include "vmm/log.hpp"

namespace nanovm::daemon {

namespace fs = std::filesystem;
using store::TemplateRecord;

namespace {

// How long a template from a snapshot waits for that snapshot to be durable.
constexpr auto kSnapshotWait = std::chrono::minutes(10);

std::string last_line(const std::string& text) {
    std::string t = text;
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
    const size_t nl = t.rfind('\n');
    t = nl == std::string::npos ? t : t.substr(nl + 1);
    return t.size() > 200 ? t.substr(t.size() - 200) : t;
}

// Seconds a client should wait before asking again: short at first, at most 5.
int retry_after(const TemplateRecord& t) {
    const int64_t elapsed_s = (store::now_ms() - t.created_ms) / 1000;
    return static_cast<int>(std::clamp<int64_t>(1 + elapsed_s / 10, 1, 5));
}

}  // namespace

bool valid_template_name(std::string_view name) {
    if (name.empty() || name.size() > 63) return false;
    for (size_t i = 0; i < name.size(); ++i) {
        const char c = name[i];
        const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-'))) return false;
    }
    return true;
}

std::string implicit_template_name(const std::string& image, uint32_t cpus, uint32_t memory_mb) {
    return fmt::format("auto:{}:{}x{}", image, cpus, memory_mb);
}

TemplateManager::TemplateManager(TemplateOptions options, store::Store& store, store::ImagePins& pins)
    : options_(std::move(options)),
      store_(store),
      pins_(pins),
      vms_(options_.state_dir),
      pool_(options_.state_dir + "/standbys", options_.max_standbys) {}

TemplateManager::~TemplateManager() {
    stopping_ = true;
    for (Build& b : builds_)
        if (b.thread.joinable()) b.thread.join();
    for (auto& [name, vms] : warm_)
        for (const VmDriver::Started& vm : vms) stop_warm(vm);
}

void TemplateManager::start_thread(std::function<void()> fn) {
    for (auto it = builds_.begin(); it != builds_.end();) {
        if (!*it->done) {
            ++it;
            continue;
        }
        it->thread.join();
        it = builds_.erase(it);
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    builds_.push_back(Build{std::thread([fn = std::move(fn), done] {
                                fn();
                                *done = true;
                            }),
                            done});
}

void TemplateManager::stop_warm(const VmDriver::Started& vm) {
    vms_.stop(vm.vm_id);
    if (vm.pid > 0) ::waitpid(vm.pid, nullptr, WNOHANG);
    store::release_and_collect(store_, vm.dir);
}

void TemplateManager::refill_warm(const TemplateRecord& t, int64_t pending_mb) {
    size_t have = warming_.size();
    for (const auto& [name, vms] : warm_) have += vms.size();
    if (have >= options_.max_warm || stopping_) return;
    if (headroom_locked() - pending_mb < t.memory_mb) return;  // the sandboxes' memory first
    const auto warming = warming_.insert(warming_.end(), Warming{t.memory_mb, false});
    warm_memory_[t.name] = t.memory_mb;
    start_thread([this, t, warming] {
        std::optional<VmDriver::Started> vm;
        try {
            vm = vms_.start(static_cast<uint32_t>(t.cpus), static_cast<uint32_t>(t.memory_mb), "", t.restore_dir,
                            pool_.sockets(static_cast<uint32_t>(t.cpus), static_cast<uint32_t>(t.memory_mb)));
            store::track_dir(store_, vm->dir, "vm", "warm:" + t.name);
            // Its agent answered (start returns then): its first-touch faults are
            // done. It waits paused, without CPU, its kvmclock frozen (the guest does
            // not see its wait as a jump of its monotonic clock: after a long one a
            // guest warns of soft lockups and RCU stalls); the create that takes it
            // resumes it and steps its wall clock (resync).
            vms_.pause(vm->vm_id, /*freeze_clock=*/true);
        } catch (const std::exception& e) {
            log_line(fmt::format("template {}: a warm VM did not start: {}", t.name, e.what()));
            if (vm) {
                stop_warm(*vm);
                vm.reset();
            }
        }
        std::lock_guard lock(mutex_);
        const bool cancelled = warming->cancelled;
        warming_.erase(warming);
        if (!vm) return;
        const auto now = store_.template_record(t.name);
        if (stopping_ || cancelled || !now || now->dir != t.dir) {
            if (cancelled)
                log_line(fmt::format("template {}: warm VM {} stopped: a sandbox needed its memory", t.name, vm->vm_id));
            stop_warm(*vm);  // deleted meanwhile, or its memory went to a sandbox
            return;
        }
        warm_[t.name].push_back(*vm);
        log_line(fmt::format("template {}: warm VM {} ready (paused; {} warm)", t.name, vm->vm_id,
                             warm_[t.name].size()));
    });
}

std::optional<VmDriver::Started> TemplateManager::take_warm(const std::string& name) {
    std::lock_guard lock(mutex_);
    auto it = warm_.find(name);
    while (it != warm_.end() && !it->second.empty()) {
        const VmDriver::Started vm = it->second.front();
        it->second.erase(it->second.begin());
        if (vms_.alive(vm.vm_id)) {
            // The sandbox that takes it is not reserved yet: its memory is pending.
            if (auto t = store_.template_record(name); t && t->state == "ready") refill_warm(*t, t->memory_mb);
            return vm;
        }
        log_line(fmt::format("template {}: warm VM {} ended: {}", name, vm.vm_id, vms_.end_reason(vm.vm_id)));
        stop_warm(vm);
    }
    return std::nullopt;
}

void TemplateManager::release_warm(const VmDriver::Started& vm) { stop_warm(vm); }

std::string TemplateManager::new_dir() const {
    unsigned char b[8];
    random_bytes(b, sizeof(b));
    std::string hex;
    for (unsigned char c : b) hex += fmt::format("{:02x}", c);
    return options_.state_dir + "/templates/" + hex;
}

void TemplateManager::recover() {
    for (TemplateRecord t : store_.templates()) {
        if (t.state != "building") continue;
        if (!t.snapshot_id.empty()) {
            std::lock_guard lock(mutex_);
            start_build(t);  // it only waits for its snapshot
        } else if (t.implicit) {
            log_line(fmt::format("template {}: its build was cut short: the next create builds it again", t.name));
            drop(t);
        } else {
            t.state = "failed";
            t.error = "the daemon stopped during its build: delete it and create it again";
            t.used_ms = store::now_ms();
            store_.put_template(t);
        }
    }
    // Build VMs and warm VMs of a previous daemon: stopped, their directories released.
    for (const store::DirRecord& d : store_.dirs()) {
        if (d.kind != "vm" || d.released || (d.owner.rfind("template:", 0) != 0 && d.owner.rfind("warm:", 0) != 0))
            continue;
        vms_.stop(fs::path(d.path).filename().string());
        store::release_and_collect(store_, d.path);
    }
}

TemplateRecord TemplateManager::must_get(const std::string& name) {
    auto t = store_.template_record(name);
    if (!t) throw ApiError("template_not_found", fmt::format("no template {}", name.substr(0, 80)));
    return *t;
}

TemplateRecord TemplateManager::get(const std::string& name) { return must_get(name); }

std::vector<TemplateRecord> TemplateManager::list() { return store_.templates(); }

TemplateRecord TemplateManager::create(const NewTemplate& request) {
    if (!valid_template_name(request.name))
        throw ApiError("invalid_value", fmt::format("template name \"{}\": 1 to 63 of a-z 0-9 . _ - (starting with a "
                                                    "letter or digit)",
                                                    request.name.substr(0, 80)));
    TemplateRecord t;
    t.name = request.name;
    t.state = "building";
    t.setup = request.setup;
    t.created_ms = store::now_ms();
    if (!request.snapshot_id.empty()) {
        if (!request.image.empty() || !request.setup.empty())
            throw ApiError("invalid_field", "a template from a snapshot_id takes no image or setup (the snapshot is "
                                            "taken as it is)");
        auto snap = store_.snapshot(request.snapshot_id);
        if (!snap) throw ApiError("snapshot_not_found", fmt::format("no snapshot {}", request.snapshot_id.substr(0, 64)));
        if (snap->state == "error")
            throw ApiError("wrong_state", fmt::format("snapshot {} failed: {}", snap->id, snap->error));
        if ((request.cpus && *request.cpus != snap->cpus) || (request.memory_mb && *request.memory_mb != snap->memory_mb))
            throw ApiError("shape_mismatch", fmt::format("the snapshot's shape is {} cpus, {} MiB: a template takes it "
                                                         "as it is",
                                                         snap->cpus, snap->memory_mb));
        t.snapshot_id = snap->id;
        t.image = snap->image;
        t.image_digest = snap->image_digest;  // pinned while the template lasts
        t.cpus = snap->cpus;
        t.memory_mb = snap->memory_mb;
        t.restore_dir = snap->dir;
    } else {
        t.image = request.image.empty() ? "default" : request.image;
        (void)VmDriver::image_path(t.image);  // an unknown name stops here
        t.cpus = request.cpus.value_or(2);
        t.memory_mb = request.memory_mb.value_or(1024);
    }
    std::lock_guard lock(mutex_);
    if (store_.template_record(t.name))
        throw ApiError("template_exists", fmt::format("a template named {} exists: delete it first", t.name));
    t.dir = new_dir();
    if (t.restore_dir.empty()) t.restore_dir = t.dir + "/snapshot";
    std::error_code ec;
    fs::create_directories(t.dir, ec);
    if (ec) throw ApiError(ec == std::errc::no_space_on_device ? "disk_full" : "internal",
                           fmt::format("{}: {}", t.dir, ec.message()));
    store_.add_dir(t.dir, "template", t.name);
    if (!t.snapshot_id.empty() && snapshot::is_durable(t.restore_dir)) {
        std::vector<std::string> files;
        for (fs::directory_iterator it(t.restore_dir, ec), end; !ec && it != end; it.increment(ec))
            files.push_back(it->path().string());
        store_.add_refs(t.dir, files);  // the snapshot's files stay while the template does
        t.state = "ready";
        store_.put_template(t);
        return t;
    }
    store_.put_template(t);
    start_build(t);
    return t;
}

void TemplateManager::start_build(TemplateRecord t) {
    if (t.snapshot_id.empty()) building_memory_ += t.memory_mb;
    start_thread([this, t] { build(t); });
}

void TemplateManager::build(TemplateRecord t) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string error;
    if (!t.snapshot_id.empty()) {
        // From a snapshot still being saved: ready once it is durable.
        const auto deadline = t0 + kSnapshotWait;
        for (;;) {
            const auto snap = store_.snapshot(t.snapshot_id);
            if (snapshot::is_durable(t.restore_dir)) break;
            if (!snap || snap->state == "error") {
                error = snap ? "its snapshot failed: " + snap->error : "its snapshot was deleted before it was saved";
                break;
            }
            if (stopping_ || std::chrono::steady_clock::now() >= deadline) {
                error = "its snapshot was not saved in time";
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        if (error.empty()) {
            std::vector<std::string> files;
            std::error_code ec;
            for (fs::directory_iterator it(t.restore_dir, ec), end; !ec && it != end; it.increment(ec))
                files.push_back(it->path().string());
            store_.add_refs(t.dir, files);
        }
    } else {
        error = pin_image(t);
        if (error.empty()) error = boot_and_snapshot(t);
        if (error.empty()) store_.add_refs(t.dir, store::external_files(t.restore_dir));
    }
    {
        std::lock_guard lock(mutex_);
        if (t.snapshot_id.empty()) building_memory_ -= t.memory_mb;
        t.state = error.empty() ? "ready" : "failed";
        t.error = error;
        t.used_ms = store::now_ms();
        store_.put_template(t);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (error.empty())
        log_line(fmt::format("template {}: ready in {:.1f} s", t.name, s));
    else
        log_line(fmt::format("template {}: failed after {:.1f} s: {}", t.name, s, error));
    collect_implicit();
}

std::string TemplateManager::pin_image(TemplateRecord& t) {
    try {
        t.image_digest = pins_.pin(VmDriver::image_path(t.image)).digest;
    } catch (const std::exception& e) {
        return fmt::format("pinning root image {}: {}", t.image, e.what());
    }
    {
        std::lock_guard lock(mutex_);
        if (store_.template_record(t.name)) store_.put_template(t);  // recorded before the boot (not if deleted meanwhile)
    }
    pins_.recorded(t.image_digest);
    return "";
}

std::string TemplateManager::boot_and_snapshot(const TemplateRecord& t) {
    const std::string image = pins_.path_of(t.image_digest);
    if (image.empty()) return fmt::format("its pinned root image images/{} is gone", t.image_digest);
    VmDriver::Started vm;
    try {
        vm = vms_.start(static_cast<uint32_t>(t.cpus), static_cast<uint32_t>(t.memory_mb), image);
    } catch (const std::exception& e) {
        return e.what();
    }
    store::track_dir(store_, vm.dir, "vm", "template:" + t.name);
    std::string error;
    try {
        for (size_t i = 0; i < t.setup.size() && error.empty(); ++i) {
            if (stopping_) throw std::runtime_error("the daemon is stopping");
            agent::AgentClient client = vms_.agent(vm.vm_id);
            agent::Command command = agent::Command::shell_command(t.setup[i]);
            command.timeout = options_.setup_timeout;
            const agent::ExecResult r = client.run(command);
            if (!r.status.success())
                error = fmt::format("setup line {} ({}) {}: {}", i + 1, t.setup[i].substr(0, 80),
                                    r.status.timed_out ? fmt::format("timed out after {} s", options_.setup_timeout.count())
                                                       : fmt::format("exited {}", r.status.shell_code()),
                                    last_line(r.stderr_data.empty() ? r.stdout_data : r.stderr_data));
        }
        if (error.empty() && !vms_.snapshot(vm.vm_id, t.restore_dir, /*wait_durable=*/true, /*leave_paused=*/false))
            error = "its snapshot was not durable";
    } catch (const agent::AgentError& e) {
        error = fmt::format("a setup line could not start: {} ({})", e.message(), e.errno_name());
    } catch (const std::exception& e) {
        error = e.what();
    }
    const pid_t pid = vms_.pid(vm.vm_id);
    if (!vms_.stop(vm.vm_id)) log_line(fmt::format("template {}: its build VM {} did not stop", t.name, vm.vm_id));
    if (pid > 0) ::waitpid(pid, nullptr, WNOHANG);
    store::release_and_collect(store_, vm.dir);
    return error;
}

TemplateUse TemplateManager::ready_use(TemplateRecord t) {
    t.used_ms = store::now_ms();
    ++t.uses;
    store_.put_template(t, store::Sync::relaxed);  // a use count: the create's own records follow, full
    TemplateUse u{t.name, t.restore_dir, t.image, t.image_digest, static_cast<uint32_t>(t.cpus),
                  static_cast<uint32_t>(t.memory_mb), {}};
    u.standby_sockets = pool_.sockets(u.cpus, u.memory_mb);
    // The create that uses it is not reserved yet: its memory is pending.
    // (Asked under the pool's lock: the headroom without its standbys, which it counts.)
    pool_.note_use(u.cpus, u.memory_mb, [this, &u] { return headroom_locked(/*standbys=*/false) - u.memory_mb; });
    refill_warm(t, u.memory_mb);
    return u;
}

TemplateUse TemplateManager::use(const std::string& name) {
    std::unique_lock lock(mutex_);
    TemplateRecord t = must_get(name);
    if (t.state == "building")
        throw TemplateBuilding(fmt::format("template {} is being built: retry in a few seconds", t.name), retry_after(t));
    if (t.state != "ready")
        throw ApiError("wrong_state", fmt::format("template {} failed: {} (delete it and create it again)", t.name, t.error));
    return ready_use(std::move(t));
}

std::optional<TemplateUse> TemplateManager::use_implicit(const std::string& image, uint32_t cpus, uint32_t memory_mb) {
    if (options_.max_implicit == 0) return std::nullopt;
    (void)VmDriver::image_path(image);
    const std::string name = implicit_template_name(image, cpus, memory_mb);
    std::unique_lock lock(mutex_);
    auto t = store_.template_record(name);
    const auto retry_ms = std::chrono::duration_cast<std::chrono::milliseconds>(kRetryFailedAfter).count();
    if (!t || (t->state == "failed" && store::now_ms() - t->used_ms >= retry_ms)) {
        if (t) drop(*t);
        TemplateRecord n;
        n.name = name;
        n.implicit = true;
        n.state = "building";
        n.image = image;
        n.cpus = cpus;
        n.memory_mb = memory_mb;
        n.created_ms = store::now_ms();
        n.dir = new_dir();
        n.restore_dir = n.dir + "/snapshot";
        std::error_code ec;
        fs::create_directories(n.dir, ec);
        store_.add_dir(n.dir, "template", n.name);
        store_.put_template(n);
        start_build(n);
        log_line(fmt::format("template {}: building (the first create of image {}, {} cpus, {} MiB)", name, image, cpus,
                             memory_mb));
        throw TemplateBuilding(fmt::format("the first create of image {} with {} cpus and {} MiB: its template {} "
                                           "is being built; retry in a few seconds",
                                           image, cpus, memory_mb, name),
                               1);
    }
    if (t->state == "building")
        throw TemplateBuilding(fmt::format("template {} is being built: retry in a few seconds", name), retry_after(*t));
    if (t->state != "ready")
        throw ApiError("vm_error", fmt::format("building template {} failed: {} (a create {} s after the failure builds "
                                               "it again)",
                                               name, t->error, kRetryFailedAfter.count()));
    return ready_use(std::move(*t));
}

void TemplateManager::made_sandbox(const std::string& name, const std::string& sandbox_id) {
    // The create's running record follows, full (store::Sync::relaxed).
    store_.add_template_sandbox(name, sandbox_id, store::Sync::relaxed);
}

void TemplateManager::remove(const std::string& name, bool force) {
    std::lock_guard lock(mutex_);
    const TemplateRecord t = must_get(name);
    if (t.state == "building")
        throw ApiError("wrong_state", fmt::format("template {} is being built: delete it once it is ready or failed", t.name));
    const std::vector<std::string> users = store_.template_sandboxes(t.name);
    if (!users.empty() && !force)
        throw ApiError("template_in_use",
                       fmt::format("{} sandbox(es) were made from template {} (the first: {}): delete them first, or "
                                   "force=true (its files then stay until they are gone)",
                                   users.size(), t.name, users.front()));
    drop(t);
}

void TemplateManager::drop(const TemplateRecord& t) {
    if (auto it = warm_.find(t.name); it != warm_.end()) {
        for (const VmDriver::Started& vm : it->second) stop_warm(vm);
        warm_.erase(it);
    }
    store_.delete_template(t.name);
    if (!t.dir.empty()) store::release_and_collect(store_, t.dir);
    pins_.collect();  // its image, if nothing else names it
}

void TemplateManager::collect_implicit() {
    std::lock_guard lock(mutex_);
    std::vector<TemplateRecord> implicit;
    for (const TemplateRecord& t : store_.templates())
        if (t.implicit) implicit.push_back(t);
    if (implicit.size() <= options_.max_implicit) return;
    size_t over = implicit.size() - options_.max_implicit;
    std::sort(implicit.begin(), implicit.end(),
              [](const TemplateRecord& a, const TemplateRecord& b) { return a.used_ms < b.used_ms; });
    for (const TemplateRecord& t : implicit) {
        if (over == 0) break;
        if (t.state == "building" || !store_.template_sandboxes(t.name).empty()) continue;
        log_line(fmt::format("template {}: collected (least recently used beyond --implicit-templates {})", t.name,
                             options_.max_implicit));
        drop(t);
        --over;
    }
}

int64_t TemplateManager::held_memory_mb() {
    std::lock_guard lock(mutex_);
    return held_locked();
}

int64_t TemplateManager::held_locked(bool standbys) {
    int64_t held = building_memory_ + (standbys ? pool_.memory_mb() : 0);
    for (const Warming& w : warming_)
        if (!w.cancelled) held += w.memory_mb;
    for (const auto& [name, vms] : warm_) held += static_cast<int64_t>(vms.size()) * warm_memory_[name];
    return held;
}

void TemplateManager::set_memory_budget(int64_t cap_mb, std::function<int64_t()> sandboxes_mb) {
    std::lock_guard lock(mutex_);
    memory_cap_mb_ = cap_mb;
    sandboxes_mb_ = std::move(sandboxes_mb);
}

int64_t TemplateManager::headroom_locked(bool standbys) {
    if (memory_cap_mb_ <= 0 || !sandboxes_mb_) return std::numeric_limits<int64_t>::max() / 2;
    return memory_cap_mb_ - sandboxes_mb_() - held_locked(standbys);
}

int64_t TemplateManager::yield_memory(int64_t need_mb) {
    std::lock_guard lock(mutex_);
    int64_t freed = 0;
    size_t cancelled = 0, stopped = 0;
    for (Warming& w : warming_) {
        if (freed >= need_mb) break;
        if (w.cancelled) continue;
        w.cancelled = true;  // its thread stops the VM once its restore returns
        freed += w.memory_mb;
        ++cancelled;
    }
    const size_t standbys_before = pool_.size();
    if (freed < need_mb) freed += pool_.yield(need_mb - freed);
    const size_t standbys_ended = standbys_before - pool_.size();
    std::vector<VmDriver::Started> victims;
    for (auto& [name, vms] : warm_) {
        while (freed < need_mb && !vms.empty()) {
            victims.push_back(vms.front());
            vms.erase(vms.begin());
            freed += warm_memory_[name];
            ++stopped;
        }
    }
    // Counted free now; stopped on a thread of their own: the caller holds the sandbox
    // manager's mutex, which every sandbox call takes, and a VMM's stop may wait for it
    // to exit.
    if (!victims.empty())
        start_thread([this, victims] {
            for (const VmDriver::Started& vm : victims) stop_warm(vm);
        });
    if (freed > 0)
        log_line(fmt::format("templates: {} MiB yielded to a sandbox ({} asked; {} warm restore(s) cancelled, {} "
                             "standby(s) ended, {} warm VM(s) stopped)",
                             freed, need_mb, cancelled, standbys_ended, stopped));
    return freed;
}

}  // namespace nanovm::daemon
