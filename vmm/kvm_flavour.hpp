// Which kind of KVM backs /dev/kvm on this host: hardware virtualisation (Intel VMX
// through kvm_intel, AMD SVM through kvm_amd), PVM (kvm_pvm: runs only PVM-aware
// guest kernels, see DESIGN.md "Where it runs"), or none at all.
#pragma once

#include <string>
#include <string_view>

namespace nanovm {

enum class KvmFlavour {
    none,  ///< no KVM module loaded / no /dev/kvm
    vmx,   ///< kvm_intel
    svm,   ///< kvm_amd
    pvm,   ///< kvm_pvm: stock Linux guest kernels cannot run
};

/// "none", "VMX", "SVM", "PVM".
std::string_view to_string(KvmFlavour flavour);

/// What the host looks like from /sys/module, /proc/cpuinfo and /dev.
struct KvmHostInfo {
    KvmFlavour flavour = KvmFlavour::none;
    bool dev_kvm_exists = false;  ///< /dev/kvm is present (it may still not open)
    bool module_kvm_intel = false;
    bool module_kvm_amd = false;
    bool module_kvm_pvm = false;
    bool cpu_vmx = false;  ///< "vmx" in /proc/cpuinfo flags
    bool cpu_svm = false;  ///< "svm" in /proc/cpuinfo flags
    /// True when a stock x86-64 Linux guest kernel can boot here (VMX or SVM).
    bool can_boot_stock_linux() const { return flavour == KvmFlavour::vmx || flavour == KvmFlavour::svm; }
};

/// Detects the flavour: none without /dev/kvm (even if a module is loaded); else
/// kvm_intel / kvm_amd win when loaded (hardware virtualisation); kvm_pvm alone means
/// PVM; with no module directory (KVM built into the kernel) the CPU flags decide,
/// and a /dev/kvm without vmx/svm counts as PVM. `root` prefixes the paths it reads
/// (tests).
KvmHostInfo detect_kvm_host(const std::string& root = "");

/// detect_kvm_host(root).flavour without reading /proc/cpuinfo when a KVM module
/// decides (a few stat calls, ~0.4 ms less): for the restore path, which runs once
/// per new VMM process.
KvmFlavour detect_kvm_flavour(const std::string& root = "");

/// Throws Error with the one-line message the CLI prints unless `host` can boot a
/// stock Linux guest: no /dev/kvm (says to use the test host), or PVM
/// (kPvmBootRefusal). Used by `nanovm boot`, `run` and `vm start` before any work.
void require_linux_capable_kvm(const KvmHostInfo& host);

/// The message `nanovm boot`, `run` and `vm start|restore` print on a PVM host. The
/// test host gives the `run` and `vm` commands a writable state directory
/// (NANOVM_RUN_DIR=$NANOVM_SCRATCH/run) unless the caller sets one.
inline constexpr std::string_view kPvmBootRefusal =
    "this /dev/kvm is PVM: it cannot run a stock Linux kernel; use the test host: "
    "tools/testhost/run -- build/nanovm boot ... (or run ..., vm ...); for nanovmd, its sandboxes and the Python "
    "client: tools/testhost/run --with-daemon -- ...: see the README's quick start";

}  // namespace nanovm
