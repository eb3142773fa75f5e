// Adopting a VM (api/vm/adopt.hpp): what holds a VM directory, over real locks and a
// real control socket served in this process, as a restarted nanovmd would find them.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "api/vm/adopt.hpp"
#include "api/vm/control_server.hpp"
#include "api/vm/state_dir.hpp"
#include "tests/support/temp_dir.hpp"
#include "vmm/error.hpp"

using namespace nanovm;
using namespace nanovm::vm;
using nlohmann::json;

namespace {

void write_log(const VmPaths& paths, const std::string& text) {
    std::ofstream log(paths.vmm_log());
    log << text;
}

}  // namespace

TEST_CASE("adopt: missing, dead with the reason from vmm.log, unresponsive, starting, ready", "[api][vm][adopt]") {
    test::TempDir dir{"adopt"};
    const RunDir run{dir.path()};
    CHECK_THROWS_WITH(adopt(run, "../etc"), Catch::Contains("not a VM id"));
    CHECK(adopt(run, "0123456789ab").state == Adoption::State::missing);

    NewVmDir made = create_vm_dir(run);
    const VmPaths& paths = made.paths;
    // The lock is held (as by a VMM) but nothing serves the control socket yet.
    Adoption found = adopt(run, paths.id);
    CHECK(found.state == Adoption::State::unresponsive);
    CHECK_THAT(found.reason, Catch::Contains("control socket"));

    {
        std::string state = "booting";
        ControlServer server(paths.control_socket());
        server.add_command("status", [&](const ControlRequest&) {
            return json{{"id", paths.id}, {"pid", 4242}, {"state", state}, {"cpus", 1}};
        });
        server.start();
        found = adopt(run, paths.id);
        CHECK(found.state == Adoption::State::starting);
        state = "paused";
        found = adopt(run, paths.id);
        CHECK(found.state == Adoption::State::ready);
        CHECK(found.pid == 4242);
        CHECK(found.status["state"] == "paused");
        CHECK_FALSE(found.status.contains("ok"));
        state = "stopping";
        CHECK(adopt(run, paths.id).state == Adoption::State::stopping);
    }

    made.lock.reset();  // the VMM died: the directory stays until someone removes it
    write_log(paths, "nanovm: VM " + paths.id + " started\nnanovm: KVM_CREATE_VCPU: Cannot allocate memory\n");
    found = adopt(run, paths.id);
    CHECK(found.state == Adoption::State::dead);
    CHECK(found.reason == "KVM_CREATE_VCPU: Cannot allocate memory");
    CHECK(std::filesystem::exists(paths.dir));  // adopt only reads
    CHECK(std::string(to_string(found.state)) == "dead");
}

TEST_CASE("vmm_end_reason: the ended line with a crash's console line, else the last VMM line", "[api][vm][adopt]") {
    test::TempDir dir{"endreason"};
    const VmPaths paths = RunDir{dir.path()}.vm("0123456789ab");
    std::filesystem::create_directories(paths.dir);
    CHECK(vmm_end_reason(paths) == "its VMM ended without a word in its log (killed?)");
    write_log(paths,
              "nanovm: booted in 120 ms\n"
              "nanovm: guest console: Kernel panic - not syncing: sysrq triggered crash\n"
              "nanovm: guest console: CPU: 0 PID: 1 Comm: sh\n"
              "nanovm: guest console: ---[ end Kernel panic ]---\n"
              "nanovm: VM 0123456789ab ended: crash (reset without announcement)\n");
    CHECK(vmm_end_reason(paths) ==
          "VM 0123456789ab ended: crash (reset without announcement); guest console: Kernel panic - not syncing: "
          "sysrq triggered crash");
    write_log(paths, "nanovm: VM 0123456789ab ended: poweroff (guest poweroff)\n");
    CHECK(vmm_end_reason(paths) == "VM 0123456789ab ended: poweroff (guest poweroff)");
    write_log(paths, "nanovm: guest console: only console lines\n");
    CHECK(vmm_end_reason(paths) == "its VMM ended without a word in its log (killed?)");
}
