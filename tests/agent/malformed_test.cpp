// Malformed input on one connection closes that connection with an ERROR frame; the
// agent keeps serving the others.
#include <sys/socket.h>

#include <catch2/catch.hpp>

#include "guest-init/protocol/frame.hpp"
#include "guest-init/protocol/messages.hpp"
#include "tests/agent/agent_fixture.hpp"

using namespace nanovm::agent;
using namespace nanovm::agent::testing;
using nanovm::Fd;
using proto::MessageType;

namespace {

// Reads the fatal ERROR (id 0) and then the end of the connection; returns the
// errno name ("" if none came).
std::string fatal_error(int fd) {
    MessageType type;
    uint32_t id;
    std::string payload;
    if (!read_frame(fd, type, id, payload) || type != MessageType::kError || id != 0) return "";
    proto::ErrorReport e;
    if (!proto::decode(payload, e)) return "";
    if (!reads_eof(fd)) return "no EOF after " + e.errno_name;
    return e.errno_name;
}

std::string header(uint32_t length, uint8_t type, uint32_t id) {
    unsigned char h[proto::kFrameHeaderSize];
    proto::FrameHeader fh;
    fh.payload_length = length;
    fh.type = static_cast<MessageType>(type);
    fh.id = id;
    proto::encode_frame_header(fh, h);
    return std::string(reinterpret_cast<char*>(h), sizeof h);
}

// A bystander connection with a command running across the failure.
struct Bystander {
    explicit Bystander(const AgentProcess& agent)
        : client(agent.connect()), id(client.start(Command::shell_command("sleep 0.3; echo fine"))) {}
    void check() {
        CHECK(client.wait(id).stdout_data == "fine\n");
        CHECK(client.run(Command::program({"true"})).status.success());
    }
    AgentClient client;
    RequestId id;
};

}  // namespace

TEST_CASE("an unknown message type closes that connection only", "[agent][malformed]") {
    AgentProcess agent;
    Bystander other(agent);
    Fd fd = agent.raw_connect(true);
    send_bytes(fd.get(), header(4, 0x7e, 1) + "abcd");
    CHECK(fatal_error(fd.get()) == "EPROTO");
    // A type that flows the other way is unknown to the agent too.
    Fd fd2 = agent.raw_connect(true);
    send_frame(fd2.get(), MessageType::kStdout, 1, "x");
    CHECK(fatal_error(fd2.get()) == "EPROTO");
    other.check();
}

TEST_CASE("an oversized length closes that connection only", "[agent][malformed]") {
    AgentProcess agent;
    Bystander other(agent);
    Fd fd = agent.raw_connect(true);
    send_bytes(fd.get(), header(proto::kMaxPayload + 1, static_cast<uint8_t>(MessageType::kExec), 1));
    CHECK(fatal_error(fd.get()) == "EMSGSIZE");
    Fd huge = agent.raw_connect(true);
    send_bytes(huge.get(), header(0xffffffffu, static_cast<uint8_t>(MessageType::kWriteData), 1) + "xyz");
    CHECK(fatal_error(huge.get()) == "EMSGSIZE");
    other.check();
}

TEST_CASE("a truncated frame closes that connection only", "[agent][malformed]") {
    AgentProcess agent;
    Bystander other(agent);
    Fd fd = agent.raw_connect(true);
    send_bytes(fd.get(), header(100, static_cast<uint8_t>(MessageType::kExec), 1) + "only ten b");
    ::shutdown(fd.get(), SHUT_WR);
    CHECK(fatal_error(fd.get()) == "EPROTO");
    // Cut inside the header itself.
    Fd fd2 = agent.raw_connect(true);
    send_bytes(fd2.get(), header(0, static_cast<uint8_t>(MessageType::kPing), 0).substr(0, 5));
    ::shutdown(fd2.get(), SHUT_WR);
    CHECK(fatal_error(fd2.get()) == "EPROTO");
    other.check();
}

TEST_CASE("malformed payloads and protocol misuse close that connection only", "[agent][malformed]") {
    AgentProcess agent;
    Bystander other(agent);
    SECTION("a request before HELLO") {
        Fd fd = agent.raw_connect(false);
        send_frame(fd.get(), MessageType::kStat, 1, proto::encode(proto::StatRequest{"/", true}));
        CHECK(fatal_error(fd.get()) == "EPROTO");
    }
    SECTION("an unsupported version") {
        Fd fd = agent.raw_connect(false);
        const uint32_t future = proto::kProtocolVersion + 1;
        send_frame(fd.get(), MessageType::kHello, 0, proto::encode(proto::Hello{future, future + 1, "future"}));
        CHECK(fatal_error(fd.get()) == "EPROTONOSUPPORT");
    }
    SECTION("an EXEC whose argv count exceeds its payload") {
        Fd fd = agent.raw_connect(true);
        std::string payload = proto::encode(proto::ExecRequest{{"true"}});
        payload[1] = '\xff';  // argv count, low byte
        payload[4] = '\x7f';  // argv count, high byte
        send_frame(fd.get(), MessageType::kExec, 1, payload);
        CHECK(fatal_error(fd.get()) == "EBADMSG");
    }
    SECTION("a STAT with trailing bytes") {
        Fd fd = agent.raw_connect(true);
        send_frame(fd.get(), MessageType::kStat, 1, proto::encode(proto::StatRequest{"/", true}) + "junk");
        CHECK(fatal_error(fd.get()) == "EBADMSG");
    }
    SECTION("a path with a NUL byte") {
        Fd fd = agent.raw_connect(true);
        send_frame(fd.get(), MessageType::kFileRead, 1, proto::encode(proto::PathRequest{std::string("/etc\0x", 6)}));
        CHECK(fatal_error(fd.get()) == "EBADMSG");
    }
    SECTION("request id 0") {
        Fd fd = agent.raw_connect(true);
        send_frame(fd.get(), MessageType::kStat, 0, proto::encode(proto::StatRequest{"/", true}));
        CHECK(fatal_error(fd.get()) == "EPROTO");
    }
    SECTION("a request id still in use") {
        Fd fd = agent.raw_connect(true);
        send_frame(fd.get(), MessageType::kExec, 5, proto::encode(proto::ExecRequest{{"sleep", "10"}}));
        send_frame(fd.get(), MessageType::kExec, 5, proto::encode(proto::ExecRequest{{"true"}}));
        CHECK(fatal_error(fd.get()) == "EPROTO");
    }
    SECTION("a bad signal number") {
        Fd fd = agent.raw_connect(true);
        send_frame(fd.get(), MessageType::kSignal, 1, proto::encode(proto::SignalRequest{0}));
        CHECK(fatal_error(fd.get()) == "EBADMSG");
    }
    other.check();
}

TEST_CASE("frames for finished requests are ignored", "[agent][malformed]") {
    AgentProcess agent;
    Fd fd = agent.raw_connect(true);
    send_frame(fd.get(), MessageType::kStdin, 77, "late");
    send_frame(fd.get(), MessageType::kCancel, 78, "");
    send_frame(fd.get(), MessageType::kWriteData, 79, "late");
    send_frame(fd.get(), MessageType::kPing, 0, "still?");
    MessageType type;
    uint32_t id;
    std::string payload;
    REQUIRE(read_frame(fd.get(), type, id, payload));
    CHECK(type == MessageType::kPong);
    CHECK(payload == "still?");
}
