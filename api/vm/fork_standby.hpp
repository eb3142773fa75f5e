// The standby VMM process, `nanovm _standby` (started by a ready VM's StandbyKeeper,
// api/vm/standby_keeper.hpp): it makes a fork child's Machine of its parent's shape
// ahead (snapshot::make_fork_standby: VM, irqchip, PIT, memslots over RAM that
// holds no page, vCPUs), listens on its socket, and waits. Claimed by a `vm fork`
// child (api/vm/standby_handoff.hpp) it becomes that child's VMM: its output goes to
// the child's vmm.log, it holds the child's lock and readiness pipe, and it runs
// run_vmm(options, machine), which maps the parent's frozen layer over the
// standby's memslots and sets the fork's state (1 ms instead of ~20 ms cold in the
// native benchmark). The standby of a restored parent also serves the parent's
// chain over its empty RAM ahead (StandbyOptions::fork_base); a restore claim drops
// it. It exits, unclaimed, when its parent VMM exits.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace nanovm::vm {

/// What `nanovm _standby` is started with.
struct StandbyOptions {
    std::string socket;    ///< where to listen (SOCK_SEQPACKET), in the parent VM's directory
    int status_fd = -1;    ///< pipe to the keeper: "ready\n" once listening, "claimed\n" when claimed
    pid_t parent_pid = 0;  ///< the parent VMM: exit when it does
    uint32_t vcpus = 0;    ///< the parent's shape: vCPUs
    uint64_t ram_bytes = 0;  ///< and guest RAM, bytes
    /// The parent's chain top (an absolute memory.layer path) when the parent's RAM
    /// is served from one (a restored VM or a fork child of one): its forks' frozen
    /// layers have holes that chain fills, so the standby serves it ahead
    /// (snapshot::serve_fork_standby) and a fork claim only moves the registration
    /// (~0.5 ms of a child's start). Empty: none.
    std::string fork_base;
};

/// Runs a standby until it is claimed (then returns the claimed VMM's exit status,
/// as run_vmm) or its parent exits (0). Logs and returns 1 if the Machine cannot be
/// made or the socket not bound. Never throws.
int run_fork_standby(const StandbyOptions& options);

}  // namespace nanovm::vm
