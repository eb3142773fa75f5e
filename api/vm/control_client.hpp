// The client side of a VMM's control socket (control_protocol.hpp): one request, one
// answer.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace nanovm::vm {

/// Sends `command` (with `args`, an object or null) to the control socket at
/// `socket_path` and returns the answer (ok: true) within `timeout`. Throws
/// ControlCommandError (the VMM refused: its error text), ControlProtocolError (not
/// an answer), or Error ("control socket PATH: Connection refused", "... no answer
/// in 5000 ms", "... closed without answering").
nlohmann::json control_call(const std::string& socket_path, std::string_view command,
                            const nlohmann::json& args = nullptr,
                            std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace nanovm::vm
