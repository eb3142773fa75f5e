// RESYNC against the agent as a host process: it decodes and checks the request like
// the guest's agent does, then refuses to touch its host (EOPNOTSUPP). Malformed
// payloads are protocol errors; connections that negotiated version 1 do not have
// RESYNC. The steps themselves: guest-init/tests/resync_test.cpp (fake kernel) and
// the test host (a real guest).
#include <catch2/catch.hpp>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "guest-init/protocol/frame.hpp"
#include "guest-init/protocol/messages.hpp"
#include "tests/agent/agent_fixture.hpp"

using namespace nanovm::agent;
using namespace nanovm::agent::testing;
using nanovm::Fd;
using proto::MessageType;

namespace {

constexpr int64_t kSomeTimeNs = 1'700'000'000'000'000'000;

std::vector<uint8_t> entropy(size_t n) { return std::vector<uint8_t>(n, 0x42); }

proto::ResyncRequest request(size_t entropy_bytes, std::string hostname) {
    proto::ResyncRequest r;
    r.entropy = std::string(entropy_bytes, 'e');
    r.wall_clock_ns = kSomeTimeNs;
    r.hostname = std::move(hostname);
    return r;
}

// Reads one frame; its type, and the ErrorReport if it is an ERROR.
MessageType answer(int fd, uint32_t& id, proto::ErrorReport& error) {
    MessageType type{};
    std::string payload;
    REQUIRE(read_frame(fd, type, id, payload));
    if (type == MessageType::kError) REQUIRE(proto::decode(payload, error));
    return type;
}

// PING on `fd` gets its PONG.
bool pongs(int fd) {
    send_frame(fd, MessageType::kPing, 0, "after");
    MessageType type{};
    uint32_t id = 1;
    std::string payload;
    return read_frame(fd, type, id, payload) && type == MessageType::kPong && id == 0 && payload == "after";
}

}  // namespace

TEST_CASE("a host agent decodes RESYNC and answers EOPNOTSUPP without touching the host", "[agent][resync]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    CHECK(client.protocol_version() == proto::kProtocolVersion);
    try {
        client.resync(entropy(64), kSomeTimeNs, "sandbox-1");
        FAIL("resync succeeded on a host agent");
    } catch (const AgentError& e) {
        CHECK(e.errno_name() == "EOPNOTSUPP");
        CHECK(e.message() == "resync: the agent is not running in a guest");
    }
    // resync_guest fills in the host's entropy and time; the same answer.
    CHECK_THROWS_AS(resync_guest(client, ""), AgentError);
    // The request ended there: the connection goes on.
    client.ping();
    CHECK(client.run(Command::program({"true"})).status.success());
}

TEST_CASE("a RESYNC sent ahead is answered before the next request and its refusal reaches its callback",
          "[agent][resync]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    std::vector<AgentError> refusals;
    resync_guest_ahead(client, [&](const AgentError& e) { refusals.push_back(e); });
    CHECK(refusals.empty());  // sent, not waited for
    // The command after it on the same connection: the agent answers the RESYNC
    // first, and the client reads that answer while it waits for the command.
    const ExecResult result = client.run(Command::shell_command("echo after"));
    CHECK(result.status.success());
    CHECK(result.stdout_data == "after\n");
    REQUIRE(refusals.size() == 1);
    CHECK(refusals[0].errno_name() == "EOPNOTSUPP");
    CHECK(refusals[0].message() == "resync: the agent is not running in a guest");
    // Forgotten once answered: the connection goes on with nothing left in flight.
    client.ping();
    CHECK(client.run(Command::program({"true"})).status.success());
    CHECK(refusals.size() == 1);
    // Checked before anything is sent, as resync() is.
    CHECK_THROWS_AS(client.resync_ahead(entropy(31), kSomeTimeNs, nullptr), std::invalid_argument);
    CHECK_THROWS_AS(client.resync_ahead(entropy(64), -1, nullptr), std::invalid_argument);
    client.ping();
}

TEST_CASE("the client refuses a RESYNC the agent would take as malformed", "[agent][resync]") {
    AgentProcess agent;
    AgentClient client = agent.connect();
    CHECK_THROWS_AS(client.resync(entropy(31), kSomeTimeNs, ""), std::invalid_argument);
    CHECK_THROWS_AS(client.resync(entropy(513), kSomeTimeNs, ""), std::invalid_argument);
    CHECK_THROWS_AS(client.resync(entropy(64), -1, ""), std::invalid_argument);
    CHECK_THROWS_AS(client.resync(entropy(64), kSomeTimeNs, "bad_name"), std::invalid_argument);
    CHECK_THROWS_AS(client.resync(entropy(64), kSomeTimeNs, std::string(65, 'a')), std::invalid_argument);
    // Nothing was sent: the connection is fine.
    client.ping();
}

TEST_CASE("a well-formed raw RESYNC gets ERROR EOPNOTSUPP for its id", "[agent][resync]") {
    AgentProcess agent;
    Fd fd = agent.raw_connect(true);
    for (size_t bytes : {proto::kMinResyncEntropyBytes, proto::kMaxResyncEntropyBytes}) {
        send_frame(fd.get(), MessageType::kResync, 7, proto::encode(request(bytes, "")));
        uint32_t id = 0;
        proto::ErrorReport error;
        CHECK(answer(fd.get(), id, error) == MessageType::kError);
        CHECK(id == 7);
        CHECK(error.errno_name == "EOPNOTSUPP");
    }
    CHECK(pongs(fd.get()));
}

TEST_CASE("a malformed RESYNC closes that connection with EBADMSG; the agent serves on", "[agent][resync]") {
    AgentProcess agent;
    AgentClient bystander = agent.connect();
    const RequestId running = bystander.start(Command::shell_command("sleep 0.3; echo fine"));
    struct Bad {
        const char* what;
        std::string payload;
    };
    const std::vector<Bad> bad{
        {"31 bytes of entropy", proto::encode(request(31, ""))},
        {"513 bytes of entropy", proto::encode(request(513, ""))},
        {"a hostname with '_'", proto::encode(request(64, "a_b"))},
        {"a 65-byte hostname", proto::encode(request(64, std::string(65, 'h')))},
        {"trailing bytes", proto::encode(request(64, "ok")) + "x"},
    };
    for (const Bad& b : bad) {
        INFO(b.what);
        Fd fd = agent.raw_connect(true);
        send_frame(fd.get(), MessageType::kResync, 3, b.payload);
        uint32_t id = 99;
        proto::ErrorReport error;
        CHECK(answer(fd.get(), id, error) == MessageType::kError);
        CHECK(id == 0);
        CHECK(error.errno_name == "EBADMSG");
        CHECK(error.message == "malformed RESYNC");
        CHECK(reads_eof(fd.get()));
        // A new connection is served at once.
        Fd next = agent.raw_connect(true);
        CHECK(pongs(next.get()));
    }
    CHECK(bystander.wait(running).stdout_data == "fine\n");
    bystander.ping();
}

TEST_CASE("RESYNC on a connection that negotiated protocol version 1 is a protocol error", "[agent][resync]") {
    AgentProcess agent;
    Fd fd = agent.raw_connect(true, 1);  // throws unless the agent answers version 1
    CHECK(pongs(fd.get()));
    send_frame(fd.get(), MessageType::kResync, 1, proto::encode(request(64, "")));
    uint32_t id = 99;
    proto::ErrorReport error;
    CHECK(answer(fd.get(), id, error) == MessageType::kError);
    CHECK(id == 0);
    CHECK(error.errno_name == "EPROTO");
    CHECK(error.message == "RESYNC needs protocol version 2; this connection speaks 1");
    CHECK(reads_eof(fd.get()));
}

TEST_CASE("the agent answers HELLO with the highest version both speak", "[agent][resync]") {
    AgentProcess agent;
    Fd fd = agent.raw_connect(false);
    send_frame(fd.get(), MessageType::kHello, 0,
               proto::encode(proto::Hello{proto::kMinProtocolVersion, proto::kProtocolVersion + 5, "newer"}));
    uint32_t id = 99;
    MessageType type{};
    std::string payload;
    REQUIRE(read_frame(fd.get(), type, id, payload));
    REQUIRE(type == MessageType::kHelloReply);
    proto::HelloReply reply;
    REQUIRE(proto::decode(payload, reply));
    CHECK(reply.version == proto::kProtocolVersion);
}
