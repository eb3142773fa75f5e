// Guest RAM: one memfd per region, mapped MAP_SHARED into the VMM, so snapshot,
// fork and a userfaultfd handler can all reach it by fd (DESIGN.md "vmm/").
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "vmm/address.hpp"
#include "vmm/dirty_tracker.hpp"
#include "vmm/fd.hpp"

namespace nanovm {

/// Start of the 32-bit MMIO hole: RAM above this GPA moves to kHighRamStart.
inline constexpr uint64_t kMmioHoleStart = 3 * GiB;
/// Where RAM continues above the hole (4 GiB).
inline constexpr uint64_t kHighRamStart = 4 * GiB;

/// One contiguous range of guest RAM backed by its own memfd.
struct MemoryRegion {
    Gpa gpa;            ///< first guest-physical byte
    uint64_t size = 0;  ///< bytes, a multiple of kPageSize
    uint8_t* host = nullptr;  ///< HVA of gpa in this process (see GuestMemory::Backing)
    Fd memfd;           ///< backing fd: the memfd, or the file mapped privately
    uint64_t file_offset = 0;  ///< bytes: where gpa sits in `memfd` (0 for a memfd)
    uint32_t slot = 0;  ///< KVM memslot number this region is registered as

    bool contains(Gpa addr, uint64_t len) const {
        return addr.value >= gpa.value && len <= size && addr.value - gpa.value <= size - len;
    }
};

/// All guest RAM of one VM. Layout for `ram_bytes` of RAM: [0, min(ram, 3 GiB)) and,
/// when ram > 3 GiB, [4 GiB, 4 GiB + ram - 3 GiB). Not copyable; owns the mappings.
class GuestMemory {
public:
    /// What backs the mappings; decides how a snapshot finds the non-zero pages.
    enum class Backing {
        /// One memfd per region, MAP_SHARED: a hole in the memfd (SEEK_HOLE) is a
        /// page never written, so it reads as zero.
        memfd,
        /// A file (a flattened snapshot) MAP_PRIVATE: the guest's writes stay in
        /// this process; the file's holes say nothing about the guest's pages.
        private_file,
        /// memfds MAP_SHARED filled on demand by a userfaultfd handler from a layer
        /// chain (snapshot/uffd_backend: a restored VM): a hole is a page not yet
        /// fetched (its content is the chain's), so readers must go through `host`.
        lazy_memfd,
        /// Sealed memfds (a fork's frozen layer, shared with other VMs) MAP_PRIVATE:
        /// a page is the memfd's (a hole reads as zero) until this process writes
        /// it, then a private anonymous copy (see snapshot/fork_image.hpp).
        private_memfd,
        /// private_memfd whose memfds' holes are not zero but the pages of a layer
        /// chain below, served on first touch by a userfaultfd handler (a restored VM
        /// after its first snapshot or fork, or a fork child of such a VM: see
        /// snapshot/uffd_backend.hpp). Nothing may touch the mapping before the
        /// handler is registered (a hole read unregistered would put a zero page
        /// into the shared memfd).
        lazy_private_memfd,
    };
    /// A region's place: [gpa, gpa + size), size in bytes.
    struct Extent {
        Gpa gpa;
        uint64_t size = 0;
    };
    /// The regions create(ram_bytes) makes, in GPA order (see the class comment).
    /// Throws Error if ram_bytes is not a positive multiple of kPageSize.
    static std::vector<Extent> layout(uint64_t ram_bytes);

    /// Creates and maps the regions. `ram_bytes` must be a positive multiple of
    /// kPageSize. Each region is a memfd mapped MAP_SHARED at a 2 MiB aligned address,
    /// madvise(MADV_HUGEPAGE)d (huge pages where the host's shmem_enabled allows them),
    /// with a PROT_NONE page kept below it. Throws SysError (memfd_create, ftruncate,
    /// mmap) or Error.
    static GuestMemory create(uint64_t ram_bytes);

    GuestMemory() = default;
    GuestMemory(GuestMemory&&) noexcept;
    GuestMemory& operator=(GuestMemory&&) noexcept;
    GuestMemory(const GuestMemory&) = delete;
    GuestMemory& operator=(const GuestMemory&) = delete;
    ~GuestMemory();

    /// Maps `fd` MAP_PRIVATE as the RAM layout(ram_bytes): region k is the
    /// file's bytes [offset_k, offset_k + size_k) with offset_0 = `data_offset` and
    /// each next region right after the previous (data_offset a multiple of 4 KiB).
    /// Guest writes are private copy-on-write pages of this process. Backing
    /// private_file. Throws SysError (dup, mmap) or Error.
    static GuestMemory map_file_private(int fd, uint64_t ram_bytes, uint64_t data_offset);

    /// Maps `memfds` (one per region of layout(ram_bytes), each exactly that
    /// region's size; not consumed, dup'ed) MAP_PRIVATE: a fork child's RAM over
    /// its parent's frozen layer. Backing private_memfd. Throws SysError (dup,
    /// fstat, mmap) or Error (count or size mismatch).
    static GuestMemory map_memfds_private(std::span<const int> memfds, uint64_t ram_bytes);

    /// Address ranges that no longer back guest RAM but still hold its old page
    /// tables (moved aside by remap_private); munmap'ed by release() or the
    /// destructor. Move-only.
    class RetiredMappings {
    public:
        RetiredMappings() = default;
        RetiredMappings(RetiredMappings&& other) noexcept : ranges_(std::move(other.ranges_)) { other.ranges_.clear(); }
        RetiredMappings& operator=(RetiredMappings&& other) noexcept;
        RetiredMappings(const RetiredMappings&) = delete;
        RetiredMappings& operator=(const RetiredMappings&) = delete;
        ~RetiredMappings() { release(); }
        /// munmap()s them all (tearing down their page tables: ~0.4 us per page
        /// that was present, so do it after the VM resumed). Idempotent.
        void release() noexcept;
        void add(void* addr, uint64_t bytes) { ranges_.push_back({addr, bytes}); }
        bool empty() const noexcept { return ranges_.empty(); }

    private:
        struct Range {
            void* addr;
            uint64_t bytes;
        };
        std::vector<Range> ranges_;
    };

    /// Replaces every region's mapping, in place at the same HVA (so KVM's
    /// memslots stay valid: its MMU notifier drops the old translations), by a
    /// MAP_PRIVATE mapping of `memfds[k]` (same count and sizes as the regions,
    /// dup'ed). What the guest sees must already be in those memfds. Backing
    /// private_memfd. The old mapping is moved aside with mremap (whole page
    /// tables at once: ~0.1 ms for 1 GiB, where unmapping it would take ~30 ms
    /// with 256 MiB present) and returned, to be released after the VM resumed.
    /// Call only while nothing else touches guest RAM (VM paused, devices
    /// quiesced). Throws SysError or Error; on failure the regions keep their old
    /// mappings up to the failing one (which then may have none: fatal).
    RetiredMappings remap_private(std::span<const int> memfds);

    Backing backing() const noexcept { return backing_; }
    /// Declares the memfds lazily filled (snapshot/uffd_backend sets it).
    void set_backing(Backing backing) noexcept { backing_ = backing; }

    /// Makes write_bytes/write and mark_dirty record pages in `tracker` (nullptr:
    /// stop). The tracker must outlive this GuestMemory or be detached first. Any
    /// thread: device threads may be writing meanwhile (the pointer is atomic; a
    /// write racing with the attach lands in the tracker or happened before it).
    void set_dirty_tracker(DirtyTracker* tracker) noexcept { tracker_.store(tracker, std::memory_order_release); }
    DirtyTracker* dirty_tracker() const noexcept { return tracker_.load(std::memory_order_acquire); }
    /// Records that the VMM wrote [gpa, gpa + len) (bytes) through a host pointer,
    /// e.g. a device's DMA; no-op without a tracker. Devices that write through
    /// slice() call it (devices/virtio/chain_io does).
    void mark_dirty(Gpa gpa, uint64_t len) const noexcept {
        if (DirtyTracker* tracker = dirty_tracker()) tracker->mark(gpa, len);
    }

    /// Regions in ascending GPA order (1 or 2).
    std::span<const MemoryRegion> regions() const { return regions_; }
    /// Total RAM in bytes (sum of region sizes).
    uint64_t ram_bytes() const { return ram_bytes_; }
    /// True if [gpa, gpa+len) lies entirely inside one region.
    bool contains(Gpa gpa, uint64_t len) const;
    /// Host view of [gpa, gpa+len). Throws Error if the range is not entirely inside
    /// one region (so a guest-controlled range can never reach outside guest RAM).
    std::span<uint8_t> slice(Gpa gpa, uint64_t len);
    std::span<const uint8_t> slice(Gpa gpa, uint64_t len) const;

    /// Copies bytes into guest RAM at gpa. Throws Error if out of range.
    void write_bytes(Gpa gpa, std::span<const uint8_t> bytes);

    /// Asks for no transparent huge pages on every region (MADV_NOHUGEPAGE, undoing
    /// create()'s MADV_HUGEPAGE): for RAM a userfaultfd server fills 4 KiB at a time
    /// (every restore). With shmem huge pages on request (shmem_enabled advise),
    /// Linux 6.1's khugepaged otherwise collapses a 2 MiB range that still has holes,
    /// filling them with zeros that the guest reads without a MISSING fault (shown in
    /// the test host by tools/testhost/uffd-thp-probe.c; Linux >= 6.4 checks for a
    /// MISSING registration). khugepaged collapses a memfd's range through ANY mapping
    /// of it with VM_HUGEPAGE, so no mapping of a memfd such a server fills may keep
    /// MADV_HUGEPAGE (the mapping a freeze moves aside keeps its NOHUGEPAGE). Tested with
    /// advise (tests/testhost/meson.build testhost-snapshot-shmem-advise). Best
    /// effort, no errors.
    void disable_huge_pages();

    /// What collapse_huge_pages did: `bytes` now on 2 MiB pages (a multiple of 2 MiB),
    /// `error` the errno of the first range the kernel refused (0: none).
    struct Collapsed {
        uint64_t bytes = 0;
        int error = 0;
    };
    /// Puts [gpa, gpa + len) on transparent huge pages now (madvise MADV_COLLAPSE,
    /// Linux >= 6.1, mm/khugepaged.c madvise_collapse), whatever the host's
    /// transparent_hugepage/shmem_enabled says ("never", Linux's default, included):
    /// each 2 MiB block the range touches (rounded out, clipped to its region) gets
    /// one huge page holding the bytes already written, zeros elsewhere. For RAM the
    /// VMM fills before the guest's first instruction (the kernel image, the initrd):
    /// KVM then maps each such block with one nested page fault instead of up to 512.
    /// A block with nothing written yet is refused (EINVAL: the kernel's SCAN_TRUNCATED);
    /// costs a copy of what was written (~0.6 ms per 2 MiB natively, ~5 under TCG).
    /// Never for RAM a userfaultfd server fills (disable_huge_pages says why). Best
    /// effort: EINVAL (a kernel before 6.1, or without THP), EAGAIN or ENOMEM (no free
    /// huge page) leave the rest as it was and are reported in `error`.
    Collapsed collapse_huge_pages(Gpa gpa, uint64_t len) noexcept;

    /// Faults [gpa, gpa + len) in for writing in one call (MADV_POPULATE_WRITE),
    /// before a large copy into it: one system call instead of a page fault per
    /// 4 KiB page. Best effort (a kernel before 5.14 just faults page by page);
    /// throws Error if out of range.
    void prefault_for_write(Gpa gpa, uint64_t len);
    /// Writes a trivially copyable object at gpa (unaligned is fine).
    template <typename T>
    void write(Gpa gpa, const T& value) {
        static_assert(std::is_trivially_copyable_v<T>);
        std::memcpy(slice(gpa, sizeof(T)).data(), &value, sizeof(T));
        mark_dirty(gpa, sizeof(T));
    }
    /// Reads a trivially copyable object from gpa.
    template <typename T>
    T read(Gpa gpa) const {
        static_assert(std::is_trivially_copyable_v<T>);
        T value;
        std::memcpy(&value, slice(gpa, sizeof(T)).data(), sizeof(T));
        return value;
    }

private:
    void unmap() noexcept;
    const MemoryRegion* find(Gpa gpa, uint64_t len) const;

    std::vector<MemoryRegion> regions_;
    uint64_t ram_bytes_ = 0;
    Backing backing_ = Backing::memfd;
    std::atomic<DirtyTracker*> tracker_{nullptr};
};

}  // namespace nanovm
