// The NDJSON answers of nanovmd's streamed exec, session exec and background command
// output (docs/api.md): stdout and stderr lines written to ours as they come (their
// `data` decoded from base64 when the CLI asked for it: the bytes exactly), the
// exit line kept for the exit status.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace nanovm::cli {

class NdjsonOutput {
public:
    /// `base64`: the answer was asked for with output_encoding base64.
    explicit NdjsonOutput(bool base64) : base64_(base64) {}
    /// A piece of the answer's body (lines may be cut anywhere). Throws Error for a
    /// line that is not JSON or data that is not base64.
    void feed(std::string_view piece);
    /// True once the exit line came.
    bool exited() const { return exit_.has_value(); }
    /// The exit status for this process (sandbox exec's, kExecHelp): the command's
    /// exit code (128+N for signal N), kExecTimedOut (with a line naming `timeout_s`),
    /// kExecNanovmError for an error line or an answer without the exit (a line on
    /// stderr naming `what`).
    int status(const std::string& what, std::optional<int64_t> timeout_s) const;

private:
    void line(std::string_view text);
    std::string data(const nlohmann::json& value) const;

    bool base64_;
    std::string pending_;
    std::optional<nlohmann::json> exit_, error_;
};

}  // namespace nanovm::cli
