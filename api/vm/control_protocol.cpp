// The control socket's codec (see control_protocol.hpp).
#include "api/vm/control_protocol.hpp"

#include <fmt/format.h>

namespace nanovm::vm {

using nlohmann::json;

namespace {

json parse_object(std::string_view line, std::string_view what) {
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) throw ControlProtocolError(fmt::format("{}: not JSON", what));
    if (!j.is_object()) throw ControlProtocolError(fmt::format("{}: not a JSON object", what));
    return j;
}

std::string line_of(const json& j) {
    // Invalid UTF-8 in a string (e.g. a path) is replaced, never an exception.
    return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace

ControlRequest parse_control_request(std::string_view line) {
    if (line.size() > kMaxControlLine) throw ControlProtocolError("request too long");
    json j = parse_object(line, "request");
    auto it = j.find("command");
    if (it == j.end() || !it->is_string()) throw ControlProtocolError("request: no \"command\" string");
    std::string command = it->get<std::string>();
    if (command.empty()) throw ControlProtocolError("request: empty \"command\"");
    return ControlRequest{std::move(command), std::move(j)};
}

std::string format_control_request(std::string_view command, const json& args) {
    json j = args.is_object() ? args : json::object();
    j["command"] = std::string(command);
    return line_of(j);
}

std::string format_ok(const json& fields) {
    json j = fields.is_object() ? fields : json::object();
    j["ok"] = true;
    return line_of(j);
}

std::string format_error(std::string_view message) {
    return line_of(json{{"ok", false}, {"error", std::string(message)}});
}

json parse_control_answer(std::string_view line) {
    json j = parse_object(line, "answer");
    auto ok = j.find("ok");
    if (ok == j.end() || !ok->is_boolean()) throw ControlProtocolError("answer: no \"ok\" boolean");
    if (ok->get<bool>()) return j;
    auto error = j.find("error");
    if (error == j.end() || !error->is_string()) throw ControlProtocolError("answer: ok is false but no \"error\"");
    throw ControlCommandError(error->get<std::string>());
}

std::optional<std::string> LineBuffer::next_line() {
    const size_t newline = buffer_.find('\n', start_);
    if (newline == std::string::npos) {
        if (pending() > max_line_) throw ControlProtocolError(fmt::format("line longer than {} bytes", max_line_));
        // Drop consumed bytes once they dominate, so the buffer does not grow forever.
        if (start_ > 0 && start_ >= buffer_.size() / 2) {
            buffer_.erase(0, start_);
            start_ = 0;
        }
        return std::nullopt;
    }
    size_t end = newline;
    if (end - start_ > max_line_) throw ControlProtocolError(fmt::format("line longer than {} bytes", max_line_));
    if (end > start_ && buffer_[end - 1] == '\r') --end;
    std::string line = buffer_.substr(start_, end - start_);
    start_ = newline + 1;
    if (start_ == buffer_.size()) {
        buffer_.clear();
        start_ = 0;
    }
    return line;
}

}  // namespace nanovm::vm
