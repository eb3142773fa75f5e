// Worker threads (worker_pool.hpp).
#include "api/daemon/worker_pool.hpp"

#include <system_error>

namespace nanovm::daemon {

WorkerPool::WorkerPool(Limits limits) : limits_(limits) {
    if (limits_.max_threads < 1) limits_.max_threads = 1;
    if (limits_.min_threads > limits_.max_threads) limits_.min_threads = limits_.max_threads;
    std::lock_guard lock(mutex_);
    for (unsigned i = 0; i < limits_.min_threads; ++i) {
        std::thread t([this] { work(); });
        ++live_;
        ++starting_;
        const std::thread::id id = t.get_id();
        threads_.emplace(id, std::move(t));
    }
}

WorkerPool::~WorkerPool() {
    std::map<std::thread::id, std::thread> threads;
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    ready_.notify_all();
    // A job may still submit others while the pool stops: they run on the threads
    // that are left (every thread drains the queue before it ends).
    for (;;) {
        {
            std::lock_guard lock(mutex_);
            reap();
            if (threads_.empty()) return;
            threads.swap(threads_);
        }
        for (auto& [id, t] : threads) t.join();
        threads.clear();
    }
}

void WorkerPool::reap() {
    for (const std::thread::id& id : ended_) {
        const auto it = threads_.find(id);
        if (it == threads_.end()) continue;  // taken by the destructor
        it->second.join();  // it has left work(): only its return is left
        threads_.erase(it);
    }
    ended_.clear();
}

bool WorkerPool::submit(std::function<void()> job) {
    {
        std::lock_guard lock(mutex_);
        reap();
        // Threads that will take a job without being made: the idle ones and those
        // made but not yet waiting. Jobs beyond them wait for a thread.
        const size_t ready = idle_ + starting_;
        if (jobs_.size() >= ready) {
            bool made = false;
            if (live_ < limits_.max_threads && !stopping_) {
                try {
                    std::thread t([this] { work(); });
                    ++live_;
                    ++starting_;
                    const std::thread::id id = t.get_id();
                    threads_.emplace(id, std::move(t));
                    made = true;
                } catch (const std::system_error&) {
                    // No thread to be had (EAGAIN): the job waits for a running one,
                    // or is refused when there is none.
                    if (live_ == 0) return false;
                }
            }
            if (!made && jobs_.size() - ready >= limits_.max_queued) return false;
        }
        jobs_.push_back(std::move(job));
    }
    ready_.notify_one();
    return true;
}

size_t WorkerPool::threads() {
    std::lock_guard lock(mutex_);
    return live_;
}

void WorkerPool::work() {
    std::unique_lock lock(mutex_);
    --starting_;
    for (;;) {
        ++idle_;
        const bool woken = ready_.wait_for(lock, limits_.idle_timeout, [this] { return stopping_ || !jobs_.empty(); });
        --idle_;
        if (jobs_.empty()) {
            // Stopping, or idle for idle_timeout with more threads than the minimum.
            if (stopping_ || (!woken && live_ > limits_.min_threads)) {
                --live_;
                ended_.push_back(std::this_thread::get_id());
                return;
            }
            continue;
        }
        std::function<void()> job = std::move(jobs_.front());
        jobs_.pop_front();
        lock.unlock();
        job();
        job = nullptr;  // what it holds goes before the lock is taken again
        lock.lock();
    }
}

}  // namespace nanovm::daemon
