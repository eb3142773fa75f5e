// The device thread's event loop (vmm/event_loop.hpp): watching fds, removing them
// from inside and outside handlers with the guarantee that a removed handler never
// runs again, run_sync and post, and a throwing handler that is dropped while the
// loop keeps serving everyone else.
#include <catch2/catch.hpp>

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "vmm/error.hpp"
#include "vmm/event_loop.hpp"
#include "tests/unit/vmm/event_loop_waits.hpp"

using namespace nanovm;

namespace {

using test::eventually;
using test::settle;

Fd make_eventfd() {
    Fd fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    REQUIRE(fd);
    return fd;
}

/// Makes an eventfd readable. Usable on the loop thread (no Catch assertions there).
void signal_fd(int fd) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof(one));
}

void drain_fd(int fd) {
    uint64_t count;
    [[maybe_unused]] const ssize_t n = ::read(fd, &count, sizeof(count));
}

int sys_error_code(const std::function<void()>& f) {
    try {
        f();
    } catch (const SysError& e) {
        return e.code();
    }
    return 0;
}

}  // namespace

TEST_CASE("EventLoop: add watches an fd, modify changes the events, remove stops it", "[vmm][event_loop]") {
    EventLoop loop;
    Fd efd = make_eventfd();
    const int fd = efd.get();
    std::atomic<int> reads{0}, writes{0};
    std::atomic<bool> on_loop_thread{true};
    loop.add(fd, EPOLLIN, [&](uint32_t events) {
        if (!loop.in_loop_thread()) on_loop_thread = false;
        if (events & EPOLLIN) {
            drain_fd(fd);
            ++reads;
        }
        if (events & EPOLLOUT) {  // an eventfd is always writable: switch back at once
            ++writes;
            loop.modify(fd, EPOLLIN);
        }
    });
    CHECK_FALSE(loop.in_loop_thread());
    signal_fd(fd);
    REQUIRE(eventually([&] { return reads == 1; }));
    loop.modify(fd, EPOLLOUT);
    REQUIRE(eventually([&] { return writes == 1; }));
    settle(loop);
    CHECK(writes == 1);
    CHECK(on_loop_thread);

    CHECK(sys_error_code([&] { loop.add(fd, EPOLLIN, [](uint32_t) {}); }) == EEXIST);
    CHECK(sys_error_code([&] { loop.modify(fd + 1000, EPOLLIN); }) == ENOENT);
    loop.remove(fd + 1000);  // not watched: nothing happens

    loop.remove(fd);
    signal_fd(fd);
    settle(loop);
    CHECK(reads == 1);
    CHECK(sys_error_code([&] { loop.modify(fd, EPOLLIN); }) == ENOENT);
    // The fd can be watched again, by a new handler.
    std::atomic<int> again{0};
    loop.add(fd, EPOLLIN, [&](uint32_t) {
        drain_fd(fd);
        ++again;
    });
    REQUIRE(eventually([&] { return again == 1; }));
    CHECK(reads == 1);
}

TEST_CASE("EventLoop: a handler removing another fd of the same batch keeps that handler from running",
          "[vmm][event_loop]") {
    EventLoop loop;
    Fd a = make_eventfd(), b = make_eventfd();
    std::atomic<int> calls{0};
    const auto remove_both = [&](uint32_t) {
        ++calls;
        loop.remove(a.get());
        loop.remove(b.get());
    };
    loop.add(a.get(), EPOLLIN, remove_both);
    loop.add(b.get(), EPOLLIN, remove_both);
    // Both become readable while the loop is busy, so one epoll_wait returns both.
    loop.run_sync([&] {
        signal_fd(a.get());
        signal_fd(b.get());
    });
    settle(loop);
    CHECK(calls == 1);
    signal_fd(a.get());
    signal_fd(b.get());
    settle(loop);
    CHECK(calls == 1);
}

TEST_CASE("EventLoop: a handler may remove its own fd", "[vmm][event_loop]") {
    EventLoop loop;
    Fd efd = make_eventfd();
    std::atomic<int> calls{0};
    loop.add(efd.get(), EPOLLIN, [&](uint32_t) {
        ++calls;
        loop.remove(efd.get());  // level-triggered and never drained: would fire forever
    });
    signal_fd(efd.get());
    REQUIRE(eventually([&] { return calls == 1; }));
    settle(loop);
    CHECK(calls == 1);
}

TEST_CASE("EventLoop: remove from another thread waits for a running handler; it never runs afterwards",
          "[vmm][event_loop]") {
    EventLoop loop;
    SECTION("a handler in the middle of a slow call") {
        Fd efd = make_eventfd();
        std::atomic<bool> started{false}, finished{false}, removed{false};
        std::atomic<int> after_remove{0};
        loop.add(efd.get(), EPOLLIN, [&](uint32_t) {
            if (removed) ++after_remove;
            started = true;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            finished = true;
        });
        signal_fd(efd.get());
        REQUIRE(eventually([&] { return started.load(); }));
        loop.remove(efd.get());
        removed = true;
        CHECK(finished);
        settle(loop);
        CHECK(after_remove == 0);
    }
    SECTION("a handler firing continuously, removed at random moments") {
        for (int round = 0; round < 200; ++round) {
            Fd efd = make_eventfd();
            signal_fd(efd.get());  // stays readable: the handler runs on every loop pass
            auto removed = std::make_shared<std::atomic<bool>>(false);
            auto after_remove = std::make_shared<std::atomic<int>>(0);
            std::atomic<int> calls{0};
            loop.add(efd.get(), EPOLLIN, [removed, after_remove, &calls](uint32_t) {
                if (*removed) ++*after_remove;
                ++calls;
            });
            std::this_thread::sleep_for(std::chrono::microseconds(round % 7 * 50));
            loop.remove(efd.get());
            *removed = true;
            settle(loop);
            REQUIRE(*after_remove == 0);
        }
    }
}

TEST_CASE("EventLoop: run_sync runs the task on the loop thread, waits for it and rethrows", "[vmm][event_loop]") {
    EventLoop loop;
    bool on_loop = false;
    int value = 0;
    loop.run_sync([&] {
        on_loop = loop.in_loop_thread();
        value = 42;
    });
    CHECK(on_loop);
    CHECK(value == 42);
    CHECK_THROWS_WITH(loop.run_sync([] { throw Error("device reset failed"); }), "device reset failed");
    CHECK(sys_error_code([&] { loop.run_sync([] { throw SysError("EPOLL_CTL_ADD", EBADF); }); }) == EBADF);
    // From the loop thread itself it runs inline (a nested call does not deadlock).
    int order = 0;
    loop.run_sync([&] {
        loop.run_sync([&] { order = order * 10 + 1; });
        order = order * 10 + 2;
    });
    CHECK(order == 12);
    loop.run_sync([&] { value = 7; });  // still serving after the exceptions
    CHECK(value == 7);
}

TEST_CASE("EventLoop: posted tasks run in order, including those posted from the loop", "[vmm][event_loop]") {
    EventLoop loop;
    std::vector<int> seen;  // touched on the loop thread only
    for (int i = 0; i < 1000; ++i) loop.post([&seen, i] { seen.push_back(i); });
    loop.post([&] {
        loop.post([&] { seen.push_back(1001); });
        loop.post([&] { seen.push_back(1002); });
        seen.push_back(1000);
    });
    settle(loop);
    std::vector<int> expected(1003);
    for (int i = 0; i < 1003; ++i) expected[i] = i;
    loop.run_sync([&] { CHECK(seen == expected); });
}

TEST_CASE("EventLoop: a throwing handler is removed and the loop keeps serving others", "[vmm][event_loop]") {
    EventLoop loop;
    Fd bad = make_eventfd(), good = make_eventfd();
    std::atomic<int> bad_calls{0}, good_calls{0};
    loop.add(good.get(), EPOLLIN, [&](uint32_t) {
        drain_fd(good.get());
        ++good_calls;
    });
    SECTION("a std::exception") {
        loop.add(bad.get(), EPOLLIN, [&](uint32_t) {
            ++bad_calls;
            throw std::runtime_error("handler bug");
        });
    }
    SECTION("something that is not a std::exception") {
        loop.add(bad.get(), EPOLLIN, [&](uint32_t) {
            ++bad_calls;
            throw 42;
        });
    }
    signal_fd(bad.get());  // never drained: a handler left in place would run forever
    REQUIRE(eventually([&] { return bad_calls == 1; }));
    signal_fd(good.get());
    REQUIRE(eventually([&] { return good_calls == 1; }));
    settle(loop);
    CHECK(bad_calls == 1);
    CHECK(sys_error_code([&] { loop.modify(bad.get(), EPOLLIN); }) == ENOENT);
}

TEST_CASE("EventLoop: a throwing handler that re-registered its fd number leaves the new registration alone",
          "[vmm][event_loop]") {
    EventLoop loop;
    Fd first = make_eventfd();
    const int number = first.get();
    Fd second;  // written on the loop thread, read here only after settle()
    std::atomic<bool> re_registered{false};
    std::atomic<int> second_calls{0};
    loop.add(number, EPOLLIN, [&](uint32_t) {
        loop.remove(number);
        first.reset();
        second = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));  // the lowest free number: the one just closed
        loop.add(second.get(), EPOLLIN, [&](uint32_t) {
            drain_fd(second.get());
            ++second_calls;
        });
        re_registered = true;
        throw std::runtime_error("after re-registering");
    });
    signal_fd(number);
    REQUIRE(eventually([&] { return re_registered.load(); }));
    settle(loop);
    REQUIRE(second.get() == number);
    signal_fd(second.get());
    CHECK(eventually([&] { return second_calls == 1; }));
}
