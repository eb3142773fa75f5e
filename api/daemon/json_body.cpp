// Strict JSON bodies (json_body.hpp).
#include "api/daemon/json_body.hpp"

#include <set>
#include <utility>

#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "vmm/printable.hpp"

namespace nanovm::daemon {

namespace {

// The deepest nesting of `text` outside strings (a cheap scan before parsing, so a
// body of 60 000 '[' never reaches the recursive parts of the JSON library).
int nesting_depth(std::string_view text) {
    int depth = 0, deepest = 0;
    bool in_string = false, escaped = false;
    for (char c : text) {
        if (in_string) {
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') in_string = true;
        else if (c == '[' || c == '{') deepest = std::max(deepest, ++depth);
        else if (c == ']' || c == '}') --depth;
    }
    return deepest;
}

const char* type_name(const nlohmann::json& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_array()) return "an array";
    return "an object";
}

// A name from the body for an error message: its first 64 bytes, printable, quoted.
std::string printable_prefix(std::string_view name) {
    return "\"" + printable(name.substr(0, 64)) + "\"";
}

}  // namespace

bool valid_label_key(std::string_view key) {
    if (key.empty() || key.size() > 63) return false;
    for (char c : key)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return false;
    return true;
}

JsonBody::JsonBody(std::string_view body, std::initializer_list<std::string_view> allowed,
                   std::initializer_list<std::string_view> nullable) {
    if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
        value_ = nlohmann::json::object();
        return;
    }
    if (nesting_depth(body) > kMaxJsonDepth)
        throw ApiError("bad_json", fmt::format("the body nests deeper than {} levels", kMaxJsonDepth));
    // The names seen in each object being parsed, innermost last, and the field that
    // holds it ("" for the body, or an object in an array): a name seen twice is
    // refused, not left to the parser (nlohmann keeps the last one, others the first).
    struct Open {
        std::set<std::string> names;
        std::string field;
    };
    std::vector<Open> objects;
    std::string last_key;
    const auto check = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        using Event = nlohmann::json::parse_event_t;
        if (event == Event::object_start) {
            objects.push_back(Open{{}, std::exchange(last_key, std::string())});
        } else if (event == Event::object_end) {
            if (!objects.empty()) objects.pop_back();
        } else if (event == Event::array_start) {
            last_key.clear();
        } else if (event == Event::key && !objects.empty()) {
            std::string key = parsed.get<std::string>();
            if (!objects.back().names.insert(key).second)
                throw ApiError("bad_json", fmt::format("the body names the field {} twice{}", printable_prefix(key),
                                                       objects.back().field.empty()
                                                           ? ""
                                                           : " in " + printable_prefix(objects.back().field)));
            last_key = std::move(key);
        } else if (event == Event::value) {
            last_key.clear();
        }
        return true;
    };
    try {
        value_ = nlohmann::json::parse(body, check);
    } catch (const nlohmann::json::parse_error& e) {
        throw ApiError("bad_json", fmt::format("the body is not valid JSON: {}", e.what()));
    }
    if (!value_.is_object()) throw ApiError("bad_json", fmt::format("the body must be a JSON object, not {}", type_name(value_)));
    for (const auto& [key, v] : value_.items()) {
        bool known = false;
        for (std::string_view a : allowed) known = known || a == key;
        if (!known) {
            std::string list;
            for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
            throw ApiError("unknown_field", fmt::format("unknown field \"{}\" (this request takes: {})",
                                                        key.substr(0, 64), list.empty() ? "no fields" : list));
        }
        bool may_be_null = false;
        for (std::string_view n : nullable) may_be_null = may_be_null || n == key;
        if (v.is_null() && !may_be_null)
            throw ApiError("invalid_field", fmt::format("\"{}\" is null: leave the field out for its default", key));
    }
}

bool JsonBody::has(std::string_view name) const { return value_.contains(name) && !value_.at(std::string(name)).is_null(); }

const nlohmann::json& JsonBody::raw(std::string_view name) const {
    static const nlohmann::json null_value;
    const auto it = value_.find(name);
    return it == value_.end() ? null_value : *it;
}

std::optional<int64_t> JsonBody::integer(std::string_view name, int64_t min, int64_t max) const {
    const nlohmann::json& v = raw(name);
    if (v.is_null()) return std::nullopt;
    if (!v.is_number_integer())
        throw ApiError("invalid_field", fmt::format("\"{}\" must be an integer, not {}", name, type_name(v)));
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        throw ApiError("out_of_range", fmt::format("\"{}\" must be from {} to {}", name, min, max));
    const int64_t n = v.get<int64_t>();
    if (n < min || n > max) throw ApiError("out_of_range", fmt::format("\"{}\" is {}: it must be from {} to {}", name, n, min, max));
    return n;
}

std::optional<bool> JsonBody::boolean(std::string_view name) const {
    const nlohmann::json& v = raw(name);
    if (v.is_null()) return std::nullopt;
    if (!v.is_boolean()) throw ApiError("invalid_field", fmt::format("\"{}\" must be true or false, not {}", name, type_name(v)));
    return v.get<bool>();
}

std::optional<std::string> JsonBody::string(std::string_view name, size_t max_bytes) const {
    const nlohmann::json& v = raw(name);
    if (v.is_null()) return std::nullopt;
    if (!v.is_string()) throw ApiError("invalid_field", fmt::format("\"{}\" must be a string, not {}", name, type_name(v)));
    std::string s = v.get<std::string>();
    if (s.size() > max_bytes) throw ApiError("out_of_range", fmt::format("\"{}\" is longer than {} bytes", name, max_bytes));
    if (s.find('\0') != std::string::npos) throw ApiError("invalid_field", fmt::format("\"{}\" contains a NUL byte", name));
    return s;
}

std::optional<std::string> JsonBody::path_string(std::string_view name) const {
    const nlohmann::json& v = raw(name);
    if (v.is_null()) return std::nullopt;
    if (!v.is_string()) throw ApiError("invalid_field", fmt::format("\"{}\" must be a string, not {}", name, type_name(v)));
    return v.get<std::string>();
}

std::optional<std::vector<std::string>> JsonBody::strings(std::string_view name, size_t max_items, size_t max_bytes) const {
    const nlohmann::json& v = raw(name);
    if (v.is_null()) return std::nullopt;
    if (!v.is_array()) throw ApiError("invalid_field", fmt::format("\"{}\" must be an array of strings, not {}", name, type_name(v)));
    if (v.size() > max_items) throw ApiError("out_of_range", fmt::format("\"{}\" has more than {} items", name, max_items));
    std::vector<std::string> out;
    for (const nlohmann::json& item : v) {
        if (!item.is_string())
            throw ApiError("invalid_field", fmt::format("\"{}\" must be an array of strings; an item is {}", name, type_name(item)));
        std::string s = item.get<std::string>();
        if (s.size() > max_bytes) throw ApiError("out_of_range", fmt::format("an item of \"{}\" is longer than {} bytes", name, max_bytes));
        if (s.find('\0') != std::string::npos) throw ApiError("invalid_field", fmt::format("an item of \"{}\" contains a NUL byte", name));
        out.push_back(std::move(s));
    }
    return out;
}

std::optional<std::vector<std::string>> JsonBody::environment(std::string_view name) const {
    const nlohmann::json& v = raw(name);
    if (v.is_null()) return std::nullopt;
    if (!v.is_object()) throw ApiError("invalid_field", fmt::format("\"{}\" must be an object of strings, not {}", name, type_name(v)));
    if (v.size() > kMaxEnvEntries)
        throw ApiError("out_of_range", fmt::format("\"{}\" has {} variables; at most {}", name, v.size(), kMaxEnvEntries));
    std::vector<std::string> out;
    out.reserve(v.size());
    for (const auto& [key, value] : v.items()) {
        if (key.empty() || key.size() > 255 || key.find_first_of(std::string_view("=\0", 2)) != std::string::npos)
            throw ApiError("invalid_field", fmt::format("\"{}\": variable name {}: 1 to 255 bytes, no '=' or NUL", name,
                                                        printable_prefix(key)));
        if (!value.is_string())
            throw ApiError("invalid_field", fmt::format("\"{}\": variable {} must be a string, not {}", name,
                                                        printable_prefix(key), type_name(value)));
        const std::string& s = value.get_ref<const std::string&>();
        if (s.find('\0') != std::string::npos)
            throw ApiError("invalid_field", fmt::format("\"{}\": variable {} has a NUL byte", name, printable_prefix(key)));
        if (key.size() + 1 + s.size() > kMaxEnvEntryBytes)
            throw ApiError("out_of_range", fmt::format("\"{}\": variable {} is {} bytes with its name; at most {} (Linux's "
                                                       "MAX_ARG_STRLEN)",
                                                       name, printable_prefix(key), key.size() + 1 + s.size(), kMaxEnvEntryBytes));
        out.push_back(key + "=" + s);
    }
    return out;
}

std::optional<std::map<std::string, std::string>> JsonBody::labels(std::string_view name) const {
    const nlohmann::json& v = raw(name);
    if (v.is_null()) return std::nullopt;
    if (!v.is_object()) throw ApiError("invalid_field", fmt::format("\"{}\" must be an object of strings, not {}", name, type_name(v)));
    if (v.size() > 64) throw ApiError("out_of_range", fmt::format("\"{}\" has more than 64 labels", name));
    std::map<std::string, std::string> out;
    for (const auto& [key, value] : v.items()) {
        if (!valid_label_key(key))
            throw ApiError("invalid_field", fmt::format("label key \"{}\": 1 to 63 of A-Z a-z 0-9 . _ -", key.substr(0, 64)));
        if (!value.is_string()) throw ApiError("invalid_field", fmt::format("label \"{}\" must be a string", key));
        const std::string s = value.get<std::string>();
        if (s.size() > 255 || s.find('\0') != std::string::npos)
            throw ApiError("invalid_field", fmt::format("label \"{}\": at most 255 bytes, no NUL", key));
        out[key] = s;
    }
    return out;
}

}  // namespace nanovm::daemon
