// The copy of a snapshot's memory out of the pause (DESIGN.md "snapshot/", issue 5's
// 10 ms target): while the VM is paused the pages to save are write-protected with
// userfaultfd (UFFDIO_REGISTER_MODE_WP + UFFDIO_WRITEPROTECT over the guest's memfd
// MAP_SHARED mappings, which needs shmem write-protect: UFFD_FEATURE_WP_HUGETLBFS_SHMEM,
// Linux >= 5.19); then the VM resumes and
//   - a handler thread takes each write fault on a protected page (a vCPU's write
//     reaches it through KVM's get_user_pages, a VMM thread's directly), copies
//     that page into the layer first, then un-protects it (UFFDIO_WRITEPROTECT mode
//     0, which wakes the writer);
//   - copy_all() (on the snapshot's writer thread) copies every other page in
//     order, in runs, and un-protects each run after copying it.
// So the layer holds every page as it was at the instant of protection. A page is
// claimed by exactly one of the two (an atomic per-page state), so it is copied
// once, always before it is un-protected. The KVM dirty log and the DirtyTracker
// are untouched: writes after the pause are logged as usual for the next diff.
// RAM served by a UffdServer (a restored VM, or a fork child of one) is already
// registered with the server's userfaultfd, MISSING and WP (one userfaultfd per
// range): the copy then borrows it (UffdServer::set_wp_handler, no thread of its
// own) and un-protects instead of unregistering when it is done.
// Source: QEMU migration/ram.c background snapshot (ram_write_tracking_start,
// ram_write_tracking_prepare / uffd_change_protection), Documentation/admin-guide/
// mm/userfaultfd.rst "Write Protect Notifications".
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "snapshot/memory_layer.hpp"
#include "snapshot/uffd_backend.hpp"
#include "vmm/fd.hpp"
#include "vmm/guest_memory.hpp"

namespace nanovm::snapshot {

/// Write-protects a set of pages and copies them into a LayerBuilder while the
/// memory's writers run. Not movable.
class WriteProtectCopy {
public:
    /// Empty if `memory` can be copied in the background on this kernel, else why
    /// not ("guest RAM is a MAP_PRIVATE file mapping ...", "userfaultfd: no
    /// UFFD_FEATURE_WP_HUGETLBFS_SHMEM (Linux >= 5.19)", ...). Lazily served RAM
    /// (Backing::lazy_*) needs its `server`, one that write-protects.
    static std::string unsupported_reason(const GuestMemory& memory, const UffdServer* server = nullptr);

    /// Registers every region of `memory` for write-protect faults (or, with
    /// `server`, uses its registration), protects the pages set in `pages` (a
    /// bitmap over the linear pages) and starts the fault handler. Call while
    /// nothing writes the memory (VM paused). `builder` (and `server`) must outlive
    /// this object. Throws SysError naming the step (nothing stays protected or
    /// registered then).
    WriteProtectCopy(GuestMemory& memory, const PageBitmap& pages, LayerBuilder& builder,
                     UffdServer* server = nullptr);
    WriteProtectCopy(const WriteProtectCopy&) = delete;
    WriteProtectCopy& operator=(const WriteProtectCopy&) = delete;
    /// Copies what is left (copy_all), stops the handler, unregisters.
    ~WriteProtectCopy();

    /// Copies every page not yet copied by the handler, in page order, and
    /// un-protects it; then stops the handler and unregisters the memory. Throws
    /// the first error of either thread (SysError naming the ioctl or pwrite).
    void copy_all();

    /// Write faults the handler served (pages a writer touched before copy_all got there).
    uint64_t faults() const noexcept { return faults_.load(std::memory_order_relaxed); }

private:
    struct Region {
        uint64_t host = 0;        ///< HVA of the region's first byte
        uint64_t size = 0;        ///< bytes
        uint64_t first_page = 0;  ///< linear index of its first page
    };
    enum : uint8_t { kProtected = 0, kCopying = 1, kDone = 2 };

    void handler_loop();
    void on_fault(uint64_t address);
    void unprotect(uint64_t host, uint64_t bytes);
    void fail(const std::string& message);
    void stop_handler() noexcept;
    void unregister() noexcept;

    int fd() const noexcept { return server_ ? server_->fd() : uffd_.get(); }

    LayerBuilder& builder_;
    UffdServer* server_ = nullptr;  ///< the registration borrowed, if any
    std::vector<Region> regions_;
    uint64_t total_ = 0;
    std::unique_ptr<std::atomic<uint8_t>[]> state_;  ///< per linear page
    Fd uffd_;
    Fd stop_;  ///< eventfd that ends the handler
    std::atomic<uint64_t> faults_{0};
    std::mutex error_mutex_;
    std::string error_;  ///< first failure; guarded by error_mutex_
    bool finished_ = false;
    std::thread handler_;
};

}  // namespace nanovm::snapshot
