// The pages a uffd restore of a snapshot touched first, in order (issue 5: "prefetch
// of the pages the last restore of that snapshot touched first"). A cache beside the
// snapshot's parts, not a part: `prefetch.pages` in the snapshot directory, written
// by a restore with the uffd backend and read by the next one, which copies those
// pages in before the guest asks for them. A missing, stale or damaged file only
// means no prefetch.
//
// Format (little endian): magic "NVPREF01" (8 bytes), u64 total_pages (of the RAM
// layout it was recorded for), u64 count, u32 CRC-32C of the indices, u32 zero, then
// count u32 linear page indices (GuestMemory's order), each < total_pages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nanovm::snapshot {

inline constexpr const char* kPrefetchFileName = "prefetch.pages";
/// At most this many pages are recorded (4 MiB of indices would be 1M pages; 64Ki
/// pages = 256 MiB of guest memory is plenty for what a restore touches first).
inline constexpr size_t kMaxPrefetchPages = 65536;

/// Writes `pages` (each < total_pages) atomically to `path` (tmp + rename; not
/// fsync'd: it is a cache). Throws SysError naming the path.
void write_prefetch_list(const std::string& path, uint64_t total_pages, const std::vector<uint32_t>& pages);

/// Reads `path`; returns an empty list if it is missing, or if it is damaged or was
/// recorded for another RAM layout (`why` then says so; it is left empty otherwise).
std::vector<uint32_t> read_prefetch_list(const std::string& path, uint64_t total_pages, std::string& why);

}  // namespace nanovm::snapshot
