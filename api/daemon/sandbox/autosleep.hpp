// When a running sandbox is idle enough to be put to sleep (issue 19, "autosleep"):
// no API call that needs its guest (exec, files, sessions, commands) for its
// autosleep_s, none in flight, no session command running in it (its call holds an
// activity while it runs), no background command running in it (the agent's job list,
// asked once the idle time is reached: note_commands), and its VMM process using less than a
// fraction of one CPU (a server or job that computes keeps it awake). The VMM's CPU
// time is the host's view of the guest's vCPUs (plus its device thread); samples at
// least `cpu_window_ms` apart decide. Pure bookkeeping: the manager samples, asks
// and does the sleeping; this never wakes or touches a sandbox.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace nanovm::daemon {

/// How idle is measured.
struct IdlePolicy {
    double cpu_fraction = 0.25;   ///< above this share of one CPU (VMM CPU time / wall time) it is busy
    int64_t cpu_window_ms = 2000;  ///< CPU samples at least this far apart are compared
};

/// Per-sandbox activity, by sandbox id. Thread-safe. Times are the caller's clock in
/// ms (the manager: store::now_ms()).
class IdleTracker {
public:
    explicit IdleTracker(IdlePolicy policy = {}) : policy_(policy) {}

    /// A call that needs the guest starts (exec, a file call, a session command, a
    /// background command): busy until the matching end_activity.
    void begin_activity(const std::string& id, int64_t now_ms);
    /// It ended: idle from now (if nothing else is in flight).
    void end_activity(const std::string& id, int64_t now_ms);
    /// The VMM's CPU time (ms) at `now_ms`: compared with the previous sample once
    /// they are cpu_window_ms apart; over cpu_fraction the sandbox was active. A
    /// smaller value than before (a new VMM: a reboot) starts the samples over.
    void sample_cpu(const std::string& id, int64_t now_ms, double cpu_ms);
    /// What the guest's agent listed at `now_ms`: `running` background commands run
    /// in it (they belong to the agent and outlive the call that started them, so no
    /// activity covers them). Any running is activity: idle counts from now_ms.
    void note_commands(const std::string& id, int64_t now_ms, size_t running);
    /// How long it has been idle at `now_ms` (0 while an activity is in flight).
    /// A sandbox never seen counts from its first call here.
    int64_t idle_ms(const std::string& id, int64_t now_ms);
    /// Starts over at `now_ms` (woken, resumed, rebooted): idle from now, no CPU sample.
    void reset(const std::string& id, int64_t now_ms);
    /// Drops a deleted sandbox.
    void forget(const std::string& id);

    const IdlePolicy& policy() const { return policy_; }

private:
    struct Entry {
        int64_t last_active_ms = 0;
        int in_flight = 0;
        std::optional<std::pair<int64_t, double>> sample;  ///< (time, cpu ms) of the window's start
    };
    Entry& entry(const std::string& id, int64_t now_ms);

    IdlePolicy policy_;
    std::mutex mutex_;
    std::map<std::string, Entry> entries_;
};

}  // namespace nanovm::daemon
