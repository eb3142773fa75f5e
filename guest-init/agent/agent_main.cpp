// nanovm-agent: the guest agent as an ordinary host process, for tests and
// development. The same server as inside a guest, minus PID 1's duties and power
// control.
//
//     nanovm-agent --listen unix:/tmp/agent.sock
//     nanovm-agent --listen vsock:1024
//
// Stops on SIGTERM or SIGINT, killing the commands still running.
#include <unistd.h>

#include <cstring>
#include <string>
#include <string_view>

#include "guest-init/agent/server.hpp"

namespace {

void say(std::string_view line) {
    std::string text(line);
    text += '\n';
    (void)!::write(STDERR_FILENO, text.data(), text.size());
}

constexpr std::string_view kUsage =
    "usage: nanovm-agent --listen unix:<path>|vsock:<port>\n"
    "Serves the nanovm guest agent protocol (guest-init/protocol/) until SIGTERM/SIGINT.";

}  // namespace

int main(int argc, char** argv) {
    using namespace nanovm::agent;
    std::optional<ListenAddress> listen;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            say(kUsage);
            return 0;
        }
        if (arg == "--listen" && i + 1 < argc) {
            listen = parse_listen_address(argv[++i]);
            if (!listen) {
                say(std::string("nanovm-agent: bad listen address: ") + argv[i]);
                return 2;
            }
            continue;
        }
        say(std::string("nanovm-agent: unknown argument: ") + argv[i]);
        say(kUsage);
        return 2;
    }
    if (!listen) {
        say(kUsage);
        return 2;
    }
    ServerOptions options;
    options.listen = *listen;
    options.software = "nanovm-agent (host process)";
    return serve(options);
}
