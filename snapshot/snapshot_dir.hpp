// A snapshot directory: `manifest` (snapshot/manifest.hpp, written last),
// `vm.state` (snapshot/vm_state.hpp) and `memory.layer` (snapshot/memory_layer.hpp),
// plus caches that are not parts: `memory.flat` once the "file" restore backend has
// flattened a diff snapshot's layer chain (a full snapshot's layer is mapped as it
// is), `parts.verified`, `prefetch.pages`. Device states and disk layers come later (issue 5).
// Taking one needs a paused Machine; the memory copy may run on after the VM
// resumes (start_*_snapshot). Restoring one makes a fresh Machine in this process
// that has not run yet; a directory without a valid manifest is refused.
#pragma once

#include <functional>
#include <mutex>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "snapshot/manifest.hpp"
#include "snapshot/memory_layer.hpp"
#include "snapshot/snapshot_writer.hpp"
#include "snapshot/uffd_backend.hpp"
#include "vmm/dirty_tracker.hpp"
#include "vmm/kvm.hpp"
#include "vmm/machine.hpp"

namespace nanovm::snapshot {

inline constexpr const char* kFlatFileName = "memory.flat";

/// A snapshot of a restored VM is a diff over the layer chain its RAM is served
/// from (the snapshot it was restored from, and that one's chain): while that chain
/// has fewer than this many layers. Else it writes a merged layer (its own pages
/// and every page of the chain: a full layer, self-contained) into the new
/// snapshot; the old directories are never rewritten.
inline constexpr size_t kMaxLayerChain = 4;

/// What a snapshot of a machine with devices adds to the memory and KVM state.
struct SnapshotExtras {
    /// vm.state's "devices" section (JSON made by the device owner; empty: none).
    std::string devices;
    /// See SnapshotContent::extra_parts (null: none).
    std::function<std::vector<std::string>(const std::string& dir)> extra_parts;
    /// See SnapshotContent::sync.
    bool sync = true;
};

/// The pages written since the last call (or since logging began): KVM_GET_DIRTY_LOG
/// of every memslot (which also clears it; KVM API doc 4.8) OR-ed with `tracker`
/// (taken and cleared; may be null), as one bitmap over GuestMemory's linear pages.
/// Needs MachineConfig::log_dirty_pages. Throws SysError("KVM_GET_DIRTY_LOG").
PageBitmap collect_dirty_pages(Machine& machine, DirtyTracker* tracker);

/// Starts a full snapshot of a paused `machine` into directory `dir` (created if
/// missing): vm.state now, and a base memory layer of the non-zero pages, read after
/// the pause from RAM frozen in it (CopyMode::freeze, when RAM is a plain memfd:
/// snapshot/frozen_ram.hpp; the machine then runs over that frozen layer), else
/// copied in the background under userfaultfd write-protect (CopyMode::background,
/// when the memory allows it), else before returning. The caller may resume the machine as soon
/// as this returns; PendingSnapshot::wait_durable() says when it is on disk. With
/// log_dirty_pages it first clears the dirty log and `tracker`, so a later diff
/// snapshot holds exactly what changed after this one (writes made during the
/// background copy included). The Machine must outlive the PendingSnapshot.
/// A restored VM (RAM served by `uffd`, Backing::lazy_*; required then) is frozen
/// or write-protected the same way, with that server; its layer holds the pages
/// the VM holds and names the top of the server's chain as its parent (in another
/// snapshot directory; the manifest lists the chain), or, once that chain has
/// kMaxLayerChain layers, is merged with the chain into a full layer.
std::unique_ptr<PendingSnapshot> start_full_snapshot(const Kvm& kvm, Machine& machine, const std::string& dir,
                                                     DirtyTracker* tracker, CopyMode mode = CopyMode::freeze,
                                                     SnapshotExtras extras = {}, UffdServer* uffd = nullptr);

/// Starts a diff snapshot of a paused `machine` into `dir`: vm.state and a memory
/// layer of the pages collect_dirty_pages reports, whose parent is `parent_dir`'s
/// layer (referred to by relative path and checksum). The parent must be durable
/// and be the last snapshot taken of this machine, or the one it was restored from.
/// Throws SnapshotError if the parent has no valid manifest.
/// `uffd`: the server of a restored VM's RAM (its write-protect is borrowed).
std::unique_ptr<PendingSnapshot> start_diff_snapshot(const Kvm& kvm, Machine& machine, const std::string& dir,
                                                     const std::string& parent_dir, DirtyTracker* tracker,
                                                     CopyMode mode = CopyMode::background,
                                                     SnapshotExtras extras = {}, UffdServer* uffd = nullptr);

/// start_full_snapshot with the copy inside the pause, waited until durable.
SnapshotStats write_full_snapshot(const Kvm& kvm, Machine& machine, const std::string& dir, DirtyTracker* tracker);

/// start_diff_snapshot with the copy inside the pause, waited until durable.
SnapshotStats write_diff_snapshot(const Kvm& kvm, Machine& machine, const std::string& dir,
                                  const std::string& parent_dir, DirtyTracker* tracker);

/// How a restore fills guest RAM. Both make memfds served on first touch from the
/// snapshot's layer chain by a UffdServer (snapshot/uffd_backend.hpp), which a
/// snapshot or fork of the restored VM freezes in its pause like a booted VM's RAM.
/// (The file backend mapped memory.layer MAP_PRIVATE before issue 18: Linux 6.1
/// refuses userfaultfd on such mappings, so that VM's snapshots copied its RAM in
/// the pause.)
enum class MemoryBackend {
    file,  ///< on first touch only
    uffd,  ///< and first the pages the last uffd restore touched first (prefetch.pages)
    /// The file backend before issue 18, for the density comparison (tools/bench) and
    /// callers that never snapshot or fork the VM: memory.layer (or the flattened
    /// memory.flat of a diff chain) mapped MAP_PRIVATE, so the pages a VM only reads
    /// stay the page cache's, shared by every VM restored from it. Such RAM
    /// (Backing::private_file) can be neither frozen nor write-protected on Linux
    /// 6.1: its snapshots and forks copy it inside the pause. Not into a standby.
    mapped,
};

/// A Machine restored from a snapshot, with what keeps its memory served. Members
/// are destroyed machine first, then the uffd server.
struct RestoredMachine {
    RestoredMachine() = default;
    RestoredMachine(RestoredMachine&&) = default;
    RestoredMachine& operator=(RestoredMachine&&) = default;
    /// The Machine goes first (members in reverse order) while the uffd server may
    /// still run: its errors stop reaching the Machine before that.
    ~RestoredMachine() {
        if (uffd) uffd->detach_error_handler();
    }

    std::unique_ptr<UffdServer> uffd;  ///< uffd backend only
    std::unique_ptr<Machine> machine;
    double memory_ms = 0;  ///< opening the chain (+ flattening, + mapping), ms
    double state_ms = 0;   ///< reading vm.state + creating the Machine + loading its state, ms
    std::string devices;   ///< vm.state's "devices" section (empty: none), for the device owner
    size_t prefetch_pages = 0;  ///< uffd: pages of the last restore's prefetch.pages being copied in
    bool chain_served_ahead = false;  ///< a fork into a standby that served its chain ahead (StandbyChain)
};

/// The bytes of `dir`'s vm.state after checking `manifest` (read_manifest(dir)):
/// every listed part's size, vm.state listed and its CRC-32C. Throws SnapshotError
/// naming the missing or corrupt part, SysError.
std::vector<uint8_t> read_checked_state(const std::string& dir, const Manifest& manifest);
/// The same, reading the manifest first ("incomplete snapshot (no manifest)" if none).
std::vector<uint8_t> read_checked_state(const std::string& dir);

/// Restores `dir` into a new Machine (shape from vm.state; memslots with
/// log_dirty_pages so that it can be snapshotted again, as a diff over `dir` or in
/// full). Checks first: the manifest ("incomplete snapshot (no manifest): DIR"
/// otherwise), every part's size, vm.state's CRC-32C against the manifest, the
/// layer chain's own checksums (header, bitmap, CRC table; each page on first touch).
/// Throws SnapshotError naming the corrupt or inconsistent part, SysError.
RestoredMachine restore_snapshot(const Kvm& kvm, const std::string& dir, MemoryBackend backend);

/// restore_snapshot into `standby` (make_fork_standby: a Machine of the snapshot's
/// shape made ahead, never run): its RAM (fresh memfds, memslots already in KVM)
/// is served from the snapshot's chain, then the vCPU and VM state set. Throws
/// SnapshotError when the snapshot's shape (vCPUs, irqchip, RAM bytes) is not the
/// standby's, else as restore_snapshot; the standby is consumed either way.
RestoredMachine restore_snapshot(std::unique_ptr<Machine> standby, const std::string& dir, MemoryBackend backend);

/// Passes the errors of a UffdServer made before its Machine on to that Machine once
/// attached (Machine::request_stop with the message): an error met before (a corrupt
/// page the prefetch read) stops it as soon as it is attached, before a vCPU runs.
class UffdErrorSink {
public:
    void error(const std::string& message);
    void attach(Machine* machine);

private:
    std::mutex mutex_;
    Machine* machine_ = nullptr;
    std::optional<std::string> pending_;
};

/// A UffdServer over `memory` serving the chain whose top layer is `top_layer`
/// (opened as an absolute path), its errors going to `sink`. Throws SnapshotError
/// (chain, RAM size), SysError, Error as UffdServer.
std::unique_ptr<UffdServer> serve_chain(GuestMemory& memory, const std::string& top_layer,
                                        const std::shared_ptr<UffdErrorSink>& sink, UffdPrefetch prefetch = {});
/// The same with the chain opened already.
std::unique_ptr<UffdServer> serve_chain(GuestMemory& memory, LayerChain chain,
                                        const std::shared_ptr<UffdErrorSink>& sink, UffdPrefetch prefetch = {});
/// LayerChain::open of `top_layer` as an absolute path (a snapshot of the VM names
/// it relative to its own directory, wherever the process runs).
LayerChain open_chain(const std::string& top_layer);

/// The file to map for the "file" backend (RAM at kLayerDataOffset, page p at
/// + p * 4 KiB): memory.layer itself when it is a base layer (a full snapshot),
/// after checking it whole against the manifest once (check_parts_cached); else
/// dir/memory.flat, rebuilt from the chain unless its header names the current top
/// layer's checksum (every page's CRC is checked on the way). Returns its path.
/// Throws SnapshotError naming a corrupt part or page.
std::string ensure_flat_memory(const std::string& dir);

}  // namespace nanovm::snapshot
