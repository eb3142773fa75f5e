#include "snapshot/fork_image.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "snapshot/fork_delta.hpp"
#include "snapshot/frozen_ram.hpp"
#include "snapshot/manifest.hpp"
#include "snapshot/memory_layer.hpp"
#include "snapshot/ram_verify.hpp"
#include "snapshot/snapshot_error.hpp"
#include "snapshot/vm_state.hpp"
#include "vmm/error.hpp"

namespace nanovm::snapshot {

namespace {

using Clock = std::chrono::steady_clock;

/// A new sealable memfd of `size` bytes holding the pages of `r` set in `pages`
/// (linear indices from `first`), written from the region's mapping.
Fd copy_region(const MemoryRegion& r, uint64_t first, const PageBitmap& pages, uint64_t& copied) {
    const std::string name = fmt::format("nanovm-fork-{:#x}", r.gpa.value);
    Fd fd(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!fd) throw_errno("memfd_create(fork layer)");
    if (::ftruncate(fd.get(), static_cast<off_t>(r.size)) != 0) throw_errno("ftruncate(fork layer)");
    for_each_page_run(pages, first, r.size / kPageSize, [&](uint64_t p, uint64_t n) {
        pwrite_all(fd.get(), r.host + p * kPageSize, n * kPageSize, p * kPageSize, "fork layer");
        copied += n;
    });
    return fd;
}

}  // namespace

ForkImage freeze_for_fork(const Kvm& kvm, Machine& machine, std::string devices, UffdServer* uffd) {
    GuestMemory& memory = machine.memory();
    const bool lazy = memory.backing() == GuestMemory::Backing::lazy_memfd ||
                      memory.backing() == GuestMemory::Backing::lazy_private_memfd;
    if (lazy && !uffd) throw Error("fork: guest RAM is served by a userfaultfd handler that was not given");
    ForkImage image;
    auto t = Clock::now();
    VmState state = capture_vm_state(kvm, machine);
    state.devices = std::move(devices);
    image.state = encode_vm_state(state);
    image.state_ms = ms_since(t);
    if (lazy)
        for (const LayerFile& layer : uffd->chain().layers())
            image.base_chain.push_back({std::filesystem::absolute(layer.path()).lexically_normal().string(),
                                        layer.checksum()});

    if (ram_verify_enabled()) image.page_sums = guest_page_checksums(memory);

    t = Clock::now();
    switch (memory.backing()) {
        case GuestMemory::Backing::memfd:
        case GuestMemory::Backing::lazy_memfd: {
            // Frozen in place as a snapshot freezes it; finish_fork releases and seals.
            FrozenRam ram = freeze_ram(memory, uffd);
            if (!image.page_sums.empty()) watch_frozen_layer(ram.memfds, ram.bytes, image.page_sums, "fork layer");
            image.memfds = std::exchange(ram.memfds, {});
            image.retired = std::move(ram.retired);
            image.freeze_ms = ms_since(t);
            return image;
        }
        case GuestMemory::Backing::private_memfd:
        case GuestMemory::Backing::lazy_private_memfd: {
            // Keep the layer this VM maps; its own pages travel as a delta.
            for (const MemoryRegion& r : memory.regions()) {
                Fd fd(::fcntl(r.memfd.get(), F_DUPFD_CLOEXEC, 0));
                if (!fd) throw_errno("dup(guest RAM memfd)");
                image.memfds.push_back(std::move(fd));
            }
            const PageBitmap own = private_pages(memory);
            image.delta = write_fork_delta(memory, own, image.delta_pages);
            if (!image.page_sums.empty()) {
                // The layer's pages are the RAM's except where this VM has its own.
                std::vector<uint32_t> layer = image.page_sums;
                for (uint64_t p = 0; p < layer.size(); ++p)
                    if (page_set(own, p)) layer[p] = kUnknownPageSum;
                std::vector<uint64_t> bytes;
                for (const MemoryRegion& r : memory.regions()) bytes.push_back(r.size);
                watch_frozen_layer(image.memfds, bytes, std::move(layer), "fork layer under a delta");
            }
            image.freeze_ms = ms_since(t);
            return image;  // nothing to remap: this VM goes on as it was
        }
        case GuestMemory::Backing::private_file: {
            // The non-zero pages (its holes say nothing): each is read once, by the copy.
            const PageBitmap pages = populated_pages(memory);
            uint64_t first = 0;
            for (const MemoryRegion& r : memory.regions()) {
                image.memfds.push_back(copy_region(r, first, pages, image.copied_pages));
                first += r.size / kPageSize;
            }
            break;
        }
    }
    std::vector<int> fds;
    for (const Fd& fd : image.memfds) fds.push_back(fd.get());
    image.retired = memory.remap_private(fds);
    image.freeze_ms = ms_since(t);
    return image;
}

std::vector<ChainLayer> fork_base_chain(const std::string& dir, const ForkImage& image) {
    const std::filesystem::path base = std::filesystem::absolute(dir);
    std::vector<ChainLayer> out;
    for (const ChainLayer& layer : image.base_chain)
        out.push_back({std::filesystem::relative(layer.path, base).string(), layer.checksum});
    return out;
}

void finish_fork(ForkImage& image) {
    image.retired.release();
    // A delta's layer is the one this VM already mapped: whoever froze it seals it.
    if (image.memfds.empty() || image.delta) return;
    // Nothing maps the memfds shared any more: from here on they cannot change.
    seal_layer(image.memfds);
}

RestoredMachine restore_fork(const Kvm& kvm, std::span<const uint8_t> bytes, std::span<const int> memfds,
                             int delta_fd, std::string_view what, const std::string& base_layer) {
    RestoredMachine out;
    auto t = Clock::now();
    const VmState state = decode_vm_state(bytes, what);
    out.devices = state.devices;
    out.state_ms = ms_since(t);

    t = Clock::now();
    GuestMemory memory;
    try {
        memory = GuestMemory::map_memfds_private(memfds, state.machine.ram_bytes);
    } catch (const Error& e) {
        throw SnapshotError(fmt::format("{}: {}", what, e.what()));
    }
    auto sink = std::make_shared<UffdErrorSink>();
    // Before anything touches the mapping (the delta included): see Backing::lazy_private_memfd.
    if (!base_layer.empty()) out.uffd = serve_chain(memory, base_layer, sink);
    if (delta_fd >= 0) apply_fork_delta(delta_fd, memory, fmt::format("{} (delta)", what));
    out.memory_ms = ms_since(t);

    t = Clock::now();
    out.machine = make_restored_machine(kvm, std::move(memory), state);
    sink->attach(out.machine.get());
    out.state_ms += ms_since(t);
    return out;
}

namespace {

/// Fork base `dir`'s vm.state (checked) and base layer (its first chain line, absolute; empty if none).
std::pair<std::vector<uint8_t>, std::string> read_fork_base(const std::string& dir) {
    const Manifest manifest = read_manifest(dir);
    std::vector<uint8_t> state = read_checked_state(dir, manifest);
    std::string base;
    if (!manifest.chain.empty()) {
        base = (std::filesystem::absolute(dir) / manifest.chain.front().path).lexically_normal().string();
        const LayerFile top = LayerFile::open(base);
        if (top.checksum() != manifest.chain.front().checksum)
            throw SnapshotError(fmt::format("{}/{}: chain layer {} has checksum {:08x}, the manifest says {:08x} (a "
                                            "different or rewritten layer)",
                                            dir, kManifestFileName, base, top.checksum(),
                                            manifest.chain.front().checksum));
    }
    return {std::move(state), std::move(base)};
}

}  // namespace

RestoredMachine restore_fork(const Kvm& kvm, const std::string& dir, std::span<const int> memfds, int delta_fd) {
    const std::string path = snapshot_part(dir, kStateFileName);
    const auto [state, base] = read_fork_base(dir);
    return restore_fork(kvm, state, memfds, delta_fd, path, base);
}

std::unique_ptr<Machine> make_fork_standby(const Kvm& kvm, const MachineInfo& shape) {
    prepare_vm_state_restore();
    return std::make_unique<Machine>(kvm, GuestMemory::create(shape.ram_bytes), restored_machine_config(shape));
}

StandbyChain serve_fork_standby(Machine& standby, const std::string& base_layer) {
    if (standby.memory().backing() != GuestMemory::Backing::memfd)
        throw Error("serve_fork_standby: the standby's RAM is not fresh memfds");
    StandbyChain out;
    out.sink = std::make_shared<UffdErrorSink>();
    out.server = serve_chain(standby.memory(), base_layer, out.sink);
    return out;
}

namespace {

// Whether open file `fd` is the file at `path` now (device and inode; false if either
// cannot be read).
bool same_file(int fd, const std::string& path) {
    struct stat held {}, named {};
    return ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
           held.st_ino == named.st_ino;
}

}  // namespace

void drop_standby_chain(Machine& standby, StandbyChain& chain) noexcept {
    if (!chain.server) return;
    chain = {};
    standby.memory().set_backing(GuestMemory::Backing::memfd);
}

RestoredMachine restore_fork(std::unique_ptr<Machine> standby, std::span<const uint8_t> bytes,
                             std::span<const int> memfds, int delta_fd, std::string_view what,
                             const std::string& base_layer) {
    return restore_fork(std::move(standby), StandbyChain{}, bytes, memfds, delta_fd, what, base_layer);
}

RestoredMachine restore_fork(std::unique_ptr<Machine> standby, StandbyChain chain, std::span<const uint8_t> bytes,
                             std::span<const int> memfds, int delta_fd, std::string_view what,
                             const std::string& base_layer) {
    if (!standby) throw Error("restore_fork: no standby machine");
    if (chain.server) {
        const std::string wanted =
            base_layer.empty() ? "" : std::filesystem::absolute(base_layer).lexically_normal().string();
        // The file the server holds open, under whatever spelling: a fork base names it
        // relative to its own directory (std::filesystem::relative's canonical paths).
        if (wanted.empty() || !same_file(chain.server->chain().layers().front().fd(), wanted)) {
            // Served for another chain (or none is wanted): its registration goes with
            // it, and the RAM is plain fresh memfds again.
            drop_standby_chain(*standby, chain);
        }
    }
    RestoredMachine out;
    auto t = Clock::now();
    const VmState state = decode_vm_state(bytes, what);
    out.devices = state.devices;
    Machine& machine = *standby;
    // Checked before the layer is mapped (restore_vm_state checks again, later).
    if (!same_shape(state.machine, machine_shape(machine)))
        throw SnapshotError(fmt::format("{}: the fork's machine ({}) is not the standby's ({})", what,
                                        describe_shape(state.machine), describe_shape(machine_shape(machine))));
    out.state_ms = ms_since(t);

    t = Clock::now();
    // The standby's RAM never held a page: what is moved aside goes at once.
    const auto replace = [&] {
        try {
            machine.memory().remap_private(memfds).release();
        } catch (const Error& e) {
            throw SnapshotError(fmt::format("{}: {}", what, e.what()));
        }
    };
    std::shared_ptr<UffdErrorSink> sink;
    if (chain.server) {
        // Served ahead: its registration moves onto the frozen layer's mapping.
        sink = std::move(chain.sink);
        chain.server->remap(machine.memory(), replace);
        out.uffd = std::move(chain.server);
        out.chain_served_ahead = true;
    } else {
        replace();
        sink = std::make_shared<UffdErrorSink>();
        if (!base_layer.empty()) out.uffd = serve_chain(machine.memory(), base_layer, sink);
    }
    sink->attach(&machine);
    if (delta_fd >= 0) apply_fork_delta(delta_fd, machine.memory(), fmt::format("{} (delta)", what));
    out.memory_ms = ms_since(t);

    t = Clock::now();
    restore_vm_state(machine, state);
    out.machine = std::move(standby);
    out.state_ms += ms_since(t);
    return out;
}

RestoredMachine restore_fork(ForkStandby standby, const std::string& dir, std::span<const int> memfds,
                             int delta_fd) {
    const std::string path = snapshot_part(dir, kStateFileName);
    const auto [state, base] = read_fork_base(dir);
    return restore_fork(std::move(standby.machine), std::move(standby.chain), state, memfds, delta_fd, path, base);
}

}  // namespace nanovm::snapshot
