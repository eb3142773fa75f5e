// The control socket server and client (api/vm/control_server.hpp,
// control_client.hpp) over a real Unix socket, with handlers made for the test.
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "api/vm/control_client.hpp"
#include "api/vm/control_server.hpp"
#include "tests/support/temp_dir.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"

using namespace nanovm;
using namespace nanovm::vm;
using nlohmann::json;

namespace {

struct Rig {
    test::TempDir dir{"control"};
    ControlServer server{dir.file("control.sock")};
    int stops = 0;
    Rig() {
        server.add_command("echo", [](const ControlRequest& r) { return r.body; });
        server.add_command("stop", [this](const ControlRequest&) {
            ++stops;
            return json{{"state", "stopping"}};
        });
        server.add_command("refuse", [](const ControlRequest&) -> json {
            throw ControlCommandError("cannot refuse: the VM is stopping");
        });
        server.start();
    }
};

Fd connect_raw(const std::string& path) {
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    REQUIRE(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0);
    return fd;
}

// Reads until `lines` newlines arrived or the peer closed (2 s at most).
std::string read_lines(int fd, size_t lines) {
    std::string got;
    while (static_cast<size_t>(std::count(got.begin(), got.end(), '\n')) < lines) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 2000) <= 0) break;
        char buf[4096];
        const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) break;
        got.append(buf, static_cast<size_t>(n));
    }
    return got;
}

bool peer_closed(int fd) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 2000) <= 0) return false;
    char c;
    return ::recv(fd, &c, 1, 0) == 0;
}

}  // namespace

TEST_CASE("control: a command's handler answers through the client", "[api][vm][control]") {
    Rig rig;
    const json answer = control_call(rig.server.path(), "echo", json{{"x", 41}});
    CHECK(answer["ok"] == true);
    CHECK(answer["command"] == "echo");
    CHECK(answer["x"] == 41);
    CHECK(control_call(rig.server.path(), "stop")["state"] == "stopping");
    CHECK(rig.stops == 1);
}

TEST_CASE("control: the socket is private to its owner", "[api][vm][control]") {
    Rig rig;
    struct stat st {};
    REQUIRE(::stat(rig.server.path().c_str(), &st) == 0);
    CHECK(S_ISSOCK(st.st_mode));
    CHECK((st.st_mode & 0777) == 0600);
}

TEST_CASE("control: refusals and unknown commands are ok:false answers naming the reason", "[api][vm][control]") {
    Rig rig;
    CHECK_THROWS_WITH(control_call(rig.server.path(), "refuse"), "refuse: cannot refuse: the VM is stopping");
    CHECK_THROWS_WITH(control_call(rig.server.path(), "fly"),
                      Catch::Contains("unknown command \"fly\"") && Catch::Contains("echo, refuse, stop"));
}

TEST_CASE("control: pipelined requests on one connection are answered in order", "[api][vm][control]") {
    Rig rig;
    Fd fd = connect_raw(rig.server.path());
    const std::string requests = "{\"command\":\"echo\",\"n\":1}\nnot json\n\n{\"command\":\"echo\",\"n\":2}\n";
    REQUIRE(::send(fd.get(), requests.data(), requests.size(), 0) == static_cast<ssize_t>(requests.size()));
    const std::string got = read_lines(fd.get(), 3);
    std::vector<json> answers;
    size_t start = 0;
    for (size_t nl; (nl = got.find('\n', start)) != std::string::npos; start = nl + 1)
        answers.push_back(json::parse(got.substr(start, nl - start)));
    REQUIRE(answers.size() == 3);
    CHECK(answers[0]["n"] == 1);
    CHECK(answers[1]["ok"] == false);
    CHECK(answers[1]["error"] == "request: not JSON");
    CHECK(answers[2]["n"] == 2);
}

TEST_CASE("control: a line over the limit gets an error, then the connection closes", "[api][vm][control]") {
    Rig rig;
    Fd fd = connect_raw(rig.server.path());
    const std::string huge(kMaxControlLine + 100, 'x');
    size_t sent = 0;
    while (sent < huge.size()) {
        const ssize_t n = ::send(fd.get(), huge.data() + sent, huge.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
    }
    const std::string got = read_lines(fd.get(), 1);
    CHECK(got.find("longer than") != std::string::npos);
    CHECK(peer_closed(fd.get()));
    // The server goes on serving others.
    CHECK(control_call(rig.server.path(), "echo")["ok"] == true);
}

TEST_CASE("control: clients beyond the limit are turned away, the others still served", "[api][vm][control]") {
    Rig rig;
    std::vector<Fd> held;
    for (size_t i = 0; i < ControlServer::kMaxConnections; ++i) held.push_back(connect_raw(rig.server.path()));
    // Accepted in connection order: the server has all of them when it gets to this one.
    Fd extra = connect_raw(rig.server.path());
    CHECK(read_lines(extra.get(), 1).find("too many") != std::string::npos);
    const std::string req = "{\"command\":\"echo\"}\n";
    REQUIRE(::send(held.front().get(), req.data(), req.size(), 0) > 0);
    CHECK(read_lines(held.front().get(), 1).find("\"ok\":true") != std::string::npos);
}

TEST_CASE("control client: a missing socket or a silent server is one clear error", "[api][vm][control]") {
    test::TempDir dir("control-client");
    CHECK_THROWS_WITH(control_call(dir.file("nothing.sock"), "status"),
                      Catch::Contains("nothing.sock") && Catch::Contains("No such file"));
    // A listener that never answers.
    Fd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string path = dir.file("silent.sock");
    std::memcpy(addr.sun_path, path.data(), path.size());
    REQUIRE(::bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(listener.get(), 1) == 0);
    CHECK_THROWS_WITH(control_call(path, "status", nullptr, std::chrono::milliseconds(100)),
                      Catch::Contains("no answer in 100 ms"));
}
