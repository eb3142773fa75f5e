// Strict reading of a JSON request body into typed fields: anything that is not a
// JSON object (or names a field twice in one object), a field the request does not
// take, or a field of the wrong type (null included) stops here with its catalogue
// error (bad_json, unknown_field, invalid_field: 400), and a number outside its range
// with out_of_range (422). Routes read bodies only through
// this.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanovm::daemon {

/// The deepest nesting of arrays and objects a body may have.
inline constexpr int kMaxJsonDepth = 32;

class JsonBody {
public:
    /// Parses `body` ("" or only whitespace: {}) and checks that every field is one of
    /// `allowed`, that no object in it names a field twice (bad_json: which one would
    /// count depends on the parser) and that no field is null unless it is one of
    /// `nullable` (invalid_field: a null is not "left out"; PATCH's timeout_s, where
    /// null means no timeout, is nullable). Throws ApiError.
    JsonBody(std::string_view body, std::initializer_list<std::string_view> allowed,
             std::initializer_list<std::string_view> nullable = {});

    /// The field is there and not null.
    bool has(std::string_view name) const;
    /// The field is there, null or not.
    bool present(std::string_view name) const { return value_.contains(name); }
    /// An integer field in [min, max]. A non-integer (1.5, "2", true) is invalid_field.
    std::optional<int64_t> integer(std::string_view name, int64_t min, int64_t max) const;
    std::optional<bool> boolean(std::string_view name) const;
    /// A string of at most `max_bytes` without NUL bytes.
    std::optional<std::string> string(std::string_view name, size_t max_bytes = 4096) const;
    /// A guest path's string as given (NUL bytes included): the caller checks it as
    /// a path (check_guest_path: invalid_path for a NUL, a relative path, `..`), so a
    /// path in a body gets the same error as one in the query.
    std::optional<std::string> path_string(std::string_view name) const;
    /// An array of such strings, at most `max_items`.
    std::optional<std::vector<std::string>> strings(std::string_view name, size_t max_items,
                                                    size_t max_bytes = 4096) const;
    /// An object of string values: labels ({"team": "ml"}); keys 1-63 bytes of
    /// [A-Za-z0-9._-], values at most 255 bytes, at most 64 entries.
    std::optional<std::map<std::string, std::string>> labels(std::string_view name) const;
    /// An object of environment variables ({"PATH": "/usr/bin", "TOKEN": "..."}) as
    /// "KEY=VALUE" entries, in key order: keys 1-255 bytes without '=' or NUL, values
    /// without NUL, each entry at most kMaxEnvEntryBytes, at most kMaxEnvEntries. Not
    /// labels: a token or a PATH is longer than a label's 255 bytes. What the whole
    /// command may hold together is the caller's check (check_command_fits).
    std::optional<std::vector<std::string>> environment(std::string_view name) const;
    /// The raw value of a field (null if absent), for fields of several shapes.
    const nlohmann::json& raw(std::string_view name) const;

private:
    nlohmann::json value_;
};

/// Bytes of one "KEY=VALUE" environment entry at most: Linux's MAX_ARG_STRLEN (32
/// pages) less its NUL, what execve takes for one string.
inline constexpr size_t kMaxEnvEntryBytes = 128 * 1024 - 1;
/// Environment variables of one command or session at most.
inline constexpr size_t kMaxEnvEntries = 4096;

/// True if `key` is a valid label key (see JsonBody::labels).
bool valid_label_key(std::string_view key);

}  // namespace nanovm::daemon
