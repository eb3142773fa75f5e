#include "vmm/kvm_flavour.hpp"

#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>

#include "vmm/error.hpp"

namespace nanovm {

std::string_view to_string(KvmFlavour flavour) {
    switch (flavour) {
        case KvmFlavour::none: return "none";
        case KvmFlavour::vmx: return "VMX";
        case KvmFlavour::svm: return "SVM";
        case KvmFlavour::pvm: return "PVM";
    }
    return "unknown";
}

namespace {

bool path_exists(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
}

// Reads the first "flags" line of /proc/cpuinfo and reports vmx / svm.
void read_cpu_flags(const std::string& cpuinfo, bool& vmx, bool& svm) {
    std::ifstream in(cpuinfo);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("flags", 0) != 0) continue;
        const auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::istringstream words(line.substr(colon + 1));
        std::string word;
        while (words >> word) {
            if (word == "vmx") vmx = true;
            if (word == "svm") svm = true;
        }
        return;
    }
}

}  // namespace

namespace {

// The flavour from what detect_kvm_host reads; `cpu_flags` is called only when no KVM
// module directory decides (KVM built into the kernel).
template <typename CpuFlags>
KvmFlavour decide_flavour(bool dev_kvm, bool intel, bool amd, bool pvm, CpuFlags cpu_flags) {
    if (!dev_kvm) return KvmFlavour::none;  // a module may be loaded without a device (it did not bind)
    if (intel) return KvmFlavour::vmx;
    if (amd) return KvmFlavour::svm;
    if (pvm) return KvmFlavour::pvm;
    bool vmx = false, svm = false;
    cpu_flags(vmx, svm);
    return vmx ? KvmFlavour::vmx : svm ? KvmFlavour::svm : KvmFlavour::pvm;
}

}  // namespace

KvmHostInfo detect_kvm_host(const std::string& root) {
    KvmHostInfo info;
    info.dev_kvm_exists = path_exists(root + "/dev/kvm");
    info.module_kvm_intel = path_exists(root + "/sys/module/kvm_intel");
    info.module_kvm_amd = path_exists(root + "/sys/module/kvm_amd");
    info.module_kvm_pvm = path_exists(root + "/sys/module/kvm_pvm");
    read_cpu_flags(root + "/proc/cpuinfo", info.cpu_vmx, info.cpu_svm);
    info.flavour = decide_flavour(info.dev_kvm_exists, info.module_kvm_intel, info.module_kvm_amd,
                                  info.module_kvm_pvm, [&](bool& vmx, bool& svm) {
                                      vmx = info.cpu_vmx;
                                      svm = info.cpu_svm;
                                  });
    return info;
}

KvmFlavour detect_kvm_flavour(const std::string& root) {
    const auto module = [&](const char* name) { return path_exists(root + "/sys/module/" + name); };
    return decide_flavour(path_exists(root + "/dev/kvm"), module("kvm_intel"), module("kvm_amd"), module("kvm_pvm"),
                          [&](bool& vmx, bool& svm) { read_cpu_flags(root + "/proc/cpuinfo", vmx, svm); });
}

void require_linux_capable_kvm(const KvmHostInfo& host) {
    if (!host.dev_kvm_exists)
        throw Error(
            "/dev/kvm does not exist: this machine has no KVM (it needs kvm_intel or kvm_amd); "
            "run nanovm inside the test host instead: tools/testhost/run -- build/nanovm ...");
    if (host.flavour == KvmFlavour::pvm) throw Error(std::string(kPvmBootRefusal));
}

}  // namespace nanovm
