// The store's archive records (store.hpp ArchiveRecord).
#include "api/daemon/store/store.hpp"

namespace nanovm::daemon::store {

namespace {

constexpr const char* kColumns = "sandbox_id, blob, state, image_digest, raw_bytes, compressed_bytes, created_ms";

ArchiveRecord read_archive(const Statement& s) {
    return ArchiveRecord{s.text(0), s.text(1), s.text(2), s.text(3), s.integer(4), s.integer(5), s.integer(6)};
}

}  // namespace

void Store::put_archive(const ArchiveRecord& r) {
    std::lock_guard lock(mutex_);
    db_.prepare(std::string("INSERT OR REPLACE INTO archives (") + kColumns + ") VALUES (?,?,?,?,?,?,?)")
        .bind(1, r.sandbox_id)
        .bind(2, r.blob)
        .bind(3, r.state)
        .bind(4, r.image_digest)
        .bind(5, r.raw_bytes)
        .bind(6, r.compressed_bytes)
        .bind(7, r.created_ms)
        .run();
}

std::optional<ArchiveRecord> Store::archive(const std::string& sandbox_id) {
    std::lock_guard lock(mutex_);
    Statement s = db_.prepare(std::string("SELECT ") + kColumns + " FROM archives WHERE sandbox_id = ?");
    s.bind(1, sandbox_id);
    if (!s.step()) return std::nullopt;
    return read_archive(s);
}

std::vector<ArchiveRecord> Store::archives() {
    std::lock_guard lock(mutex_);
    Statement s = db_.prepare(std::string("SELECT ") + kColumns + " FROM archives ORDER BY sandbox_id");
    std::vector<ArchiveRecord> out;
    while (s.step()) out.push_back(read_archive(s));
    return out;
}

void Store::delete_archive(const std::string& sandbox_id) {
    std::lock_guard lock(mutex_);
    db_.prepare("DELETE FROM archives WHERE sandbox_id = ?").bind(1, sandbox_id).run();
}

}  // namespace nanovm::daemon::store
