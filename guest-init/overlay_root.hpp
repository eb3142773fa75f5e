// A writable / over a read-only root disk (boot parameter nanovm.overlay=, see
// cmdline.hpp): PID 1 stacks an overlayfs on the root it was started from and moves
// into it, so that the cached root image is shared by every VM and never changes,
// while each VM writes to its own upper layer.
//
//   lower  the root file system the kernel mounted (root=/dev/vda ro)
//   upper  <layer>/upper and <layer>/work, where <layer> is the ext4 disk given
//          (mounted at /run/nanovm-overlay/layer) or a tmpfs
//
// The early mounts made on the old root (/dev, /proc, /run...) stay there, hidden
// under the new root; the caller mounts them again in the new root
// (mount_early_filesystems()).
#pragma once

#include <string>

namespace nanovm::guest_init {

/// Where the layer and the new root are mounted before the switch (on the tmpfs /run
/// that mount_early_filesystems() made).
inline constexpr const char* kOverlayStaging = "/run/nanovm-overlay";

/// The overlayfs mount options for an upper layer mounted at `layer_dir`:
/// "lowerdir=/,upperdir=<layer_dir>/upper,workdir=<layer_dir>/work". Pure.
std::string overlay_mount_options(const std::string& layer_dir);

/// Mounts the layer (`device`: an ext4 block device such as /dev/vdb, or
/// kOverlayTmpfs), creates upper/ and work/ on it, mounts the overlay and makes it
/// the root of PID 1 (MS_MOVE onto /, chroot, as switch_root(8) does). Needs /dev,
/// /proc and a tmpfs /run mounted. Returns false after logging the step that failed
/// (the old root is still in place then).
bool switch_to_overlay_root(const std::string& device);

}  // namespace nanovm::guest_init
