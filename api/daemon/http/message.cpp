// Request target parsing, spooled bodies (message.hpp).
#include "api/daemon/http/message.hpp"

#include <unistd.h>

namespace nanovm::daemon::http {

SpooledBody::~SpooledBody() {
    if (!path.empty()) ::unlink(path.c_str());
}

namespace {

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

}  // namespace

bool percent_decode(std::string_view text, std::string& out) {
    out.clear();
    out.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '%') {
            out += text[i];
            continue;
        }
        if (i + 2 >= text.size()) return false;
        const int hi = hex_value(text[i + 1]), lo = hex_value(text[i + 2]);
        if (hi < 0 || lo < 0) return false;
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
    }
    return true;
}

bool split_target(std::string_view target, std::string& path, std::map<std::string, std::string>& query) {
    const size_t q = target.find('?');
    path = std::string(target.substr(0, q));
    query.clear();
    // The path stays as sent (routes and ids are literal); its escapes must still be
    // well formed, as the query's (RFC 3986 §2.1).
    if (std::string decoded; !percent_decode(path, decoded)) return false;
    if (q == std::string_view::npos) return true;
    std::string_view rest = target.substr(q + 1);
    while (!rest.empty()) {
        const size_t amp = rest.find('&');
        const std::string_view item = rest.substr(0, amp);
        rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
        if (item.empty()) continue;
        const size_t eq = item.find('=');
        std::string key, value;
        if (!percent_decode(item.substr(0, eq), key)) return false;
        if (eq != std::string_view::npos && !percent_decode(item.substr(eq + 1), value)) return false;
        query[key] = value;
    }
    return true;
}

}  // namespace nanovm::daemon::http
