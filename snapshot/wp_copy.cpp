#include "snapshot/wp_copy.hpp"

#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "snapshot/userfaultfd.hpp"
#include "vmm/error.hpp"

namespace nanovm::snapshot {

namespace {

// Pages copy_all copies and un-protects at once (2 MiB). Each un-protect is an
// mmu-notifier invalidation that makes KVM flush the vCPUs' TLBs, so few large runs
// beat many small ones (64-page runs made a 256 MiB copy 4x slower in the test
// host); a writer that hits a page of the run being copied waits for that run.
constexpr uint64_t kRunPages = 512;

constexpr uint64_t kWpFeatures = kUffdWpFeatures;


}  // namespace

std::string WriteProtectCopy::unsupported_reason(const GuestMemory& memory, const UffdServer* server) {
    // A fork's private mapping of its frozen memfd is shmem too: write-protect
    // covers its private copies and, with PTE markers (Linux >= 5.19), the pages
    // still read from the memfd.
    switch (memory.backing()) {
        case GuestMemory::Backing::memfd:
        case GuestMemory::Backing::private_memfd:
            break;
        case GuestMemory::Backing::lazy_memfd:
        case GuestMemory::Backing::lazy_private_memfd:
            if (!server) return "guest RAM is served by a userfaultfd handler that the snapshot was not given";
            if (!server->can_write_protect())
                return "userfaultfd: this kernel cannot write-protect shmem (no UFFD_FEATURE_WP_HUGETLBFS_SHMEM, "
                       "Linux >= 5.19)";
            return {};
        case GuestMemory::Backing::private_file:
            return "guest RAM is a MAP_PRIVATE file mapping (userfaultfd write-protect needs shmem or anonymous memory)";
    }
    // What the kernel offers does not change while we run: probe once per process,
    // not on every snapshot.
    static const std::string kernel_reason = [] () -> std::string {
        try {
            const Fd uffd = open_userfaultfd();
            if ((negotiate_userfaultfd(uffd.get(), 0, "probe") & kWpFeatures) != kWpFeatures)
                return "userfaultfd: this kernel cannot write-protect shmem (no UFFD_FEATURE_WP_HUGETLBFS_SHMEM, "
                       "Linux >= 5.19)";
            return {};
        } catch (const SysError& e) {
            return e.what();
        }
    }();
    return kernel_reason;
}

WriteProtectCopy::WriteProtectCopy(GuestMemory& memory, const PageBitmap& pages, LayerBuilder& builder,
                                   UffdServer* server)
    : builder_(builder), server_(server) {
    total_ = memory.ram_bytes() / kPageSize;
    if (pages.size() != (total_ + 63) / 64)
        throw Error(fmt::format("page bitmap of {} words for {} pages", pages.size(), total_));
    state_ = std::make_unique<std::atomic<uint8_t>[]>(total_);
    for (uint64_t p = 0; p < total_; ++p) state_[p].store(page_set(pages, p) ? kProtected : kDone, std::memory_order_relaxed);

    if (server_) {
        server_->enable_write_protect();
        server_->set_wp_handler([this](uint64_t address) { on_fault(address); });
    } else {
        uffd_ = open_userfaultfd();
        negotiate_userfaultfd(uffd_.get(), kWpFeatures, "write-protect features");
        stop_ = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
        if (!stop_) throw_errno("eventfd");
    }
    try {
        uint64_t first = 0;
        for (const MemoryRegion& r : memory.regions()) {
            if (!server_)
                register_userfaultfd_range(uffd_.get(), r.host, r.size, UFFDIO_REGISTER_MODE_WP,
                                           1ULL << _UFFDIO_WRITEPROTECT, "write-protect");
            regions_.push_back({reinterpret_cast<uint64_t>(r.host), r.size, first});
            // Protect each run of set pages with one ioctl.
            const uint64_t n = r.size / kPageSize;
            for_each_page_run(pages, first, n, [&](uint64_t p, uint64_t run) {
                uffdio_writeprotect wp{};
                wp.range.start = reinterpret_cast<uint64_t>(r.host) + p * kPageSize;
                wp.range.len = run * kPageSize;
                wp.mode = UFFDIO_WRITEPROTECT_MODE_WP;
                while (::ioctl(fd(), UFFDIO_WRITEPROTECT, &wp) != 0) {
                    if (errno != EAGAIN) throw_errno("UFFDIO_WRITEPROTECT (protect)");
                }
            });
            first += n;
        }
    } catch (...) {
        unregister();
        throw;
    }
    if (!server_) handler_ = std::thread([this] { handler_loop(); });
}

WriteProtectCopy::~WriteProtectCopy() {
    if (!finished_) {
        try {
            copy_all();
        } catch (const std::exception&) {
            // copy_all has un-protected and unregistered everything; the error was
            // reported to whoever called copy_all, or nobody is left to care.
        }
    }
}

void WriteProtectCopy::fail(const std::string& message) {
    std::lock_guard lock(error_mutex_);
    if (error_.empty()) error_ = message;
}

void WriteProtectCopy::unprotect(uint64_t host, uint64_t bytes) {
    uffdio_writeprotect wp{};
    wp.range.start = host;
    wp.range.len = bytes;
    wp.mode = 0;  // un-protect and wake the writers waiting in the range
    while (::ioctl(fd(), UFFDIO_WRITEPROTECT, &wp) != 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        fail(fmt::format("UFFDIO_WRITEPROTECT (un-protect {:#x}, {} bytes): {}", host, bytes, std::strerror(errno)));
        return;
    }
}

void WriteProtectCopy::on_fault(uint64_t address) {
    const uint64_t page_addr = address & ~(kPageSize - 1);
    const Region* region = nullptr;
    for (const Region& r : regions_)
        if (page_addr >= r.host && page_addr - r.host < r.size) region = &r;
    if (!region) return;  // not ours: cannot happen for registered ranges
    const uint64_t page = region->first_page + (page_addr - region->host) / kPageSize;
    faults_.fetch_add(1, std::memory_order_relaxed);
    uint8_t expected = kProtected;
    if (state_[page].compare_exchange_strong(expected, kCopying, std::memory_order_acq_rel)) {
        try {
            builder_.put(page, 1, reinterpret_cast<const uint8_t*>(page_addr));
        } catch (const std::exception& e) {
            fail(e.what());
        }
        state_[page].store(kDone, std::memory_order_release);
    } else {
        // copy_all holds it: it un-protects right after copying; wait for that copy
        // (one run, microseconds) so that the wake below cannot come too early.
        while (state_[page].load(std::memory_order_acquire) != kDone) std::this_thread::yield();
    }
    unprotect(page_addr, kPageSize);
}

void WriteProtectCopy::handler_loop() {
    pollfd fds[2] = {{uffd_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    uffd_msg msgs[32];
    for (;;) {
        if (::poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            fail(fmt::format("userfaultfd poll: {}", std::strerror(errno)));
            return;
        }
        if (fds[0].revents & POLLIN) {
            const ssize_t n = ::read(uffd_.get(), msgs, sizeof(msgs));
            if (n < 0) {
                if (errno == EAGAIN || errno == EINTR) continue;
                fail(fmt::format("userfaultfd read: {}", std::strerror(errno)));
                return;
            }
            for (size_t i = 0; i < static_cast<size_t>(n) / sizeof(uffd_msg); ++i)
                if (msgs[i].event == UFFD_EVENT_PAGEFAULT) on_fault(msgs[i].arg.pagefault.address);
            continue;  // drain faults before looking at the stop request
        }
        if (fds[1].revents) return;
    }
}

void WriteProtectCopy::copy_all() {
    if (finished_) return;
    finished_ = true;
    for (const Region& r : regions_) {
        const uint64_t n = r.size / kPageSize;
        uint64_t p = 0;
        while (p < n) {
            // Claim a run of consecutive protected pages (at most kRunPages).
            uint64_t run = 0;
            while (run < kRunPages && p + run < n) {
                uint8_t expected = kProtected;
                if (!state_[r.first_page + p + run].compare_exchange_strong(expected, kCopying,
                                                                          std::memory_order_acq_rel))
                    break;
                ++run;
            }
            if (run == 0) {
                ++p;
                continue;
            }
            const uint64_t host = r.host + p * kPageSize;
            try {
                builder_.put(r.first_page + p, run, reinterpret_cast<const uint8_t*>(host));
            } catch (const std::exception& e) {
                fail(e.what());
            }
            for (uint64_t i = 0; i < run; ++i) state_[r.first_page + p + i].store(kDone, std::memory_order_release);
            unprotect(host, run * kPageSize);
            p += run;
        }
    }
    stop_handler();
    unregister();
    std::lock_guard lock(error_mutex_);
    if (!error_.empty()) throw Error("background snapshot copy: " + error_);
}

void WriteProtectCopy::stop_handler() noexcept {
    if (server_) return;  // the server's thread handles the faults; unregister() detaches
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(stop_.get(), &one, sizeof(one));
    if (handler_.joinable()) handler_.join();
}

void WriteProtectCopy::unregister() noexcept {
    if (server_) {
        // The registration is the server's (MISSING too): un-protect what is left
        // (copy_all left nothing) and give the faults back.
        if (!finished_)
            for (const Region& r : regions_) unprotect(r.host, r.size);
        server_->set_wp_handler({});
        regions_.clear();
        return;
    }
    for (const Region& r : regions_) {
        uffdio_range range{r.host, r.size};
        ::ioctl(uffd_.get(), UFFDIO_UNREGISTER, &range);  // also un-protects and wakes
    }
    regions_.clear();
    uffd_.reset();
}

}  // namespace nanovm::snapshot
