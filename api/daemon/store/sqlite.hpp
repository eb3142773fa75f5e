// A small RAII wrapper over the SQLite C API (https://sqlite.org/c3ref/intro.html):
// one connection, prepared statements with bound parameters (never SQL built from
// input) kept for reuse, transactions. Errors throw SqliteError with the statement's
// message.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>

struct sqlite3;
struct sqlite3_stmt;

namespace nanovm::daemon::store {

/// A failed SQLite call: what() names the call and SQLite's message.
class SqliteError : public std::runtime_error {
public:
    SqliteError(const std::string& what, int code) : std::runtime_error(what), code_(code) {}
    /// SQLite's primary result code (SQLITE_FULL = 13 when the disk is full).
    int code() const noexcept { return code_ & 0xff; }
    bool disk_full() const noexcept { return code() == 13; }

private:
    int code_;
};

class Database;

/// A prepared statement. One made by Database::prepare goes back to the database's
/// cache when destroyed (reset, bindings cleared), so the next prepare of the same SQL
/// skips SQLite's parser (sqlite3_prepare_v2: the larger share of a one-row read).
class Statement {
public:
    /// A statement of its own (finalized when destroyed).
    Statement(sqlite3* db, std::string_view sql);
    Statement(Statement&& other) noexcept;
    Statement& operator=(Statement&&) = delete;
    ~Statement();

    /// Binds parameter `index` (1-based).
    Statement& bind(int index, int64_t value);
    Statement& bind(int index, std::string_view value);
    Statement& bind(int index, const std::optional<int64_t>& value);
    Statement& bind_null(int index);
    /// Steps once: true while a row is there.
    bool step();
    /// Steps to the end (for statements without rows).
    void run();
    /// Column `index` (0-based) of the current row.
    int64_t integer(int index) const;
    std::string text(int index) const;
    bool is_null(int index) const;
    std::optional<int64_t> optional_integer(int index) const;

private:
    friend class Database;
    Statement(Database* owner, sqlite3* db, sqlite3_stmt* stmt, std::string sql);

    sqlite3* db_;
    sqlite3_stmt* stmt_ = nullptr;
    Database* owner_ = nullptr;  ///< the cache it goes back to (nullptr: finalized)
    std::string sql_;            ///< its cache key
};

class Database {
public:
    /// Opens (creating) the database file at `path`, with a 5 s busy timeout.
    explicit Database(const std::string& path);
    Database(const Database&) = delete;
    Database& operator=(const Database&) = delete;
    ~Database();

    /// Runs SQL without parameters (may hold several statements).
    void exec(std::string_view sql);
    /// A statement for `sql` (one statement): from the cache when one is idle there,
    /// else newly prepared. Thread-safe as the connection is (SQLITE_OPEN_FULLMUTEX);
    /// a statement itself is used by one thread at a time.
    Statement prepare(std::string_view sql);
    /// Rows changed by the last statement.
    int64_t changes() const;

    /// BEGIN IMMEDIATE ... COMMIT, or ROLLBACK when destroyed without commit().
    class Transaction {
    public:
        explicit Transaction(Database& db);
        ~Transaction();
        void commit();

    private:
        Database& db_;
        bool done_ = false;
    };

private:
    friend class Statement;
    /// Takes back a reset statement (finalizes it when the cache is full).
    void give_back(std::string sql, sqlite3_stmt* stmt) noexcept;

    /// Idle statements kept, at most.
    static constexpr size_t kCachedStatements = 128;

    sqlite3* db_ = nullptr;
    std::mutex cache_mutex_;
    std::unordered_multimap<std::string, sqlite3_stmt*> cache_;  ///< idle statements by SQL
};

}  // namespace nanovm::daemon::store
