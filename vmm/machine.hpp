// A virtual machine ready to run: guest memory, the KVM VM with its memslots (and
// in-kernel irqchip + PIT), and its vCPUs; runs them one thread each and stops,
// pauses and resumes them. Names no device: port I/O and MMIO go to the handlers
// given to run() (devices/ provides the buses). What the vCPUs execute is set up by
// the caller: vmm/linux_boot.hpp for Linux, register writes for probe guests.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "vmm/guest_memory.hpp"
#include "vmm/io_handler.hpp"
#include "vmm/kvm.hpp"
#include "vmm/stop_reason.hpp"
#include "vmm/vcpu.hpp"
#include "vmm/vcpu_thread.hpp"
#include "vmm/vm.hpp"

namespace nanovm {

/// The most vCPUs a Machine accepts (the MP table's limit in vmm/x86).
inline constexpr uint32_t kMaxVcpus = 32;

/// Shape of a Machine.
struct MachineConfig {
    uint32_t vcpus = 1;  ///< 1..kMaxVcpus
    /// In-kernel PIC/IOAPIC/LAPICs + PIT (what Linux needs). Without it HLT exits to
    /// the VMM and the machine stops once every vCPU has halted (probe guests).
    bool irqchip = true;
    /// Register memslots with KVM_MEM_LOG_DIRTY_PAGES (Vm::get_dirty_log).
    bool log_dirty_pages = false;
};

/// One VM with its memory and vCPUs. Not movable (its vCPU threads refer to it).
/// Threads: run() on one thread; request_stop(), pause() and resume() from any other
/// thread (request_stop also from a vCPU thread, e.g. by a device).
class Machine {
public:
    /// Creates the VM (KVM_SET_TSS_ADDR and KVM_SET_IDENTITY_MAP_ADDR when KVM has
    /// them; KVM_CREATE_IRQCHIP + KVM_CREATE_PIT2 if config.irqchip), registers
    /// `memory` as memslots, creates config.vcpus vCPUs (ids 0..n-1). Throws SysError
    /// naming the failing ioctl, or Error for a bad config.
    Machine(const Kvm& kvm, GuestMemory memory, MachineConfig config);
    Machine(const Machine&) = delete;
    Machine& operator=(const Machine&) = delete;
    ~Machine();

    GuestMemory& memory() noexcept { return memory_; }
    const GuestMemory& memory() const noexcept { return memory_; }
    Vm& vm() noexcept { return vm_; }
    Vcpu& vcpu(uint32_t index) { return vcpus_.at(index); }
    uint32_t vcpu_count() const noexcept { return static_cast<uint32_t>(vcpus_.size()); }
    const MachineConfig& config() const noexcept { return config_; }

    /// Runs every vCPU on its own thread until a stop reason arises (guest reset,
    /// triple fault, error, request_stop, all halted), then stops and joins the
    /// threads and returns the first reason. A request_stop made before run() makes it
    /// return at once. `pio` and `mmio` must outlive the call. Throws only if threads
    /// cannot be started; guest and KVM failures come back as StopReason::Kind::error.
    StopReason run(PortIoHandler& pio, MmioHandler& mmio);

    /// Asks run() to stop with `reason` (the first reason wins). Any thread.
    void request_stop(StopReason reason);
    /// Convenience: request_stop({Kind::requested, {}, detail}).
    void request_stop(std::string detail = {});

    /// Stops every vCPU out of KVM_RUN and returns once all are quiescent (paused,
    /// halted or stopped): vCPU state is then stable and no exit is half-done. A no-op
    /// if run() is not in progress. Not from a vCPU thread (it would wait for itself).
    void pause();
    /// Lets paused vCPUs run again.
    void resume();
    /// True while run() is in progress.
    bool running() const;

    /// Holds the guest's kvmclock (KVM_GET_CLOCK's `clock`, ns) as it is now, for a
    /// pause the guest must not see as time passing (QEMU does the same across a
    /// stop). Call while paused. A state captured while it is held records the held
    /// value (snapshot::capture_vm_state), so a snapshot or fork of such a VM does
    /// not give its restores a jump either. Throws SysError from KVM_GET_CLOCK.
    void hold_clock();
    /// The held value, if the clock is held.
    std::optional<uint64_t> held_clock() const noexcept { return held_clock_; }
    /// Sets a held clock back (KVM_SET_CLOCK, no KVM_CLOCK_REALTIME: the guest goes on
    /// from the instant it was held) and forgets it; call before resume(). True if
    /// one was held. Throws SysError from KVM_SET_CLOCK.
    bool release_clock();
    /// Forgets a held clock without setting it.
    void forget_clock() noexcept { held_clock_.reset(); }

private:
    void stop_threads() noexcept;

    MachineConfig config_;
    GuestMemory memory_;
    Vm vm_;
    std::vector<Vcpu> vcpus_;
    mutable RunControl control_;
    bool running_ = false;  ///< guarded by control_.mutex
    std::vector<std::unique_ptr<VcpuThread>> threads_;  ///< changed under control_.mutex
    std::optional<uint64_t> held_clock_;  ///< hold_clock(): the control thread's
};

}  // namespace nanovm
