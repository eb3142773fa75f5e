// Threads for the daemon's long work (a create boots a guest for seconds; an exec
// runs as long as its command): the I/O threads hand requests here and stay free.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace nanovm::daemon {

class WorkerPool {
public:
    /// Starts `threads` workers; at most `max_queued` jobs wait for one.
    WorkerPool(unsigned threads, size_t max_queued);
    ~WorkerPool();  ///< runs the queued jobs, then joins
    WorkerPool(const WorkerPool&) = delete;
    WorkerPool& operator=(const WorkerPool&) = delete;

    /// Queues `job`. False (job dropped) when max_queued jobs are waiting already.
    bool submit(std::function<void()> job);

private:
    void work();

    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<std::function<void()>> jobs_;
    size_t max_queued_;
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace nanovm::daemon
