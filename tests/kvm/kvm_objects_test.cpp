// Kvm, Vm and Vcpu on their own: system queries, ioctl errors, one vCPU run by hand.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "tests/kvm/probe.hpp"
#include "vmm/error.hpp"
#include "vmm/guest_memory.hpp"
#include "vmm/kvm.hpp"
#include "vmm/vm.hpp"

using namespace nanovm;

TEST_CASE("/dev/kvm answers API version 12 and the system queries", "[kvm]") {
    const Kvm kvm = Kvm::open();
    CHECK(kvm.api_version() == 12);
    CHECK(kvm.check_extension(KVM_CAP_USER_MEMORY) > 0);
    CHECK(kvm.vcpu_mmap_size() >= sizeof(kvm_run));
    const auto cpuid = kvm.supported_cpuid();
    REQUIRE_FALSE(cpuid.empty());
    bool has_leaf0 = false;
    for (const auto& entry : cpuid) has_leaf0 |= entry.function == 0;
    CHECK(has_leaf0);
    CHECK_FALSE(kvm.msr_index_list().empty());
}

TEST_CASE("a failing ioctl throws SysError naming the ioctl and errno", "[kvm]") {
    const Kvm kvm = Kvm::open();
    Vm vm(kvm);
    Vcpu first = vm.create_vcpu(0);
    try {
        Vcpu again = vm.create_vcpu(0);
        FAIL("creating vCPU 0 twice succeeded");
    } catch (const SysError& e) {
        CHECK(e.op() == "KVM_CREATE_VCPU");
        CHECK(e.code() == EEXIST);
        CHECK(std::string(e.what()) == "KVM_CREATE_VCPU: File exists");
    }
}

TEST_CASE("a real-mode probe's out reaches KVM_EXIT_IO with port and value, then HLT exits", "[kvm][vcpu]") {
    const Kvm kvm = Kvm::open();
    Vm vm(kvm);
    vm.set_tss_addr();
    GuestMemory memory = GuestMemory::create(1 * MiB);
    vm.map_memory(memory, false);
    const std::vector<uint8_t> code = {
        0xb0, 0x42,  // mov al, 0x42
        0xe6, 0x10,  // out 0x10, al
        0xf4,        // hlt
    };
    memory.write_bytes(Gpa(0x1000), code);
    Vcpu vcpu = vm.create_vcpu(0);
    test::enter_real_mode(vcpu, 0x1000);

    REQUIRE(vcpu.run());
    kvm_run* run = vcpu.run_data();
    REQUIRE(run->exit_reason == KVM_EXIT_IO);
    CHECK(run->io.direction == KVM_EXIT_IO_OUT);
    CHECK(run->io.port == 0x10);
    CHECK(run->io.size == 1);
    CHECK(run->io.count == 1);
    CHECK(reinterpret_cast<uint8_t*>(run)[run->io.data_offset] == 0x42);

    REQUIRE(vcpu.run());
    CHECK(run->exit_reason == KVM_EXIT_HLT);
    CHECK(vcpu.regs().rip == code.size());  // IP past the hlt, CS based at the code
}

TEST_CASE("register state set on a vCPU reads back", "[kvm][vcpu]") {
    const Kvm kvm = Kvm::open();
    Vm vm(kvm);
    Vcpu vcpu = vm.create_vcpu(0);
    kvm_regs regs{};
    regs.rax = 0x1122334455667788;
    regs.rip = 0x1000;
    regs.rflags = 0x2;
    vcpu.set_regs(regs);
    CHECK(vcpu.regs().rax == 0x1122334455667788);
    CHECK(vcpu.regs().rip == 0x1000);

    // KVM_SET_FPU / KVM_GET_FPU carry the x87 state and XMM registers; Linux 6.1
    // ignores their mxcsr field (MXCSR lives in the XSAVE area: KVM_GET/SET_XSAVE).
    kvm_fpu fpu{};
    fpu.fcw = 0x27f;
    fpu.xmm[0][0] = 0x5a;
    vcpu.set_fpu(fpu);
    CHECK(vcpu.fpu().fcw == 0x27f);
    CHECK(vcpu.fpu().xmm[0][0] == 0x5a);

    CHECK(vcpu.mp_state().mp_state == KVM_MP_STATE_RUNNABLE);
}
