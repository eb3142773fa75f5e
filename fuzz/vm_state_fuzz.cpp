// libFuzzer harness for the vm.state reader (snapshot/state_file.hpp and
// snapshot/vm_state.hpp): any input either decodes into a VmState whose shape the
// decoder promised (1..32 vCPUs, one state per vCPU, a LAPIC exactly with the
// irqchip, XSAVE areas of 4096 bytes and up) and that re-encodes to a file decoding
// to the same bytes, or is refused with SnapshotError. Never a crash, never another
// exception. Checksums would stop almost every mutation at the parser, so inputs
// whose first byte is 0xA5 are instead read as sections (u32 type, u32 instance, u16
// length, payload)... and written with StateWriter, valid checksums and all: that
// reaches the section validation of decode_vm_state. Seeds: fuzz/corpus/vm_state/ (two valid files: 1 vCPU with the irqchip,
// 2 vCPUs without; made with snapshot::encode_vm_state).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "snapshot/snapshot_error.hpp"
#include "snapshot/state_file.hpp"
#include "snapshot/vm_state.hpp"

using namespace nanovm;
using namespace nanovm::snapshot;
using nanovm::fuzz::fuzz_check;

namespace {

// Builds a checksummed state file from the section list encoded in `in`.
std::vector<uint8_t> sections_to_file(std::span<const uint8_t> in) {
    StateWriter w;
    size_t at = 0;
    while (in.size() - at >= 10) {
        uint32_t type, instance;
        uint16_t length;
        std::memcpy(&type, in.data() + at, 4);
        std::memcpy(&instance, in.data() + at + 4, 4);
        std::memcpy(&length, in.data() + at + 8, 2);
        at += 10;
        const size_t n = std::min<size_t>(length, in.size() - at);
        w.add(static_cast<SectionType>(type), instance, in.subspan(at, n));
        at += n;
    }
    return w.finish();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    VmState state;
    std::vector<uint8_t> built;
    std::span<const uint8_t> file(data, size);
    if (size > 0 && data[0] == 0xa5) {
        built = sections_to_file(file.subspan(1));
        file = built;
    }
    try {
        state = decode_vm_state(file, "vm.state");
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
