// The VMM process of one sandbox (see vmm_process.hpp).
#include "api/vm/vmm_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <optional>
#include <set>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "api/agent_client/agent_client.hpp"
#include "api/vm/boot_record.hpp"
#include "api/vm/control_server.hpp"
#include "api/vm/device_options.hpp"
#include "api/vm/linux_vm.hpp"
#include "api/vm/paths.hpp"
#include "api/vm/scratch_disk.hpp"
#include "api/vm/standby_keeper.hpp"
#include "api/vm/state_dir.hpp"
#include "api/vm/termination_signals.hpp"
#include "api/vm/vm_id.hpp"
#include "devices/virtio/blk/layered_disk.hpp"
#include "snapshot/snapshot_writer.hpp"
#include "snapshot/uffd_backend.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"
#include "vmm/log.hpp"
#include "vmm/printable.hpp"

namespace nanovm::vm {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// A guest kernel that panics says why on its console before the stack dump that
// ends it, then resets. Puts that line ("Kernel panic - not syncing: ...", "BUG: ...",
// an Oops) and the console's last lines into vmm.log, where `vm exec|stop|status|list`
// find them (vmm_log_tail). Lines are cut at 200 bytes.
// The last `count` lines of the guest console log, without the serial line's '\r',
// each cut at `width` bytes (for one-line messages).
std::vector<std::string> console_lines(const std::string& console_log, size_t count, size_t width) {
    std::vector<std::string> lines = file_tail(console_log, count);
    for (std::string& line : lines) {
        while (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.size() > width) line.resize(width);
        line = printable(line);  // the guest wrote it: no escape sequences on the user's terminal
    }
    return lines;
}

void log_crash_console(const std::string& console_log) {
    constexpr size_t kLastLines = 3;
    const std::vector<std::string> lines = console_lines(console_log, 400, 200);
    const size_t tail_from = lines.size() > kLastLines ? lines.size() - kLastLines : 0;
    for (size_t i = tail_from; i-- > 0;) {
        const std::string& line = lines[i];
        if (line.find("Kernel panic") != std::string::npos || line.find("BUG:") != std::string::npos ||
            line.find("Oops") != std::string::npos || line.find("general protection fault") != std::string::npos) {
            log_line("guest console: " + line);
            break;
        }
    }
    for (size_t i = tail_from; i < lines.size(); ++i) log_line("guest console: " + lines[i]);
}

enum class VmState { booting, running, paused, stopping };

const char* to_string(VmState s) {
    switch (s) {
        case VmState::booting: return "booting";
        case VmState::running: return "running";
        case VmState::paused: return "paused";
        case VmState::stopping: return "stopping";
    }
    return "unknown";
}

int64_t micros_since(Clock::time_point t0) {
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
}

// The readiness pipe: one line each, the first "ready" or "error" wins.
class ReadyPipe {
public:
    explicit ReadyPipe(int fd) : fd_(fd) {}
    void ready() { finish("ready\n"); }
    void error(const std::string& message, const std::string& console_log) {
        std::string text = "error " + one_line(message) + "\n";
        for (const std::string& line : console_lines(console_log, 25, 300)) text += "console " + one_line(line) + "\n";
        finish(text);
    }
    bool finished() {
        std::lock_guard lock(mutex_);
        return done_;
    }

private:
    static std::string one_line(std::string s) {
        for (char& c : s) {
            if (c == '\n' || c == '\r') c = ' ';
        }
        return s;
    }
    void finish(const std::string& text) {
        std::lock_guard lock(mutex_);
        if (done_) return;
        done_ = true;
        if (fd_.valid()) {
            size_t off = 0;
            while (off < text.size()) {
                const ssize_t n = ::write(fd_.get(), text.data() + off, text.size() - off);
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) break;
                off += static_cast<size_t>(n);
            }
        }
        fd_.reset();
    }

    std::mutex mutex_;
    Fd fd_;
    bool done_ = false;
};

// The VM's lifecycle state, shared by the control handlers, the readiness watcher,
// the stopper and the main thread.
class Lifecycle {
public:
    VmState state() {
        std::lock_guard lock(mutex_);
        return state_;
    }
    // Sets `to` if the state is `from`; returns whether it did.
    bool transition(VmState from, VmState to) {
        std::lock_guard lock(mutex_);
        if (state_ != from) return false;
        state_ = to;
        return true;
    }
    // Enters stopping from any state; returns the state before.
    VmState begin_stop() {
        std::lock_guard lock(mutex_);
        return std::exchange(state_, VmState::stopping);
    }
    void mark_ended() {
        {
            std::lock_guard lock(mutex_);
            ended_ = true;
        }
        cv_.notify_all();
    }
    // Waits until the guest ended or `timeout` passed; true if it ended.
    bool wait_ended(std::chrono::milliseconds timeout) {
        std::unique_lock lock(mutex_);
        return cv_.wait_for(lock, timeout, [this] { return ended_; });
    }
    bool ended() {
        std::lock_guard lock(mutex_);
        return ended_;
    }

private:
    std::mutex mutex_;
    std::condition_variable cv_;
    VmState state_ = VmState::booting;
    bool ended_ = false;
};

agent::Endpoint agent_endpoint(const VmPaths& paths) {
    return agent::Endpoint::vsock(paths.vsock_socket(), agent::proto::kAgentVsockPort);
}

// Waits until the guest agent answers a PING, then reports ready; or reports the
// failure and stops the VM when boot_timeout passes first.
// With `resync` (a restored VM), the agent first reseeds the guest's RNG, steps its
// wall clock and takes the hostname `hostname` (empty: the VM id); a booted VM with
// a `hostname` takes only that one. Only then is the VM ready.
// NANOVM_UFFD_TRACE=1: a restored VM's faults until its agent's first answer go to
// DIR/uffd-trace.tsv (ms since the vCPUs started, service ms, page, pages filled).
void write_uffd_trace(const VmPaths& paths, const snapshot::UffdServer& uffd, Clock::time_point start,
                      double answered_ms) {
    const char* on = std::getenv("NANOVM_UFFD_TRACE");
    if (!on || std::string(on) != "1") return;
    const std::string path = paths.dir + "/uffd-trace.tsv";
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) return;
    const int64_t base = std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count();
    std::fprintf(f, "# answered_ms %.3f\nat_ms\tservice_ms\tpage\tpages\n", answered_ms);
    for (const snapshot::UffdServer::TraceEntry& e : uffd.trace())
        std::fprintf(f, "%.3f\t%.3f\t%u\t%u\n", static_cast<double>(e.at_ns - base) / 1e6,
                     static_cast<double>(e.service_ns) / 1e6, e.page, e.pages);
    std::fclose(f);
}

void watch_readiness(const VmPaths& paths, std::chrono::milliseconds boot_timeout, Lifecycle& life, ReadyPipe& pipe,
                     Machine& machine, bool resync, const std::string& hostname, snapshot::UffdServer* uffd) {
    const auto start = Clock::now();
    const auto deadline = start + boot_timeout;
    std::string last_error = "no attempt";
    int attempts = 0;
    std::string first_error;
    double first_failure_ms = 0;  // since `start`
    while (!life.ended() && Clock::now() < deadline) {
        ++attempts;
        try {
            // A guest whose agent is not listening yet refuses at once (RST); a busy one
            // (a restored guest faulting its memory in, next to others) may take seconds to
            // answer, and a 2 s cut-off could miss every answer: wait up to 15 s.
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
            agent::AgentClient client = agent::AgentClient::connect(
                agent_endpoint(paths), std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(15000)));
            client.set_deadline(deadline);  // the ping and the resync too: a guest that never answers
            client.ping();
            const double answered_ms = snapshot::ms_since(start);
            const auto answered = Clock::now();
            const std::string served = uffd ? "; " + uffd->describe_stats() + " by the first answer" : std::string();
            if (uffd) write_uffd_trace(paths, *uffd, start, answered_ms);
            if (resync) agent::resync_guest(client, hostname.empty() ? paths.id : hostname);
            else if (!hostname.empty()) agent::resync_guest(client, hostname);
            if (life.transition(VmState::booting, VmState::running)) pipe.ready();
            if (resync)
                log_line(fmt::format("ready: the agent answered {:.1f} ms after the vCPUs started ({}); "
                                     "reseed, clock, hostname and vsock reset took {:.1f} ms{}",
                                     answered_ms,
                                     attempts == 1 ? std::string("first attempt")
                                                   : fmt::format("attempt {}; the first failed after {:.1f} ms: {}",
                                                                 attempts, first_failure_ms, first_error),
                                     snapshot::ms_since(answered), served));
            return;
        } catch (const std::exception& e) {
            last_error = e.what();
            if (attempts == 1) {
                first_error = last_error;
                first_failure_ms = snapshot::ms_since(start);
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (life.ended()) return;
    pipe.error(fmt::format("the guest agent did not answer within {} s (last attempt: {})",
                           boot_timeout.count() / 1000, last_error),
               paths.console_log());
    life.begin_stop();
    machine.request_stop("the guest agent did not answer in time");
}

// SIGINT, SIGTERM, SIGHUP stop the VM at once.
class SignalWatcher {
public:
    SignalWatcher(int signal_fd, Machine& machine, Lifecycle& life)
        : wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
        if (!wake_) throw_errno("eventfd");
        thread_ = std::thread([this, signal_fd, &machine, &life] {
            pollfd fds[2] = {{signal_fd, POLLIN, 0}, {wake_.get(), POLLIN, 0}};
            for (;;) {
                if (::poll(fds, 2, -1) < 0) {
                    if (errno == EINTR) continue;
                    return;
                }
                if (fds[1].revents) return;
                signalfd_siginfo info{};
                if (::read(signal_fd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
                    life.begin_stop();
                    machine.request_stop(fmt::format("{}", ::strsignal(static_cast<int>(info.ssi_signo))));
                }
            }
        });
    }
    ~SignalWatcher() {
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = ::write(wake_.get(), &one, sizeof(one));
        thread_.join();
    }

private:
    Fd wake_;
    std::thread thread_;
};

// The control commands of one VM.
class ControlCommands {
public:
    ControlCommands(const VmmOptions& options, const VmPaths& paths, LinuxVm& vm, json config, Lifecycle& life)
        : options_(options),
          paths_(paths),
          vm_(vm),
          machine_(vm.machine()),
          config_(std::move(config)),
          life_(life),
          layer_counter_(last_layer_number(paths)),
          started_(Clock::now()) {}
    ~ControlCommands() {
        if (stopper_.joinable()) stopper_.join();
        if (fork_finisher_.joinable()) fork_finisher_.join();
    }

    void install(ControlServer& server) {
        server.add_command("status", [this](const ControlRequest&) { return status(); });
        server.add_command("pause", [this](const ControlRequest& r) { return pause(flag(r.body, "freeze_clock")); });
        server.add_command("resume", [this](const ControlRequest&) { return resume(); });
        server.add_command("snapshot", [this](const ControlRequest& r) { return snapshot(r.body); });
        server.add_command("fork", [this](const ControlRequest& r) { return fork(r.body); });
        server.add_command("stop", [this](const ControlRequest& r) { return stop(r.body); });
    }

private:
    json status() {
        return json{{"id", options_.id},
                    {"pid", ::getpid()},
                    {"state", to_string(life_.state())},
                    {"cpus", options_.cpus},
                    {"memory_mib", options_.memory_mib},
                    {"uptime_ms", micros_since(started_) / 1000},
                    {"image", options_.image},
                    {"vsock_socket", paths_.vsock_socket()},
                    {"console_log", paths_.console_log()}};
    }

    // {"freeze_clock": true}: the guest's kvmclock is read now and set back at the
    // resume (KVM_GET_CLOCK / KVM_SET_CLOCK, as QEMU does across a stop), so the
    // guest does not see the time it spent paused as a jump of its monotonic clock
    // (its wall clock is stepped by the agent's resync). For a daemon's warm VM,
    // paused ahead for an unknown time before a create takes it.
    json pause(bool freeze_clock) {
        const VmState now = life_.state();
        if (now == VmState::paused) return json{{"state", "paused"}, {"pause_us", 0}};
        if (now != VmState::running)
            throw ControlCommandError(fmt::format("cannot pause: the VM is {}", to_string(now)));
        const auto t0 = Clock::now();
        machine_.pause();
        if (freeze_clock) machine_.hold_clock();
        const int64_t us = micros_since(t0);
        if (!life_.transition(VmState::running, VmState::paused)) {
            machine_.forget_clock();
            machine_.resume();  // a stop came in meanwhile
            throw ControlCommandError(fmt::format("cannot pause: the VM is {}", to_string(life_.state())));
        }
        return json{{"state", "paused"}, {"pause_us", us}};
    }

    json resume() {
        const VmState now = life_.state();
        if (now == VmState::running) return json{{"state", "running"}, {"resume_us", 0}};
        if (now != VmState::paused)
            throw ControlCommandError(fmt::format("cannot resume: the VM is {}", to_string(now)));
        const auto t0 = Clock::now();
        const bool set_back = machine_.release_clock();
        machine_.resume();
        const int64_t us = micros_since(t0);
        life_.transition(VmState::paused, VmState::running);
        // clock_set_back: the guest's clocks continue from the pause, so its wall
        // clock is behind by the time paused until someone steps it (agent RESYNC).
        return json{{"state", "running"}, {"resume_us", us}, {"clock_set_back", set_back}};
    }

    static bool flag(const json& body, const char* name) {
        auto it = body.find(name);
        if (it == body.end()) return false;
        if (!it->is_boolean()) throw ControlCommandError(fmt::format("\"{}\" must be true or false", name));
        return it->get<bool>();
    }

    // The previous snapshot's background copy must finish before the next snapshot or
    // fork: one write-protect copy at a time, and a fork remaps the RAM it protects.
    // Holds snapshot_mutex_.
    void finish_pending() {
        for (auto& p : pending_) {
            try {
                p->wait_durable();
            } catch (const std::exception& e) {
                log_line(fmt::format("snapshot {}: {}", p->dir(), e.what()));
            }
        }
        pending_.clear();
    }

    // fork dir: pauses, freezes disks and RAM as a fork base (LinuxVm::fork) and
    // resumes; the children open the frozen layer through /proc/<pid>/fd (same user),
    // checked by inode: "memfds" is "PID:FD:INODE,..." for VmmOptions::fork_memory.
    json fork(const json& body) {
        const std::string dir = new_dir_arg(body, "a fork base");
        std::lock_guard lock(snapshot_mutex_);
        finish_pending();
        if (fork_finisher_.joinable()) fork_finisher_.join();  // the last fork's layer is sealed
        vm_.wait_compaction();
        const auto t0 = Clock::now();
        const bool was_paused = pause_for("fork");
        snapshot::ForkImage image;
        try {
            LinuxSnapshotRequest request;
            request.dir = dir;
            request.config = config_;
            request.sync = false;
            request.new_top_path = [this](size_t index) {
                return fmt::format("{}/{}-disk{}-{}.layer", paths_.dir, options_.id, index, ++layer_counter_);
            };
            image = vm_.fork(request);
        } catch (const std::exception& e) {
            if (!was_paused) {
                machine_.resume();
                life_.transition(VmState::paused, VmState::running);
            }
            throw ControlCommandError(fmt::format("fork {}: {}", dir, e.what()));
        }
        const int64_t pause_us = micros_since(t0);
        if (!was_paused) {
            machine_.resume();
            life_.transition(VmState::paused, VmState::running);
        }
        const auto by_proc = [](const Fd& fd) {  // "PID:FD:INODE", see open_fork_memory
            struct stat st {};
            if (::fstat(fd.get(), &st) != 0) throw ControlCommandError(fmt::format("fork: fstat: {}", ::strerror(errno)));
            return fmt::format("{}:{}:{}", ::getpid(), fd.get(), st.st_ino);
        };
        std::string memfds;
        for (const Fd& fd : image.memfds) memfds += (memfds.empty() ? "" : ",") + by_proc(fd);
        json out{{"dir", dir},
                 {"memfds", memfds},
                 {"delta", image.delta ? by_proc(image.delta) : std::string()},
                 {"delta_pages", image.delta_pages},
                 {"fork_ms", static_cast<double>(micros_since(t0)) / 1000},
                 {"pause_ms", static_cast<double>(pause_us) / 1000},
                 {"copied_pages", image.copied_pages},
                 {"state", to_string(life_.state())}};
        log_line(fmt::format("fork into {}: paused {:.1f} ms (RAM: {}), running again after {:.1f} ms", dir,
                             static_cast<double>(pause_us) / 1000,
                             image.copied_pages ? fmt::format("copied into a new layer: {} pages", image.copied_pages)
                             : image.delta      ? fmt::format("its layer kept, {} pages of its own in a delta",
                                                              image.delta_pages)
                                                : std::string("frozen as it was, nothing copied"),
                             out["fork_ms"].get<double>()));
        // Held until the next fork: the children open the memfds by number meanwhile.
        // The old mappings are unmapped and the layer sealed while they start.
        fork_layer_ = std::move(image);
        fork_finisher_ = std::thread([this] {
            // Tearing down the old page tables takes ~0.4 us per page: on an idle
            // priority it does not compete with the children starting.
            sched_param idle{};
            (void)::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &idle);
            try {
                snapshot::finish_fork(fork_layer_);
            } catch (const std::exception& e) {
                log_line(fmt::format("fork: {}", e.what()));
            }
        });
        return out;
    }

    // The "dir" argument: absolute, and missing or empty (`what` needs a new directory).
    static std::string new_dir_arg(const json& body, const char* what) {
        auto it = body.find("dir");
        if (it == body.end() || !it->is_string() || it->get<std::string>().empty() ||
            it->get<std::string>().front() != '/')
            throw ControlCommandError("\"dir\" must be an absolute path");
        const std::string dir = it->get<std::string>();
        std::error_code ec;
        if (std::filesystem::exists(dir, ec) && !std::filesystem::is_empty(dir, ec))
            throw ControlCommandError(fmt::format("{}: exists and is not empty ({} needs a new directory)", dir, what));
        return dir;
    }

    // Pauses a running VM for a snapshot or fork (`verb` names it in errors); returns
    // whether it was paused already. Throws ControlCommandError if it is neither.
    bool pause_for(const char* verb) {
        const VmState before = life_.state();
        if (before != VmState::running && before != VmState::paused)
            throw ControlCommandError(fmt::format("cannot {}: the VM is {}", verb, to_string(before)));
        if (before == VmState::paused) return true;
        machine_.pause();
        if (!life_.transition(VmState::running, VmState::paused)) {
            machine_.resume();
            throw ControlCommandError(fmt::format("cannot {}: the VM is {}", verb, to_string(life_.state())));
        }
        return false;
    }

    json snapshot(const json& body) {
        const std::string dir = new_dir_arg(body, "a snapshot");
        const bool leave_paused = flag(body, "leave_paused");
        const bool flatten = flag(body, "flatten");  // also prepare the file backend's memory file
        // A fork's base: nothing fsync'd; "durable" then means complete (SnapshotContent::sync).
        const bool fork_base = flag(body, "fork_base");
        const bool wait_durable = flag(body, "wait_durable") || flatten;
        std::lock_guard lock(snapshot_mutex_);  // one snapshot at a time
        finish_pending();
        // A disk compaction started by the previous snapshot ends first, outside the pause.
        vm_.wait_compaction();
        const auto t0 = Clock::now();
        const bool was_paused = pause_for("snapshot");
        const auto resume_if_needed = [&] {
            if (!was_paused && !leave_paused) {
                machine_.resume();
                life_.transition(VmState::paused, VmState::running);
            }
        };
        std::unique_ptr<snapshot::PendingSnapshot> pending;
        try {
            LinuxSnapshotRequest request;
            request.dir = dir;
            request.config = config_;
            request.sync = !fork_base;
            request.new_top_path = [this](size_t index) {
                return fmt::format("{}/{}-disk{}-{}.layer", paths_.dir, options_.id, index, ++layer_counter_);
            };
            pending = vm_.start_snapshot(request);
        } catch (const std::exception& e) {
            resume_if_needed();
            throw ControlCommandError(fmt::format("snapshot {}: {}", dir, e.what()));
        }
        const int64_t pause_us = micros_since(t0);
        resume_if_needed();
        const int64_t call_us = micros_since(t0);
        json out{{"dir", dir},
                 {"snapshot_ms", static_cast<double>(call_us) / 1000},
                 {"pause_ms", static_cast<double>(pause_us) / 1000},
                 {"state", to_string(life_.state())},
                 {"background", pending->stats().background},
                 {"frozen", pending->stats().frozen}};
        if (wait_durable) {
            try {
                const snapshot::SnapshotStats& stats = pending->wait_durable();
                out["durable"] = !fork_base;
                out[fork_base ? "complete_ms" : "durable_ms"] = stats.durable_ms;
                if (flatten) {
                    snapshot::ensure_flat_memory(dir);
                    out["flat_ms"] = static_cast<double>(micros_since(t0)) / 1000;
                }
            } catch (const std::exception& e) {
                throw ControlCommandError(fmt::format("snapshot {}: {}", dir, e.what()));
            }
        } else {
            out["durable"] = pending->durable();
            pending_.push_back(std::move(pending));
        }
        return out;
    }

    json stop(const json& body) {
        bool force = false;
        int64_t timeout_ms = 10000;
        if (auto it = body.find("force"); it != body.end()) {
            if (!it->is_boolean()) throw ControlCommandError("\"force\" must be true or false");
            force = it->get<bool>();
        }
        if (auto it = body.find("timeout_ms"); it != body.end()) {
            if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 600000)
                throw ControlCommandError("\"timeout_ms\" must be an integer from 0 to 600000");
            timeout_ms = it->get<int64_t>();
        }
        const VmState before = life_.begin_stop();
        if (before == VmState::stopping) {
            if (force) machine_.request_stop("stop (forced)");
            return json{{"state", "stopping"}};
        }
        if (before == VmState::paused) machine_.resume();  // a paused guest cannot power off
        if (force || before == VmState::booting || timeout_ms == 0) {
            machine_.request_stop(force ? "stop (forced)" : "stop");
            return json{{"state", "stopping"}};
        }
        stopper_ = std::thread([this, timeout = std::chrono::milliseconds(timeout_ms)] {
            const auto t0 = Clock::now();
            try {
                agent::AgentClient client = agent::AgentClient::connect(agent_endpoint(paths_), timeout);
                client.set_deadline(t0 + timeout);  // a guest that never answers SHUTDOWN cannot hold the stop
                client.shutdown();
            } catch (const agent::ConnectionError&) {
                // The guest may power off before the answer arrives.
            } catch (const std::exception& e) {
                log_line(fmt::format("stop: asking the guest agent to power off failed: {}", e.what()));
            }
            const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
            if (!life_.wait_ended(timeout > spent ? timeout - spent : std::chrono::milliseconds(0)))
                machine_.request_stop(fmt::format("stop: the guest did not power off within {} ms", timeout.count()));
        });
        return json{{"state", "stopping"}};
    }

    const VmmOptions& options_;
    const VmPaths& paths_;
    LinuxVm& vm_;
    Machine& machine_;
    const json config_;  // what a snapshot keeps of how this VM was made (restored_boot_options reads it)
    Lifecycle& life_;
    std::mutex snapshot_mutex_;
    std::vector<std::unique_ptr<snapshot::PendingSnapshot>> pending_;  // not yet known durable
    snapshot::ForkImage fork_layer_;  // the last fork's frozen layer, for its children to open
    std::thread fork_finisher_;       // finish_fork(fork_layer_) after the resume
    uint32_t layer_counter_;  // the last "<id>-disk<i>-<n>.layer" made here (by an earlier VMM too: a reboot)
    Clock::time_point started_;
    std::thread stopper_;  // at most one: a second stop finds the state stopping
};

BootOptions boot_options(const VmmOptions& options, const VmPaths& paths) {
    BootOptions boot;
    boot.cpus = options.cpus;
    boot.memory_mib = options.memory_mib;
    boot.root_disk = true;
    boot.disks.push_back(DiskOption{options.image, true, "nanovm-root"});
    DiskOption upper{paths.disk(), false, "nanovm-upper"};
    // One layer block: the guest never issues smaller or less aligned I/O, so the
    // disk can be frozen into copy-on-write layers (snapshots).
    upper.block_size = static_cast<uint32_t>(virtio::blk::kLayerBlockSize);
    boot.disks.push_back(upper);
    for (const std::string& spec : options.disks) boot.disks.push_back(parse_disk_option(spec));
    boot.vsock = VsockOption{paths.vsock_socket(), 3};
    boot.append.push_back(kSandboxParams);
    boot.console = paths.console_log();
    return boot;
}

// The devices of a reboot: the disks `kept` records (writable ones at their current
// tops), the agent and overlay as boot_options. Fills the shape fields of `options`.
BootOptions reboot_options(const BootRecord& kept, const VmPaths& paths, VmmOptions& options) {
    if (!options.restore_dir.empty()) throw Error("--reboot and --restore exclude each other");
    options.cpus = kept.cpus;
    options.memory_mib = kept.memory_mib;
    options.image = kept.image;
    options.disks = kept.user_disks;
    BootOptions boot;
    boot.cpus = kept.cpus;
    boot.memory_mib = kept.memory_mib;
    boot.root_disk = true;
    boot.disks = kept.disks;
    boot.vsock = VsockOption{paths.vsock_socket(), 3};
    boot.append.push_back(kSandboxParams);
    boot.console = paths.console_log();
    return boot;
}

// What a snapshot keeps of how the VM was made, for restored_boot_options.
json vm_config(const VmmOptions& options, const BootOptions& boot) {
    json disks = json::array();
    for (const DiskOption& d : boot.disks)
        disks.push_back(json{{"path", d.path}, {"read_only", d.read_only}, {"serial", d.serial},
                             {"block_size", d.block_size}});
    return json{{"cpus", options.cpus},       {"memory_mib", options.memory_mib}, {"image", options.image},
                {"user_disks", options.disks}, {"disk_options", std::move(disks)}};
}

// The devices of a VM restored from `dir` as `saved` describes them, in this VM's
// state directory: read-only disks as they were, each writable disk as a new top
// layer over the frozen one. Fills the shape fields of `options`.
BootOptions restored_boot_options(const json& saved, const std::string& dir, const VmPaths& paths,
                                  VmmOptions& options) {
    const json& config = saved.at("config");
    config.at("cpus").get_to(options.cpus);
    config.at("memory_mib").get_to(options.memory_mib);
    config.at("image").get_to(options.image);
    config.at("user_disks").get_to(options.disks);
    BootOptions boot;
    boot.cpus = options.cpus;
    boot.memory_mib = options.memory_mib;
    boot.root_disk = true;
    const json& disks = config.at("disk_options");
    const json& frozen = saved.at("disks");
    if (!disks.is_array() || !frozen.is_array() || disks.size() != frozen.size())
        throw Error(fmt::format("{}/vm.state: the disk lists do not match", dir));
    for (size_t i = 0; i < disks.size(); ++i) {
        DiskOption d{disks[i].at("path").get<std::string>(), disks[i].at("read_only").get<bool>(),
                     disks[i].at("serial").get<std::string>()};
        disks[i].at("block_size").get_to(d.block_size);
        const json& layer = frozen[i].at("frozen");
        if (!layer.is_null()) {
            const std::string name = layer.get<std::string>();
            const std::string kind = frozen[i].at("frozen_kind").get<std::string>();
            if (kind != "raw" && kind != "layer")
                throw Error(fmt::format("{}/vm.state: disk {}: frozen_kind {} is neither raw nor layer", dir, i, kind));
            // A file of the snapshot directory by its plain name, or an absolute path
            // (a layer of an earlier snapshot); nothing relative to our working directory.
            const bool plain = name.find('/') == std::string::npos;
            if (name.empty() || name == "." || name == ".." || (!plain && name.front() != '/'))
                throw Error(fmt::format("{}/vm.state: disk {}: bad layer name \"{}\"", dir, i, name));
            const std::string parent = plain ? dir + "/" + name : name;
            d.path = fmt::format("{}/{}-disk{}-0.layer", paths.dir, options.id, i);
            d.read_only = false;
            d.layer_file = true;
            virtio::blk::LayeredDisk::create_top(
                d.path, parent, kind == "raw" ? virtio::blk::ParentKind::raw : virtio::blk::ParentKind::layer);
        }
        boot.disks.push_back(std::move(d));
    }
    boot.vsock = VsockOption{paths.vsock_socket(), 3};
    boot.append.push_back(kSandboxParams);
    boot.console = paths.console_log();
    return boot;
}

// Opens a fork parent's frozen layer from VmmOptions::fork_memory ("PID:FD:INODE,...")
// through /proc/PID/fd/FD, refusing a file whose inode is not the one the parent
// reported (the parent stopped, or forked again and reused the number).
std::vector<Fd> open_fork_memory(const std::string& spec) {
    std::vector<Fd> out;
    size_t pos = 0;
    while (pos <= spec.size()) {
        const size_t comma = std::min(spec.find(',', pos), spec.size());
        const std::string item = spec.substr(pos, comma - pos);
        unsigned long pid = 0, fd = 0, inode = 0;
        char tail = 0;
        if (std::sscanf(item.c_str(), "%lu:%lu:%lu%c", &pid, &fd, &inode, &tail) != 3)
            throw Error(fmt::format("--fork-memory {}: '{}' is not PID:FD:INODE", spec, item));
        const std::string path = fmt::format("/proc/{}/fd/{}", pid, fd);
        Fd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        if (!file)
            throw Error(fmt::format("fork: the parent's memory layer {}: {} (did the parent VM stop?)", path,
                                    ::strerror(errno)));
        struct stat st {};
        if (::fstat(file.get(), &st) != 0) throw_errno("fstat " + path);
        if (st.st_ino != inode)
            throw Error(fmt::format("fork: {} is not the parent's memory layer any more (inode {}, expected {}; the "
                                    "parent forked again or stopped)",
                                    path, st.st_ino, inode));
        out.push_back(std::move(file));
        pos = comma + 1;
    }
    return out;
}

std::vector<Fd> open_fork_memory_if(const std::string& spec) {
    return spec.empty() ? std::vector<Fd>{} : open_fork_memory(spec);
}

int serve(const VmmOptions& requested, ReadyPipe& pipe, snapshot::ForkStandby standby) {
    if (!is_vm_id(requested.id)) throw Error(fmt::format("{}: not a VM id", requested.id));
    VmmOptions options = requested;
    const RunDir run = vmm_run_dir(options);
    const VmPaths paths = run.vm(options.id);
    const bool restore = !options.restore_dir.empty();
    // A reboot appends: the console of the boot before (a crash's panic) stays readable.
    Fd console(::open(paths.console_log().c_str(),
                      O_WRONLY | O_CREAT | (options.reboot ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0600));
    if (!console) throw_errno("open " + paths.console_log());

    // Signals are blocked before any thread starts, so only the watcher sees them.
    const Fd signals = block_termination_signals();
    std::unique_ptr<LinuxVm> vm;
    BootOptions boot;
    // A fork's shared snapshot stays while any VM whose disks read from it runs.
    std::vector<Fd> fork_bases;
    const bool from_standby = static_cast<bool>(standby);
    if (standby && !restore) throw Error("a standby VMM can only become a fork child or a restored VM (--restore)");
    if (restore) {
        const auto restore_start = Clock::now();
        if (options.memory_backend != "file" && options.memory_backend != "uffd")
            throw Error(fmt::format("--memory-backend {}: must be file or uffd", options.memory_backend));
        const auto backend =
            options.memory_backend == "uffd" ? snapshot::MemoryBackend::uffd : snapshot::MemoryBackend::file;
        const std::vector<Fd> fork_memory = open_fork_memory_if(options.fork_memory);
        std::vector<int> fork_memfds;
        for (const Fd& fd : fork_memory) fork_memfds.push_back(fd.get());
        const std::vector<Fd> fork_delta = open_fork_memory_if(options.fork_delta);
        if (fork_delta.size() > 1) throw Error(fmt::format("--fork-delta {}: one PID:FD:INODE", options.fork_delta));
        vm = std::make_unique<LinuxVm>(
            options.restore_dir, backend,
            [&](const json& saved) {
                try {
                    boot = restored_boot_options(saved, options.restore_dir, paths, options);
                } catch (const json::exception& e) {
                    throw Error(fmt::format("{}/vm.state: devices: {}", options.restore_dir, e.what()));
                }
                return boot;
            },
            console.get(), fork_memfds, fork_delta.empty() ? -1 : fork_delta[0].get(), std::move(standby));
        log_line(fmt::format("restored {} ({}) in {:.1f} ms: memory, vCPU and device state, disk layers",
                             options.restore_dir,
                             fork_memfds.empty()
                                 ? options.memory_backend + " backend" + (from_standby ? ", into a standby" : "")
                             : from_standby ? (vm->chain_served_ahead()
                                                   ? "a fork into a standby: memory mapped from the parent's frozen layer, "
                                                     "its holes served from the parent's chain, opened ahead"
                                                   : "a fork into a standby: memory mapped from the parent's frozen layer")
                                            : "a fork: memory mapped from the parent's frozen layer",
                             snapshot::ms_since(restore_start)));
    } else if (options.reboot) {
        const BootRecord kept = kept_disks(paths);
        boot = reboot_options(kept, paths, options);
        std::string tops;
        for (const DiskOption& d : boot.disks)
            if (!d.read_only) tops += (tops.empty() ? "" : ", ") + std::filesystem::path(d.path).filename().string();
        log_line(fmt::format("rebooting VM {} cold over its kept disks ({})", options.id, tops));
        vm = std::make_unique<LinuxVm>(boot, console.get());
    } else {
        if (options.image.empty()) throw Error("--image is required");
        create_scratch_disk(paths.disk());
        boot = boot_options(options, paths);
        vm = std::make_unique<LinuxVm>(boot, console.get());
    }
    // What a reboot boots with (the writable disks' tops move with snapshots: a
    // reboot finds them on disk, boot_record.hpp).
    write_boot_record(paths.boot_file(), BootRecord{options.cpus, options.memory_mib, options.image, options.disks,
                                                    boot.disks});
    std::set<std::string> chain_dirs;
    for (const std::string& file : vm->disk_files())
        chain_dirs.insert(std::filesystem::path(file).parent_path().string());
    for (const std::string& d : chain_dirs) {
        if (Fd held = hold_fork_base(run, d)) fork_bases.push_back(std::move(held));
    }
    write_vm_info(paths.info_file(),
                  VmInfo{options.id, ::getpid(), options.cpus, options.memory_mib,
                         std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count(),
                         options.image});
    Lifecycle life;
    // The server stops (destroyed first) before the commands it calls go away.
    ControlCommands commands(options, paths, *vm, vm_config(options, boot), life);
    ControlServer server(paths.control_socket());
    commands.install(server);
    server.start();
    SignalWatcher watcher(signals.get(), vm->machine(), life);
    // Standbys for this VM's forks, once it is ready (destroyed after the readiness
    // thread: it starts them).
    std::string exe;
    try {
        exe = self_executable();
    } catch (const std::exception& e) {
        log_line(fmt::format("no fork standbys: {}", e.what()));  // the VM runs on; its forks start cold
    }
    // A VM whose RAM a chain serves (restored, or a fork child of one): its forks'
    // frozen layers have holes that chain fills, so its standbys serve it ahead.
    const std::string chain_top =
        vm->uffd() ? std::filesystem::absolute(vm->uffd()->chain().layers().front().path()).lexically_normal().string()
                   : "";
    StandbyKeeper standbys(exe, paths.dir, paths.vmm_log(), vm->machine().vcpu_count(),
                           vm->machine().memory().ram_bytes(), exe.empty() ? 0 : options.fork_standby, chain_top);
    if (const char* trace = std::getenv("NANOVM_UFFD_TRACE"); trace && std::string(trace) == "1" && vm->uffd())
        vm->uffd()->enable_trace();
    std::thread readiness([&] {
        watch_readiness(paths, options.boot_timeout, life, pipe, vm->machine(), restore, options.hostname, vm->uffd());
        if (options.started_fd >= 0) ::close(options.started_fd);  // the keeper may make the next standby now
        const VmState now = life.state();
        if (now == VmState::running || now == VmState::paused) standbys.start();
    });

    const StopReason reason = vm->run();
    life.mark_ended();
    readiness.join();
    const GuestOutcome outcome = vm->outcome(reason);
    const bool clean = outcome == GuestOutcome::poweroff || outcome == GuestOutcome::stopped;
    if (!pipe.finished())
        pipe.error(fmt::format("the guest stopped before its agent answered ({})", reason.describe()),
                   paths.console_log());
    if (outcome == GuestOutcome::crash) log_crash_console(paths.console_log());
    log_line(fmt::format("VM {} ended: {} ({})", options.id, to_string(outcome), reason.describe()));
    return clean ? 0 : outcome == GuestOutcome::reboot ? kVmmExitReboot : 1;
}

}  // namespace

RunDir vmm_run_dir(const VmmOptions& options) {
    return options.run_dir.empty() ? default_run_dir() : RunDir{options.run_dir};
}

int run_vmm(const VmmOptions& options) { return run_vmm(options, snapshot::ForkStandby{}); }

int run_vmm(const VmmOptions& options, snapshot::ForkStandby standby) {
    // A VMM outlives whoever started it (nanovmd restarts; `vm start` returns): a
    // write to a pipe or socket whose reader is gone (the readiness pipe, before
    // serve() blocks the termination signals) must be an EPIPE, never a death.
    ::signal(SIGPIPE, SIG_IGN);
    // The launcher made these two inheritable to pass them here; no process this VMM
    // starts (mkfs.ext4, fork standbys) may hold the VM's lock or readiness pipe.
    for (const int fd : {options.lock_fd, options.ready_fd})
        if (fd >= 0) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    ReadyPipe pipe(options.ready_fd);
    int status = 1;
    try {
        status = serve(options, pipe, std::move(standby));
    } catch (const std::exception& e) {
        log_line(e.what());
        if (is_vm_id(options.id)) pipe.error(e.what(), vmm_run_dir(options).vm(options.id).console_log());
        else pipe.error(e.what(), "");
    }
    // A guest that powered off or was stopped leaves nothing behind. One that crashed,
    // or a VMM that failed, leaves its directory (console.log, vmm.log): stale from now
    // on, so the next `vm exec|stop|status` says why it ended and removes it, and
    // `vm list|start|run` remove it. NANOVM_KEEP_STATE=1 keeps it in every case.
    if (is_vm_id(options.id) && status == 0 && !options.keep_dir && !keep_state_requested())
        remove_vm_dir(vmm_run_dir(options).vm(options.id));
    return status;
}

}  // namespace nanovm::vm
