// What `nanovm daemon` runs with, and where its state lives.
//
//   <state>/nanovmd.sock   the API's Unix socket (0600)
//   <state>/nanovmd.lock   flock(2)ed by the running daemon: one daemon per state dir
//   <state>/token          the bearer token for --listen (0600, made at first start)
//   <state>/store.db       the SQLite store (WAL: store.db-wal, store.db-shm)
//   <state>/vms/<vm id>/   each sandbox's VM directory (the daemon's run directory)
//   <state>/snapshots/<snapshot id>/   each snapshot
//   <state>/forks/<...>/   fork bases (the parent's frozen disks and state)
//   <state>/templates/<hex>/   each template (a built one's snapshot in snapshot/)
//   <state>/standbys/<cpus>x<mib>/   the pre-made VMMs' sockets (emptied at start)
//   <state>/uploads/       request bodies spooled to files (snapshot imports; emptied at start)
//   <state>/imports/<id>/  a snapshot import being unpacked and checked (emptied at start)
//
// One file system for all of them, so snapshot layers are hard links.
#pragma once

#include <cstdint>
#include <string>

namespace nanovm::daemon {

struct DaemonOptions {
    std::string state_dir;  ///< "" : default_state_dir()
    std::string listen;     ///< "" or "127.0.0.1:PORT", "[::1]:PORT", "localhost:PORT" (loopback only; PORT 0: any)
    int64_t default_timeout_s = 0;     ///< a sandbox created without timeout_s gets this (0: none)
    int64_t default_autosleep_s = 0;   ///< --autosleep: a sandbox created without autosleep_s gets this (0: never)
    double autosleep_cpu = 0.25;       ///< --autosleep-cpu: busier than this share of one CPU is not idle
    uint32_t max_running = 16;         ///< running + sleeping + paused sandboxes at most
    uint64_t max_memory_mb = 0;        ///< memory_mb committed at most (0: 90% of the host's MemTotal)
    uint64_t max_file_bytes = 256u << 20;  ///< a file written through the API at most (its body is held whole)
    uint64_t max_import_bytes = uint64_t{64} << 30;  ///< a snapshot import's body at most (spooled to a file)
    unsigned workers = 1024;           ///< threads for long requests at most (the pool grows to it: worker_pool.hpp)
    uint32_t max_implicit_templates = 4;  ///< implicit templates kept, LRU (0: creates boot cold)
    uint32_t standbys = 1;             ///< pre-made VMMs for the most used template shapes (0: none)
    uint32_t warm = 1;                 ///< VMs restored from templates ahead of creates (0: none)
};

/// $NANOVM_STATE_DIR, else /var/lib/nanovm for root, else
/// ${XDG_DATA_HOME:-$HOME/.local/share}/nanovm.
std::string default_state_dir();

/// The state directory `options` names (default_state_dir() when empty), absolute.
std::string resolve_state_dir(const DaemonOptions& options);

/// <state>/nanovmd.sock.
std::string socket_path(const std::string& state_dir);

/// Checks that the daemon's and its VMs' Unix socket paths fit a sockaddr_un (107
/// bytes and a NUL). Throws Error saying which path is too long and by how much.
void check_socket_paths(const std::string& state_dir);

/// Parses --listen: "HOST:PORT" with HOST a loopback address (127.0.0.0/8 or ::1,
/// "[::1]:PORT" for IPv6) or localhost, taken as 127.0.0.1 without a lookup (`host`
/// is then "127.0.0.1"). Throws Error with one line.
void parse_listen(const std::string& text, std::string& host, uint16_t& port);

}  // namespace nanovm::daemon
