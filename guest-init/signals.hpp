// The signals PID 1 acts on. They stay blocked in PID 1 and are taken synchronously
// with wait_for_signal(), so there are no asynchronous handlers to race with.
//
//   SIGCHLD           a child ended: reap (reaper.hpp)
//   SIGUSR2, SIGUSR1  busybox `poweroff` / `halt` -> power off
//   SIGTERM, SIGINT   busybox `reboot` / Ctrl-Alt-Del -> reboot
#pragma once

#include <signal.h>

namespace nanovm::guest_init {

/// The set above.
sigset_t init_signal_set();

/// Installs no-op handlers for the set (so the kernel never drops them as ignored
/// for PID 1) and blocks them. Call first thing in main().
void block_init_signals();

/// Waits for one signal of the set: returns its number, or 0 if `timeout_ms` (>= 0)
/// passed first. timeout_ms < 0 waits forever.
int wait_for_signal(int timeout_ms);

/// In a child between fork() and exec(): unblocks every signal. (Caught signals
/// revert to their default action at exec by themselves.) Async-signal-safe.
void unblock_signals_in_child();

}  // namespace nanovm::guest_init
