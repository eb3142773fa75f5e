// The HTTP server (server.hpp): Boost.Beast over Asio. The only translation unit of
// the daemon that includes Beast or Asio.
#include "api/daemon/http/server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/http/file_body.hpp>
#include <fmt/format.h>

#include "api/daemon/api_error.hpp"
#include "api/daemon/auth.hpp"
#include "vmm/error.hpp"
#include "vmm/fd.hpp"
#include "vmm/log.hpp"

namespace nanovm::daemon::http {

namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using local = net::local::stream_protocol;
using Clock = std::chrono::steady_clock;

struct Shared {
    ServerOptions options;
    Dispatcher dispatcher;
    Observer observer;
};

// How long a connection that got an error answer is drained before it closes, so
// that the client reads the answer instead of a reset.
constexpr auto kLinger = std::chrono::seconds(2);

// The read buffer a request with a body gets for it, bytes. Beast reads at most the
// buffer's free capacity per read (512 bytes while it is empty): a 1 MiB body took
// 2048 reads, each with its timer and epoll calls, ~8000 system calls (in the test
// host, 265 ms of a 1 MiB file write through the API against 90 ms for a write and a
// read through the agent directly). With this, 16 reads per MiB. Given back once the
// request is read, so an idle keep-alive connection holds only what is left in it.
constexpr size_t kBodyReadBuffer = 64 * 1024;

// Bytes of queued stream chunks joined into one write, at most (plus one chunk).
constexpr size_t kStreamCoalesce = 1 << 20;

// A streamed response's flow control between the producer (a worker thread) and the
// connection's strand.
struct StreamState {
    std::mutex mutex;
    std::condition_variable space;
    size_t queued = 0;
    bool failed = false;
    // Strand side only:
    struct Chunk {
        std::string data;
        bool last = false;
        bool abort = false;  ///< with last: close instead of ending the body
    };
    std::deque<Chunk> chunks;
    bool writing = false;

    void fail() {
        std::lock_guard lock(mutex);
        failed = true;
        space.notify_all();
    }
    void release(size_t n) {
        std::lock_guard lock(mutex);
        queued -= n;
        space.notify_all();
    }
};

template <class Protocol>
class Session : public std::enable_shared_from_this<Session<Protocol>> {
public:
    using Stream = beast::basic_stream<Protocol>;

    Session(typename Protocol::socket socket, std::shared_ptr<const Shared> shared, bool over_tcp)
        : stream_(std::move(socket)), shared_(std::move(shared)), over_tcp_(over_tcp) {}

    void start() {
        net::dispatch(stream_.get_executor(), beast::bind_front_handler(&Session::read_header, this->shared_from_this()));
    }

private:
    const ServerOptions& options() const { return shared_->options; }

    void read_header() {
        spool_parser_.reset();
        parser_.emplace();
        parser_->header_limit(static_cast<std::uint32_t>(options().header_limit));
        parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // checked once the header is in
        stream_.expires_after(options().read_timeout);
        bhttp::async_read_header(stream_, buffer_, *parser_,
                                 beast::bind_front_handler(&Session::on_header, this->shared_from_this()));
    }

    static bool is_disconnect(const beast::error_code& ec) {
        return ec == bhttp::error::end_of_stream || ec == beast::error::timeout || ec == net::error::eof ||
               ec == net::error::connection_reset || ec == net::error::broken_pipe ||
               ec == net::error::operation_aborted;
    }

    void on_header(beast::error_code ec, std::size_t) {
        if (ec == bhttp::error::body_limit) return fail("body_too_large", "the body is larger than this endpoint takes");
        if (ec == bhttp::error::header_limit)
            return fail("header_too_large",
                        fmt::format("the request's headers are larger than {} bytes", options().header_limit));
        if (is_disconnect(ec) || ec == bhttp::error::partial_message) return close();
        if (ec) return fail("bad_request", fmt::format("malformed HTTP request: {}", ec.message()));
        const auto& req = parser_->get();
        if (over_tcp_) {
            const auto it = req.find(bhttp::field::authorization);
            const std::string_view given = it == req.end() ? std::string_view() : std::string_view(it->value());
            if (!bearer_matches(given, options().token)) return fail("unauthorized",
                            "unauthorized: TCP requests need 'Authorization: Bearer TOKEN', TOKEN from the daemon's "
                            "<state dir>/token (the CLI reads NANOVM_TOKEN, the Python client LITHOSBOX_TOKEN)");
        }
        const std::string_view target(req.target().data(), req.target().size());
        const std::string_view method(req.method_string().data(), req.method_string().size());
        body_ = options().body_policy ? options().body_policy(method, target.substr(0, target.find('?'))) : BodyPolicy{};
        const size_t limit = body_.limit;
        const auto length = parser_->content_length();
        if (length && *length > limit)
            return fail(body_.too_large_code, fmt::format("the body is {} bytes; this endpoint takes at most {}{}", *length,
                                                          limit, body_.too_large_hint));
        // RFC 9110 §10.1.1: a client that asked to wait (curl does for 1 MiB and more)
        // sends the body once told to go on, or after a second of its own.
        if (!parser_->is_done() && beast::iequals(req[bhttp::field::expect], "100-continue")) {
            // Sent without waiting: a client whose socket cannot take 25 bytes now has
            // not read its earlier answers, and the one I/O thread never blocks on it.
            static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
            const ssize_t n = ::send(beast::get_lowest_layer(stream_).socket().native_handle(), kContinue.data(),
                                     kContinue.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n != static_cast<ssize_t>(kContinue.size())) return close();
        }
        parser_->body_limit(limit);
        if (!parser_->is_done()) buffer_.reserve(std::min(kBodyReadBuffer, length ? static_cast<size_t>(*length) : limit));
        if (!body_.spool_dir.empty()) return start_spool(body_.spool_dir, limit, length);
        if (parser_->is_done()) return on_body({}, 0);
        bhttp::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Session::on_body, this->shared_from_this()));
    }

    void on_body(beast::error_code ec, std::size_t) {
        if (ec == bhttp::error::body_limit)
            return fail(body_.too_large_code, "the body is larger than this endpoint takes" + body_.too_large_hint);
        if (is_disconnect(ec) || ec == bhttp::error::partial_message) return close();
        if (ec) return fail("bad_request", fmt::format("malformed HTTP request: {}", ec.message()));
        auto& req = parser_->get();
        Request request;
        request.body = std::move(req.body());
        dispatch(req, std::move(request));
    }

    // A spooled body: into a new file of `dir`, read by pieces, each within the
    // read timeout.
    void start_spool(const std::string& dir, size_t limit, boost::optional<std::uint64_t> length) {
        struct statvfs fs {};
        if (length && ::statvfs(dir.c_str(), &fs) == 0 &&
            *length > static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize)
            return fail("disk_full", fmt::format("the body is {} bytes; the file system of {} has {} free", *length, dir,
                                                 static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize));
        std::string path = dir + "/.upload-XXXXXX";
        const int fd = ::mkostemp(path.data(), O_CLOEXEC);
        if (fd < 0) {
            const int err = errno;
            return fail(err == ENOSPC ? "disk_full" : "internal",
                        fmt::format("a file for the body in {}: {}", dir, ::strerror(err)));
        }
        spooled_ = std::make_shared<SpooledBody>();
        spooled_->path = path;
        beast::file_posix file;
        file.native_handle(fd);
        if (parser_->is_done()) {  // no body: an empty file
            auto& req = parser_->get();
            Request request;
            request.spooled = std::move(spooled_);
            return dispatch(req, std::move(request));
        }
        spool_parser_.emplace(std::move(*parser_));
        parser_.reset();
        beast::error_code ec;
        spool_parser_->get().body().reset(std::move(file), ec);
        if (ec) return fail("internal", fmt::format("{}: {}", path, ec.message()));
        spool_parser_->body_limit(limit);
        read_spooled();
    }

    void read_spooled() {
        stream_.expires_after(options().read_timeout);
        bhttp::async_read_some(stream_, buffer_, *spool_parser_,
                               beast::bind_front_handler(&Session::on_spooled, this->shared_from_this()));
    }

    void on_spooled(beast::error_code ec, std::size_t) {
        if (ec == bhttp::error::body_limit)
            return fail(body_.too_large_code, "the body is larger than this endpoint takes" + body_.too_large_hint);
        if (ec == boost::system::errc::no_space_on_device)
            return fail("disk_full", fmt::format("writing the body to {}: {}", spooled_->path, ec.message()));
        if (is_disconnect(ec) || ec == bhttp::error::partial_message) return close();
        if (ec) return fail("bad_request", fmt::format("malformed HTTP request: {}", ec.message()));
        if (!spool_parser_->is_done()) return read_spooled();
        auto& req = spool_parser_->get();
        spooled_->bytes = req.body().file().size(ec);
        if (ec) return fail("internal", fmt::format("{}: {}", spooled_->path, ec.message()));
        req.body().close();
        Request request;
        request.spooled = std::move(spooled_);
        dispatch(req, std::move(request));
    }

    // Hands a whole request (its body in `request` already) to the dispatcher.
    template <class Message>
    void dispatch(Message& req, Request request) {
        stream_.expires_never();
        buffer_.shrink_to_fit();  // the body's read buffer (kBodyReadBuffer) goes back
        request.method = std::string(req.method_string());
        request.target = std::string(req.target());
        if (!split_target(request.target, request.path, request.query))
            return fail("bad_request", "the path or a query parameter has a bad percent escape");
        if (auto it = req.find(bhttp::field::content_type); it != req.end()) request.content_type = std::string(it->value());
        request.over_tcp = over_tcp_;
        keep_alive_ = req.keep_alive();
        method_ = request.method;
        route_.clear();
        started_ = Clock::now();
        auto self = this->shared_from_this();
        shared_->dispatcher(std::move(request), [self](Response response) { self->reply(std::move(response)); });
    }

    void observe(int status, const std::string& code) {
        if (shared_->observer)
            shared_->observer(method_, route_, status, code,
                              std::chrono::duration<double>(Clock::now() - started_).count());
    }

    // From any thread: sends `response` (and with a stream, runs its producer here).
    void reply(Response response) {
        if (!response.stream) return send_whole(std::move(response));
        auto state = std::make_shared<StreamState>();
        auto producer = std::move(response.stream);
        net::post(stream_.get_executor(), [self = this->shared_from_this(), state, r = std::move(response)]() mutable {
            self->stream_begin(state, std::move(r));
        });
        struct Sink final : StreamSink {
            Session& session;
            std::shared_ptr<StreamState> state;
            size_t window;
            // The connection's socket, dup'ed: polled for the client's hang-up from the
            // producer's thread (a number of our own, never reused while we hold it;
            // Session::close() shuts the socket down, so holding it delays nothing).
            Fd peer;
            Sink(Session& s, std::shared_ptr<StreamState> st, size_t w, int fd)
                : session(s), state(std::move(st)), window(w), peer(::fcntl(fd, F_DUPFD_CLOEXEC, 0)) {}
            bool client_gone() override {
                {
                    std::lock_guard lock(state->mutex);
                    if (state->failed) return true;
                }
                if (!peer) return false;
                pollfd p{peer.get(), POLLRDHUP, 0};
                if (::poll(&p, 1, 0) != 1 || !(p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return false;
                state->fail();
                return true;
            }
            bool write(std::string_view data) override {
                if (data.empty()) return true;
                {
                    std::unique_lock lock(state->mutex);
                    state->space.wait(lock, [&] { return state->failed || state->queued < window; });
                    if (state->failed) return false;
                    state->queued += data.size();
                }
                session.stream_push(state, StreamState::Chunk{std::string(data), false});
                return true;
            }
        } sink(*this, state, options().stream_window, stream_.socket().native_handle());
        bool complete = true;
        try {
            producer(sink);
        } catch (const std::exception& e) {
            log_line(fmt::format("a streamed response failed: {}", e.what()));
            complete = false;
        }
        // A producer that threw: the connection is closed without the last chunk,
        // so the client sees a body cut short, never a short body that looks whole.
        stream_push(state, StreamState::Chunk{{}, true, !complete});
    }

    template <class Message>
    void set_fields(Message& m, const Response& r) {
        m.set(bhttp::field::server, "nanovmd");
        m.set(bhttp::field::content_type, r.content_type);
        for (const auto& [name, value] : r.headers) m.set(name, value);
        m.keep_alive(keep_alive_);
    }

    // A whole response, from the thread that made it (a worker, or the I/O thread for
    // a route that needs none): serialized, and sent at once for as much as the socket
    // takes without waiting, so the client has its answer without a hop to the I/O
    // thread first (under emulation that hop, a wake-up and a context switch, was a
    // large part of a short request). Safe from another thread: while a request is
    // being answered the connection has no operation pending (the next read starts
    // after the answer), and `self` keeps the socket open. The rest, if any, the
    // metrics and the next read go to the connection's strand.
    void send_whole(Response r) {
        auto wire = std::make_shared<std::string>(serialize(r));
        size_t sent = 0;
        const int fd = stream_.socket().native_handle();
        while (sent < wire->size()) {
            const ssize_t n = ::send(fd, wire->data() + sent, wire->size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0)
                sent += static_cast<size_t>(n);
            else if (n < 0 && errno == EINTR)
                continue;
            else
                break;  // full (EAGAIN) or failed: the strand's write finishes it or sees the error
        }
        net::post(stream_.get_executor(), [self = this->shared_from_this(), wire, sent, status = r.status,
                                           code = std::move(r.error_code), route = std::move(r.route)]() mutable {
            self->route_ = std::move(route);
            if (sent == wire->size()) return self->after_write({}, status, code);
            self->stream_.expires_after(self->options().write_timeout);
            net::async_write(self->stream_, net::buffer(wire->data() + sent, wire->size() - sent),
                             [self, wire, status, code](beast::error_code ec, std::size_t) {
                                 self->after_write(ec, status, code);
                             });
        });
    }

    // The bytes of a whole response: status line, headers (Content-Length, or none
    // where the status has no body), body.
    std::string serialize(Response& r) {
        bhttp::response<bhttp::string_body> res(static_cast<bhttp::status>(r.status), 11);
        set_fields(res, r);
        res.body() = std::move(r.body);
        res.prepare_payload();
        bhttp::response_serializer<bhttp::string_body> serializer(res);
        std::string out;
        out.reserve(256 + res.body().size());
        beast::error_code ec;
        do {
            serializer.next(ec, [&](beast::error_code&, const auto& buffers) {
                for (const auto b : beast::buffers_range_ref(buffers))
                    out.append(static_cast<const char*>(b.data()), b.size());
                serializer.consume(beast::buffer_bytes(buffers));
            });
        } while (!ec && !serializer.is_done());
        return out;
    }

    void after_write(beast::error_code ec, int status, const std::string& code) {
        observe(status, code);
        if (ec || !keep_alive_) return close();
        read_header();
    }

    void stream_begin(const std::shared_ptr<StreamState>& state, Response r) {
        auto res = std::make_shared<bhttp::response<bhttp::empty_body>>(static_cast<bhttp::status>(r.status), 11);
        set_fields(*res, r);
        res->chunked(true);
        auto serializer = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*res);
        state->writing = true;
        stream_status_ = r.status;
        route_ = r.route;
        stream_.expires_after(options().write_timeout);
        bhttp::async_write_header(stream_, *serializer,
                                  [self = this->shared_from_this(), state, res, serializer](beast::error_code ec,
                                                                                           std::size_t) {
                                      state->writing = false;
                                      if (ec) {
                                          state->fail();
                                          return self->close();
                                      }
                                      self->stream_next(state);
                                  });
    }

    // From the producer's thread: queues a chunk on the strand.
    void stream_push(const std::shared_ptr<StreamState>& state, StreamState::Chunk chunk) {
        net::post(stream_.get_executor(), [self = this->shared_from_this(), state, c = std::move(chunk)]() mutable {
            state->chunks.push_back(std::move(c));
            if (!state->writing) self->stream_next(state);
        });
    }

    void stream_next(const std::shared_ptr<StreamState>& state) {
        if (state->writing || state->chunks.empty()) return;
        {
            std::lock_guard lock(state->mutex);
            if (state->failed) {
                state->chunks.clear();
                return;
            }
        }
        auto chunk = std::make_shared<StreamState::Chunk>(std::move(state->chunks.front()));
        state->chunks.pop_front();
        // The data chunks queued meanwhile go out with it, as one HTTP chunk in one
        // write: a producer faster than the socket (a file read hands over the agent's
        // frames one by one) costs a wake-up and a write per queue, not per piece.
        while (!chunk->last && !state->chunks.empty() && !state->chunks.front().last &&
               chunk->data.size() < kStreamCoalesce) {
            chunk->data += state->chunks.front().data;
            state->chunks.pop_front();
        }
        state->writing = true;
        stream_.expires_after(options().write_timeout);
        auto self = this->shared_from_this();
        if (chunk->last && chunk->abort) {
            state->writing = false;
            observe(stream_status_, "");
            return close();
        }
        if (chunk->last) {
            net::async_write(stream_, bhttp::make_chunk_last(), [self, state](beast::error_code ec, std::size_t) {
                state->writing = false;
                self->observe(self->stream_status_, "");
                if (ec || !self->keep_alive_) return self->close();
                self->read_header();
            });
            return;
        }
        net::async_write(stream_, bhttp::make_chunk(net::buffer(chunk->data)),
                         [self, state, chunk](beast::error_code ec, std::size_t) {
                             state->writing = false;
                             state->release(chunk->data.size());
                             if (ec) {
                                 state->fail();
                                 return self->close();
                             }
                             self->stream_next(state);
                         });
    }

    // Answers a protocol-level error and closes the connection after a short drain.
    void fail(std::string_view code, const std::string& message) {
        Response r = error_response(code, message);
        keep_alive_ = false;
        spooled_.reset();  // its file goes now, not after the linger
        if (spool_parser_)
            method_ = std::string(spool_parser_->get().method_string());
        else
            method_ = parser_ && parser_->is_header_done() ? std::string(parser_->get().method_string()) : std::string();
        started_ = Clock::now();
        auto res = std::make_shared<bhttp::response<bhttp::string_body>>(static_cast<bhttp::status>(r.status), 11);
        set_fields(*res, r);
        res->body() = std::move(r.body);
        res->prepare_payload();
        stream_.expires_after(options().write_timeout);
        bhttp::async_write(stream_, *res,
                           [self = this->shared_from_this(), res, status = r.status,
                            c = std::move(r.error_code)](beast::error_code ec, std::size_t) {
                               self->observe(status, c);
                               if (ec) return self->close();
                               self->linger();
                           });
    }

    void linger() {
        beast::error_code ec;
        stream_.socket().shutdown(Protocol::socket::shutdown_send, ec);
        stream_.expires_after(kLinger);
        drain();
    }

    void drain() {
        stream_.async_read_some(net::buffer(scratch_), [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
            if (ec) return self->close();
            self->drain();
        });
    }

    void close() {
        spooled_.reset();
        beast::error_code ec;
        stream_.socket().shutdown(Protocol::socket::shutdown_both, ec);
        stream_.socket().close(ec);
    }

    Stream stream_;
    std::shared_ptr<const Shared> shared_;
    bool over_tcp_;
    beast::flat_buffer buffer_;
    std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
    std::optional<bhttp::request_parser<bhttp::file_body>> spool_parser_;  ///< a spooled body's (parser_ moved in)
    std::shared_ptr<SpooledBody> spooled_;  ///< its file until the request is dispatched
    bool keep_alive_ = false;
    BodyPolicy body_;  ///< the current request's, from on_header
    std::string method_, route_;
    int stream_status_ = 200;
    Clock::time_point started_{};
    char scratch_[4096];
};

}  // namespace

struct Server::Impl {
    explicit Impl(unsigned io_threads) : ioc(static_cast<int>(io_threads < 1 ? 1 : io_threads)) {}
    net::io_context ioc;  ///< its concurrency hint: the I/O threads (1: asio wakes no other one for its own posts)
    std::shared_ptr<Shared> shared;
    std::optional<local::acceptor> unix_acceptor;
    std::optional<tcp::acceptor> tcp_acceptor;
    net::steady_timer unix_retry{ioc}, tcp_retry{ioc};

    template <class Protocol, class Acceptor>
    void accept(Acceptor& acceptor, net::steady_timer& retry, bool over_tcp) {
        acceptor.async_accept(net::make_strand(ioc), [this, &acceptor, &retry, over_tcp](beast::error_code ec,
                                                                                        typename Protocol::socket s) {
            if (ec == net::error::operation_aborted) return;
            if (ec) {
                // Out of fds (EMFILE) or similar: say so, then try again shortly
                // instead of spinning.
                static RateLimiter limiter;
                uint64_t suppressed = 0;
                if (limiter.allow(suppressed)) log_line(fmt::format("accept: {}", ec.message()));
                retry.expires_after(std::chrono::milliseconds(50));
                retry.async_wait([this, &acceptor, &retry, over_tcp](beast::error_code wait_ec) {
                    if (!wait_ec) accept<Protocol>(acceptor, retry, over_tcp);
                });
                return;
            }
            // Asio makes sockets without close-on-exec: a VMM the daemon starts must
            // not inherit a client's connection (the launcher forks and execs).
            ::fcntl(s.native_handle(), F_SETFD, FD_CLOEXEC);
            std::make_shared<Session<Protocol>>(std::move(s), shared, over_tcp)->start();
            accept<Protocol>(acceptor, retry, over_tcp);
        });
    }
};

Server::Server(ServerOptions options, Dispatcher dispatcher, Observer observer)
    : impl_(std::make_unique<Impl>(options.io_threads)) {
    impl_->shared = std::make_shared<Shared>(Shared{std::move(options), std::move(dispatcher), std::move(observer)});
    const ServerOptions& o = impl_->shared->options;
    try {
        impl_->unix_acceptor.emplace(impl_->ioc);
        impl_->unix_acceptor->open(local());
        ::fcntl(impl_->unix_acceptor->native_handle(), F_SETFD, FD_CLOEXEC);
        impl_->unix_acceptor->bind(local::endpoint(o.unix_socket));
        if (::chmod(o.unix_socket.c_str(), 0600) != 0) throw_errno("chmod " + o.unix_socket);
        impl_->unix_acceptor->listen(net::socket_base::max_listen_connections);
    } catch (const boost::system::system_error& e) {
        throw Error(fmt::format("listen on {}: {}", o.unix_socket, e.code().message()));
    }
    if (!o.tcp_host.empty()) {
        try {
            const tcp::endpoint endpoint(net::ip::make_address(o.tcp_host), o.tcp_port);
            impl_->tcp_acceptor.emplace(impl_->ioc);
            impl_->tcp_acceptor->open(endpoint.protocol());
            ::fcntl(impl_->tcp_acceptor->native_handle(), F_SETFD, FD_CLOEXEC);
            impl_->tcp_acceptor->set_option(net::socket_base::reuse_address(true));
            impl_->tcp_acceptor->bind(endpoint);
            impl_->tcp_acceptor->listen(net::socket_base::max_listen_connections);
        } catch (const boost::system::system_error& e) {
            throw Error(fmt::format("listen on {}:{}: {}", o.tcp_host, o.tcp_port, e.code().message()));
        }
    }
}

Server::~Server() = default;

uint16_t Server::tcp_port() const {
    return impl_->tcp_acceptor ? impl_->tcp_acceptor->local_endpoint().port() : 0;
}

void Server::run() {
    impl_->accept<local>(*impl_->unix_acceptor, impl_->unix_retry, false);
    if (impl_->tcp_acceptor) impl_->accept<tcp>(*impl_->tcp_acceptor, impl_->tcp_retry, true);
    std::vector<std::thread> threads;
    const unsigned n = impl_->shared->options.io_threads < 1 ? 1 : impl_->shared->options.io_threads;
    for (unsigned i = 1; i < n; ++i) threads.emplace_back([this] { impl_->ioc.run(); });
    impl_->ioc.run();
    for (std::thread& t : threads) t.join();
}

void Server::stop() { impl_->ioc.stop(); }

}  // namespace nanovm::daemon::http
