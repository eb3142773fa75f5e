// /v1/sandboxes/{id}/files: read (streamed), write (whole or nothing, parents made),
// list, stat, mkdir, remove (routes.hpp).
#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "api/daemon/json_body.hpp"
#include "api/daemon/routes/resource_json.hpp"
#include "api/daemon/routes/routes.hpp"
#include "api/daemon/sandbox/manager.hpp"

namespace nanovm::daemon {

namespace {

using nlohmann::json;

std::string base_name(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

const QueryParam kPathParam{"path", "string", true, "an absolute guest path"};

}  // namespace

void add_file_routes(RouteContext& c) {
    SandboxManager& m = *c.manager;
    const std::vector<std::string> errors{"sandbox_not_found", "invalid_field", "invalid_path", "path_not_found",
                                          "permission_denied", "path_conflict", "sandbox_paused", "sandbox_archived", "wrong_state",
                                          "vm_error"};
    const auto with = [&errors](std::vector<std::string> more) {
        more.insert(more.end(), errors.begin(), errors.end());
        return more;
    };

    c.router.add(RouteSpec{.method = "GET",
                           .pattern = "/v1/sandboxes/{id}/files",
                           .summary = "Read a guest file of any size, streamed as application/octet-stream",
                           .errors = errors,
                           .response_schema = "binary",
                           .query = {kPathParam}},
                 [&m](http::Request& req) {
                     const std::string id = req.params["id"];
                     const std::string path = guest_path(req);
                     auto reader = std::make_shared<SandboxManager::FileReader>(m.open_file(id, path));
                     const agent::proto::FileInfo& info = reader->info;
                     if (info.type != agent::proto::FileType::kRegular)
                         throw ApiError("path_conflict", fmt::format("{}: not a regular file", path));
                     http::Response r;
                     r.content_type = "application/octet-stream";
                     // Headers are out once this runs: a read that fails midway throws, and the
                     // server then closes the connection without the last chunk, so the client
                     // sees a body cut short, never a short file that looks whole.
                     r.stream = [&m, id, path, reader](http::StreamSink& sink) {
                         m.read_file(id, path, *reader, [&sink](std::string_view chunk) { return sink.write(chunk); });
                     };
                     return r;
                 });

    c.router.add(RouteSpec{.method = "PUT",
                           .pattern = "/v1/sandboxes/{id}/files",
                           .summary = "Write a guest file from the body (application/octet-stream): whole or not at all, "
                                      "missing parent directories made",
                           .errors = with({"file_too_large", "out_of_range", "disk_full"}),
                           .body_limit = c.options.max_file_bytes,
                           .body_too_large_code = "file_too_large",
                           .body_too_large_hint = " (nanovmd --max-file-size)",
                           .request_schema = "binary",
                           .response_schema = "FileInfo",
                           .query = {kPathParam, {"mode", "integer", false, "permission bits in octal (default 644)"}}},
                 [&m](http::Request& req) {
                     const std::string path = guest_path(req);
                     uint32_t mode = 0644;
                     if (auto it = req.query.find("mode"); it != req.query.end()) {
                         if (it->second.empty() || it->second.size() > 4 ||
                             it->second.find_first_not_of("01234567") != std::string::npos)
                             throw ApiError("invalid_field", "\"mode\" must be octal permission bits, e.g. 644");
                         mode = static_cast<uint32_t>(std::stoul(it->second, nullptr, 8));
                     }
                     const uint64_t n = m.write_file(req.params["id"], path, req.body, mode);
                     return json_response(200, json{{"path", path}, {"name", base_name(path)}, {"type", "file"},
                                                    {"size", n}, {"mode", mode}});
                 });

    c.router.add(RouteSpec{.method = "DELETE",
                           .pattern = "/v1/sandboxes/{id}/files",
                           .summary = "Remove a guest file or directory (recursive=true for a non-empty one)",
                           .success = 204,
                           .errors = errors,
                           .query = {kPathParam, {"recursive", "boolean", false, "remove a directory and everything in it"}}},
                 [&m](http::Request& req) {
                     const std::string path = guest_path(req);
                     if (path == "/") throw ApiError("invalid_path", "will not remove /");
                     m.remove_path(req.params["id"], path, query_bool(req, "recursive").value_or(false));
                     return no_content();
                 });

    c.router.add(RouteSpec{.method = "GET",
                           .pattern = "/v1/sandboxes/{id}/files/list",
                           .summary = "The entries of a guest directory",
                           .errors = errors,
                           .response_schema = "FileList",
                           .query = {kPathParam}},
                 [&m](http::Request& req) {
                     const std::string path = guest_path(req);
                     json entries = json::array();
                     for (const agent::proto::DirEntry& e : m.list_dir(req.params["id"], path))
                         entries.push_back(file_info_json((path == "/" ? "" : path) + "/" + e.name, e.name, e.info));
                     return json_response(200, json{{"path", path}, {"entries", entries}});
                 });

    c.router.add(RouteSpec{.method = "GET",
                           .pattern = "/v1/sandboxes/{id}/files/stat",
                           .summary = "A guest path's type, size, mode and mtime",
                           .errors = errors,
                           .response_schema = "FileInfo",
                           .query = {kPathParam}},
                 [&m](http::Request& req) {
                     const std::string path = guest_path(req);
                     return json_response(200, file_info_json(path, base_name(path), m.stat_file(req.params["id"], path)));
                 });

    c.router.add(RouteSpec{.method = "POST",
                           .pattern = "/v1/sandboxes/{id}/files/mkdir",
                           .summary = "Make a guest directory (parents: true makes missing parents too)",
                           .success = 201,
                           .errors = with({"bad_json", "unknown_field"}),
                           .request_schema = "Mkdir"},
                 [&m](http::Request& req) {
                     const JsonBody b(req.body, {"path", "parents"});
                     const auto path = b.path_string("path");
                     if (!path) throw ApiError("invalid_field", "\"path\" is missing");
                     check_guest_path(*path);
                     m.make_dir(req.params["id"], *path, b.boolean("parents").value_or(true));
                     return json_response(201, json{{"path", *path}, {"name", base_name(*path)}, {"type", "directory"}});
                 });
}

}  // namespace nanovm::daemon
