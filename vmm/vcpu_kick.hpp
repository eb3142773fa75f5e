// Getting a vCPU thread out of KVM_RUN: set kvm_run.immediate_exit, then send the
// thread a signal whose handler does nothing. KVM_RUN returns EINTR either way: the
// signal interrupts a running or blocked vCPU, and immediate_exit covers the window
// where the signal lands just before the thread enters KVM_RUN.
// Source: Documentation/virt/kvm/api.rst, "immediate_exit" (KVM_CAP_IMMEDIATE_EXIT).
#pragma once

#include <linux/kvm.h>
#include <pthread.h>

namespace nanovm {

/// The kick signal: SIGRTMIN (as Firecracker and cloud-hypervisor use).
int vcpu_kick_signal();

/// Installs a no-op handler for the kick signal, without SA_RESTART. Idempotent and
/// thread-safe; the only process-wide state the VMM touches.
void install_vcpu_kick_handler();

/// Unblocks the kick signal in the calling thread (vCPU threads call this first).
void unblock_vcpu_kick_signal();

/// Sets run->immediate_exit = 1, then signals `thread`. Safe from any thread.
void kick_vcpu(kvm_run* run, pthread_t thread);

/// Sets run->immediate_exit = 0 (the vCPU thread, before checking for requests).
void clear_vcpu_kick(kvm_run* run);

}  // namespace nanovm
