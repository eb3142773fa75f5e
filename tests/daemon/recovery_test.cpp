// What the sandbox manager settles at start (SandboxManager::recover_and_watch) after
// a daemon was killed in the middle of a fork or a create, without a guest: a fork
// base the store recorded but never released, one it never recorded at all (the fork
// was cut while its children started), one a kept sandbox's directory still
// references; a sandbox recorded running whose VM directory the store never took; a
// create cut after it re-owned a warm VM's directory, before its running record. The
// test-host check (tests/daemon/testhost_load_checks.py) kills a real daemon during
// a fork; this pins the rule down on real files.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sys/file.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "api/daemon/sandbox/manager.hpp"
#include "api/daemon/store/image_pins.hpp"
#include "api/daemon/store/store.hpp"
#include "tests/support/temp_dir.hpp"
#include "vmm/fd.hpp"

namespace {

using namespace nanovm;
using namespace nanovm::daemon;
namespace fs = std::filesystem;

// A fork base as vm::new_fork_base makes it: <state>/forks/<name>/ with users.lock
// and snapshot/ holding one file. Returns its path.
std::string make_fork_base(const std::string& state, const std::string& name) {
    const std::string base = state + "/forks/" + name;
    fs::create_directories(base + "/snapshot");
    std::ofstream(base + "/users.lock");
    std::ofstream(base + "/snapshot/disk0.layer") << "frozen";
    return base;
}

}  // namespace

TEST_CASE("recovery: fork bases of a fork cut short are released or removed; a referenced one stays",
          "[daemon][recovery]") {
    test::TempDir tmp("recovery");
    const std::string state = tmp.path();
    const std::string recorded = make_fork_base(state, "aaaaaaaaaaaa-000000000001");
    const std::string unrecorded = make_fork_base(state, "aaaaaaaaaaaa-000000000002");
    const std::string referenced = make_fork_base(state, "aaaaaaaaaaaa-000000000003");
    const std::string held = make_fork_base(state, "aaaaaaaaaaaa-000000000004");
    // A VMM that still uses the unrecorded base `held` (it holds users.lock shared).
    Fd user(::open((held + "/users.lock").c_str(), O_RDONLY | O_CLOEXEC));
    REQUIRE(user);
    REQUIRE(::flock(user.get(), LOCK_SH) == 0);
    {
        store::Store store(state + "/store.db");
        store.add_dir(recorded, "fork", "");  // cut before the fork released it
        store.add_dir(referenced, "fork", "");
        // A kept snapshot (of a fork child) names a file of `referenced`.
        const std::string snap = state + "/snapshots/11111111-2222-4333-8444-555555555555";
        fs::create_directories(snap);
        store.add_dir(snap, "snapshot", "11111111-2222-4333-8444-555555555555");
        store.add_refs(snap, {referenced + "/snapshot/disk0.layer"});

        ManagerOptions options;
        options.state_dir = state;
        store::ImagePins pins(store, state + "/images");
    SandboxManager manager(options, store, pins);
        manager.recover_and_watch();

        CHECK_FALSE(fs::exists(recorded));
        CHECK_FALSE(fs::exists(unrecorded));
        CHECK(fs::exists(referenced + "/snapshot/disk0.layer"));
        CHECK(fs::exists(held));
        bool referenced_released = false, recorded_known = false, held_recorded = false;
        for (const store::DirRecord& d : store.dirs()) {
            if (d.path == referenced) referenced_released = d.released && !d.removing;
            if (d.path == recorded) recorded_known = true;
            // Held and named by no VM directory: the store's now, kept (not released).
            if (d.path == held) held_recorded = d.kind == "fork" && !d.released && !d.removing;
        }
        CHECK(held_recorded);
        CHECK(referenced_released);  // released: it goes with the snapshot that keeps it
        CHECK_FALSE(recorded_known);
    }
}

TEST_CASE("recovery: a sandbox recorded running whose VM directory the store never took gets it",
          "[daemon][recovery]") {
    // A create cut between set_state(running) and track_dir: without the directory
    // in the store, deleting the sandbox would leave it on disk for good.
    test::TempDir tmp("recovery");
    const std::string state = tmp.path();
    const std::string vm = "0123456789ab";
    const std::string dir = state + "/vms/" + vm;
    fs::create_directories(dir);
    std::ofstream(dir + "/vmm.log") << "nanovm: VM 0123456789ab ended: killed\n";
    store::Store store(state + "/store.db");
    store::SandboxRecord r;
    r.id = "11111111-2222-4333-8444-555555555555";
    r.vm_id = vm;
    r.state = "running";
    r.cpus = 1;
    r.memory_mb = 128;
    r.created_ms = r.updated_ms = 1;
    store.put_sandbox(r);
    ManagerOptions options;
    options.state_dir = state;
    store::ImagePins pins(store, state + "/images");
    SandboxManager manager(options, store, pins);
    manager.recover_and_watch();
    bool known = false;
    for (const store::DirRecord& d : store.dirs())
        if (d.path == dir) known = d.kind == "vm" && d.owner == r.id && !d.released;
    CHECK(known);
    CHECK(store.sandbox(r.id)->state == "error");  // its VMM is gone: error, with the reason
    manager.remove(r.id);
    CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("recovery: a create cut after it re-owned a warm VM's directory, before its running record, "
          "releases that directory",
          "[daemon][recovery]") {
    // create_from_template records the warm VM's directory as the sandbox's (relaxed),
    // then the sandbox running (full): a kill -9 between leaves a creating record
    // without a vm_id and a directory it owns. The create never answered: both go.
    test::TempDir tmp("recovery");
    const std::string state = tmp.path();
    const std::string dir = state + "/vms/0123456789ab";
    fs::create_directories(dir);
    std::ofstream(dir + "/vmm.log") << "nanovm: VM 0123456789ab ended: killed\n";
    store::Store store(state + "/store.db");
    store::SandboxRecord r;
    r.id = "11111111-2222-4333-8444-555555555555";
    r.state = "creating";
    r.cpus = 1;
    r.memory_mb = 128;
    r.created_ms = r.updated_ms = 1;
    store.put_sandbox(r);
    store.add_dir(dir, "vm", r.id, store::Sync::relaxed);
    ManagerOptions options;
    options.state_dir = state;
    store::ImagePins pins(store, state + "/images");
    SandboxManager manager(options, store, pins);
    manager.recover_and_watch();
    CHECK_FALSE(store.sandbox(r.id).has_value());
    bool recorded = false;
    for (const store::DirRecord& d : store.dirs()) recorded = recorded || d.path == dir;
    CHECK_FALSE(recorded);
    CHECK_FALSE(fs::exists(dir));
}
