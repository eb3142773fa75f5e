// The store's sessions (api/daemon/store/store_sessions.cpp): records round-trip,
// list per sandbox, and go with their sandbox.
#include <catch2/catch.hpp>

#include "api/daemon/store/store.hpp"
#include "tests/support/temp_dir.hpp"

using namespace nanovm::daemon::store;
using nanovm::test::TempDir;

TEST_CASE("store: sessions round-trip, list per sandbox oldest first, and are deleted with their sandbox",
          "[daemon][store]") {
    TempDir tmp;
    Store store(tmp.path() + "/store.db");
    SandboxRecord sandbox;
    sandbox.id = "10000000-0000-4000-8000-000000000000";
    sandbox.state = "running";
    store.put_sandbox(sandbox);
    const SessionRecord a{"a0000000-0000-4000-8000-000000000000", sandbox.id, 20};
    const SessionRecord b{"b0000000-0000-4000-8000-000000000000", sandbox.id, 10};
    const SessionRecord other{"c0000000-0000-4000-8000-000000000000", "20000000-0000-4000-8000-000000000000", 5};
    store.put_session(a);
    store.put_session(b);
    store.put_session(other);
    CHECK(store.session(a.id) == a);
    CHECK_FALSE(store.session("nope").has_value());
    CHECK(store.sessions(sandbox.id) == std::vector<SessionRecord>{b, a});
    store.delete_session(b.id);
    CHECK(store.sessions(sandbox.id) == std::vector<SessionRecord>{a});
    // A state change rewrites the sandbox's row (INSERT OR REPLACE): its sessions stay.
    sandbox.state = "paused";
    store.put_sandbox(sandbox);
    CHECK(store.sessions(sandbox.id) == std::vector<SessionRecord>{a});
    store.delete_sandbox(sandbox.id);
    CHECK(store.sessions(sandbox.id).empty());
    CHECK_FALSE(store.session(a.id).has_value());
    CHECK(store.session(other.id) == other);
}
