// What holds a VM's directory (see adopt.hpp).
#include "api/vm/adopt.hpp"

#include <sys/stat.h>

#include <string_view>

#include <fmt/format.h>

#include "api/vm/control_client.hpp"
#include "api/vm/vm_id.hpp"
#include "vmm/error.hpp"

namespace nanovm::vm {

namespace {

constexpr std::string_view kLogPrefix = "nanovm: ";
constexpr std::string_view kConsolePrefix = "guest console: ";

std::string_view without_prefix(std::string_view line) {
    if (line.starts_with(kLogPrefix)) line.remove_prefix(kLogPrefix.size());
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    return line;
}

bool is_directory(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

const char* to_string(Adoption::State state) noexcept {
    switch (state) {
        case Adoption::State::ready: return "ready";
        case Adoption::State::starting: return "starting";
        case Adoption::State::stopping: return "stopping";
        case Adoption::State::unresponsive: return "unresponsive";
        case Adoption::State::dead: return "dead";
        case Adoption::State::missing: return "missing";
    }
    return "unknown";
}

std::string vmm_end_reason(const VmPaths& paths) noexcept {
    try {
        const std::vector<std::string> lines = file_tail(paths.vmm_log(), 64, 8192);
        // The last "ended" line, and the first console line logged after the one
        // before it (log_crash_console puts the panic's line first).
        for (size_t i = lines.size(); i-- > 0;) {
            const std::string_view line = without_prefix(lines[i]);
            if (!(line.starts_with("VM ") && line.find(" ended: ") != std::string_view::npos)) continue;
            std::string reason(line);
            size_t first_console = i;
            while (first_console > 0 && without_prefix(lines[first_console - 1]).starts_with(kConsolePrefix))
                --first_console;
            if (first_console < i) reason += "; " + std::string(without_prefix(lines[first_console]));
            return reason;
        }
        for (size_t i = lines.size(); i-- > 0;) {
            const std::string_view line = without_prefix(lines[i]);
            if (!line.empty() && !line.starts_with(kConsolePrefix)) return std::string(line);
        }
    } catch (...) {
    }
    return "its VMM ended without a word in its log (killed?)";
}

Adoption adopt(const RunDir& run, const std::string& id, std::chrono::milliseconds timeout) {
    if (!is_vm_id(id)) throw Error(fmt::format("{}: not a VM id ({} hex digits)", id, kVmIdLength));
    Adoption out;
    out.paths = run.vm(id);
    if (!is_directory(out.paths.dir)) return out;
    try {
        out.pid = static_cast<pid_t>(read_vm_info(out.paths.info_file()).pid);
    } catch (const std::exception&) {
        // Not written yet (a VMM that is starting), or gone with its directory.
    }
    if (!vmm_alive(out.paths)) {
        out.state = Adoption::State::dead;
        out.reason = vmm_end_reason(out.paths);
        return out;
    }
    try {
        out.status = control_call(out.paths.control_socket(), "status", nullptr, timeout);
    } catch (const std::exception& e) {
        // The lock may have gone meanwhile: then it is dead, not unresponsive.
        if (!vmm_alive(out.paths)) {
            out.state = Adoption::State::dead;
            out.reason = vmm_end_reason(out.paths);
        } else {
            out.state = Adoption::State::unresponsive;
            out.reason = e.what();
        }
        return out;
    }
    out.status.erase("ok");
    if (out.status.contains("pid") && out.status["pid"].is_number_integer())
        out.pid = static_cast<pid_t>(out.status["pid"].get<int64_t>());
    const std::string state = out.status.value("state", "");
    out.state = state == "running" || state == "paused" ? Adoption::State::ready
                : state == "stopping"                    ? Adoption::State::stopping
                                                         : Adoption::State::starting;
    return out;
}

}  // namespace nanovm::vm
