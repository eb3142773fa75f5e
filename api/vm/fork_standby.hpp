// The standby VMM process, `nanovm _standby` (started by a ready VM's StandbyKeeper,
// api/vm/standby_keeper.hpp): it makes a fork child's Machine of its parent's shape
// ahead (snapshot::make_fork_standby: VM, irqchip, PIT, memslots over RAM that
// holds no page, vCPUs), listens on its socket, and waits. Claimed by a `vm fork`
// child (api/vm/standby_handoff.hpp) it becomes that child's VMM: its output goes to
// the child's vmm.log, it holds the child's lock and readiness pipe, and it runs
// run_vmm(options, machine), which maps the parent's frozen layer over the
// standby's memslots and sets the fork's state (1 ms instead of ~20 ms cold in the
// native benchmark). It exits, unclaimed, when its parent VMM exits.
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
};

/// Runs a standby until it is claimed (then returns the claimed VMM's exit status,
/// as run_vmm) or its parent exits (0). Logs and returns 1 if the Machine cannot be
/// made or the socket not bound. Never throws.
int run_fork_standby(const StandbyOptions& options);

}  // namespace nanovm::vm
