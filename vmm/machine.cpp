#include "vmm/machine.hpp"

#include <fmt/format.h>

#include "vmm/error.hpp"

namespace nanovm {

Machine::Machine(const Kvm& kvm, GuestMemory memory, MachineConfig config)
    : config_(config), memory_(std::move(memory)), vm_(kvm) {
    if (config_.vcpus == 0 || config_.vcpus > kMaxVcpus)
        throw Error(fmt::format("{} vCPUs requested: a machine has 1 to {}", config_.vcpus, kMaxVcpus));
    // The TSS and identity-map pages matter on Intel only; both sit in the MMIO hole
    // below 4 GiB, away from RAM. Order: identity map and irqchip before any vCPU.
    if (vm_.check_extension(KVM_CAP_SET_TSS_ADDR) > 0) vm_.set_tss_addr(Vm::kTssAddr);
    if (vm_.check_extension(KVM_CAP_SET_IDENTITY_MAP_ADDR) > 0) vm_.set_identity_map_addr(Vm::kIdentityMapAddr);
    if (config_.irqchip) {
        vm_.create_irqchip();
        vm_.create_pit2();
    }
    vm_.map_memory(memory_, config_.log_dirty_pages);
    vcpus_.reserve(config_.vcpus);
    for (uint32_t i = 0; i < config_.vcpus; ++i) vcpus_.push_back(vm_.create_vcpu(i));
    control_.vcpus = config_.vcpus;
}

Machine::~Machine() { stop_threads(); }

StopReason Machine::run(PortIoHandler& pio, MmioHandler& mmio) {
    {
        std::lock_guard lock(control_.mutex);
        if (running_) throw Error("Machine::run: already running");
        control_.exit_requested = false;
        control_.pause_requested = false;
        control_.quiescent = 0;
        control_.halted = 0;
        running_ = true;
        try {
            for (uint32_t i = 0; i < vcpu_count(); ++i)
                threads_.push_back(std::make_unique<VcpuThread>(vcpus_[i], i, control_, pio, mmio));
            for (auto& thread : threads_) thread->start();
        } catch (...) {
            control_.exit_requested = true;
            control_.changed.notify_all();
            // fall through to stop_threads() outside the lock
        }
    }
    StopReason reason;
    {
        std::unique_lock lock(control_.mutex);
        if (!control_.exit_requested) control_.changed.wait(lock, [&] { return control_.stop.has_value(); });
        if (control_.stop) {
            reason = std::move(*control_.stop);
            control_.stop.reset();
        } else {
            reason = StopReason{StopReason::Kind::error, {}, "could not start the vCPU threads"};
        }
    }
    stop_threads();
    return reason;
}

void Machine::stop_threads() noexcept {
    {
        std::lock_guard lock(control_.mutex);
        control_.exit_requested = true;
        control_.changed.notify_all();
        for (auto& thread : threads_) thread->kick();
    }
    for (auto& thread : threads_) thread->join();
    std::lock_guard lock(control_.mutex);
    threads_.clear();
    running_ = false;
    control_.changed.notify_all();
}

void Machine::request_stop(StopReason reason) { control_.request_stop(std::move(reason)); }

void Machine::request_stop(std::string detail) {
    request_stop(StopReason{StopReason::Kind::requested, {}, std::move(detail)});
}

void Machine::pause() {
    std::unique_lock lock(control_.mutex);
    if (!running_ || control_.exit_requested) return;
    control_.pause_requested = true;
    for (auto& thread : threads_) thread->kick();
    control_.changed.wait(lock, [&] {
        return !running_ || control_.exit_requested || control_.quiescent == control_.vcpus;
    });
}

void Machine::resume() {
    {
        std::lock_guard lock(control_.mutex);
        control_.pause_requested = false;
    }
    // Notified after the unlock: a vCPU thread woken on this CPU would otherwise
    // preempt us while we hold the mutex it needs, and both wait.
    control_.changed.notify_all();
}

void Machine::hold_clock() { held_clock_ = vm_.clock().clock; }

bool Machine::release_clock() {
    if (!held_clock_) return false;
    kvm_clock_data clock{};
    clock.clock = *held_clock_;
    clock.flags = 0;  // no KVM_CLOCK_REALTIME: continue from the held instant
    vm_.set_clock(clock);
    held_clock_.reset();
    return true;
}

bool Machine::running() const {
    std::lock_guard lock(control_.mutex);
    return running_;
}

}  // namespace nanovm
