// The per-sandbox scratch disk (DESIGN.md: "every sandbox has a 16 GiB sparse
// writable disk"): a raw image file whose host allocation grows only with what the
// guest writes.
#pragma once

#include <cstdint>
#include <string>

#include "vmm/address.hpp"

namespace nanovm::virtio::blk {

/// Size of the scratch disk every sandbox gets, bytes.
inline constexpr uint64_t kScratchDiskBytes = 16 * GiB;

/// Makes `path` a sparse raw disk image of exactly `bytes` bytes (a positive multiple
/// of 512). A missing file is created (mode 0600, O_EXCL) and sized with ftruncate,
/// so it allocates no blocks; returns true (also for an existing empty file, which a
/// crash mid-creation may leave). An existing regular file of that size is
/// left as it is (its data belongs to the sandbox); returns false. Throws Error if
/// `bytes` is invalid, if the path exists but is not a regular file (a device, a
/// FIFO, a directory: never clobbered), or if an existing file has another size;
/// SysError for failed system calls (open, ftruncate, fstat), naming the path.
bool create_sparse_disk(const std::string& path, uint64_t bytes = kScratchDiskBytes);

}  // namespace nanovm::virtio::blk
