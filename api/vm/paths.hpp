// Where nanovm finds the guest kernel and the guest initramfs by default.
#pragma once

#include <string>

namespace nanovm {

/// ${NANOVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nanovm}: where
/// tools/guest-kernel/build keeps built kernels.
std::string cache_dir();

/// <cache_dir>/kernel/current/bzImage (the kernel build maintains `current`).
std::string default_kernel_path();

/// The running nanovm binary (/proc/self/exe), e.g. /work/build/nanovm: what the
/// launcher execs as `_vmm` and a VMM starts as `_standby`. Throws Error if
/// /proc/self/exe cannot be read.
std::string self_executable();

/// The directory of the running nanovm binary (from /proc/self/exe), e.g. /work/build;
/// "." if it cannot be read.
std::string executable_dir();

/// <executable_dir>/guest-init/initramfs.cpio.lz4: the initramfs the build produces
/// next to build/nanovm.
std::string default_initrd_path();

/// The command that builds the guest kernel / the initramfs (for messages).
inline constexpr const char* kBuildKernelCommand = "tools/guest-kernel/build";
inline constexpr const char* kBuildInitrdCommand = "ninja -C build";

}  // namespace nanovm
