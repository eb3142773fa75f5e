// The daemon's worker pool (api/daemon/worker_pool.hpp): it grows so that long jobs
// never make another wait (64 jobs that each wait for all 64 to have started all
// finish; a fixed pool of 32 would wait for good), it stops growing at max_threads
// and refuses beyond max_queued, extra threads end once idle, and the destructor
// runs what is queued. Waits are bounded (a failure is reported, never a hang): the
// bounds are failure detectors, not timings.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "api/daemon/worker_pool.hpp"

using nanovm::daemon::WorkerPool;
using namespace std::chrono_literals;

namespace {

// A count that jobs raise and wait on.
struct Gate {
    std::mutex mutex;
    std::condition_variable changed;
    int started = 0;
    bool open = false;

    void arrive() {
        std::lock_guard lock(mutex);
        ++started;
        changed.notify_all();
    }
    bool wait_started(int n, std::chrono::milliseconds bound = 10s) {
        std::unique_lock lock(mutex);
        return changed.wait_for(lock, bound, [&] { return started >= n; });
    }
    bool wait_open(std::chrono::milliseconds bound = 10s) {
        std::unique_lock lock(mutex);
        return changed.wait_for(lock, bound, [&] { return open; });
    }
    void release() {
        std::lock_guard lock(mutex);
        open = true;
        changed.notify_all();
    }
};

// Polls `done` for up to `bound`.
template <class Fn>
bool eventually(Fn done, std::chrono::milliseconds bound = 10s) {
    const auto end = std::chrono::steady_clock::now() + bound;
    while (!done()) {
        if (std::chrono::steady_clock::now() >= end) return false;
        std::this_thread::sleep_for(5ms);
    }
    return true;
}

}  // namespace

TEST_CASE("worker pool: 64 jobs that each wait for all 64 to start all run at once", "[daemon][worker_pool]") {
    WorkerPool pool(WorkerPool::Limits{.min_threads = 4});
    Gate gate;
    std::atomic<int> saw_all{0};
    for (int i = 0; i < 64; ++i)
        REQUIRE(pool.submit([&] {
            gate.arrive();
            if (gate.wait_started(64)) ++saw_all;
        }));
    REQUIRE(gate.wait_started(64));
    REQUIRE(eventually([&] { return saw_all.load() == 64; }));
    CHECK(pool.threads() >= 64);
}

TEST_CASE("worker pool: at max_threads jobs queue, past max_queued submit refuses", "[daemon][worker_pool]") {
    WorkerPool pool(WorkerPool::Limits{.min_threads = 1, .max_threads = 4, .max_queued = 2});
    Gate gate;
    std::atomic<int> ran{0};
    const auto job = [&] {
        gate.arrive();
        gate.wait_open();
        ++ran;
    };
    for (int i = 0; i < 4; ++i) REQUIRE(pool.submit(job));
    REQUIRE(gate.wait_started(4));
    CHECK(pool.threads() == 4);
    CHECK(pool.submit(job));
    CHECK(pool.submit(job));
    CHECK_FALSE(pool.submit(job));  // 2 queued already
    CHECK(pool.threads() == 4);
    gate.release();
    CHECK(eventually([&] { return ran.load() == 6; }));
}

TEST_CASE("worker pool: threads beyond the minimum end once idle", "[daemon][worker_pool]") {
    WorkerPool pool(WorkerPool::Limits{.min_threads = 2, .max_threads = 64, .idle_timeout = 20ms});
    CHECK(pool.threads() == 2);
    Gate gate;
    for (int i = 0; i < 10; ++i)
        REQUIRE(pool.submit([&] {
            gate.arrive();
            gate.wait_open();
        }));
    REQUIRE(gate.wait_started(10));
    CHECK(pool.threads() == 10);
    gate.release();
    CHECK(eventually([&] { return pool.threads() == 2; }));
    // And it grows again.
    Gate again;
    for (int i = 0; i < 8; ++i)
        REQUIRE(pool.submit([&] {
            again.arrive();
            again.wait_started(8);
        }));
    CHECK(again.wait_started(8));
}

TEST_CASE("worker pool: the destructor runs the queued jobs", "[daemon][worker_pool]") {
    std::atomic<int> ran{0};
    Gate gate;
    {
        WorkerPool pool(WorkerPool::Limits{.min_threads = 1, .max_threads = 1, .max_queued = 100});
        REQUIRE(pool.submit([&] { gate.wait_open(); ++ran; }));
        for (int i = 0; i < 20; ++i) REQUIRE(pool.submit([&] { ++ran; }));
        gate.release();
    }
    CHECK(ran.load() == 21);
}
