// Standby VMMs for a VM's forks (issue 5 "Fork(n <= 4)"; the goal is a fork child
// running within 20 ms of the request). A fork child started cold spends most of
// that before it maps a single page: process start and dynamic loading, then KVM's
// VM, irqchip, PIT, the memslots (4-6 ms for 1 GiB on this machine) and vCPUs. So a
// ready VM keeps `count` standbys: `nanovm _standby` processes (fork_standby.hpp)
// that made all of that for this VM's shape ahead, and wait on a socket in the VM's
// directory (standby-<n>.sock) to be claimed by a `vm fork` child
// (standby_handoff.hpp). A claimed standby becomes that child's VMM; the keeper
// starts a replacement once that VM is ready (it closes its status pipe then), at
// least kRefillDelay and at most kStartingCap after the claim: not while the
// children start (issue 19: in the test host a standby made while a restored guest
// faulted in its memory slowed its agent's first answer from ~250 ms to ~700 ms).
//
// The keeper's thread polls each standby's status pipe ("ready", "claimed") and
// pidfd, and reaps every standby it started (they are this process's children, a
// claimed one too, until this process exits). Standbys that die before they are
// claimed are restarted, at most 3 times in a row before the keeper gives up (the
// VM runs on; its forks start cold). A standby exits by itself when this process
// exits (it watches our pidfd); the destructor also SIGTERMs the unclaimed ones.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "vmm/fd.hpp"

namespace nanovm::vm {

/// Where the standbys of the VM in directory `vm_dir` listen: vm_dir/standby-*.sock
/// as they exist now, oldest first (a launcher tries them in that order).
std::vector<std::string> standby_sockets(const std::string& vm_dir);

class StandbyKeeper {
public:
    /// Keeps `count` (0..kMaxForkStandby) standbys of shape `vcpus` x `ram_bytes` for
    /// the VM in `vm_dir`, started as `exe _standby ...` with their output appended to
    /// `log_path`; with `fork_base` (the VM's chain top, an absolute memory.layer
    /// path, for a VM whose RAM a chain serves) each serves that chain ahead
    /// (StandbyOptions::fork_base). Nothing starts before start().
    StandbyKeeper(std::string exe, std::string vm_dir, std::string log_path, uint32_t vcpus, uint64_t ram_bytes,
                  uint32_t count, std::string fork_base = {});
    /// Stops the thread, SIGTERMs the unclaimed standbys and reaps them. Claimed ones
    /// (running VMs now) are left alone.
    ~StandbyKeeper();
    StandbyKeeper(const StandbyKeeper&) = delete;
    StandbyKeeper& operator=(const StandbyKeeper&) = delete;

    /// Starts the standbys and the thread that keeps them (idempotent; call once the
    /// VM is ready, so they do not compete with its boot). Errors are logged.
    void start();

private:
    struct Standby {
        pid_t pid = -1;
        Fd pidfd;
        Fd status;     // read end of its status pipe; invalid once it said "claimed" or closed
        std::string buffer;
        bool ready = false;
        bool claimed = false;
        std::chrono::steady_clock::time_point claimed_at;  // with claimed and status open: its VM is starting
    };
    void loop();
    void spawn();

    std::string exe_, vm_dir_, log_path_, fork_base_;
    uint32_t vcpus_;
    uint64_t ram_bytes_;
    uint32_t count_;
    uint64_t next_ = 0;            // the next socket's number
    std::vector<Standby> standbys_;  // only the loop's thread touches them after start()
    Fd wake_;                      // eventfd: the destructor wakes the loop
    std::atomic<bool> stopping_{false};
    std::once_flag started_;
    std::thread thread_;
};

}  // namespace nanovm::vm
