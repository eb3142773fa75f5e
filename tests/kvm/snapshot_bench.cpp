// `tools/bench/run snapshot`: pause, resume, snapshot, diff snapshot and restore (both
// memory backends, restore in a new process) of a 1024 MiB / 2 vCPU probe guest
// with 256 MiB of non-zero memory. Prints a table, then one JSON line (DESIGN.md
// "Conventions"). Medians and p99 (= the maximum for so few runs).
//
// The 256 MiB are written by the VMM (GuestMemory::write_bytes) before the guest
// starts; the guest's two counter loops (tests/kvm/snapshot_probe.hpp) keep
// dirtying 2 x 2048 pages while it runs. The 16 MiB for the diff snapshot are
// written by the VMM through a DirtyTracker while the guest runs.
// Usage: snapshot_bench --dir DIR [--runs N] [--where native|testhost] [--copy background|in-pause] [--memory-only]
// --copy in-pause keeps the memory copy inside the pause (the first slice's way),
// for before/after figures in one run; the default copies it in the background.
// --memory-only needs no /dev/kvm: it times just the memory-file side (non-zero
// scan + base layer write, 16 MiB diff layer, flatten, map of the flat file) of the
// same 1024 MiB memory with 256 MiB written, so it runs on any build machine.
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

#include "snapshot/snapshot_dir.hpp"
#include "tests/kvm/probe.hpp"
#include "tests/kvm/snapshot_probe.hpp"
#include "vmm/error.hpp"
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

int run(int argc, char** argv) {
    std::string dir, where = "unknown", child = NANOVM_SNAPSHOT_CHILD;
    int runs = 3;
    bool only_memory = false;
    snapshot::CopyMode mode = snapshot::CopyMode::background;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--memory-only") {
            only_memory = true;
            continue;
        }
        if (a == "--dir" && i + 1 < argc) dir = argv[++i];
        else if (a == "--runs" && i + 1 < argc) runs = std::stoi(argv[++i]);
        else if (a == "--where" && i + 1 < argc) where = argv[++i];
        else if (a == "--copy" && i + 1 < argc) {
            const std::string m = argv[++i];
            if (m != "background" && m != "in-pause") throw Error("--copy is background or in-pause");
            mode = m == "background" ? snapshot::CopyMode::background : snapshot::CopyMode::in_pause;
        } else
            throw Error("usage: snapshot_bench --dir DIR [--runs N] [--where native|testhost] [--copy background|in-pause] "
                        "[--memory-only]");
    }
    if (dir.empty()) throw Error("--dir is required");
    std::filesystem::create_directories(dir);
    if (only_memory) return memory_only(dir, runs, where);

    const Kvm kvm = Kvm::open();
    Machine machine(kvm, GuestMemory::create(1024 * MiB), {.vcpus = 2, .irqchip = true, .log_dirty_pages = true});
    std::vector<DirtyTracker::Range> ranges;
    for (const MemoryRegion& r : machine.memory().regions()) ranges.push_back({r.gpa, r.size});
    DirtyTracker tracker(ranges);
    machine.memory().set_dirty_tracker(&tracker);
    fill(machine.memory(), 32 * MiB, 256 * MiB, 0x5a5a5a5a5a5a5a5aULL);
    test::install_counter_loops(machine);
    test::RecordingPio pio;
    test::RecordingMmio mmio;
    StopReason reason;
    std::thread runner([&] { reason = test::run_bounded(machine, pio, mmio, std::chrono::hours(1)); });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));

    std::map<std::string, Series> s;
    try {
    for (int r = 0; r < runs; ++r) {
        // pause / resume
        auto t = Clock::now();
        machine.pause();
        s["pause"].values.push_back(ms_since(t));
        t = Clock::now();
        machine.resume();
        s["resume"].values.push_back(ms_since(t));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));

        // full snapshot of the running VM: pause, capture state + write-protect
        // memory, resume; the layer is copied in the background until durable.
        const std::string full = fmt::format("{}/full{}", dir, r);
        t = Clock::now();
        machine.pause();
        const auto tp = Clock::now();
        auto pending = snapshot::start_full_snapshot(kvm, machine, full, &tracker, mode);
        s["snapshot_paused"].values.push_back(ms_since(tp));
        machine.resume();
        s["snapshot"].values.push_back(ms_since(t));
        const snapshot::SnapshotStats stats = pending->wait_durable();
        s["durable"].values.push_back(ms_since(t));
        pending.reset();
        if (!stats.fallback.empty()) std::cout << "fallback: " << stats.fallback << "\n";
        s["snapshot_state"].values.push_back(stats.state_ms);
        s["snapshot_scan"].values.push_back(stats.dirty_ms);
        s["snapshot_arm"].values.push_back(stats.arm_ms);
        s["snapshot_copy"].values.push_back(stats.memory_ms);
        s["snapshot_wp_faults"].values.push_back(static_cast<double>(stats.wp_faults));
        s["snapshot_pages"].values.push_back(static_cast<double>(stats.data_pages));

        // 16 MiB more, written by the VMM through the tracker while the guest runs
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        fill(machine.memory(), 400 * MiB, 16 * MiB, 0x1234567ULL + static_cast<uint64_t>(r));
        const std::string diff = fmt::format("{}/diff{}", dir, r);
        t = Clock::now();
        machine.pause();
        auto dpending = snapshot::start_diff_snapshot(kvm, machine, diff, full, &tracker, mode);
        machine.resume();
        s["diff_snapshot"].values.push_back(ms_since(t));
        const snapshot::SnapshotStats dstats = dpending->wait_durable();
        s["diff_durable"].values.push_back(ms_since(t));
        dpending.reset();
        s["diff_pages"].values.push_back(static_cast<double>(dstats.present_pages));

        // the flat file for the file backend (part of time-to-durable of the snapshot path)
        t = Clock::now();
        snapshot::ensure_flat_memory(full);
        s["flatten"].values.push_back(ms_since(t));

        for (const char* backend : {"file", "uffd"}) {
            t = Clock::now();
            const auto out = test::run_child(fmt::format("{} --dir {} --backend {} --run-ms 1", child, full, backend));
            const double wall = ms_since(t);
            if (out.at("exit") != "0")
                throw Error(fmt::format("restore ({}) failed: {}", backend, out.count("error") ? out.at("error") : "?"));
            s[fmt::format("restore_{}", backend)].values.push_back(std::stod(out.at("restore_ms")));
            s[fmt::format("restore_{}_process", backend)].values.push_back(wall);
        }
        std::filesystem::remove_all(full);
        std::filesystem::remove_all(diff);
    }
    } catch (...) {
        // Stop the guest and its thread before the error leaves (a joinable thread would abort).
        machine.resume();
        machine.request_stop("bench failed");
        runner.join();
        throw;
    }
    machine.request_stop("bench done");
    runner.join();

    std::cout << fmt::format("snapshot bench ({}), 1024 MiB / 2 vCPU probe, 256 MiB non-zero, {} runs, copy {}\n", where,
                             runs, mode == snapshot::CopyMode::background ? "background" : "in-pause");
    print(s);
    const auto key = [&](const char* k, const char* name) {
        return fmt::format(", \"nanovm_{}_ms\": {:.3f}, \"nanovm_{}_p99_ms\": {:.3f}", k, s[name].median(), k,
                           s[name].p99());
    };
    std::cout << "{\"case\": \"snapshot\", \"where\": \"" << where << "\"" << key("snapshot", "snapshot")
              << key("snapshot_paused", "snapshot_paused") << key("durable", "durable")
              << key("diff_snapshot", "diff_snapshot") << key("diff_durable", "diff_durable") << key("flatten", "flatten")
              << key("restore_file", "restore_file") << key("restore_uffd", "restore_uffd")
              << key("pause", "pause") << key("resume", "resume") << "}" << std::endl;
    return reason.kind == StopReason::Kind::requested ? 0 : 1;
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
