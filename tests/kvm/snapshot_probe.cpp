#include "tests/kvm/snapshot_probe.hpp"

#include <sys/wait.h>

#include <cstdio>
#include <cstring>

#include "snapshot/crc32c.hpp"
#include "tests/kvm/probe.hpp"

namespace nanovm::test {

namespace {

void put32(std::vector<uint8_t>& code, uint32_t v) {
    for (int i = 0; i < 4; ++i) code.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace

CounterLoop standard_loop(uint32_t vcpu) {
    return {0x1000 + 0x100 * vcpu, 0x3000 + 4 * vcpu, static_cast<uint32_t>((1 + 8 * vcpu) * MiB),
            static_cast<uint32_t>((9 + 8 * vcpu) * MiB)};
}

std::vector<uint8_t> counter_loop_code(const CounterLoop& loop) {
    std::vector<uint8_t> c;
    c.push_back(0xbe);  // 0: mov esi, begin
    put32(c, loop.begin);
    c.push_back(0xa1);  // 5: mov eax, [counter]
    put32(c, loop.counter);
    c.push_back(0x40);  // 10: inc eax
    c.push_back(0xa3);  // 11: mov [counter], eax
    put32(c, loop.counter);
    c.insert(c.end(), {0x89, 0x06});                    // 16: mov [esi], eax
    c.insert(c.end(), {0x81, 0xc6, 0x00, 0x10, 0, 0});  // 18: add esi, 4096
    c.insert(c.end(), {0x81, 0xfe});                    // 24: cmp esi, end
    put32(c, loop.end);
    c.insert(c.end(), {0x72, 0xe5});  // 30: jb 5   (5 - 32 = -27)
    c.insert(c.end(), {0xeb, 0xde});  // 32: jmp 0  (0 - 34 = -34)
    return c;
}

void install_counter_loops(Machine& machine) {
    for (uint32_t i = 0; i < machine.vcpu_count(); ++i) {
        const CounterLoop loop = standard_loop(i);
        machine.memory().write_bytes(Gpa(loop.code), counter_loop_code(loop));
        if (i > 0) machine.vcpu(i).set_mp_state(KVM_MP_STATE_RUNNABLE);
        enter_flat32(machine.vcpu(i), loop.code);
    }
}

uint32_t memory_crc(const GuestMemory& memory, uint64_t gpa, uint64_t len) {
    return snapshot::crc32c(memory.slice(Gpa(gpa), len));
}

uint32_t ram_crc(const GuestMemory& memory) {
    uint32_t crc = 0;
    for (const MemoryRegion& r : memory.regions()) crc = snapshot::crc32c({r.host, r.size}, crc);
    return crc;
}

std::map<std::string, std::string> run_child(const std::string& command) {
    std::map<std::string, std::string> out;
    FILE* pipe = ::popen(command.c_str(), "r");
    if (!pipe) {
        out["exit"] = "popen failed";
        return out;
    }
    char line[4096];
    int n = 0;
    while (std::fgets(line, sizeof(line), pipe)) {
        std::string s(line);
        while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
        const size_t eq = s.find('=');
        if (eq == std::string::npos) out["line" + std::to_string(n++)] = s;
        else out[s.substr(0, eq)] = s.substr(eq + 1);
    }
    const int status = ::pclose(pipe);
    out["exit"] = std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return out;
}

}  // namespace nanovm::test
