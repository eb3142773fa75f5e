#include "snapshot/snapshot_dir.hpp"

#include <fcntl.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "snapshot/crc32c.hpp"
#include "snapshot/frozen_ram.hpp"
#include "snapshot/manifest.hpp"
#include "snapshot/prefetch_list.hpp"
#include "snapshot/snapshot_error.hpp"
#include "snapshot/state_file.hpp"
#include "snapshot/vm_state.hpp"
#include "vmm/error.hpp"
#include "vmm/log.hpp"

namespace nanovm::snapshot {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint8_t> capture_state(const Kvm& kvm, Machine& machine, std::string devices, double& ms) {
    const auto t = Clock::now();
    VmState state = capture_vm_state(kvm, machine);
    state.devices = std::move(devices);
    std::vector<uint8_t> bytes = encode_vm_state(state);
    ms = ms_since(t);
    return bytes;
}

}  // namespace

PageBitmap collect_dirty_pages(Machine& machine, DirtyTracker* tracker) {
    const GuestMemory& memory = machine.memory();
    PageBitmap out((memory.ram_bytes() / kPageSize + 63) / 64, 0);
    uint64_t first = 0;  // linear index of the region's first page
    size_t index = 0;
    for (const MemoryRegion& r : memory.regions()) {
        const uint64_t pages = r.size / kPageSize;
        std::vector<uint64_t> bits = machine.vm().get_dirty_log(r.slot, r.size);
        if (tracker && index < tracker->region_count()) {
            const std::vector<uint64_t> device = tracker->take(index);
            for (size_t w = 0; w < bits.size() && w < device.size(); ++w) bits[w] |= device[w];
        }
        // This runs inside the pause: word by word when the region starts on a word
        // boundary of the linear bitmap (always so for our layouts: the low region
        // ends at 3 GiB or at the end of RAM), bit by bit otherwise.
        if (first % 64 == 0) {
            const uint64_t words = (pages + 63) / 64;
            for (uint64_t w = 0; w < words && w < bits.size(); ++w) {
                const uint64_t valid = (w + 1) * 64 <= pages ? ~0ULL : (1ULL << (pages % 64)) - 1;
                out[first / 64 + w] |= bits[w] & valid;
            }
        } else {
            for (uint64_t p = 0; p < pages; ++p)
                if (page_set(bits, p)) out[(first + p) / 64] |= 1ULL << ((first + p) % 64);
        }
        first += pages;
        ++index;
    }
    return out;
}

std::unique_ptr<PendingSnapshot> start_full_snapshot(const Kvm& kvm, Machine& machine, const std::string& dir,
                                                     DirtyTracker* tracker, CopyMode mode, SnapshotExtras extras) {
    SnapshotContent content;
    double state_ms = 0;
    content.state = capture_state(kvm, machine, std::move(extras.devices), state_ms);
    content.extra_parts = std::move(extras.extra_parts);
    content.sync = extras.sync;
    auto t = Clock::now();
    if (machine.config().log_dirty_pages) (void)collect_dirty_pages(machine, tracker);  // start a new epoch
    content.drop_zero_pages = true;
    double dirty_ms = 0, freeze_ms = 0;
    if (mode == CopyMode::freeze && freeze_unsupported_reason(machine.memory()).empty()) {
        dirty_ms = ms_since(t);
        t = Clock::now();
        content.frozen = std::make_unique<FrozenRam>(freeze_ram(machine.memory()));
        freeze_ms = ms_since(t);
    } else {
        content.pages = populated_pages(machine.memory());
        dirty_ms = ms_since(t);
    }
    auto pending = std::make_unique<PendingSnapshot>(dir, machine.memory(), std::move(content), mode);
    pending->add_pause_figures(state_ms, dirty_ms, freeze_ms);
    return pending;
}

std::unique_ptr<PendingSnapshot> start_diff_snapshot(const Kvm& kvm, Machine& machine, const std::string& dir,
                                                     const std::string& parent_dir, DirtyTracker* tracker,
                                                     CopyMode mode, SnapshotExtras extras) {
    if (!machine.config().log_dirty_pages)
        throw Error("diff snapshot: the machine does not log dirty pages (MachineConfig::log_dirty_pages)");
    if (!is_durable(parent_dir))
        throw SnapshotError(fmt::format("diff snapshot: parent {} has no valid manifest (not durable yet, or not a "
                                        "snapshot)",
                                        parent_dir));
    const std::string parent_layer = snapshot_part(parent_dir, kLayerFileName);
    const LayerFile parent = LayerFile::open(parent_layer);
    if (parent.header().ram_bytes != machine.memory().ram_bytes())
        throw SnapshotError(fmt::format("{}: parent layer has a different RAM size", parent_layer));
    std::filesystem::create_directories(dir);
    SnapshotContent content;
    content.parent = ParentRef{
        std::filesystem::relative(std::filesystem::absolute(parent_layer), std::filesystem::absolute(dir)).string(),
        parent.checksum()};
    double state_ms = 0;
    content.state = capture_state(kvm, machine, std::move(extras.devices), state_ms);
    content.extra_parts = std::move(extras.extra_parts);
    content.sync = extras.sync;
    const auto t = Clock::now();
    content.pages = collect_dirty_pages(machine, tracker);
    const double dirty_ms = ms_since(t);
    auto pending = std::make_unique<PendingSnapshot>(dir, machine.memory(), std::move(content), mode);
    pending->add_pause_figures(state_ms, dirty_ms);
    return pending;
}

SnapshotStats write_full_snapshot(const Kvm& kvm, Machine& machine, const std::string& dir, DirtyTracker* tracker) {
    return start_full_snapshot(kvm, machine, dir, tracker, CopyMode::in_pause)->wait_durable();
}

SnapshotStats write_diff_snapshot(const Kvm& kvm, Machine& machine, const std::string& dir,
                                  const std::string& parent_dir, DirtyTracker* tracker) {
    return start_diff_snapshot(kvm, machine, dir, parent_dir, tracker, CopyMode::in_pause)->wait_durable();
}

std::string ensure_flat_memory(const std::string& dir) {
    const std::string layer = snapshot_part(dir, kLayerFileName);
    const LayerChain chain = LayerChain::open(layer);
    if (chain.layers().size() == 1) {
        // A base layer keeps page p at data_offset + p * 4 KiB and zero pages as
        // holes: it is already the flat image. Its pages are checked once (the
        // whole part against the manifest, cached) instead of copied.
        try {
            check_parts_cached(dir, read_manifest(dir), {kLayerFileName});
        } catch (const SnapshotError&) {
            // Name the damaged page if it is page data (each page has its own CRC);
            // anything else (bitmap, tables: already checked by open) keeps the part's error.
            const LayerFile& base = chain.layers().front();
            for (uint64_t p = 0; p < base.header().total_pages; ++p)
                if (base.has(p)) (void)base.page_verified(p);
            throw;
        }
        return layer;
    }
    const std::string flat = snapshot_part(dir, kFlatFileName);
    if (std::filesystem::exists(flat)) {
        try {
            const LayerFile f = LayerFile::open(flat);
            if (f.flat() && f.header().parent_checksum == chain.layers().front().checksum() &&
                f.header().ram_bytes == chain.ram_bytes())
                return flat;
        } catch (const SnapshotError&) {
            // a stale or damaged cache: rebuild it below
        }
    }
    flatten_chain(chain, flat, kLayerFileName);
    return flat;
}

namespace {

// Lets the uffd handler stop the Machine made after it. The prefetch thread starts
// before the Machine exists: an error it meets then (a corrupt page) is kept and
// stops the Machine as soon as it is attached, before any vCPU runs on a page that
// was zero-filled in its place.
class StopTarget {
public:
    void error(const std::string& message) {
        std::lock_guard lock(mutex_);
        if (machine_) {
            machine_->request_stop(StopReason{StopReason::Kind::error, {}, message});
        } else if (!pending_) {
            pending_ = message;
        }
    }
    void attach(Machine* machine) {
        std::lock_guard lock(mutex_);
        machine_ = machine;
        if (machine_ && pending_) machine_->request_stop(StopReason{StopReason::Kind::error, {}, *pending_});
    }

private:
    std::mutex mutex_;
    Machine* machine_ = nullptr;
    std::optional<std::string> pending_;
};

}  // namespace

std::vector<uint8_t> read_checked_state(const std::string& dir, const Manifest& manifest) {
    check_parts(dir, manifest, PartCheck::sizes);
    const std::string state_path = snapshot_part(dir, kStateFileName);
    std::vector<uint8_t> bytes = read_whole_file(state_path);
    // A damaged structure is named by its section (a more useful message than the CRC's).
    (void)decode_vm_state(bytes, state_path);
    const ManifestPart* listed = manifest.find(kStateFileName);
    if (!listed) throw SnapshotError(fmt::format("{}/{}: vm.state is not listed", dir, kManifestFileName));
    if (crc32c(bytes) != listed->crc32c)
        throw SnapshotError(fmt::format("{}: part checksum mismatch (crc32c {:08x}, the manifest says {:08x}): corrupt "
                                        "part",
                                        state_path, crc32c(bytes), listed->crc32c));
    return bytes;
}

std::vector<uint8_t> read_checked_state(const std::string& dir) { return read_checked_state(dir, read_manifest(dir)); }

RestoredMachine restore_snapshot(const Kvm& kvm, const std::string& dir, MemoryBackend backend) {
    RestoredMachine out;
    auto t = Clock::now();
    const Manifest manifest = read_manifest(dir);
    const std::string state_path = snapshot_part(dir, kStateFileName);
    const std::vector<uint8_t> bytes = read_checked_state(dir, manifest);
    const VmState state = decode_vm_state(bytes, state_path);
    if (!manifest.find(kLayerFileName))
        throw SnapshotError(fmt::format("{}/{}: memory.layer is not listed", dir, kManifestFileName));
    out.devices = state.devices;
    out.state_ms = ms_since(t);

    t = Clock::now();
    GuestMemory memory;
    auto target = std::make_shared<StopTarget>();
    if (backend == MemoryBackend::file) {
        const std::string flat = ensure_flat_memory(dir);  // memory.layer itself for a full snapshot
        const Fd fd(::open(flat.c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd) throw_errno("open " + flat);
        const LayerFile header = LayerFile::open(flat);
        if (header.header().ram_bytes != state.machine.ram_bytes)
            throw SnapshotError(fmt::format("{}: {} bytes of RAM, vm.state says {}", flat, header.header().ram_bytes,
                                            state.machine.ram_bytes));
        memory = GuestMemory::map_file_private(fd.get(), state.machine.ram_bytes, kLayerDataOffset);
    } else {
        LayerChain chain = LayerChain::open(snapshot_part(dir, kLayerFileName));
        if (chain.ram_bytes() != state.machine.ram_bytes)
            throw SnapshotError(fmt::format("{}: {} bytes of RAM, vm.state says {}", snapshot_part(dir, kLayerFileName),
                                            chain.ram_bytes(), state.machine.ram_bytes));
        memory = GuestMemory::create(state.machine.ram_bytes);
        // What the last uffd restore of this snapshot touched first comes in first.
        UffdPrefetch prefetch;
        prefetch.record_path = snapshot_part(dir, kPrefetchFileName);
        std::string why;
        prefetch.pages = read_prefetch_list(prefetch.record_path, chain.total_pages(), why);
        if (!why.empty()) log_line(fmt::format("uffd restore: no prefetch: {}", why));
        out.prefetch_pages = prefetch.pages.size();
        out.uffd = std::make_unique<UffdServer>(
            memory, std::move(chain),
            [target](const std::string& message) { target->error(message); },
            std::move(prefetch));
    }
    out.memory_ms = ms_since(t);

    t = Clock::now();
    out.machine = make_restored_machine(kvm, std::move(memory), state);
    target->attach(out.machine.get());  // an error the uffd server met meanwhile stops it now
    out.state_ms += ms_since(t);
    return out;
}

}  // namespace nanovm::snapshot
