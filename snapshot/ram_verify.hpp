// A debugging aid for issue 16's question "whose bug is a nested triple fault after a
// fork or snapshot": with NANOVM_DEBUG_RAM_VERIFY=1 in the VMM's environment,
//   - a fork (freeze_for_fork) takes a crc32c of every page of guest RAM as the
//     guest sees it at the freeze and writes them to the fork base directory
//     (ram.crc: u32 per linear page, little endian); each child compares its RAM
//     with them after restore_fork, before its vCPUs run, and logs the result;
//   - a freeze (a fork's or a snapshot's: frozen layer memfds) starts a watcher that
//     compares the frozen memfds with the freeze's checksums at 1, 5, 20, 60, 120
//     and 240 s and logs any page that changed. Nothing may write a frozen layer
//     after the freeze (the VM writes its private copies), so a changed page means a
//     writer that bypasses the host's page tables (an emulator's stale TLB entry) or
//     a VMM write through a mapping it should not hold.
// Both cost a read of all RAM in the pause (a 3.9 s pause for 256 MiB in the test
// host): never on in production or CI. Set the variable for a test-host run (NANOVM_*
// variables reach its command; tools/testhost/README.md "The RAM check").
// Only for RAM that is not lazily served (Backing::memfd, private_memfd): reading a
// lazy VM's holes would fill them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vmm/fd.hpp"
#include "vmm/guest_memory.hpp"

namespace nanovm::snapshot {

/// A page sum watch_frozen_layer does not check (a page the layer's owner holds privately).
inline constexpr uint32_t kUnknownPageSum = 0xffffffffu;

/// True if NANOVM_DEBUG_RAM_VERIFY is set to 1 in this process's environment.
bool ram_verify_enabled();

/// crc32c of each 4 KiB page of `memory` read through its mappings (linear page
/// order: regions in GPA order). Empty for lazily served RAM (Backing::lazy_*).
std::vector<uint32_t> guest_page_checksums(const GuestMemory& memory);

/// Writes `sums` to `<dir>/ram.crc`. Throws SysError.
void write_page_checksums(const std::string& dir, const std::vector<uint32_t>& sums);

/// Compares `memory` with `<dir>/ram.crc` if it exists and logs one line (how many
/// pages differ and the first GPAs). Never throws: a debugging aid.
void verify_against_page_checksums(const GuestMemory& memory, const std::string& dir, const std::string& what);

/// Starts a detached thread that compares the frozen layer `memfds` (region sizes
/// `bytes`) with `sums` (kUnknownPageSum: skipped) at ~1, 5, 20, 60, 120 and 240 s and logs a line for each look that
/// finds a changed page (and one line at the end). Takes duplicates of the fds.
void watch_frozen_layer(const std::vector<Fd>& memfds, const std::vector<uint64_t>& bytes,
                        std::vector<uint32_t> sums, std::string what);

}  // namespace nanovm::snapshot
