// A small RAII wrapper over the SQLite C API (https://sqlite.org/c3ref/intro.html):
// one connection, prepared statements with bound parameters (never SQL built from
// input), transactions. Errors throw SqliteError with the statement's message.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

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

class Statement {
public:
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
    sqlite3* db_;
    sqlite3_stmt* stmt_ = nullptr;
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
    sqlite3* db_ = nullptr;
};

}  // namespace nanovm::daemon::store
