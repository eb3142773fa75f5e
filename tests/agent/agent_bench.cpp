// agent_bench: the guest agent's figures through the client library, for
// `tools/bench/run exec` (issue 4) and for measuring the agent natively:
//   - round trip of `true` (EXEC -> EXIT), median and p99 over --runs runs,
//   - PING round trip (the protocol alone, no process), median,
//   - throughput of writing and reading one --file-mib MiB file (MB/s, 10^6 bytes/s).
//
//   agent_bench --socket PATH [--vsock-port PORT] [--runs N] [--file-mib N]
//               [--guest-dir DIR] [--where native|testhost|hardware]
//
// --socket is a nanovm-agent's Unix socket, or with --vsock-port a VMM's vsock socket.
// Prints a table, then as its last line the JSON object of DESIGN.md "Conventions":
// nanovm_exec_ms, nanovm_exec_p99_ms, nanovm_ping_ms, nanovm_file_write_mbps,
// nanovm_file_read_mbps.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "api/agent_client/agent_client.hpp"

using namespace nanovm::agent;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double percentile(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
    return v[i];
}

[[noreturn]] void usage() {
    std::fprintf(stderr,
                 "usage: agent_bench --socket PATH [--vsock-port PORT] [--runs N] [--file-mib N]\n"
                 "                   [--guest-dir DIR] [--where native|testhost|hardware]\n");
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
    std::string socket_path, guest_dir = "/tmp", where = "native";
    std::optional<uint32_t> vsock_port;
    int runs = 1000;
    uint64_t file_mib = 256;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (i + 1 >= argc) usage();
        const char* value = argv[++i];
        if (arg == "--socket") socket_path = value;
        else if (arg == "--vsock-port") vsock_port = static_cast<uint32_t>(std::stoul(value));
        else if (arg == "--runs") runs = std::stoi(value);
        else if (arg == "--file-mib") file_mib = std::stoull(value);
        else if (arg == "--guest-dir") guest_dir = value;
        else if (arg == "--where") where = value;
        else usage();
    }
    if (socket_path.empty() || runs < 1) usage();
    const Endpoint endpoint = vsock_port ? Endpoint::vsock(socket_path, *vsock_port) : Endpoint::unix_socket(socket_path);

    try {
        AgentClient client = AgentClient::connect(endpoint);
        std::vector<double> ping_ms, exec_ms;
        for (int i = 0; i < runs; ++i) ping_ms.push_back(client.ping().count() / 1000.0);
        const Command command = Command::program({"true"});
        for (int i = 0; i < runs; ++i) {
            const auto start = std::chrono::steady_clock::now();
            if (!client.run(command).status.success()) throw std::runtime_error("true failed");
            exec_ms.push_back(seconds_since(start) * 1000);
        }

        const uint64_t size = file_mib << 20;
        const std::string path = guest_dir + "/agent-bench.bin";
        std::vector<char> block(256 << 10);
        for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>(i * 131 + 7);
        uint64_t offset = 0;
        auto start = std::chrono::steady_clock::now();
        client.write_file(path, [&](char* buf, size_t max) {
            const size_t n = static_cast<size_t>(std::min<uint64_t>({max, block.size(), size - offset}));
            std::memcpy(buf, block.data(), n);
            offset += n;
            return n;
        });
        const double write_s = seconds_since(start);
        start = std::chrono::steady_clock::now();
        const uint64_t got = client.read_file(path, [](std::string_view) {});
        const double read_s = seconds_since(start);
        client.remove(path);
        if (got != size) throw std::runtime_error("read back " + std::to_string(got) + " bytes");

        const double exec_med = percentile(exec_ms, 0.5), exec_p99 = percentile(exec_ms, 0.99);
        const double ping_med = percentile(ping_ms, 0.5);
        const double write_mbps = static_cast<double>(size) / 1e6 / write_s;
        const double read_mbps = static_cast<double>(size) / 1e6 / read_s;
        std::printf("%-34s %10s\n", "figure", "value");
        std::printf("%-34s %10.3f\n", "exec round trip of true, median ms", exec_med);
        std::printf("%-34s %10.3f\n", "exec round trip of true, p99 ms", exec_p99);
        std::printf("%-34s %10.3f\n", "ping round trip, median ms", ping_med);
        std::printf("%-34s %10.0f\n", "file write MB/s", write_mbps);
        std::printf("%-34s %10.0f\n", "file read MB/s", read_mbps);
        std::printf("{\"case\": \"exec\", \"where\": \"%s\", \"runs\": %d, \"file_mib\": %llu, "
                    "\"nanovm_exec_ms\": %.3f, \"nanovm_exec_p99_ms\": %.3f, \"nanovm_ping_ms\": %.3f, "
                    "\"nanovm_file_write_mbps\": %.0f, \"nanovm_file_read_mbps\": %.0f}\n",
                    where.c_str(), runs, static_cast<unsigned long long>(file_mib), exec_med, exec_p99, ping_med,
                    write_mbps, read_mbps);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "agent_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
