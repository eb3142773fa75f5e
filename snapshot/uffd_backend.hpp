// How a restored VM's RAM is served (both restore backends; issue 18): guest RAM is
// a fresh set of memfds mapped MAP_SHARED (GuestMemory Backing::lazy_memfd)
// registered with userfaultfd in MISSING mode; a handler thread fills each page on
// its first touch (by a vCPU through KVM, or by the VMM) from the topmost layer of
// the chain holding it (UFFDIO_COPY, after checking the page's CRC) or with zeros
// (UFFDIO_ZEROPAGE). Every VM restored from a snapshot shares the layer files' page
// cache as the source; the pages it touched are its own (in its memfds).
// Why not a MAP_PRIVATE mapping of the layer file (page cache shared by every
// restored VM): Linux 6.1 refuses userfaultfd (MISSING and write-protect alike) on
// MAP_PRIVATE mappings of regular files, so such a VM could neither be frozen nor
// write-protected; its snapshots and forks had to copy its RAM inside the pause.
// Its memfds are what a snapshot or fork freezes, exactly as a booted VM's
// (snapshot/frozen_ram.hpp, fork_image.hpp): in the pause the MAP_SHARED mapping
// is moved aside and a MAP_PRIVATE mapping of the same memfds put in its place
// (remap()); the memfds are then a frozen layer whose holes are not zeros but the
// chain's pages, so the new mapping is registered with the same userfaultfd
// (MISSING on private shmem: a hole is served by UFFDIO_COPY as a private page;
// Backing::lazy_private_memfd). A fork child of such a VM maps the same memfds and
// serves the same chain (its own UffdServer). The same userfaultfd also carries
// write-protect (UFFDIO_REGISTER_MODE_WP, shmem: UFFD_FEATURE_WP_HUGETLBFS_SHMEM,
// registered on demand: enable_write_protect), which a background snapshot copy
// (snapshot/wp_copy.hpp) borrows through set_wp_handler: a range can be registered
// with one userfaultfd only.
// Works on Linux 6.1: MISSING and WP on shmem, shared and private.
// Prefetch (UffdPrefetch): the pages the previous restore of the same snapshot
// faulted first (each with the run its fault filled) are copied in sorted, in ranges
// of up to kPrefetchBatch pages, before the vCPUs start (or by a second thread); a
// restore without such a list records its own first faults for the next one
// (snapshot/prefetch_list.hpp). Source: Documentation/admin-guide/mm/userfaultfd.rst
// (Linux 6.1), mm/userfaultfd.c and mm/shmem.c of 6.1 (vma_can_userfault, shmem_get_folio_gfp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "snapshot/memory_layer.hpp"
#include "vmm/fd.hpp"
#include "vmm/guest_memory.hpp"

namespace nanovm::snapshot {

/// Prefetch for one restore.
struct UffdPrefetch {
    /// Linear page indices to copy in at once, in order (read_prefetch_list); empty: none.
    std::vector<uint32_t> pages;
    /// Where to write the pages this restore faults on first (when `pages` is
    /// empty): after kRecordWindow, or at destruction if earlier. Empty: no recording.
    std::string record_path;
    /// True: the constructor copies the pages in before it returns, i.e. before the
    /// vCPUs start; false: a second thread copies them while the guest runs. In the
    /// test host (1 vCPU, QEMU TCG) a template's list (374 entries, 2089 pages) took
    /// 125-208 ms before the start, 383-943 ms beside the running guest (issue 19).
    bool before_start = true;
};

/// Serves page faults on `memory` from `chain`. Create it after the GuestMemory and
/// before anything touches that memory; destroy it after the last access to the
/// memory (the Machine using it), since unserved pages would block forever.
class UffdServer {
public:
    /// Pages served per fault at most: the faulting page and those after it from
    /// the same layer (or zeros), 64 KiB.
    static constexpr uint64_t kRunPages = 16;
    /// Pages the prefetch copies in with one call at most (2 MiB).
    static constexpr uint64_t kPrefetchBatch = 512;
    /// How long after the start first-touch faults are recorded for the next restore.
    static constexpr std::chrono::milliseconds kRecordWindow{5000};

    /// Registers every region of `memory` and starts the handler thread. `memory`
    /// is either just created (Backing::memfd, all holes: it becomes lazy_memfd)
    /// or a private mapping of frozen memfds whose holes are the chain's pages
    /// (Backing::private_memfd, not touched yet: it becomes lazy_private_memfd; no
    /// prefetch then). `on_error` is called on the handler thread with a message
    /// if a page cannot be served (corrupt layer page): the page is then
    /// zero-filled so the faulting thread does not hang, and the caller should stop
    /// the VM. Throws SysError (userfaultfd, UFFDIO_API, UFFDIO_REGISTER) or Error
    /// if shmem faults are not supported or the backing is neither.
    UffdServer(GuestMemory& memory, LayerChain chain, std::function<void(const std::string&)> on_error = {},
               UffdPrefetch prefetch = {});
    UffdServer(const UffdServer&) = delete;
    UffdServer& operator=(const UffdServer&) = delete;
    /// Stops and joins the handler thread and closes the userfaultfd.
    ~UffdServer();

    /// From now on errors are only logged, not passed to `on_error`: call it before
    /// whatever `on_error` reaches (the Machine) goes away while the server still
    /// runs. Waits for a call in progress. Any thread.
    void detach_error_handler();

    /// For a freeze (snapshot or fork) of lazy_memfd RAM, in the pause: stops the
    /// prefetch, holds off the handler, calls `replace` (which must put a MAP_PRIVATE
    /// mapping of the same memfds at the same HVAs: GuestMemory::remap_private),
    /// registers the new mappings and marks `memory` lazy_private_memfd. A fault
    /// read before the remap is served into the new mapping afterwards (the page
    /// was a hole: its content is the chain's). Throws what `replace` throws, or
    /// SysError (UFFDIO_REGISTER: then nothing serves the holes: fatal for the VM).
    void remap(GuestMemory& memory, const std::function<void()>& replace);

    /// True if this userfaultfd can also write-protect (the kernel offered
    /// UFFD_FEATURE_WP_HUGETLBFS_SHMEM, negotiated at creation).
    bool can_write_protect() const noexcept { return wp_; }
    /// Registers write-protect on every range too (the same userfaultfd, one more
    /// mode; a background copy calls it in its pause). Ranges are registered for
    /// MISSING only until then: a registered mapping costs its faults nothing, but
    /// a freeze unregisters it first, which with WP walks its page tables. Throws
    /// Error (!can_write_protect()), SysError (UFFDIO_REGISTER).
    void enable_write_protect();
    /// The userfaultfd, for UFFDIO_WRITEPROTECT by a borrower (set_wp_handler).
    int fd() const noexcept { return uffd_.get(); }
    /// Write-protect faults go to `handler` (called on the handler thread with the
    /// faulting address; it must un-protect the page itself); empty: none expected
    /// (one is logged and the page un-protected). Any thread.
    void set_wp_handler(std::function<void(uint64_t address)> handler);

    /// The chain served (its top layer is what a snapshot of this VM chains to).
    const LayerChain& chain() const noexcept { return chain_; }

    uint64_t faults_served() const noexcept { return faults_.load(std::memory_order_relaxed); }
    /// Pages filled from layers / with zeros (a fault serves up to kRunPages).
    uint64_t pages_copied() const noexcept { return copied_.load(std::memory_order_relaxed); }
    uint64_t pages_zeroed() const noexcept { return zeroed_.load(std::memory_order_relaxed); }
    /// Prefetch list entries whose pages the prefetch thread filled (or found there).
    uint64_t pages_prefetched() const noexcept { return prefetched_.load(std::memory_order_relaxed); }
    /// True once the prefetch thread went through its whole list (at once if none).
    bool prefetch_done() const noexcept { return prefetch_done_.load(std::memory_order_acquire); }

    /// Time the handler thread spent serving faults (reading the layer, checking CRCs,
    /// UFFDIO_COPY/ZEROPAGE), summed, and the longest single fault, in ns (what a
    /// faulting vCPU waits beyond the kernel's wake-ups).
    uint64_t fault_service_ns() const noexcept { return fault_ns_.load(std::memory_order_relaxed); }
    uint64_t max_fault_service_ns() const noexcept { return max_fault_ns_.load(std::memory_order_relaxed); }
    /// One line for the VMM's log: faults, pages copied / zeroed / prefetched, service time.
    std::string describe_stats() const;

    /// One served fault, for a trace (NANOVM_UFFD_TRACE, vmm_process.cpp).
    struct TraceEntry {
        int64_t at_ns = 0;       ///< steady_clock time the handler read the fault
        uint64_t service_ns = 0; ///< until its fill returned
        uint32_t page = 0;       ///< linear page index
        uint32_t pages = 0;      ///< pages the fill put in (the run)
    };
    /// Turns on keeping the first kMaxTrace faults (call before the vCPUs run).
    void enable_trace();
    static constexpr size_t kMaxTrace = 1 << 16;
    /// The faults kept so far (any thread: entries are published with release order).
    std::vector<TraceEntry> trace() const;

private:
    struct Region {
        uint64_t host = 0;   ///< HVA of the region's first byte
        uint64_t size = 0;   ///< bytes
        uint64_t first_page = 0;  ///< linear page index of its first page
        int memfd = -1;      ///< the region's memfd (a private mapping: its pages must not be shadowed)
    };
    void loop();
    void serve(uint64_t address);
    void on_write_protect(uint64_t address);
    void register_regions(GuestMemory& memory);
    void stop_prefetch();
    /// Passes `message` to on_error_ (under error_mutex_), or logs it once detached.
    void report(const std::string& message);
    /// Fills the run of pages at `page_addr` (HVA, page aligned) for a fault (handler
    /// thread: recorded) or the prefetch; returns false if it failed (on_error_ told).
    bool fill(uint64_t page_addr, bool fault);
    void prefetch_loop(std::vector<uint32_t> pages);
    /// Copies `count` pages from linear page `page` on (all from `layer`, or zeros if
    /// null) to HVA `host` for the prefetch, skipping pages already there; checks
    /// each page's CRC first. Returns false if it failed (on_error_ told).
    bool fill_range(uint64_t host, uint64_t page, uint64_t count, const LayerFile* layer);
    void record(uint64_t page);
    void write_record() noexcept;

    LayerChain chain_;
    std::vector<Region> regions_;
    std::mutex error_mutex_;
    std::function<void(const std::string&)> on_error_;  ///< guarded by error_mutex_
    std::mutex wp_mutex_;
    std::function<void(uint64_t)> wp_handler_;  ///< guarded by wp_mutex_
    /// Shared by fill() around UFFDIO_COPY/ZEROPAGE, held by remap() around the remap.
    std::shared_mutex fill_mutex_;
    bool private_ = false;        ///< the ranges are MAP_PRIVATE mappings of frozen memfds
    std::vector<Fd> memfds_;      ///< with private_: the memfds, dup'ed (Region::memfd)
    bool wp_ = false;             ///< WP features negotiated
    bool wp_registered_ = false;  ///< the ranges registered with WP (enable_write_protect)
    Fd uffd_;
    Fd stop_;  ///< eventfd: the destructor's wake-up
    std::atomic<uint64_t> faults_{0}, copied_{0}, zeroed_{0}, prefetched_{0};
    std::atomic<uint64_t> fault_ns_{0}, max_fault_ns_{0};
    std::atomic<double> prefetch_ms_{0};  ///< from the start until the prefetch thread ended
    std::unique_ptr<TraceEntry[]> trace_owner_;   ///< kMaxTrace entries once enable_trace()
    std::atomic<TraceEntry*> trace_{nullptr};     ///< trace_owner_'s, read by the handler thread
    std::atomic<size_t> trace_size_{0};
    uint64_t last_fill_pages_ = 0;            ///< handler thread: what the last fill() put in
    std::atomic<bool> prefetch_done_{false};
    std::atomic<bool> prefetch_stop_{false};
    // First-touch recording (handler thread only, then the destructor after the join).
    std::string record_path_;
    std::vector<uint32_t> recorded_;
    std::vector<uint64_t> seen_;  ///< bitmap of recorded pages
    std::chrono::steady_clock::time_point started_;
    bool recording_ = false;
    std::thread thread_;
    std::thread prefetch_thread_;
};

}  // namespace nanovm::snapshot
