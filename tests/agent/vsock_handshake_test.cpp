// The client's vsock connect option: the VMM's `CONNECT <port>\n` / `OK <n>\n`
// handshake, against a fake VMM socket that relays to a nanovm-agent.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <thread>

#include "tests/agent/agent_fixture.hpp"

using namespace nanovm::agent;
using namespace nanovm::agent::testing;
using nanovm::Fd;

namespace {

// Listens on `path`; for one connection reads the CONNECT line, then either answers
// `OK 1025\n` and relays bytes to `agent_socket`, or (refuse) closes.
class FakeVmm {
public:
    FakeVmm(std::string path, std::string agent_socket, bool refuse)
        : path_(std::move(path)), agent_socket_(std::move(agent_socket)), refuse_(refuse) {
        listener_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        std::strcpy(sa.sun_path, path_.c_str());
        REQUIRE(::bind(listener_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
        REQUIRE(::listen(listener_.get(), 1) == 0);
        thread_ = std::thread([this] { serve(); });
    }
    ~FakeVmm() {
        ::shutdown(listener_.get(), SHUT_RDWR);
        thread_.join();
    }
    std::string line() const { return line_; }

private:
    void serve() {
        Fd host(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (!host) return;
        char c;
        while (::read(host.get(), &c, 1) == 1 && c != '\n') line_ += c;
        if (refuse_) return;
        Fd guest = connect_endpoint(Endpoint::unix_socket(agent_socket_), std::chrono::seconds(5));
        const int flags = ::fcntl(guest.get(), F_GETFL);
        ::fcntl(guest.get(), F_SETFL, flags & ~O_NONBLOCK);
        const std::string ok = "OK 1025\n";
        if (::write(host.get(), ok.data(), ok.size()) != static_cast<ssize_t>(ok.size())) return;
        char buf[65536];
        for (;;) {
            pollfd p[2] = {{host.get(), POLLIN, 0}, {guest.get(), POLLIN, 0}};
            if (::poll(p, 2, 10000) <= 0) return;
            for (int i = 0; i < 2; ++i) {
                if (!(p[i].revents & (POLLIN | POLLHUP))) continue;
                const ssize_t n = ::read(p[i].fd, buf, sizeof buf);
                if (n <= 0) return;
                const int to = i == 0 ? guest.get() : host.get();
                if (::write(to, buf, static_cast<size_t>(n)) != n) return;
            }
        }
    }
    std::string path_, agent_socket_;
    bool refuse_;
    Fd listener_;
    std::string line_;
    std::thread thread_;
};

}  // namespace

TEST_CASE("the vsock option sends CONNECT <port> and speaks the protocol after OK", "[agent][vsock]") {
    AgentProcess agent;
    const std::string vmm_path = agent.dir() + "/vmm.vsock";
    FakeVmm vmm(vmm_path, agent.socket_path(), false);
    {
        AgentClient client = AgentClient::connect(Endpoint::vsock(vmm_path, nanovm::agent::proto::kAgentVsockPort));
        CHECK(client.run(Command::program({"echo", "through the vmm"})).stdout_data == "through the vmm\n");
    }
    CHECK(vmm.line() == "CONNECT 1024");
}

TEST_CASE("a refused vsock handshake is an error", "[agent][vsock]") {
    AgentProcess agent;
    const std::string vmm_path = agent.dir() + "/vmm.vsock";
    FakeVmm vmm(vmm_path, agent.socket_path(), true);
    CHECK_THROWS_AS(AgentClient::connect(Endpoint::vsock(vmm_path, 1024), std::chrono::seconds(2)), std::runtime_error);
}

TEST_CASE("the OK line is read to its newline and no further, in pieces or with bytes after it", "[agent][vsock]") {
    // A VMM whose answer comes in two writes, the second carrying bytes past the line:
    // those must be left on the connection for the agent protocol.
    AgentProcess agent;  // for its private directory
    const std::string path = agent.dir() + "/split.vsock";
    Fd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strcpy(sa.sun_path, path.c_str());
    REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    REQUIRE(::listen(listener.get(), 1) == 0);
    std::thread vmm([&] {
        Fd host(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
        char c;
        while (::read(host.get(), &c, 1) == 1 && c != '\n') {
        }
        (void)!::write(host.get(), "OK 10", 5);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        (void)!::write(host.get(), "25\nafter", 8);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    });
    Fd fd = connect_endpoint(Endpoint::vsock(path, 1024), std::chrono::seconds(5));
    pollfd p{fd.get(), POLLIN, 0};
    REQUIRE(::poll(&p, 1, 5000) == 1);
    char buf[16] = {};
    CHECK(::recv(fd.get(), buf, sizeof buf, 0) == 5);
    CHECK(std::string(buf, 5) == "after");
    vmm.join();
}
