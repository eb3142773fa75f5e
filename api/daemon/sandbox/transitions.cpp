// The state machine's table (transitions.hpp).
#include "api/daemon/sandbox/transitions.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>

#include <fmt/format.h>

#include "api/daemon/api_error.hpp"

namespace nanovm::daemon {

namespace {

using S = SandboxState;
using O = SandboxOp;

constexpr std::array kStates{S::creating, S::running,     S::paused,    S::sleeping, S::archiving,
                             S::archived, S::unarchiving, S::rebooting, S::deleting, S::error};

// One row per operation, in SandboxOp's order (transition() relies on it).
const Transition kTable[] = {
    {O::use, {S::running, S::sleeping}, std::nullopt, S::running},
    {O::pause, {S::running, S::paused, S::sleeping}, std::nullopt, S::paused, {S::paused}},
    {O::resume, {S::running, S::paused, S::sleeping}, std::nullopt, S::running, {S::running}},
    {O::sleep, {S::running, S::paused, S::sleeping}, std::nullopt, S::sleeping, {S::sleeping}},
    {O::snapshot, {S::running, S::paused, S::sleeping}, std::nullopt, std::nullopt},
    {O::fork, {S::running, S::paused, S::sleeping}, std::nullopt, std::nullopt},
    {O::patch,
     {S::creating, S::running, S::paused, S::sleeping, S::archiving, S::archived, S::unarchiving, S::rebooting, S::error},
     std::nullopt,
     std::nullopt},
    {O::archive, {S::running, S::paused, S::sleeping, S::archived}, S::archiving, S::archived, {S::archived}},
    {O::unarchive, {S::archived, S::running}, S::unarchiving, S::running, {S::running}},
    {O::reboot, {S::running, S::paused, S::sleeping, S::error}, S::rebooting, S::running},
    {O::remove,
     {S::creating, S::running, S::paused, S::sleeping, S::archiving, S::archived, S::unarchiving, S::rebooting,
      S::deleting, S::error},
     S::deleting,
     std::nullopt},
    {O::autosleep, {S::running}, std::nullopt, S::sleeping, {}, true},
    // to: deleting, or archived with on_timeout "archive" (the manager's choice). An
    // archived sandbox has no end_at; a transitional one is expired once it settles.
    {O::expire, {S::running, S::paused, S::sleeping, S::error}, std::nullopt, std::nullopt, {}, true},
    {O::vmm_died, {S::creating, S::running, S::paused, S::sleeping}, std::nullopt, S::error, {}, true},
};

// What would help a caller refused in `state`.
std::string_view help(SandboxState state) {
    switch (state) {
        case S::creating: return "wait until it is running";
        case S::running: return "it runs already";
        case S::paused: return "resume it first";
        case S::sleeping: return "exec, a file call or resume wakes it";
        case S::archiving: return "wait until it is archived, then unarchive it";
        case S::archived: return "unarchive it first";
        case S::unarchiving: return "wait until it is running";
        case S::rebooting: return "wait until it is running";
        case S::deleting: return "it is going away: create another";
        case S::error: return "its VMM died: reboot it, or delete it";
    }
    return "";
}

}  // namespace

std::span<const SandboxState> all_states() { return kStates; }

std::span<const Transition> transition_table() { return kTable; }

const Transition& transition(SandboxOp op) {
    const auto i = static_cast<size_t>(op);
    if (i >= std::size(kTable) || kTable[i].op != op) throw std::logic_error("no transition row for an operation");
    return kTable[i];
}

bool allowed(SandboxOp op, SandboxState state) {
    const auto& from = transition(op).from;
    return std::find(from.begin(), from.end(), state) != from.end();
}

bool no_op(SandboxOp op, SandboxState state) {
    const auto& in = transition(op).no_op_in;
    return std::find(in.begin(), in.end(), state) != in.end();
}

std::optional<Refusal> refusal(SandboxOp op, SandboxState state) {
    if (allowed(op, state)) return std::nullopt;
    const std::string code = state == S::archived ? "sandbox_archived"
                             : op == O::use && state == S::paused ? "sandbox_paused"
                                                                  : "wrong_state";
    std::string why = fmt::format("the sandbox is {}: {}", to_string(state), help(state));
    if (op == O::unarchive && (state == S::paused || state == S::sleeping))
        why = fmt::format("the sandbox is {}, not archived: {}", to_string(state), help(state));
    if (op == O::use) return Refusal{code, why};
    return Refusal{code, fmt::format("cannot {}: {}", to_string(op), why)};
}

void require_allowed(SandboxOp op, SandboxState state) {
    if (auto r = refusal(op, state)) throw ApiError(r->code, r->message);
}

std::string_view to_string(SandboxState state) {
    switch (state) {
        case S::creating: return "creating";
        case S::running: return "running";
        case S::paused: return "paused";
        case S::sleeping: return "sleeping";
        case S::archiving: return "archiving";
        case S::archived: return "archived";
        case S::unarchiving: return "unarchiving";
        case S::rebooting: return "rebooting";
        case S::deleting: return "deleting";
        case S::error: return "error";
    }
    return "unknown";
}

std::string_view to_string(SandboxOp op) {
    switch (op) {
        case O::use: return "use";
        case O::pause: return "pause";
        case O::resume: return "resume";
        case O::sleep: return "sleep";
        case O::snapshot: return "snapshot";
        case O::fork: return "fork";
        case O::patch: return "patch";
        case O::archive: return "archive";
        case O::unarchive: return "unarchive";
        case O::reboot: return "reboot";
        case O::remove: return "delete";
        case O::autosleep: return "autosleep";
        case O::expire: return "expire";
        case O::vmm_died: return "vmm_died";
    }
    return "unknown";
}

std::optional<SandboxState> parse_state(std::string_view text) {
    for (S s : kStates)
        if (to_string(s) == text) return s;
    return std::nullopt;
}

bool holds_resources(SandboxState state) {
    switch (state) {
        case S::creating:
        case S::running:
        case S::paused:
        case S::sleeping:
        case S::archiving:
        case S::unarchiving:
        case S::rebooting: return true;
        case S::archived:
        case S::deleting:
        case S::error: return false;
    }
    return false;
}

}  // namespace nanovm::daemon
