// A separate process that restores a snapshot directory into a fresh Machine and
// reports what it finds, for tests/kvm/snapshot_test.cpp ("restore in a new
// process"). Prints key=value lines:
//   restore_ms, memory_ms, state_ms          time to restore (ms)
//   ram_crc=0x...                            CRC-32C of all RAM as restored (--ram-crc)
//   sample_0x<gpa>=0x...                     CRC-32C of the page at each --sample GPA
//   counter<i>=N                             vCPU i's counter as restored
// with --run-ms N (> 0), after running N ms (and on until every vCPU's counter moved,
// 20 s at most) and pausing:
//   counter<i>_after=N, first_new<i>=N, changed<i>=N, out_of_range<i>=N (values in
//   vCPU i's area that differ from the restored ones: the smallest, how many pages,
//   and how many are outside [counter as restored, counter_after])
// with --snapshot-to OUT: a diff snapshot of the restored VM over --dir into OUT
//   snapshot_ms=..., snapshot_pages=N
// with --full-snapshot-to OUT: a full snapshot of it (memory copied in the background
// when the backing allows) into OUT, after the run, until durable:
//   full_snapshot_background=0|1, full_snapshot_ram_crc=0x... (RAM at its pause)
// --fork-fds STATE_FD,MEMFD[,MEMFD] instead of --dir: a fork child
// (snapshot/fork_image.hpp): vm.state bytes read from the inherited fd STATE_FD,
// RAM a private mapping of the inherited frozen memfds; --fork-delta FD: and the
// inherited delta applied over it (snapshot/fork_delta.hpp); --fork-base LAYER: the
// memfds' holes are that layer chain's pages (a restored VM's fork, ForkImage::base_chain).
// --standby VCPUS,RAM_MIB,IRQCHIP instead of --dir/--fork-fds: a fork child made
// ahead (snapshot::make_fork_standby) that prints "standby_ready", then reads one line
// from stdin, "PID STATE_FD,MEMFD[,MEMFD] [DELTA_FD]" (fds of process PID, opened
// through /proc/PID/fd as the VMM's fork children open theirs), and goes on as a
// --fork-fds child from there; or "restore DIR file|uffd": a restore of snapshot DIR
// into the standby (snapshot::restore_snapshot(standby, ...)). With --fork-base the
// standby serves that chain ahead (snapshot::serve_fork_standby) and takes forks only.
// --mark V: right after the restore, store the dword V at GPA kMarkGpa (20 MiB);
// after --run-ms, print mark=V' as read back then (another VM's store would show).
//   uffd_faults=N, stop=<reason>; error=<message> and exit 1 on failure.
// --touch-mib N: right after the restore, read a word of each page of [32 MiB, +N MiB)
//   (touched=<sum>, flushed): a VM that reads what it was restored with
// with --until-running (for tools/bench/run snapshot: restore and fork "until the
// vCPUs run"): runs until every vCPU's counter has moved on from its restored value,
// then pauses at once and checks that each counter went on from exactly there:
//   running_ms=...        restore start -> every vCPU seen running (ms)
//   running_at_ns=N       that moment on CLOCK_MONOTONIC (steady_clock; the parent
//                         compares it with its own request time)
//   claim_at_ns=N         (--standby) the moment its claim line was read, the same clock
//   started_ms=..., moved<i>_ms=...  restore start -> the run thread started, -> vCPU i
//                         seen counting (ms)
//   uffd_faults_running=N chain pages its vCPUs (and this thread) waited for by then
//   counter<i>_after=N    and exit 1 (error=...) unless, in vCPU i's area, the values
//                         above the restored counter are exactly restored+1 ..
//                         counter_after, each once (no gap, no value from nowhere)
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "snapshot/fork_image.hpp"
#include "snapshot/snapshot_dir.hpp"
#include "tests/kvm/probe.hpp"
#include "tests/kvm/snapshot_probe.hpp"
#include "vmm/error.hpp"
#include "vmm/kvm.hpp"

using namespace nanovm;

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMarkGpa = 20 * MiB;

/// Everything readable from inherited fd `fd` (from offset 0).
std::vector<uint8_t> read_fd(int fd) {
    std::vector<uint8_t> out;
    uint8_t buf[65536];
    for (off_t at = 0;;) {
        const ssize_t n = ::pread(fd, buf, sizeof(buf), at);
        if (n < 0) throw_errno(fmt::format("pread(fd {})", fd));
        if (n == 0) return out;
        out.insert(out.end(), buf, buf + n);
        at += n;
    }
}

/// "A,B,C" as numbers (std::stoi: throws on a non-number).
std::vector<int> fd_list(const std::string& list) {
    std::vector<int> out;
    for (size_t pos = 0; pos <= list.size();) {
        const size_t comma = std::min(list.find(',', pos), list.size());
        out.push_back(std::stoi(list.substr(pos, comma - pos)));
        pos = comma + 1;
    }
    return out;
}

snapshot::MemoryBackend parse_backend(const std::string& name) {
    if (name == "file") return snapshot::MemoryBackend::file;
    if (name == "uffd") return snapshot::MemoryBackend::uffd;
    if (name == "mapped") return snapshot::MemoryBackend::mapped;
    throw Error("a backend is file, uffd or mapped, not '" + name + "'");
}

// A standby's fork claim "PID STATE_FD,MEMFD[,MEMFD] [DELTA_FD]" (fds of process PID,
// opened through /proc/PID/fd as the VMM's fork children open theirs).
snapshot::RestoredMachine restore_fork_claim(std::unique_ptr<Machine> machine, snapshot::StandbyChain chain,
                                             const std::string& line, const std::string& fork_base) {
    unsigned long pid = 0;
    char fds_text[256] = {};
    int delta = -1;
    if (std::sscanf(line.c_str(), "%lu %255s %d", &pid, fds_text, &delta) < 2)
        throw Error("standby: expected 'PID STATE_FD,MEMFD[,MEMFD] [DELTA_FD]', got '" + line + "'");
    std::vector<Fd> opened;
    const auto open_fd = [&](const std::string& number) {
        const std::string path = fmt::format("/proc/{}/fd/{}", pid, number);
        opened.emplace_back(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        if (!opened.back()) throw_errno("open " + path);
        return opened.back().get();
    };
    std::vector<int> fds;
    for (const int number : fd_list(fds_text)) fds.push_back(open_fd(std::to_string(number)));
    if (fds.size() < 2) throw Error("standby: STATE_FD,MEMFD[,MEMFD]");
    const int delta_fd = delta >= 0 ? open_fd(std::to_string(delta)) : -1;
    const std::vector<uint8_t> state = read_fd(fds[0]);
    return snapshot::restore_fork(std::move(machine), std::move(chain), state, std::span<const int>(fds).subspan(1),
                                  delta_fd, "fork state", fork_base);
}

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// --until-running: see the header comment.
int run_until_running(Machine& machine, Clock::time_point restore_start, const snapshot::UffdServer* uffd) {
    GuestMemory& memory = machine.memory();
    std::vector<uint32_t> restored;
    for (uint32_t i = 0; i < machine.vcpu_count(); ++i)
        restored.push_back(memory.read<uint32_t>(Gpa(test::standard_loop(i).counter)));
    test::RecordingPio pio;
    test::RecordingMmio mmio;
    StopReason reason;
    std::thread runner([&] { reason = test::run_bounded(machine, pio, mmio, std::chrono::seconds(120)); });
    const double started_ms = std::chrono::duration<double, std::milli>(Clock::now() - restore_start).count();
    std::vector<double> moved_ms(machine.vcpu_count(), 0);  // restore start -> vCPU i seen counting
    const auto all_moved = [&] {
        bool all = true;
        for (uint32_t i = 0; i < machine.vcpu_count(); ++i) {
            if (moved_ms[i] > 0) continue;
            if (memory.read<uint32_t>(Gpa(test::standard_loop(i).counter)) == restored[i]) {
                all = false;
            } else {
                moved_ms[i] = std::chrono::duration<double, std::milli>(Clock::now() - restore_start).count();
            }
        }
        return all;
    };
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    bool moved = false;
    while (!(moved = all_moved()) && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    const auto running_at = Clock::now();
    const uint64_t faults = uffd ? uffd->faults_served() : 0;
    machine.pause();
    std::string error;
    if (!moved) error = "the vCPUs did not run within 60 s";
    std::cout << fmt::format("uffd_faults_running={}\nstarted_ms={:.3f}\n", faults, started_ms);
    for (uint32_t i = 0; i < machine.vcpu_count(); ++i) std::cout << fmt::format("moved{}_ms={:.3f}\n", i, moved_ms[i]);
    std::cout << fmt::format("running_ms={:.3f}\nrunning_at_ns={}\n",
                             std::chrono::duration<double, std::milli>(running_at - restore_start).count(),
                             std::chrono::duration_cast<std::chrono::nanoseconds>(running_at.time_since_epoch()).count());
    for (uint32_t i = 0; i < machine.vcpu_count() && error.empty(); ++i) {
        const test::CounterLoop loop = test::standard_loop(i);
        const uint32_t after = memory.read<uint32_t>(Gpa(loop.counter));
        std::cout << fmt::format("counter{}={}\ncounter{}_after={}\n", i, restored[i], i, after);
        const uint32_t pages = (loop.end - loop.begin) / kPageSize;
        if (after <= restored[i]) {
            error = fmt::format("vCPU {}: counter {} -> {} after it was seen moving", i, restored[i], after);
            break;
        }
        // Each step stores the new count into the next page, so the values above the
        // restored count must be exactly the last min(steps, pages) counts, each once;
        // except that the pause may fall between the counter's store and the page's:
        // then `after` is in no page yet, and after a whole lap that page still holds
        // the count one lap older (`low`).
        const uint32_t low = std::max(restored[i], after > pages ? after - pages : 0u);
        std::vector<uint8_t> seen(after - low, 0);
        uint32_t one_lap_old = 0;
        for (uint32_t p = 0; p < pages && error.empty(); ++p) {
            const uint32_t v = memory.read<uint32_t>(Gpa(loop.begin + uint64_t{p} * kPageSize));
            if (v <= restored[i]) continue;
            if (v == low) ++one_lap_old;
            else if (v < low || v > after || seen[v - low - 1]++)
                error = fmt::format("vCPU {}: page {:#x} holds {} (restored counter {}, now {})", i,
                                    loop.begin + uint64_t{p} * kPageSize, v, restored[i], after);
        }
        for (size_t k = 0; k < seen.size() && error.empty(); ++k)
            if (!seen[k] && low + 1 + k != after)
                error = fmt::format("vCPU {}: count {} is in no page (restored counter {}, now {})", i, low + 1 + k,
                                    restored[i], after);
        if (error.empty() && one_lap_old > (seen.back() ? 0u : 1u))
            error = fmt::format("vCPU {}: {} pages still hold {}, one lap old (now {})", i, one_lap_old, low, after);
    }
    machine.resume();
    machine.request_stop("child done");
    runner.join();
    std::cout << "stop=" << reason.describe() << "\n";
    if (!error.empty()) {
        std::cout << "error=" << error << std::endl;
        return 1;
    }
    return 0;
}

int run(int argc, char** argv) {
    std::string dir, backend = "file", snapshot_to, full_snapshot_to, fork_fds, standby, fork_base;
    int fork_delta = -1;
    std::optional<uint32_t> mark;
    int run_ms = 0;
    uint64_t touch_mib = 0;
    bool want_ram_crc = false, until_running = false;
    std::vector<uint64_t> samples;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const auto next = [&]() -> std::string {
            if (i + 1 >= argc) throw Error("missing value after " + a);
            return argv[++i];
        };
        if (a == "--dir") dir = next();
        else if (a == "--backend") backend = next();
        else if (a == "--run-ms") run_ms = std::stoi(next());
        else if (a == "--sample") samples.push_back(std::stoull(next(), nullptr, 0));
        else if (a == "--snapshot-to") snapshot_to = next();
        else if (a == "--full-snapshot-to") full_snapshot_to = next();
        else if (a == "--fork-fds") fork_fds = next();
        else if (a == "--fork-delta") fork_delta = std::stoi(next());
        else if (a == "--fork-base") fork_base = next();
        else if (a == "--standby") standby = next();
        else if (a == "--mark") mark = static_cast<uint32_t>(std::stoul(next(), nullptr, 0));
        else if (a == "--ram-crc") want_ram_crc = true;
        else if (a == "--touch-mib") touch_mib = std::stoul(next());
        else if (a == "--until-running") until_running = true;
        else throw Error("unknown argument " + a);
    }
    if (dir.empty() + fork_fds.empty() + standby.empty() != 2)
        throw Error("one of --dir, --fork-fds and --standby is required");
    (void)parse_backend(backend);  // checked before anything starts
    if (!snapshot_to.empty() && dir.empty()) throw Error("--snapshot-to needs --dir (the diff's parent)");

    const Kvm kvm = Kvm::open();
    auto t = Clock::now();
    snapshot::RestoredMachine restored;
    if (!standby.empty()) {
        snapshot::MachineInfo shape;
        unsigned mib = 0;
        char tail = 0;
        if (std::sscanf(standby.c_str(), "%u,%u,%u%c", &shape.vcpus, &mib, &shape.irqchip, &tail) != 3)
            throw Error("--standby VCPUS,RAM_MIB,IRQCHIP");
        shape.ram_bytes = uint64_t{mib} * MiB;
        auto machine = snapshot::make_fork_standby(kvm, shape);
        // A standby for a restored parent's fork serves its chain ahead, as the VMM's
        // standbys of a restored VM do (api/vm/fork_standby.hpp, StandbyOptions::fork_base).
        snapshot::StandbyChain chain;
        if (!fork_base.empty()) chain = snapshot::serve_fork_standby(*machine, fork_base);
        std::cout << "standby_ready" << std::endl;
        std::string line;
        if (!std::getline(std::cin, line)) throw Error("standby: no fork arrived (stdin closed)");
        t = Clock::now();
        std::cout << fmt::format("claim_at_ns={}\n", std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                          t.time_since_epoch()).count());
        char restore_dir[4096] = {}, restore_backend[16] = {};
        if (std::sscanf(line.c_str(), "restore %4095s %15s", restore_dir, restore_backend) == 2) {
            restored = snapshot::restore_snapshot(std::move(machine), restore_dir, parse_backend(restore_backend));
        } else {
            restored = restore_fork_claim(std::move(machine), std::move(chain), line, fork_base);
        }
    } else if (!fork_fds.empty()) {
        const std::vector<int> fds = fd_list(fork_fds);
        if (fds.size() < 2) throw Error("--fork-fds: STATE_FD,MEMFD[,MEMFD]");
        const std::vector<uint8_t> state = read_fd(fds[0]);
        restored = snapshot::restore_fork(kvm, state, std::span<const int>(fds).subspan(1), fork_delta, "fork state",
                                          fork_base);
    } else {
        restored = snapshot::restore_snapshot(kvm, dir, parse_backend(backend));
    }
    std::cout << fmt::format("restore_ms={:.3f}\nmemory_ms={:.3f}\nstate_ms={:.3f}\n", ms_since(t), restored.memory_ms,
                             restored.state_ms);
    Machine& machine = *restored.machine;
    GuestMemory& memory = machine.memory();
    if (until_running) return run_until_running(machine, t, restored.uffd.get());
    if (want_ram_crc) std::cout << fmt::format("ram_crc={:#010x}\n", test::ram_crc(memory));
    if (touch_mib > 0) {
        // Reads [32 MiB, + touch_mib) (the benchmark's written data), a word per page.
        uint64_t sum = 0;
        for (uint64_t off = 0; off < touch_mib * MiB; off += kPageSize) sum += memory.read<uint64_t>(Gpa(32 * MiB + off));
        std::cout << fmt::format("touched={:#x}\n", sum) << std::flush;
    }
    for (uint64_t gpa : samples)
        std::cout << fmt::format("sample_{:#x}={:#010x}\n", gpa, test::memory_crc(memory, gpa, kPageSize));
    std::vector<std::vector<uint8_t>> areas;
    std::vector<uint32_t> counters;
    for (uint32_t i = 0; i < machine.vcpu_count(); ++i) {
        const test::CounterLoop loop = test::standard_loop(i);
        counters.push_back(memory.read<uint32_t>(Gpa(loop.counter)));
        std::cout << fmt::format("counter{}={}\n", i, counters.back());
        if (run_ms > 0 && memory.contains(Gpa(loop.begin), loop.end - loop.begin)) {
            const auto area = memory.slice(Gpa(loop.begin), loop.end - loop.begin);
            areas.emplace_back(area.begin(), area.end());
        }
    }
    if (mark) memory.write<uint32_t>(Gpa(kMarkGpa), *mark);  // after ram_crc: that is the image's
    if (run_ms > 0) {
        test::RecordingPio pio;
        test::RecordingMmio mmio;
        StopReason reason;
        std::thread runner([&] { reason = test::run_bounded(machine, pio, mmio, std::chrono::seconds(120)); });
        std::this_thread::sleep_for(std::chrono::milliseconds(run_ms));
        // On a loaded host a restored vCPU's first page faults (each a round trip to
        // the uffd server thread) can outlast run_ms: run on until every counter has
        // moved (at most 20 s more), so "counter<i>_after > counter<i>" tests the VM,
        // not the scheduler.
        const auto give_up = Clock::now() + std::chrono::seconds(20);
        const auto all_moved = [&] {
            for (uint32_t i = 0; i < machine.vcpu_count(); ++i)
                if (memory.read<uint32_t>(Gpa(test::standard_loop(i).counter)) == counters[i]) return false;
            return true;
        };
        while (!all_moved() && Clock::now() < give_up) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        const auto tp = Clock::now();
        machine.pause();
        std::cout << fmt::format("pause_ms={:.3f}\n", ms_since(tp));
        for (uint32_t i = 0; i < machine.vcpu_count() && i < areas.size(); ++i) {
            const test::CounterLoop loop = test::standard_loop(i);
            const uint32_t after = memory.read<uint32_t>(Gpa(loop.counter));
            std::cout << fmt::format("counter{}_after={}\n", i, after);
            uint64_t changed = 0, out_of_range = 0;
            uint32_t first_new = ~0u;
            for (uint64_t off = 0; off < areas[i].size(); off += kPageSize) {
                uint32_t before, now;
                std::memcpy(&before, areas[i].data() + off, 4);
                now = memory.read<uint32_t>(Gpa(loop.begin + off));
                if (before != now) {
                    ++changed;
                    first_new = std::min(first_new, now);
                    if (now < counters[i] || now > after) ++out_of_range;
                }
            }
            std::cout << fmt::format("first_new{}={}\nchanged{}={}\nout_of_range{}={}\n", i, first_new, i, changed, i,
                                     out_of_range);
        }
        if (mark) std::cout << fmt::format("mark={:#x}\n", memory.read<uint32_t>(Gpa(kMarkGpa)));
        std::unique_ptr<snapshot::PendingSnapshot> full;
        if (!full_snapshot_to.empty()) {
            std::cout << fmt::format("full_snapshot_ram_crc={:#010x}\n", test::ram_crc(memory));
            full = snapshot::start_full_snapshot(kvm, machine, full_snapshot_to, nullptr, snapshot::CopyMode::freeze, {},
                                                 restored.uffd.get());
            std::cout << fmt::format("full_snapshot_background={}\n", full->stats().background ? 1 : 0);
            if (!full->stats().fallback.empty()) std::cout << "full_snapshot_fallback=" << full->stats().fallback << "\n";
        }
        if (!snapshot_to.empty()) {
            const auto ts = Clock::now();
            const snapshot::SnapshotStats stats = snapshot::write_diff_snapshot(kvm, machine, snapshot_to, dir, nullptr);
            std::cout << fmt::format("snapshot_ms={:.3f}\nsnapshot_pages={}\n", ms_since(ts), stats.present_pages);
        }
        machine.resume();
        if (full) full->wait_durable();  // copied while the guest runs on
        machine.request_stop("child done");
        runner.join();
        std::cout << "stop=" << reason.describe() << "\n";
    }
    if (restored.uffd) std::cout << "uffd_faults=" << restored.uffd->faults_served() << "\n";
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::cout << "error=" << e.what() << std::endl;
        return 1;
    }
}
