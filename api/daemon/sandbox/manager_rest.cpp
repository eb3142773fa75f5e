// The sandbox manager: rest states (manager.hpp): sleep and autosleep, reboot
// (asked for, or the guest's own), and the activities autosleep waits for.
#include <sys/wait.h>

#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "api/daemon/sandbox/manager.hpp"
#include "api/daemon/sandbox/process_stats.hpp"
#include "vmm/log.hpp"

namespace nanovm::daemon {

using store::SandboxRecord;

SandboxManager::Activity::Activity(SandboxManager* manager, std::string id) : manager_(manager), id_(std::move(id)) {
    manager_->idle_.begin_activity(id_, store::now_ms());
}

SandboxManager::Activity::Activity(Activity&& other) noexcept
    : manager_(std::exchange(other.manager_, nullptr)), id_(std::move(other.id_)) {}

SandboxManager::Activity::~Activity() {
    if (manager_) manager_->idle_.end_activity(id_, store::now_ms());
}

SandboxRecord SandboxManager::sleep(const std::string& id) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    LockedRecord locked = lock_record(id);
    SandboxRecord& r = locked.record;
    const SandboxState st = state_of(r);
    require_allowed(SandboxOp::sleep, st);
    if (no_op(SandboxOp::sleep, st)) return r;
    const auto t1 = Clock::now();
    // The guest's clock frozen with it: at the wake its monotonic clock has not jumped
    // (no timers to catch up) and its wall clock is stepped (resume_vmm). Paused: its
    // vCPUs stand already, its clock running.
    if (st == SandboxState::running) vms_.pause(r.vm_id, /*freeze_clock=*/true);
    const auto t2 = Clock::now();
    flip_state(r, *transition(SandboxOp::sleep).to);
    const auto t3 = Clock::now();
    // Where a sleep's time goes in the daemon (the client's time beyond it is the
    // HTTP server's and its own): tools/bench/run lifecycle reads this line.
    log_line(fmt::format("sandbox {}: asleep in {:.1f} ms: lookup {:.1f} ms, pause {:.1f} ms, store {:.1f} ms", r.id,
                         ms_between(t0, t3), ms_between(t0, t1), ms_between(t1, t2), ms_between(t2, t3)));
    return r;
}

void SandboxManager::check_idle(const SandboxRecord& r, int64_t now) {
    if (const pid_t pid = vms_.pid(r.vm_id); pid > 0)
        if (const auto cpu = process_cpu_ms(pid)) idle_.sample_cpu(r.id, now, *cpu);
    if (idle_.idle_ms(r.id, now) < r.autosleep_s * 1000) return;
    // Idle long enough by the calls and the CPU: a background command still running in
    // the guest (a server waiting on I/O, `sleep 600`) keeps it awake.
    idle_.note_commands(r.id, store::now_ms(), running_commands(r));
    const int64_t idle = idle_.idle_ms(r.id, store::now_ms());
    if (idle < r.autosleep_s * 1000) return;
    const auto s = slot(r.id);
    std::unique_lock op(s->op, std::try_to_lock);
    if (!op.owns_lock()) return;  // an operation runs: not idle
    auto again = store_.sandbox(r.id);
    if (!again || !allowed(SandboxOp::autosleep, state_of(*again)) || idle_.idle_ms(r.id, store::now_ms()) < idle)
        return;
    try {
        vms_.pause(again->vm_id, /*freeze_clock=*/true);  // as sleep()
    } catch (const std::exception& e) {
        log_line(fmt::format("sandbox {}: autosleep: {}", again->id, e.what()));
        idle_.reset(again->id, store::now_ms());  // tried: not again at once
        return;
    }
    flip_state(*again, *transition(SandboxOp::autosleep).to);
    log_line(fmt::format("sandbox {}: idle for {:.1f} s (autosleep_s {}): sleeping", again->id,
                         static_cast<double>(idle) / 1000, again->autosleep_s));
}

size_t SandboxManager::running_commands(const SandboxRecord& r) {
    try {
        // Straight to its VM's agent: agent_for() would count as a call that needs the guest.
        agent::AgentClient client = vms_.agent(r.vm_id, std::chrono::seconds(2));
        client.set_deadline(std::chrono::steady_clock::now() + std::chrono::seconds(5));
        size_t running = 0;
        for (const agent::JobInfo& j : client.list_jobs()) running += j.running ? 1 : 0;
        return running;
    } catch (const agent::AgentError& e) {
        // EOPNOTSUPP: an agent without background commands has none running.
        if (e.errno_name() != "EOPNOTSUPP")
            log_line(fmt::format("sandbox {}: autosleep: listing its commands: {} ({})", r.id, e.message(),
                                 e.errno_name()));
    } catch (const std::exception& e) {
        log_line(fmt::format("sandbox {}: autosleep: listing its commands: {}", r.id, e.what()));
    }
    return 0;  // cannot tell: the calls and the CPU decide
}

SandboxRecord SandboxManager::reboot(const std::string& id) {
    const auto s = slot(must_get(id).id);
    std::lock_guard op(s->op);
    SandboxRecord r = must_get(id);
    require_allowed(SandboxOp::reboot, state_of(r));
    if (r.vm_id.empty()) throw ApiError("wrong_state", "cannot reboot: the sandbox never had a VM: delete it");
    const SandboxState before = state_of(r);
    set_state(r, *transition(SandboxOp::reboot).during, r.error);
    // The VMM is stopped at once below (a fork-bombed guest would not power off), which
    // to the guest is a power cut: a running guest first writes back what its page
    // cache holds (a file written through the API and not yet synced), within 5 s.
    if (before == SandboxState::running) sync_guest(r);
    if (vms_.alive(r.vm_id)) {
        const pid_t pid = vms_.pid(r.vm_id);
        if (!vms_.stop(r.vm_id)) {
            set_state(r, SandboxState::error, "reboot: its VMM did not stop");
            throw ApiError("vm_error", "reboot: the sandbox's VMM did not stop");
        }
        if (pid > 0) ::waitpid(pid, nullptr, WNOHANG);  // our child unless adopted after a restart
    }
    boot_again(r);
    return r;
}

void SandboxManager::sync_guest(const SandboxRecord& r) noexcept {
    try {
        agent::AgentClient client = vms_.agent(r.vm_id, std::chrono::seconds(2));
        client.set_deadline(std::chrono::steady_clock::now() + std::chrono::seconds(5));
        agent::Command sync = agent::Command::program({"sync"});
        sync.timeout = std::chrono::seconds(5);
        client.run(sync);
    } catch (const std::exception& e) {
        log_line(fmt::format("sandbox {}: reboot: the guest's sync did not finish ({}): its unsynced writes are lost",
                             r.id, e.what()));
    }
}

void SandboxManager::boot_again(SandboxRecord& r) {
    try {
        vms_.reboot(r.vm_id);
    } catch (const ApiError& e) {
        set_state(r, SandboxState::error, e.what());
        throw;
    }
    set_state(r, *transition(SandboxOp::reboot).to);
    idle_.reset(r.id, store::now_ms());
    log_line(fmt::format("sandbox {}: booted again over its disks (VM {})", r.id, r.vm_id));
}

void SandboxManager::reboot_in_background(const SandboxRecord& seen) {
    {
        std::lock_guard lock(watch_mutex_);
        if (stopping_) return;  // the next daemon finds it dead and reboots it
        ++background_;
    }
    std::thread([this, id = seen.id] {
        try {
            const auto s = slot(id);
            std::lock_guard op(s->op);
            auto r = store_.sandbox(id);
            if (r && allowed(SandboxOp::vmm_died, state_of(*r)) && !vms_.alive(r->vm_id)) {
                log_line(fmt::format("sandbox {}: its guest rebooted itself: booting it again over its disks", id));
                set_state(*r, *transition(SandboxOp::reboot).during);
                boot_again(*r);
            }
        } catch (const std::exception& e) {
            log_line(fmt::format("sandbox {}: booting again after the guest's reboot: {}", id, e.what()));
        }
        std::lock_guard lock(watch_mutex_);
        --background_;
        watch_wake_.notify_all();
    }).detach();
}

}  // namespace nanovm::daemon
