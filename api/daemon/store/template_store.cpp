// The store's templates table (store.hpp, migration 2).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/daemon/store/store.hpp"

namespace nanovm::daemon::store {

namespace {

constexpr const char* kTemplateColumns =
    "name, implicit, state, error, image, image_digest, cpus, memory_mb, snapshot_id, setup, dir, restore_dir, "
    "created_ms, used_ms, uses";

TemplateRecord read_template(const Statement& s) {
    TemplateRecord t;
    t.name = s.text(0);
    t.implicit = s.integer(1) != 0;
    t.state = s.text(2);
    t.error = s.text(3);
    t.image = s.text(4);
    t.image_digest = s.text(5);
    t.cpus = s.integer(6);
    t.memory_mb = s.integer(7);
    t.snapshot_id = s.text(8);
    const nlohmann::json setup = nlohmann::json::parse(s.text(9), nullptr, false);
    if (setup.is_array())
        for (const auto& line : setup)
            if (line.is_string()) t.setup.push_back(line.get<std::string>());
    t.dir = s.text(10);
    t.restore_dir = s.text(11);
    t.created_ms = s.integer(12);
    t.used_ms = s.integer(13);
    t.uses = s.integer(14);
    return t;
}

}  // namespace

void Store::put_template(const TemplateRecord& t, Sync sync) {
    std::lock_guard lock(mutex_);
    const SyncScope scope(db_, sync);
    db_.prepare(fmt::format("INSERT OR REPLACE INTO templates ({}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                            kTemplateColumns))
        .bind(1, t.name)
        .bind(2, int64_t{t.implicit})
        .bind(3, t.state)
        .bind(4, t.error)
        .bind(5, t.image)
        .bind(6, t.image_digest)
        .bind(7, t.cpus)
        .bind(8, t.memory_mb)
        .bind(9, t.snapshot_id)
        .bind(10, nlohmann::json(t.setup).dump())
        .bind(11, t.dir)
        .bind(12, t.restore_dir)
        .bind(13, t.created_ms)
        .bind(14, t.used_ms)
        .bind(15, t.uses)
        .run();
}

std::optional<TemplateRecord> Store::template_record(const std::string& name) {
    std::lock_guard lock(mutex_);
    Statement s = db_.prepare(fmt::format("SELECT {} FROM templates WHERE name = ?", kTemplateColumns));
    s.bind(1, name);
    if (!s.step()) return std::nullopt;
    return read_template(s);
}

std::vector<TemplateRecord> Store::templates() {
    std::lock_guard lock(mutex_);
    Statement s = db_.prepare(fmt::format("SELECT {} FROM templates ORDER BY name", kTemplateColumns));
    std::vector<TemplateRecord> out;
    while (s.step()) out.push_back(read_template(s));
    return out;
}

void Store::delete_template(const std::string& name) {
    std::lock_guard lock(mutex_);
    db_.prepare("DELETE FROM templates WHERE name = ?").bind(1, name).run();
}

void Store::add_template_sandbox(const std::string& name, const std::string& sandbox_id, Sync sync) {
    std::lock_guard lock(mutex_);
    const SyncScope scope(db_, sync);
    db_.prepare("INSERT OR REPLACE INTO template_sandboxes (sandbox_id, template) VALUES (?, ?)")
        .bind(1, sandbox_id)
        .bind(2, name)
        .run();
}

std::vector<std::string> Store::template_sandboxes(const std::string& name) {
    std::lock_guard lock(mutex_);
    Database::Transaction tx(db_);
    db_.prepare("DELETE FROM template_sandboxes WHERE sandbox_id NOT IN (SELECT id FROM sandboxes)").run();
    std::vector<std::string> out;
    {
        Statement s = db_.prepare("SELECT sandbox_id FROM template_sandboxes WHERE template = ? ORDER BY sandbox_id");
        s.bind(1, name);
        while (s.step()) out.push_back(s.text(0));
    }
    tx.commit();
    return out;
}

}  // namespace nanovm::daemon::store
