#include "devices/virtio/blk/io_ring.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include "vmm/error.hpp"

namespace nanovm::virtio::blk {

IoRing::IoRing(unsigned entries) {
    eventfd_ = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!eventfd_) throw_errno("eventfd(io_uring completions)");
    if (const int r = io_uring_queue_init(entries, &ring_, 0); r < 0) throw SysError("io_uring_queue_init", -r);
    if (const int r = io_uring_register_eventfd(&ring_, eventfd_.get()); r < 0) {
        io_uring_queue_exit(&ring_);
        throw SysError("io_uring_register_eventfd", -r);
    }
}

IoRing::~IoRing() { io_uring_queue_exit(&ring_); }

void IoRing::clear_eventfd() noexcept {
    uint64_t count;
    [[maybe_unused]] const ssize_t n = ::read(eventfd_.get(), &count, sizeof(count));
}

io_uring_sqe* IoRing::get_sqe() noexcept {
    if (io_uring_sqe* sqe = io_uring_get_sqe(&ring_)) return sqe;
    submit();
    return io_uring_get_sqe(&ring_);
}

int IoRing::submit() noexcept { return io_uring_submit(&ring_); }

}  // namespace nanovm::virtio::blk
