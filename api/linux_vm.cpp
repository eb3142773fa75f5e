// A Linux guest built from BootOptions (see linux_vm.hpp).
#include "api/linux_vm.hpp"

#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "api/paths.hpp"
#include "api/vm_devices.hpp"
#include "devices/bus.hpp"
#include "devices/irq_line.hpp"
#include "devices/legacy/legacy_devices.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"
#include "vmm/kvm.hpp"
#include "vmm/kvm_flavour.hpp"
#include "vmm/linux_boot.hpp"
#include "vmm/log.hpp"

namespace nanovm {

namespace {

// Reads a whole file. Throws Error("<what> <path>: <reason>"), with `hint` appended
// when the file does not exist.
std::vector<uint8_t> read_file(const std::string& path, std::string_view what, std::string_view hint) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
        const int err = errno;
        std::string message = fmt::format("{} {}: {}", what, path, ::strerror(err));
        if (err == ENOENT && !hint.empty()) message = fmt::format("{} ({})", message, hint);
        throw Error(message);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw Error(fmt::format("{} {}: {}", what, path, ::strerror(errno)));
    if (!S_ISREG(st.st_mode)) throw Error(fmt::format("{} {}: not a regular file", what, path));
    if (st.st_size == 0) throw Error(fmt::format("{} {}: empty file", what, path));
    std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::read(fd.get(), bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw Error(fmt::format("{} {}: {}", what, path, ::strerror(errno)));
        if (n == 0) throw Error(fmt::format("{} {}: file shrank while being read", what, path));
        done += static_cast<size_t>(n);
    }
    return bytes;
}

// Writes all of `bytes` to `fd`, waiting when it is non-blocking and full. Reports
// the first failure once (e.g. EPIPE) and drops output after it.
class ConsoleWriter {
public:
    explicit ConsoleWriter(int fd) : fd_(fd) {}
    void operator()(std::span<const uint8_t> bytes) {
        if (failed_) return;
        size_t done = 0;
        while (done < bytes.size()) {
            const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
            if (n >= 0) {
                done += static_cast<size_t>(n);
            } else if (errno == EINTR) {
                continue;
            } else if (errno == EAGAIN) {
                pollfd p{fd_, POLLOUT, 0};
                ::poll(&p, 1, 100);
            } else {
                failed_ = true;
                log_line(fmt::format("console output failed: {}; dropping further guest output", ::strerror(errno)));
                return;
            }
        }
    }

private:
    int fd_;
    bool failed_ = false;  // only touched with the UART's lock held
};

// The guest images, checked and placed in guest memory before KVM is touched.
struct LoadedGuest {
    GuestMemory memory;
    LinuxLayout layout;
};

LoadedGuest load_guest(const BootOptions& options) {
    if (options.cpus < kMinCpus || options.cpus > kMaxCpus)
        throw Error(fmt::format("--cpus {}: must be {} to {}", options.cpus, kMinCpus, kMaxCpus));
    if (options.memory_mib < kMinMemoryMib || options.memory_mib > kMaxMemoryMib)
        throw Error(fmt::format("--memory {}: must be {} to {} MiB", options.memory_mib, kMinMemoryMib, kMaxMemoryMib));
    const bool default_kernel = options.kernel.empty();
    const bool default_initrd = options.initrd.empty();
    const std::string kernel_path = default_kernel ? default_kernel_path() : options.kernel;
    const std::string initrd_path = default_initrd ? default_initrd_path() : options.initrd;
    const std::string kernel_hint =
        default_kernel ? fmt::format("guest kernel not built: run {}", kBuildKernelCommand) : "";
    const std::string initrd_hint =
        default_initrd ? fmt::format("guest initramfs not built: run {}", kBuildInitrdCommand) : "";
    const std::string cmdline = boot_cmdline(options);
    GuestMemory memory = GuestMemory::create(uint64_t{options.memory_mib} * MiB);
    // The file images are only needed until they are copied into guest RAM: freeing
    // them here keeps ~6 MiB (kernel + initramfs) out of the VMM's resident set.
    LinuxLayout layout = [&] {
        const std::vector<uint8_t> kernel = read_file(kernel_path, "kernel", kernel_hint);
        // A root disk boots without an initramfs unless one is asked for.
        const std::vector<uint8_t> initrd = options.root_disk && default_initrd
                                                ? std::vector<uint8_t>{}
                                                : read_file(initrd_path, "initrd", initrd_hint);
        return load_linux(memory, {kernel, kernel_path}, {initrd, initrd_path}, cmdline, options.cpus);
    }();
    check_disk_paths(options);
    return LoadedGuest{std::move(memory), std::move(layout)};
}

// /dev/kvm, and whether it can run a stock kernel at all.
Kvm open_kvm() {
    require_linux_capable_kvm(detect_kvm_host());
    return Kvm::open();
}

}  // namespace

// Declaration order is construction order: the devices refer to the machine and the
// buses, and are destroyed before them.
struct LinuxVm::Parts {
    Parts(const BootOptions& options, int console_fd, LoadedGuest guest)
        : kvm(open_kvm()),
          machine(kvm, std::move(guest.memory), MachineConfig{options.cpus, true, false}),
          virtio(options, machine, mmio),
          com1_irq(machine.vm(), Serial::kCom1Irq),
          legacy(pio, com1_irq, ConsoleWriter(console_fd), [this] {
              machine.request_stop(StopReason{StopReason::Kind::reset, {}, "i8042 reset"});
          }) {
        setup_linux_vcpus(machine, kvm, guest.layout);
    }

    Kvm kvm;
    Machine machine;
    IoBus pio;
    MmioBus mmio;
    VmDevices virtio;
    KvmIrqLine com1_irq;
    LegacyDevices legacy;
};

LinuxVm::LinuxVm(const BootOptions& options, int console_fd)
    : parts_(std::make_unique<Parts>(options, console_fd, load_guest(options))) {}

LinuxVm::~LinuxVm() = default;

Machine& LinuxVm::machine() noexcept { return parts_->machine; }
Serial& LinuxVm::com1() noexcept { return parts_->legacy.com1(); }
StopReason LinuxVm::run() { return parts_->machine.run(parts_->pio, parts_->mmio); }
GuestOutcome LinuxVm::outcome(const StopReason& reason) const {
    return guest_outcome(reason, parts_->legacy.control_port().announcement());
}
std::string LinuxVm::stats_json() const { return parts_->virtio.stats_json(); }

}  // namespace nanovm
