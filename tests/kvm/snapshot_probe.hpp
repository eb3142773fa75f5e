// The snapshot tests' probe guest: each vCPU runs a 32-bit flat protected-mode loop
// that increments its counter (a dword in guest RAM) and stores the new value into
// the first dword of the next page of its own area, wrapping around:
//     start: mov esi, BEGIN
//     loop:  mov eax, [COUNTER]; inc eax; mov [COUNTER], eax; mov [esi], eax
//            add esi, 4096; cmp esi, END; jb loop; jmp start
// So memory holds a pattern that says how far the guest got, and a restored copy
// must go on from exactly there. Shared by tests/kvm/snapshot_test.cpp and the
// restoring child process tests/kvm/snapshot_child.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "vmm/machine.hpp"

namespace nanovm::test {

/// One vCPU's loop: its code, its counter and the pages it writes ([begin, end), GPAs).
struct CounterLoop {
    uint32_t code = 0;     ///< GPA of the code (< 1 MiB)
    uint32_t counter = 0;  ///< GPA of the dword counter
    uint32_t begin = 0;    ///< first page written (GPA, page aligned)
    uint32_t end = 0;      ///< end of the area (GPA, page aligned)
};

/// The loops of the standard probe: vCPU 0 writes [1 MiB, 9 MiB), vCPU 1 [9 MiB, 17 MiB).
CounterLoop standard_loop(uint32_t vcpu);

/// The loop's machine code (34 bytes).
std::vector<uint8_t> counter_loop_code(const CounterLoop& loop);

/// Writes every vCPU's loop code and enters flat protected mode at it (vCPUs
/// beyond 0 are made runnable: with the in-kernel LAPIC they start waiting for SIPI).
void install_counter_loops(Machine& machine);

/// CRC-32C of guest RAM [gpa, gpa + len).
uint32_t memory_crc(const GuestMemory& memory, uint64_t gpa, uint64_t len);
/// CRC-32C of all guest RAM, region after region.
uint32_t ram_crc(const GuestMemory& memory);

/// Runs `command` through the shell and parses its "key=value" stdout lines; the
/// exit status is stored under "exit". Lines without '=' are kept under "line<N>".
std::map<std::string, std::string> run_child(const std::string& command);

}  // namespace nanovm::test
