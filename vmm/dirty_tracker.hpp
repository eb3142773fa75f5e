// Pages of guest RAM written by the VMM itself (device DMA into buffers, used-ring
// updates). KVM's dirty log only sees writes made by vCPUs, so a diff snapshot ORs
// the KVM log with this bitmap (DESIGN.md "snapshot/"). Devices reach it through
// GuestMemory::mark_dirty, which GuestMemory::write/write_bytes and the virtio
// ChainWriter call for every byte they store.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "vmm/address.hpp"

namespace nanovm {

/// One bit per 4 KiB page per region, set from any thread, taken by the snapshot
/// writer. Layout of a taken bitmap: page i of the region (GPA region.gpa + i*4096)
/// is bit (i % 64) of word i / 64, the same as KVM_GET_DIRTY_LOG's.
class DirtyTracker {
public:
    /// A region to track: [gpa, gpa + size), size in bytes (a multiple of 4 KiB).
    struct Range {
        Gpa gpa;
        uint64_t size = 0;
    };
    explicit DirtyTracker(const std::vector<Range>& regions);

    /// Marks every page that [gpa, gpa + len) touches (len in bytes). Parts outside
    /// the tracked regions are ignored (the caller has already bounds-checked the
    /// access). Lock-free, any thread.
    void mark(Gpa gpa, uint64_t len) noexcept;
    /// Returns region `index`'s bitmap and clears it (word by word, atomically: a
    /// mark racing with take lands either in this result or in the next one).
    std::vector<uint64_t> take(size_t index);
    /// True if page `page` (index inside region `index`) is marked; for tests.
    bool marked(size_t index, uint64_t page) const;
    size_t region_count() const noexcept { return regions_.size(); }

private:
    struct Region {
        Gpa gpa;
        uint64_t size = 0;
        uint64_t words = 0;
        std::unique_ptr<std::atomic<uint64_t>[]> bits;
    };
    std::vector<Region> regions_;
};

}  // namespace nanovm
