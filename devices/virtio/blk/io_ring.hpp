// RAII owner of one io_uring instance (liburing) whose completions signal an
// eventfd, so an EventLoop can watch the ring like any other fd.
#pragma once

#include <liburing.h>

#include <cstdint>

#include "vmm/fd.hpp"

namespace nanovm::virtio::blk {

/// One io_uring with `entries` submission slots (completion queue: twice that) and a
/// registered, nonblocking eventfd that is signalled for every completion. Not
/// movable (liburing keeps pointers into the struct); single-threaded use.
class IoRing {
public:
    /// Sets up the ring and registers the eventfd. Throws SysError naming
    /// io_uring_queue_init / eventfd / io_uring_register_eventfd.
    explicit IoRing(unsigned entries);
    /// Tears the ring down. Callers must have reaped every completion first (the
    /// kernel would otherwise finish the I/O against memory nobody owns any more).
    ~IoRing();
    IoRing(const IoRing&) = delete;
    IoRing& operator=(const IoRing&) = delete;

    io_uring* get() noexcept { return &ring_; }
    /// The eventfd to watch for EPOLLIN; drain it with clear_eventfd().
    int eventfd() const noexcept { return eventfd_.get(); }
    /// Reads (resets) the eventfd counter.
    void clear_eventfd() noexcept;
    /// A free submission slot, submitting queued ones first if the ring is full;
    /// nullptr only if the kernel refuses to take any (the caller fails the request).
    io_uring_sqe* get_sqe() noexcept;
    /// Submits every queued SQE. Returns io_uring_submit's result (< 0: -errno;
    /// what was not taken stays queued for the next call).
    int submit() noexcept;

private:
    io_uring ring_{};
    Fd eventfd_;
};

}  // namespace nanovm::virtio::blk
