// Sessions through a nanovm-agent host process.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>

#include "tests/agent/agent_fixture.hpp"

using namespace nanovm::agent;
using namespace nanovm::agent::testing;
using namespace std::chrono_literals;

TEST_CASE("a session keeps cwd and environment between commands", "[agent][session]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    client.open_session("s1", agent.dir(), {"GREETING=hi"});
    CHECK(client.run_in_session("s1", "pwd").stdout_data == agent.dir() + "\n");
    CHECK(client.run_in_session("s1", "mkdir sub && cd sub; export X=42; Y=7").status.success());
    const ExecResult r = client.run_in_session("s1", "pwd; echo $X $Y $GREETING; echo oops >&2; false");
    CHECK(r.stdout_data == agent.dir() + "/sub\n42 7 hi\n");
    CHECK(r.stderr_data == "oops\n");
    CHECK(r.status.value == 1);
    // Functions too, and quotes of every kind in the command text.
    CHECK(client.run_in_session("s1", "f() { echo \"f:$1\"; }").status.success());
    CHECK(client.run_in_session("s1", "f 'it'\"'\"'s'; echo \"a'b\" 'c\"d'").stdout_data == "f:it's\na'b c\"d\n");
    client.close_session("s1");
}

TEST_CASE("sessions are independent of each other and of connections", "[agent][session]") {
    AgentProcess agent;
    {
        AgentClient a = agent.connect();
        a.open_session("one", "/tmp");
        a.open_session("two", "/");
        a.run_in_session("one", "V=one");
        a.run_in_session("two", "V=two");
    }
    AgentClient b = agent.connect();
    CHECK(b.run_in_session("one", "echo $V $PWD").stdout_data == "one /tmp\n");
    CHECK(b.run_in_session("two", "echo $V $PWD").stdout_data == "two /\n");
}

TEST_CASE("a syntax error fails one command; exit ends the session", "[agent][session]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    client.open_session("s");
    const ExecResult bad = client.run_in_session("s", "echo \"unterminated");
    CHECK(bad.status.value == 2);
    CHECK_FALSE(bad.stderr_data.empty());
    CHECK(client.run_in_session("s", "echo alive").stdout_data == "alive\n");
    const ExecResult ended = client.run_in_session("s", "echo bye; exit 3");
    CHECK(ended.stdout_data == "bye\n");
    CHECK(ended.status.value == 3);
    try {
        client.run_in_session("s", "true");
        FAIL("no error");
    } catch (const AgentError& e) {
        CHECK(e.errno_name() == "ENOENT");
    }
}

TEST_CASE("session errors: EEXIST, ENOENT, EBUSY", "[agent][session]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    client.open_session("s");
    auto errno_of = [](auto&& fn) -> std::string {
        try {
            fn();
        } catch (const AgentError& e) {
            return e.errno_name();
        }
        return "";
    };
    CHECK(errno_of([&] { client.open_session("s"); }) == "EEXIST");
    CHECK(errno_of([&] { client.run_in_session("nope", "true"); }) == "ENOENT");
    CHECK(errno_of([&] { client.close_session("nope"); }) == "ENOENT");
    CHECK(errno_of([&] { client.open_session("bad-cwd", "/no/such/dir"); }) == "ENOENT");
    const RequestId slow = client.start_in_session("s", "sleep 0.5; echo slow");
    CHECK(errno_of([&] { client.run_in_session("s", "true"); }) == "EBUSY");
    CHECK(client.wait(slow).stdout_data == "slow\n");
    client.close_session("s");
    CHECK(errno_of([&] { client.run_in_session("s", "true"); }) == "ENOENT");
}

TEST_CASE("a session's timeout and signals stop the command, not the session", "[agent][session]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    client.open_session("s");
    client.run_in_session("s", "KEEP=yes");
    const ExecResult timed = client.run_in_session("s", "sleep 100", 300ms);
    CHECK(timed.status.timed_out);
    CHECK(timed.status.value == 128 + SIGKILL);
    CHECK(client.run_in_session("s", "echo $KEEP").stdout_data == "yes\n");

    const RequestId id = client.start_in_session("s", "sleep 100");
    client.poll(200ms);
    client.send_signal(id, SIGINT);
    const ExecResult interrupted = client.wait(id);
    CHECK(interrupted.status.value == 128 + SIGINT);
    CHECK_FALSE(interrupted.status.timed_out);
    CHECK(client.run_in_session("s", "echo $KEEP").stdout_data == "yes\n");
}

TEST_CASE("closing a session kills its running command", "[agent][session]") {
    AgentProcess agent;
    AgentClient a = agent.connect();
    AgentClient b = agent.connect();
    a.open_session("s");
    const RequestId id = a.start_in_session("s", "sleep 100");
    a.poll(100ms);
    b.close_session("s");
    const ExecResult r = a.wait(id);
    CHECK(r.status.signaled);
    CHECK(r.status.value == SIGKILL);
}

TEST_CASE("many sessions at once", "[agent][session]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    for (int i = 0; i < 20; ++i) client.open_session("s" + std::to_string(i), "", {"N=" + std::to_string(i)});
    std::vector<RequestId> ids;
    for (int i = 0; i < 20; ++i) ids.push_back(client.start_in_session("s" + std::to_string(i), "sleep 0.3; echo $N"));
    for (int i = 0; i < 20; ++i) CHECK(client.wait(ids[i]).stdout_data == std::to_string(i) + "\n");
}
