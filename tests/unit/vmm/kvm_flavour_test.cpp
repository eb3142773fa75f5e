#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "vmm/kvm_flavour.hpp"

using namespace nanovm;
namespace fs = std::filesystem;

namespace {

// A fake root with the given /sys/module entries, CPU flags and maybe /dev/kvm.
struct FakeRoot {
    explicit FakeRoot(const std::string& name) : path(fs::temp_directory_path() / ("nanovm-flavour-" + name)) {
        fs::remove_all(path);
        fs::create_directories(path / "sys/module");
        fs::create_directories(path / "proc");
        fs::create_directories(path / "dev");
    }
    ~FakeRoot() { fs::remove_all(path); }
    FakeRoot& module(const std::string& m) {
        fs::create_directories(path / "sys/module" / m);
        return *this;
    }
    FakeRoot& flags(const std::string& f) {
        std::ofstream(path / "proc/cpuinfo") << "processor\t: 0\nflags\t\t: fpu " << f << " sse2\n";
        return *this;
    }
    FakeRoot& dev_kvm() {
        std::ofstream(path / "dev/kvm") << "";
        return *this;
    }
    // Both detectors, which must agree on every fake host.
    KvmHostInfo detect() const {
        const KvmHostInfo info = detect_kvm_host(path.string());
        CHECK(detect_kvm_flavour(path.string()) == info.flavour);
        return info;
    }
    fs::path path;
};

}  // namespace

TEST_CASE("KVM flavour: kvm_intel is VMX, kvm_amd is SVM, kvm_pvm alone is PVM", "[vmm][flavour]") {
    CHECK(FakeRoot("vmx").module("kvm").module("kvm_intel").flags("vmx").dev_kvm().detect().flavour ==
          KvmFlavour::vmx);
    CHECK(FakeRoot("svm").module("kvm").module("kvm_amd").flags("svm").dev_kvm().detect().flavour ==
          KvmFlavour::svm);
    const KvmHostInfo pvm = FakeRoot("pvm").module("kvm").module("kvm_pvm").flags("hypervisor").dev_kvm().detect();
    CHECK(pvm.flavour == KvmFlavour::pvm);
    CHECK_FALSE(pvm.can_boot_stock_linux());
}

TEST_CASE("KVM flavour: no /dev/kvm is none, even with a module loaded", "[vmm][flavour]") {
    const KvmHostInfo info = FakeRoot("none").module("kvm_pvm").flags("").detect();
    CHECK(info.flavour == KvmFlavour::none);
    CHECK(info.module_kvm_pvm);
    CHECK_FALSE(info.dev_kvm_exists);
}

TEST_CASE("KVM flavour: a built-in KVM is told by the CPU flags", "[vmm][flavour]") {
    CHECK(FakeRoot("builtin-vmx").flags("vmx").dev_kvm().detect().flavour == KvmFlavour::vmx);
    CHECK(FakeRoot("builtin-svm").flags("svm").dev_kvm().detect().flavour == KvmFlavour::svm);
    CHECK(FakeRoot("builtin-none").flags("").dev_kvm().detect().flavour == KvmFlavour::pvm);
}

TEST_CASE("KVM flavour: only VMX/SVM pass the Linux-guest check; no KVM and PVM get one line each", "[vmm][flavour]") {
    CHECK_NOTHROW(require_linux_capable_kvm(FakeRoot("req-svm").module("kvm_amd").flags("svm").dev_kvm().detect()));
    CHECK_THROWS_WITH(require_linux_capable_kvm(FakeRoot("req-none").flags("svm").detect()),
                      Catch::Contains("/dev/kvm does not exist") && Catch::Contains("tools/testhost/run"));
    CHECK_THROWS_WITH(
        require_linux_capable_kvm(FakeRoot("req-pvm").module("kvm_pvm").flags("hypervisor").dev_kvm().detect()),
        std::string(kPvmBootRefusal));
}
