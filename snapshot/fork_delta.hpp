// A fork delta: the pages a VM over a shared frozen layer holds privately (written
// since it mapped the layer), packed into one sealed memfd, so that a VM already
// forked once (or a fork child) forks again without copying all of its RAM: the new
// children map the same frozen layer and apply the delta on top
// (snapshot/fork_image.hpp). Layout, little endian:
//   offset 0     magic "NVMDELTA", u64 count, u64 total_pages (of the RAM layout),
//                then count u64 linear page indices, strictly ascending, < total_pages
//   offset H     (H = that header rounded up to 4 KiB) the count pages, in the same order
#pragma once

#include <cstdint>
#include <string_view>

#include "snapshot/memory_layer.hpp"
#include "vmm/fd.hpp"
#include "vmm/guest_memory.hpp"

namespace nanovm::snapshot {

/// Writes the pages of `memory` set in `pages` (a bitmap over its linear pages) into
/// a new memfd in the layout above and seals it (F_SEAL_WRITE | F_SEAL_SHRINK |
/// F_SEAL_GROW | F_SEAL_SEAL). `count` returns the number of pages. Call with the
/// writers of `memory` stopped. Throws SysError (memfd_create, pwrite, fcntl).
Fd write_fork_delta(const GuestMemory& memory, const PageBitmap& pages, uint64_t& count);

/// Copies the pages of delta memfd `fd` into `memory` (through its mappings: a
/// private mapping takes them as its own copies). Returns how many. Throws
/// SnapshotError naming `what` for a malformed delta (magic, a count or index out
/// of range or not ascending, a size that does not hold the pages), SysError (pread).
uint64_t apply_fork_delta(int fd, GuestMemory& memory, std::string_view what);

}  // namespace nanovm::snapshot
