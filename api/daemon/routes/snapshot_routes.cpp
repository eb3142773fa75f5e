// Snapshots: take (POST /v1/sandboxes/{id}/snapshots), list, get, wait until
// durable, restore into a new sandbox, delete, export and import (routes.hpp).
#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "api/daemon/json_body.hpp"
#include "api/daemon/routes/resource_json.hpp"
#include "api/daemon/routes/routes.hpp"
#include "api/daemon/sandbox/manager.hpp"

namespace nanovm::daemon {

namespace {

using nlohmann::json;

http::Response snapshot_list(SandboxManager& m, const std::string& sandbox_id, http::Request& req) {
    const int64_t limit = query_integer(req, "limit", 1, 1000).value_or(100);
    std::string after;
    if (auto it = req.query.find("after"); it != req.query.end()) after = it->second;
    const auto rows = m.list_snapshots(sandbox_id, after, limit);
    json list = json::array();
    for (const auto& s : rows) list.push_back(snapshot_json(m, s));
    const bool full = static_cast<int64_t>(rows.size()) == limit;
    return json_response(200, json{{"snapshots", list}, {"next", full ? json(rows.back().id) : json(nullptr)}});
}

// The export's bytes into the response: a client that is gone stops the packing.
class SinkWriter : public archive::BlobWriter {
public:
    explicit SinkWriter(http::StreamSink& sink) : sink_(sink) {}
    void write(std::span<const uint8_t> bytes) override {
        if (!sink_.write(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size())))
            throw Error("the client stopped reading the export");
        bytes_ += bytes.size();
    }
    void commit() override {}
    uint64_t bytes() const noexcept override { return bytes_; }

private:
    http::StreamSink& sink_;
    uint64_t bytes_ = 0;
};

const std::vector<QueryParam> kPageParams{{"limit", "integer", false, "at most this many (1-1000, default 100)"},
                                          {"after", "string", false, "the page after this id"}};

}  // namespace

void add_snapshot_routes(RouteContext& c) {
    SandboxManager& m = *c.manager;

    c.router.add(RouteSpec{.method = "POST",
                           .pattern = "/v1/sandboxes/{id}/snapshots",
                           .summary = "Snapshot a sandbox (memory, disk, processes); wait_durable waits until it is "
                                      "saved; leave_paused leaves the sandbox sleeping (woken by its next exec or file call)",
                           .success = 201,
                           .errors = {"sandbox_not_found", "bad_json", "invalid_field", "unknown_field", "wrong_state", "sandbox_archived",
                                      "vm_error", "disk_full"},
                           .request_schema = "CreateSnapshot",
                           .response_schema = "Snapshot"},
                 [&m](http::Request& req) {
                     const JsonBody b(req.body, {"wait_durable", "leave_paused"});
                     SnapshotRequest r;
                     r.wait_durable = b.boolean("wait_durable").value_or(false);
                     r.leave_paused = b.boolean("leave_paused").value_or(false);
                     return json_response(201, snapshot_json(m, m.snapshot(req.params["id"], r)));
                 });

    c.router.add(RouteSpec{.method = "GET",
                           .pattern = "/v1/sandboxes/{id}/snapshots",
                           .summary = "The snapshots taken of one sandbox",
                           .errors = {"sandbox_not_found", "invalid_field", "out_of_range"},
                           .response_schema = "SnapshotList",
                           .query = kPageParams},
                 [&m](http::Request& req) {
                     const std::string id = m.get(req.params["id"]).id;
                     return snapshot_list(m, id, req);
                 });

    c.router.add(RouteSpec{.method = "GET",
                           .pattern = "/v1/snapshots",
                           .summary = "Every snapshot, by id (they outlive their sandboxes)",
                           .errors = {"invalid_field", "out_of_range"},
                           .response_schema = "SnapshotList",
                           .query = kPageParams},
                 [&m](http::Request& req) { return snapshot_list(m, "", req); });

    c.router.add(RouteSpec{.method = "GET",
                           .pattern = "/v1/snapshots/{id}",
                           .summary = "A snapshot: durable, size_bytes (bytes only it holds), shape",
                           .errors = {"snapshot_not_found"},
                           .response_schema = "Snapshot"},
                 [&m](http::Request& req) { return json_response(200, snapshot_json(m, m.get_snapshot(req.params["id"]))); });

    c.router.add(RouteSpec{.method = "POST",
                           .pattern = "/v1/snapshots/{id}/wait",
                           .summary = "Wait up to timeout_s (default 60) until the snapshot is durable; the answer says "
                                      "durable true or false, and the saving goes on after a timeout",
                           .errors = {"snapshot_not_found", "bad_json", "invalid_field", "unknown_field", "out_of_range"},
                           .request_schema = "WaitDurable",
                           .response_schema = "Snapshot"},
                 [&m](http::Request& req) {
                     const JsonBody b(req.body, {"timeout_s"});
                     const auto t = std::chrono::seconds(b.integer("timeout_s", 0, 3600).value_or(60));
                     return json_response(200, snapshot_json(m, m.wait_durable(req.params["id"], t)));
                 });

    c.router.add(RouteSpec{.method = "POST",
                           .pattern = "/v1/snapshots/{id}/restore",
                           .summary = "Restore a snapshot into a new sandbox of the snapshot's shape",
                           .success = 201,
                           .errors = {"snapshot_not_found", "bad_json", "invalid_field", "unknown_field", "out_of_range",
                                      "wrong_state", "over_capacity", "vm_error", "disk_full"},
                           .request_schema = "Restore",
                           .response_schema = "Sandbox"},
                 [&m](http::Request& req) {
                     const JsonBody b(req.body, {"metadata", "timeout_s"});
                     CreateRequest r;
                     if (auto v = b.labels("metadata")) r.labels = *v;
                     if (auto v = b.integer("timeout_s", 0, 7 * 86400)) r.timeout_s = *v;
                     return json_response(201, sandbox_json(m.restore(req.params["id"], r)));
                 });

    c.router.add(RouteSpec{.method = "GET",
                           .pattern = "/v1/snapshots/{id}/export",
                           .summary = "The snapshot as one self-contained file (application/octet-stream, streamed): "
                                      "its whole chain flattened, sparse, zstd-compressed and checksummed; the root "
                                      "image named by its sha256",
                           .errors = {"snapshot_not_found", "wrong_state", "image_not_found"},
                           .response_schema = "binary"},
                 [&m](http::Request& req) {
                     SnapshotExport e = m.prepare_export(req.params["id"]);
                     http::Response r;
                     r.content_type = "application/octet-stream";
                     r.headers.emplace_back("Content-Disposition",
                                            fmt::format("attachment; filename=\"{}.nvsnap\"", e.snapshot.id));
                     r.stream = [&m, e = std::move(e)](http::StreamSink& sink) {
                         SinkWriter out(sink);
                         m.write_export(e, out);  // a failure cuts the body short (the server closes)
                     };
                     return r;
                 });

    c.router.add(RouteSpec{.method = "POST",
                           .pattern = "/v1/snapshots/import",
                           .summary = "Import a snapshot export (the body, application/octet-stream) as a new snapshot "
                                      "of this host, every part checked first",
                           .success = 201,
                           .errors = {"invalid_archive", "image_not_found", "disk_full"},
                           .body_limit = c.options.max_import_bytes,
                           .body_too_large_hint = " (nanovmd --max-import-size)",
                           .spool_body = true,
                           .request_schema = "binary",
                           .response_schema = "Snapshot"},
                 [&m](http::Request& req) {
                     if (!req.spooled) throw ApiError("internal", "the import's body was not spooled to a file");
                     return json_response(201, snapshot_json(m, m.import_snapshot(req.spooled->path)));
                 });

    c.router.add(RouteSpec{.method = "DELETE",
                           .pattern = "/v1/snapshots/{id}",
                           .summary = "Delete a snapshot (its files go once no sandbox or snapshot uses them)",
                           .success = 204,
                           .errors = {"snapshot_not_found", "wrong_state"}},
                 [&m](http::Request& req) {
                     m.remove_snapshot(req.params["id"]);
                     return no_content();
                 });
}

}  // namespace nanovm::daemon
