// Threads for the daemon's long work (a create boots a guest for seconds; an exec
// runs as long as its command, a streamed one as long as its client takes the
// output): the I/O threads hand requests here and stay free.
//
// The pool grows with the work: a job that finds no idle worker gets a thread of its
// own, up to `max_threads`; threads beyond `min_threads` end once idle for
// `idle_timeout`. A fixed pool would let long requests take every worker (issue 17:
// 64 concurrent streamed execs and a client that never reads, which holds its worker
// for the 60 s write timeout) and make every other create or exec wait behind them:
// the test-host check tests/daemon/testhost_load_checks.py saw exactly that with 32.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace nanovm::daemon {

class WorkerPool {
public:
    struct Limits {
        unsigned min_threads = 4;     ///< kept even when idle
        unsigned max_threads = 1024;  ///< running at most; then jobs queue
        size_t max_queued = 1024;     ///< jobs waiting for a thread at most; then submit() refuses
        std::chrono::milliseconds idle_timeout{std::chrono::seconds(30)};  ///< an extra thread idle this long ends
    };

    explicit WorkerPool(Limits limits);
    ~WorkerPool();  ///< runs the queued jobs, then joins
    WorkerPool(const WorkerPool&) = delete;
    WorkerPool& operator=(const WorkerPool&) = delete;

    /// Runs `job` on an idle worker, else on a new one (below max_threads), else
    /// queues it. False (job dropped) when max_queued jobs are waiting already for
    /// a thread (beyond those the idle and starting threads will take).
    bool submit(std::function<void()> job);

    /// Threads that exist now (running a job or idle).
    size_t threads();

private:
    void work();
    /// Joins the threads that ended. Call with mutex_ held.
    void reap();

    Limits limits_;
    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<std::function<void()>> jobs_;
    bool stopping_ = false;
    size_t idle_ = 0;  ///< threads waiting for a job
    size_t live_ = 0;      ///< threads made and not ended
    size_t starting_ = 0;  ///< made, not yet waiting for a job
    std::map<std::thread::id, std::thread> threads_;
    std::vector<std::thread::id> ended_;  ///< ended, not joined yet
};

}  // namespace nanovm::daemon
