// The daemon commands' shared parts (daemon_client.hpp).
#include "api/cli/daemon_client.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

#include "api/daemon/daemon_options.hpp"
#include "vmm/log.hpp"

namespace nanovm::cli {

using nlohmann::json;

void add_daemon_options(CLI::App* group, ClientOptions& options) {
    group->add_option("--state-dir", options.state_dir,
                      "The daemon's state directory: its socket is DIR/nanovmd.sock [default: $NANOVM_STATE_DIR, "
                      "/var/lib/nanovm for root, else ${XDG_DATA_HOME:-~/.local/share}/nanovm]; $NANOVM_URL "
                      "(http://127.0.0.1:PORT, token from $NANOVM_TOKEN or DIR/token) uses TCP instead")
        ->type_name("DIR");
    group->add_flag("--json", options.json, "JSON on stdout (for scripts) instead of tables and ids");
    group->fallthrough();
}

namespace {

std::string state_dir_of(const ClientOptions& options) {
    daemon::DaemonOptions d;
    d.state_dir = options.state_dir;
    return daemon::resolve_state_dir(d);
}

// "http://HOST:PORT[/]" -> host, port. Throws UsageError.
void parse_url(const std::string& url, std::string& host, uint16_t& port) {
    std::string rest = url;
    if (rest.rfind("http://", 0) != 0) throw UsageError(fmt::format("NANOVM_URL={}: want http://127.0.0.1:PORT", url));
    rest = rest.substr(7);
    while (!rest.empty() && rest.back() == '/') rest.pop_back();
    try {
        daemon::parse_listen(rest, host, port);
    } catch (const Error& e) {
        throw UsageError(fmt::format("NANOVM_URL={}: {}", url, e.what()));
    }
}

}  // namespace

client::Endpoint find_daemon(const ClientOptions& options) {
    client::Endpoint ep;
    const char* url = std::getenv("NANOVM_URL");
    if (url && *url) {
        parse_url(url, ep.host, ep.port);
        if (const char* token = std::getenv("NANOVM_TOKEN"); token && *token) {
            ep.token = token;
        } else {
            const std::string file = state_dir_of(options) + "/token";
            std::ifstream in(file);
            if (!(in >> ep.token))
                throw MissingToken(fmt::format("NANOVM_URL is set but there is no token: set NANOVM_TOKEN or make {} "
                                               "readable",
                                               file));
        }
        return ep;
    }
    ep.unix_socket = daemon::socket_path(state_dir_of(options));
    return ep;
}

int exit_status_for(const client::ApiError& e) {
    switch (e.status()) {
        case 401: return kUnauthorized;
        case 404: return kNotFound;
        case 409: return kWrongState;
        case 503: return kOverCapacity;
        case 400:
        case 413:
        case 422: return kUsage;
        default: return kFailed;
    }
}

int run_client_command(const ClientOptions& options, const std::function<int()>& body) {
    try {
        return body();
    } catch (const client::Unreachable& e) {
        log_line(fmt::format("{}; is the daemon running? Start it with: nanovm daemon{} (or as a service: "
                             "tools/systemd/nanovmd.service)",
                             e.what(), options.state_dir.empty() ? "" : " --state-dir " + options.state_dir));
        return kNoDaemon;
    } catch (const client::ApiError& e) {
        log_line(fmt::format("{} ({})", e.what(), e.code()));
        return exit_status_for(e);
    } catch (const UsageError& e) {
        log_line(e.what());
        return kUsage;
    } catch (const MissingToken& e) {
        log_line(e.what());
        return kUnauthorized;
    } catch (const std::exception& e) {
        log_line(e.what());
        return kFailed;
    }
}

json list_all(client::ApiClient& api, const std::string& target, const std::string& field) {
    json all = json::array();
    std::string after;
    const char sep = target.find('?') == std::string::npos ? '?' : '&';
    for (;;) {
        std::string t = fmt::format("{}{}limit=1000", target, sep);
        if (!after.empty()) t += "&after=" + client::url_encode(after);
        const json page = api.get(t);
        for (const json& item : page.at(field)) all.push_back(item);
        if (!page.contains("next") || !page["next"].is_string()) return all;
        after = page["next"].get<std::string>();
    }
}

std::string resolve_id(client::ApiClient& api, const std::string& kind, const std::string& text,
                       const std::string& list_target) {
    if (text.empty()) throw UsageError(fmt::format("an empty {} id", kind));
    if (text.size() == 36 || text.find_first_not_of("0123456789abcdef-") != std::string::npos) return text;
    const std::string plural = kind == "sandbox" ? "sandboxes" : kind + "s";
    const std::string target = list_target.empty() ? "/v1/" + plural : list_target;
    // Sandboxes and snapshots are listed a page at a time; a sandbox's sessions in one
    // answer (the route takes no limit or after: 400 unknown_field).
    const bool paged = kind == "sandbox" || kind == "snapshot";
    const json items = paged ? list_all(api, target, plural) : api.get(target).at(plural);
    std::vector<std::string> matches;
    for (const json& item : items) {
        const std::string id = item.at("id").get<std::string>();
        if (id.rfind(text, 0) == 0) matches.push_back(id);
    }
    if (matches.empty())
        throw client::ApiError(404, kind + "_not_found", fmt::format("no {} has an id starting with {}", kind, text));
    if (matches.size() > 1)
        throw UsageError(fmt::format("{} ids starting with {}: {} and {} more; give more of it", kind, text,
                                     matches[0], matches.size() - 1));
    return matches[0];
}

std::string cell(const json& v) {
    if (v.is_null()) return "-";
    if (v.is_string()) return v.get<std::string>();
    return v.dump();
}

void print_table(const std::vector<std::string>& headers, const std::vector<std::vector<std::string>>& rows) {
    std::vector<size_t> width(headers.size());
    for (size_t i = 0; i < headers.size(); ++i) width[i] = headers[i].size();
    for (const auto& row : rows)
        for (size_t i = 0; i < row.size() && i < width.size(); ++i) width[i] = std::max(width[i], row[i].size());
    const auto line = [&](const std::vector<std::string>& cells) {
        std::string out;
        for (size_t i = 0; i < cells.size(); ++i) {
            out += cells[i];
            if (i + 1 < cells.size()) out += std::string(width[i] - cells[i].size() + 2, ' ');
        }
        std::printf("%s\n", out.c_str());
    };
    line(headers);
    for (const auto& row : rows) line(row);
}

std::string labels_text(const json& metadata) {
    std::string out;
    for (const auto& [k, v] : metadata.items()) out += (out.empty() ? "" : ",") + k + "=" + cell(v);
    return out.empty() ? "-" : out;
}

void print_fields(const json& object) {
    size_t width = 0;
    for (const auto& [k, v] : object.items()) width = std::max(width, k.size());
    for (const auto& [k, v] : object.items()) {
        const std::string text = v.is_object() ? labels_text(v) : cell(v);
        std::printf("%-*s  %s\n", static_cast<int>(width + 1), (k + ":").c_str(), text.c_str());
    }
}

void print_json(const json& value) {
    std::printf("%s\n", value.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
}

json labels_json(const std::vector<std::string>& labels, const char* option) {
    json out = json::object();
    for (const std::string& l : labels) {
        const size_t eq = l.find('=');
        if (eq == std::string::npos || eq == 0) throw UsageError(fmt::format("{} {}: want KEY=VALUE", option, l));
        out[l.substr(0, eq)] = l.substr(eq + 1);
    }
    return out;
}

Progress::Progress(std::string what) : what_(std::move(what)) {
    if (!::isatty(STDERR_FILENO)) return;
    thread_ = std::thread([this] {
        const auto start = std::chrono::steady_clock::now();
        while (!done_.load()) {
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            std::fprintf(stderr, "\r%s... %.1f s\033[K", what_.c_str(), s);
            std::fflush(stderr);
            for (int i = 0; i < 4 && !done_.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        std::fprintf(stderr, "\r\033[K");
        std::fflush(stderr);
    });
}

Progress::~Progress() {
    done_.store(true);
    if (thread_.joinable()) thread_.join();
}

}  // namespace nanovm::cli
