// Streamed command output from nanovmd (ndjson_output.hpp).
#include "api/cli/ndjson_output.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include "api/cli/daemon_client.hpp"
#include "api/cli/exec_stream.hpp"
#include "vmm/fd.hpp"
#include "vmm/log.hpp"
#include "vmm/text_encoding.hpp"

namespace nanovm::cli {

using nlohmann::json;

void NdjsonOutput::feed(std::string_view piece) {
    pending_.append(piece);
    size_t start = 0;
    for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1)
        line(std::string_view(pending_).substr(start, nl - start));
    pending_.erase(0, start);
}

int NdjsonOutput::status(const std::string& what, std::optional<int64_t> timeout_s) const {
    if (error_) {
        log_line(fmt::format("{}: {} ({})", what, (*error_).value("message", ""), (*error_).value("code", "")));
        return kExecNanovmError;
    }
    if (!exit_) {
        log_line(fmt::format("{}: the daemon's answer ended without the command's exit", what));
        return kExecNanovmError;
    }
    if ((*exit_).value("timed_out", false)) {
        log_line(fmt::format("the command timed out after {} s and was killed", timeout_s.value_or(0)));
        return kExecTimedOut;
    }
    const json& code = (*exit_)["exit_code"];
    return code.is_number_integer() ? code.get<int>() : kExecNanovmError;
}

std::string NdjsonOutput::data(const json& value) const {
    const std::string text = value.is_string() ? value.get<std::string>() : std::string();
    if (!base64_) return text;
    auto bytes = base64_decode(text);
    if (!bytes) throw Error(fmt::format("the daemon sent data that is not base64: {}", text.substr(0, 40)));
    return *bytes;
}

void NdjsonOutput::line(std::string_view text) {
    if (text.empty()) return;
    const json j = json::parse(text, nullptr, false);
    if (!j.is_object()) throw Error(fmt::format("the daemon sent a line that is not JSON: {}", text.substr(0, 80)));
    const std::string type = j.value("type", "");
    if (type == "stdout" || type == "stderr") {
        write_all(type == "stdout" ? STDOUT_FILENO : STDERR_FILENO, data(j.value("data", json())));
    } else if (type == "dropped") {
        log_line(fmt::format("({} bytes of {} were dropped: the guest keeps the last 1 MiB)",
                             j.value("bytes", int64_t{0}), j.value("stream", std::string("output"))));
    } else if (type == "exit") {
        // A command that could not start: the agent's reason comes as stderr.
        if (j.contains("stderr") && j["stderr"].is_string()) write_all(STDERR_FILENO, data(j["stderr"]));
        exit_ = j;
    } else if (type == "error") {
        error_ = j.value("error", json::object());
    }
}

}  // namespace nanovm::cli
