// The JSON answers for sandboxes, snapshots, files and execs (the OpenAPI
// document's Sandbox, Snapshot, FileInfo, ExecResult schemas), and the query and
// guest-path checks the resource routes share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/agent_client/agent_client.hpp"
#include "api/daemon/http/message.hpp"
#include "api/daemon/sandbox/manager.hpp"
#include "api/daemon/store/store.hpp"

namespace nanovm::daemon {

/// RFC 3339 UTC with milliseconds ("2026-12-01T16:41:19.123Z").
std::string rfc3339(int64_t unix_ms);

/// A Sandbox; "progress" is `progress` ({phase, bytes_done, bytes_total}) while an
/// archive or unarchive runs, else null.
nlohmann::json sandbox_json(const store::SandboxRecord& r, const std::optional<ArchiveProgress>& progress = std::nullopt);
nlohmann::json snapshot_json(SandboxManager& manager, const store::SnapshotRecord& s);
nlohmann::json file_info_json(const std::string& path, const std::string& name, const agent::proto::FileInfo& info);
/// ExecResult: stdout and stderr as UTF-8 (invalid sequences U+FFFD), or with
/// `base64` as base64 of the bytes.
nlohmann::json exec_result_json(const ExecOutcome& outcome, bool base64 = false);

/// The guest path in query parameter `name`: absolute, no NUL, no `..` component, at
/// most 4096 bytes. Throws ApiError invalid_field (missing) or invalid_path.
std::string guest_path(const http::Request& request, const std::string& name = "path");
/// Checks a guest path from a body the same way. Throws ApiError invalid_path.
void check_guest_path(const std::string& path);

/// The codes of a route that reaches a sandbox's guest (sandbox_not_found,
/// wrong_state, sandbox_paused, sandbox_archived, vm_error), after `more`.
std::vector<std::string> guest_errors(std::vector<std::string> more = {});

/// An integer query parameter in [min, max] (nullopt if absent). Throws ApiError.
std::optional<int64_t> query_integer(const http::Request& request, const std::string& name, int64_t min, int64_t max);
/// A boolean query parameter ("true"/"false"/"1"/"0"). Throws ApiError.
std::optional<bool> query_bool(const http::Request& request, const std::string& name);

}  // namespace nanovm::daemon
