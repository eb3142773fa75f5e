// The early filesystems PID 1 mounts before anything else runs.
#pragma once

namespace nanovm::guest_init {

/// Mounts devtmpfs (/dev; the kernel does not auto-mount it for an initramfs), proc,
/// sysfs, devpts (/dev/pts), tmpfs on /dev/shm, /run and /tmp, and cgroup2 on
/// /sys/fs/cgroup, creating mount points as needed; adds the /dev/fd, /dev/stdin,
/// /dev/stdout and /dev/stderr links. A mount that fails is reported with an error
/// line and the rest go on; one that is already mounted (EBUSY) counts as done.
/// Returns the number of failures.
int mount_early_filesystems();

}  // namespace nanovm::guest_init
