// Handing a fork child to a standby VMM (api/vm/standby_handoff.hpp): the claim's
// JSON, its validation, and a whole claim over a real socket with real fds.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "api/vm/standby_handoff.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"

using namespace nanovm;
using namespace nanovm::vm;
using namespace std::chrono_literals;

namespace {

VmmOptions fork_child() {
    VmmOptions o;
    o.id = "0123456789ab";
    o.cpus = 2;
    o.memory_mib = 1024;
    o.image = "";
    o.disks = {"/srv/a.img,ro"};
    o.boot_timeout = 45s;
    o.restore_dir = "/run/nanovm/forks/base-1";
    o.memory_backend = "file";
    o.fork_memory = "100:7:4242,100:8:4243";
    o.fork_delta = "100:9:4244";
    o.fork_standby = 3;
    o.run_dir = "/srv/nanovm state";
    o.keep_dir = true;
    return o;
}

struct TempDir {
    std::string path;
    TempDir() {
        char tmpl[] = "/tmp/nanovm-handoff-XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
};

Fd listen_seqpacket(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    Fd sock(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    REQUIRE(sock);
    REQUIRE(::bind(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(sock.get(), 4) == 0);
    return sock;
}

}  // namespace

TEST_CASE("a standby claim's options and environment round-trip through JSON", "[api][vm][standby]") {
    const VmmOptions o = fork_child();
    const VmmEnvironment env{{"NANOVM_KEEP_STATE", "1"}, {"NANOVM_RUN_DIR", "/srv/run dir"}, {"HOME", "/root"}};
    const DecodedClaim decoded = decode_claim(encode_claim(o, env));
    CHECK(decoded.env == env);
    const VmmOptions& back = decoded.options;
    CHECK(back.id == o.id);
    CHECK(back.run_dir == "/srv/nanovm state");
    CHECK(back.keep_dir);
    CHECK(back.cpus == 2);
    CHECK(back.memory_mib == 1024);
    CHECK(back.disks == o.disks);
    CHECK(back.boot_timeout == 45s);
    CHECK(back.restore_dir == o.restore_dir);
    CHECK(back.memory_backend == "file");
    CHECK(back.fork_memory == o.fork_memory);
    CHECK(back.fork_delta == o.fork_delta);
    CHECK(back.fork_standby == 3);
    CHECK(back.lock_fd == -1);
    CHECK(back.ready_fd == -1);
}

TEST_CASE("a malformed standby claim is refused naming the field", "[api][vm][standby]") {
    const auto with = [](const char* key, nlohmann::json value) {
        nlohmann::json j = nlohmann::json::parse(encode_claim(fork_child(), {}));
        j[key] = std::move(value);
        return j.dump();
    };
    const auto decode_vmm_options = [](std::string_view text) { return decode_claim(text).options; };
    CHECK_THROWS_WITH(decode_vmm_options("{"), Catch::Contains("not JSON"));
    CHECK_THROWS_WITH(decode_vmm_options("[1]"), Catch::Contains("not a JSON object"));
    CHECK_THROWS_WITH(decode_vmm_options("{}"), Catch::Contains("no 'id'"));
    CHECK_THROWS_WITH(decode_vmm_options(with("id", "../../etc")), Catch::Contains("not a VM id"));
    CHECK_THROWS_WITH(decode_vmm_options(with("run_dir", "relative/dir")), Catch::Contains("not an absolute path"));
    CHECK_THROWS_WITH(decode_vmm_options(with("keep_dir", 1)), Catch::Contains("'keep_dir' has the wrong type"));
    CHECK_THROWS_WITH(decode_vmm_options(with("cpus", 9)), Catch::Contains("cpus 9"));
    CHECK_THROWS_WITH(decode_vmm_options(with("cpus", "two")), Catch::Contains("'cpus' has the wrong type"));
    CHECK_THROWS_WITH(decode_vmm_options(with("memory_mib", 64)), Catch::Contains("memory_mib 64"));
    CHECK_THROWS_WITH(decode_vmm_options(with("boot_timeout_ms", 0)), Catch::Contains("boot_timeout_ms 0"));
    CHECK_THROWS_WITH(decode_vmm_options(with("fork_standby", 5)), Catch::Contains("fork_standby 5"));
    CHECK_THROWS_WITH(decode_vmm_options(with("disks", "a")), Catch::Contains("'disks' has the wrong type"));
    CHECK_THROWS_WITH(decode_vmm_options(with("env", {{"LD_PRELOAD", "/x.so"}})),
                      Catch::Contains("'LD_PRELOAD' is not a nanovm variable"));
    CHECK_THROWS_WITH(decode_vmm_options(with("env", {{"NANOVM_", "1"}})), Catch::Contains("not a nanovm variable"));
    CHECK_THROWS_WITH(decode_vmm_options(with("env", {{"NANOVM_x", "1"}})), Catch::Contains("not a nanovm variable"));
    CHECK_THROWS_WITH(decode_vmm_options(with("env", {{"NANOVM_KEEP_STATE", std::string("1\0", 2)}})),
                      Catch::Contains("holds a NUL"));
    CHECK_THROWS_WITH(decode_vmm_options(with("env", 3)), Catch::Contains("'env' has the wrong type"));
}

TEST_CASE("a standby takes the launcher's nanovm environment: set what it has, unset the rest", "[api][vm][standby]") {
    ::setenv("NANOVM_TEST_HANDOFF_A", "parent", 1);
    ::unsetenv("NANOVM_TEST_HANDOFF_B");
    ::setenv("UNRELATED_HANDOFF_VAR", "kept", 1);
    VmmEnvironment env = vmm_environment();
    CHECK(env.at("NANOVM_TEST_HANDOFF_A") == "parent");
    CHECK_FALSE(env.contains("UNRELATED_HANDOFF_VAR"));
    env.erase("NANOVM_TEST_HANDOFF_A");
    env["NANOVM_TEST_HANDOFF_B"] = "launcher";
    apply_vmm_environment(env);
    CHECK(std::getenv("NANOVM_TEST_HANDOFF_A") == nullptr);
    CHECK(std::string(std::getenv("NANOVM_TEST_HANDOFF_B")) == "launcher");
    CHECK(std::string(std::getenv("UNRELATED_HANDOFF_VAR")) == "kept");
    CHECK(vmm_environment() == env);
    ::unsetenv("NANOVM_TEST_HANDOFF_B");
    ::unsetenv("UNRELATED_HANDOFF_VAR");
}

TEST_CASE("a standby claim passes the options, the lock and the readiness pipe; a refusal or no listener falls "
          "back",
          "[api][vm][standby]") {
    TempDir dir;
    const std::string path = dir.path + "/standby-0.sock";
    std::string why;
    int lock_pipe[2], ready_pipe[2];
    REQUIRE(::pipe2(lock_pipe, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(ready_pipe, O_CLOEXEC) == 0);
    const Fd lock_read(lock_pipe[0]), lock_write(lock_pipe[1]), ready_read(ready_pipe[0]), ready_write(ready_pipe[1]);

    // Nothing listens yet.
    CHECK_FALSE(hand_to_standby(path, fork_child(), lock_write.get(), ready_write.get(), 1s, why));
    CHECK_THAT(why, Catch::Contains("connect") && Catch::Contains("standby-0.sock"));

    const Fd listener = listen_seqpacket(path);
    SECTION("taken") {
        StandbyClaim claim;
        std::thread standby([&] {
            const Fd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
            claim = receive_claim(conn.get(), 2000ms);
            answer_claim(conn.get(), "ok");
        });
        const auto pid = hand_to_standby(path, fork_child(), lock_write.get(), ready_write.get(), 2s, why);
        standby.join();
        REQUIRE(pid);
        CHECK(*pid == ::getpid());
        CHECK(claim.options.id == "0123456789ab");
        CHECK(claim.options.fork_memory == "100:7:4242,100:8:4243");
        CHECK(claim.env == vmm_environment());
        // The fds that arrived are the launcher's pipes.
        REQUIRE(::write(claim.ready.get(), "ready\n", 6) == 6);
        char buf[16] = {};
        CHECK(::read(ready_read.get(), buf, sizeof(buf)) == 6);
        CHECK(std::string(buf) == "ready\n");
        REQUIRE(::write(claim.lock.get(), "x", 1) == 1);
        CHECK(::read(lock_read.get(), buf, 1) == 1);
        CHECK((::fcntl(claim.ready.get(), F_GETFD) & FD_CLOEXEC) != 0);
    }
    SECTION("refused") {
        std::thread standby([&] {
            const Fd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
            (void)receive_claim(conn.get(), 2000ms);
            answer_claim(conn.get(), "no: busy");
        });
        CHECK_FALSE(hand_to_standby(path, fork_child(), lock_write.get(), ready_write.get(), 2s, why));
        standby.join();
        CHECK_THAT(why, Catch::Contains("no: busy"));
    }
    SECTION("closed without an answer") {
        std::thread standby([&] {
            // Closes once the claim is there (a close before it would fail the send instead).
            const Fd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
            pollfd p{conn.get(), POLLIN, 0};
            ::poll(&p, 1, 2000);
        });
        CHECK_FALSE(hand_to_standby(path, fork_child(), lock_write.get(), ready_write.get(), 2s, why));
        standby.join();
        CHECK_THAT(why, Catch::Contains("closed without answering"));
    }
    SECTION("a claim without its fds, or of bad JSON, is refused by the standby") {
        const auto send_raw = [&](const std::string& body) {
            sockaddr_un addr{};
            addr.sun_family = AF_UNIX;
            std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
            Fd c(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
            REQUIRE(::connect(c.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0);
            REQUIRE(::send(c.get(), body.data(), body.size(), 0) == static_cast<ssize_t>(body.size()));
            return c;
        };
        const Fd c1 = send_raw(encode_claim(fork_child(), {}));
        {
            const Fd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
            CHECK_THROWS_WITH(receive_claim(conn.get(), 1000ms), Catch::Contains("0 fds attached"));
        }
        const Fd c2 = send_raw("not json");
        {
            const Fd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
            CHECK_THROWS_WITH(receive_claim(conn.get(), 1000ms), Catch::Contains("0 fds attached"));
        }
        const Fd c3 = [&] {
            sockaddr_un addr{};
            addr.sun_family = AF_UNIX;
            std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
            Fd c(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
            REQUIRE(::connect(c.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0);
            return c;
        }();
        const Fd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
        CHECK_THROWS_WITH(receive_claim(conn.get(), 100ms), Catch::Contains("nothing within 100 ms"));
    }
}
