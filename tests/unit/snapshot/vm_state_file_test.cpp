// vm.state contents: a VmState encodes and decodes to the same bytes, and a file
// with a missing, duplicated, mis-sized or out-of-range section is refused naming it.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "snapshot/snapshot_error.hpp"
#include "snapshot/state_file.hpp"
#include "snapshot/vm_state.hpp"

using namespace nanovm;
using namespace nanovm::snapshot;

namespace {

VmState sample_state() {
    VmState s;
    s.machine = {2, 1, 64 * MiB};
    for (uint32_t i = 0; i < 2; ++i) {
        VcpuState v;
        v.regs.rip = 0x1000 + i;
        v.regs.rax = 0x1234;
        v.sregs.cr0 = 0x11;
        v.xsave.assign(4096, static_cast<uint8_t>(i + 1));
        v.xcrs.nr_xcrs = 1;
        v.lapic = kvm_lapic_state{};
        v.lapic->regs[0x20] = static_cast<char>(i);
        v.msrs = {{0x10, 0, 123456}, {0x4b564d01, 0, 0x5001}};
        v.events.exception.injected = 0;
        v.mp_state.mp_state = KVM_MP_STATE_RUNNABLE;
        v.cpuid.resize(3);
        v.cpuid[1].function = 1;
        s.vcpus.push_back(v);
    }
    IrqchipState chip;
    chip.pic_master.chip_id = KVM_IRQCHIP_PIC_MASTER;
    chip.pic_slave.chip_id = KVM_IRQCHIP_PIC_SLAVE;
    chip.ioapic.chip_id = KVM_IRQCHIP_IOAPIC;
    chip.pit.channels[0].count = 0xffff;
    s.irqchip = chip;
    s.clock.clock = 987654321;
    return s;
}

std::string decode_error(const std::vector<uint8_t>& file) {
    try {
        decode_vm_state(file, "vm.state");
    } catch (const SnapshotError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("a VM state encodes and decodes to the same state", "[snapshot][unit]") {
    const VmState s = sample_state();
    const std::vector<uint8_t> file = encode_vm_state(s);
    const VmState d = decode_vm_state(file, "vm.state");
    CHECK(d.machine.vcpus == 2);
    CHECK(d.machine.ram_bytes == 64 * MiB);
    REQUIRE(d.vcpus.size() == 2);
    CHECK(d.vcpus[1].regs.rip == 0x1001);
    CHECK(d.vcpus[1].xsave == s.vcpus[1].xsave);
    CHECK(d.vcpus[0].msrs.size() == 2);
    CHECK(d.vcpus[0].msrs[1].data == 0x5001);
    CHECK(d.vcpus[1].lapic->regs[0x20] == 1);
    CHECK(d.vcpus[0].cpuid.size() == 3);
    REQUIRE(d.irqchip);
    CHECK(d.irqchip->pit.channels[0].count == 0xffff);
    CHECK(d.clock.clock == 987654321);
    CHECK(encode_vm_state(d) == file);  // byte-identical re-encoding
}

TEST_CASE("vm.state keeps the device owner's \"devices\" section, absent when empty", "[snapshot][unit]") {
    VmState s = sample_state();
    CHECK(decode_vm_state(encode_vm_state(s), "vm.state").devices.empty());
    s.devices = R"({"version":1,"devices":{"virtio":[]}})";
    const std::vector<uint8_t> file = encode_vm_state(s);
    CHECK(decode_vm_state(file, "vm.state").devices == s.devices);
    CHECK(file.size() > encode_vm_state(sample_state()).size() + s.devices.size());
}

TEST_CASE("vm.state with a missing, duplicated or mis-sized section is refused naming it", "[snapshot][unit]") {
    const VmState s = sample_state();
    const auto sections_of = [](const std::vector<uint8_t>& file) { return parse_state_file(file, "x"); };
    const std::vector<uint8_t> good = encode_vm_state(s);
    const auto sections = sections_of(good);

    // Rebuild the file leaving out / doubling / shrinking one section.
    const auto rebuild = [&](auto&& edit) {
        StateWriter w;
        for (const SectionView& v : sections) edit(w, v);
        return w.finish();
    };
    const auto is = [](const SectionView& v, SectionType t, uint32_t i) {
        return v.type == static_cast<uint32_t>(t) && v.instance == i;
    };
    const std::vector<uint8_t> missing = rebuild([&](StateWriter& w, const SectionView& v) {
        if (!is(v, SectionType::vcpu_sregs, 1)) w.add(static_cast<SectionType>(v.type), v.instance, v.payload);
    });
    CHECK(decode_error(missing) == "vm.state: section vcpu 1 sregs is missing");

    const std::vector<uint8_t> twice = rebuild([&](StateWriter& w, const SectionView& v) {
        w.add(static_cast<SectionType>(v.type), v.instance, v.payload);
        if (is(v, SectionType::clock, 0)) w.add(SectionType::clock, 0, v.payload);
    });
    CHECK(decode_error(twice) == "vm.state: section clock: appears twice");

    const std::vector<uint8_t> short_lapic = rebuild([&](StateWriter& w, const SectionView& v) {
        w.add(static_cast<SectionType>(v.type), v.instance,
              is(v, SectionType::vcpu_lapic, 0) ? v.payload.first(100) : v.payload);
    });
    CHECK(decode_error(short_lapic) == "vm.state: section vcpu 0 lapic: 100 bytes, expected 1024");

    const std::vector<uint8_t> extra_vcpu = rebuild([&](StateWriter& w, const SectionView& v) {
        w.add(static_cast<SectionType>(v.type), v.instance, v.payload);
        if (is(v, SectionType::vcpu_regs, 0)) w.add(SectionType::vcpu_regs, 7, v.payload);
    });
    CHECK(decode_error(extra_vcpu) == "vm.state: section vcpu 7 regs: vCPU index 7 but the machine has 2 vCPUs");

    const std::vector<uint8_t> bad_chip = rebuild([&](StateWriter& w, const SectionView& v) {
        if (is(v, SectionType::ioapic, 0)) {
            kvm_irqchip chip{};
            std::memcpy(&chip, v.payload.data(), sizeof(chip));
            chip.chip_id = KVM_IRQCHIP_PIC_MASTER;
            w.add_object(SectionType::ioapic, 0, chip);
        } else {
            w.add(static_cast<SectionType>(v.type), v.instance, v.payload);
        }
    });
    CHECK(decode_error(bad_chip) == "vm.state: section ioapic: chip id 0 where 2 belongs");

    const std::vector<uint8_t> odd_msrs = rebuild([&](StateWriter& w, const SectionView& v) {
        w.add(static_cast<SectionType>(v.type), v.instance,
              is(v, SectionType::vcpu_msrs, 1) ? v.payload.first(20) : v.payload);
    });
    CHECK(decode_error(odd_msrs) == "vm.state: section vcpu 1 msrs: 20 bytes is not a whole number of 16-byte entries");
}

TEST_CASE("a busy TR goes back to SVM as the available TSS type, unchanged elsewhere", "[snapshot][vm_state]") {
    kvm_sregs saved{};
    saved.tr.base = 0xfffffe0000003000;
    saved.tr.limit = 0x4087;
    saved.tr.selector = 0x40;
    saved.tr.type = 11;  // busy 64-bit TSS, as KVM_GET_SREGS reports it
    saved.tr.present = 1;
    saved.cr3 = 0x1234000;

    const kvm_sregs svm = sregs_for_restore(saved, KvmFlavour::svm);
    CHECK(svm.tr.type == 9);
    CHECK(svm.tr.base == saved.tr.base);
    CHECK(svm.tr.limit == 0x4087);
    CHECK(svm.tr.selector == 0x40);
    CHECK(svm.cr3 == 0x1234000);

    for (KvmFlavour other : {KvmFlavour::vmx, KvmFlavour::pvm}) {
        CAPTURE(to_string(other));
        CHECK(sregs_for_restore(saved, other).tr.type == 11);
    }

    kvm_sregs tss16 = saved;
    tss16.tr.type = 3;  // busy 16-bit TSS
    CHECK(sregs_for_restore(tss16, KvmFlavour::svm).tr.type == 1);
    kvm_sregs available = saved;
    available.tr.type = 9;
    CHECK(sregs_for_restore(available, KvmFlavour::svm).tr.type == 9);
}
