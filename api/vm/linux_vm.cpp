// A Linux guest built from BootOptions (see linux_vm.hpp).
#include "api/vm/linux_vm.hpp"

#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <optional>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "api/vm/disk_compactor.hpp"
#include "api/vm/paths.hpp"
#include "api/vm/scratch_disk.hpp"
#include "api/vm/vm_devices.hpp"
#include "devices/bus.hpp"
#include "devices/irq_line.hpp"
#include "devices/legacy/legacy_devices.hpp"
#include "devices/virtio/blk/block_device.hpp"
#include "snapshot/fork_image.hpp"
#include "snapshot/manifest.hpp"
#include "snapshot/ram_verify.hpp"
#include "snapshot/snapshot_error.hpp"
#include "snapshot/state_file.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"
#include "vmm/kvm.hpp"
#include "vmm/kvm_flavour.hpp"
#include "vmm/linux_boot.hpp"
#include "vmm/log.hpp"

namespace nanovm {

// The UART registers as JSON (nlohmann's macro: every field by its own name).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(SerialState, ier, fcr, lcr, mcr, scr, dll, dlm, lsr_errors, msr_deltas,
                                   thre_pending)

namespace {

// A whole file mapped read-only (MAP_PRIVATE): the kernel and initramfs are copied
// from the page cache into guest RAM once. Reading them into a zero-filled vector
// first cost a 6 MiB memset, a 6 MiB read copy and ~1,500 anonymous page faults per
// boot (natively 16% of `nanovm boot --until-ready`'s CPU samples in memset, 14% in
// the read copy, before the guest ran; 2026-12-02, perf record). The images are
// replaced by rename, never rewritten in place (tools/guest-kernel/build,
// ninja): a file truncated while it is mapped would fault the VMM with SIGBUS.
class MappedFile {
public:
    /// Throws Error("<what> <path>: <reason>"), with `hint` appended when the file
    /// does not exist.
    MappedFile(const std::string& path, std::string_view what, std::string_view hint) {
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
        size_ = static_cast<size_t>(st.st_size);
        void* at = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
        if (at == MAP_FAILED) throw Error(fmt::format("{} {}: mmap: {}", what, path, ::strerror(errno)));
        data_ = static_cast<const uint8_t*>(at);
        (void)::madvise(at, size_, MADV_SEQUENTIAL);  // read once, front to back
    }
    MappedFile() = default;
    ~MappedFile() {
        if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    }
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    std::span<const uint8_t> bytes() const { return {data_, size_}; }

private:
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

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

// The kernel image and the initrd, which the VMM has just written, on 2 MiB pages
// whatever the host's shmem_enabled (GuestMemory::collapse_huge_pages): the guest's
// boot reads them through ~9 nested page faults instead of ~4,500 (a 17 MiB kernel).
// Where the host gives huge pages on request anyway (shmem_enabled advise) most of
// this is done already. Silent unless nothing could be collapsed.
void back_with_huge_pages(GuestMemory& memory, const LinuxLayout& layout) {
    const GuestMemory::Collapsed kernel =
        memory.collapse_huge_pages(layout.kernel_start, layout.kernel_end.value - layout.kernel_start.value);
    const GuestMemory::Collapsed initrd = memory.collapse_huge_pages(layout.initrd, layout.initrd_size);
    if (kernel.bytes + initrd.bytes == 0 && (kernel.error != 0 || initrd.error != 0))
        log_line(fmt::format("the kernel image stays on 4 KiB pages: madvise(MADV_COLLAPSE): {} (Linux >= 6.1 with "
                             "transparent huge pages does it)",
                             std::strerror(kernel.error != 0 ? kernel.error : initrd.error)));
}

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
    // The file images are only needed until they are copied into guest RAM: unmapping
    // them here keeps ~6 MiB (kernel + initramfs) out of the VMM's resident set.
    LinuxLayout layout = [&] {
        const MappedFile kernel(kernel_path, "kernel", kernel_hint);
        // A root disk boots without an initramfs unless one is asked for.
        const std::optional<MappedFile> initrd =
            options.root_disk && default_initrd ? std::nullopt
                                                : std::optional<MappedFile>(std::in_place, initrd_path, "initrd", initrd_hint);
        return load_linux(memory, {kernel.bytes(), kernel_path},
                          {initrd ? initrd->bytes() : std::span<const uint8_t>{}, initrd_path}, cmdline, options.cpus);
    }();
    back_with_huge_pages(memory, layout);
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
// buses, and are destroyed before them; the machine before the uffd server that
// serves its memory.
struct LinuxVm::Parts {
    // A freshly booted guest.
    Parts(const BootOptions& options, int console_fd, LoadedGuest guest)
        : kvm(open_kvm()),
          machine_owner(std::make_unique<Machine>(kvm, std::move(guest.memory),
                                                  MachineConfig{options.cpus, true, false})),
          machine(*machine_owner),
          virtio(options, machine, mmio),
          com1_irq(machine.vm(), Serial::kCom1Irq),
          legacy(pio, com1_irq, ConsoleWriter(console_fd), [this] { on_i8042_reset(); }) {
        setup_linux_vcpus(machine, kvm, guest.layout);
    }
    // A guest restored from a snapshot: its vCPUs and memory come from `restored`.
    Parts(Kvm kvm_, snapshot::RestoredMachine restored, const BootOptions& options, int console_fd)
        : kvm(std::move(kvm_)),
          chain_served_ahead(restored.chain_served_ahead),
          uffd(std::move(restored.uffd)),
          machine_owner(std::move(restored.machine)),
          machine(*machine_owner),
          virtio(options, machine, mmio),
          com1_irq(machine.vm(), Serial::kCom1Irq),
          legacy(pio, com1_irq, ConsoleWriter(console_fd), [this] { on_i8042_reset(); }) {}

    Parts(const Parts&) = delete;
    Parts& operator=(const Parts&) = delete;
    // The devices and then the Machine go before the uffd server (members in reverse
    // order; the devices may still touch guest memory): its errors stop reaching
    // the Machine first.
    ~Parts() {
        if (uffd) uffd->detach_error_handler();
    }

    void on_i8042_reset() { machine.request_stop(StopReason{StopReason::Kind::reset, {}, "i8042 reset"}); }

    Kvm kvm;
    bool chain_served_ahead = false;  // snapshot::RestoredMachine's
    std::unique_ptr<snapshot::UffdServer> uffd;  // serves the RAM of a restored VM (or of a restored VM's fork child)
    std::unique_ptr<Machine> machine_owner;
    Machine& machine;
    IoBus pio;
    MmioBus mmio;
    VmDevices virtio;
    KvmIrqLine com1_irq;
    LegacyDevices legacy;
    // Compacts the disks' layer chains in the background after snapshots; shut down
    // (its thread joined) by ~LinuxVm, while the devices still run.
    std::shared_ptr<DiskCompactor> compactor = std::make_shared<DiskCompactor>(
        virtio.disks(), [this](const std::function<void()>& work) { virtio.run_quiesced(work); });
};

namespace {

// Puts `path` into snapshot directory `dir` under its own name: a hard link (O(1);
// the file is frozen, never written again), or a sparse copy when `dir` is on
// another file system. Its data is fsync'd either way, if `sync`. Returns the name.
std::string place_frozen_file(const std::string& path, const std::string& dir, bool sync) {
    const std::string name = std::filesystem::path(path).filename().string();
    const std::string target = (std::filesystem::path(dir) / name).string();
    if (sync) {
        Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd) throw_errno("open " + path);
        if (::fsync(fd.get()) != 0) throw_errno("fsync " + path);
    }
    struct stat src {}, dst {};
    if (::stat(path.c_str(), &src) != 0) throw_errno("stat " + path);
    if (::stat(target.c_str(), &dst) == 0) {
        if (src.st_dev == dst.st_dev && src.st_ino == dst.st_ino) return name;  // placed by an earlier snapshot
        if (::unlink(target.c_str()) != 0) throw_errno("unlink " + target);
    }
    if (::link(path.c_str(), target.c_str()) == 0) return name;
    if (errno != EXDEV && errno != EPERM) throw_errno(fmt::format("link {} {}", path, target));
    const std::string tmp = target + ".tmp";
    vm::copy_sparse(path, tmp);
    if (sync) {
        Fd fd(::open(tmp.c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd || ::fsync(fd.get()) != 0) throw_errno("fsync " + tmp);
    }
    if (::rename(tmp.c_str(), target.c_str()) != 0) throw_errno("rename " + tmp);
    return name;
}

}  // namespace

LinuxVm::LinuxVm(const BootOptions& options, int console_fd)
    : parts_(std::make_unique<Parts>(options, console_fd, load_guest(options))) {}

LinuxVm::LinuxVm(const std::string& dir, snapshot::MemoryBackend backend,
                 const std::function<BootOptions(const nlohmann::json& saved)>& make_options, int console_fd,
                 std::span<const int> fork_memfds, int fork_delta, snapshot::ForkStandby standby) {
    // A standby checked this host when it was made (fork_standby.cpp): not again on the restore's path.
    Kvm kvm = standby ? Kvm::open() : open_kvm();
    snapshot::RestoredMachine restored;
    if (fork_memfds.empty()) {
        if (standby) snapshot::drop_standby_chain(*standby.machine, standby.chain);
        restored = standby ? snapshot::restore_snapshot(std::move(standby.machine), dir, backend)
                           : snapshot::restore_snapshot(kvm, dir, backend);
    } else {
        restored = standby ? snapshot::restore_fork(std::move(standby), dir, fork_memfds, fork_delta)
                           : snapshot::restore_fork(kvm, dir, fork_memfds, fork_delta);
        if (snapshot::ram_verify_enabled())
            snapshot::verify_against_page_checksums(restored.machine->memory(), dir, "fork child");
    }
    // The disk layers carry no checksums of their own: check them against the
    // manifest, once per snapshot (parts.verified; write_manifest fills it).
    {
        std::vector<std::string> disk_parts;
        const snapshot::Manifest manifest = snapshot::read_manifest(dir);
        for (const snapshot::ManifestPart& part : manifest.parts)
            if (part.name != snapshot::kStateFileName && part.name != snapshot::kLayerFileName)
                disk_parts.push_back(part.name);
        snapshot::check_parts_cached(dir, manifest, disk_parts);
    }
    if (restored.devices.empty())
        throw snapshot::SnapshotError(fmt::format("{}: vm.state has no device state (not a Linux VM snapshot)", dir));
    nlohmann::json saved;
    try {
        saved = nlohmann::json::parse(restored.devices);
        if (saved.at("version").get<int>() > 1)
            throw Error(fmt::format("{}: device state version {} is newer than this nanovm reads", dir,
                                    saved.at("version").get<int>()));
    } catch (const nlohmann::json::exception& e) {
        throw snapshot::SnapshotError(fmt::format("{}/vm.state: devices: {}", dir, e.what()));
    }
    const BootOptions options = make_options(saved);
    if (options.cpus != restored.machine->vcpu_count())
        throw Error(fmt::format("{}: the snapshot has {} vCPUs, the options {}", dir,
                                restored.machine->vcpu_count(), options.cpus));
    check_disk_paths(options);
    parts_ = std::make_unique<Parts>(std::move(kvm), std::move(restored), options, console_fd);
    try {
        parts_->virtio.load_state(saved.at("devices"));
        parts_->legacy.com1().load_state(saved.at("serial").get<SerialState>());
    } catch (const nlohmann::json::exception& e) {
        throw Error(fmt::format("{}/vm.state: devices: {}", dir, e.what()));
    }
}

LinuxVm::~LinuxVm() {
    if (parts_) parts_->compactor->shutdown();
}

void LinuxVm::wait_compaction() { parts_->compactor->wait(); }

Machine& LinuxVm::machine() noexcept { return parts_->machine; }
Serial& LinuxVm::com1() noexcept { return parts_->legacy.com1(); }
snapshot::UffdServer* LinuxVm::uffd() noexcept { return parts_->uffd.get(); }
bool LinuxVm::chain_served_ahead() const noexcept { return parts_->chain_served_ahead; }
StopReason LinuxVm::run() { return parts_->machine.run(parts_->pio, parts_->mmio); }
GuestOutcome LinuxVm::outcome(const StopReason& reason) const {
    return guest_outcome(reason, parts_->legacy.control_port().announcement());
}
std::string LinuxVm::stats_json() const { return parts_->virtio.stats_json(); }

std::vector<std::string> LinuxVm::disk_files() const {
    std::vector<std::string> files;
    for (const virtio::blk::BlockDevice* disk : parts_->virtio.disks())
        for (const std::string& path : disk->layer_paths()) files.push_back(path);
    return files;
}

struct LinuxVm::DeviceCapture {
    std::string devices;                ///< vm.state's devices section (JSON)
    std::vector<std::string> local;     ///< frozen chain files in the VM's own directory: placed into the snapshot
    std::vector<std::string> own_dirs;  ///< per disk (bus order): where its new layers go (Placement::set_own_dirs)
};

LinuxVm::DeviceCapture LinuxVm::capture_devices(const LinuxSnapshotRequest& request) {
    Parts& p = *parts_;
    DeviceCapture out;
    nlohmann::json disks = nlohmann::json::array();
    const std::vector<virtio::blk::BlockDevice*>& devices = p.virtio.disks();
    out.own_dirs.resize(devices.size());
    for (size_t i = 0; i < devices.size(); ++i) {
        virtio::blk::BlockDevice& disk = *devices[i];
        if (disk.options().read_only) {
            disks.push_back(nlohmann::json{{"frozen", nullptr}});
            continue;
        }
        const std::string new_top = request.new_top_path(i);
        const bool was_layered = disk.layered();  // else the frozen file is the raw image itself
        const std::string frozen = disk.freeze(new_top);
        const std::filesystem::path own_dir = std::filesystem::path(new_top).parent_path();
        out.own_dirs[i] = own_dir.empty() ? std::string(".") : own_dir.string();
        const std::vector<std::string> chain = disk.layer_paths();  // top first: new_top, frozen, ...
        bool frozen_local = false;
        for (size_t k = 1; k < chain.size(); ++k) {
            if (std::filesystem::path(chain[k]).parent_path() != own_dir) continue;
            out.local.push_back(chain[k]);
            if (chain[k] == frozen) frozen_local = true;
        }
        disks.push_back(nlohmann::json{
            {"frozen", frozen_local ? std::filesystem::path(frozen).filename().string() : frozen},
            {"frozen_kind", was_layered ? "layer" : "raw"}});
    }
    const nlohmann::json saved{{"version", 1},
                               {"config", request.config},
                               {"disks", std::move(disks)},
                               {"devices", p.virtio.save_state()},
                               {"serial", p.legacy.com1().save_state()}};
    out.devices = saved.dump();
    return out;
}

std::unique_ptr<snapshot::PendingSnapshot> LinuxVm::start_snapshot(const LinuxSnapshotRequest& request) {
    Parts& p = *parts_;
    // Waits for a running compaction (wait_compaction() before the pause makes this
    // instant); the frozen files this snapshot lists stay put until it placed them.
    const std::shared_ptr<DiskCompactor::Placement> placement = DiskCompactor::begin_snapshot(p.compactor);
    std::unique_ptr<snapshot::PendingSnapshot> pending;
    p.virtio.run_quiesced([&] {
        DeviceCapture captured = capture_devices(request);
        snapshot::SnapshotExtras extras;
        extras.devices = std::move(captured.devices);
        placement->set_own_dirs(std::move(captured.own_dirs));
        extras.sync = request.sync;
        extras.extra_parts = [local = std::move(captured.local), placement,
                              sync = request.sync](const std::string& dir) {
            std::vector<std::string> names;
            try {
                for (const std::string& path : local) names.push_back(place_frozen_file(path, dir, sync));
            } catch (...) {
                placement->finish(false);
                throw;
            }
            placement->finish(true);  // placed: the VM's own files may be compacted now
            return names;
        };
        pending = snapshot::start_full_snapshot(p.kvm, p.machine, request.dir, nullptr, snapshot::CopyMode::freeze,
                                                std::move(extras), p.uffd.get());
    });
    return pending;
}

snapshot::ForkImage LinuxVm::fork(const LinuxSnapshotRequest& request) {
    Parts& p = *parts_;
    const std::shared_ptr<DiskCompactor::Placement> placement = DiskCompactor::begin_snapshot(p.compactor);
    snapshot::ForkImage image;
    std::vector<std::string> local;
    p.virtio.run_quiesced([&] {
        DeviceCapture captured = capture_devices(request);
        local = std::move(captured.local);
        placement->set_own_dirs(std::move(captured.own_dirs));
        image = snapshot::freeze_for_fork(p.kvm, p.machine, std::move(captured.devices), p.uffd.get());
    });
    // The base: vm.state and the frozen disk layers, then the manifest (last, atomic).
    // Nothing is fsync'd: the children read it right away, and it is no use after a
    // host crash (their memory is the frozen layer, which lives in RAM).
    std::filesystem::create_directories(request.dir);
    snapshot::write_file_atomic(snapshot::snapshot_part(request.dir, snapshot::kStateFileName), image.state,
                                /*sync=*/false);
    std::vector<std::string> names{snapshot::kStateFileName};
    try {
        for (const std::string& path : local) names.push_back(place_frozen_file(path, request.dir, /*sync=*/false));
    } catch (...) {
        placement->finish(false);
        throw;
    }
    placement->finish(true);
    // A restored VM's frozen RAM has holes that its snapshot's chain fills: the chain
    // line tells the children (snapshot::restore_fork) which.
    if (!image.page_sums.empty()) snapshot::write_page_checksums(request.dir, image.page_sums);
    snapshot::write_manifest(request.dir, names, /*sync=*/false, snapshot::fork_base_chain(request.dir, image));
    return image;
}

}  // namespace nanovm
