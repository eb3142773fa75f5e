// The state machine's table (transitions.hpp).
#include "api/daemon/sandbox/transitions.hpp"

#include <stdexcept>

#include <fmt/format.h>

#include "api/daemon/api_error.hpp"

namespace nanovm::daemon {

namespace {

using S = SandboxState;
using O = SandboxOp;

const Transition kTable[] = {
    {O::use, {S::running, S::sleeping}, S::running},
    {O::pause, {S::running, S::paused, S::sleeping}, S::paused},
    {O::resume, {S::running, S::paused, S::sleeping}, S::running},
    {O::snapshot, {S::running, S::paused, S::sleeping}, std::nullopt},
    {O::fork, {S::running, S::paused, S::sleeping}, std::nullopt},
    {O::patch, {S::creating, S::running, S::paused, S::sleeping, S::error}, std::nullopt},
    {O::remove, {S::creating, S::running, S::paused, S::sleeping, S::deleting, S::error}, S::deleting},
    {O::vmm_died, {S::creating, S::running, S::paused, S::sleeping}, S::error},
};

}  // namespace

std::span<const Transition> transition_table() { return kTable; }

const Transition& transition(SandboxOp op) {
    for (const Transition& t : kTable)
        if (t.op == op) return t;
    throw std::logic_error("no transition row for an operation");
}

bool allowed(SandboxOp op, SandboxState state) {
    for (SandboxState s : transition(op).from)
        if (s == state) return true;
    return false;
}

void require_allowed(SandboxOp op, SandboxState state) {
    if (allowed(op, state)) return;
    if (op == SandboxOp::use && state == SandboxState::paused)
        throw ApiError("sandbox_paused", "the sandbox is paused: resume it first");
    throw ApiError("wrong_state", fmt::format("cannot {}: the sandbox is {}", to_string(op), to_string(state)));
}

std::string_view to_string(SandboxState state) {
    switch (state) {
        case S::creating: return "creating";
        case S::running: return "running";
        case S::paused: return "paused";
        case S::sleeping: return "sleeping";
        case S::deleting: return "deleting";
        case S::error: return "error";
    }
    return "unknown";
}

std::string_view to_string(SandboxOp op) {
    switch (op) {
        case O::use: return "use it (exec, files)";
        case O::pause: return "pause";
        case O::resume: return "resume";
        case O::snapshot: return "snapshot";
        case O::fork: return "fork";
        case O::patch: return "change it";
        case O::remove: return "delete";
        case O::vmm_died: return "mark it failed";
    }
    return "unknown";
}

std::optional<SandboxState> parse_state(std::string_view text) {
    for (S s : {S::creating, S::running, S::paused, S::sleeping, S::deleting, S::error})
        if (to_string(s) == text) return s;
    return std::nullopt;
}

bool holds_resources(SandboxState state) {
    return state == S::creating || state == S::running || state == S::paused || state == S::sleeping;
}

}  // namespace nanovm::daemon
