// libFuzzer harness for the vm.state reader (snapshot/state_file.hpp and
// snapshot/vm_state.hpp): any input either decodes into a VmState whose shape the
// decoder promised (1..32 vCPUs, one state per vCPU, a LAPIC exactly with the
// irqchip, XSAVE areas of 4096 bytes and up) and that re-encodes to a file decoding
// to the same bytes, or is refused with SnapshotError. Never a crash, never another
// exception. Seeds: fuzz/corpus/vm_state/ (two valid files: 1 vCPU with the irqchip,
// 2 vCPUs without; made with snapshot::encode_vm_state).
#include <cstdint>
#include <span>

#include "fuzz/fuzz_support.hpp"
#include "snapshot/snapshot_error.hpp"
#include "snapshot/vm_state.hpp"

using namespace nanovm;
using namespace nanovm::snapshot;
using nanovm::fuzz::fuzz_check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    VmState state;
    try {
        state = decode_vm_state(std::span<const uint8_t>(data, size), "vm.state");
    } catch (const SnapshotError&) {
        return 0;
    }
    fuzz_check(state.machine.vcpus >= 1 && state.machine.vcpus <= kMaxVcpus, "vCPU count in range");
    fuzz_check(state.vcpus.size() == state.machine.vcpus, "one state per vCPU");
    for (const VcpuState& v : state.vcpus) {
        fuzz_check(v.lapic.has_value() == (state.machine.irqchip != 0), "LAPIC exactly with the irqchip");
        fuzz_check(v.xsave.size() >= 4096, "XSAVE area of at least 4096 bytes");
    }
    fuzz_check(state.irqchip.has_value() == (state.machine.irqchip != 0), "irqchip state exactly with the irqchip");
    const std::vector<uint8_t> again = encode_vm_state(state);
    const VmState decoded = decode_vm_state(again, "re-encoded");
    fuzz_check(encode_vm_state(decoded) == again, "re-encoding is stable");
    return 0;
}
