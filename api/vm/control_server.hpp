// The VMM's control socket server: listens on a Unix socket and answers requests of
// the control protocol (control_protocol.hpp) with one handler per command.
//
// It runs on its own EventLoop thread, not the device thread: a handler may block
// (Machine::pause() waits for every vCPU to leave KVM_RUN, and a vCPU in an MMIO exit
// can be waiting for the device thread), and devices must never wait for it.
// Handlers therefore run one at a time, in arrival order, on that thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "api/vm/control_protocol.hpp"
#include "vmm/event_loop.hpp"
#include "vmm/fd.hpp"

namespace nanovm::vm {

/// Serves a control socket. Not copyable or movable.
class ControlServer {
public:
    /// Answers one request: returns the answer's fields (an object, or null for none);
    /// throws ControlCommandError (or any std::exception) to answer ok: false with
    /// what() as the error.
    using Handler = std::function<nlohmann::json(const ControlRequest& request)>;

    /// At most this many clients at once; more are accepted and closed at once.
    static constexpr size_t kMaxConnections = 16;

    /// Binds `socket_path` (mode 0600; a stale socket file there is replaced) and
    /// listens. Throws SysError naming the call and path.
    explicit ControlServer(std::string socket_path);
    /// Stops serving, closes every connection and removes the socket file.
    ~ControlServer();
    ControlServer(const ControlServer&) = delete;
    ControlServer& operator=(const ControlServer&) = delete;

    /// Registers the handler of `command`. Only before start().
    void add_command(std::string command, Handler handler);
    /// Starts accepting connections.
    void start();
    /// The socket's path.
    const std::string& path() const noexcept { return path_; }

private:
    struct Connection;
    void accept_clients();
    void on_client(int fd, uint32_t events);
    bool flush(Connection& c);  // false: the connection was closed
    void close_client(int fd);
    std::string dispatch(const std::string& line);

    std::string path_;
    Fd listener_;
    std::map<std::string, Handler> handlers_;
    std::map<int, std::unique_ptr<Connection>> clients_;  // loop thread only
    bool started_ = false;
    EventLoop loop_;  // last: destroyed first, so no handler runs once the rest goes
};

}  // namespace nanovm::vm
