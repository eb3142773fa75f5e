// The sandbox transition table (api/daemon/sandbox/transitions.hpp), without KVM:
// every (operation, state) pair against a grid written out here by hand, the state
// each legal one leaves, and the 409 each illegal one answers (its code, and a
// message naming the state and the call that would help).
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "api/daemon/api_error.hpp"
#include "api/daemon/sandbox/transitions.hpp"

namespace {

using namespace nanovm::daemon;

// Columns: creating running paused sleeping archiving archived unarchiving rebooting
// deleting error. Cells: '.' refused (409 wrong_state), 'P' refused sandbox_paused,
// 'A' refused sandbox_archived, 'y' allowed, 'n' allowed as a no-op.
const std::map<std::string, std::string> kGrid{
    {"use", ". y P y . A . . . ."},
    {"pause", ". y n y . A . . . ."},
    {"resume", ". n y y . A . . . ."},
    {"sleep", ". y y n . A . . . ."},
    {"snapshot", ". y y y . A . . . ."},
    {"fork", ". y y y . A . . . ."},
    {"patch", "y y y y y y y y . y"},
    {"archive", ". y y y . n . . . ."},
    {"unarchive", ". n . . . y . . . ."},
    {"reboot", ". y y y . A . . . y"},
    {"delete", "y y y y y y y y y y"},
    {"autosleep", ". y . . . A . . . ."},
    {"expire", ". y y y . A . . . y"},
    {"vmm_died", "y y y y . A . . . ."},
};

char cell(SandboxOp op, SandboxState state) {
    const auto r = refusal(op, state);
    if (!r) return no_op(op, state) ? 'n' : 'y';
    if (r->code == "sandbox_paused") return 'P';
    if (r->code == "sandbox_archived") return 'A';
    REQUIRE(r->code == "wrong_state");
    return '.';
}

std::string row(SandboxOp op) {
    std::string out;
    for (SandboxState s : all_states()) {
        if (!out.empty()) out += ' ';
        out += cell(op, s);
    }
    return out;
}

}  // namespace

TEST_CASE("transitions: every state, in order, parses back", "[daemon][transitions]") {
    std::vector<std::string> names;
    for (SandboxState s : all_states()) {
        names.emplace_back(to_string(s));
        CHECK(parse_state(to_string(s)) == s);
    }
    CHECK(names == std::vector<std::string>{"creating", "running", "paused", "sleeping", "archiving", "archived",
                                            "unarchiving", "rebooting", "deleting", "error"});
    CHECK_FALSE(parse_state("asleep"));
    CHECK_FALSE(parse_state(""));
}

TEST_CASE("transitions: every (operation, state) pair is allowed or refused as the grid says",
          "[daemon][transitions]") {
    std::set<std::string> seen;
    for (const Transition& t : transition_table()) {
        const std::string name(to_string(t.op));
        INFO(name);
        REQUIRE(kGrid.count(name) == 1);
        CHECK(row(t.op) == kGrid.at(name));
        CHECK(&transition(t.op) == &t);
        seen.insert(name);
    }
    CHECK(seen.size() == kGrid.size());
}

TEST_CASE("transitions: where each operation leaves the sandbox", "[daemon][transitions]") {
    using S = SandboxState;
    using O = SandboxOp;
    const auto to = [](O op) { return transition(op).to; };
    const auto during = [](O op) { return transition(op).during; };
    CHECK(to(O::use) == S::running);
    CHECK(to(O::pause) == S::paused);
    CHECK(to(O::resume) == S::running);
    CHECK(to(O::sleep) == S::sleeping);
    CHECK(to(O::autosleep) == S::sleeping);
    CHECK(to(O::archive) == S::archived);
    CHECK(during(O::archive) == S::archiving);
    CHECK(to(O::unarchive) == S::running);
    CHECK(during(O::unarchive) == S::unarchiving);
    CHECK(to(O::reboot) == S::running);
    CHECK(during(O::reboot) == S::rebooting);
    CHECK(during(O::remove) == S::deleting);
    CHECK(to(O::vmm_died) == S::error);
    // Unchanged (snapshot: sleeping with leave_paused, the manager's choice; expire:
    // deleted or archived by on_timeout).
    for (O op : {O::snapshot, O::fork, O::patch, O::expire}) {
        CHECK_FALSE(to(op));
        CHECK_FALSE(during(op));
    }
    for (const Transition& t : transition_table()) {
        INFO(to_string(t.op));
        CHECK(t.by_daemon == (t.op == O::autosleep || t.op == O::expire || t.op == O::vmm_died));
    }
}

TEST_CASE("transitions: a refusal names the state and the call that would help", "[daemon][transitions]") {
    using S = SandboxState;
    using O = SandboxOp;
    const auto message = [](O op, S s) { return refusal(op, s).value().message; };
    CHECK(message(O::use, S::paused) == "the sandbox is paused: resume it first");
    CHECK(message(O::use, S::archived) == "the sandbox is archived: unarchive it first");
    CHECK(message(O::use, S::creating) == "the sandbox is creating: wait until it is running");
    CHECK(message(O::use, S::error) == "the sandbox is error: its VMM died: reboot it, or delete it");
    CHECK(message(O::snapshot, S::archived) == "cannot snapshot: the sandbox is archived: unarchive it first");
    CHECK(message(O::reboot, S::archiving) ==
          "cannot reboot: the sandbox is archiving: wait until it is archived, then unarchive it");
    CHECK(message(O::unarchive, S::sleeping) ==
          "cannot unarchive: the sandbox is sleeping, not archived: exec, a file call or resume wakes it");
    CHECK(message(O::pause, S::rebooting) == "cannot pause: the sandbox is rebooting: wait until it is running");
    CHECK(message(O::fork, S::deleting) == "cannot fork: the sandbox is deleting: it is going away: create another");
    // Every refusal: its code is a 409 of the catalogue, the message names the state.
    for (const Transition& t : transition_table()) {
        for (SandboxState s : all_states()) {
            const auto r = refusal(t.op, s);
            if (!r) continue;
            INFO(to_string(t.op) << " in " << to_string(s));
            CHECK(error_kind(r->code).status == 409);
            CHECK(r->message.find("the sandbox is " + std::string(to_string(s))) != std::string::npos);
            CHECK_THROWS_AS(require_allowed(t.op, s), ApiError);
        }
    }
    CHECK_NOTHROW(require_allowed(O::use, S::sleeping));
}

TEST_CASE("transitions: the states that count against the caps", "[daemon][transitions]") {
    std::vector<std::string> holding;
    for (SandboxState s : all_states())
        if (holds_resources(s)) holding.emplace_back(to_string(s));
    CHECK(holding == std::vector<std::string>{"creating", "running", "paused", "sleeping", "archiving", "unarchiving",
                                              "rebooting"});
}

TEST_CASE("transitions: a no-op is allowed where it is one", "[daemon][transitions]") {
    for (const Transition& t : transition_table())
        for (SandboxState s : t.no_op_in) {
            INFO(to_string(t.op) << " in " << to_string(s));
            CHECK(allowed(t.op, s));
            CHECK(t.to == s);
        }
}
