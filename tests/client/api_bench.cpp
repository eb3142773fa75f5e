// tools/bench/run api: nanovmd's API against the same operations driven directly
// through the VM layer (api/vm/: the launcher, vm_ops over the control socket,
// guest_ops over the agent client), from this one process, interleaved round by
// round (which side goes first alternates). The daemon must be running on --socket;
// the direct side's VMs live in --run-dir. Sandboxes: --cpus / --memory (1, 256).
//
// Per round and side: create; exec `true` (--exec-runs times); files (write then read
// back 1 MiB in /tmp, --file-runs times); pause and resume (--pause-runs times each);
// snapshot (not waiting until durable; the wait is outside the timing); restore it;
// fork n=1; fork n=4; delete every sandbox made (7 deletions). Each side does on each
// operation what a client of it must: the API one HTTP request (exec: the whole
// result; files: a PUT and a GET), the direct side one agent connection per exec and
// per file transfer, as the daemon does.
//
// Prints a table, then one JSON line: nanovm_api_<op>_ms and direct_<op>_ms (median
// of every sample), ..._p99_ms, and nanovm_api_<op>_overhead_ms (the median over
// rounds of the API's round median minus the direct round median).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/agent_client/agent_client.hpp"
#include "api/client/api_client.hpp"
#include "api/vm/guest_ops.hpp"
#include "api/vm/launcher.hpp"
#include "api/vm/state_dir.hpp"
#include "api/vm/vm_ops.hpp"
#include "guest-init/protocol/frame.hpp"
#include "snapshot/manifest.hpp"

namespace {

using nanovm::Error;
using nlohmann::json;
namespace vm = nanovm::vm;
namespace agent = nanovm::agent;
namespace client = nanovm::client;
using Clock = std::chrono::steady_clock;

const char* const kOps[] = {"create", "exec", "files", "files_write", "files_read", "snapshot", "restore",
                            "fork1", "fork4", "pause", "resume", "delete"};

struct Args {
    std::string socket, run_dir, where = "native";
    int rounds = 5, exec_runs = 20, file_runs = 5, pause_runs = 10;
    uint32_t cpus = 1, memory = 256;
};

// Samples of one side in one round, by op.
using Samples = std::map<std::string, std::vector<double>>;

template <typename F>
double timed(Samples& s, const std::string& op, F&& f) {
    const auto t0 = Clock::now();
    f();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    s[op].push_back(ms);
    return ms;
}

double quantile(std::vector<double> v, double q) {
    if (v.empty()) return -1;
    std::sort(v.begin(), v.end());
    const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5));
    return v[i];
}

const std::string kFile = "/tmp/nanovm-api-bench.bin";
const std::string kPayload = [] {
    std::string s(1u << 20, '\0');
    for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>((i * 131) ^ (i >> 12));
    return s;
}();

void check(bool ok, const std::string& what) {
    if (!ok) throw Error(what);
}

// ---- through the API
struct ApiSide {
    client::ApiClient api;

    std::string create(const Args& a) {
        return api.post("/v1/sandboxes", json{{"image", "default"}, {"cpus", a.cpus}, {"memory_mb", a.memory}})["id"];
    }
    void exec(const std::string& id) {
        const json r = api.post("/v1/sandboxes/" + id + "/exec", json{{"argv", {"true"}}});
        check(r.value("exit_code", -1) == 0, "api exec true: " + r.dump());
    }
    void files(const std::string& id, Samples& s) {
        client::RequestBody body;
        body.data = kPayload;
        body.content_type = "application/octet-stream";
        const std::string target = "/v1/sandboxes/" + id + "/files?path=" + client::url_encode(kFile);
        timed(s, "files_write", [&] { client::throw_if_error(api.http().request("PUT", target, body)); });
        client::Response r;
        timed(s, "files_read", [&] { r = api.http().request("GET", target); });
        client::throw_if_error(r);
        check(r.body == kPayload, "api files: the 1 MiB read back differs");
    }
    /// GET /v1/health: an HTTP request through the server, router and a worker, with
    /// no store or VM work: what every API call costs at the least.
    void roundtrip() { api.get("/v1/health"); }
    void pause(const std::string& id) { api.post("/v1/sandboxes/" + id + "/pause"); }
    void resume(const std::string& id) { api.post("/v1/sandboxes/" + id + "/resume"); }
    std::string snapshot(const std::string& id) { return api.post("/v1/sandboxes/" + id + "/snapshots")["id"]; }
    void wait_durable(const std::string& snap) {
        check(api.post("/v1/snapshots/" + snap + "/wait", json{{"timeout_s", 600}}).value("durable", false),
              "api snapshot not durable in 600 s");
    }
    std::string restore(const std::string& snap) { return api.post("/v1/snapshots/" + snap + "/restore")["id"]; }
    std::vector<std::string> fork(const std::string& id, int n) {
        std::vector<std::string> ids;
        // The answer is kept in a variable: a range-for over `post(...)["children"]` iterates
        // a member of a temporary destroyed before the loop runs (C++20 extends only the
        // outermost temporary's life).
        const json answer = api.post("/v1/sandboxes/" + id + "/fork", json{{"n", n}});
        for (const json& c : answer.at("children")) {
            check(c["sandbox"].is_object(), "api fork child failed: " + c.dump());
            ids.push_back(c["sandbox"]["id"]);
        }
        return ids;
    }
    void remove(const std::string& id) { api.remove("/v1/sandboxes/" + id); }
    void remove_snapshot(const std::string& snap) { api.remove("/v1/snapshots/" + snap); }
};

// ---- directly through the VM layer
struct DirectSide {
    vm::RunDir run;
    int snapshots = 0;

    vm::SandboxSpec spec(const Args& a) const {
        vm::SandboxSpec s;
        s.run_dir = run.root;
        s.cpus = a.cpus;
        s.memory_mib = a.memory;
        s.fork_standby = 0;
        return s;
    }
    agent::AgentClient connect(const std::string& id) {
        return agent::AgentClient::connect(
            agent::Endpoint::vsock(run.vm(id).vsock_socket(), agent::proto::kAgentVsockPort), std::chrono::seconds(10));
    }
    std::string create(const Args& a) { return vm::start_vm(spec(a), false).paths.id; }
    void exec(const std::string& id) {
        agent::AgentClient c = connect(id);
        const agent::ExecResult r = vm::exec_command(c, agent::Command::program({"true"}));
        check(r.status.shell_code() == 0, "direct exec true failed");
    }
    void files(const std::string& id, Samples& s) {
        timed(s, "files_write", [&] {
            agent::AgentClient c = connect(id);
            size_t at = 0;
            vm::write_guest_file(c, kFile, [&](char* buf, size_t n) {
                const size_t k = std::min(n, kPayload.size() - at);
                std::copy_n(kPayload.data() + at, k, buf);
                at += k;
                return k;
            });
        });
        std::string back;
        timed(s, "files_read", [&] {
            agent::AgentClient c = connect(id);
            vm::read_guest_file(c, kFile, [&](std::string_view d) { back.append(d); });
        });
        check(back == kPayload, "direct files: the 1 MiB read back differs");
    }
    void pause(const std::string& id) { vm::pause_vm(run.vm(id)); }
    void resume(const std::string& id) { vm::resume_vm(run.vm(id)); }
    std::string snapshot(const std::string& id) {
        const std::string dir = fmt::format("{}/snapshots/{}-{}", run.root, id, ++snapshots);
        std::filesystem::create_directories(run.root + "/snapshots");
        vm::snapshot_vm(run.vm(id), vm::SnapshotRequest{dir});
        return dir;
    }
    void wait_durable(const std::string& dir) {
        for (int i = 0; i < 60000 && !nanovm::snapshot::is_durable(dir); ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        check(nanovm::snapshot::is_durable(dir), "direct snapshot not durable in 600 s");
    }
    std::string restore(const Args& a, const std::string& dir) { return vm::restore_vm(spec(a), dir).paths.id; }
    std::vector<std::string> fork(const Args& a, const std::string& id, int n) {
        vm::ForkRequest req;
        req.count = static_cast<uint32_t>(n);
        req.child = spec(a);
        std::vector<std::string> ids;
        for (const vm::ForkChild& c : vm::fork_vm(run, run.vm(id), req).children) {
            check(std::holds_alternative<vm::StartedVm>(c), "direct fork child failed: " +
                                                                (std::holds_alternative<vm::ForkFailure>(c)
                                                                     ? std::get<vm::ForkFailure>(c).error
                                                                     : std::string()));
            ids.push_back(std::get<vm::StartedVm>(c).paths.id);
        }
        return ids;
    }
    void remove(const std::string& id) {
        vm::stop_vm(run.vm(id), vm::StopRequest{true, std::chrono::milliseconds(0)});
        vm::remove_vm_dir(run.vm(id));
    }
    void remove_snapshot(const std::string& dir) { std::filesystem::remove_all(dir); }
};

// One round of one side: every op, in the order of the header.
template <typename Side, typename Create, typename Restore, typename Fork>
void round(Side& side, const Args& a, Samples& s, Create create, Restore restore, Fork fork) {
    std::string id;
    timed(s, "create", [&] { id = create(); });
    std::vector<std::string> made{id};
    for (int i = 0; i < a.exec_runs; ++i) timed(s, "exec", [&] { side.exec(id); });
    if constexpr (requires { side.roundtrip(); }) {  // the API's floor: a request that does nothing
        for (int i = 0; i < a.exec_runs; ++i) timed(s, "roundtrip", [&] { side.roundtrip(); });
    }
    for (int i = 0; i < a.file_runs; ++i) timed(s, "files", [&] { side.files(id, s); });
    for (int i = 0; i < a.pause_runs; ++i) {
        timed(s, "pause", [&] { side.pause(id); });
        timed(s, "resume", [&] { side.resume(id); });
    }
    std::string snap;
    timed(s, "snapshot", [&] { snap = side.snapshot(id); });
    side.wait_durable(snap);
    timed(s, "restore", [&] { made.push_back(restore(snap)); });
    for (int n : {1, 4}) {
        std::vector<std::string> kids;
        timed(s, fmt::format("fork{}", n), [&] { kids = fork(id, n); });
        made.insert(made.end(), kids.begin(), kids.end());
    }
    for (const std::string& m : made) timed(s, "delete", [&] { side.remove(m); });
    side.remove_snapshot(snap);
}

int run(const Args& a) {
    ApiSide api{client::ApiClient(client::Endpoint{a.socket})};
    DirectSide direct{vm::RunDir{std::filesystem::absolute(a.run_dir).string()}};
    std::filesystem::create_directories(direct.run.root);
    std::vector<Samples> api_rounds(a.rounds), direct_rounds(a.rounds);
    for (int r = 0; r < a.rounds; ++r) {
        const auto do_api = [&] {
            round(api, a, api_rounds[r], [&] { return api.create(a); }, [&](const std::string& s) { return api.restore(s); },
                  [&](const std::string& id, int n) { return api.fork(id, n); });
        };
        const auto do_direct = [&] {
            round(direct, a, direct_rounds[r], [&] { return direct.create(a); },
                  [&](const std::string& s) { return direct.restore(a, s); },
                  [&](const std::string& id, int n) { return direct.fork(a, id, n); });
            vm::clean_unused_fork_bases(direct.run);
        };
        if (r % 2 == 0) {
            do_api();
            do_direct();
        } else {
            do_direct();
            do_api();
        }
        std::fprintf(stderr, "api bench: round %d/%d done\n", r + 1, a.rounds);
    }
    json out{{"case", "api"}, {"where", a.where}, {"rounds", a.rounds}, {"cpus", a.cpus}, {"memory_mb", a.memory},
             {"exec_runs", a.exec_runs}, {"file_runs", a.file_runs}, {"pause_runs", a.pause_runs}};
    std::printf("api bench (%s; %d rounds, %u vCPU / %u MiB sandboxes; direct = api/vm library in-process)\n",
                a.where.c_str(), a.rounds, a.cpus, a.memory);
    std::printf("%-9s %10s %10s %10s %10s %12s\n", "op", "api p50", "api p99", "direct p50", "direct p99", "overhead p50");
    const auto r1 = [](double v) { return std::round(v * 1000) / 1000; };
    for (const char* op : kOps) {
        std::vector<double> all_api, all_direct, diffs;
        for (int r = 0; r < a.rounds; ++r) {
            const auto& x = api_rounds[r][op];
            const auto& y = direct_rounds[r][op];
            all_api.insert(all_api.end(), x.begin(), x.end());
            all_direct.insert(all_direct.end(), y.begin(), y.end());
            diffs.push_back(quantile(x, 0.5) - quantile(y, 0.5));
        }
        const double ap50 = quantile(all_api, 0.5), ap99 = quantile(all_api, 0.99);
        const double dp50 = quantile(all_direct, 0.5), dp99 = quantile(all_direct, 0.99);
        const double over = quantile(diffs, 0.5);
        std::printf("%-9s %10.2f %10.2f %10.2f %10.2f %12.2f\n", op, ap50, ap99, dp50, dp99, over);
        out[fmt::format("nanovm_api_{}_ms", op)] = r1(ap50);
        out[fmt::format("nanovm_api_{}_p99_ms", op)] = r1(ap99);
        out[fmt::format("direct_{}_ms", op)] = r1(dp50);
        out[fmt::format("direct_{}_p99_ms", op)] = r1(dp99);
        out[fmt::format("nanovm_api_{}_overhead_ms", op)] = r1(over);
    }
    // The goal (issue 17): on these ops the API adds at most 2 ms or 10% of the direct path.
    for (const char* op : {"exec", "files", "pause", "resume"}) {
        const double allowed = std::max(2.0, 0.1 * out[fmt::format("direct_{}_ms", op)].get<double>());
        out[fmt::format("nanovm_api_{}_overhead_allowed_ms", op)] = r1(allowed);
        out[fmt::format("nanovm_api_{}_within_goal", op)] =
            out[fmt::format("nanovm_api_{}_overhead_ms", op)].get<double>() <= allowed;
    }
    std::vector<double> trips;
    for (int r = 0; r < a.rounds; ++r) trips.insert(trips.end(), api_rounds[r]["roundtrip"].begin(), api_rounds[r]["roundtrip"].end());
    out["nanovm_api_roundtrip_ms"] = r1(quantile(trips, 0.5));
    out["nanovm_api_roundtrip_p99_ms"] = r1(quantile(trips, 0.99));
    std::printf("roundtrip %10.2f %10.2f   (GET /v1/health: the API's floor)\n", quantile(trips, 0.5), quantile(trips, 0.99));
    std::printf("%s\n", out.dump().c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    // The launcher starts a VMM by re-executing its own binary as `_vmm` (and fork
    // standbys as `_standby`): here that is this driver, which hands them to
    // build/nanovm (../../nanovm from build/tests/client/), the fds they inherit kept.
    if (argc > 1 && (std::string(argv[1]) == "_vmm" || std::string(argv[1]) == "_standby")) {
        static std::string nanovm =
            (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "../../nanovm").lexically_normal().string();
        argv[0] = nanovm.data();
        ::execv(nanovm.c_str(), argv);
        std::perror(("api_bench: exec " + nanovm).c_str());
        return 127;
    }
    Args a;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--socket") a.socket = v;
        else if (k == "--run-dir") a.run_dir = v;
        else if (k == "--where") a.where = v;
        else if (k == "--rounds") a.rounds = std::stoi(v);
        else if (k == "--exec-runs") a.exec_runs = std::stoi(v);
        else if (k == "--file-runs") a.file_runs = std::stoi(v);
        else if (k == "--pause-runs") a.pause_runs = std::stoi(v);
        else if (k == "--cpus") a.cpus = static_cast<uint32_t>(std::stoul(v));
        else if (k == "--memory") a.memory = static_cast<uint32_t>(std::stoul(v));
        else {
            std::fprintf(stderr, "api_bench: unknown option %s\n", k.c_str());
            return 2;
        }
    }
    if (a.socket.empty() || a.run_dir.empty() || a.rounds < 1) {
        std::fprintf(stderr, "usage: api_bench --socket SOCK --run-dir DIR [--rounds N] [--where W] ...\n");
        return 2;
    }
    try {
        return run(a);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "api_bench: %s\n", e.what());
        return 1;
    }
}
