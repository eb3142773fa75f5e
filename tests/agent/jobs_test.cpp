// Background jobs (protocol version 3) through a nanovm-agent host process: started
// detached, listed, re-attached from other connections with offsets, stdin, signals,
// wait, forget, the output buffer's bound, and the older versions' refusal.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "guest-init/protocol/frame.hpp"
#include "guest-init/protocol/messages.hpp"
#include "tests/agent/agent_fixture.hpp"

using namespace nanovm;
using namespace nanovm::agent;
using namespace nanovm::agent::testing;
using proto::JobStream;
using proto::MessageType;

namespace {

int64_t unix_ms() {
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

JobInfo find(AgentClient& client, uint64_t job) {
    for (JobInfo& j : client.list_jobs())
        if (j.id == job) return j;
    FAIL("no job " << job << " in the list");
    return {};
}

// Output chunks as an attach delivered them: stream -> (first offset, bytes).
struct Received {
    std::map<JobStream, uint64_t> first;
    std::map<JobStream, std::string> bytes;
    std::map<JobStream, uint64_t> next;
    bool contiguous = true;
    JobOutputCallback callback() {
        return [this](JobStream s, uint64_t offset, std::string_view data) {
            if (!first.count(s)) first[s] = offset;
            else if (next[s] != offset) contiguous = false;
            next[s] = offset + data.size();
            bytes[s].append(data);
        };
    }
};

}  // namespace

TEST_CASE("a job outlives the connection that started it and is re-attached from another", "[agent][jobs]") {
    AgentProcess agent;
    const int64_t before = unix_ms();
    uint64_t job = 0;
    {
        AgentClient starter = agent.connect();
        REQUIRE(starter.protocol_version() == 3);
        job = starter.start_job(Command::shell_command("echo one; echo err >&2; sleep 1; echo got; exit 7"));
        CHECK(job > 0);
    }  // the starter goes away; the job does not
    AgentClient client = agent.connect();
    JobInfo info = find(client, job);
    CHECK(info.running);
    CHECK(info.shell);
    CHECK(info.argv == std::vector<std::string>{"echo one; echo err >&2; sleep 1; echo got; exit 7"});
    CHECK(info.started_unix_ms >= before - 1000);
    CHECK(info.started_unix_ms <= unix_ms() + 1000);
    CHECK_FALSE(info.stdin_open);  // not started with stdin_stream: its stdin is /dev/null
    // Attach from the start and follow to the end.
    Received got;
    const ExecResult end = client.wait(client.attach_job(job, 0, 0, true, got.callback()));
    CHECK(end.status.value == 7);
    CHECK(got.bytes[JobStream::kStdout] == "one\ngot\n");
    CHECK(got.bytes[JobStream::kStderr] == "err\n");
    CHECK(got.first[JobStream::kStdout] == 0);
    CHECK(got.contiguous);
    info = find(client, job);
    CHECK_FALSE(info.running);
    CHECK(info.status.value == 7);
    CHECK(info.stdout_bytes == 8);
    CHECK(info.stderr_bytes == 4);
    // A later attach from an offset gets the rest, then DONE; wait answers at once.
    const ExecResult rest = client.wait(client.attach_job(job, 4, 4, false));
    CHECK(rest.stdout_data == "got\n");
    CHECK(rest.stderr_data.empty());
    CHECK(client.wait_job(job).value == 7);
}

TEST_CASE("job stdin, signals, wait from another connection, forget", "[agent][jobs]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    Command cat = Command::program({"cat"});
    cat.stdin_stream = true;
    const uint64_t job = client.start_job(cat);
    CHECK(find(client, job).stdin_open);
    client.job_stdin(job, "hello ");
    client.job_stdin(job, std::string(600 * 1024, 'z'));  // more than one frame
    client.job_close_stdin(job);
    CHECK(errno_of([&] { client.job_stdin(job, "late"); }) == "EPIPE");
    CHECK(client.wait_job(job).success());
    const ExecResult out = client.wait(client.attach_job(job, 0, 0, false));
    CHECK(out.stdout_data == "hello " + std::string(600 * 1024, 'z'));

    const uint64_t sleeper = client.start_job(Command::program({"sleep", "100"}));
    CHECK(errno_of([&] { client.forget_job(sleeper); }) == "EBUSY");
    // Another connection waits; this one signals.
    std::thread waiter([&] {
        AgentClient other = agent.connect();
        const ExitStatus s = other.wait_job(sleeper);
        CHECK(s.signaled);
        CHECK(s.value == SIGTERM);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    client.job_signal(sleeper, SIGTERM);
    waiter.join();
    CHECK(errno_of([&] { client.job_signal(sleeper, SIGTERM); }) == "ESRCH");
    client.forget_job(sleeper);
    CHECK(errno_of([&] { client.wait_job(sleeper); }) == "ENOENT");
    CHECK(errno_of([&] { client.forget_job(sleeper); }) == "ENOENT");
    CHECK(errno_of([&] { client.wait(client.attach_job(sleeper, 0, 0, true)); }) == "ENOENT");
    for (const JobInfo& j : client.list_jobs()) CHECK(j.id != sleeper);
}

TEST_CASE("a job's output is kept up to 1 MiB per stream; a late attach sees what it missed", "[agent][jobs]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    // 3 MiB of numbered 8-byte records on stdout.
    const uint64_t job = client.start_job(
        Command::shell_command("i=0; while [ $i -lt 393216 ]; do printf '%07d\\n' $i; i=$((i+1)); done"));
    REQUIRE(client.wait_job(job).success());
    const JobInfo info = find(client, job);
    CHECK(info.stdout_bytes == 3u << 20);
    Received got;
    client.wait(client.attach_job(job, 0, 0, false, got.callback()));
    CHECK(got.first[JobStream::kStdout] == (3u << 20) - proto::kJobOutputKeep);  // 2 MiB missed
    CHECK(got.bytes[JobStream::kStdout].size() == proto::kJobOutputKeep);
    CHECK(got.contiguous);
    // The bytes are the last records, at their offsets: record k starts at 8k.
    const std::string& kept = got.bytes[JobStream::kStdout];
    CHECK(kept.substr(0, 8) == "0262144\n");
    CHECK(kept.substr(kept.size() - 8) == "0393215\n");
}

TEST_CASE("a follower gets live output as it comes; cancel detaches without stopping the job", "[agent][jobs]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    Command ticker = Command::shell_command("while :; do echo tick; sleep 0.05; done");
    ticker.timeout = std::chrono::seconds(20);
    const uint64_t job = client.start_job(ticker);
    std::string live;
    const RequestId attach =
        client.attach_job(job, 0, 0, true, [&](JobStream, uint64_t, std::string_view d) { live.append(d); });
    while (live.size() < 15) client.poll(std::chrono::milliseconds(100));
    client.cancel(attach);
    CHECK(errno_of([&] { client.wait(attach); }) == "ECANCELED");
    CHECK(find(client, job).running);
    client.job_signal(job, SIGKILL);
    const ExitStatus end = client.wait_job(job);
    CHECK(end.signaled);
    CHECK(end.value == SIGKILL);
}

TEST_CASE("a job's timeout kills it in the agent", "[agent][jobs]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    Command slow = Command::program({"sleep", "30"});
    slow.timeout = std::chrono::milliseconds(200);
    const ExitStatus end = client.wait_job(client.start_job(slow));
    CHECK(end.timed_out);
    CHECK(end.signaled);
}

TEST_CASE("jobs: a bad program is refused at start; the oldest ended job makes room", "[agent][jobs]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    CHECK(errno_of([&] { client.start_job(Command::program({"/no/such/program"})); }) == "ENOENT");
    const uint64_t first = client.start_job(Command::program({"true"}));
    client.wait_job(first);
    std::vector<uint64_t> sleepers;
    for (size_t i = 1; i < proto::kMaxJobs; ++i) sleepers.push_back(client.start_job(Command::program({"sleep", "30"})));
    CHECK(client.list_jobs().size() == proto::kMaxJobs);
    const uint64_t one_more = client.start_job(Command::program({"sleep", "30"}));  // drops `first`
    CHECK(errno_of([&] { client.wait_job(first); }) == "ENOENT");
    CHECK(errno_of([&] { client.start_job(Command::program({"true"})); }) == "EAGAIN");  // all run
    sleepers.push_back(one_more);
    for (const uint64_t s : sleepers) client.job_signal(s, SIGKILL);
    for (const uint64_t s : sleepers) client.wait_job(s);
}

TEST_CASE("jobs need protocol version 3: the client refuses for an older connection, the agent too", "[agent][jobs]") {
    AgentProcess agent;
    Fd fd = agent.raw_connect(true, 2);
    send_frame(fd.get(), MessageType::kJobList, 1, "");
    MessageType type{};
    uint32_t id = 99;
    std::string payload;
    REQUIRE(read_frame(fd.get(), type, id, payload));
    CHECK(type == MessageType::kError);
    CHECK(id == 0);
    proto::ErrorReport error;
    REQUIRE(proto::decode(payload, error));
    CHECK(error.errno_name == "EPROTO");
    CHECK(error.message == "JOB_LIST needs protocol version 3; this connection speaks 2");
}

TEST_CASE("job payloads round-trip and malformed ones are refused", "[agent][jobs][protocol]") {
    proto::JobList list{proto::JobInfo{7, {"sh", "-c", "x"}, false, 1700000000123, false, {true, false, 9}, 10, 20,
                                       false}};
    proto::JobList back;
    REQUIRE(proto::decode(proto::encode(list), back));
    REQUIRE(back.size() == 1);
    CHECK(back[0].job == 7);
    CHECK(back[0].argv == list[0].argv);
    CHECK(back[0].started_unix_ms == 1700000000123);
    CHECK(back[0].exit.signaled);
    CHECK(back[0].exit.value == 9);
    CHECK(back[0].stderr_bytes == 20);
    std::string truncated = proto::encode(list);
    truncated.pop_back();
    CHECK_FALSE(proto::decode(truncated, back));
    std::string lying = proto::encode(list);
    lying[0] = 2;  // two entries claimed, one there
    CHECK_FALSE(proto::decode(lying, back));

    proto::JobOutput out;
    REQUIRE(proto::decode(proto::encode(proto::JobOutput{JobStream::kStderr, 1ull << 40, "bytes"}), out));
    CHECK(out.stream == JobStream::kStderr);
    CHECK(out.offset == 1ull << 40);
    CHECK(out.data == "bytes");
    CHECK_FALSE(proto::decode(std::string("\x03") + std::string(8, '\0'), out));  // no stream 3

    proto::JobRef ref;
    CHECK_FALSE(proto::decode(proto::encode(proto::JobRef{0}), ref));  // job ids start at 1
    proto::JobSignal sig;
    CHECK_FALSE(proto::decode(proto::encode(proto::JobSignal{1, 65}), sig));
    proto::JobAttach attach;
    REQUIRE(proto::decode(proto::encode(proto::JobAttach{3, 5, 6, true}), attach));
    CHECK(attach.follow);
    CHECK(attach.stderr_from == 6);
    proto::JobListRequest none;
    CHECK_FALSE(proto::decode("x", none));
}
