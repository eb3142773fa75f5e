// The store (store.hpp).
#include "api/daemon/store/store.hpp"

#include <chrono>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace nanovm::daemon::store {

namespace {

// The migrations, in order: migration i takes the schema from version i to i + 1.
// Never edit one that has shipped; add the next.
constexpr const char* kMigrations[] = {
    // 1: sandboxes, snapshots, directories and their references.
    R"sql(
CREATE TABLE sandboxes (
  id TEXT PRIMARY KEY,
  vm_id TEXT NOT NULL DEFAULT '',
  state TEXT NOT NULL,
  error TEXT NOT NULL DEFAULT '',
  cpus INTEGER NOT NULL,
  memory_mb INTEGER NOT NULL,
  disable_internet INTEGER NOT NULL DEFAULT 0,
  image TEXT NOT NULL DEFAULT '',
  snapshot_id TEXT NOT NULL DEFAULT '',
  parent_id TEXT NOT NULL DEFAULT '',
  labels TEXT NOT NULL DEFAULT '{}',
  timeout_s INTEGER,
  end_at_ms INTEGER,
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL
);
CREATE INDEX sandboxes_state ON sandboxes(state);
CREATE TABLE snapshots (
  id TEXT PRIMARY KEY,
  sandbox_id TEXT NOT NULL,
  dir TEXT NOT NULL,
  state TEXT NOT NULL,
  durable INTEGER NOT NULL DEFAULT 0,
  error TEXT NOT NULL DEFAULT '',
  cpus INTEGER NOT NULL,
  memory_mb INTEGER NOT NULL,
  disable_internet INTEGER NOT NULL DEFAULT 0,
  image TEXT NOT NULL DEFAULT '',
  created_ms INTEGER NOT NULL
);
CREATE INDEX snapshots_sandbox ON snapshots(sandbox_id);
CREATE TABLE dirs (
  path TEXT PRIMARY KEY,
  kind TEXT NOT NULL,
  owner TEXT NOT NULL DEFAULT '',
  released INTEGER NOT NULL DEFAULT 0,
  removing INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE dir_refs (
  from_dir TEXT NOT NULL,
  to_path TEXT NOT NULL,
  PRIMARY KEY (from_dir, to_path)
);
CREATE INDEX dir_refs_to ON dir_refs(to_path);
)sql",
    // 2: templates (template_store.cpp).
    R"sql(
CREATE TABLE templates (
  name TEXT PRIMARY KEY,
  implicit INTEGER NOT NULL DEFAULT 0,
  state TEXT NOT NULL,
  error TEXT NOT NULL DEFAULT '',
  image TEXT NOT NULL DEFAULT '',
  image_digest TEXT NOT NULL DEFAULT '',
  cpus INTEGER NOT NULL,
  memory_mb INTEGER NOT NULL,
  snapshot_id TEXT NOT NULL DEFAULT '',
  setup TEXT NOT NULL DEFAULT '[]',
  dir TEXT NOT NULL DEFAULT '',
  restore_dir TEXT NOT NULL DEFAULT '',
  created_ms INTEGER NOT NULL,
  used_ms INTEGER NOT NULL DEFAULT 0,
  uses INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE template_sandboxes (
  sandbox_id TEXT PRIMARY KEY,
  template TEXT NOT NULL
);
CREATE INDEX template_sandboxes_template ON template_sandboxes(template);
)sql",
    // 3: rest states (issue 19): a sandbox's idle time before it sleeps, and what its
    // timeout does.
    R"sql(
ALTER TABLE sandboxes ADD COLUMN autosleep_s INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN on_timeout TEXT NOT NULL DEFAULT 'delete';
)sql",
    // 4: pinned root images (store/image_pins.hpp) and the digest each sandbox and
    // snapshot runs over; archives (store/archives.cpp).
    R"sql(
ALTER TABLE sandboxes ADD COLUMN image_digest TEXT NOT NULL DEFAULT '';
ALTER TABLE snapshots ADD COLUMN image_digest TEXT NOT NULL DEFAULT '';
CREATE TABLE image_sources (
  path TEXT PRIMARY KEY,
  dev INTEGER NOT NULL,
  ino INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  mtime_ns INTEGER NOT NULL,
  digest TEXT NOT NULL
);
CREATE TABLE archives (
  sandbox_id TEXT PRIMARY KEY,
  blob TEXT NOT NULL,
  state TEXT NOT NULL,
  image_digest TEXT NOT NULL DEFAULT '',
  raw_bytes INTEGER NOT NULL DEFAULT 0,
  compressed_bytes INTEGER NOT NULL DEFAULT 0,
  created_ms INTEGER NOT NULL
);
)sql",
    // 5: sessions (store_sessions.cpp), gone with their sandbox.
    R"sql(
CREATE TABLE sessions (
  id TEXT PRIMARY KEY,
  sandbox_id TEXT NOT NULL,
  created_ms INTEGER NOT NULL
);
CREATE INDEX sessions_sandbox ON sessions(sandbox_id);
CREATE TRIGGER sessions_of_sandbox AFTER DELETE ON sandboxes
BEGIN DELETE FROM sessions WHERE sandbox_id = OLD.id; END;
)sql",
    // 6: the template a sandbox was restored from (its Sandbox's `template`), kept with
    // the sandbox even after the template is deleted; filled for the sandboxes made
    // before from template_sandboxes (which a template's delete and collect read).
    R"sql(
ALTER TABLE sandboxes ADD COLUMN template TEXT NOT NULL DEFAULT '';
UPDATE sandboxes SET template = COALESCE(
  (SELECT t.template FROM template_sandboxes t WHERE t.sandbox_id = sandboxes.id), '');
)sql",
};

constexpr int kLatest = static_cast<int>(sizeof(kMigrations) / sizeof(kMigrations[0]));

std::string labels_json(const std::map<std::string, std::string>& labels) { return nlohmann::json(labels).dump(); }

std::map<std::string, std::string> parse_labels(const std::string& text) {
    std::map<std::string, std::string> out;
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_object())
        for (const auto& [k, v] : j.items())
            if (v.is_string()) out[k] = v.get<std::string>();
    return out;
}

constexpr const char* kSandboxColumns =
    "id, vm_id, state, error, cpus, memory_mb, disable_internet, image, snapshot_id, parent_id, labels, timeout_s, "
    "end_at_ms, created_ms, updated_ms, autosleep_s, on_timeout, image_digest, template";

SandboxRecord read_sandbox(const Statement& s) {
    SandboxRecord r;
    r.id = s.text(0);
    r.vm_id = s.text(1);
    r.state = s.text(2);
    r.error = s.text(3);
    r.cpus = s.integer(4);
    r.memory_mb = s.integer(5);
    r.disable_internet = s.integer(6) != 0;
    r.image = s.text(7);
    r.snapshot_id = s.text(8);
    r.parent_id = s.text(9);
    r.labels = parse_labels(s.text(10));
    r.timeout_s = s.optional_integer(11);
    r.end_at_ms = s.optional_integer(12);
    r.created_ms = s.integer(13);
    r.updated_ms = s.integer(14);
    r.autosleep_s = s.integer(15);
    r.on_timeout = s.text(16);
    r.image_digest = s.text(17);
    r.template_name = s.text(18);
    return r;
}

constexpr const char* kSnapshotColumns =
    "id, sandbox_id, dir, state, durable, error, cpus, memory_mb, disable_internet, image, created_ms, image_digest";

SnapshotRecord read_snapshot(const Statement& s) {
    SnapshotRecord r;
    r.id = s.text(0);
    r.sandbox_id = s.text(1);
    r.dir = s.text(2);
    r.state = s.text(3);
    r.durable = s.integer(4) != 0;
    r.error = s.text(5);
    r.cpus = s.integer(6);
    r.memory_mb = s.integer(7);
    r.disable_internet = s.integer(8) != 0;
    r.image = s.text(9);
    r.created_ms = s.integer(10);
    r.image_digest = s.text(11);
    return r;
}

}  // namespace

int latest_schema_version() { return kLatest; }

int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

Store::Store(const std::string& path) : db_(path) {
    db_.exec("PRAGMA journal_mode=WAL");
    db_.exec("PRAGMA synchronous=FULL");
    db_.exec("PRAGMA foreign_keys=ON");
    migrate();
}

void Store::migrate() {
    std::lock_guard lock(mutex_);
    db_.exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)");
    for (;;) {
        Database::Transaction tx(db_);
        int version = 0;
        {
            Statement s = db_.prepare("SELECT version FROM schema_version");
            if (s.step()) {
                version = static_cast<int>(s.integer(0));
            } else {
                db_.exec("INSERT INTO schema_version (version) VALUES (0)");
            }
        }
        if (version > kLatest)
            throw std::runtime_error(fmt::format("the store is schema version {}, newer than this nanovm's {}: use a "
                                                 "newer nanovm",
                                                 version, kLatest));
        if (version == kLatest) {
            tx.commit();
            return;
        }
        db_.exec(kMigrations[version]);
        db_.prepare("UPDATE schema_version SET version = ?").bind(1, int64_t{version + 1}).run();
        tx.commit();
    }
}

int Store::schema_version() {
    std::lock_guard lock(mutex_);
    Statement s = db_.prepare("SELECT version FROM schema_version");
    return s.step() ? static_cast<int>(s.integer(0)) : 0;
}

Store::SyncScope::SyncScope(Database& db, Sync sync) : db_(db), relaxed_(sync == Sync::relaxed) {
    // The connection's setting, for this scope's commits only (the store's mutex held).
    // Prepared once and kept (Database::prepare's cache): a flip of a live VMM's state
    // costs these two statements beside its UPDATE.
    if (relaxed_) db_.prepare("PRAGMA synchronous=NORMAL").run();
}

Store::SyncScope::~SyncScope() {
    if (!relaxed_) return;
    try {
        db_.prepare("PRAGMA synchronous=FULL").run();
    } catch (const std::exception&) {  // no I/O, no parse: cannot fail short of memory
    }
}

void Store::put_sandbox(const SandboxRecord& r, Sync sync) {
    std::lock_guard lock(mutex_);
    const SyncScope scope(db_, sync);
    db_.prepare(fmt::format("INSERT OR REPLACE INTO sandboxes ({}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", kSandboxColumns))
        .bind(1, r.id)
        .bind(2, r.vm_id)
        .bind(3, r.state)
        .bind(4, r.error)
        .bind(5, r.cpus)
        .bind(6, r.memory_mb)
        .bind(7, int64_t{r.disable_internet})
        .bind(8, r.image)
        .bind(9, r.snapshot_id)
        .bind(10, r.parent_id)
        .bind(11, labels_json(r.labels))
        .bind(12, r.timeout_s)
        .bind(13, r.end_at_ms)
        .bind(14, r.created_ms)
        .bind(15, r.updated_ms)
        .bind(16, r.autosleep_s)
        .bind(17, r.on_timeout)
        .bind(18, r.image_digest)
        .bind(19, r.template_name)
        .run();
}

bool Store::set_sandbox_state(const std::string& id, const std::string& state, const std::string& error,
                              int64_t updated_ms, Sync sync) {
    std::lock_guard lock(mutex_);
    const SyncScope scope(db_, sync);
    db_.prepare("UPDATE sandboxes SET state = ?, error = ?, updated_ms = ? WHERE id = ?")
        .bind(1, state)
        .bind(2, error)
        .bind(3, updated_ms)
        .bind(4, id)
        .run();
    return db_.changes() > 0;
}

std::optional<SandboxRecord> Store::sandbox(const std::string& id) {
    std::lock_guard lock(mutex_);
    Statement s = db_.prepare(fmt::format("SELECT {} FROM sandboxes WHERE id = ?", kSandboxColumns));
    s.bind(1, id);
    if (!s.step()) return std::nullopt;
    return read_sandbox(s);
}

std::vector<SandboxRecord> Store::sandboxes(const SandboxFilter& f) {
    std::lock_guard lock(mutex_);
    std::string sql = fmt::format("SELECT {} FROM sandboxes WHERE id > ?", kSandboxColumns);
    if (!f.state.empty()) sql += " AND state = ?";
    for (size_t i = 0; i < f.labels.size(); ++i) sql += " AND json_extract(labels, ?) IS ?";
    sql += " ORDER BY id LIMIT ?";
    Statement s = db_.prepare(sql);
    int i = 1;
    s.bind(i++, f.after);
    if (!f.state.empty()) s.bind(i++, f.state);
    for (const auto& [k, v] : f.labels) {
        s.bind(i++, fmt::format("$.\"{}\"", k));  // keys are [A-Za-z0-9._-] (json_body.hpp)
        s.bind(i++, v);
    }
    s.bind(i, f.limit);
    std::vector<SandboxRecord> out;
    while (s.step()) out.push_back(read_sandbox(s));
    return out;
}

std::vector<SandboxRecord> Store::all_sandboxes() {
    std::lock_guard lock(mutex_);
    Statement s = db_.prepare(fmt::format("SELECT {} FROM sandboxes ORDER BY id", kSandboxColumns));
    std::vector<SandboxRecord> out;
    while (s.step()) out.push_back(read_sandbox(s));
    return out;
}

void Store::delete_sandbox(const std::string& id) {
    std::lock_guard lock(mutex_);
    db_.prepare("DELETE FROM sandboxes WHERE id = ?").bind(1, id).run();
}

std::map<std::string, int64_t> Store::count_by_state() {
    std::lock_guard lock(mutex_);
    std::map<std::string, int64_t> out;
    Statement s = db_.prepare("SELECT state, COUNT(*) FROM sandboxes GROUP BY state");
    while (s.step()) out[s.text(0)] = s.integer(1);
    return out;
}

void Store::put_snapshot(const SnapshotRecord& r) {
    std::lock_guard lock(mutex_);
    db_.prepare(fmt::format("INSERT OR REPLACE INTO snapshots ({}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", kSnapshotColumns))
        .bind(1, r.id)
        .bind(2, r.sandbox_id)
        .bind(3, r.dir)
        .bind(4, r.state)
        .bind(5, int64_t{r.durable})
        .bind(6, r.error)
        .bind(7, r.cpus)
        .bind(8, r.memory_mb)
        .bind(9, int64_t{r.disable_internet})
        .bind(10, r.image)
        .bind(11, r.created_ms)
        .bind(12, r.image_digest)
        .run();
}

std::optional<SnapshotRecord> Store::snapshot(const std::string& id) {
    std::lock_guard lock(mutex_);
    Statement s = db_.prepare(fmt::format("SELECT {} FROM snapshots WHERE id = ?", kSnapshotColumns));
    s.bind(1, id);
    if (!s.step()) return std::nullopt;
    return read_snapshot(s);
}

std::vector<SnapshotRecord> Store::snapshots(const std::string& sandbox_id, const std::string& after, int64_t limit) {
    std::lock_guard lock(mutex_);
    Statement s = db_.prepare(fmt::format("SELECT {} FROM snapshots WHERE id > ? AND (? = '' OR sandbox_id = ?) "
                                          "ORDER BY id LIMIT ?",
                                          kSnapshotColumns));
    s.bind(1, after).bind(2, sandbox_id).bind(3, sandbox_id).bind(4, limit);
    std::vector<SnapshotRecord> out;
    while (s.step()) out.push_back(read_snapshot(s));
    return out;
}

void Store::delete_snapshot(const std::string& id) {
    std::lock_guard lock(mutex_);
    db_.prepare("DELETE FROM snapshots WHERE id = ?").bind(1, id).run();
}

void Store::add_dir(const std::string& path, const std::string& kind, const std::string& owner, Sync sync) {
    std::lock_guard lock(mutex_);
    const SyncScope scope(db_, sync);
    db_.prepare("INSERT OR REPLACE INTO dirs (path, kind, owner, released, removing) VALUES (?, ?, ?, 0, 0)")
        .bind(1, path)
        .bind(2, kind)
        .bind(3, owner)
        .run();
}

void Store::add_refs(const std::string& from_dir, const std::vector<std::string>& to_paths, Sync sync) {
    std::lock_guard lock(mutex_);
    const SyncScope scope(db_, sync);
    Database::Transaction tx(db_);
    for (const std::string& p : to_paths)
        db_.prepare("INSERT OR IGNORE INTO dir_refs (from_dir, to_path) VALUES (?, ?)").bind(1, from_dir).bind(2, p).run();
    tx.commit();
}

void Store::release_dir(const std::string& path) {
    std::lock_guard lock(mutex_);
    db_.prepare("UPDATE dirs SET released = 1 WHERE path = ?").bind(1, path).run();
}

std::vector<std::string> Store::collect() {
    std::lock_guard lock(mutex_);
    Database::Transaction tx(db_);
    std::vector<std::string> out;
    // A released directory goes once no directory that stays (not removing) has a
    // reference to a file inside it; repeated, since a directory marked here holds
    // nothing any more.
    for (;;) {
        Statement s = db_.prepare(R"sql(
SELECT d.path FROM dirs d
WHERE d.released = 1 AND d.removing = 0 AND NOT EXISTS (
  SELECT 1 FROM dir_refs r JOIN dirs f ON f.path = r.from_dir
  WHERE f.removing = 0 AND r.from_dir != d.path
    AND substr(r.to_path, 1, length(d.path) + 1) = d.path || '/')
ORDER BY d.path)sql");
        std::vector<std::string> batch;
        while (s.step()) batch.push_back(s.text(0));
        if (batch.empty()) break;
        for (const std::string& p : batch) {
            db_.prepare("UPDATE dirs SET removing = 1 WHERE path = ?").bind(1, p).run();
            out.push_back(p);
        }
    }
    tx.commit();
    return out;
}

std::vector<std::string> Store::removing_dirs() {
    std::lock_guard lock(mutex_);
    Statement s = db_.prepare("SELECT path FROM dirs WHERE removing = 1 ORDER BY path");
    std::vector<std::string> out;
    while (s.step()) out.push_back(s.text(0));
    return out;
}

void Store::forget_dir(const std::string& path) {
    std::lock_guard lock(mutex_);
    Database::Transaction tx(db_);
    db_.prepare("DELETE FROM dir_refs WHERE from_dir = ?").bind(1, path).run();
    db_.prepare("DELETE FROM dirs WHERE path = ?").bind(1, path).run();
    tx.commit();
}

std::vector<DirRecord> Store::dirs() {
    std::lock_guard lock(mutex_);
    Statement s = db_.prepare("SELECT path, kind, owner, released, removing FROM dirs ORDER BY path");
    std::vector<DirRecord> out;
    while (s.step()) out.push_back(DirRecord{s.text(0), s.text(1), s.text(2), s.integer(3) != 0, s.integer(4) != 0});
    return out;
}

std::vector<std::string> Store::refs(const std::string& from_dir) {
    std::lock_guard lock(mutex_);
    Statement s = db_.prepare("SELECT to_path FROM dir_refs WHERE from_dir = ? ORDER BY to_path");
    s.bind(1, from_dir);
    std::vector<std::string> out;
    while (s.step()) out.push_back(s.text(0));
    return out;
}

}  // namespace nanovm::daemon::store
