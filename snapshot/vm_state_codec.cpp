// vm.state encoding and validation (snapshot/vm_state.hpp), apart from the KVM
// ioctls so that the fuzz build can take it alone.
#include <cstring>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "snapshot/snapshot_error.hpp"
#include "snapshot/state_file.hpp"
#include "snapshot/vm_state.hpp"

namespace nanovm::snapshot {

namespace {

constexpr size_t kLegacyXsaveBytes = 4096;
constexpr size_t kMaxXsaveBytes = 1 * 1024 * 1024;  // far above any CPU's XSAVE area
constexpr size_t kMaxMsrs = 1024;
constexpr size_t kMaxCpuidEntries = 256;            // KVM_MAX_CPUID_ENTRIES
constexpr uint64_t kMaxRamBytes = 1ULL << 40;       // 1 TiB
constexpr size_t kMaxDevicesBytes = 4 << 20;        // device-state JSON

template <typename T>
std::span<const uint8_t> bytes_of_vector(const std::vector<T>& values) {
    return {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(T)};
}

}  // namespace

std::vector<uint8_t> encode_vm_state(const VmState& state) {
    StateWriter w;
    w.add_object(SectionType::machine, 0, state.machine);
    for (uint32_t i = 0; i < state.vcpus.size(); ++i) {
        const VcpuState& v = state.vcpus[i];
        w.add_object(SectionType::vcpu_mp_state, i, v.mp_state);
        w.add_object(SectionType::vcpu_regs, i, v.regs);
        w.add_object(SectionType::vcpu_sregs, i, v.sregs);
        w.add(SectionType::vcpu_xsave, i, v.xsave);
        w.add_object(SectionType::vcpu_xcrs, i, v.xcrs);
        w.add_object(SectionType::vcpu_debugregs, i, v.debugregs);
        if (v.lapic) w.add_object(SectionType::vcpu_lapic, i, *v.lapic);
        w.add(SectionType::vcpu_msrs, i, bytes_of_vector(v.msrs));
        w.add_object(SectionType::vcpu_events, i, v.events);
        w.add(SectionType::vcpu_cpuid, i, bytes_of_vector(v.cpuid));
    }
    if (state.irqchip) {
        w.add_object(SectionType::pic_master, 0, state.irqchip->pic_master);
        w.add_object(SectionType::pic_slave, 0, state.irqchip->pic_slave);
        w.add_object(SectionType::ioapic, 0, state.irqchip->ioapic);
        w.add_object(SectionType::pit2, 0, state.irqchip->pit);
    }
    w.add_object(SectionType::clock, 0, state.clock);
    if (!state.devices.empty())
        w.add(SectionType::devices, 0,
              {reinterpret_cast<const uint8_t*>(state.devices.data()), state.devices.size()});
    return w.finish();
}

namespace {

// Decoding helpers: each names the section it checks.
class Decoder {
public:
    explicit Decoder(std::string_view file_name) : file_(file_name) {}

    SnapshotError error(const SectionView& s, const std::string& what) const {
        return SnapshotError(fmt::format("{}: section {}: {}", file_, section_name(s.type, s.instance), what));
    }
    template <typename T>
    T object(const SectionView& s) const {
        if (s.payload.size() != sizeof(T))
            throw error(s, fmt::format("{} bytes, expected {}", s.payload.size(), sizeof(T)));
        T value;
        std::memcpy(&value, s.payload.data(), sizeof(T));
        return value;
    }
    template <typename T>
    std::vector<T> array(const SectionView& s, size_t max_count) const {
        if (s.payload.size() % sizeof(T) != 0)
            throw error(s, fmt::format("{} bytes is not a whole number of {}-byte entries", s.payload.size(),
                                       sizeof(T)));
        const size_t n = s.payload.size() / sizeof(T);
        if (n > max_count) throw error(s, fmt::format("{} entries, at most {} allowed", n, max_count));
        std::vector<T> out(n);
        if (n) std::memcpy(out.data(), s.payload.data(), s.payload.size());
        return out;
    }

private:
    std::string_view file_;
};

}  // namespace

VmState decode_vm_state(std::span<const uint8_t> file, std::string_view file_name) {
    const std::vector<SectionView> sections = parse_state_file(file, file_name);
    const Decoder d(file_name);
    const auto fail = [&](const std::string& what) { return SnapshotError(fmt::format("{}: {}", file_name, what)); };

    // Index the sections, refusing duplicates.
    std::map<std::pair<uint32_t, uint32_t>, const SectionView*> by_key;
    for (const SectionView& s : sections)
        if (!by_key.emplace(std::make_pair(s.type, s.instance), &s).second) throw d.error(s, "appears twice");
    const auto find = [&](SectionType type, uint32_t instance) -> const SectionView* {
        auto it = by_key.find({static_cast<uint32_t>(type), instance});
        return it == by_key.end() ? nullptr : it->second;
    };
    const auto need = [&](SectionType type, uint32_t instance) -> const SectionView& {
        const SectionView* s = find(type, instance);
        if (!s) throw fail(fmt::format("section {} is missing", section_name(static_cast<uint32_t>(type), instance)));
        return *s;
    };

    VmState state;
    const SectionView& machine = need(SectionType::machine, 0);
    state.machine = d.object<MachineInfo>(machine);
    const MachineInfo& info = state.machine;
    if (info.vcpus == 0 || info.vcpus > kMaxVcpus)
        throw d.error(machine, fmt::format("{} vCPUs: a machine has 1 to {}", info.vcpus, kMaxVcpus));
    if (info.irqchip > 1) throw d.error(machine, fmt::format("irqchip flag {} is neither 0 nor 1", info.irqchip));
    if (info.ram_bytes == 0 || info.ram_bytes % kPageSize != 0 || info.ram_bytes > kMaxRamBytes)
        throw d.error(machine, fmt::format("RAM size {} bytes is not a multiple of 4 KiB in (0, 1 TiB]", info.ram_bytes));
    // Every section must belong to this machine's shape.
    for (const SectionView& s : sections) {
        const bool per_vcpu = s.type >= static_cast<uint32_t>(SectionType::vcpu_regs) &&
                              s.type <= static_cast<uint32_t>(SectionType::vcpu_cpuid);
        if (per_vcpu && s.instance >= info.vcpus)
            throw d.error(s, fmt::format("vCPU index {} but the machine has {} vCPUs", s.instance, info.vcpus));
        if (!per_vcpu && s.instance != 0) throw d.error(s, "instance must be 0");
        if (!info.irqchip && (s.type == static_cast<uint32_t>(SectionType::vcpu_lapic) ||
                              (s.type >= static_cast<uint32_t>(SectionType::pic_master) &&
                               s.type <= static_cast<uint32_t>(SectionType::pit2))))
            throw d.error(s, "present although the machine has no irqchip");
    }

    for (uint32_t i = 0; i < info.vcpus; ++i) {
        VcpuState v;
        v.mp_state = d.object<kvm_mp_state>(need(SectionType::vcpu_mp_state, i));
        v.regs = d.object<kvm_regs>(need(SectionType::vcpu_regs, i));
        v.sregs = d.object<kvm_sregs>(need(SectionType::vcpu_sregs, i));
        const SectionView& xsave = need(SectionType::vcpu_xsave, i);
        if (xsave.payload.size() < kLegacyXsaveBytes || xsave.payload.size() > kMaxXsaveBytes ||
            xsave.payload.size() % 4 != 0)
            throw d.error(xsave, fmt::format("{} bytes: an XSAVE area is 4096 to {} bytes, a multiple of 4",
                                             xsave.payload.size(), kMaxXsaveBytes));
        v.xsave.assign(xsave.payload.begin(), xsave.payload.end());
        v.xcrs = d.object<kvm_xcrs>(need(SectionType::vcpu_xcrs, i));
        const SectionView& xcrs = need(SectionType::vcpu_xcrs, i);
        if (v.xcrs.nr_xcrs > KVM_MAX_XCRS)
            throw d.error(xcrs, fmt::format("{} XCRs, at most {}", v.xcrs.nr_xcrs, KVM_MAX_XCRS));
        v.debugregs = d.object<kvm_debugregs>(need(SectionType::vcpu_debugregs, i));
        if (info.irqchip) v.lapic = d.object<kvm_lapic_state>(need(SectionType::vcpu_lapic, i));
        v.msrs = d.array<kvm_msr_entry>(need(SectionType::vcpu_msrs, i), kMaxMsrs);
        v.events = d.object<kvm_vcpu_events>(need(SectionType::vcpu_events, i));
        v.cpuid = d.array<kvm_cpuid_entry2>(need(SectionType::vcpu_cpuid, i), kMaxCpuidEntries);
        state.vcpus.push_back(std::move(v));
    }
    if (info.irqchip) {
        IrqchipState chip;
        const auto chip_of = [&](SectionType type, uint32_t chip_id) {
            const SectionView& s = need(type, 0);
            const auto c = d.object<kvm_irqchip>(s);
            if (c.chip_id != chip_id) throw d.error(s, fmt::format("chip id {} where {} belongs", c.chip_id, chip_id));
            return c;
        };
        chip.pic_master = chip_of(SectionType::pic_master, KVM_IRQCHIP_PIC_MASTER);
        chip.pic_slave = chip_of(SectionType::pic_slave, KVM_IRQCHIP_PIC_SLAVE);
        chip.ioapic = chip_of(SectionType::ioapic, KVM_IRQCHIP_IOAPIC);
        chip.pit = d.object<kvm_pit_state2>(need(SectionType::pit2, 0));
        state.irqchip = chip;
    }
    state.clock = d.object<kvm_clock_data>(need(SectionType::clock, 0));
    if (const SectionView* devices = find(SectionType::devices, 0)) {
        if (devices->payload.empty() || devices->payload.size() > kMaxDevicesBytes)
            throw d.error(*devices, fmt::format("{} bytes: device state is 1 to {} bytes", devices->payload.size(),
                                                kMaxDevicesBytes));
        state.devices.assign(reinterpret_cast<const char*>(devices->payload.data()), devices->payload.size());
    }
    return state;
}

}  // namespace nanovm::snapshot
