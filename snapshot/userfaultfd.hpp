// Opening and setting up a userfaultfd that also sees faults taken by the kernel on
// behalf of the process (KVM's get_user_pages from a vCPU, copy_from_user in a
// syscall), shared by the uffd restore backend and the write-protect background copy.
// Source: userfaultfd(2), Documentation/admin-guide/mm/userfaultfd.rst.
#pragma once

#include <linux/userfaultfd.h>

#include <cstdint>

#include "vmm/fd.hpp"

namespace nanovm::snapshot {

/// What write-protecting shmem (memfd) or anonymous memory needs: WP fault flags and
/// shmem/hugetlbfs WP (PTE markers, Linux >= 5.19; on in 6.1 with CONFIG_PTE_MARKER_UFFD_WP).
inline constexpr uint64_t kUffdWpFeatures = UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_WP_HUGETLBFS_SHMEM;

/// The UFFD_FEATURE_* bits this kernel offers (one probe handshake, cached for the
/// process: a userfaultfd takes UFFDIO_API once). 0 if userfaultfd cannot be opened.
uint64_t userfaultfd_features() noexcept;

/// userfaultfd(O_CLOEXEC | O_NONBLOCK) without UFFD_USER_MODE_ONLY, falling back to
/// /dev/userfaultfd (USERFAULTFD_IOC_NEW, Linux 6.1) where the syscall is
/// restricted. UFFDIO_API is not done yet. Throws SysError("userfaultfd").
Fd open_userfaultfd();

/// UFFDIO_API on `uffd` asking for `features` (UFFD_FEATURE_* bits); returns every
/// feature the kernel offers. Throws SysError naming `what` (the kernel refuses the
/// handshake with EINVAL when a requested feature is missing).
uint64_t negotiate_userfaultfd(int uffd, uint64_t features, const char* what);

/// UFFDIO_REGISTER of [host, host + bytes) with `mode` (UFFDIO_REGISTER_MODE_*);
/// checks that every ioctl in `needed_ioctls` (bits 1 << _UFFDIO_*) is offered for
/// the range. Throws SysError / Error naming `what`.
void register_userfaultfd_range(int uffd, void* host, uint64_t bytes, uint64_t mode, uint64_t needed_ioctls,
                                const char* what);

}  // namespace nanovm::snapshot
