// The error catalogue (api_error.hpp).
#include "api/daemon/api_error.hpp"

#include <array>

#include <nlohmann/json.hpp>

namespace nanovm::daemon {

namespace {

constexpr std::array kCatalogue{
    ErrorKind{"bad_request", 400, "The HTTP request is malformed (syntax, a bad percent escape)."},
    ErrorKind{"bad_json", 400, "The body is not valid JSON, not a JSON object, or names a field twice in one object."},
    ErrorKind{"invalid_field", 400, "A field or query parameter is missing or has the wrong type (null included)."},
    ErrorKind{"unknown_field", 400, "The body has a field, or the query a parameter, this request does not take."},
    ErrorKind{"invalid_archive", 400,
              "An imported snapshot file is malformed, corrupt, truncated or not a snapshot export, or its vm.state "
              "names host files; the message says which check failed."},
    ErrorKind{"invalid_path", 400,
              "A guest path is not absolute, contains a NUL byte or a `..` component, or is longer than 4096 bytes."},
    ErrorKind{"unauthorized", 401, "Over TCP: no `Authorization: Bearer <token>` header, or the wrong token."},
    ErrorKind{"permission_denied", 403, "The guest refused access to a path (EACCES, EPERM)."},
    ErrorKind{"no_route", 404, "No endpoint has this path."},
    ErrorKind{"sandbox_not_found", 404, "No sandbox has this id (or the id is not a UUID)."},
    ErrorKind{"snapshot_not_found", 404, "No snapshot has this id (or the id is not a UUID)."},
    ErrorKind{"template_not_found", 404, "No template has this name."},
    ErrorKind{"path_not_found", 404, "The guest path does not exist (ENOENT, ENOTDIR)."},
    ErrorKind{"session_not_found", 404, "No session has this id in this sandbox (or its shell has ended)."},
    ErrorKind{"command_not_found", 404,
              "No background command has this id in this sandbox (the guest keeps the last 16 commands)."},
    ErrorKind{"method_not_allowed", 405, "The path exists but not with this method."},
    ErrorKind{"wrong_state", 409, "The sandbox or snapshot is not in a state that allows this operation."},
    ErrorKind{"sandbox_paused", 409, "The sandbox is paused: resume it first."},
    ErrorKind{"sandbox_archived", 409, "The sandbox is archived: unarchive it first."},
    ErrorKind{"path_conflict", 409, "The guest path exists, is a directory, or is not empty (EEXIST, EISDIR...)."},
    ErrorKind{"template_exists", 409, "A template with this name exists: delete it first."},
    ErrorKind{"template_in_use", 409,
              "Sandboxes made from the template exist: delete them first, or delete with force=true (its files stay "
              "until they are gone)."},
    ErrorKind{"body_too_large", 413, "The request body is larger than this endpoint takes."},
    ErrorKind{"file_too_large", 413,
              "A file to write is larger than the daemon's file size limit (--max-file-size), or the guest refused its "
              "size (EFBIG)."},
    ErrorKind{"out_of_range", 422, "A value is outside its allowed range (cpus, memory_mb, timeouts, n)."},
    ErrorKind{"invalid_value", 422, "A value has the right type but is not acceptable (an unknown image name)."},
    ErrorKind{"image_not_found", 422,
              "The snapshot's root image (named by its sha256) is on no file of this host: neither pinned nor the image "
              "of that name."},
    ErrorKind{"shape_mismatch", 422, "A restore asked for a shape (cpus, memory_mb) other than the snapshot's."},
    ErrorKind{"header_too_large", 431, "The request's header block is larger than 16 KiB."},
    ErrorKind{"internal", 500, "A bug in the daemon; the message says where."},
    ErrorKind{"vm_error", 502, "The sandbox's VM or guest agent failed; the message says why."},
    ErrorKind{"over_capacity", 503,
              "Over a cap: running sandboxes, host memory committed to running and sleeping sandboxes, or a "
              "sandbox's background commands (16 running) or sessions."},
    ErrorKind{"template_building", 503,
              "The create's template is being built (the first create of an image and shape starts it): retry after "
              "the Retry-After header's seconds."},
    ErrorKind{"busy", 503, "The daemon has too many requests queued; try again."},
    ErrorKind{"disk_full", 507, "The state file system (or the guest's disk) is full."},
};

}  // namespace

std::span<const ErrorKind> error_catalogue() { return kCatalogue; }

const ErrorKind& error_kind(std::string_view code) {
    for (const ErrorKind& k : kCatalogue)
        if (k.code == code) return k;
    throw std::logic_error("error code not in the catalogue: " + std::string(code));
}

ApiError::ApiError(std::string_view code, const std::string& message)
    : std::runtime_error(message), code_(code), status_(error_kind(code).status) {}

http::Response error_response(std::string_view code, const std::string& message) {
    const ErrorKind& kind = error_kind(code);
    http::Response r = json_response(kind.status, nlohmann::json{{"error", {{"code", kind.code}, {"message", message}}}});
    r.error_code = std::string(kind.code);
    return r;
}

http::Response no_content() {
    http::Response r;
    r.status = 204;
    return r;
}

http::Response error_response(const ApiError& error) { return error_response(error.code(), error.what()); }

}  // namespace nanovm::daemon
