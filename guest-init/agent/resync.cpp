// RESYNC's steps (see resync.hpp).
#include "guest-init/agent/resync.hpp"

#include <fcntl.h>
#include <linux/random.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "vmm/fd.hpp"

namespace nanovm::agent {
namespace {

// The layout rand_pool_info_words() copies: two ints, then the bytes.
static_assert(offsetof(rand_pool_info, entropy_count) == 0);
static_assert(offsetof(rand_pool_info, buf_size) == 4);
static_assert(offsetof(rand_pool_info, buf) == 8);

constexpr int64_t kNsPerSecond = 1'000'000'000;

// ioctl(request, arg) on a fresh /dev/urandom fd: 0 or an errno.
int random_ioctl(unsigned long request, void* arg) {
    const Fd fd(::open("/dev/urandom", O_RDONLY | O_CLOEXEC));
    if (!fd) return errno;
    return ::ioctl(fd.get(), request, arg) == 0 ? 0 : errno;
}

}  // namespace

std::vector<uint32_t> rand_pool_info_words(std::string_view entropy) {
    std::vector<uint32_t> words(2 + (entropy.size() + 3) / 4, 0);
    const auto bytes = static_cast<int32_t>(entropy.size());
    words[0] = static_cast<uint32_t>(bytes * 8);
    words[1] = static_cast<uint32_t>(bytes);
    if (!entropy.empty()) std::memcpy(&words[2], entropy.data(), entropy.size());
    return words;
}

timespec timespec_from_ns(int64_t ns) {
    timespec t{};
    t.tv_sec = static_cast<time_t>(ns / kNsPerSecond);
    t.tv_nsec = static_cast<long>(ns % kNsPerSecond);
    return t;
}

int KernelResync::add_entropy(std::string_view entropy) {
    std::vector<uint32_t> info = rand_pool_info_words(entropy);
    return random_ioctl(RNDADDENTROPY, info.data());
}

int KernelResync::reseed_crng() { return random_ioctl(RNDRESEEDCRNG, nullptr); }

int KernelResync::set_wall_clock(const timespec& time) {
    return ::clock_settime(CLOCK_REALTIME, &time) == 0 ? 0 : errno;
}

int KernelResync::set_hostname(std::string_view name) {
    return ::sethostname(name.data(), name.size()) == 0 ? 0 : errno;
}

bool apply_resync(const proto::ResyncRequest& request, ResyncTarget& target, Failure& failure) {
    const auto step = [&failure](int err, const char* what) {
        if (err != 0) failure = Failure{err, std::string("resync: ") + what};
        return err == 0;
    };
    return step(target.add_entropy(request.entropy), "RNDADDENTROPY") &&
           step(target.reseed_crng(), "RNDRESEEDCRNG") &&
           step(target.set_wall_clock(timespec_from_ns(request.wall_clock_ns)), "clock_settime") &&
           (request.hostname.empty() || step(target.set_hostname(request.hostname), "sethostname"));
}

}  // namespace nanovm::agent
