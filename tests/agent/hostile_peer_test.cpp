// The client against a hostile agent (issue 15): a fake peer on a Unix socket that
// answers HELLO and then only what a test tells it to -- never SHUTDOWN, never PONG,
// never a command's EXIT. Every wait of the client ends by its deadline, and the
// text such a peer sends (errno names, messages) reaches the user printable-only.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "tests/agent/agent_fixture.hpp"

using namespace nanovm;
using namespace nanovm::agent;
using namespace nanovm::agent::testing;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

/// What the fake agent does with one frame from the client: `fd` to answer on.
using FrameHandler = std::function<void(int fd, proto::MessageType type, uint32_t id, const std::string& payload)>;

/// A fake agent serving one connection on its own thread: HELLO_REPLY, then each
/// frame goes to `on_frame` (default: ignored, so nothing is ever answered).
class FakeAgent {
public:
    explicit FakeAgent(FrameHandler on_frame = {}) : on_frame_(std::move(on_frame)) {
        std::string dir = (std::filesystem::temp_directory_path() / "nanovm-fake-agent-XXXXXX").string();
        REQUIRE(::mkdtemp(dir.data()) != nullptr);
        dir_ = dir;
        path_ = dir_ + "/agent.sock";
        listener_ = Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        path_.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
        REQUIRE(::bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
        REQUIRE(::listen(listener_.get(), 4) == 0);
        thread_ = std::thread([this] { serve(); });
    }
    ~FakeAgent() {
        stop_ = true;
        ::shutdown(listener_.get(), SHUT_RDWR);
        {
            std::lock_guard lock(mutex_);
            if (conn_ >= 0) ::shutdown(conn_, SHUT_RDWR);
        }
        thread_.join();
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    FakeAgent(const FakeAgent&) = delete;
    FakeAgent& operator=(const FakeAgent&) = delete;

    AgentClient connect() const { return AgentClient::connect(Endpoint::unix_socket(path_), 5s); }
    /// Frames received after HELLO.
    int frames() const { return frames_.load(); }

private:
    void serve() {
        pollfd p{listener_.get(), POLLIN, 0};
        if (::poll(&p, 1, 10000) <= 0 || stop_) return;
        Fd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (!conn) return;
        {
            std::lock_guard lock(mutex_);
            conn_ = conn.get();
        }
        proto::MessageType type;
        uint32_t id = 0;
        std::string payload;
        if (read_frame(conn.get(), type, id, payload) && type == proto::MessageType::kHello) {
            send_frame(conn.get(), proto::MessageType::kHelloReply, proto::kConnectionId,
                       proto::encode(proto::HelloReply{proto::kProtocolVersion, proto::kMaxPayload, "fake agent"}));
            while (!stop_ && read_frame(conn.get(), type, id, payload)) {
                ++frames_;
                if (on_frame_) on_frame_(conn.get(), type, id, payload);
            }
        }
        std::lock_guard lock(mutex_);
        conn_ = -1;
    }

    std::string dir_;
    std::string path_;
    Fd listener_;
    FrameHandler on_frame_;
    std::thread thread_;
    std::mutex mutex_;
    int conn_ = -1;
    std::atomic<bool> stop_{false};
    std::atomic<int> frames_{0};
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

bool all_printable(const std::string& s) {
    for (const char c : s)
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) == 0x7f) return false;
    return true;
}

}  // namespace

TEST_CASE("a peer that answers HELLO and never SHUTDOWN: shutdown() ends at the connection's deadline",
          "[agent][hostile]") {
    FakeAgent peer;
    AgentClient client = peer.connect();
    const auto t0 = Clock::now();
    client.set_deadline(t0 + 300ms);
    CHECK_THROWS_AS(client.shutdown(), TimeoutError);
    const double took = seconds_since(t0);
    CHECK(took >= 0.29);
    CHECK(took < 2.0);
    CHECK(peer.frames() == 1);  // the SHUTDOWN arrived; nothing came back
}

TEST_CASE("a peer that never answers: ping, stat and a file read end after reply_timeout", "[agent][hostile]") {
    FakeAgent peer;
    AgentClient client = peer.connect();
    ClientLimits limits;
    limits.reply_timeout = 200ms;
    client.set_limits(limits);
    auto t0 = Clock::now();
    SECTION("ping") { CHECK_THROWS_AS(client.ping(), TimeoutError); }
    SECTION("stat") { CHECK_THROWS_AS(client.stat("/etc/hostname"), TimeoutError); }
    SECTION("read_file") { CHECK_THROWS_AS(client.read_file("/etc/hostname"), TimeoutError); }
    SECTION("resync") { CHECK_THROWS_AS(resync_guest(client, "vm1"), TimeoutError); }
    const double took = seconds_since(t0);
    CHECK(took >= 0.19);
    CHECK(took < 2.0);
}

TEST_CASE("a peer that keeps a request alive with frames gets reply_timeout per silence, not in all",
          "[agent][hostile]") {
    // READ_DATA every 100 ms, DONE after 600 ms: progress, so a 250 ms idle bound holds.
    FakeAgent peer([](int fd, proto::MessageType type, uint32_t id, const std::string&) {
        if (type != proto::MessageType::kFileRead) return;
        for (int i = 0; i < 6; ++i) {
            std::this_thread::sleep_for(100ms);
            send_frame(fd, proto::MessageType::kReadData, id, "chunk");
        }
        send_frame(fd, proto::MessageType::kDone, id, proto::encode(proto::DoneReport{30}));
    });
    AgentClient client = peer.connect();
    ClientLimits limits;
    limits.reply_timeout = 250ms;
    client.set_limits(limits);
    CHECK(client.read_file("/x") == "chunkchunkchunkchunkchunkchunk");
}

TEST_CASE("a command's end is awaited until its timeout plus exit_grace, and no longer", "[agent][hostile]") {
    FakeAgent peer;
    AgentClient client = peer.connect();
    ClientLimits limits;
    limits.exit_grace = 200ms;
    client.set_limits(limits);
    Command command = Command::program({"sleep", "100"});
    command.timeout = 300ms;
    const auto t0 = Clock::now();
    const RequestId id = client.start(command);
    REQUIRE(client.deadline_for(id));
    CHECK_THROWS_AS(client.wait(id), TimeoutError);
    const double took = seconds_since(t0);
    CHECK(took >= 0.49);
    CHECK(took < 2.5);
}

TEST_CASE("a command without a timeout has no bound of its own; set_deadline still ends its wait",
          "[agent][hostile]") {
    FakeAgent peer;
    AgentClient client = peer.connect();
    const RequestId id = client.start(Command::program({"sleep", "100"}));
    CHECK_FALSE(client.deadline_for(id));
    const auto t0 = Clock::now();
    client.set_deadline(t0 + 200ms);
    REQUIRE(client.deadline_for(id));
    CHECK_THROWS_AS(client.wait(id), TimeoutError);
    CHECK(seconds_since(t0) < 2.0);
    CHECK_THROWS_AS(client.poll(10ms), TimeoutError);  // past the deadline: every wait refuses
}

TEST_CASE("a job's end is awaited past reply_timeout (a job may run silently), up to the connection's deadline",
          "[agent][hostile][jobs]") {
    FakeAgent peer;
    AgentClient client = peer.connect();
    ClientLimits limits;
    limits.reply_timeout = 200ms;
    client.set_limits(limits);
    const auto t0 = Clock::now();
    client.set_deadline(t0 + 700ms);
    SECTION("wait_job") { CHECK_THROWS_AS(client.wait_job(1), TimeoutError); }
    SECTION("a followed attach") { CHECK_THROWS_AS(client.wait(client.attach_job(1, 0, 0, true)), TimeoutError); }
    const double took = seconds_since(t0);
    CHECK(took >= 0.69);
    CHECK(took < 3.0);
}

TEST_CASE("errno names and messages from the agent are printable-only", "[agent][hostile]") {
    const std::string evil_name = "E\x1b[2J\rNOENT";
    const std::string evil_message = "open \x1b]0;owned\x07/x\n\xc2\x9b" "31m \xe2\x80\xae" "txt.exe \xff";
    FakeAgent peer([&](int fd, proto::MessageType type, uint32_t id, const std::string&) {
        if (type == proto::MessageType::kStat)
            send_frame(fd, proto::MessageType::kError, id, proto::encode(proto::ErrorReport{evil_name, evil_message}));
        if (type == proto::MessageType::kMkdir)  // a fatal error on the connection
            send_frame(fd, proto::MessageType::kError, proto::kConnectionId,
                       proto::encode(proto::ErrorReport{evil_name, evil_message}));
    });
    AgentClient client = peer.connect();
    try {
        client.stat("/x");
        FAIL("no AgentError");
    } catch (const AgentError& e) {
        INFO(e.what());
        CHECK(all_printable(e.what()));
        CHECK(all_printable(e.errno_name()));
        CHECK(all_printable(e.message()));
        CHECK(e.errno_name() == "E\\x1b[2J\\x0dNOENT");
        CHECK(e.message() == "open \\x1b]0;owned\\x07/x\\x0a\\xc2\\x9b31m \\xe2\\x80\\xaetxt.exe \\xff");
    }
    try {
        client.mkdir("/y");
        FAIL("no ConnectionError");
    } catch (const ConnectionError& e) {
        INFO(e.what());
        CHECK(all_printable(e.what()));
    }
}
