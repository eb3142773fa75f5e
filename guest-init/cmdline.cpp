// Kernel command line parsing for guest-init (pure; see cmdline.hpp).
#include "guest-init/cmdline.hpp"

#include <algorithm>
#include <array>
#include <charconv>

namespace nanovm::guest_init {
namespace {

// The kernel's isspace() for the command line.
bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

constexpr std::string_view kKeyPrefix = "nanovm.";

// Kernel parameter names treat '-' and '_' alike; compare in the '_' form.
std::string normalize_key(std::string_view key) {
    std::string out(key);
    std::replace(out.begin(), out.end(), '-', '_');
    return out;
}

std::optional<bool> parse_bool(std::string_view v) {
    static constexpr std::array<std::string_view, 5> kTrue = {"1", "y", "yes", "true", "on"};
    static constexpr std::array<std::string_view, 5> kFalse = {"0", "n", "no", "false", "off"};
    std::string lower(v);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; });
    if (std::find(kTrue.begin(), kTrue.end(), lower) != kTrue.end()) return true;
    if (std::find(kFalse.begin(), kFalse.end(), lower) != kFalse.end()) return false;
    return std::nullopt;
}

// "tmpfs", or "/dev/" followed by a name of [A-Za-z0-9_./-] without "..".
bool valid_overlay_value(std::string_view v) {
    if (v == kOverlayTmpfs) return true;
    constexpr std::string_view kDev = "/dev/";
    if (v.size() <= kDev.size() || v.size() > 64 || v.substr(0, kDev.size()) != kDev) return false;
    if (v.find("..") != std::string_view::npos) return false;
    return std::all_of(v.begin(), v.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '/' || c == '-' ||
               c == '_' || c == '.';
    });
}

}  // namespace

std::vector<KernelParam> split_kernel_params(std::string_view s) {
    std::vector<KernelParam> params;
    size_t pos = 0;
    const size_t n = s.size();
    for (;;) {
        while (pos < n && is_space(s[pos])) ++pos;
        if (pos >= n) break;

        // Mirrors lib/cmdline.c next_arg(): a leading quote quotes the whole
        // parameter; any quote toggles quoting; the first '=' splits key and value.
        bool quoted = false;
        bool in_quote = false;
        size_t start = pos;
        if (s[start] == '"') {
            ++start;
            quoted = in_quote = true;
        }
        size_t i = start;
        size_t equals = std::string_view::npos;
        for (; i < n; ++i) {
            const char c = s[i];
            if (is_space(c) && !in_quote) break;
            // As in the kernel, an '=' as the very first character does not split.
            if (equals == std::string_view::npos && c == '=' && i > start) equals = i;
            if (c == '"') in_quote = !in_quote;
        }
        const size_t end = i;  // one past the parameter's last character
        const bool ends_in_quote = end > start && s[end - 1] == '"';
        pos = end;

        KernelParam p;
        if (equals == std::string_view::npos) {
            std::string_view key = s.substr(start, end - start);
            if (quoted && ends_in_quote) key.remove_suffix(1);
            p.key = std::string(key);
        } else {
            p.key = std::string(s.substr(start, equals - start));
            std::string_view value = s.substr(equals + 1, end - equals - 1);
            bool strip_tail = quoted && ends_in_quote;
            if (!value.empty() && value.front() == '"') {
                value.remove_prefix(1);
                strip_tail = strip_tail || ends_in_quote;
            }
            // The closing quote is stripped only if it is not the opening one.
            if (strip_tail && !value.empty() && value.back() == '"') value.remove_suffix(1);
            p.value = std::string(value);
        }
        if (!p.value && p.key == "--") break;
        params.push_back(std::move(p));
    }
    return params;
}

BootConfig parse_boot_config(std::string_view cmdline) {
    BootConfig config;
    bool until_ready = false;
    std::optional<std::string> exec;
    std::optional<uint32_t> agent_port;
    for (const KernelParam& p : split_kernel_params(cmdline)) {
        const std::string key = normalize_key(p.key);
        if (key.compare(0, kKeyPrefix.size(), kKeyPrefix) != 0) continue;
        const std::string_view name = std::string_view(key).substr(kKeyPrefix.size());
        if (name == "until_ready") {
            if (!p.value) {
                until_ready = true;
            } else if (auto b = parse_bool(*p.value)) {
                until_ready = *b;
            } else {
                config.errors.push_back("nanovm.until_ready: not a boolean: \"" + *p.value + "\"");
            }
        } else if (name == "exec") {
            if (!p.value || p.value->empty()) {
                config.errors.push_back("nanovm.exec: missing command (nanovm.exec=\"<shell command>\")");
            } else {
                exec = *p.value;
            }
        } else if (name == "agent") {
            uint32_t port = 1024;
            if (p.value) {
                const std::string& v = *p.value;
                const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), port);
                if (v.empty() || ec != std::errc() || end != v.data() + v.size() || port == 0 ||
                    port == 0xffffffffu) {
                    config.errors.push_back("nanovm.agent: not a vsock port: \"" + v + "\"");
                    continue;
                }
            }
            agent_port = port;
        } else if (name == "overlay") {
            if (!p.value || !valid_overlay_value(*p.value)) {
                config.errors.push_back("nanovm.overlay: want tmpfs or a /dev/ path, got \"" + p.value.value_or("") +
                                        "\"");
                continue;
            }
            config.overlay = *p.value;
        } else {
            config.warnings.push_back("unknown kernel parameter " + p.key + " (ignored)");
        }
    }
    if (until_ready) {
        config.mode = BootMode::kUntilReady;
        if (exec) config.warnings.push_back("nanovm.exec ignored: nanovm.until_ready is set");
        if (agent_port) config.warnings.push_back("nanovm.agent ignored: nanovm.until_ready is set");
    } else if (exec) {
        config.mode = BootMode::kExec;
        config.exec_command = std::move(*exec);
        if (agent_port) config.warnings.push_back("nanovm.agent ignored: nanovm.exec is set");
    } else if (agent_port) {
        config.mode = BootMode::kAgent;
        config.agent_port = *agent_port;
    }
    return config;
}

}  // namespace nanovm::guest_init
