// The agent protocol's framing and payload codecs (guest-init/protocol/), no agent.
#include <catch2/catch.hpp>

#include "guest-init/protocol/errno_names.hpp"
#include "guest-init/protocol/frame.hpp"
#include "guest-init/protocol/frame_io.hpp"
#include "guest-init/protocol/messages.hpp"

using namespace nanovm::agent::proto;

namespace {

void feed(FrameParser& parser, std::string_view bytes) {
    char* buf = parser.prepare(bytes.size());
    std::copy(bytes.begin(), bytes.end(), buf);
    parser.commit(bytes.size());
}

}  // namespace

TEST_CASE("frames are split however the bytes arrive", "[agent][protocol]") {
    FrameOutput out;
    out.append(MessageType::kExec, 7, "payload-one");
    out.append(MessageType::kPing, 0, "");
    out.append(MessageType::kStdin, 9, std::string(100000, 'x'));
    const std::string bytes(out.pending());
    REQUIRE(bytes.size() == 3 * kFrameHeaderSize + 11 + 100000);

    for (size_t step : {size_t{1}, size_t{7}, size_t{4096}, bytes.size()}) {
        FrameParser parser(is_client_message);
        std::vector<std::pair<uint32_t, std::string>> got;
        for (size_t off = 0; off < bytes.size(); off += step) {
            feed(parser, std::string_view(bytes).substr(off, step));
            Frame f;
            while (parser.next(f) == FrameParser::Status::kFrame) got.emplace_back(f.id, std::string(f.payload));
        }
        REQUIRE(got.size() == 3);
        CHECK(got[0] == std::make_pair(7u, std::string("payload-one")));
        CHECK(got[1].second.empty());
        CHECK(got[2].second.size() == 100000);
        CHECK_FALSE(parser.mid_frame());
    }
}

TEST_CASE("the parser rejects unknown types and oversized lengths at the header", "[agent][protocol]") {
    unsigned char h[kFrameHeaderSize];
    encode_frame_header(FrameHeader{kMaxPayload + 1, MessageType::kExec, 1}, h);
    FrameParser big(is_client_message);
    feed(big, std::string_view(reinterpret_cast<char*>(h), sizeof h));
    Frame f;
    CHECK(big.next(f) == FrameParser::Status::kOversized);
    CHECK(big.bad_header().payload_length == kMaxPayload + 1);
    CHECK(big.next(f) == FrameParser::Status::kOversized);  // sticks

    encode_frame_header(FrameHeader{0, MessageType::kStdout, 1}, h);  // agent -> client
    FrameParser wrong_way(is_client_message);
    feed(wrong_way, std::string_view(reinterpret_cast<char*>(h), sizeof h));
    CHECK(wrong_way.next(f) == FrameParser::Status::kBadType);
    FrameParser client_side(is_agent_message);
    feed(client_side, std::string_view(reinterpret_cast<char*>(h), sizeof h));
    CHECK(client_side.next(f) == FrameParser::Status::kFrame);

    h[4] = 0x55;
    FrameParser unknown(is_client_message);
    feed(unknown, std::string_view(reinterpret_cast<char*>(h), sizeof h));
    CHECK(unknown.next(f) == FrameParser::Status::kBadType);
}

TEST_CASE("a frame at exactly the payload limit passes", "[agent][protocol]") {
    FrameOutput out;
    out.append(MessageType::kWriteData, 3, std::string(kMaxPayload, 'a'));
    FrameParser parser(is_client_message);
    feed(parser, out.pending());
    Frame f;
    REQUIRE(parser.next(f) == FrameParser::Status::kFrame);
    CHECK(f.payload.size() == kMaxPayload);
}

TEST_CASE("messages survive an encode/decode round trip", "[agent][protocol]") {
    ExecRequest exec;
    exec.argv = {"sh", "-c", "echo 'x'"};
    exec.env = {"A=1", "EMPTY="};
    exec.clear_env = true;
    exec.cwd = "/tmp";
    exec.uid = 1000;
    exec.stdin_stream = true;
    exec.timeout_ms = 1500;
    ExecRequest back;
    REQUIRE(decode(encode(exec), back));
    CHECK(back.argv == exec.argv);
    CHECK(back.env == exec.env);
    CHECK(back.clear_env);
    CHECK(back.cwd == "/tmp");
    CHECK(back.uid == std::optional<uint32_t>(1000));
    CHECK_FALSE(back.gid);
    CHECK(back.stdin_stream);
    CHECK(back.timeout_ms == 1500);

    DirEntries entries{{"a", FileInfo{FileType::kDirectory, 0755, 1, 2, 4096, -5}},
                       {"b", FileInfo{FileType::kSymlink, 0777, 0, 0, 3, 123456789}}};
    DirEntries entries_back;
    REQUIRE(decode(encode(entries), entries_back));
    REQUIRE(entries_back.size() == 2);
    CHECK(entries_back[0].info.mtime_ns == -5);
    CHECK(entries_back[1].info.type == FileType::kSymlink);
    CHECK(encoded_size(entries[0]) + encoded_size(entries[1]) + 4 == encode(entries).size());

    ExitReport exit{true, true, 9};
    ExitReport exit_back;
    REQUIRE(decode(encode(exit), exit_back));
    CHECK(exit_back.signaled);
    CHECK(exit_back.timed_out);
    CHECK(exit_back.value == 9);
}

TEST_CASE("decoders are strict", "[agent][protocol]") {
    PathRequest path;
    CHECK_FALSE(decode("", path));                                              // truncated
    CHECK_FALSE(decode(encode(PathRequest{""}), path));                         // empty path
    CHECK_FALSE(decode(encode(PathRequest{std::string(4096, 'a')}), path));     // too long
    CHECK_FALSE(decode(encode(PathRequest{"/x"}) + "!", path));                 // trailing byte
    CHECK(decode(encode(PathRequest{"/x"}), path));

    ExecRequest exec;
    CHECK_FALSE(decode(encode(ExecRequest{}), exec));  // no argv
    ExecRequest two_shell;
    two_shell.shell = true;
    two_shell.argv = {"a", "b"};
    CHECK_FALSE(decode(encode(two_shell), exec));
    ExecRequest bad_env;
    bad_env.argv = {"x"};
    bad_env.env = {"NOEQUALS"};
    CHECK_FALSE(decode(encode(bad_env), exec));
    bad_env.env = {"=value"};
    CHECK_FALSE(decode(encode(bad_env), exec));
    std::string flags = encode(ExecRequest{{"x"}});
    flags[0] = static_cast<char>(0x80);  // unknown flag bit
    CHECK_FALSE(decode(flags, exec));

    StatRequest stat;
    std::string not_bool = encode(StatRequest{"/", true});
    not_bool[0] = 2;
    CHECK_FALSE(decode(not_bool, stat));

    ChmodRequest chmod;
    CHECK_FALSE(decode(encode(ChmodRequest{"/x", 010000}), chmod));  // beyond 07777

    SignalRequest sig;
    CHECK_FALSE(decode(encode(SignalRequest{65}), sig));
    CHECK(decode(encode(SignalRequest{15}), sig));

    DirEntries entries;
    CHECK_FALSE(decode(std::string("\xff\xff\xff\x0f", 4), entries));  // count beyond the payload
}

TEST_CASE("errno names map both ways", "[agent][protocol]") {
    CHECK(errno_name(ENOENT) == "ENOENT");
    CHECK(errno_name(EACCES) == "EACCES");
    CHECK(errno_name(ENOTDIR) == "ENOTDIR");
    CHECK(errno_name(99999) == "E99999");
    CHECK(errno_from_name("EISDIR") == EISDIR);
    CHECK(errno_from_name("ENOPE") == 0);
}

namespace {

ResyncRequest resync_request(size_t entropy_bytes, std::string hostname) {
    ResyncRequest r;
    r.entropy = std::string(entropy_bytes, '\0');
    for (size_t i = 0; i < entropy_bytes; ++i) r.entropy[i] = static_cast<char>(i * 37 + 1);
    r.wall_clock_ns = 1'700'000'000'123'456'789;
    r.hostname = std::move(hostname);
    return r;
}

}  // namespace

TEST_CASE("RESYNC round-trips its entropy, clock and hostname", "[agent][protocol]") {
    const ResyncRequest sent = resync_request(64, "sandbox-1.example");
    const std::string payload = encode(sent);
    CHECK(payload.size() == 4 + 64 + 8 + 4 + 17);
    ResyncRequest back;
    REQUIRE(decode(payload, back));
    CHECK(back.entropy == sent.entropy);
    CHECK(back.wall_clock_ns == 1'700'000'000'123'456'789);
    CHECK(back.hostname == "sandbox-1.example");

    // The bounds themselves, an empty hostname (keep it) and the epoch are fine.
    CHECK(decode(encode(resync_request(kMinResyncEntropyBytes, "")), back));
    CHECK(back.hostname.empty());
    CHECK(decode(encode(resync_request(kMaxResyncEntropyBytes, std::string(kMaxHostnameBytes, 'h'))), back));
    ResyncRequest epoch = resync_request(32, "a");
    epoch.wall_clock_ns = 0;
    CHECK(decode(encode(epoch), back));
    CHECK(back.wall_clock_ns == 0);
}

TEST_CASE("RESYNC payloads outside the protocol's bounds do not decode", "[agent][protocol]") {
    ResyncRequest out;
    SECTION("entropy: 31 and 513 bytes, or none") {
        CHECK_FALSE(decode(encode(resync_request(31, "")), out));
        CHECK_FALSE(decode(encode(resync_request(513, "")), out));
        CHECK_FALSE(decode(encode(resync_request(0, "")), out));
    }
    SECTION("hostname: characters outside [A-Za-z0-9.-], or longer than 64 bytes") {
        const std::vector<std::string> bad_names{"under_score", "spa ce", "slash/", "colon:", "caf\xc3\xa9", "tab\t",
                                                 std::string("nul\0byte", 8), std::string(kMaxHostnameBytes + 1, 'h')};
        for (const std::string& bad : bad_names) {
            INFO("hostname: " << bad);
            CHECK_FALSE(decode(encode(resync_request(64, bad)), out));
        }
    }
    SECTION("a wall clock before the epoch") {
        ResyncRequest before = resync_request(64, "");
        before.wall_clock_ns = -1;
        CHECK_FALSE(decode(encode(before), out));
    }
    SECTION("trailing or missing bytes") {
        const std::string good = encode(resync_request(64, "host"));
        CHECK(decode(good, out));
        CHECK_FALSE(decode(good + '\0', out));
        CHECK_FALSE(decode(good.substr(0, good.size() - 1), out));
        CHECK_FALSE(decode("", out));
        // An entropy length that runs past the payload.
        std::string lying = good;
        lying[0] = static_cast<char>(0xf0);
        CHECK_FALSE(decode(lying, out));
    }
}

TEST_CASE("hostnames RESYNC takes", "[agent][protocol]") {
    CHECK(valid_hostname("a"));
    CHECK(valid_hostname("Sandbox-01.internal"));
    CHECK(valid_hostname(std::string(kMaxHostnameBytes, '9')));
    CHECK_FALSE(valid_hostname(""));
    CHECK_FALSE(valid_hostname(std::string(kMaxHostnameBytes + 1, 'a')));
    CHECK_FALSE(valid_hostname("a_b"));
}

TEST_CASE("RESYNC is a client message of protocol version 2", "[agent][protocol]") {
    CHECK(is_client_message(MessageType::kResync));
    CHECK_FALSE(is_agent_message(MessageType::kResync));
    CHECK(std::string(message_type_name(MessageType::kResync)) == "RESYNC");
    CHECK(message_first_version(MessageType::kResync) == 2);
    CHECK(message_first_version(MessageType::kExec) == 1);
    CHECK(message_first_version(MessageType::kShutdown) == 1);
    CHECK(message_first_version(MessageType::kSessionClose) == 1);
    for (const MessageType t : {MessageType::kJobStart, MessageType::kJobForget, MessageType::kJobStarted,
                                MessageType::kJobOutput})
        CHECK(message_first_version(t) == 3);
    CHECK(message_first_version(MessageType::kStatReply) == 1);
    CHECK(kMinProtocolVersion <= kProtocolVersion);
    CHECK(message_first_version(MessageType::kResync) <= kProtocolVersion);
}
