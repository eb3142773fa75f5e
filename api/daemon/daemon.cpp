// The daemon's wiring (daemon.hpp): state directory, store, manager, routes, server.
#include "api/daemon/daemon.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "api/daemon/auth.hpp"
#include "api/daemon/daemon_options.hpp"
#include "api/daemon/http/server.hpp"
#include "api/daemon/metrics.hpp"
#include "api/daemon/router.hpp"
#include "api/daemon/routes/routes.hpp"
#include "api/daemon/sandbox/manager.hpp"
#include "api/daemon/store/store.hpp"
#include "api/daemon/template/template_manager.hpp"
#include "api/daemon/worker_pool.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"
#include "vmm/log.hpp"

namespace nanovm::daemon {

namespace {

// The state directory, made 0700 if missing.
void make_state_dir(const std::string& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw Error(fmt::format("state directory {}: {}", dir, ec.message()));
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) throw_errno("stat " + dir);
    if (!S_ISDIR(st.st_mode)) throw Error(fmt::format("state directory {}: not a directory", dir));
    if (st.st_uid == ::geteuid() && (st.st_mode & 077) != 0 && ::chmod(dir.c_str(), 0700) != 0)
        throw_errno("chmod " + dir);
}

// Holds <state>/nanovmd.lock for the daemon's life: one daemon per state directory.
Fd lock_state_dir(const std::string& dir) {
    const std::string path = dir + "/nanovmd.lock";
    Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!fd) throw_errno("open " + path);
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK)
            throw Error(fmt::format("another nanovmd serves {} (it holds {})", dir, path));
        throw_errno("flock " + path);
    }
    return fd;
}

// 90% of the host's MemTotal, in MiB (the default --max-memory).
uint64_t default_memory_cap_mb() {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    uint64_t kib = 0;
    while (meminfo >> key >> kib) {
        if (key == "MemTotal:") return kib / 1024 * 9 / 10;
        meminfo.ignore(256, '\n');
    }
    return 4096;
}

}  // namespace

CLI::App* add_daemon_command(CLI::App& app, DaemonOptions& o) {
    CLI::App* cmd = app.add_subcommand("daemon", "Serve the sandbox API (nanovmd) on a Unix socket (and loopback TCP)");
    cmd->add_option("--state-dir", o.state_dir,
                    "Store, sandboxes and snapshots [default: $NANOVM_STATE_DIR, /var/lib/nanovm for root, else "
                    "${XDG_DATA_HOME:-~/.local/share}/nanovm]; the API socket is DIR/nanovmd.sock")
        ->type_name("DIR");
    cmd->add_option("--listen", o.listen,
                    "Also serve on loopback TCP (127.0.0.1:PORT, [::1]:PORT or localhost:PORT, which is "
                    "127.0.0.1; port 0: any): every request needs "
                    "'Authorization: Bearer TOKEN', TOKEN from DIR/token")
        ->type_name("HOST:PORT");
    cmd->add_option("--default-timeout", o.default_timeout_s,
                    "Seconds a sandbox created without timeout_s lives (0: until deleted)")
        ->type_name("S")
        ->check(CLI::Range(int64_t{0}, int64_t{7} * 86400).description(""))
        ->capture_default_str();
    cmd->add_option("--autosleep", o.default_autosleep_s,
                    "Seconds of idleness after which a sandbox created without autosleep_s sleeps (0: never)")
        ->type_name("S")
        ->check(CLI::Range(int64_t{0}, int64_t{7} * 86400).description(""))
        ->capture_default_str();
    cmd->add_option("--autosleep-cpu", o.autosleep_cpu,
                    "A sandbox whose VMM uses more than this share of one CPU is not idle (autosleep)")
        ->type_name("FRACTION")
        ->check(CLI::Range(0.0, 64.0).description(""))
        ->capture_default_str();
    cmd->add_option("--max-sandboxes", o.max_running,
                    "Sandboxes that hold a VM at most (creating, running, paused, sleeping, archiving, unarchiving, "
                    "rebooting)")
        ->type_name("N")
        ->check(CLI::Range(1u, 4096u).description(""))
        ->capture_default_str();
    cmd->add_option("--max-memory", o.max_memory_mb,
                    "MiB of guest memory committed to running, paused and sleeping sandboxes at most [default: 90% "
                    "of the host's memory]")
        ->type_name("MiB")
        ->check(CLI::Range(uint64_t{128}, uint64_t{1} << 30).description(""));  // a sandbox takes 128 MiB at least
    // 0 was taken, and then every upload was over the limit: a file write's body is held
    // whole in memory (up to 4 GiB), an import's is spooled to a file (an export is
    // megabytes at least: vm.state and the compressed RAM).
    cmd->add_option("--max-file-size", o.max_file_bytes,
                    "Bytes of a file written through the API at most, 1024 to 4 GiB (reads are streamed, any size)")
        ->type_name("BYTES")
        ->check(CLI::Range(uint64_t{1024}, uint64_t{4} << 30).description(""))
        ->capture_default_str();
    cmd->add_option("--max-import-size", o.max_import_bytes,
                    "Bytes of a snapshot export file imported through the API at most, 1 MiB to 1 PiB (written to "
                    "DIR/uploads, not held in memory)")
        ->type_name("BYTES")
        ->check(CLI::Range(uint64_t{1} << 20, uint64_t{1} << 50).description(""))
        ->capture_default_str();
    cmd->add_option("--implicit-templates", o.max_implicit_templates,
                    "Implicit templates kept (a create of an image and shape restores its template; the least "
                    "recently used beyond this are deleted); 0: creates boot cold")
        ->type_name("N")
        ->check(CLI::Range(0u, 256u).description(""))
        ->capture_default_str();
    cmd->add_option("--standbys", o.standbys,
                    "Pre-made VMMs kept for the most used template shapes (one per shape; their guest memory counts "
                    "against --max-memory, and they end when a sandbox needs it); 0: none")
        ->type_name("N")
        ->check(CLI::Range(0u, 8u).description(""))
        ->capture_default_str();
    cmd->add_option("--warm", o.warm,
                    "VMs restored from used templates ahead of the next creates, which take them instead of "
                    "restoring (paused; their memory counts against --max-memory, and they are stopped when a "
                    "sandbox needs it); 0: none")
        ->type_name("N")
        ->check(CLI::Range(0u, 16u).description(""))
        ->capture_default_str();
    return cmd;
}

int run_daemon(const DaemonOptions& given) {
    DaemonOptions options = given;
    std::string tcp_host;
    uint16_t tcp_port = 0;
    try {
        options.state_dir = resolve_state_dir(given);
        check_socket_paths(options.state_dir);
        if (!options.listen.empty()) parse_listen(options.listen, tcp_host, tcp_port);
    } catch (const Error& e) {
        log_line(e.what());
        return 2;
    }
    try {
        const std::string& state = options.state_dir;
        make_state_dir(state);
        const Fd lock = lock_state_dir(state);
        const std::string sock = socket_path(state);
        ::unlink(sock.c_str());  // a dead daemon's: we hold the lock

        // Termination signals go to one thread (sigwait) that stops the server;
        // every thread started from here inherits the mask.
        sigset_t signals;
        sigemptyset(&signals);
        sigaddset(&signals, SIGINT);
        sigaddset(&signals, SIGTERM);
        sigaddset(&signals, SIGHUP);
        ::pthread_sigmask(SIG_BLOCK, &signals, nullptr);
        ::signal(SIGPIPE, SIG_IGN);

        std::string token;
        if (!tcp_host.empty()) token = load_or_make_token(state + "/token");

        store::Store store(state + "/store.db");
        ManagerOptions manager_options;
        manager_options.state_dir = state;
        manager_options.default_timeout_s = options.default_timeout_s;
        manager_options.max_running = options.max_running;
        manager_options.max_memory_mb = options.max_memory_mb ? options.max_memory_mb : default_memory_cap_mb();
        manager_options.max_file_bytes = options.max_file_bytes;
        TemplateOptions template_options;
        template_options.state_dir = state;
        template_options.max_implicit = options.max_implicit_templates;
        template_options.max_standbys = options.standbys;
        template_options.max_warm = options.warm;
        store::ImagePins pins(store, state + "/images", [] {
            return std::vector<std::string>{VmDriver::image_path("default"), VmDriver::image_path("tiny")};
        });  // one for the daemon: its collect() knows every pin in flight
        TemplateManager templates(template_options, store, pins);
        templates.recover();
        manager_options.default_autosleep_s = options.default_autosleep_s;
        manager_options.idle.cpu_fraction = options.autosleep_cpu;
        SandboxManager manager(manager_options, store, pins);
        manager.set_templates(&templates);
        manager.recover_and_watch();

        Metrics metrics;
        WorkerPool::Limits pool_limits;
        pool_limits.max_threads = options.workers;
        WorkerPool pool(pool_limits);
        Router router(pool);
        RouteContext context{router, metrics, options, std::chrono::steady_clock::now(), &manager, &templates,
                             [&manager] { return manager.count_by_state(); }};
        add_service_routes(context);
        add_sandbox_routes(context);
        add_exec_routes(context);
        add_file_routes(context);
        add_snapshot_routes(context);
        add_template_routes(context);
        add_rest_routes(context);
        add_session_routes(context);
        add_command_routes(context);

        http::ServerOptions server_options;
        server_options.unix_socket = sock;
        server_options.tcp_host = tcp_host;
        server_options.tcp_port = tcp_port;
        server_options.token = token;
        server_options.body_policy = [&router, uploads = manager.upload_dir()](std::string_view method,
                                                                                std::string_view path) {
            http::BodyPolicy body;
            body.limit = 64 * 1024;  // no route: a 404 or 405 follows, and a small body is enough for it
            if (const RouteSpec* spec = router.spec(method, path)) {
                body.limit = spec->body_limit;
                if (!spec->body_too_large_code.empty()) body.too_large_code = spec->body_too_large_code;
                body.too_large_hint = spec->body_too_large_hint;
                if (spec->spool_body) body.spool_dir = uploads;
            }
            return body;
        };
        http::Server server(
            server_options, [&router](http::Request request, http::Reply reply) { router.dispatch(std::move(request), std::move(reply)); },
            [&metrics](const std::string& method, const std::string& route, int status, const std::string& code,
                       double seconds) { metrics.observe(method, route, status, code, seconds); });
        std::thread signal_thread([&server, signals] {
            int sig = 0;
            ::sigwait(&signals, &sig);
            log_line(fmt::format("{}: stopping (sandboxes keep running)", ::strsignal(sig)));
            server.stop();
        });
        signal_thread.detach();
        if (tcp_host.empty())
            log_line(fmt::format("serving on unix:{}", sock));
        else
            log_line(fmt::format("serving on unix:{} and http://{}:{} (bearer token in {}/token)", sock,
                                 tcp_host.find(':') != std::string::npos ? "[" + tcp_host + "]" : tcp_host,
                                 server.tcp_port(), state));
        server.run();
        ::unlink(sock.c_str());
        return 0;
    } catch (const std::exception& e) {
        log_line(e.what());
        return 1;
    }
}

}  // namespace nanovm::daemon
