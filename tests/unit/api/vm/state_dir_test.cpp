// VM state directories (api/vm/state_dir.hpp) under a private run directory.
#include <catch2/catch.hpp>

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "api/vm/state_dir.hpp"
#include "api/vm/vm_id.hpp"
#include "tests/support/temp_dir.hpp"
#include "vmm/error.hpp"

using namespace nanovm;
using namespace nanovm::vm;

namespace {

// A fresh temporary run directory for one test, as a caller (nanovmd) chooses one.
struct TestRun {
    test::TempDir dir{"rundir"};
    RunDir run{dir.path()};
};

bool exists(const std::string& path) { return std::filesystem::exists(path); }

}  // namespace

TEST_CASE("the run directory: NANOVM_RUN_DIR, else XDG_RUNTIME_DIR/nanovm, else the cache", "[api][vm][state]") {
    ::setenv("NANOVM_RUN_DIR", "/somewhere", 1);
    CHECK(run_dir() == "/somewhere");
    CHECK(default_run_dir().vms() == "/somewhere/vms");
    CHECK(default_run_dir().forks() == "/somewhere/forks");
    CHECK(default_run_dir().vm("0123456789ab").control_socket() == "/somewhere/vms/0123456789ab/control.sock");
    ::setenv("NANOVM_RUN_DIR", "relative/run", 1);
    CHECK(default_run_dir().root == (std::filesystem::current_path() / "relative/run").string());
    ::unsetenv("NANOVM_RUN_DIR");
    const char* xdg = ::getenv("XDG_RUNTIME_DIR");
    const std::string saved = xdg ? xdg : "";
    ::setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
    CHECK(run_dir() == "/run/user/1000/nanovm");
    ::unsetenv("XDG_RUNTIME_DIR");
    CHECK(run_dir().size() > std::string("/run").size());
    CHECK(run_dir().rfind("/nanovm/run") == run_dir().size() - std::string("/nanovm/run").size());
    if (!saved.empty()) ::setenv("XDG_RUNTIME_DIR", saved.c_str(), 1);
}

TEST_CASE("a run directory that cannot be made names NANOVM_RUN_DIR", "[api][vm][state]") {
    // sysfs refuses mkdir (EPERM) even to root, as a read-only cache does (EROFS).
    if (!std::filesystem::is_directory("/sys/kernel")) {
        WARN("no sysfs at /sys: nothing to try this on");
        return;
    }
    ::setenv("NANOVM_RUN_DIR", "/sys/nanovm-unit-test-run", 1);
    CHECK_THROWS_WITH(create_vm_dir(default_run_dir()), Catch::Contains("/sys/nanovm-unit-test-run/vms") &&
                                           Catch::Contains("set NANOVM_RUN_DIR to a writable directory"));
    ::unsetenv("NANOVM_RUN_DIR");
}

TEST_CASE("a new VM directory is private, locked while its holder lives, and removed once not", "[api][vm][state]") {
    TestRun test_run;
    const RunDir& run = test_run.run;
    NewVmDir made = create_vm_dir(run);
    CHECK(is_vm_id(made.paths.id));
    CHECK(made.paths.dir == run.vms() + "/" + made.paths.id);
    struct stat st {};
    REQUIRE(::stat(made.paths.dir.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
    CHECK(vmm_alive(made.paths));
    CHECK(clean_stale_vm_dirs(run).empty());
    CHECK_FALSE(remove_if_dead(made.paths));
    CHECK(exists(made.paths.dir));

    made.lock.reset();  // the VMM died
    CHECK_FALSE(vmm_alive(made.paths));
    CHECK(clean_stale_vm_dirs(run) == std::vector<std::string>{made.paths.id});
    CHECK_FALSE(exists(made.paths.dir));
}

TEST_CASE("clean-up keeps a crashed VM's logs in crashed/, the newest 16, and no other VM's", "[api][vm][state]") {
    TestRun test_run;
    const RunDir& run = test_run.run;
    auto dead_vm = [&](const std::string& log_line) {
        NewVmDir made = create_vm_dir(run);
        std::ofstream(made.paths.vmm_log()) << "nanovm: restored ...\n" << log_line << "\n";
        std::ofstream(made.paths.console_log()) << "[    5.06] CR2: fffffe0000001ff8\n";
        return made.paths;  // the lock goes with `made`: the VMM is dead
    };
    const VmPaths crashed = dead_vm("nanovm: VM x ended: crash (triple fault on vCPU 0: rip 0xfff0)");
    const VmPaths stopped = dead_vm("nanovm: VM y ended: stopped");
    CHECK(clean_stale_vm_dirs(run).size() == 2);
    CHECK_FALSE(exists(crashed.dir));
    std::ifstream kept(run.crashed() + "/" + crashed.id + "-vmm.log");
    std::string text((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>());
    CHECK_THAT(text, Catch::Contains("ended: crash (triple fault"));
    CHECK(exists(run.crashed() + "/" + crashed.id + "-console.log"));
    CHECK_FALSE(exists(run.crashed() + "/" + stopped.id + "-vmm.log"));

    for (size_t i = 0; i < kCrashLogsKept + 3; ++i) dead_vm("nanovm: VM z ended: crash (guest panic)");
    clean_stale_vm_dirs(run);
    size_t logs = 0;
    for (const auto& entry : std::filesystem::directory_iterator(run.crashed())) logs += entry.path().string().ends_with("-vmm.log");
    CHECK(logs == kCrashLogsKept);
}

TEST_CASE("vmm_log_tail gives the last lines of a dead VM's log, whole lines only", "[api][vm][state]") {
    TestRun test_run;
    const RunDir& run = test_run.run;
    NewVmDir made = create_vm_dir(run);
    CHECK(vmm_log_tail(made.paths).empty());  // no log yet
    {
        std::ofstream log(made.paths.vmm_log());
        for (int i = 0; i < 200; ++i) log << "nanovm: line " << i << " of the log, padded to be long enough\n";
        log << "nanovm: fatal: the last words";  // no newline at the end
    }
    CHECK(vmm_log_tail(made.paths) ==
          "nanovm: line 198 of the log, padded to be long enough | nanovm: line 199 of the log, padded to be long "
          "enough | nanovm: fatal: the last words");
    CHECK(vmm_log_tail(made.paths, 1) == "nanovm: fatal: the last words");
}

TEST_CASE("NANOVM_KEEP_STATE=1, and only that value, asks to keep a dead VM's directory", "[api][vm][state]") {
    const char* old = std::getenv("NANOVM_KEEP_STATE");
    const std::string saved = old ? old : "";
    ::unsetenv("NANOVM_KEEP_STATE");
    CHECK_FALSE(keep_state_requested());
    ::setenv("NANOVM_KEEP_STATE", "0", 1);
    CHECK_FALSE(keep_state_requested());
    ::setenv("NANOVM_KEEP_STATE", "yes", 1);
    CHECK_FALSE(keep_state_requested());
    ::setenv("NANOVM_KEEP_STATE", "1", 1);
    CHECK(keep_state_requested());
    if (old) ::setenv("NANOVM_KEEP_STATE", saved.c_str(), 1);
    else ::unsetenv("NANOVM_KEEP_STATE");
}

TEST_CASE("a lock inherited across fork keeps the VM alive after the creator lets go", "[api][vm][state]") {
    TestRun test_run;
    const RunDir& run = test_run.run;
    NewVmDir made = create_vm_dir(run);
    const pid_t child = ::fork();
    if (child == 0) {
        ::sleep(30);  // holds the inherited lock until killed
        ::_exit(0);
    }
    made.lock.reset();
    CHECK(vmm_alive(made.paths));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK_FALSE(vmm_alive(made.paths));
}

TEST_CASE("find_vm takes a full id or a unique prefix and says what is wrong otherwise", "[api][vm][state]") {
    TestRun test_run;
    const RunDir& run = test_run.run;
    std::filesystem::create_directories(run.vms() + "/abc000000001");
    std::filesystem::create_directories(run.vms() + "/abc000000002");
    std::filesystem::create_directories(run.vms() + "/def000000003");
    std::filesystem::create_directories(run.vms() + "/not-an-id");
    CHECK(list_vm_dirs(run).size() == 3);
    CHECK(find_vm(run, "abc000000001").id == "abc000000001");
    CHECK(find_vm(run, "d").id == "def000000003");
    CHECK_THROWS_WITH(find_vm(run, "abc"), Catch::Contains("ambiguous") && Catch::Contains("abc000000002"));
    CHECK_THROWS_WITH(find_vm(run, "0"), "no VM 0 (nanovm vm list shows the VMs)");
    CHECK_THROWS_WITH(find_vm(run, "../x"), Catch::Contains("not a VM id"));
    CHECK_THROWS_WITH(find_vm(run, ""), Catch::Contains("not a VM id"));
    // Directories without a lock file have no VMM: cleaned.
    CHECK(clean_stale_vm_dirs(run).size() == 3);
    CHECK(list_vm_dirs(run).empty());
}

TEST_CASE("vm.json round-trips and malformed ones are one-line errors", "[api][vm][state]") {
    TestRun test_run;
    const VmInfo info{"0123456789ab", 4242, 2, 1024, 1700000000000, "/images/root.ext4"};
    CHECK(parse_vm_info(to_json(info)) == info);
    std::filesystem::create_directories(test_run.dir.path());
    const std::string path = test_run.dir.file("vm.json");
    write_vm_info(path, info);
    CHECK(read_vm_info(path) == info);
    CHECK_THROWS_WITH(parse_vm_info("{"), "vm.json: not JSON");
    CHECK_THROWS_WITH(parse_vm_info("[]"), "vm.json: not a JSON object");
    CHECK_THROWS_WITH(parse_vm_info(R"({"id":"0123456789ab"})"), Catch::Contains("no \"pid\""));
    CHECK_THROWS_WITH(parse_vm_info(R"({"id":"0123456789ab","pid":"x","cpus":1,"memory_mib":1,"created_unix_ms":0,"image":""})"),
                      Catch::Contains("\"pid\" has the wrong type"));
    CHECK_THROWS_WITH(parse_vm_info(R"({"id":"../x","pid":1,"cpus":1,"memory_mib":1,"created_unix_ms":0,"image":""})"),
                      Catch::Contains("not a VM id"));
    CHECK_THROWS_AS(read_vm_info(test_run.dir.file("missing.json")), SysError);
}

TEST_CASE("a run directory too long for Unix socket paths is refused with advice", "[api][vm][state]") {
    TestRun test_run;
    const std::string long_dir = test_run.dir.path() + "/" + std::string(100, 'd');
    CHECK_THROWS_WITH(create_vm_dir(RunDir{long_dir}), Catch::Contains("too long") && Catch::Contains("NANOVM_RUN_DIR"));
    CHECK_FALSE(exists(long_dir));
}

TEST_CASE("fork bases: held while any VM uses them, removed once none does", "[api][vm][state]") {
    namespace fs = std::filesystem;
    TestRun test_run;
    const RunDir& run = test_run.run;
    ForkBase base = new_fork_base(run, "0123456789ab");
    CHECK(fs::path(base.dir).filename() == "snapshot");
    CHECK(fs::path(base.dir).parent_path().parent_path() == fs::path(run.forks()));
    fs::create_directories(base.dir);  // the snapshot command makes it
    Fd child = hold_fork_base(run, base.dir);
    CHECK(child.valid());
    CHECK_FALSE(hold_fork_base(run, run.root).valid());           // not a fork base
    CHECK_FALSE(hold_fork_base(run, base.dir + "/../x").valid());  // not its snapshot dir
    clean_unused_fork_bases(run);
    CHECK(fs::exists(base.dir));  // the creator and a child hold it
    base.lock.reset();
    clean_unused_fork_bases(run);
    CHECK(fs::exists(base.dir));  // the child still does
    child.reset();
    clean_unused_fork_bases(run);
    CHECK_FALSE(fs::exists(fs::path(base.dir).parent_path()));
}
