// Request routing (router.hpp).
#include "api/daemon/router.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "api/daemon/store/sqlite.hpp"
#include "vmm/log.hpp"
#include "vmm/printable.hpp"

namespace nanovm::daemon {

namespace {

std::vector<std::string_view> split_path(std::string_view path) {
    std::vector<std::string_view> out;
    if (path.empty() || path.front() != '/') return out;
    size_t pos = 1;
    for (;;) {
        const size_t slash = path.find('/', pos);
        out.push_back(path.substr(pos, slash == std::string_view::npos ? std::string_view::npos : slash - pos));
        if (slash == std::string_view::npos) break;
        pos = slash + 1;
    }
    return out;
}

bool is_param(std::string_view segment) { return segment.size() > 2 && segment.front() == '{' && segment.back() == '}'; }

}  // namespace

const std::vector<std::string>& common_errors() {
    static const std::vector<std::string> codes{"bad_request", "unauthorized", "unknown_field", "body_too_large",
                                                "header_too_large", "internal", "busy"};
    return codes;
}

void Router::add(RouteSpec spec, RouteHandler handler) {
    for (const Entry& e : entries_)
        if (e.spec.method == spec.method && e.spec.pattern == spec.pattern)
            throw std::logic_error("duplicate route " + spec.method + " " + spec.pattern);
    for (const std::string& code : spec.errors) (void)error_kind(code);  // must be in the catalogue
    Entry e{std::move(spec), {}, std::move(handler)};
    for (std::string_view s : split_path(e.spec.pattern)) e.segments.emplace_back(s);
    entries_.push_back(std::move(e));
}

bool Router::match_one(const Entry& e, const std::vector<std::string_view>& segments,
                       std::map<std::string, std::string>* params) {
    if (segments.size() != e.segments.size()) return false;
    for (size_t i = 0; i < segments.size(); ++i) {
        const std::string& want = e.segments[i];
        if (is_param(want)) {
            if (segments[i].empty()) return false;
            // A parameter is one segment, percent-decoded (RFC 3986 §2.1: `auto%3Adefault%3A1x256`
            // names auto:default:1x256; `..%2Fx` is the id "../x", never a path). The escapes
            // were checked by http::split_target; an undecodable one stays as sent.
            if (params) {
                std::string value;
                if (!http::percent_decode(segments[i], value)) value = std::string(segments[i]);
                (*params)[want.substr(1, want.size() - 2)] = std::move(value);
            }
        } else if (want != segments[i]) {
            return false;
        }
    }
    return true;
}

std::vector<const Router::Entry*> Router::match(std::string_view path) const {
    const std::vector<std::string_view> segments = split_path(path);
    // Only the most literal patterns count: /v1/snapshots/import is that route's
    // path (405 for a GET), not a snapshot id of /v1/snapshots/{id}.
    std::vector<const Entry*> out;
    size_t best = 0;
    for (const Entry& e : entries_) {
        if (!match_one(e, segments, nullptr)) continue;
        const size_t literal = static_cast<size_t>(
            std::count_if(e.segments.begin(), e.segments.end(), [](const std::string& s) { return !is_param(s); }));
        if (literal < best) continue;
        if (literal > best) out.clear();
        best = literal;
        out.push_back(&e);
    }
    return out;
}

const RouteSpec* Router::spec(std::string_view method, std::string_view path) const {
    for (const Entry* e : match(path))
        if (e->spec.method == method) return &e->spec;
    return nullptr;
}

std::vector<RouteSpec> Router::routes() const {
    std::vector<RouteSpec> out;
    for (const Entry& e : entries_) out.push_back(e.spec);
    return out;
}

void check_query(const RouteSpec& spec, const http::Request& request) {
    for (const auto& [name, value] : request.query) {
        bool known = false;
        for (const QueryParam& q : spec.query) {
            // "metadata.KEY": any name with that prefix (the route checks the KEY).
            const size_t dot = q.name.find('.');
            known = known || (dot == std::string::npos ? name == q.name : name.compare(0, dot + 1, q.name, 0, dot + 1) == 0);
        }
        if (known) continue;
        std::string list;
        for (const QueryParam& q : spec.query) list += (list.empty() ? "" : ", ") + q.name;
        throw ApiError("unknown_field", fmt::format("unknown query parameter \"{}\" ({} {} takes {})",
                                                    printable(std::string_view(name).substr(0, 64)), spec.method,
                                                    spec.pattern, list.empty() ? "none" : list));
    }
}

http::Response Router::run(const Entry& e, http::Request& request) {
    http::Response response;
    try {
        check_query(e.spec, request);
        response = e.handler(request);
    } catch (const ApiError& error) {
        response = error_response(error);
    } catch (const store::SqliteError& error) {
        log_line(fmt::format("{} {}: {}", request.method, request.path, error.what()));
        response = error_response(error.disk_full() ? "disk_full" : "internal", error.what());
    } catch (const std::exception& error) {
        log_line(fmt::format("{} {}: {}", request.method, request.path, error.what()));
        response = error_response("internal", fmt::format("{} {}: {}", request.method, e.spec.pattern, error.what()));
    }
    response.route = e.spec.pattern;
    return response;
}

void Router::dispatch(http::Request request, http::Reply reply) {
    const std::vector<const Entry*> matched = match(request.path);
    if (matched.empty()) {
        reply(error_response("no_route", fmt::format("no endpoint has the path {}", request.path.substr(0, 200))));
        return;
    }
    const Entry* entry = nullptr;
    std::string allowed;
    for (const Entry* e : matched) {
        if (e->spec.method == request.method) entry = e;
        allowed += (allowed.empty() ? "" : ", ") + e->spec.method;
    }
    if (!entry) {
        http::Response r = error_response(
            "method_not_allowed", fmt::format("{} takes {}, not {}", matched.front()->spec.pattern, allowed,
                                              request.method.substr(0, 20)));
        r.headers.emplace_back("Allow", allowed);
        r.route = matched.front()->spec.pattern;
        reply(std::move(r));
        return;
    }
    match_one(*entry, split_path(request.path), &request.params);
    request.route = entry->spec.pattern;
    // A spooled body's file (an import's upload) is removed before the answer goes out,
    // not when the request is destroyed after it: a client that has its answer finds
    // nothing left under <state>/uploads (the testhost export check saw the file once).
    const auto answer = [entry](http::Request& req, const http::Reply& send) {
        http::Response response = run(*entry, req);
        req.spooled.reset();
        send(std::move(response));
    };
    if (!entry->spec.worker) {
        answer(request, reply);
        return;
    }
    auto job = [answer, request = std::move(request), reply]() mutable { answer(request, reply); };
    if (!pool_.submit(std::move(job))) {
        http::Response r = error_response("busy", "too many requests are waiting for a worker; try again");
        r.route = entry->spec.pattern;
        reply(std::move(r));
    }
}

}  // namespace nanovm::daemon
