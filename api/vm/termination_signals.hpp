// The host's termination signals as a file descriptor: a VMM process (and `nanovm
// boot`/`run`/`vm` in the foreground) blocks SIGINT, SIGTERM and SIGHUP in every
// thread and reads them from one signalfd, so that a stop request is an event of its
// loop, not an asynchronous handler.
#pragma once

#include "vmm/fd.hpp"

namespace nanovm {

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (call before starting any
/// other thread, so that all of them inherit the mask) and ignores SIGPIPE. Returns a
/// signalfd (close-on-exec, non-blocking) that reports them. Throws SysError.
Fd block_termination_signals();

}  // namespace nanovm
