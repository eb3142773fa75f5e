// A full snapshot's memory taken by freezing guest RAM (CopyMode::freeze; issue 5's
// "snapshot <= 10 ms"): in the pause the VM's RAM memfds stop being written, exactly
// as a fork freezes its parent (snapshot/fork_image.hpp): the MAP_SHARED mapping is
// moved aside with mremap and a MAP_PRIVATE mapping of the same memfds takes its
// place at the same HVA. KVM's memslots stay valid and its MMU notifier drops the old
// translations. The pause then costs one mremap and one mmap per region, whatever
// the VM has written, where write-protecting its pages costs ~0.25 us per present
// 4 KiB page and finding them (SEEK_DATA) as much again.
// After the resume the snapshot's writer reads the memfds (pread: they are the RAM
// at the pause, whatever the VM writes now lands in its own copy-on-write pages),
// unmaps the old mapping and seals the memfds (F_SEAL_WRITE...): the VM then runs
// over a frozen layer like a fork parent (GuestMemory::Backing::private_memfd),
// and its next snapshot or fork works as for one.
// A restored VM's RAM (memfds filled on first touch, Backing::lazy_memfd) is frozen
// the same way, with its UffdServer: the new private mapping is registered with it,
// since the memfds' holes are its layer chain's pages (snapshot/uffd_backend.hpp);
// the layer written is then a diff over that chain (the pages the VM holds).
// The cost is memory: a page the VM writes after the snapshot is held twice (the
// frozen one and its copy) for as long as the VM runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "snapshot/memory_layer.hpp"
#include "snapshot/uffd_backend.hpp"
#include "vmm/fd.hpp"
#include "vmm/guest_memory.hpp"

namespace nanovm::snapshot {

/// Guest RAM as it was at a snapshot's pause. Movable; dropped unwritten (a snapshot
/// that failed), it still unmaps `retired` and seals the memfds, which the VM maps on.
struct FrozenRam {
    FrozenRam() = default;
    FrozenRam(FrozenRam&&) noexcept = default;
    FrozenRam& operator=(FrozenRam&&) noexcept = default;
    FrozenRam(const FrozenRam&) = delete;
    FrozenRam& operator=(const FrozenRam&) = delete;
    ~FrozenRam();

    std::vector<Fd> memfds;       ///< one per region, GPA order; nothing writes them after freeze_ram
    std::vector<uint64_t> bytes;  ///< each region's size in bytes
    /// The VM's old MAP_SHARED mappings of `memfds`, moved aside in the pause;
    /// write_frozen_ram unmaps them (~30 ms per 256 MiB present: not in the pause).
    GuestMemory::RetiredMappings retired;
};

/// Empty if `memory` can be frozen, else why not: a plain memfd per region
/// (Backing::memfd, a booted VM) can, and a restored VM's (Backing::lazy_memfd) with
/// its `server`; a VM over a frozen layer already is copied under write-protect
/// instead, one mapping a file privately (Backing::private_file) in the pause.
std::string freeze_unsupported_reason(const GuestMemory& memory, const UffdServer* server = nullptr);

/// Freezes `memory` (Backing::memfd, then private_memfd; lazy_memfd with `server`,
/// then lazy_private_memfd: UffdServer::remap) as described above. Call while
/// nothing touches guest RAM (VM paused, devices quiesced). Throws Error (another
/// backing), SysError (dup, mremap, mmap, UFFDIO_REGISTER); see
/// GuestMemory::remap_private for a failure half-way.
FrozenRam freeze_ram(GuestMemory& memory, UffdServer* server = nullptr);

/// Puts every page of `ram` that its memfds hold into `builder` (linear pages, GPA
/// order; zero pages stay holes), then unmaps `ram.retired` and seals the memfds.
/// Returns the pages read. Throws SysError (lseek, pread, pwrite, F_ADD_SEALS).
uint64_t write_frozen_ram(FrozenRam& ram, LayerBuilder& builder);

/// Seals each memfd of a frozen layer (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW |
/// F_SEAL_SEAL; memfd_create(2)): from then on nobody can change it. Needs no
/// writable shared mapping left; a transient page pin (EBUSY) is waited out for up
/// to ~1 s. Sealed ones are skipped. Throws SysError(F_ADD_SEALS).
void seal_layer(const std::vector<Fd>& memfds);

}  // namespace nanovm::snapshot
