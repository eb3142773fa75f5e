#include "snapshot/snapshot_dir.hpp"

#include <fcntl.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "snapshot/crc32c.hpp"
#include "snapshot/frozen_ram.hpp"
#include "snapshot/ram_verify.hpp"
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
                                                     DirtyTracker* tracker, CopyMode mode, SnapshotExtras extras,
                                                     UffdServer* uffd) {
    GuestMemory& memory = machine.memory();
    const bool lazy = memory.backing() == GuestMemory::Backing::lazy_memfd ||
                      memory.backing() == GuestMemory::Backing::lazy_private_memfd;
    if (lazy && !uffd) throw Error("snapshot: guest RAM is served by a userfaultfd handler that was not given");
    SnapshotContent content;
    double state_ms = 0;
    content.state = capture_state(kvm, machine, std::move(extras.devices), state_ms);
    content.extra_parts = std::move(extras.extra_parts);
    content.sync = extras.sync;
    auto t = Clock::now();
    if (machine.config().log_dirty_pages) (void)collect_dirty_pages(machine, tracker);  // start a new epoch
    content.drop_zero_pages = true;
    if (lazy) {
        // The pages the VM holds, over the chain it is served from: a diff over that
        // chain's top (in another snapshot directory), or merged with it.
        content.uffd = uffd;
        const LayerChain& chain = uffd->chain();
        if (chain.layers().size() >= kMaxLayerChain) {
            content.fill_from = &chain;
        } else {
            std::filesystem::create_directories(dir);
            const LayerFile& top = chain.layers().front();
            content.parent = ParentRef{std::filesystem::relative(std::filesystem::absolute(top.path()),
                                                                 std::filesystem::absolute(dir))
                                           .string(),
                                       top.checksum()};
            content.drop_zero_pages = false;  // a zero page hides the chain's
        }
    }
    double dirty_ms = 0, freeze_ms = 0;
    if (mode == CopyMode::freeze && freeze_unsupported_reason(memory, uffd).empty()) {
        dirty_ms = ms_since(t);
        t = Clock::now();
        std::vector<uint32_t> sums;
        if (ram_verify_enabled()) sums = guest_page_checksums(memory);
        content.frozen = std::make_unique<FrozenRam>(freeze_ram(memory, uffd));
        freeze_ms = ms_since(t);
        if (!sums.empty()) watch_frozen_layer(content.frozen->memfds, content.frozen->bytes, std::move(sums), "snapshot layer");
    } else {
        content.pages = populated_pages(memory);
        dirty_ms = ms_since(t);
    }
    auto pending = std::make_unique<PendingSnapshot>(dir, memory, std::move(content), mode);
    pending->add_pause_figures(state_ms, dirty_ms, freeze_ms);
    return pending;
}

std::unique_ptr<PendingSnapshot> start_diff_snapshot(const Kvm& kvm, Machine& machine, const std::string& dir,
                                                     const std::string& parent_dir, DirtyTracker* tracker,
                                                     CopyMode mode, SnapshotExtras extras, UffdServer* uffd) {
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
    content.uffd = uffd;
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

void UffdErrorSink::error(const std::string& message) {
    std::lock_guard lock(mutex_);
    if (machine_) {
        machine_->request_stop(StopReason{StopReason::Kind::error, {}, message});
    } else if (!pending_) {
        pending_ = message;
    }
}

void UffdErrorSink::attach(Machine* machine) {
    std::lock_guard lock(mutex_);
    machine_ = machine;
    if (machine_ && pending_) machine_->request_stop(StopReason{StopReason::Kind::error, {}, *pending_});
}

LayerChain open_chain(const std::string& top_layer) {
    return LayerChain::open(std::filesystem::absolute(top_layer).lexically_normal().string());
}

std::unique_ptr<UffdServer> serve_chain(GuestMemory& memory, const std::string& top_layer,
                                        const std::shared_ptr<UffdErrorSink>& sink, UffdPrefetch prefetch) {
    return serve_chain(memory, open_chain(top_layer), sink, std::move(prefetch));
}

std::unique_ptr<UffdServer> serve_chain(GuestMemory& memory, LayerChain chain,
                                        const std::shared_ptr<UffdErrorSink>& sink, UffdPrefetch prefetch) {
    if (chain.ram_bytes() != memory.ram_bytes())
        throw SnapshotError(fmt::format("{}: {} bytes of RAM, vm.state says {}", chain.layers().front().path(),
                                        chain.ram_bytes(), memory.ram_bytes()));
    return std::make_unique<UffdServer>(
        memory, std::move(chain), [sink](const std::string& message) { sink->error(message); }, std::move(prefetch));
}

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

namespace {

/// What both restore_snapshot overloads read first: the checked state and the chain's top.
struct SnapshotSource {
    VmState state;
    std::string layer;  ///< dir/memory.layer
};

SnapshotSource open_source(const std::string& dir) {
    const Manifest manifest = read_manifest(dir);
    const std::string state_path = snapshot_part(dir, kStateFileName);
    const std::vector<uint8_t> bytes = read_checked_state(dir, manifest);
    SnapshotSource source{decode_vm_state(bytes, state_path), snapshot_part(dir, kLayerFileName)};
    if (!manifest.find(kLayerFileName))
        throw SnapshotError(fmt::format("{}/{}: memory.layer is not listed", dir, kManifestFileName));
    return source;
}

/// The snapshot directory whose manifest lists `layer` (its memory.layer, the
/// directory durable), or "" for a layer no manifest lists.
std::string manifest_dir_of(const LayerFile& layer) {
    const std::filesystem::path path(layer.path());
    const std::string dir = path.parent_path().string();
    return path.filename() == kLayerFileName && is_durable(dir) ? dir : std::string();
}

/// The file backend checks every layer of the chain whole before the VM runs, once
/// per layer (against its own directory's manifest, cached in parts.verified; a
/// layer there for no manifest is checked page by page on first touch only),
/// naming a damaged page. A layer found good is marked so (its pages are not
/// checked again one by one).
void check_chain_parts(LayerChain& chain) {
    for (LayerFile& layer : chain.layers()) {
        const std::string dir = manifest_dir_of(layer);
        if (dir.empty()) continue;
        try {
            check_parts_cached(dir, read_manifest(dir), {kLayerFileName});
        } catch (const SnapshotError&) {
            // Name the damaged page if it is page data (each page has its own CRC);
            // anything else (bitmap, tables: checked by open) keeps the part's error.
            for (uint64_t p = 0; p < layer.header().total_pages; ++p)
                if (layer.has(p)) (void)layer.page_verified(p);
            throw;
        }
        layer.mark_whole_verified();
    }
}

/// The uffd backend reads no layer whole (a restore touches a few MiB of it): a
/// layer whose whole-file check is cached for this very file (parts.verified:
/// same inode, size, mtime, and the manifest's CRC-32C; write_manifest records it
/// when the snapshot is taken) is marked good, so its pages are served without
/// their per-page CRC; any other layer (no manifest beside it, never checked
/// whole, or a file swapped in or rewritten since) keeps the per-page check on
/// first touch. Returns how many layers were marked.
size_t mark_cached_layers(LayerChain& chain) {
    size_t marked = 0;
    for (LayerFile& layer : chain.layers()) {
        const std::string dir = manifest_dir_of(layer);
        if (dir.empty()) continue;
        try {
            if (!part_verified_cached(dir, read_manifest(dir), kLayerFileName)) continue;
        } catch (const std::exception&) {
            continue;  // a manifest that does not read: per-page checks
        }
        layer.mark_whole_verified();
        ++marked;
    }
    return marked;
}

/// Serves `memory` (fresh memfds) from `source`'s chain; uffd: with the prefetch.
std::unique_ptr<UffdServer> serve_snapshot(GuestMemory& memory, const std::string& dir, const SnapshotSource& source,
                                           MemoryBackend backend, const std::shared_ptr<UffdErrorSink>& sink,
                                           size_t& prefetch_pages) {
    UffdPrefetch prefetch;
    if (backend == MemoryBackend::uffd) {
        // What the last uffd restore of this snapshot touched first comes in first.
        prefetch.record_path = snapshot_part(dir, kPrefetchFileName);
        std::string why;
        prefetch.pages = read_prefetch_list(prefetch.record_path, memory.ram_bytes() / kPageSize, why);
        if (!why.empty()) log_line(fmt::format("uffd restore: no prefetch: {}", why));
        prefetch_pages = prefetch.pages.size();
    }
    LayerChain chain = open_chain(source.layer);
    if (backend == MemoryBackend::file) check_chain_parts(chain);
    else if (const size_t marked = mark_cached_layers(chain))
        log_line(fmt::format("uffd restore: {} of {} layers found good whole before (parts.verified): their pages "
                             "are served without a per-page CRC check",
                             marked, chain.layers().size()));
    return serve_chain(memory, std::move(chain), sink, std::move(prefetch));
}

}  // namespace

RestoredMachine restore_snapshot(const Kvm& kvm, const std::string& dir, MemoryBackend backend) {
    RestoredMachine out;
    auto t = Clock::now();
    const SnapshotSource source = open_source(dir);
    out.devices = source.state.devices;
    out.state_ms = ms_since(t);

    t = Clock::now();
    GuestMemory memory;
    auto sink = std::make_shared<UffdErrorSink>();
    if (backend == MemoryBackend::mapped) {
        const std::string flat = ensure_flat_memory(dir);  // memory.layer itself for a full snapshot
        const Fd fd(::open(flat.c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd) throw_errno("open " + flat);
        if (LayerFile::open(flat).header().ram_bytes != source.state.machine.ram_bytes)
            throw SnapshotError(fmt::format("{}: RAM size is not vm.state's ({} bytes)", flat,
                                            source.state.machine.ram_bytes));
        memory = GuestMemory::map_file_private(fd.get(), source.state.machine.ram_bytes, kLayerDataOffset);
    } else {
        memory = GuestMemory::create(source.state.machine.ram_bytes);
        out.uffd = serve_snapshot(memory, dir, source, backend, sink, out.prefetch_pages);
    }
    out.memory_ms = ms_since(t);

    t = Clock::now();
    out.machine = make_restored_machine(kvm, std::move(memory), source.state);
    sink->attach(out.machine.get());  // an error the uffd server met meanwhile stops it now
    out.state_ms += ms_since(t);
    return out;
}

RestoredMachine restore_snapshot(std::unique_ptr<Machine> standby, const std::string& dir, MemoryBackend backend) {
    if (!standby) throw Error("restore_snapshot: no standby machine");
    if (backend == MemoryBackend::mapped) throw Error("restore_snapshot: the mapped backend does not restore into a standby");
    RestoredMachine out;
    auto t = Clock::now();
    const SnapshotSource source = open_source(dir);
    out.devices = source.state.devices;
    Machine& machine = *standby;
    if (!same_shape(source.state.machine, machine_shape(machine)))
        throw SnapshotError(fmt::format("{}: the snapshot's machine ({}) is not the standby's ({})", dir,
                                        describe_shape(source.state.machine), describe_shape(machine_shape(machine))));
    out.state_ms = ms_since(t);

    t = Clock::now();
    GuestMemory& memory = machine.memory();
    // Its memfds should hold no page (nothing ran); drop any so that every page is served.
    for (const MemoryRegion& r : memory.regions())
        if (::fallocate(r.memfd.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(r.size)) != 0)
            throw_errno("fallocate(PUNCH_HOLE) standby RAM");
    auto sink = std::make_shared<UffdErrorSink>();
    out.uffd = serve_snapshot(memory, dir, source, backend, sink, out.prefetch_pages);
    sink->attach(&machine);
    out.memory_ms = ms_since(t);

    t = Clock::now();
    restore_vm_state(machine, source.state);
    out.machine = std::move(standby);
    out.state_ms += ms_since(t);
    return out;
}

}  // namespace nanovm::snapshot
