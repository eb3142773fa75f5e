// Templates (issue 19 "Templates"; docs/api.md "Templates"): an (image, shape) booted
// once, with optional setup lines run in it, and snapshotted until durable; or an
// existing snapshot taken as it is. A sandbox create restores a ready template
// instead of booting.
//
//   implicit  a create with an image and shape (no snapshot_id, no template) uses
//             the template "auto:<image>:<cpus>x<memory_mb>"; the first such create
//             starts its build and is answered 503 template_building (Retry-After),
//             as is every create until it is ready. The daemon never holds a create
//             open for a build (minutes in emulation): clients retry (the CLI does,
//             following Retry-After). A failed build answers 502 vm_error with its
//             reason; the next create after kRetryFailedAfter builds again.
//             Collected least recently used beyond --implicit-templates (0: no
//             implicit templates, creates boot cold).
//   named     POST /v1/templates: from an image and shape (+ setup lines) or a
//             snapshot_id; a create with "template": NAME restores it. Deleted by
//             the user: 409 template_in_use while sandboxes made from it exist,
//             unless forced.
//
// Files: a template's directory <state>/templates/<hex>/ is the store's (kind
// "template"); a built template's snapshot is its snapshot/ subdirectory, one from a
// snapshot references that snapshot's files (so deleting the snapshot keeps them).
// A sandbox restored from a template references its disk layer, so a deleted
// template's files stay until the last sandbox made from it is gone (store.hpp).
// The build VM is a VM directory of the store too (owner "template:<name>"),
// released once the snapshot is taken.
//
// Warm VMs (--warm N, default 1): after a create restores a template, another VM is
// restored from it in the background (up to N in all); once its agent has answered
// (its first-touch faults are done) it is paused: it costs no CPU, and of memory
// only the pages it touched (the uffd backend: its own memfd pages; the rest stays
// the template layer's page cache) and its VMM. The next create from that template
// takes it instead of restoring: resumed, then resynced (its own hostname, RNG
// reseeded, clock stepped), as a launched sandbox is. Their guest memory counts
// against --max-memory like the standbys', and both yield to sandboxes: one is made
// only within the headroom the sandboxes leave under the cap, and a create that
// would pass the cap first cancels warm restores under way, ends standbys, then
// stops warm VMs (yield_memory). A deleted template's warm VMs are stopped; so are
// all at exit.
//
// Thread-safe. Builds run on their own threads; the destructor waits for them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api/daemon/api_error.hpp"
#include "api/daemon/sandbox/vm_driver.hpp"
#include "api/daemon/store/image_pins.hpp"
#include "api/daemon/store/store.hpp"
#include "api/daemon/template/standby_pool.hpp"

namespace nanovm::daemon {

/// The template manager's limits and places.
struct TemplateOptions {
    std::string state_dir;
    uint32_t max_implicit = 4;  ///< implicit templates kept (LRU); 0: creates boot cold
    uint32_t max_standbys = 1;  ///< pre-made VMMs (one per most used shape); 0: none
    uint32_t max_warm = 1;      ///< templates' VMs restored ahead for the next creates (all templates); 0: none
    std::chrono::seconds setup_timeout{600};  ///< each setup line at most
};

/// POST /v1/templates.
struct NewTemplate {
    std::string name;
    std::string image;  ///< "" : "default" (unless snapshot_id)
    std::optional<uint32_t> cpus;
    std::optional<uint32_t> memory_mb;
    std::string snapshot_id;         ///< set: the template is this snapshot (its shape)
    std::vector<std::string> setup;  ///< shell lines run in order before the checkpoint
};

/// A ready template, for a create to restore.
struct TemplateUse {
    std::string name;
    std::string restore_dir;
    std::string image;
    std::string image_digest;  ///< the pinned image its snapshot runs over ("" for one built before pins)
    uint32_t cpus = 0;
    uint32_t memory_mb = 0;
    std::vector<std::string> standby_sockets;  ///< pre-made VMMs of its shape (may be empty)
};

/// 503 template_building, with the seconds a client should wait (Retry-After).
class TemplateBuilding : public ApiError {
public:
    TemplateBuilding(const std::string& message, int retry_after_s)
        : ApiError("template_building", message), retry_after_s_(retry_after_s) {}
    int retry_after_s() const noexcept { return retry_after_s_; }

private:
    int retry_after_s_;
};

/// True for a name POST /v1/templates takes: [a-z0-9][a-z0-9._-]{0,62}.
bool valid_template_name(std::string_view name);
/// The implicit template's name of an (image, shape): "auto:default:1x256".
std::string implicit_template_name(const std::string& image, uint32_t cpus, uint32_t memory_mb);

class TemplateManager {
public:
    /// How long a failed implicit template answers its failure before a create
    /// builds it again.
    static constexpr std::chrono::seconds kRetryFailedAfter{30};

    /// `pins`: the daemon's one ImagePins (<state>/images), shared with the SandboxManager.
    TemplateManager(TemplateOptions options, store::Store& store, store::ImagePins& pins);
    ~TemplateManager();  ///< waits for running builds (each ends at its next step)
    TemplateManager(const TemplateManager&) = delete;
    TemplateManager& operator=(const TemplateManager&) = delete;

    /// At start, before the sandbox manager's recovery (which stops VMMs no record
    /// names, such as a build cut short): a build cut short is failed (named) or
    /// forgotten (implicit: the next create builds it), its VM directory released.
    void recover();

    /// Records the template (state building, or ready at once from a durable
    /// snapshot) and starts its build. Throws ApiError: invalid_value (name, image),
    /// template_exists (409), snapshot_not_found, wrong_state (a failed snapshot).
    store::TemplateRecord create(const NewTemplate& request);
    store::TemplateRecord get(const std::string& name);
    std::vector<store::TemplateRecord> list();
    /// Deletes it (its files go once nothing references them). Throws
    /// template_not_found, wrong_state (building), template_in_use (409: sandboxes
    /// made from it exist) unless `force`.
    void remove(const std::string& name, bool force);

    /// A create with "template": NAME. Throws template_not_found, TemplateBuilding,
    /// wrong_state (failed).
    TemplateUse use(const std::string& name);
    /// A create with an image and shape: its implicit template, started if new;
    /// nullopt when implicit templates are off. Throws TemplateBuilding, vm_error
    /// (the build failed; its reason).
    std::optional<TemplateUse> use_implicit(const std::string& image, uint32_t cpus, uint32_t memory_mb);
    /// Records that sandbox `sandbox_id` was made from template `name`.
    void made_sandbox(const std::string& name, const std::string& sandbox_id);
    /// A warm VM of template `name` (paused after its agent answered), now the
    /// caller's to resume and resync (its directory is recorded with owner
    /// "warm:<name>": re-own it); nullopt if none is ready.
    std::optional<VmDriver::Started> take_warm(const std::string& name);
    /// A taken warm VM the caller could not use: stopped, its directory released.
    void release_warm(const VmDriver::Started& vm);

    /// Guest memory held by template work outside sandboxes (build VMs, warm VMs
    /// ready or being restored, pooled standbys), MiB: the sandbox manager counts it
    /// against --max-memory.
    int64_t held_memory_mb();
    /// The daemon's --max-memory, MiB, and the sandboxes' committed guest memory
    /// (`sandboxes_mb`, MiB; it is called with this manager's mutex held and must take
    /// no lock of the sandbox manager's): warm VMs and standbys are made only within
    /// the headroom the sandboxes leave. Unset: no limit. Set before serving.
    void set_memory_budget(int64_t cap_mb, std::function<int64_t()> sandboxes_mb);
    /// Memory for a sandbox over --max-memory: cancels warm VMs being restored, ends
    /// pooled standbys (the least used shape first), stops ready warm VMs (the oldest
    /// first), until `need_mb` MiB are freed or nothing is left. Returns the MiB freed
    /// (may be less than asked). Lock order: the sandbox manager's mutex, then this one's.
    int64_t yield_memory(int64_t need_mb);
    /// Standbys the pool keeps now.
    size_t standbys() { return pool_.size(); }

private:
    store::TemplateRecord must_get(const std::string& name);
    TemplateUse ready_use(store::TemplateRecord t);
    /// Starts the build of `t` (state building) on its own thread. Call with mutex_ held.
    void start_build(store::TemplateRecord t);
    void build(store::TemplateRecord t);
    /// Boots, runs the setup lines, snapshots; returns "" or why it failed.
    /// Pins the image of `t` (store/image_pins.hpp) and records its digest in `t` and
    /// the store before the build boots over it. Returns "" or the failure.
    std::string pin_image(store::TemplateRecord& t);
    std::string boot_and_snapshot(const store::TemplateRecord& t);
    /// Removes implicit templates beyond the cap, least recently used first (never
    /// one that is building or has sandboxes).
    void collect_implicit();
    void drop(const store::TemplateRecord& t);
    /// Restores one more warm VM of `t` in the background if under --warm and its
    /// memory fits the headroom left after `pending_mb` more (a sandbox about to be
    /// reserved). mutex_ held.
    void refill_warm(const store::TemplateRecord& t, int64_t pending_mb);
    /// held_memory_mb() with mutex_ held; without the pool's standbys when `standbys`
    /// is false (asked from inside the pool, under its lock).
    int64_t held_locked(bool standbys = true);
    /// --max-memory less the sandboxes' and held_locked(standbys), MiB (INT64_MAX / 2
    /// without a budget). mutex_ held.
    int64_t headroom_locked(bool standbys = true);
    void stop_warm(const VmDriver::Started& vm);
    /// Runs `fn` on a new thread of builds_ (joined when finished). mutex_ held.
    void start_thread(std::function<void()> fn);
    std::string new_dir() const;

    TemplateOptions options_;
    store::Store& store_;
    store::ImagePins& pins_;  ///< a build boots over the pinned image and records its digest
    VmDriver vms_;
    StandbyPool pool_;
    std::mutex mutex_;  ///< check-and-start of builds; building_memory_
    int64_t building_memory_ = 0;
    std::atomic<bool> stopping_{false};
    /// Build threads (under mutex_): a finished one is joined when the next starts.
    struct Build {
        std::thread thread;
        std::shared_ptr<std::atomic<bool>> done;
    };
    std::list<Build> builds_;
    std::map<std::string, std::vector<VmDriver::Started>> warm_;  ///< template name -> ready VMs (mutex_)
    std::map<std::string, int64_t> warm_memory_;                   ///< template name -> memory_mb of one
    /// A warm VM's restore under way (mutex_); one a sandbox needed the memory of is
    /// cancelled: stopped once its restore returns, no longer counted.
    struct Warming {
        int64_t memory_mb = 0;
        bool cancelled = false;
    };
    std::list<Warming> warming_;
    int64_t memory_cap_mb_ = 0;  ///< 0: no budget (set_memory_budget)
    std::function<int64_t()> sandboxes_mb_;
};

}  // namespace nanovm::daemon
