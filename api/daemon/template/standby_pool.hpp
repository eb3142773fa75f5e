// The daemon's pool of pre-made VMMs for template restores (issue 19 "Templates": a
// create does not wait for a process start). One StandbyKeeper (api/vm/
// standby_keeper.hpp, the `vm restore --into-standby` mechanism) per kept shape,
// each keeping one `nanovm _standby` process of that shape (KVM VM, irqchip, PIT,
// memslots over RAM that holds no page, vCPUs) in <state>/standbys/<cpus>x<mib>/.
// A create restoring a template offers the restore to that shape's standby first
// (SandboxSpec::standby_sockets); the claimed standby becomes the sandbox's VMM and
// the keeper makes the next one. Shapes are kept by how many creates used them
// (the most used first), at most `max_standbys` shapes; a shape pushed out has its
// standby ended. Standbys are the daemon's children and end when it exits
// (they watch its pidfd); a claimed one lives on as its sandbox's VMM.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace nanovm::vm {
class StandbyKeeper;
}

namespace nanovm::daemon {

class StandbyPool {
public:
    /// Standbys live in `dir` (made and emptied here); `max_standbys` 0 keeps none.
    StandbyPool(std::string dir, uint32_t max_standbys);
    ~StandbyPool();  ///< ends the unclaimed standbys
    StandbyPool(const StandbyPool&) = delete;
    StandbyPool& operator=(const StandbyPool&) = delete;

    /// A create of shape `cpus` x `memory_mb` restored a template: counts it, and
    /// keeps a standby for the `max_standbys` most used shapes; a shape newly kept
    /// gets its standby only within `headroom_mb()` less the kept standbys' memory
    /// (`headroom_mb`: MiB of --max-memory left after the sandboxes and the held
    /// memory other than this pool's; asked only when a shape is newly kept, under
    /// this pool's lock, so it must not take it; a standby counts its shape's memory).
    void note_use(uint32_t cpus, uint32_t memory_mb, const std::function<int64_t()>& headroom_mb);
    /// Ends standbys, the least used shape first, until `need_mb` MiB of their
    /// shapes' memory are freed or none is left (a sandbox over --max-memory needs
    /// it). Returns the MiB freed. The next note_use makes them again if they fit.
    int64_t yield(int64_t need_mb);
    /// The sockets of the standbys of this shape that exist now (empty: none).
    std::vector<std::string> sockets(uint32_t cpus, uint32_t memory_mb);
    /// Guest memory the kept standbys are made for, MiB (counted against the
    /// daemon's --max-memory with the sandboxes').
    int64_t memory_mb();
    /// How many standbys the pool keeps now.
    size_t size();

private:
    using Shape = std::pair<uint32_t, uint32_t>;
    std::string shape_dir(const Shape& shape) const;

    std::string dir_;
    uint32_t max_;
    std::mutex mutex_;
    std::map<Shape, int64_t> uses_;
    std::map<Shape, std::unique_ptr<vm::StandbyKeeper>> keepers_;
};

}  // namespace nanovm::daemon
