// The VM layer's guest operations (api/vm/guest_ops.hpp) over a connection to a
// nanovm-agent host process: what nanovmd and `nanovm vm cp|exec` call.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "api/vm/guest_ops.hpp"
#include "tests/agent/agent_fixture.hpp"
#include "vmm/error.hpp"

using namespace nanovm;
using namespace nanovm::agent;
using namespace nanovm::agent::testing;

namespace {

std::string host_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}


}  // namespace

TEST_CASE("guest_parent: the directory of a guest path", "[agent][guest_ops]") {
    CHECK(vm::guest_parent("/work/result.txt") == "/work");
    CHECK(vm::guest_parent("/a/b/c") == "/a/b");
    CHECK(vm::guest_parent("/top") == "/");
    CHECK(vm::guest_parent("/a/b/") == "/a");
    CHECK(vm::guest_parent("plain") == "");
}

TEST_CASE("write_guest_file makes missing parents and writes whole or not at all", "[agent][guest_ops]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    const std::string target = agent.dir() + "/work/deep/result.txt";
    // From a file descriptor (a pipe: read until EOF), with its mode.
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const std::string data(300 * 1024 + 7, 'x');
    std::thread feeder([&] {
        size_t off = 0;
        while (off < data.size()) off += static_cast<size_t>(::write(fds[1], data.data() + off, data.size() - off));
        ::close(fds[1]);
    });
    const uint64_t n = vm::write_guest_file_from_fd(client, target, fds[0], vm::GuestWriteOptions{0600});
    feeder.join();
    ::close(fds[0]);
    CHECK(n == data.size());
    CHECK(host_file(target) == data);
    struct stat st {};
    REQUIRE(::stat(target.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);

    // Without make_parents a missing directory is the agent's ENOENT.
    const std::string elsewhere = agent.dir() + "/missing/x.txt";
    CHECK(errno_of([&] {
              vm::write_guest_file(client, elsewhere, [](char*, size_t) -> size_t { return 0; },
                                   vm::GuestWriteOptions{0644, false});
          }) == "ENOENT");
    // A parent that is a file cannot be made.
    CHECK_FALSE(errno_of([&] {
                    vm::write_guest_file(client, target + "/under-a-file", [](char*, size_t) -> size_t { return 0; });
                }).empty());

    // A source that fails leaves the old file as it was, and no temp file beside it.
    int calls = 0;
    CHECK_THROWS_WITH(vm::write_guest_file(client, target,
                                           [&](char* buf, size_t size) -> size_t {
                                               if (++calls > 2) throw std::runtime_error("the client went away");
                                               std::memset(buf, 'y', size);
                                               return size;
                                           }),
                      "the client went away");
    // The agent removes its temp file when the CANCEL arrives (asynchronously).
    size_t entries = 0;
    for (int i = 0; i < 200; ++i) {
        entries = client.list(agent.dir() + "/work/deep").size();
        if (entries == 1) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(entries == 1);
    CHECK(host_file(target) == data);
}

TEST_CASE("read_guest_file_to_fd streams a guest file into a descriptor", "[agent][guest_ops]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    const std::string source = agent.dir() + "/source.bin";
    write_pattern_file(source, 3u << 20, 7);
    const std::string copy = agent.dir() + "/copy.bin";
    const Fd out(::open(copy.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    REQUIRE(out);
    CHECK(vm::read_guest_file_to_fd(client, source, out.get()) == 3u << 20);
    CHECK(sha256_file(copy) == sha256_file(source));
    CHECK(errno_of([&] { vm::read_guest_file_to_fd(client, agent.dir() + "/nope", out.get()); }) == "ENOENT");
    // A descriptor that fails is a SysError, and the connection stays usable.
    const Fd read_only(::open(source.c_str(), O_RDONLY | O_CLOEXEC));
    CHECK_THROWS_AS(vm::read_guest_file_to_fd(client, source, read_only.get()), SysError);
    CHECK(client.stat(source).size == 3u << 20);
}

TEST_CASE("exec_command: the whole result, or the output to callbacks", "[agent][guest_ops]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    const ExecResult whole = vm::exec_command(client, Command::shell_command("echo out; echo err >&2; exit 3"));
    CHECK(whole.stdout_data == "out\n");
    CHECK(whole.stderr_data == "err\n");
    CHECK(whole.status.value == 3);
    std::string streamed;
    const ExecResult by_callback = vm::exec_command(client, Command::program({"printf", "a%sb", "-"}),
                                                    OutputCallbacks{[&](std::string_view s) { streamed += s; }, {}});
    CHECK(streamed == "a-b");
    CHECK(by_callback.stdout_data.empty());
    CHECK(by_callback.status.success());
    Command slow = Command::program({"sleep", "10"});
    slow.timeout = std::chrono::milliseconds(200);
    const ExecResult killed = vm::exec_command(client, slow);
    CHECK(killed.status.timed_out);
}
