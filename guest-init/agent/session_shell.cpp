// Session shell lines and process trees (see session_shell.hpp).
#include "guest-init/agent/session_shell.hpp"

#include <dirent.h>

#include <charconv>
#include <map>

#include "guest-init/read_file.hpp"

namespace nanovm::agent {

std::string session_command_line(std::string_view command) {
    std::string line = "command eval '";
    for (char c : command) {
        if (c == '\'')
            line += "'\\''";
        else
            line += c;
    }
    line += "' </dev/null 3>&-; printf '%d\\n' \"$?\" >&3\n";
    return line;
}

std::optional<int> StatusLineReader::feed(std::string_view bytes) {
    std::optional<int> status;
    for (char c : bytes) {
        if (c != '\n') {
            if (line_.size() < 16) line_ += c;
            continue;
        }
        int value = 255;
        const auto [end, ec] = std::from_chars(line_.data(), line_.data() + line_.size(), value);
        if (ec != std::errc() || end != line_.data() + line_.size() || value < 0 || value > 255) value = 255;
        status = value;
        line_.clear();
    }
    return status;
}

std::vector<pid_t> process_descendants(pid_t pid) {
    std::multimap<pid_t, pid_t> children_of;
    DIR* proc = ::opendir("/proc");
    if (proc == nullptr) return {};
    while (const dirent* e = ::readdir(proc)) {
        pid_t child = 0;
        const char* name = e->d_name;
        const auto [end, ec] = std::from_chars(name, name + std::char_traits<char>::length(name), child);
        if (ec != std::errc() || *end != '\0') continue;
        const std::string path = "/proc/" + std::string(name) + "/stat";
        const auto stat = guest_init::read_small_file(path.c_str());
        if (!stat) continue;
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so parse
        // from the last ')'.
        const size_t paren = stat->rfind(')');
        if (paren == std::string::npos || paren + 4 >= stat->size()) continue;
        const char* p = stat->data() + paren + 4;  // past ") S "
        pid_t ppid = 0;
        if (std::from_chars(p, stat->data() + stat->size(), ppid).ec != std::errc()) continue;
        children_of.emplace(ppid, child);
    }
    ::closedir(proc);
    std::vector<pid_t> result;
    std::vector<pid_t> todo{pid};
    while (!todo.empty() && result.size() < 100000) {
        const pid_t parent = todo.back();
        todo.pop_back();
        auto [first, last] = children_of.equal_range(parent);
        for (auto it = first; it != last; ++it) {
            result.push_back(it->second);
            todo.push_back(it->second);
        }
    }
    return result;
}

}  // namespace nanovm::agent
