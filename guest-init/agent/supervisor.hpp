// PID 1's side of the agent (guest-init/main.cpp, boot mode nanovm.agent): the agent
// runs as a separate process forked from PID 1, so PID 1's reaping (reaper.hpp) and
// the agent's own waitpid of its commands never meet: the agent is a child subreaper
// and reaps its commands and their orphans; PID 1 reaps the agent and everything
// else. PID 1 restarts the agent when it dies.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace nanovm::guest_init {

/// Forks the agent listening on vsock `port` (with power control: SHUTDOWN signals
/// PID 1) and waits up to 2 s until it listens, so that the ready line printed
/// after this means "the agent accepts connections". Returns its pid, or -1 (logged).
pid_t start_agent(uint32_t port);

/// Serves PID 1's signals for the rest of the boot: reaps every zombie, restarts the
/// agent (`agent`, from start_agent) when it dies -- giving up after 5 deaths in a row
/// within 1 s of their start -- and powers off or reboots on request. Never returns.
[[noreturn]] void supervise_agent(pid_t agent, uint32_t port);

}  // namespace nanovm::guest_init
