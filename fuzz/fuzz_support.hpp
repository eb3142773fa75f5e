// What the libFuzzer harnesses share besides input decoding (fuzz/fuzz_input.hpp):
// invariant checks that turn a broken promise into a crash libFuzzer records, and
// returning simulated guest RAM to all-zero between inputs.
#pragma once

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>

#include "vmm/guest_memory.hpp"

namespace nanovm::fuzz {

/// Aborts, naming `what`, when an invariant of the code under test does not hold:
/// libFuzzer saves the input as a crash (run the harness on it to see the message).
inline void fuzz_check(bool holds, const char* what) {
    if (holds) return;
    std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
    std::abort();
}

/// Punches out every page of guest RAM (MADV_REMOVE on its memfd mappings): all of it
/// reads as zero again and the pages are freed. Cost grows with the mapping's size
/// (~0.4 ms for 3 GiB), not with what was touched.
inline void discard_guest_ram(GuestMemory& memory) {
    for (const MemoryRegion& region : memory.regions())
        fuzz_check(::madvise(region.host, region.size, MADV_REMOVE) == 0, "madvise(MADV_REMOVE) of guest RAM");
}

}  // namespace nanovm::fuzz
