// State directory and listen address (daemon_options.hpp).
#include "api/daemon/daemon_options.hpp"

#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "api/vm/vm_id.hpp"
#include "vmm/error.hpp"

namespace nanovm::daemon {

std::string default_state_dir() {
    if (const char* env = std::getenv("NANOVM_STATE_DIR"); env && *env) return env;
    if (::geteuid() == 0) return "/var/lib/nanovm";
    if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg == '/') return std::string(xdg) + "/nanovm";
    const char* home = std::getenv("HOME");
    if (!home || !*home) throw Error("no state directory: set --state-dir, NANOVM_STATE_DIR or HOME");
    return std::string(home) + "/.local/share/nanovm";
}

std::string resolve_state_dir(const DaemonOptions& options) {
    const std::string dir = options.state_dir.empty() ? default_state_dir() : options.state_dir;
    return std::filesystem::absolute(dir).lexically_normal().string();
}

std::string socket_path(const std::string& state_dir) { return state_dir + "/nanovmd.sock"; }

void check_socket_paths(const std::string& state_dir) {
    constexpr size_t kMax = sizeof(sockaddr_un{}.sun_path) - 1;
    const std::string sock = socket_path(state_dir);
    // A VM's longest socket: vsock.sock_<guest port> for connections the guest opens.
    const std::string vm_sock = fmt::format("{}/vms/{}/vsock.sock_4294967295", state_dir, std::string(vm::kVmIdLength, '0'));
    for (const std::string* p : {&sock, &vm_sock}) {
        if (p->size() > kMax)
            throw Error(fmt::format("the state directory {} is too long by {} bytes: its socket {} must fit {} bytes "
                                    "(sockaddr_un); use a shorter --state-dir",
                                    state_dir, p->size() - kMax, *p, kMax));
    }
}

void parse_listen(const std::string& text, std::string& host, uint16_t& port) {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
        throw Error(fmt::format("--listen {}: want HOST:PORT, e.g. 127.0.0.1:8080", text));
    host = text.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    const std::string port_text = text.substr(colon + 1);
    if (port_text.find_first_not_of("0123456789") != std::string::npos || port_text.size() > 5 ||
        std::stoul(port_text) > 65535)
        throw Error(fmt::format("--listen {}: the port must be 0 to 65535", text));
    port = static_cast<uint16_t>(std::stoul(port_text));
    // localhost is 127.0.0.1, without asking the resolver: /etc/hosts or NSS could
    // name another address, and the API must stay on loopback (there is no TLS).
    std::string lower = host;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "localhost" || lower == "localhost.") host = "127.0.0.1";
    const bool loopback4 = host.rfind("127.", 0) == 0 && host.find_first_not_of("0123456789.") == std::string::npos;
    if (!loopback4 && host != "::1")
        throw Error(fmt::format("--listen {}: only a loopback address (127.0.0.1, ::1 or localhost): the API has no "
                                "TLS",
                                text));
}

}  // namespace nanovm::daemon
