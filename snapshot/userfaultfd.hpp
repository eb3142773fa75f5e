// Opening a userfaultfd that also sees faults taken by the kernel on behalf of the
// process (KVM's get_user_pages from a vCPU, copy_from_user in a syscall), shared
// by the uffd restore backend and the write-protect background copy.
// Source: userfaultfd(2), Documentation/admin-guide/mm/userfaultfd.rst.
#pragma once

#include "vmm/fd.hpp"

namespace nanovm::snapshot {

/// userfaultfd(O_CLOEXEC | O_NONBLOCK) without UFFD_USER_MODE_ONLY, falling back to
/// /dev/userfaultfd (USERFAULTFD_IOC_NEW, Linux 6.1) where the syscall is
/// restricted. UFFDIO_API is not done yet. Throws SysError("userfaultfd").
Fd open_userfaultfd();

}  // namespace nanovm::snapshot
