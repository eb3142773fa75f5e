#include "snapshot/uffd_backend.hpp"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <shared_mutex>

#include <fmt/format.h>

#include "snapshot/prefetch_list.hpp"
#include "snapshot/snapshot_error.hpp"
#include "snapshot/userfaultfd.hpp"
#include "vmm/error.hpp"
#include "vmm/log.hpp"

namespace nanovm::snapshot {

namespace {

// The start of `count` pages of `layer` from `page` on (they sit back to back in its
// mapping), each checked against its CRC first (LayerFile::page_verified). Throws what
// that throws for a corrupt page.
const uint8_t* verified_run(const LayerFile& layer, uint64_t page, uint64_t count) {
    const uint8_t* first = nullptr;
    for (uint64_t i = 0; i < count; ++i) {
        const uint8_t* data = layer.page_verified(page + i).data();
        if (i == 0) first = data;
    }
    return first;
}

}  // namespace

UffdServer::UffdServer(GuestMemory& memory, LayerChain chain, std::function<void(const std::string&)> on_error,
                       UffdPrefetch prefetch)
    : chain_(std::move(chain)), on_error_(std::move(on_error)), started_(std::chrono::steady_clock::now()) {
    if (chain_.ram_bytes() != memory.ram_bytes())
        throw SnapshotError(fmt::format("memory layer has {} bytes of RAM, the machine {}", chain_.ram_bytes(),
                                        memory.ram_bytes()));
    const GuestMemory::Backing backing = memory.backing();
    if (backing != GuestMemory::Backing::memfd && backing != GuestMemory::Backing::private_memfd)
        throw Error("userfaultfd restore: guest RAM must be fresh memfds or a private mapping of frozen ones");
    const uint64_t offered = userfaultfd_features();
    if (!(offered & UFFD_FEATURE_MISSING_SHMEM))
        throw Error("userfaultfd: this kernel cannot serve missing pages of shmem (no UFFD_FEATURE_MISSING_SHMEM)");
    wp_ = (offered & kUffdWpFeatures) == kUffdWpFeatures;
    uffd_ = open_userfaultfd();
    negotiate_userfaultfd(uffd_.get(), wp_ ? kUffdWpFeatures : 0, "restore");
    register_regions(memory);
    const bool fresh = backing == GuestMemory::Backing::memfd;
    memory.set_backing(fresh ? GuestMemory::Backing::lazy_memfd : GuestMemory::Backing::lazy_private_memfd);
    stop_ = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!stop_) throw_errno("eventfd");
    if (fresh && prefetch.pages.empty() && !prefetch.record_path.empty()) {
        record_path_ = std::move(prefetch.record_path);
        seen_.assign((chain_.total_pages() + 63) / 64, 0);
        recording_ = true;
    }
    thread_ = std::thread([this] { loop(); });
    if (!fresh || prefetch.pages.empty()) {
        prefetch_done_.store(true, std::memory_order_release);
    } else if (prefetch.before_start) {
        prefetch_loop(std::move(prefetch.pages));
    } else {
        prefetch_thread_ = std::thread([this, pages = std::move(prefetch.pages)]() mutable {
            prefetch_loop(std::move(pages));
        });
    }
}

void UffdServer::register_regions(GuestMemory& memory) {
    regions_.clear();
    uint64_t first = 0;
    private_ = memory.backing() != GuestMemory::Backing::memfd && memory.backing() != GuestMemory::Backing::lazy_memfd;
    memory.disable_huge_pages();  // filled 4 KiB at a time: see its docstring
    for (const MemoryRegion& r : memory.regions()) {
        register_userfaultfd_range(uffd_.get(), r.host, r.size, UFFDIO_REGISTER_MODE_MISSING,
                                   (1ULL << _UFFDIO_COPY) | (1ULL << _UFFDIO_ZEROPAGE), "missing pages");
        int memfd = -1;
        if (private_) {
            memfds_.emplace_back(::fcntl(r.memfd.get(), F_DUPFD_CLOEXEC, 0));
            if (!memfds_.back()) throw_errno("dup(guest RAM memfd)");
            memfd = memfds_.back().get();
        }
        regions_.push_back({reinterpret_cast<uint64_t>(r.host), r.size, first, memfd});
        first += r.size / kPageSize;
    }
    wp_registered_ = false;
}

void UffdServer::enable_write_protect() {
    if (!wp_) throw Error("userfaultfd: this kernel cannot write-protect shmem (no UFFD_FEATURE_WP_HUGETLBFS_SHMEM)");
    if (wp_registered_) return;
    // The same userfaultfd registering the same ranges again with one more mode:
    // only the VMAs' flags change (mm/userfaultfd.c userfaultfd_register).
    for (const Region& r : regions_)
        register_userfaultfd_range(uffd_.get(), reinterpret_cast<void*>(r.host), r.size,
                                   UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP,
                                   (1ULL << _UFFDIO_COPY) | (1ULL << _UFFDIO_WRITEPROTECT), "write-protect");
    wp_registered_ = true;
}

void UffdServer::stop_prefetch() {
    prefetch_stop_.store(true, std::memory_order_relaxed);
    if (prefetch_thread_.joinable()) prefetch_thread_.join();
    prefetch_done_.store(true, std::memory_order_release);
}

void UffdServer::remap(GuestMemory& memory, const std::function<void()>& replace) {
    stop_prefetch();
    std::unique_lock lock(fill_mutex_);
    // Unregistered first: mremap moves a registered mapping PTE by PTE (Linux >= 6.13
    // does, without UFFD_FEATURE_EVENT_REMAP: ~35 ms for 1 GiB with 256 MiB present,
    // where whole page tables move in ~0.1 ms). Nothing touches guest RAM in the
    // pause, so no fault can find the range unserved meanwhile. Cheap when only
    // MISSING is registered (VMA flags); with WP the kernel also clears the PTEs' bits.
    for (const Region& r : regions_) {
        uffdio_range range{r.host, r.size};
        if (::ioctl(uffd_.get(), UFFDIO_UNREGISTER, &range) != 0) {
            const int err = errno;
            lock.unlock();
            report(fmt::format("UFFDIO_UNREGISTER before a freeze: {}", std::strerror(err)));
            throw SysError("UFFDIO_UNREGISTER (guest RAM before a freeze)", err);
        }
    }
    replace();
    // The old mapping went aside without its registration (mremap drops it when
    // UFFD_FEATURE_EVENT_REMAP was not asked for): register the new one.
    try {
        register_regions(memory);
    } catch (const std::exception& e) {
        // Unserved, a hole of the frozen memfds would read as a zero page (and put one
        // into them): the VM must not run on.
        lock.unlock();
        report(std::string("after a freeze: ") + e.what());
        throw;
    }
    memory.set_backing(GuestMemory::Backing::lazy_private_memfd);
}

void UffdServer::set_wp_handler(std::function<void(uint64_t)> handler) {
    std::lock_guard lock(wp_mutex_);
    wp_handler_ = std::move(handler);
}

UffdServer::~UffdServer() {
    stop_prefetch();
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(stop_.get(), &one, sizeof(one));
    if (thread_.joinable()) thread_.join();
    if (recording_) write_record();
}

void UffdServer::prefetch_loop(std::vector<uint32_t> pages) {
    // Each listed page stands for the run a fault on it filled when it was recorded
    // (up to kRunPages from the same layer, fill()); the pages wanted are sorted and
    // copied in ranges of up to kPrefetchBatch pages of one source, one UFFDIO_COPY
    // (or ZEROPAGE) each, instead of one call per entry in fault order: in the test
    // host (QEMU TCG) a call costs ~25 us for one page and ~6 us a page in bulk, and
    // the 322 entries of a template's list (1726 pages) took 745-1153 ms one by one.
    const uint64_t total = chain_.total_pages();
    PageBitmap want((total + 63) / 64, 0);
    uint64_t entries = 0;
    for (const uint32_t page : pages) {
        const Region* region = nullptr;
        for (const Region& r : regions_)
            if (page >= r.first_page && page - r.first_page < r.size / kPageSize) region = &r;
        if (!region) continue;
        ++entries;
        const uint64_t end = region->first_page + region->size / kPageSize;
        const LayerFile* layer = chain_.find(page);
        for (uint64_t p = page; p < end && p < page + kRunPages && chain_.find(p) == layer; ++p)
            want[p / 64] |= 1ULL << (p % 64);
    }
    for (const Region& r : regions_) {
        const uint64_t end = r.first_page + r.size / kPageSize;
        uint64_t p = r.first_page;
        while (p < end && !prefetch_stop_.load(std::memory_order_relaxed)) {
            if (!page_set(want, p)) {
                ++p;
                continue;
            }
            const LayerFile* layer = chain_.find(p);
            uint64_t n = 1;
            while (n < kPrefetchBatch && p + n < end && page_set(want, p + n) && chain_.find(p + n) == layer) ++n;
            if (!fill_range(r.host + (p - r.first_page) * kPageSize, p, n, layer)) {
                prefetch_stop_.store(true, std::memory_order_relaxed);
                break;
            }
            p += n;
        }
    }
    prefetched_.store(entries, std::memory_order_relaxed);
    prefetch_ms_.store(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started_).count(),
                       std::memory_order_relaxed);
    prefetch_done_.store(true, std::memory_order_release);
}

bool UffdServer::fill_range(uint64_t host, uint64_t page, uint64_t count, const LayerFile* layer) {
    std::shared_lock lock(fill_mutex_);  // not across remap(): see there
    const uint8_t* source = nullptr;
    if (layer) {
        try {
            source = verified_run(*layer, page, count);
        } catch (const std::exception& e) {
            report(e.what());  // a corrupt page: the VM is stopped; its fault zero-fills it (fill())
            return false;
        }
    }
    uint64_t at = 0;  // pages of the range done or found there
    while (at < count) {
        int r;
        int64_t done;
        if (source) {
            uffdio_copy copy{};
            copy.dst = host + at * kPageSize;
            copy.src = reinterpret_cast<uint64_t>(source) + at * kPageSize;  // the layer's pages sit back to back
            copy.len = (count - at) * kPageSize;
            r = ::ioctl(uffd_.get(), UFFDIO_COPY, &copy);
            done = copy.copy;
        } else {
            uffdio_zeropage zero{};
            zero.range.start = host + at * kPageSize;
            zero.range.len = (count - at) * kPageSize;
            r = ::ioctl(uffd_.get(), UFFDIO_ZEROPAGE, &zero);
            done = zero.zeropage;
        }
        const uint64_t pages_done = r == 0 ? count - at : done > 0 ? static_cast<uint64_t>(done) / kPageSize : 0;
        (source ? copied_ : zeroed_).fetch_add(pages_done, std::memory_order_relaxed);
        at += pages_done;
        if (r == 0) break;
        if (errno == EEXIST) {
            ++at;  // that page is there already (a fault served it): go on after it
            continue;
        }
        if (errno == EAGAIN || errno == EINTR) continue;
        report(fmt::format("prefetch {} at HVA {:#x}: {}", source ? "UFFDIO_COPY" : "UFFDIO_ZEROPAGE",
                           host + at * kPageSize, std::strerror(errno)));
        return false;
    }
    return true;
}

void UffdServer::record(uint64_t page) {
    if (std::chrono::steady_clock::now() - started_ > kRecordWindow || recorded_.size() >= kMaxPrefetchPages) {
        write_record();
        recording_ = false;
        return;
    }
    if (page_set(seen_, page)) return;
    seen_[page / 64] |= 1ULL << (page % 64);
    recorded_.push_back(static_cast<uint32_t>(page));
}

void UffdServer::write_record() noexcept {
    try {
        write_prefetch_list(record_path_, chain_.total_pages(), recorded_);
    } catch (const std::exception& e) {
        log_line(fmt::format("uffd restore: not keeping the prefetch list: {}", e.what()));
    }
}

void UffdServer::report(const std::string& message) {
    std::lock_guard lock(error_mutex_);
    if (on_error_) {
        on_error_(message);
    } else {
        log_line("uffd restore: " + message);
    }
}

void UffdServer::detach_error_handler() {
    std::lock_guard lock(error_mutex_);
    on_error_ = {};
}

void UffdServer::loop() {
    pollfd fds[2] = {{uffd_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    uffd_msg msgs[32];
    for (;;) {
        if (::poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            report(fmt::format("userfaultfd poll: {}", std::strerror(errno)));
            return;
        }
        if (fds[1].revents) return;
        const ssize_t n = ::read(uffd_.get(), msgs, sizeof(msgs));
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            report(fmt::format("userfaultfd read: {}", std::strerror(errno)));
            return;
        }
        for (size_t i = 0; i < static_cast<size_t>(n) / sizeof(uffd_msg); ++i) {
            if (msgs[i].event != UFFD_EVENT_PAGEFAULT) continue;
            if (msgs[i].arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP) {
                on_write_protect(msgs[i].arg.pagefault.address);
            } else {
                serve(msgs[i].arg.pagefault.address);
            }
        }
    }
}

void UffdServer::on_write_protect(uint64_t address) {
    std::lock_guard lock(wp_mutex_);
    if (wp_handler_) {
        wp_handler_(address);
        return;
    }
    // Nothing protects pages but a background copy, which un-protects all before it
    // detaches: a late fault only needs waking.
    uffdio_writeprotect wp{};
    wp.range.start = address & ~(kPageSize - 1);
    wp.range.len = kPageSize;
    wp.mode = 0;
    while (::ioctl(uffd_.get(), UFFDIO_WRITEPROTECT, &wp) != 0 && (errno == EAGAIN || errno == EINTR)) {
    }
}

void UffdServer::serve(uint64_t address) {
    faults_.fetch_add(1, std::memory_order_relaxed);
    const auto t0 = std::chrono::steady_clock::now();
    last_fill_pages_ = 0;
    fill(address & ~(kPageSize - 1), true);
    const auto t1 = std::chrono::steady_clock::now();
    const uint64_t ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    fault_ns_.fetch_add(ns, std::memory_order_relaxed);
    if (ns > max_fault_ns_.load(std::memory_order_relaxed)) max_fault_ns_.store(ns, std::memory_order_relaxed);
    if (TraceEntry* trace = trace_.load(std::memory_order_acquire)) {
        const size_t i = trace_size_.load(std::memory_order_relaxed);
        if (i < kMaxTrace) {
            uint64_t page = 0;
            for (const Region& r : regions_)
                if (address >= r.host && address - r.host < r.size) page = r.first_page + (address - r.host) / kPageSize;
            trace[i] = TraceEntry{std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count(),
                                   ns, static_cast<uint32_t>(page), static_cast<uint32_t>(last_fill_pages_)};
            trace_size_.store(i + 1, std::memory_order_release);
        }
    }
}

void UffdServer::enable_trace() {
    if (trace_owner_) return;
    trace_owner_ = std::make_unique<TraceEntry[]>(kMaxTrace);
    trace_.store(trace_owner_.get(), std::memory_order_release);
}

std::vector<UffdServer::TraceEntry> UffdServer::trace() const {
    const TraceEntry* trace = trace_.load(std::memory_order_acquire);
    if (!trace) return {};
    const size_t n = trace_size_.load(std::memory_order_acquire);
    return std::vector<TraceEntry>(trace, trace + n);
}

std::string UffdServer::describe_stats() const {
    return fmt::format("uffd: {} faults served in {:.1f} ms (longest {:.2f} ms), pages copied {}, zeroed {}, "
                       "prefetched {}{}",
                       faults_served(), static_cast<double>(fault_service_ns()) / 1e6,
                       static_cast<double>(max_fault_service_ns()) / 1e6, pages_copied(), pages_zeroed(),
                       pages_prefetched(),
                       !prefetch_done() ? std::string(" (prefetch still running)")
                       : pages_prefetched() ? fmt::format(" (prefetch ended {:.1f} ms after the server started)",
                                                          prefetch_ms_.load(std::memory_order_relaxed))
                                            : std::string());
}

bool UffdServer::fill(uint64_t page_addr, bool fault) {
    std::shared_lock lock(fill_mutex_);  // not across remap(): see there
    const Region* region = nullptr;
    for (const Region& r : regions_)
        if (page_addr >= r.host && page_addr - r.host < r.size) region = &r;
    if (!region) return false;  // not ours: cannot happen for registered ranges
    const uint64_t page = region->first_page + (page_addr - region->host) / kPageSize;
    if (fault && recording_) record(page);
    const LayerFile* layer = chain_.find(page);
    // Serve a run of up to kRunPages pages that come from the same place (the same
    // layer, whose pages then sit back to back in its file, or zeros): sequential
    // touches then cost one fault per run. Pages of the run that are already there
    // end it early (EEXIST after a partial copy); the faulting page is the first.
    const uint64_t region_end = region->first_page + region->size / kPageSize;
    uint64_t run = 1;
    while (run < kRunPages && page + run < region_end && chain_.find(page + run) == layer) ++run;
    if (private_ && run > 1) {
        // A private mapping of frozen memfds: UFFDIO_COPY installs a private page
        // wherever the PTE is empty, also over a page the memfd holds (not mapped
        // here yet), which would hide it behind the chain's older copy. The run
        // stops at the memfd's next data (it does not change: frozen).
        const uint64_t offset = page_addr - region->host;
        const off_t data = ::lseek(region->memfd, static_cast<off_t>(offset + kPageSize), SEEK_DATA);
        if (data >= 0) run = std::min(run, (static_cast<uint64_t>(data) - offset) / kPageSize);
        else if (errno != ENXIO) run = 1;
    }
    const uint8_t* source = nullptr;
    if (layer) {
        try {
            source = verified_run(*layer, page, run);
        } catch (const std::exception& e) {
            report(e.what());
            source = nullptr;  // zero-fill so the faulting thread goes on; the VM is being stopped
            run = 1;
        }
    }
    uint64_t done = 0;  // bytes filled by the last attempt
    for (;;) {
        int r;
        done = 0;
        if (source) {
            uffdio_copy copy{};
            copy.dst = page_addr;
            copy.src = reinterpret_cast<uint64_t>(source);
            copy.len = run * kPageSize;
            r = ::ioctl(uffd_.get(), UFFDIO_COPY, &copy);
            done = copy.copy > 0 ? static_cast<uint64_t>(copy.copy) : 0;
        } else {
            uffdio_zeropage zero{};
            zero.range.start = page_addr;
            zero.range.len = run * kPageSize;
            r = ::ioctl(uffd_.get(), UFFDIO_ZEROPAGE, &zero);
            done = zero.zeropage > 0 ? static_cast<uint64_t>(zero.zeropage) : 0;
        }
        if (r == 0) {
            done = run * kPageSize;
            break;
        }
        if (errno == EEXIST) break;     // the rest of the run (or the page itself) was already there
        if (errno == EAGAIN) {          // the mapping changed meanwhile: retry what is left
            if (done >= kPageSize) break;  // the faulting page is in; good enough
            continue;
        }
        report(fmt::format("{} at HVA {:#x}: {}", source ? "UFFDIO_COPY" : "UFFDIO_ZEROPAGE", page_addr,
                                  std::strerror(errno)));
        return false;
    }
    (source ? copied_ : zeroed_).fetch_add(std::max<uint64_t>(done / kPageSize, 1), std::memory_order_relaxed);
    if (fault) last_fill_pages_ = std::max<uint64_t>(done / kPageSize, 1);
    return true;
}

}  // namespace nanovm::snapshot
