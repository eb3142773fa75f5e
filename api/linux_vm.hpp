// One Linux guest as BootOptions describe it, built and ready to run: guest memory
// with the kernel (and initramfs) loaded, the KVM machine with its vCPUs set up for
// the Linux boot protocol, the legacy devices (serial console, i8042, RTC, control
// port) and the virtio devices. `nanovm boot` (api/boot_command.cpp) and the VMM
// process of `nanovm run` / `nanovm vm start` (api/vm/vmm_process.cpp) both build
// their guest with it and add only what differs (host console, control socket).
#pragma once

#include <memory>
#include <string>

#include "api/boot_command.hpp"
#include "devices/legacy/control_port.hpp"
#include "vmm/machine.hpp"
#include "vmm/stop_reason.hpp"

namespace nanovm {

class Serial;

/// A built Linux guest. Not copyable or movable.
class LinuxVm {
public:
    /// Validates `options` (shape, images), loads the kernel and initramfs, checks the
    /// disk paths, then opens /dev/kvm and creates the machine and its devices.
    /// Guest serial output goes to `console_fd` (not owned; it must outlive the VM).
    /// Throws Error with one line for the user: a bad option, a missing kernel (with
    /// the command that builds it), no /dev/kvm, a PVM /dev/kvm, or the KVM ioctl
    /// that failed.
    LinuxVm(const BootOptions& options, int console_fd);
    ~LinuxVm();
    LinuxVm(const LinuxVm&) = delete;
    LinuxVm& operator=(const LinuxVm&) = delete;

    /// The machine: pause(), resume() and request_stop() from other threads.
    Machine& machine() noexcept;
    /// The guest's first serial port (console input).
    Serial& com1() noexcept;
    /// Runs the guest until it ends (Machine::run).
    StopReason run();
    /// How the guest ended: the stop reason read with guest-init's announcement.
    GuestOutcome outcome(const StopReason& reason) const;
    /// Device counters as JSON (VmDevices::stats_json).
    std::string stats_json() const;

private:
    struct Parts;
    std::unique_ptr<Parts> parts_;
};

}  // namespace nanovm
