// The VMM control socket's protocol (control.sock in the VM's state directory):
// newline-delimited JSON, one object per line each way, one answer per request, in
// order. Any number of requests per connection.
//
//   -> {"command": "status"}
//   <- {"ok": true, "id": "3f9c0a1b2c4d", "state": "running", "pid": 4242, "cpus": 2,
//       "memory_mib": 1024, "uptime_ms": 5123, ...}
//   -> {"command": "pause"}
//   <- {"ok": true, "state": "paused", "pause_us": 312}
//   -> {"command": "pause", "freeze_clock": true}   (kvmclock set back at the resume)
//   -> {"command": "resume"}
//   <- {"ok": true, "state": "running", "resume_us": 95, "clock_set_back": false}
//   -> {"command": "bogus"}
//   <- {"ok": false, "error": "unknown command \"bogus\" (commands: pause, resume, status, stop)"}
//
// A request is an object with a string "command" and the command's own arguments
// beside it. An answer has "ok"; with false, "error" is one line for a person. A line
// longer than kMaxControlLine, or one that is not a JSON object, gets an error answer
// and the connection is closed (after a line that is too long the stream cannot be
// resynchronized). The commands themselves are in api/vm/vmm_process.cpp.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace nanovm::vm {

/// The longest request or answer line, newline excluded.
inline constexpr size_t kMaxControlLine = 64 * 1024;

/// A request the protocol cannot carry (not JSON, not an object, no "command").
/// what() is the answer's "error".
class ControlProtocolError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// A request that a command handler refuses ("cannot pause: the VM is stopping").
class ControlCommandError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// One parsed request.
struct ControlRequest {
    std::string command;
    nlohmann::json body;  ///< the whole object, "command" included
};

/// Parses one request line (without its newline). Throws ControlProtocolError.
ControlRequest parse_control_request(std::string_view line);

/// A request line (with its newline) for `command` plus `args` (an object or null).
std::string format_control_request(std::string_view command, const nlohmann::json& args = nullptr);

/// An answer line (with newline): {"ok": true, ...fields} (fields: an object or null).
std::string format_ok(const nlohmann::json& fields = nullptr);
/// An answer line (with newline): {"ok": false, "error": message}.
std::string format_error(std::string_view message);

/// Parses an answer line (without its newline). Returns the object for ok == true;
/// throws ControlCommandError(error) for ok == false, ControlProtocolError for a line
/// that is not an answer.
nlohmann::json parse_control_answer(std::string_view line);

/// Splits a byte stream into lines of at most `max_line` bytes (newline excluded).
class LineBuffer {
public:
    explicit LineBuffer(size_t max_line = kMaxControlLine) : max_line_(max_line) {}
    /// Adds received bytes.
    void append(std::string_view bytes) { buffer_.append(bytes); }
    /// The next complete line (newline removed; a trailing '\r' too). nullopt: none
    /// yet. Throws ControlProtocolError once a line is longer than max_line.
    std::optional<std::string> next_line();
    /// Bytes held that are not a complete line yet.
    size_t pending() const noexcept { return buffer_.size() - start_; }

private:
    std::string buffer_;
    size_t start_ = 0;
    size_t max_line_;
};

}  // namespace nanovm::vm
