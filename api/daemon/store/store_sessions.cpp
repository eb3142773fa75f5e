// The store's sessions (store.hpp): one row per session a client made; the trigger of
// migration 2 deletes a sandbox's sessions with it.
#include "api/daemon/store/store.hpp"

namespace nanovm::daemon::store {

namespace {

SessionRecord read_session(const Statement& s) {
    return SessionRecord{s.text(0), s.text(1), s.integer(2)};
}

}  // namespace

void Store::put_session(const SessionRecord& record) {
    std::lock_guard lock(mutex_);
    db_.prepare("INSERT OR REPLACE INTO sessions (id, sandbox_id, created_ms) VALUES (?, ?, ?)")
        .bind(1, record.id)
        .bind(2, record.sandbox_id)
        .bind(3, record.created_ms)
        .run();
}

std::optional<SessionRecord> Store::session(const std::string& id) {
    std::lock_guard lock(mutex_);
    Statement s = db_.prepare("SELECT id, sandbox_id, created_ms FROM sessions WHERE id = ?");
    s.bind(1, id);
    if (!s.step()) return std::nullopt;
    return read_session(s);
}

std::vector<SessionRecord> Store::sessions(const std::string& sandbox_id) {
    std::lock_guard lock(mutex_);
    Statement s = db_.prepare("SELECT id, sandbox_id, created_ms FROM sessions WHERE sandbox_id = ? "
                              "ORDER BY created_ms, id");
    s.bind(1, sandbox_id);
    std::vector<SessionRecord> out;
    while (s.step()) out.push_back(read_session(s));
    return out;
}

void Store::delete_session(const std::string& id) {
    std::lock_guard lock(mutex_);
    db_.prepare("DELETE FROM sessions WHERE id = ?").bind(1, id).run();
}

}  // namespace nanovm::daemon::store
