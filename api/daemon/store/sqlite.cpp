// SQLite wrapper (sqlite.hpp).
#include "api/daemon/store/sqlite.hpp"

#include <sqlite3.h>

#include <fmt/format.h>

namespace nanovm::daemon::store {

namespace {

[[noreturn]] void fail(sqlite3* db, int rc, std::string_view what) {
    throw SqliteError(fmt::format("sqlite {}: {}", what, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc)), rc);
}

}  // namespace

Statement::Statement(sqlite3* db, std::string_view sql) : db_(db) {
    const int rc = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr);
    if (rc != SQLITE_OK) fail(db, rc, fmt::format("prepare \"{}\"", sql.substr(0, 80)));
}

Statement::Statement(Database* owner, sqlite3* db, sqlite3_stmt* stmt, std::string sql)
    : db_(db), stmt_(stmt), owner_(owner), sql_(std::move(sql)) {}

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_), stmt_(other.stmt_), owner_(other.owner_), sql_(std::move(other.sql_)) {
    other.stmt_ = nullptr;
}

Statement::~Statement() {
    if (!stmt_) return;
    if (!owner_) {
        sqlite3_finalize(stmt_);
        return;
    }
    sqlite3_reset(stmt_);  // its error, if any, was thrown by step()
    sqlite3_clear_bindings(stmt_);
    owner_->give_back(std::move(sql_), stmt_);
}

Statement& Statement::bind(int index, int64_t value) {
    if (const int rc = sqlite3_bind_int64(stmt_, index, value); rc != SQLITE_OK) fail(db_, rc, "bind");
    return *this;
}

Statement& Statement::bind(int index, std::string_view value) {
    if (const int rc = sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT);
        rc != SQLITE_OK)
        fail(db_, rc, "bind");
    return *this;
}

Statement& Statement::bind(int index, const std::optional<int64_t>& value) {
    return value ? bind(index, *value) : bind_null(index);
}

Statement& Statement::bind_null(int index) {
    if (const int rc = sqlite3_bind_null(stmt_, index); rc != SQLITE_OK) fail(db_, rc, "bind");
    return *this;
}

bool Statement::step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail(db_, rc, "step");
}

void Statement::run() {
    while (step()) {
    }
}

int64_t Statement::integer(int index) const { return sqlite3_column_int64(stmt_, index); }

std::string Statement::text(int index) const {
    const auto* p = sqlite3_column_text(stmt_, index);
    return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(stmt_, index)))
             : std::string();
}

bool Statement::is_null(int index) const { return sqlite3_column_type(stmt_, index) == SQLITE_NULL; }

std::optional<int64_t> Statement::optional_integer(int index) const {
    if (is_null(index)) return std::nullopt;
    return integer(index);
}

Database::Database(const std::string& path) {
    const int rc = sqlite3_open_v2(path.c_str(), &db_,
                                   SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
    if (rc != SQLITE_OK) {
        const std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
        sqlite3_close(db_);
        db_ = nullptr;
        throw SqliteError(fmt::format("sqlite open {}: {}", path, message), rc);
    }
    sqlite3_busy_timeout(db_, 5000);
    sqlite3_extended_result_codes(db_, 1);
}

Database::~Database() {
    for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
    sqlite3_close_v2(db_);
}

void Database::exec(std::string_view sql) {
    const std::string text(sql);
    char* message = nullptr;
    const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &message);
    if (rc != SQLITE_OK) {
        const std::string m = message ? message : sqlite3_errstr(rc);
        sqlite3_free(message);
        throw SqliteError(fmt::format("sqlite exec \"{}\": {}", text.substr(0, 80), m), rc);
    }
}

Statement Database::prepare(std::string_view sql) {
    std::string key(sql);
    {
        std::lock_guard lock(cache_mutex_);
        if (const auto it = cache_.find(key); it != cache_.end()) {
            sqlite3_stmt* stmt = it->second;
            cache_.erase(it);
            return Statement(this, db_, stmt, std::move(key));
        }
    }
    sqlite3_stmt* stmt = nullptr;
    const int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
    if (rc != SQLITE_OK) fail(db_, rc, fmt::format("prepare \"{}\"", sql.substr(0, 80)));
    return Statement(this, db_, stmt, std::move(key));
}

void Database::give_back(std::string sql, sqlite3_stmt* stmt) noexcept {
    try {
        std::lock_guard lock(cache_mutex_);
        if (cache_.size() < kCachedStatements) {
            cache_.emplace(std::move(sql), stmt);
            return;
        }
    } catch (...) {  // no memory for the entry: it is finalized instead
    }
    sqlite3_finalize(stmt);
}

int64_t Database::changes() const { return sqlite3_changes64(db_); }

Database::Transaction::Transaction(Database& db) : db_(db) { db_.exec("BEGIN IMMEDIATE"); }

Database::Transaction::~Transaction() {
    if (!done_) {
        try {
            db_.exec("ROLLBACK");
        } catch (const std::exception&) {
        }
    }
}

void Database::Transaction::commit() {
    db_.exec("COMMIT");
    done_ = true;
}

}  // namespace nanovm::daemon::store
