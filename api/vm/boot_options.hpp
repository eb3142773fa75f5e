// What a Linux VM is built from: BootOptions (the shape, kernel, command line, disks
// and devices), the shape limits, and the kernel command line they make. The VM layer
// (linux_vm, vmm_process, the launcher) builds from them; the CLI fills them from
// `nanovm boot`'s flags (api/cli/boot_command.cpp) and the VMM from VmmOptions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/vm/device_options.hpp"

namespace nanovm {

/// One Linux VM's build options (the defaults are `nanovm boot`'s, as its --help shows).
struct BootOptions {
    std::string kernel;                  ///< empty: default_kernel_path()
    std::string initrd;                  ///< empty: default_initrd_path()
    std::optional<std::string> cmdline;  ///< replaces kDefaultCmdline
    std::vector<std::string> append;     ///< appended to the command line, in order
    uint32_t cpus = 2;                   ///< kMinCpus..kMaxCpus
    uint32_t memory_mib = 1024;          ///< kMinMemoryMib..kMaxMemoryMib
    std::string console;                 ///< empty: stdout
    bool until_ready = false;            ///< add nanovm.until_ready=1
    std::vector<DiskOption> disks;       ///< virtio-blk disks, /dev/vda first
    /// disks[0] is the root file system (--root): the kernel mounts /dev/vda and runs
    /// kRootInit from it; no initramfs unless --initrd is given.
    bool root_disk = false;
    std::string scratch;                 ///< non-empty: 16 GiB sparse scratch disk (created if missing)
    std::optional<NetOption> net;        ///< virtio-net on a tap
    std::optional<VsockOption> vsock;    ///< virtio-vsock over a Unix socket
    bool rng = true;                     ///< virtio-rng (entropy from getrandom)
    std::string stats;                   ///< non-empty: write device counters (JSON) here at exit
};

inline constexpr uint32_t kMinCpus = 1, kMaxCpus = 4;
inline constexpr uint32_t kMinMemoryMib = 128, kMaxMemoryMib = 8192;
inline constexpr const char* kDefaultCmdline = "console=ttyS0 reboot=k panic=-1 quiet";
/// guest-init's path on the root disks tools/rootfs/build makes.
inline constexpr const char* kRootInit = "/sbin/nanovm-init";
inline constexpr const char* kUntilReadyParam = "nanovm.until_ready=1";

/// The kernel command line for `options`: --cmdline or the default, then with --root
/// "root=/dev/vda rootfstype=ext4 rw|ro init=/sbin/nanovm-init", then the
/// virtio_mmio.device= declarations of the virtio devices, nanovm.until_ready=1 with
/// --until-ready, then each --append.
std::string boot_cmdline(const BootOptions& options);

}  // namespace nanovm
