// A fork's frozen layer (issue 5 "Fork(n <= 4)"): the paused parent's guest RAM
// becomes a set of memfds, sealed right after (F_SEAL_WRITE: nobody can change them)
// that the parent and every child map MAP_PRIVATE. Each VM then writes into its own
// private copy-on-write pages over the shared layer; nothing is written to disk and
// nothing is copied when the parent's RAM is a plain memfd (the usual case: a booted
// VM). Children receive the memfds by fd (inherited across exec, or SCM_RIGHTS) and
// the vm.state bytes, and come up with restore_fork.
//
// The parent's mapping is replaced in place (same HVA; the old one is moved aside
// with mremap in the pause and unmapped after it, finish_fork): KVM's memslots
// stay, its MMU notifier drops the old translations (KVM API doc 4.35
// KVM_SET_USER_MEMORY_REGION: "changes in the backing of the memory region are
// automatically reflected into the guest"). Its dirty log and DirtyTracker go on
// untouched, so a diff snapshot over its last snapshot stays exact.
//
// A VM already over a frozen layer (a fork child, or a parent forked before) keeps
// it: the new children map the same layer and apply a delta of the pages this VM
// holds privately (snapshot/fork_delta.hpp), copied in the pause: O(pages it wrote
// since it mapped the layer).
// A restored VM (its memfds filled on first touch from a snapshot's layer chain by a
// UffdServer, snapshot/uffd_backend.hpp) is frozen in place the same way, nothing
// copied: its memfds become the layer, whose holes are that chain's pages; the
// server goes on serving them to the parent's new private mapping, and each child
// serves them to its own from the same chain (`base_layer`, its top). A VM whose RAM
// is a MAP_PRIVATE file mapping (GuestMemory::map_file_private; no restore makes one
// now) gets fresh memfds holding a copy of its populated pages: O(pages in use).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "snapshot/snapshot_dir.hpp"
#include "snapshot/vm_state.hpp"
#include "vmm/fd.hpp"
#include "vmm/kvm.hpp"
#include "vmm/machine.hpp"

namespace nanovm::snapshot {

/// What a child needs to become a copy of the parent at the freeze.
struct ForkImage {
    std::vector<uint8_t> state;  ///< encoded vm.state (snapshot/state_file.hpp format)
    std::vector<Fd> memfds;      ///< the frozen layer: one memfd per RAM region, GPA order (sealed by finish_fork)
    /// The parent's old shared mappings of `memfds`, moved aside by the freeze: they
    /// are unmapped (and the memfds sealed) by finish_fork, after the parent resumed.
    GuestMemory::RetiredMappings retired;
    /// A parent already over a frozen layer (a fork child, or forked before): its
    /// own pages, to apply over `memfds` (snapshot/fork_delta.hpp); invalid otherwise.
    Fd delta;
    uint64_t delta_pages = 0;    ///< pages in `delta`
    /// The chain whose pages fill the holes of `memfds` (a restored VM's fork), top
    /// first, absolute paths; empty: a hole is a zero page. Children serve it
    /// (restore_fork's `base_layer`: its first path).
    std::vector<ChainLayer> base_chain;
    uint64_t copied_pages = 0;   ///< pages copied into fresh memfds (a file-backed or uffd-backed parent)
    double state_ms = 0;         ///< capture + encoding of vm.state, ms
    double freeze_ms = 0;        ///< copy (if any) + remapping + sealing, ms
    /// crc32c per page of the RAM at the freeze, only with NANOVM_DEBUG_RAM_VERIFY=1
    /// (snapshot/ram_verify.hpp); empty otherwise.
    std::vector<uint32_t> page_sums;
};

/// Freezes the RAM of a paused `machine` (devices quiesced: nothing may touch guest
/// RAM meanwhile) as described above and captures its state, with `devices` as
/// vm.state's devices section. The machine may resume as soon as this returns.
/// `uffd`: the server of a restored VM's RAM (Backing::lazy_*; required then): it
/// keeps serving the parent. Throws Error (lazy RAM without its server), SysError
/// naming the step (memfd_create, pwrite, mmap, UFFDIO_REGISTER); a failure before
/// the remap leaves the parent as it was.
ForkImage freeze_for_fork(const Kvm& kvm, Machine& machine, std::string devices = {}, UffdServer* uffd = nullptr);

/// After the parent resumed (children may already be starting): unmaps the
/// parent's old shared mappings (~30 ms for 256 MiB present, so not in the pause)
/// and seals the memfds (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL:
/// from then on nobody can change the layer; not for a delta image, whose layer was
/// frozen, and is sealed, by the VM that made it). Idempotent. Throws SysError
/// (F_ADD_SEALS).
void finish_fork(ForkImage& image);

/// Makes a new Machine (not run yet) from a ForkImage: `state` as vm.state bytes
/// (validated like a vm.state file; `what` names it in errors), RAM a MAP_PRIVATE
/// mapping of each of `memfds` (one per region, each at least the region's size).
/// memory_ms / state_ms are filled. With `base_layer` (ForkImage::base_chain's top) a
/// UffdServer (`uffd`) serves the memfds' holes from that chain, registered before
/// anything touches the mapping. With `delta_fd` >= 0 the ForkImage's delta is
/// applied over that mapping. Throws SnapshotError for a bad state, chain or RAM
/// size mismatch, SysError (mmap, userfaultfd, KVM ioctls).
RestoredMachine restore_fork(const Kvm& kvm, std::span<const uint8_t> state, std::span<const int> memfds,
                             int delta_fd = -1, std::string_view what = "fork state", const std::string& base_layer = {});

/// A fork child's Machine made ahead of the fork (a standby): the VM, TSS and
/// identity-map addresses, irqchip and PIT (`shape.irqchip`), the memslots over
/// `shape.ram_bytes` of RAM that holds no page yet (fresh memfds, MAP_SHARED) with
/// dirty logging on, and `shape.vcpus` vCPUs: every KVM object a restore makes
/// before it sets any state. On this 2-core PVM machine that is ~6-8 ms, the 1 GiB
/// memslot alone 4-6 ms (/work/s12/kvmtime.c), off the fork's path when made before
/// the request; restore_fork(standby, ...) then maps the frozen layer over the same
/// HVA. Throws Error (shape out of range) or SysError (memfd_create, mmap, KVM ioctls).
std::unique_ptr<Machine> make_fork_standby(const Kvm& kvm, const MachineInfo& shape);

/// A fork standby's chain served ahead: for a standby made for a parent whose frozen
/// layer's holes are a chain's pages (a restored VM, or a fork child of one:
/// ForkImage::base_chain), the chain opened and a UffdServer registered over the
/// standby's still-empty RAM (Backing::lazy_memfd), so that the claim only moves that
/// registration onto the frozen layer's mapping (UffdServer::remap) instead of opening
/// the chain and making a userfaultfd then (~0.3-0.4 ms of a child's restore call on
/// this 2-core PVM machine, ~3.7 ms with 4 children at once under load). Empty: none.
struct StandbyChain {
    std::shared_ptr<UffdErrorSink> sink;  ///< the server's errors, attached to the Machine at the claim
    std::unique_ptr<UffdServer> server;
};

/// Serves `base_layer`'s chain (ForkImage::base_chain's top, as restore_fork takes
/// it) over `standby`'s RAM (from make_fork_standby, never run). Such a standby takes
/// fork claims only (restore_snapshot into it refuses: its RAM is lazy_memfd) until
/// drop_standby_chain. Throws SnapshotError (chain, RAM size), SysError, Error as
/// serve_chain.
StandbyChain serve_fork_standby(Machine& standby, const std::string& base_layer);

/// Ends `chain` (its server's thread and userfaultfd, and with them the registration
/// over `standby`'s RAM), so the RAM is plain fresh memfds again (Backing::memfd), as
/// restore_snapshot(standby, ...) and a fork without that chain want. No-op for an
/// empty chain. Never throws.
void drop_standby_chain(Machine& standby, StandbyChain& chain) noexcept;

/// A fork child's Machine made ahead (make_fork_standby) and, for a parent whose
/// frozen layer has holes (a restored VM or a fork child of one), that parent's
/// chain served over it ahead (serve_fork_standby; empty otherwise). What a standby
/// VMM (api/vm/fork_standby.hpp) hands to the VM it becomes.
struct ForkStandby {
    std::unique_ptr<Machine> machine;
    StandbyChain chain;
    explicit operator bool() const noexcept { return machine != nullptr; }
};

/// restore_fork into `standby` (from make_fork_standby, never run): its RAM mapping
/// is replaced in place by the frozen layer (GuestMemory::remap_private; KVM's MMU
/// notifier keeps the memslots right), the delta applied, then the vCPU and VM state
/// set. Throws SnapshotError when the state's shape (vCPUs, irqchip, RAM bytes) is
/// not the standby's, else as restore_fork; the standby is consumed either way.
RestoredMachine restore_fork(std::unique_ptr<Machine> standby, std::span<const uint8_t> state,
                             std::span<const int> memfds, int delta_fd = -1, std::string_view what = "fork state",
                             const std::string& base_layer = {});

/// The same with `chain` from serve_fork_standby(standby, ...): used when it serves
/// `base_layer` (the same absolute path), else dropped and the chain served as above.
RestoredMachine restore_fork(std::unique_ptr<Machine> standby, StandbyChain chain, std::span<const uint8_t> state,
                             std::span<const int> memfds, int delta_fd = -1, std::string_view what = "fork state",
                             const std::string& base_layer = {});

/// restore_fork with the state from directory `dir`'s vm.state (a fork base: a
/// manifest listing vm.state, and disk layers, but no memory layer; its chain line,
/// if any, names the base layer: fork_base_chain), checked against the manifest
/// first. Throws SnapshotError naming the part, as restore_fork.
RestoredMachine restore_fork(const Kvm& kvm, const std::string& dir, std::span<const int> memfds, int delta_fd = -1);

/// The same into a standby (see above); its chain, if any, is used when it serves
/// the fork base's base layer, else dropped.
RestoredMachine restore_fork(ForkStandby standby, const std::string& dir, std::span<const int> memfds,
                             int delta_fd = -1);

/// The manifest chain lines of fork base `dir` for `image` (empty unless it has a
/// base layer): that layer and those below it, relative to `dir`, for write_manifest.
std::vector<ChainLayer> fork_base_chain(const std::string& dir, const ForkImage& image);

}  // namespace nanovm::snapshot
