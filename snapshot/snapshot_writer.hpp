// Writing a snapshot directory from what a pause produced (the encoded vm.state and
// the set of pages to save), in the order that makes it durable (issue 5
// "Durability"): any old manifest is removed first (and that is fsync'd before any
// part changes), then vm.state (atomic, fsync'd), then the memory layer (written
// as memory.layer.tmp, fsync'd, renamed), then the manifest, last and atomically.
// A crash at any step leaves a directory without a valid manifest, which restore
// refuses (or, before the removal reached the disk, the old complete snapshot).
// Only the unlink, opening the layer file and arming write-protect happen in the
// pause; every fsync is after it.
// The memory layer is copied either in the background under userfaultfd
// write-protect (snapshot/wp_copy.hpp: the caller resumes the VM as soon as the
// constructor returns) or, when that is not possible, right away in the caller's
// pause (the reason is logged). A layer with a parent in another snapshot directory
// (a snapshot of a restored VM: snapshot_dir.hpp) has that chain listed in its
// manifest (snapshot/manifest.hpp "chain"). Needs no /dev/kvm: snapshot_dir.cpp feeds it from
// a Machine, the unit tests from a GuestMemory and a hand-made vm.state.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "snapshot/frozen_ram.hpp"
#include "snapshot/manifest.hpp"
#include "snapshot/memory_layer.hpp"
#include "vmm/guest_memory.hpp"

namespace nanovm::snapshot {

class WriteProtectCopy;

inline constexpr const char* kStateFileName = "vm.state";
inline constexpr const char* kLayerFileName = "memory.layer";

/// The path of part `name` (kStateFileName...) of the snapshot directory `dir`.
inline std::string snapshot_part(const std::string& dir, const char* name) {
    return (std::filesystem::path(dir) / name).string();
}
/// Milliseconds (steady clock) since `t`, for SnapshotStats.
inline double ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

/// A manifest's chain lines (snapshot/manifest.hpp) for snapshot directory `dir`:
/// the layers of `chain` from index `first` on (1: below the directory's own
/// memory.layer; 0: all, for a fork base), each path relative to `dir`.
std::vector<ChainLayer> chain_lines(const std::string& dir, const LayerChain& chain, size_t first);

/// What a snapshot wrote and how long its parts took (ms, steady clock).
struct SnapshotStats {
    uint64_t present_pages = 0;  ///< pages in the memory layer's bitmap (known once durable)
    uint64_t data_pages = 0;     ///< non-zero pages written (known once durable)
    uint32_t layer_checksum = 0; ///< the layer's header CRC (known once durable)
    double state_ms = 0;         ///< capture + encoding of vm.state (in the pause)
    double state_write_ms = 0;   ///< writing vm.state (tmp, fsync, rename, fsync dir; after the pause)
    double dirty_ms = 0;         ///< KVM_GET_DIRTY_LOG + tracker, or the page scan
    double arm_ms = 0;           ///< registering + write-protecting guest RAM (background copy)
    double memory_ms = 0;        ///< writing memory.layer until fsync'd and renamed (after the pause when background)
    double extra_ms = 0;         ///< SnapshotContent::extra_parts (e.g. placing disk layers)
    double durable_ms = 0;       ///< from the start of the writer until the manifest is on disk
    bool background = false;     ///< the layer was copied after the pause (write-protect or frozen RAM)
    bool frozen = false;         ///< RAM was frozen in the pause and read after it (CopyMode::freeze)
    double freeze_ms = 0;        ///< the freeze in the pause (mremap + mmap per region), ms
    std::string fallback;        ///< why the copy stayed in the pause (empty if it did not have to)
    uint64_t wp_faults = 0;      ///< writes that hit a protected page during the background copy
};

/// How the memory layer is copied.
enum class CopyMode {
    /// Full snapshots of a plain memfd RAM: frozen in the pause, read after it
    /// (snapshot/frozen_ram.hpp; the VM then runs over a frozen layer). Otherwise,
    /// and for diff snapshots, as `background`.
    freeze,
    background,  ///< after the pause under write-protect when possible, else in the pause
    in_pause,    ///< always in the pause (the caller keeps the VM paused until the constructor returns)
};

/// What to save, as captured during the pause.
struct SnapshotContent {
    std::vector<uint8_t> state;       ///< encoded vm.state (snapshot/state_file.hpp format)
    PageBitmap pages;                 ///< linear pages of the layer (unused with `frozen`)
    std::optional<ParentRef> parent;  ///< diff layers: the parent layer
    bool drop_zero_pages = false;     ///< base layers: zero pages stay out of the bitmap
    /// Writes the caller's own parts (e.g. disk layers) into the directory, after the
    /// memory layer and before the manifest, on the writer's thread; returns their
    /// file names, each already fsync'd (when `sync`). Throwing fails the snapshot (no manifest).
    std::function<std::vector<std::string>(const std::string& dir)> extra_parts;
    /// false: nothing is fsync'd (a fork base, read right away on this host and
    /// useless after a host crash): the manifest still comes last and atomically,
    /// but "durable" then only means complete.
    bool sync = true;
    /// RAM frozen in the pause (CopyMode::freeze): the layer is every page its memfds
    /// hold, read by the writer, which then releases and seals it.
    std::unique_ptr<FrozenRam> frozen;
    /// RAM served by this UffdServer (a restored VM): the background copy borrows its
    /// userfaultfd (write-protect is registered there). Must outlive the snapshot.
    UffdServer* uffd = nullptr;
    /// A merged layer (no parent, drop_zero_pages): after the pages above, every page
    /// this chain holds and they left out (snapshot/memory_layer.hpp put_chain_rest).
    /// Must outlive the snapshot (the UffdServer's chain).
    const LayerChain* fill_from = nullptr;
};

/// A snapshot being written. The constructor returns once nothing more needs the
/// VM paused; wait_durable() once everything is on stable storage. The memory must
/// outlive this object (the destructor waits for the copy).
class PendingSnapshot {
public:
    /// Starts writing `content` of `memory` into directory `dir` (created if
    /// missing). Throws SysError/Error for failures before it returns (creating
    /// the directory or the layer file; with the copy in the pause, any failure);
    /// later failures come out of wait_durable().
    PendingSnapshot(const std::string& dir, GuestMemory& memory, SnapshotContent content, CopyMode mode);
    PendingSnapshot(const PendingSnapshot&) = delete;
    PendingSnapshot& operator=(const PendingSnapshot&) = delete;
    /// Waits for the writer; a failure is logged, not thrown.
    ~PendingSnapshot();

    /// Blocks until layer and manifest are fsync'd; returns the final stats. Throws
    /// the writer's error (the directory then has no manifest).
    const SnapshotStats& wait_durable();
    /// True once the manifest is on disk.
    bool durable() const noexcept { return durable_.load(std::memory_order_acquire); }
    /// The stats known so far (the pause-time ones right after the constructor).
    const SnapshotStats& stats() const noexcept { return stats_; }
    /// Pause-time figures that the caller measured (state capture, dirty log, the
    /// freeze) to keep with the rest, ms.
    void add_pause_figures(double state_ms, double dirty_ms, double freeze_ms = 0) noexcept {
        stats_.state_ms += state_ms;
        stats_.dirty_ms += dirty_ms;
        stats_.freeze_ms += freeze_ms;
    }
    const std::string& dir() const noexcept { return dir_; }

private:
    /// Everything after the pause, in durable order: directory fsync, vm.state,
    /// the layer (copied under write-protect, or here), its rename, the manifest.
    void write_rest();

    std::string dir_;
    GuestMemory& memory_;
    SnapshotContent content_;
    std::chrono::steady_clock::time_point start_;
    std::unique_ptr<LayerBuilder> builder_;
    std::unique_ptr<WriteProtectCopy> copy_;
    SnapshotStats stats_;
    std::atomic<bool> durable_{false};
    std::exception_ptr error_;
    std::thread writer_;
    bool waited_ = false;
};

}  // namespace nanovm::snapshot
