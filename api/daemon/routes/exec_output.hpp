// Command output as the API gives it (docs/api.md, "output_encoding"): the whole
// result of an exec or session exec, or its NDJSON stream, with stdout and stderr as
// UTF-8 text (invalid sequences become U+FFFD; a character cut between two chunks is
// kept whole) or as base64 of the exact bytes. Shared by exec, session exec and a
// background command's output.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "api/daemon/http/message.hpp"
#include "api/daemon/json_body.hpp"
#include "api/daemon/sandbox/manager.hpp"
#include "vmm/text_encoding.hpp"

namespace nanovm::daemon {

/// How stdout and stderr bytes become JSON strings.
enum class OutputEncoding { utf8, base64 };

/// The body's `output_encoding` ("utf8", the default, or "base64"). Throws ApiError
/// invalid_field (not a string), invalid_value (another string).
OutputEncoding output_encoding(const JsonBody& body);

/// The NDJSON lines of one command's output on a streamed answer: `{"type": "stdout"
/// | "stderr", "data"}` per chunk, encoded; each write returns false once the client
/// is gone.
class OutputLines {
public:
    OutputLines(http::StreamSink& sink, OutputEncoding encoding) : sink_(sink), encoding_(encoding) {}
    /// One JSON object as a line.
    bool line(const nlohmann::json& value);
    /// A chunk of stdout (stderr with `is_stderr`). An empty chunk sends nothing.
    bool data(bool is_stderr, std::string_view bytes);
    /// Sends what a UTF-8 character cut at the end left (U+FFFD), before the exit line.
    bool finish();
    /// Sinks that write stdout and stderr lines.
    ExecSinks sinks();

private:
    http::StreamSink& sink_;
    OutputEncoding encoding_;
    Utf8Sanitizer text_[2];
};

/// The command of an exec body (exec_routes.cpp): `cmd` or `argv`, `env`, `cwd`,
/// `user`, `stdin`, `timeout_s`. Throws ApiError (invalid_field, invalid_path,
/// out_of_range).
agent::Command parse_command(const JsonBody& body);

/// The answer of an exec or a session exec: the whole result (200, ExecResult), or
/// with `stream` NDJSON output lines then `{"type": "exit", ...}` (or `{"type":
/// "error", "error"}` if it fails meanwhile). `check` runs before the stream starts
/// (its refusals, 404 or 409, answer as errors); `run` runs the command, its output
/// into the sinks given (null: collected).
http::Response exec_answer(bool stream, OutputEncoding encoding, const std::function<void()>& check,
                           std::function<ExecOutcome(const ExecSinks*)> run);

}  // namespace nanovm::daemon
