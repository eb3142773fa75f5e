// nanovmd's HTTP client over Boost.Beast's synchronous API (http_client.hpp). The only
// file of the client that includes Boost.
#include "api/client/http_client.hpp"

#include <optional>
#include <variant>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

namespace nanovm::client {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;

std::string Endpoint::describe() const {
    if (!unix_socket.empty()) return "unix socket " + unix_socket;
    return fmt::format("http://{}:{}", host.find(':') != std::string::npos ? "[" + host + "]" : host, port);
}

namespace {

std::string percent_encode(std::string_view text, bool keep_slash) {
    std::string out;
    for (const unsigned char c : text) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/'))
            out += static_cast<char>(c);
        else
            out += fmt::format("%{:02X}", c);
    }
    return out;
}

}  // namespace

std::string url_encode(std::string_view text) { return percent_encode(text, true); }

std::string url_encode_segment(std::string_view text) { return percent_encode(text, false); }

namespace {

using UnixSocket = net::local::stream_protocol::socket;
using TcpSocket = net::ip::tcp::socket;

// Bytes of a streamed body read per piece.
constexpr size_t kPiece = 64 * 1024;

// A broken kept-alive connection: the daemon closed it between two requests.
struct StaleConnection {};

}  // namespace

struct HttpClient::Impl {
    Endpoint endpoint;
    net::io_context io;
    std::optional<std::variant<UnixSocket, TcpSocket>> socket;
    beast::flat_buffer buffer;

    void close() {
        if (socket) std::visit([](auto& s) { beast::error_code ignored; s.close(ignored); }, *socket);
        socket.reset();
        buffer.clear();
    }

    void connect() {
        close();
        beast::error_code ec;
        if (!endpoint.unix_socket.empty()) {
            UnixSocket s(io);
            s.connect(net::local::stream_protocol::endpoint(endpoint.unix_socket), ec);
            if (ec) throw Unreachable(fmt::format("nothing answers at {}: {}", endpoint.describe(), ec.message()));
            socket.emplace(std::move(s));
        } else {
            TcpSocket s(io);
            s.connect(net::ip::tcp::endpoint(net::ip::make_address(endpoint.host, ec), endpoint.port), ec);
            if (ec) throw Unreachable(fmt::format("nothing answers at {}: {}", endpoint.describe(), ec.message()));
            s.set_option(net::ip::tcp::no_delay(true), ec);
            socket.emplace(std::move(s));
        }
    }

    template <typename Stream, typename Body>
    Response exchange(Stream& s, bhttp::request<Body>& req, const BodySink& sink, bool reused) {
        beast::error_code ec;
        bhttp::write(s, req, ec);
        const beast::error_code send_error = ec;
        if (ec && reused) throw StaleConnection{};
        // A send that broke off: the daemon may have answered before it read the whole
        // body (413 body_too_large, 507 disk_full); that answer is read if it is there.
        bhttp::response_parser<bhttp::buffer_body> parser;
        parser.body_limit(boost::none);
        parser.header_limit(64 * 1024);
        bhttp::read_header(s, buffer, parser, ec);
        if (ec && send_error)
            throw Error(fmt::format("{}: sending the request: {}", endpoint.describe(), send_error.message()));
        if (ec) {
            if (reused && (ec == bhttp::error::end_of_stream || ec == net::error::connection_reset ||
                           ec == net::error::eof))
                throw StaleConnection{};
            throw Error(fmt::format("{}: reading the answer: {}", endpoint.describe(), ec.message()));
        }
        Response r;
        r.status = static_cast<int>(parser.get().result_int());
        if (const auto it = parser.get().find(bhttp::field::content_type); it != parser.get().end())
            r.content_type = std::string(it->value());
        const bool to_sink = sink && r.status / 100 == 2;
        std::string piece(kPiece, '\0');
        while (!parser.is_done()) {
            parser.get().body().data = piece.data();
            parser.get().body().size = piece.size();
            bhttp::read_some(s, buffer, parser, ec);
            if (ec == bhttp::error::need_buffer) ec = {};
            if (ec) throw Error(fmt::format("{}: the answer broke off: {}", endpoint.describe(), ec.message()));
            const size_t n = piece.size() - parser.get().body().size;
            if (n == 0) continue;
            if (to_sink)
                sink(std::string_view(piece.data(), n));
            else
                r.body.append(piece.data(), n);
        }
        if (!parser.keep_alive()) close();
        return r;
    }

    template <typename Body>
    Response send(bhttp::request<Body>& req, const BodySink& sink) {
        for (int attempt = 0;; ++attempt) {
            const bool reused = socket.has_value();
            if (!socket) connect();
            try {
                return std::visit([&](auto& s) { return exchange(s, req, sink, reused && attempt == 0); }, *socket);
            } catch (const StaleConnection&) {
                close();
            } catch (...) {
                close();
                throw;
            }
        }
    }
};

HttpClient::HttpClient(Endpoint endpoint) : impl_(std::make_unique<Impl>()) { impl_->endpoint = std::move(endpoint); }
HttpClient::~HttpClient() = default;
HttpClient::HttpClient(HttpClient&&) noexcept = default;
HttpClient& HttpClient::operator=(HttpClient&&) noexcept = default;

const Endpoint& HttpClient::endpoint() const noexcept { return impl_->endpoint; }

Response HttpClient::request(std::string_view method, std::string_view target, const RequestBody& body,
                             const BodySink& sink) {
    const auto prepare = [&](auto& req) {
        req.method_string(std::string(method));
        req.target(std::string(target));
        req.version(11);
        req.keep_alive(true);
        const Endpoint& ep = impl_->endpoint;
        req.set(bhttp::field::host, ep.unix_socket.empty() ? fmt::format("{}:{}", ep.host, ep.port) : "nanovm");
        req.set(bhttp::field::user_agent, "nanovm-cli");
        if (ep.unix_socket.empty()) req.set(bhttp::field::authorization, "Bearer " + ep.token);
    };
    if (!body.file.empty()) {
        bhttp::request<bhttp::file_body> req;
        prepare(req);
        beast::error_code ec;
        req.body().open(body.file.c_str(), beast::file_mode::scan, ec);
        if (ec) throw Error(fmt::format("{}: {}", body.file, ec.message()));
        impl_->close();  // a fresh connection: a file body cannot be sent twice (no retry)
        req.set(bhttp::field::content_type, body.content_type);
        req.prepare_payload();
        return impl_->send(req, sink);
    }
    bhttp::request<bhttp::string_body> req;
    prepare(req);
    if (!body.data.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
        req.set(bhttp::field::content_type, body.content_type);
        req.body() = body.data;
    }
    req.prepare_payload();
    return impl_->send(req, sink);
}

}  // namespace nanovm::client
