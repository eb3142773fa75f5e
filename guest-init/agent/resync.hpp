// RESYNC: the guest's fixups after a snapshot restore or a fork (messages.hpp), so
// that copies of one snapshot stop sharing the kernel RNG's state, a stale clock and
// a hostname.
//
// Why the agent does it: the guest kernel runs with ACPI off (guest-init/power.hpp),
// so its vmgenid driver, which reseeds the RNG on a VM fork by itself, is not there.
// A restored guest's CRNG would go on from the state in the snapshot: two sandboxes
// forked from it would hand their commands the same random bytes.
#pragma once

#include <time.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "guest-init/agent/failure.hpp"
#include "guest-init/protocol/messages.hpp"

namespace nanovm::agent {

/// Where RESYNC's steps land: the running kernel (KernelResync), or a recording
/// fake in the unit tests. Each step returns 0 or an errno value.
class ResyncTarget {
public:
    virtual ~ResyncTarget() = default;
    /// Mixes `entropy` into the kernel's input pool and credits 8 bits per byte
    /// (ioctl RNDADDENTROPY; random(4)).
    virtual int add_entropy(std::string_view entropy) = 0;
    /// Makes the CRNG take a new key from the input pool now, instead of at its next
    /// scheduled reseed (ioctl RNDRESEEDCRNG, Linux 4.17+): every getrandom(2) and
    /// /dev/urandom read after it returns bytes derived from the new entropy.
    virtual int reseed_crng() = 0;
    /// clock_settime(CLOCK_REALTIME, `time`).
    virtual int set_wall_clock(const timespec& time) = 0;
    /// sethostname(2) (the kernel's UTS name only; /etc/hostname is left alone).
    virtual int set_hostname(std::string_view name) = 0;
};

/// The running kernel. Needs CAP_SYS_ADMIN (the RNG ioctls, sethostname) and
/// CAP_SYS_TIME (the clock): root in the guest. The ioctls go to /dev/urandom, opened
/// for each call (an open failure is that step's errno).
class KernelResync final : public ResyncTarget {
public:
    int add_entropy(std::string_view entropy) override;
    int reseed_crng() override;
    int set_wall_clock(const timespec& time) override;
    int set_hostname(std::string_view name) override;
};

/// The RNDADDENTROPY argument for `entropy`, as 32-bit words laid out like
/// struct rand_pool_info (include/uapi/linux/random.h): int entropy_count (bits:
/// 8 per byte), int buf_size (bytes), then the bytes (zero-padded to a word).
std::vector<uint32_t> rand_pool_info_words(std::string_view entropy);

/// `ns` since the epoch (not negative) as a timespec.
timespec timespec_from_ns(int64_t ns);

/// Does RESYNC's steps in order: add_entropy, reseed_crng, set_wall_clock, then
/// set_hostname unless request.hostname is empty. Stops at the first that fails and
/// returns false with `failure` = its errno and "resync: <step>" (RNDADDENTROPY,
/// RNDRESEEDCRNG, clock_settime, sethostname). `request` is a decoded one (valid).
bool apply_resync(const proto::ResyncRequest& request, ResyncTarget& target, Failure& failure);

}  // namespace nanovm::agent
