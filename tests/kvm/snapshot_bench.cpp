// `tools/bench/run snapshot` (nanovm's side; tools/bench/snapshot_bench.py adds the
// QEMU peer and interleaves the two): pause, resume, snapshot of the running VM and
// with leave-paused, time to durable, a second snapshot of the same VM, diff
// snapshot, restore until the vCPUs run (both memory backends, in a new process) and
// fork n (n child processes over one frozen layer) of a 1024 MiB / 2 vCPU probe guest
// with 256 MiB of non-zero memory. Prints a table, then one JSON line (DESIGN.md
// "Conventions"). Medians and p99 (= the maximum for so few runs).
//
// The 256 MiB are written by the VMM (GuestMemory::write_bytes) before the guest
// starts; the guest's two counter loops (tests/kvm/snapshot_probe.hpp) keep
// dirtying 2 x 2048 pages while it runs. The 16 MiB for the diff snapshot are
// written by the VMM through a DirtyTracker while the guest runs.
// Each round makes fresh VMs (BenchVm): one for pause/resume, the snapshot of the
// running VM (the first of a booted VM: its RAM is frozen, snapshot/frozen_ram.hpp),
// snapshot_again (the same VM again: now over its frozen layer, so write-protected),
// the diff over that and the restores; one for leave-paused; one per fork n.
// Restore and fork children are build/tests/kvm/snapshot_child --until-running: each
// reports when both of its vCPUs' counters have moved and checks that they went on
// from the snapshot's values (exit 1 otherwise).
// Fork n: pause, freeze its RAM as a shared layer of sealed memfds
// (snapshot/fork_image.hpp), resume; n children map it privately at once; request ->
// the last child's vCPUs run. forkN: the children are standbys (snapshot_child
// --standby: VM, memslots and vCPUs made while the parent runs, before the request,
// as the VMM keeps them for `vm fork`); forkN_cold: started at the request. fork1_second: the same parent forked again (it keeps
// its layer; the pages it wrote since go as a delta).
// Usage: snapshot_bench --dir DIR [--runs N] [--where native|testhost]
//                       [--copy freeze|background|in-pause] [--forks N,N...] [--paced] [--memory-only] [--density]
//                       [--fork-pairs N]
// --copy: freeze (the default, what the VMM does), background (write-protect every
// populated page in the pause, copy after it) or in-pause (copy in the pause), for
// before/after figures in one run.
// --paced (for the driver): before each round "ready" is printed and a line read from
// stdin (no guest of ours runs meanwhile); after it "round {JSON of its figures}"; no table.
// --density: the PSS of 8 VMs restored from one snapshot with each backend (mapped:
// the MAP_PRIVATE file mapping before issue 18; file, uffd: memfds served by
// userfaultfd), each reading its 256 MiB; one JSON line.
// --fork-pairs N: just fork n of a booted parent and of a restored one, N rounds back
// to back, for a comparison within one run on a busy machine (one table, one JSON line).
// Fork parts: _child_restore_call_max (the child's restore call), _child_memory_max
// (its layer mapped, and a restored parent's chain opened and served: serve_chain),
// _child_vcpu<i>_moved_max (restore start -> vCPU i seen counting),
// _child_running_max (-> both), _child_max_uffd_faults (chain pages its vCPUs waited
// for by then). On a 2-core host the parent's two vCPUs, resumed first, hold both CPUs
// while a child starts: its threads then often wait for a scheduler tick (4 ms at
// HZ=250), so fork figures move in steps of ~4 ms; compare medians of many rounds.
// --memory-only needs no /dev/kvm: it times just the memory-file side (non-zero
// scan + base layer write, 16 MiB diff layer, flatten, map of the flat file) of the
// same 1024 MiB memory with 256 MiB written, so it runs on any build machine.
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "snapshot/fork_image.hpp"
#include "snapshot/snapshot_dir.hpp"
#include "tests/kvm/probe.hpp"
#include "tests/kvm/snapshot_child_path.hpp"
#include "tests/kvm/snapshot_probe.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"
#include "vmm/kvm.hpp"

using namespace nanovm;

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

struct Series {
    std::vector<double> values;
    double median() const {
        std::vector<double> v = values;
        std::sort(v.begin(), v.end());
        if (v.empty()) return 0;
        return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
    }
    double p99() const { return values.empty() ? 0 : *std::max_element(values.begin(), values.end()); }
};

// Fills [gpa, gpa + bytes) with a non-zero pattern: each 8-byte word = its GPA ^ salt.
void fill(GuestMemory& memory, uint64_t gpa, uint64_t bytes, uint64_t salt) {
    std::vector<uint8_t> chunk(1 * MiB);
    for (uint64_t off = 0; off < bytes; off += chunk.size()) {
        for (uint64_t w = 0; w < chunk.size() / 8; ++w) {
            const uint64_t v = (gpa + off + w * 8) ^ salt;
            std::memcpy(chunk.data() + w * 8, &v, 8);
        }
        memory.write_bytes(Gpa(gpa + off), chunk);
    }
}

// The JSON line: every series' median and p99 as nanovm_<name>_ms / _p99_ms.
void print_json(const std::map<std::string, Series>& s, const std::string& case_name, const std::string& where) {
    std::string json = fmt::format("{{\"case\": \"{}\", \"where\": \"{}\"", case_name, where);
    for (const auto& [name, series] : s)
        json += fmt::format(", \"nanovm_{}_ms\": {:.3f}, \"nanovm_{}_p99_ms\": {:.3f}", name, series.median(), name,
                            series.p99());
    std::cout << json << "}" << std::endl;
}

void print(const std::map<std::string, Series>& s) {
    std::cout << fmt::format("{:<26} {:>12} {:>12}\n", "figure (ms unless pages)", "median", "max");
    for (const auto& [name, series] : s)
        std::cout << fmt::format("{:<26} {:>12.3f} {:>12.3f}\n", name, series.median(), series.p99());
}

int memory_only(const std::string& dir, int runs, const std::string& where) {
    GuestMemory memory = GuestMemory::create(1024 * MiB);
    std::vector<DirtyTracker::Range> ranges;
    for (const MemoryRegion& r : memory.regions()) ranges.push_back({r.gpa, r.size});
    DirtyTracker tracker(ranges);
    fill(memory, 32 * MiB, 256 * MiB, 0x5a5a5a5a5a5a5a5aULL);
    std::map<std::string, Series> s;
    for (int r = 0; r < runs; ++r) {
        const std::string base = fmt::format("{}/base{}.layer", dir, r);
        auto t = Clock::now();
        const snapshot::PageBitmap pages = snapshot::nonzero_pages(memory);
        const snapshot::LayerWriteResult b = snapshot::write_layer(memory, pages, base, std::nullopt);
        s["base_layer_256MiB"].values.push_back(ms_since(t));
        memory.set_dirty_tracker(&tracker);
        fill(memory, 400 * MiB, 16 * MiB, 0x1234567ULL + static_cast<uint64_t>(r));
        memory.set_dirty_tracker(nullptr);
        const std::string diff = fmt::format("{}/diff{}.layer", dir, r);
        t = Clock::now();
        snapshot::PageBitmap dirty((memory.ram_bytes() / kPageSize + 63) / 64, 0);
        const std::vector<uint64_t> bits = tracker.take(0);
        std::copy(bits.begin(), bits.end(), dirty.begin());
        snapshot::write_layer(memory, dirty, diff,
                              snapshot::ParentRef{std::filesystem::path(base).filename().string(), b.checksum});
        s["diff_layer_16MiB"].values.push_back(ms_since(t));
        t = Clock::now();
        const snapshot::LayerChain chain = snapshot::LayerChain::open(diff);
        const std::string flat = fmt::format("{}/flat{}", dir, r);
        snapshot::flatten_chain(chain, flat, std::filesystem::path(diff).filename().string());
        s["flatten_272MiB"].values.push_back(ms_since(t));
        t = Clock::now();
        {
            const snapshot::LayerFile f = snapshot::LayerFile::open(flat);
            GuestMemory restored = GuestMemory::map_file_private(f.fd(), memory.ram_bytes(), snapshot::kLayerDataOffset);
        }
        s["open_and_map_flat"].values.push_back(ms_since(t));
        for (const auto& f : {base, diff, flat}) std::filesystem::remove(f);
    }
    std::cout << fmt::format("snapshot memory files ({}), 1024 MiB with 256 MiB non-zero, {} runs\n", where, runs);
    print(s);
    const auto key = [&](const char* k, const char* name) {
        return fmt::format(", \"nanovm_{}_ms\": {:.3f}, \"nanovm_{}_p99_ms\": {:.3f}", k, s[name].median(), k,
                           s[name].p99());
    };
    std::cout << "{\"case\": \"snapshot-memory\", \"where\": \"" << where << "\"" << key("base_layer", "base_layer_256MiB")
              << key("diff_layer", "diff_layer_16MiB") << key("flatten", "flatten_272MiB")
              << key("map_flat", "open_and_map_flat") << "}" << std::endl;
    return 0;
}

// A child process (snapshot_child) started with posix_spawn, its stdout on a pipe.
struct Child {
    pid_t pid = -1;
    Fd out;
    Fd in;             ///< the child's stdin (spawn_child with_stdin), else invalid
    std::string read;  ///< output read ahead by wait_line, not yet collected
    Clock::time_point started;
};

Child spawn_child(const std::vector<std::string>& args, bool with_stdin = false) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe2");
    Fd read_end(fds[0]), write_end(fds[1]);
    Fd in_read, in_write;
    if (with_stdin) {
        if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe2");
        in_read = Fd(fds[0]);
        in_write = Fd(fds[1]);
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, write_end.get(), STDOUT_FILENO);
    if (with_stdin) posix_spawn_file_actions_adddup2(&actions, in_read.get(), STDIN_FILENO);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    Child child;
    child.started = Clock::now();
    const int rc = ::posix_spawn(&child.pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw SysError("posix_spawn " + args[0], rc);
    child.out = std::move(read_end);
    child.in = std::move(in_write);
    return child;
}

// Reads the child's output until the line `want` (kept for collect); throws Error
// with what it printed if it exits first.
void wait_line(Child& child, const std::string& want) {
    char buf[4096];
    while (child.read.find(want + "\n") == std::string::npos) {
        const ssize_t n = ::read(child.out.get(), buf, sizeof(buf));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw Error(fmt::format("the child exited before '{}': {}", want, child.read));
        child.read.append(buf, static_cast<size_t>(n));
    }
}

// Sends one line to the child's stdin.
void send_line(Child& child, const std::string& line) {
    const std::string text = line + "\n";
    if (::write(child.in.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
        throw_errno("write to a standby child");
}

// Reads the child's "key=value" lines to EOF and reaps it; the status is under "exit".
std::map<std::string, std::string> collect(Child& child) {
    std::string text = std::move(child.read);
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(child.out.get(), buf, sizeof(buf));
        if (n > 0) text.append(buf, static_cast<size_t>(n));
        else if (n == 0 || errno != EINTR) break;
    }
    int status = 0;
    while (::waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::map<std::string, std::string> out;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string::npos) nl = text.size();
        const std::string line = text.substr(pos, nl - pos);
        const size_t eq = line.find('=');
        if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
        pos = nl + 1;
    }
    out["exit"] = std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return out;
}

// The child's "running_at_ns" as a time point of our (the same, CLOCK_MONOTONIC) clock.
// A child's `key`=N (ns on CLOCK_MONOTONIC, the steady_clock of both processes).
Clock::time_point at_ns(const std::map<std::string, std::string>& out, const std::string& key) {
    return Clock::time_point(
        std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(std::stoll(out.at(key)))));
}

Clock::time_point running_at(const std::map<std::string, std::string>& out) { return at_ns(out, "running_at_ns"); }

void check_child(const std::map<std::string, std::string>& out, const std::string& what) {
    if (out.at("exit") != "0")
        throw Error(fmt::format("{} failed (exit {}): {}", what, out.at("exit"),
                                out.count("error") ? out.at("error") : "?"));
}

// One round's figures (also kept in the run's series), printed as one JSON line in
// --paced mode for tools/bench/snapshot_bench.py.
struct Figures {
    std::map<std::string, Series>& all;
    std::map<std::string, double> round;
    void add(const std::string& name, double v) {
        all[name].values.push_back(v);
        round[name] = v;
    }
    std::string round_json() const {
        std::string j = "{";
        for (const auto& [k, v] : round) j += fmt::format("{}\"{}\": {:.4f}", j.size() > 1 ? ", " : "", k, v);
        return j + "}";
    }
};

// One fork of `parent` (served by `uffd` when it was restored) into `count` children
// (standbys made before the request, or processes started at it): request -> the
// last child's vCPUs run, as figure `key` and its parts.
void fork_once(const Kvm& kvm, Machine& parent, snapshot::UffdServer* uffd, const std::string& child,
               const std::string& shape, int count, bool standby, const std::string& key, Figures& f) {
    // A restored parent's children serve the holes of its frozen RAM from its chain.
    const std::string base =
        uffd ? std::filesystem::absolute(uffd->chain().layers().front().path()).lexically_normal().string() : "";
    std::vector<std::string> base_args;
    if (!base.empty()) base_args = {"--fork-base", base};
    // Standby children are made (and ready) while the parent runs, before the request.
    std::vector<Child> children;
    if (standby) {
        for (int k = 0; k < count; ++k) {
            std::vector<std::string> args = {child, "--standby", shape, "--until-running"};
            args.insert(args.end(), base_args.begin(), base_args.end());
            children.push_back(spawn_child(args, true));
        }
        for (Child& c : children) wait_line(c, "standby_ready");
    }
    auto t = Clock::now();
    parent.pause();
    snapshot::ForkImage image = snapshot::freeze_for_fork(kvm, parent, {}, uffd);
    parent.resume();
    f.add(key + "_resumed", ms_since(t));
    f.add(key + "_copied_pages", static_cast<double>(image.copied_pages));
    // The state in a memfd; the layer's fds (no CLOEXEC: a cold child inherits them).
    const Fd state(::memfd_create("fork-state", 0));
    if (!state) throw_errno("memfd_create");
    if (::pwrite(state.get(), image.state.data(), image.state.size(), 0) != static_cast<ssize_t>(image.state.size()))
        throw_errno("pwrite fork state");
    std::string fds = std::to_string(state.get());
    std::vector<Fd> layer;
    for (const Fd& fd : image.memfds) {
        layer.emplace_back(::fcntl(fd.get(), F_DUPFD, 3));
        if (!layer.back()) throw_errno("dup");
        fds += "," + std::to_string(layer.back().get());
    }
    f.add(key + "_delta_pages", static_cast<double>(image.delta_pages));
    Fd delta;
    if (image.delta) {
        delta = Fd(::fcntl(image.delta.get(), F_DUPFD, 3));
        if (!delta) throw_errno("dup");
    }
    if (standby) {
        // A standby opens them through /proc/PID/fd, as the VMM's fork children do.
        const std::string line =
            fmt::format("{} {}{}", ::getpid(), fds, delta ? " " + std::to_string(delta.get()) : "");
        for (Child& c : children) send_line(c, line);
    } else {
        std::vector<std::string> args = {child, "--fork-fds", fds, "--until-running"};
        args.insert(args.end(), base_args.begin(), base_args.end());
        if (delta) {
            args.push_back("--fork-delta");
            args.push_back(std::to_string(delta.get()));
        }
        for (int k = 0; k < count; ++k) children.push_back(spawn_child(args));
    }
    const auto sent = Clock::now();
    f.add(key + "_sent", std::chrono::duration<double, std::milli>(sent - t).count());
    Clock::time_point last_running = t, last_claim = t;
    double restore_call = 0, started = 0, in_child = 0, uffd_faults = 0, memory = 0, moved0 = 0, moved1 = 0;
    std::vector<std::map<std::string, std::string>> outs;
    for (Child& c : children) outs.push_back(collect(c));  // all reaped before any check throws
    // The parent's old mappings go once the children run (the VMM does it on an
    // idle-priority thread).
    const auto tf = Clock::now();
    snapshot::finish_fork(image);
    f.add(key + "_finish", ms_since(tf));
    for (int k = 0; k < count; ++k) {
        const auto& out = outs[k];
        check_child(out, fmt::format("{} child {}", key, k));
        last_running = std::max(last_running, running_at(out));
        if (out.count("claim_at_ns")) last_claim = std::max(last_claim, at_ns(out, "claim_at_ns"));
        restore_call = std::max(restore_call, std::stod(out.at("restore_ms")));
        in_child = std::max(in_child, std::stod(out.at("running_ms")));
        started = std::max(started, std::stod(out.at("started_ms")));
        if (out.count("uffd_faults_running")) uffd_faults = std::max(uffd_faults, std::stod(out.at("uffd_faults_running")));
        memory = std::max(memory, std::stod(out.at("memory_ms")));
        moved0 = std::max(moved0, std::stod(out.at("moved0_ms")));
        moved1 = std::max(moved1, std::stod(out.at("moved1_ms")));
    }
    f.add(key, std::chrono::duration<double, std::milli>(last_running - t).count());
    if (standby) f.add(key + "_child_claim_max", std::chrono::duration<double, std::milli>(last_claim - t).count());
    f.add(key + "_child_restore_call_max", restore_call);
    f.add(key + "_child_started_max", started);  // the child's restore start -> its run thread started
    f.add(key + "_child_running_max", in_child);  // the child's restore start -> its vCPUs run
    if (uffd) f.add(key + "_child_max_uffd_faults", uffd_faults);  // chain pages its vCPUs waited for, by then
    f.add(key + "_child_memory_max", memory);  // the layer mapped (and the chain served)
    f.add(key + "_child_vcpu0_moved_max", moved0);  // restore start -> vCPU 0 seen counting
    f.add(key + "_child_vcpu1_moved_max", moved1);
}

const char* copy_mode_name(snapshot::CopyMode mode) {
    switch (mode) {
        case snapshot::CopyMode::freeze: return "freeze";
        case snapshot::CopyMode::background: return "background";
        case snapshot::CopyMode::in_pause: return "in-pause";
    }
    return "?";
}

// Runs a Machine (its counter loops) on a thread until stop().
struct GuestRunner {
    GuestRunner() = default;
    GuestRunner(const GuestRunner&) = delete;
    GuestRunner& operator=(const GuestRunner&) = delete;
    ~GuestRunner() { (void)stop(); }
    void start(Machine& m) {
        machine = &m;
        thread = std::thread([this] { reason = test::run_bounded(*machine, pio, mmio, std::chrono::hours(1)); });
    }
    /// Stops the guest (resumed first if paused); what stopped it. Idempotent.
    const StopReason& stop() {
        if (thread.joinable()) {
            machine->resume();
            machine->request_stop("bench done");
            thread.join();
        }
        return reason;
    }
    /// stop(), throwing if the guest stopped for any other reason than that request.
    void stop_checked(const std::string& what) {
        if (stop().kind != StopReason::Kind::requested)
            throw Error(fmt::format("{}: the guest stopped: {}", what, reason.describe()));
    }

    Machine* machine = nullptr;
    test::RecordingPio pio;
    test::RecordingMmio mmio;
    StopReason reason;
    std::thread thread;
};

// The bench's guest: a 1024 MiB / 2 vCPU probe logging dirty pages (KVM's log and a
// DirtyTracker), 256 MiB written by the VMM, its counter loops running on a thread
// from construction until stop() (or the destructor). A fresh one for each figure that
// depends on what earlier snapshots did to its RAM (a full snapshot freezes it).
struct BenchVm {
    explicit BenchVm(const Kvm& kvm)
        : machine(kvm, GuestMemory::create(1024 * MiB), {.vcpus = 2, .irqchip = true, .log_dirty_pages = true}),
          tracker(ranges_of(machine.memory())) {
        machine.memory().set_dirty_tracker(&tracker);
        fill(machine.memory(), 32 * MiB, 256 * MiB, 0x5a5a5a5a5a5a5a5aULL);
        test::install_counter_loops(machine);
        run.start(machine);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    static std::vector<DirtyTracker::Range> ranges_of(const GuestMemory& memory) {
        std::vector<DirtyTracker::Range> ranges;
        for (const MemoryRegion& r : memory.regions()) ranges.push_back({r.gpa, r.size});
        return ranges;
    }

    Machine machine;
    DirtyTracker tracker;
    GuestRunner run;  // stopped first (members in reverse order)
};

// A VM restored (file backend, in this process) from the BenchVm snapshot `dir`, its
// counter loops running on a thread; the same 256 MiB rewritten after the restore
// (each page served from the snapshot first, then the VM's own), then running 200 ms
// as a BenchVm does (right after such a fill its first pause took ~10 ms more).
struct RestoredBenchVm {
    RestoredBenchVm(const Kvm& kvm, const std::string& dir, uint64_t salt)
        : vm(snapshot::restore_snapshot(kvm, dir, snapshot::MemoryBackend::file)) {
        run.start(*vm.machine);
        fill(vm.machine->memory(), 32 * MiB, 256 * MiB, salt);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }

    snapshot::RestoredMachine vm;
    GuestRunner run;
};

// What the restored-VM figures run on (the issue asks the bench to say).
constexpr const char* kRestoredPath =
    "path: restored VMs (snapshot_of_restored, fork*_of_restored, restore_standby): RAM in memfds filled by "
    "userfaultfd MISSING from the snapshot's layers, frozen in the pause (mremap + MAP_PRIVATE), write-protected "
    "on shmem after: the 6.1-compatible path (no userfaultfd on MAP_PRIVATE file mappings)";


// PSS and RSS (KiB) of process `pid` (/proc/PID/smaps_rollup).
std::pair<uint64_t, uint64_t> pss_rss_kib(pid_t pid) {
    FILE* f = std::fopen(fmt::format("/proc/{}/smaps_rollup", pid).c_str(), "r");
    if (!f) throw_errno(fmt::format("open /proc/{}/smaps_rollup", pid));
    char line[256];
    uint64_t pss = 0, rss = 0, v = 0;
    while (std::fgets(line, sizeof(line), f)) {
        if (std::sscanf(line, "Pss: %lu kB", &v) == 1) pss = v;
        if (std::sscanf(line, "Rss: %lu kB", &v) == 1) rss = v;
    }
    std::fclose(f);
    return {pss, rss};
}

// Reads the child's output until it holds `text` (kept for collect).
void wait_text(Child& child, const std::string& text) {
    char buf[4096];
    while (child.read.find(text) == std::string::npos) {
        const ssize_t n = ::read(child.out.get(), buf, sizeof(buf));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw Error(fmt::format("the child exited before '{}': {}", text, child.read));
        child.read.append(buf, static_cast<size_t>(n));
    }
}

// --density: the memory 8 VMs restored from one snapshot hold (issue 18): a BenchVm
// snapshot (1024 MiB, 256 MiB written), 8 snapshot_child processes restoring it at
// once with `backend`, each reading a word of every page of the 256 MiB, then the
// sum of their PSS and RSS while all 8 run.
int density(const Kvm& kvm, const std::string& dir, const std::string& child, const std::string& where) {
    const std::string snap = dir + "/density";
    std::filesystem::remove_all(snap);
    {
        BenchVm vm(kvm);
        vm.machine.pause();
        snapshot::start_full_snapshot(kvm, vm.machine, snap, &vm.tracker)->wait_durable();
        vm.run.stop_checked("the density VM");
    }
    std::string json = fmt::format("{{\"case\": \"snapshot-density\", \"where\": \"{}\", \"vms\": 8", where);
    std::cout << fmt::format("8 VMs restored from one snapshot (1024 MiB, 256 MiB non-zero), each reading the 256 MiB ({})\n",
                             where);
    for (const std::string backend : {"mapped", "file", "uffd"}) {
        std::vector<Child> children;
        for (int k = 0; k < 8; ++k)
            children.push_back(spawn_child({child, "--dir", snap, "--backend", backend, "--touch-mib", "256", "--run-ms",
                                            "3000"}));
        for (Child& c : children) wait_text(c, "touched=");
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        uint64_t pss = 0, rss = 0;
        for (const Child& c : children) {
            const auto [p, r] = pss_rss_kib(c.pid);
            pss += p;
            rss += r;
        }
        for (Child& c : children) check_child(collect(c), backend + " restore");
        std::cout << fmt::format("  {:<8} PSS {:8.1f} MiB  RSS {:8.1f} MiB (sums of the 8)\n", backend, pss / 1024.0,
                                 rss / 1024.0);
        json += fmt::format(", \"nanovm_restore8_{}_pss_mib\": {:.1f}, \"nanovm_restore8_{}_rss_mib\": {:.1f}", backend,
                            pss / 1024.0, backend, rss / 1024.0);
    }
    std::filesystem::remove_all(snap);
    std::cout << json << "}" << std::endl;
    return 0;
}


// --fork-pairs N: the fork figures alone, for a comparison within one run on a busy
// machine: one snapshot of a BenchVm, then N rounds of fork n (standby children) of
// a fresh booted parent and of a fresh parent restored from that snapshot, back to
// back; a table of medians and maxima, then one JSON line.
int fork_pairs(const Kvm& kvm, const std::string& dir, const std::string& child, const std::string& where, int rounds,
               const std::vector<int>& forks) {
    std::map<std::string, Series> s;
    const std::string src = dir + "/pairs-src";
    {
        BenchVm vm(kvm);
        vm.machine.pause();
        auto pending = snapshot::start_full_snapshot(kvm, vm.machine, src, &vm.tracker, snapshot::CopyMode::freeze);
        vm.machine.resume();
        pending->wait_durable();
        vm.run.stop_checked("the source VM");
    }
    for (int r = 0; r < rounds; ++r) {
        Figures f{s, {}};
        for (const int n : forks) {
            {
                BenchVm vm(kvm);
                fork_once(kvm, vm.machine, nullptr, child, "2,1024,1", n, true, fmt::format("fork{}", n), f);
                vm.run.stop_checked("the fork parent");
            }
            {
                RestoredBenchVm vm(kvm, src, 0x8888888800000000ULL + static_cast<uint64_t>(r));
                fork_once(kvm, *vm.vm.machine, vm.vm.uffd.get(), child, "2,1024,1", n, true,
                          fmt::format("fork{}_of_restored", n), f);
                vm.run.stop_checked("the restored fork parent");
            }
        }
    }
    std::cout << fmt::format("fork pairs ({}), 1024 MiB / 2 vCPU probe, 256 MiB non-zero, {} rounds\n", where, rounds);
    print(s);
    print_json(s, "snapshot-fork-pairs", where);
    std::filesystem::remove_all(src);
    return 0;
}

int run(int argc, char** argv) {
    std::string dir, where = "unknown", child = test::snapshot_child_path();
    int runs = 3;
    bool only_memory = false, paced = false, only_density = false;
    int fork_pair_rounds = 0;
    std::vector<int> forks = {1, 4};
    snapshot::CopyMode mode = snapshot::CopyMode::freeze;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--memory-only") {
            only_memory = true;
            continue;
        }
        if (a == "--paced") {
            paced = true;
            continue;
        }
        if (a == "--density") {
            only_density = true;
            continue;
        }
        if (a == "--fork-pairs" && i + 1 < argc) fork_pair_rounds = std::stoi(argv[++i]);
        else if (a == "--dir" && i + 1 < argc) dir = argv[++i];
        else if (a == "--runs" && i + 1 < argc) runs = std::stoi(argv[++i]);
        else if (a == "--where" && i + 1 < argc) where = argv[++i];
        else if (a == "--forks" && i + 1 < argc) {
            forks.clear();
            const std::string list = argv[++i];
            for (size_t pos = 0; pos < list.size();) {
                const size_t comma = std::min(list.find(',', pos), list.size());
                forks.push_back(std::stoi(list.substr(pos, comma - pos)));
                pos = comma + 1;
            }
        } else if (a == "--copy" && i + 1 < argc) {
            const std::string m = argv[++i];
            if (m == "freeze") mode = snapshot::CopyMode::freeze;
            else if (m == "background") mode = snapshot::CopyMode::background;
            else if (m == "in-pause") mode = snapshot::CopyMode::in_pause;
            else throw Error("--copy is freeze, background or in-pause");
        } else
            throw Error("usage: snapshot_bench --dir DIR [--runs N] [--where native|testhost] "
                        "[--copy freeze|background|in-pause] [--forks N,N...] [--paced] [--memory-only] [--density] "
                        "[--fork-pairs N]");
    }
    if (dir.empty()) throw Error("--dir is required");
    std::filesystem::create_directories(dir);
    if (only_memory) return memory_only(dir, runs, where);

    const Kvm kvm = Kvm::open();
    if (only_density) return density(kvm, dir, child, where);
    if (fork_pair_rounds > 0) return fork_pairs(kvm, dir, child, where, fork_pair_rounds, forks);
    std::cout << kRestoredPath << std::endl;
    std::map<std::string, Series> s;
    for (int r = 0; r < runs; ++r) {
        if (paced) {
            // The driver runs the peer between rounds, while no guest of ours runs.
            std::cout << "ready" << std::endl;
            std::string line;
            if (!std::getline(std::cin, line)) break;
        }
        Figures f{s, {}};
        {
            BenchVm vm(kvm);
            Machine& machine = vm.machine;
            DirtyTracker& tracker = vm.tracker;
            // full snapshot of the running VM: pause, capture state + freeze (or
            // write-protect) memory, resume; the layer is written in the background
            // until durable.
            const std::string full = fmt::format("{}/full{}", dir, r);
            auto t = Clock::now();
            machine.pause();
            const auto tp = Clock::now();
            auto pending = snapshot::start_full_snapshot(kvm, machine, full, &tracker, mode);
            f.add("snapshot_in_pause", ms_since(tp));
            machine.resume();
            f.add("snapshot", ms_since(t));
            const snapshot::SnapshotStats stats = pending->wait_durable();
            f.add("durable", ms_since(t));
            pending.reset();
            if (!stats.fallback.empty()) std::cout << "fallback: " << stats.fallback << "\n";
            f.add("snapshot_state", stats.state_ms);
            f.add("snapshot_scan", stats.dirty_ms);
            f.add("snapshot_arm", stats.arm_ms);
            f.add("snapshot_freeze", stats.freeze_ms);
            f.add("snapshot_copy", stats.memory_ms);
            f.add("snapshot_wp_faults", static_cast<double>(stats.wp_faults));
            f.add("snapshot_pages", static_cast<double>(stats.data_pages));
            std::this_thread::sleep_for(std::chrono::milliseconds(100));

            // A second full snapshot of the same VM: its RAM is a frozen layer now
            // (with the default copy mode), so this one write-protects what it holds.
            const std::string again = fmt::format("{}/again{}", dir, r);
            t = Clock::now();
            machine.pause();
            auto apending = snapshot::start_full_snapshot(kvm, machine, again, &tracker, mode);
            machine.resume();
            f.add("snapshot_again", ms_since(t));
            apending->wait_durable();
            f.add("again_durable", ms_since(t));
            apending.reset();

            // 16 MiB more, written by the VMM through the tracker while the guest runs
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            fill(machine.memory(), 400 * MiB, 16 * MiB, 0x1234567ULL + static_cast<uint64_t>(r));
            const std::string diff = fmt::format("{}/diff{}", dir, r);
            t = Clock::now();
            machine.pause();
            auto dpending = snapshot::start_diff_snapshot(kvm, machine, diff, again, &tracker, mode);
            machine.resume();
            f.add("diff_snapshot", ms_since(t));
            const snapshot::SnapshotStats dstats = dpending->wait_durable();
            f.add("diff_durable", ms_since(t));
            dpending.reset();
            f.add("diff_pages", static_cast<double>(dstats.present_pages));

            // pause / resume, of the VM running for seconds now, as a sandbox's VM is
            // (right after it starts, the vCPU threads that resume() wakes took the CPU
            // from its caller more often on a 2-core machine: 1.7-4 ms, before resume()
            // notified them after unlocking).
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            t = Clock::now();
            machine.pause();
            f.add("pause", ms_since(t));
            t = Clock::now();
            machine.resume();
            f.add("resume", ms_since(t));
            vm.run.stop_checked("the snapshot VM");

            // the file backend's memory file: a full snapshot's layer is mapped as it is,
            // after one check against the manifest (write_manifest already did it: cached)
            t = Clock::now();
            snapshot::ensure_flat_memory(full);
            f.add("flatten", ms_since(t));

            // restore in a new process until its vCPUs run: exec -> both counters moved
            for (const std::string backend : {"file", "uffd"}) {
                Child c = spawn_child({child, "--dir", full, "--backend", backend, "--until-running"});
                const auto out = collect(c);
                check_child(out, "restore (" + backend + ")");
                f.add("restore_" + backend, std::chrono::duration<double, std::milli>(running_at(out) - c.started).count());
                f.add("restore_" + backend + "_call", std::stod(out.at("restore_ms")));
                f.add("restore_" + backend + "_in_process", std::stod(out.at("running_ms")));
            }
        }
        {
            // The same first snapshot of a fresh VM, leaving it paused: request -> the
            // call returns (VM paused); then until durable with the VM still paused.
            BenchVm vm(kvm);
            const std::string paused_full = fmt::format("{}/paused{}", dir, r);
            auto t = Clock::now();
            vm.machine.pause();
            auto ppending = snapshot::start_full_snapshot(kvm, vm.machine, paused_full, &vm.tracker, mode);
            f.add("snapshot_paused", ms_since(t));
            ppending->wait_durable();
            f.add("paused_durable", ms_since(t));
            ppending.reset();
            vm.run.stop_checked("the leave-paused VM");
        }

        // fork n (snapshot/fork_image.hpp), each of a fresh parent: pause, freeze its
        // RAM as the shared layer + capture vm.state, resume; n children
        // (snapshot_child --fork-fds: the state and the layer inherited) restore at
        // once; request -> the last child's vCPUs run. Each child checks its counters
        // go on from the fork (--until-running). Then a second fork n=1 of the same
        // parent, whose RAM is private now (the pages it wrote since go as a delta).
        for (const int n : forks) {
            for (const bool standby : {true, false}) {
                // Each mode on a fresh parent (a first fork: no delta).
                const std::string name = fmt::format("fork{}{}", n, standby ? "" : "_cold");
                BenchVm vm(kvm);
                Machine& parent = vm.machine;
                const std::string shape = fmt::format("{},{},{}", parent.vcpu_count(), parent.memory().ram_bytes() / MiB,
                                                      parent.config().irqchip ? 1 : 0);
                for (const bool second : {false, true}) {
                    if (second && (n != 1 || !standby)) break;
                    fork_once(kvm, parent, nullptr, child, shape, second ? 1 : n, standby,
                              second ? "fork1_second" : name, f);
                }
                vm.run.stop_checked("the fork parent");
            }
        }
        {
            // Restored VMs (issue 18), from the first snapshot of this round.
            const std::string src = fmt::format("{}/full{}", dir, r);
            const std::string shape = "2,1024,1";
            {
                // Snapshot of a restored VM with 256 MiB written since: request -> running again.
                RestoredBenchVm vm(kvm, src, 0x7777777700000000ULL + static_cast<uint64_t>(r));
                Machine& machine = *vm.vm.machine;
                const std::string to = fmt::format("{}/of_restored{}", dir, r);
                auto t = Clock::now();
                machine.pause();
                auto pending = snapshot::start_full_snapshot(kvm, machine, to, nullptr, mode, {}, vm.vm.uffd.get());
                machine.resume();
                f.add("snapshot_of_restored", ms_since(t));
                const snapshot::SnapshotStats stats = pending->wait_durable();
                f.add("snapshot_of_restored_durable", ms_since(t));
                f.add("snapshot_of_restored_pages", static_cast<double>(stats.present_pages));
                f.add("snapshot_of_restored_state", stats.state_ms);
                f.add("snapshot_of_restored_freeze", stats.freeze_ms);
                pending.reset();
                if (!stats.fallback.empty()) std::cout << "fallback: snapshot of restored: " << stats.fallback << "\n";
                if (!stats.background) throw Error("the snapshot of a restored VM copied its memory in the pause");
                vm.run.stop_checked("the restored VM");
            }
            for (const int n : forks) {
                RestoredBenchVm vm(kvm, src, 0x8888888800000000ULL + static_cast<uint64_t>(r));
                fork_once(kvm, *vm.vm.machine, vm.vm.uffd.get(), child, shape, n, true,
                          fmt::format("fork{}_of_restored", n), f);
                vm.run.stop_checked("the restored fork parent");
            }
            {
                // Restore into a standby (a VMM made ahead, as fork children use):
                // request -> its vCPUs run.
                Child c = spawn_child({child, "--standby", shape, "--until-running"}, true);
                wait_line(c, "standby_ready");
                const auto t = Clock::now();
                send_line(c, "restore " + src + " file");
                const auto out = collect(c);
                check_child(out, "restore into a standby");
                f.add("restore_standby", std::chrono::duration<double, std::milli>(running_at(out) - t).count());
                f.add("restore_standby_call", std::stod(out.at("restore_ms")));
            }
        }
        if (paced) std::cout << "round " << f.round_json() << std::endl;
        for (const auto& d : std::filesystem::directory_iterator(dir)) std::filesystem::remove_all(d.path());
    }
    if (paced) {
        std::cout << "done stop=requested" << std::endl;
        return 0;
    }

    std::cout << fmt::format("snapshot bench ({}), 1024 MiB / 2 vCPU probe, 256 MiB non-zero, {} runs, copy {}\n", where,
                             runs, copy_mode_name(mode));
    print(s);
    print_json(s, "snapshot", where);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::cerr << "snapshot_bench: " << e.what() << std::endl;
        return 1;
    }
}
