#include "vmm/dirty_tracker.hpp"

#include <algorithm>

namespace nanovm {

DirtyTracker::DirtyTracker(const std::vector<Range>& regions) {
    for (const Range& range : regions) {
        Region region;
        region.gpa = range.gpa;
        region.size = range.size;
        region.words = (range.size / kPageSize + 63) / 64;
        region.bits = std::make_unique<std::atomic<uint64_t>[]>(region.words);
        for (uint64_t i = 0; i < region.words; ++i) region.bits[i].store(0, std::memory_order_relaxed);
        regions_.push_back(std::move(region));
    }
}

void DirtyTracker::mark(Gpa gpa, uint64_t len) noexcept {
    if (len == 0) return;
    const uint64_t first = gpa.value;
    const uint64_t last = first + len - 1 < first ? ~0ULL : first + len - 1;  // saturate on overflow
    for (Region& region : regions_) {
        const uint64_t begin = region.gpa.value;
        const uint64_t end = begin + region.size - 1;
        if (last < begin || first > end) continue;
        const uint64_t from = (std::max(first, begin) - begin) / kPageSize;
        const uint64_t to = (std::min(last, end) - begin) / kPageSize;
        for (uint64_t page = from; page <= to; ++page)
            region.bits[page / 64].fetch_or(1ULL << (page % 64), std::memory_order_relaxed);
    }
}

std::vector<uint64_t> DirtyTracker::take(size_t index) {
    Region& region = regions_.at(index);
    std::vector<uint64_t> out(region.words);
    for (uint64_t i = 0; i < region.words; ++i) out[i] = region.bits[i].exchange(0, std::memory_order_acq_rel);
    return out;
}

bool DirtyTracker::marked(size_t index, uint64_t page) const {
    const Region& region = regions_.at(index);
    if (page / 64 >= region.words) return false;
    return region.bits[page / 64].load(std::memory_order_relaxed) >> (page % 64) & 1;
}

}  // namespace nanovm
