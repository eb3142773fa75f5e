// EXEC through a nanovm-agent host process: options, output, exit, signals, timeouts,
// reaping, concurrency.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "tests/agent/agent_fixture.hpp"

using namespace nanovm::agent;
using namespace nanovm::agent::testing;
using namespace std::chrono_literals;

namespace {

bool process_gone(pid_t pid, double seconds) {
    const double deadline = now_seconds() + seconds;
    while (now_seconds() < deadline) {
        if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
        std::this_thread::sleep_for(10ms);
    }
    return false;
}

pid_t read_pid(const std::string& path) {
    for (int i = 0; i < 200; ++i) {
        std::ifstream in(path);
        pid_t pid = 0;
        if (in >> pid && pid > 0) return pid;
        std::this_thread::sleep_for(10ms);
    }
    return -1;
}

}  // namespace

TEST_CASE("stdout, stderr and the exit code come back separately", "[agent][exec]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    const ExecResult r = client.run(Command::shell_command("echo out; echo err >&2; echo out2; exit 3"));
    CHECK(r.stdout_data == "out\nout2\n");
    CHECK(r.stderr_data == "err\n");
    CHECK_FALSE(r.status.signaled);
    CHECK(r.status.value == 3);
    CHECK_FALSE(r.status.timed_out);
}

TEST_CASE("argv reaches the program verbatim, without a shell", "[agent][exec]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    const ExecResult r = client.run(Command::program({"printf", "[%s]", "a b", "'q'", "$HOME", "", "*"}));
    CHECK(r.stdout_data == "[a b]['q'][$HOME][][*]");
    CHECK(r.status.success());
}

TEST_CASE("a program is looked up on PATH; a missing one fails with ENOENT", "[agent][exec]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    CHECK(client.run(Command::program({"true"})).status.success());
    CHECK(client.run(Command::program({"/bin/false"})).status.value == 1);
    try {
        client.run(Command::program({"no-such-program-nanovm"}));
        FAIL("no error");
    } catch (const AgentError& e) {
        CHECK(e.errno_name() == "ENOENT");
        CHECK(e.errno_value() == ENOENT);
    }
    // A file that is not executable: EACCES from exec.
    client.write_file(agent.dir() + "/not-exec", "#!/bin/sh\n", WriteOptions{0644, false});
    try {
        client.run(Command::program({agent.dir() + "/not-exec"}));
        FAIL("no error");
    } catch (const AgentError& e) {
        CHECK(e.errno_name() == "EACCES");
    }
    // The connection is fine after refused commands.
    CHECK(client.run(Command::program({"true"})).status.success());
}

TEST_CASE("env is set over the base environment, clear_env starts from nothing", "[agent][exec]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    Command c = Command::shell_command("echo \"$FOO|$HOME|$PATH\"");
    c.env = {"FOO=bar baz", "HOME=/elsewhere"};
    const ExecResult r = client.run(c);
    CHECK(r.stdout_data == "bar baz|/elsewhere|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n");

    Command only = Command::program({"/usr/bin/env"});
    only.clear_env = true;
    only.env = {"A=1", "B=2"};
    CHECK(client.run(only).stdout_data == "A=1\nB=2\n");
}

TEST_CASE("cwd sets the working directory; a missing or non-directory cwd fails with its errno", "[agent][exec]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    Command c = Command::program({"pwd"});
    c.cwd = agent.dir();
    CHECK(client.run(c).stdout_data == agent.dir() + "\n");
    CHECK(client.run(Command::program({"pwd"})).stdout_data == "/\n");

    c.cwd = agent.dir() + "/missing";
    try {
        client.run(c);
        FAIL("no error");
    } catch (const AgentError& e) {
        CHECK(e.errno_name() == "ENOENT");
        CHECK(e.message() == "chdir " + agent.dir() + "/missing");
    }
    client.write_file(agent.dir() + "/file", "x");
    c.cwd = agent.dir() + "/file";
    try {
        client.run(c);
        FAIL("no error");
    } catch (const AgentError& e) {
        CHECK(e.errno_name() == "ENOTDIR");
    }
}

TEST_CASE("uid and gid switch the command's user and group", "[agent][exec]") {
    if (::geteuid() != 0) {
        WARN("not root: uid/gid switching not tested");
        return;
    }
    AgentProcess agent;
    AgentClient client = agent.connect();
    Command c = Command::shell_command("id -u; id -g; id -G");
    c.uid = 65534;
    c.gid = 65533;
    CHECK(client.run(c).stdout_data == "65534\n65533\n65533\n");
    Command uid_only = Command::shell_command("id -u; id -G");
    uid_only.uid = 65534;
    CHECK(client.run(uid_only).stdout_data == "65534\n0\n");  // root's other groups dropped
    // As that user, root's files are out of reach.
    client.write_file(agent.dir() + "/secret", "s", WriteOptions{0600, false});
    Command cat = Command::program({"cat", agent.dir() + "/secret"});
    cat.uid = 65534;
    cat.gid = 65534;
    const ExecResult r = client.run(cat);
    CHECK(r.status.value == 1);
    CHECK(r.stderr_data.find("Permission denied") != std::string::npos);
}

TEST_CASE("stdin bytes reach the command, then EOF", "[agent][exec]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    Command c = Command::shell_command("wc -c; cat >/dev/null; echo done");
    c.stdin_data = std::string(3'000'000, 'x');  // more than a pipe holds
    const ExecResult r = client.run(c);
    CHECK(r.stdout_data == "3000000\ndone\n");

    Command no_stdin = Command::program({"cat"});
    CHECK(client.run(no_stdin).stdout_data.empty());  // /dev/null: EOF at once
}

TEST_CASE("a stdin stream is fed while the command runs", "[agent][exec]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    Command c = Command::program({"cat"});
    c.stdin_stream = true;
    std::string seen;
    const RequestId id = client.start(c, OutputCallbacks{[&](std::string_view s) { seen.append(s); }, {}});
    for (int i = 0; i < 3; ++i) {
        const std::string line = "line " + std::to_string(i) + "\n";
        client.send_stdin(id, line);
        const double deadline = now_seconds() + 5;
        while (seen.find(line) == std::string::npos && now_seconds() < deadline) client.poll(100ms);
        REQUIRE(seen.find(line) != std::string::npos);  // echoed before the next is sent
        CHECK_FALSE(client.done(id));
    }
    client.close_stdin(id);
    const ExecResult r = client.wait(id);
    CHECK(r.status.success());
    CHECK(seen == "line 0\nline 1\nline 2\n");
}

TEST_CASE("the first line arrives before the command ends", "[agent][exec]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    std::string out;
    const RequestId id = client.start(Command::shell_command("echo first; sleep 1.5; echo second"),
                                      OutputCallbacks{[&](std::string_view s) { out.append(s); }, {}});
    const double deadline = now_seconds() + 10;
    while (out.empty() && now_seconds() < deadline) client.poll(std::chrono::milliseconds(50));
    const double first_at = now_seconds();
    CHECK(out == "first\n");
    CHECK_FALSE(client.done(id));  // the command is still sleeping
    const ExecResult r = client.wait(id);
    CHECK(out == "first\nsecond\n");
    CHECK(r.stdout_data.empty());  // the callback took it
    CHECK(now_seconds() - first_at > 1.0);
}

TEST_CASE("100 MB of output arrive intact", "[agent][exec][large]") {
    AgentProcess agent;
    const uint64_t size = 100'000'000;
    const std::string path = agent.dir() + "/out.bin";
    write_pattern_file(path, size, 42);
    const std::string expected = sha256_file(path);
    AgentClient client = agent.connect();
    Sha256 sha;
    uint64_t got = 0;
    const double start = now_seconds();
    const ExecResult r = client.run(Command::program({"cat", path}),
                                    OutputCallbacks{[&](std::string_view s) {
                                                        sha.update(s);
                                                        got += s.size();
                                                    },
                                                    {}});
    const double seconds = now_seconds() - start;
    CHECK(r.status.success());
    CHECK(got == size);
    CHECK(sha.hex() == expected);
    std::printf("agent: 100 MB of stdout in %.2f s (%.0f MB/s)\n", seconds, size / 1e6 / seconds);
}

TEST_CASE("a host that reads slowly slows the command down instead of growing the agent", "[agent][exec]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    const long rss_before = agent.rss_kib();
    uint64_t got = 0;
    const RequestId id = client.start(Command::program({"cat", "/dev/zero"}),
                                      OutputCallbacks{[&](std::string_view s) { got += s.size(); }, {}});
    std::this_thread::sleep_for(1500ms);  // not reading: the agent must stop reading the pipe
    const long rss_stalled = agent.rss_kib();
    CHECK(rss_stalled - rss_before < 16 * 1024);
    // Reading again: output flows (8 MiB takes a few ms idle; the bound is for a loaded machine).
    const double until = now_seconds() + 20;
    while (got <= (8u << 20) && now_seconds() < until) client.poll(50ms);
    CHECK(got > (8u << 20));
    client.cancel(id);
    CHECK(client.wait(id).status.value == SIGKILL);
    CHECK(agent.rss_kib() - rss_before < 16 * 1024);
}

TEST_CASE("stdout and stderr stay separate under load", "[agent][exec]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    const ExecResult r = client.run(Command::shell_command(
        "i=0; while [ $i -lt 2000 ]; do echo o$i; echo e$i >&2; i=$((i+1)); done"));
    std::string want_out, want_err;
    for (int i = 0; i < 2000; ++i) {
        want_out += "o" + std::to_string(i) + "\n";
        want_err += "e" + std::to_string(i) + "\n";
    }
    CHECK(r.stdout_data == want_out);
    CHECK(r.stderr_data == want_err);
}

TEST_CASE("exit codes and terminating signals are reported", "[agent][exec]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    for (int code : {0, 1, 42, 255}) {
        const ExecResult r = client.run(Command::shell_command("exit " + std::to_string(code)));
        CHECK_FALSE(r.status.signaled);
        CHECK(r.status.value == code);
    }
    for (int sig : {SIGTERM, SIGKILL, SIGSEGV}) {
        const ExecResult r = client.run(Command::shell_command("kill -" + std::to_string(sig) + " $$"));
        CHECK(r.status.signaled);
        CHECK(r.status.value == sig);
        CHECK(r.status.shell_code() == 128 + sig);
    }
}

TEST_CASE("SIGNAL goes to the command's whole process group", "[agent][exec]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    const std::string pid_file = agent.dir() + "/bg.pid";
    const RequestId id = client.start(
        Command::shell_command("sleep 100 & echo $! > " + pid_file + "; echo ready; wait"));
    const pid_t bg = read_pid(pid_file);
    REQUIRE(bg > 0);
    client.send_signal(id, SIGTERM);
    const ExecResult r = client.wait(id);
    CHECK(r.status.signaled);
    CHECK(r.status.value == SIGTERM);
    CHECK(process_gone(bg, 5));
}

TEST_CASE("a timeout kills the whole process group", "[agent][exec]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    const std::string pid_file = agent.dir() + "/bg.pid";
    Command c = Command::shell_command("sleep 100 & echo $! > " + pid_file + "; sleep 100");
    c.timeout = 300ms;
    const double start = now_seconds();
    const ExecResult r = client.run(c);
    const double took = now_seconds() - start;
    CHECK(r.status.timed_out);
    CHECK(r.status.signaled);
    CHECK(r.status.value == SIGKILL);
    CHECK(took >= 0.3);
    CHECK(took < 3);
    const pid_t bg = read_pid(pid_file);
    REQUIRE(bg > 0);
    CHECK(process_gone(bg, 5));  // killed, reparented to the agent (subreaper), reaped

    Command quick = Command::program({"true"});
    quick.timeout = 5000ms;
    CHECK_FALSE(client.run(quick).status.timed_out);
}

TEST_CASE("CANCEL kills a command, which still reports its end", "[agent][exec]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    const RequestId id = client.start(Command::program({"sleep", "100"}));
    client.cancel(id);
    const ExecResult r = client.wait(id);
    CHECK(r.status.signaled);
    CHECK(r.status.value == SIGKILL);
    CHECK_FALSE(r.status.timed_out);
}

TEST_CASE("1000 short-lived commands leave no zombie; round trip of true", "[agent][exec][reaping]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    std::vector<double> ms;
    ms.reserve(1000);
    for (int i = 0; i < 1000; ++i) {
        const double start = now_seconds();
        const ExecResult r = client.run(Command::program({"/bin/true"}));
        ms.push_back((now_seconds() - start) * 1000);
        REQUIRE(r.status.success());
    }
    // Orphans too: each command leaves a background child behind for the agent.
    for (int i = 0; i < 50; ++i) {
        REQUIRE(client.run(Command::shell_command("true & exit 0")).status.success());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("agent: round trip of /bin/true over a Unix socket: median %.3f ms, p99 %.3f ms (1000 runs)\n",
                ms[500], ms[990]);
    // The last orphans may still be running `true` for a moment (a loaded machine).
    int zombies = -1, children = -1;
    for (int i = 0; i < 250 && (zombies != 0 || children != 0); ++i) {
        zombies = agent.zombie_children();
        children = static_cast<int>(agent.children());
        if (zombies != 0 || children != 0) std::this_thread::sleep_for(20ms);
    }
    CHECK(zombies == 0);
    CHECK(children == 0);
}

TEST_CASE("32 commands run at once on one connection", "[agent][exec][concurrency]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    std::vector<RequestId> ids;
    const double start = now_seconds();
    for (int i = 0; i < 32; ++i) {
        ids.push_back(client.start(Command::shell_command("sleep 1; echo " + std::to_string(i))));
    }
    for (int i = 0; i < 32; ++i) {
        const ExecResult r = client.wait(ids[i]);
        CHECK(r.stdout_data == std::to_string(i) + "\n");
        CHECK(r.status.success());
    }
    const double took = now_seconds() - start;
    CHECK(took < 5);  // one after the other would take 32 s
}

TEST_CASE("32 connections run commands at once", "[agent][exec][concurrency]") {
    AgentProcess agent;
    std::vector<AgentClient> clients;
    std::vector<RequestId> ids;
    const double start = now_seconds();
    for (int i = 0; i < 32; ++i) {
        clients.push_back(agent.connect());
        ids.push_back(clients.back().start(Command::shell_command("sleep 1; echo " + std::to_string(i))));
    }
    for (int i = 0; i < 32; ++i) CHECK(clients[i].wait(ids[i]).stdout_data == std::to_string(i) + "\n");
    CHECK(now_seconds() - start < 5);
}

TEST_CASE("a dropped connection kills its commands; the agent serves on", "[agent][exec]") {
    AgentProcess agent;
    const std::string pid_file = agent.dir() + "/sleep.pid";
    {
        AgentClient client = agent.connect();
        client.start(Command::shell_command("echo $$ > " + pid_file + "; exec sleep 100"));
        const pid_t pid = read_pid(pid_file);
        REQUIRE(pid > 0);
        // Also a producer blocked on a full connection: a reader that never reads.
        client.start(Command::program({"cat", "/dev/zero"}));
        client.poll(200ms);
    }
    const pid_t pid = read_pid(pid_file);
    CHECK(process_gone(pid, 5));
    AgentClient again = agent.connect();
    CHECK(again.run(Command::program({"echo", "still here"})).stdout_data == "still here\n");
    for (int i = 0; i < 100 && agent.children() != 0; ++i) std::this_thread::sleep_for(20ms);
    CHECK(agent.children() == 0);
}

TEST_CASE("ping answers", "[agent][exec]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    CHECK(client.agent_software().find("nanovm-agent") != std::string::npos);
    CHECK(client.ping() < std::chrono::seconds(1));
    try {
        client.shutdown();
        FAIL("no error");
    } catch (const AgentError& e) {
        CHECK(e.errno_name() == "EOPNOTSUPP");
    }
}

TEST_CASE("the client bounds what it collects from a flooding guest", "[agent][exec]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    client.set_limits(ClientLimits{1u << 20, 10});
    const ExecResult r = client.run(Command::shell_command("head -c 5000000 /dev/zero; echo err >&2"));
    CHECK(r.stdout_data.size() == (1u << 20));
    CHECK(r.stderr_data == "err\n");
    CHECK(r.output_truncated);
    CHECK(r.status.success());

    client.write_file(agent.dir() + "/big", std::string(2u << 20, 'b'));
    try {
        client.read_file(agent.dir() + "/big");
        FAIL("no error");
    } catch (const AgentError& e) {
        CHECK(e.errno_name() == "EFBIG");
    }
    client.mkdir(agent.dir() + "/d");
    for (int i = 0; i < 11; ++i) client.write_file(agent.dir() + "/d/" + std::to_string(i), "");
    try {
        client.list(agent.dir() + "/d");
        FAIL("no error");
    } catch (const AgentError& e) {
        CHECK(e.errno_name() == "E2BIG");
    }
    CHECK(client.run(Command::program({"true"})).status.success());
}
