"""A small scripted HTTP/1.1 server on a Unix socket (or loopback TCP) standing in for
nanovmd in the client's unit tests: it records every request and answers what the
test queued for its method and path (keep-alive, chunked request bodies)."""

import http.server
import json
import os
import socket
import socketserver
import tempfile
import threading
import urllib.parse
from typing import Any, Dict, List, Optional, Tuple, Union


class Recorded:
    """One request the fake daemon received."""

    def __init__(self, method: str, target: str, headers: Dict[str, str], body: bytes) -> None:
        self.method = method
        parts = urllib.parse.urlsplit(target)
        self.path = parts.path
        self.query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body.decode()) if self.body else None

    def __repr__(self) -> str:
        return f"{self.method} {self.path} {self.query} {self.body[:100]!r}"


Answer = Tuple[int, Dict[str, str], bytes]


def answer(status: int, body: Union[None, dict, list, bytes, str] = None,
           headers: Optional[Dict[str, str]] = None) -> Answer:
    """An answer: a dict/list is sent as JSON, str as text, bytes as they are."""
    h = dict(headers or {})
    if isinstance(body, (dict, list)):
        raw = json.dumps(body).encode()
        h.setdefault("Content-Type", "application/json")
    elif isinstance(body, str):
        raw = body.encode()
    else:
        raw = body or b""
    return status, h, raw


def error(status: int, code: str, message: str = "", headers: Optional[Dict[str, str]] = None) -> Answer:
    return answer(status, {"error": {"code": code, "message": message or code.replace("_", " ")}}, headers)


def ndjson(*lines: dict) -> Answer:
    return answer(200, "".join(json.dumps(x) + "\n" for x in lines), {"Content-Type": "application/x-ndjson"})


class FakeDaemon:
    """``queue(method, path, *answers)`` scripts the answers (in order; the last one
    repeats); unscripted requests get 404 no_route. ``requests`` lists what came."""

    def __init__(self, tcp: bool = False) -> None:
        self.requests: List[Recorded] = []
        self.routes: Dict[Tuple[str, str], List[Answer]] = {}
        self.connections = 0
        self.broken: List[Recorded] = []
        self.dir = tempfile.mkdtemp(prefix="lbfake.")
        self.socket_path = os.path.join(self.dir, "nanovmd.sock")
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def setup(self) -> None:
                super().setup()
                fake.connections += 1

            def address_string(self) -> str:
                return "unix"

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = b""
                    while True:
                        size = int(self.rfile.readline().strip().split(b";")[0], 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return out
                        out += self.rfile.read(size)
                        self.rfile.readline()
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _handle(self) -> None:
                rec = Recorded(self.command, self.path, dict(self.headers.items()), self._body())
                fake.requests.append(rec)
                queued = fake.routes.get((rec.method, rec.path))
                if queued:
                    status, headers, raw = queued.pop(0) if len(queued) > 1 else queued[0]
                else:
                    status, headers, raw = error(404, "no_route", f"no route {rec.method} {rec.path}")
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                try:
                    if raw:  # (an empty write to a client that already went away fails)
                        self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    fake.broken.append(rec)  # the client went away before reading the answer

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

        if tcp:
            class TCPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
                daemon_threads = True
            self.server: socketserver.BaseServer = TCPServer(("127.0.0.1", 0), Handler)
            self.port = self.server.server_address[1]  # type: ignore[attr-defined]
        else:
            class UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
                daemon_threads = True
            self.server = UnixServer(self.socket_path, Handler)
            self.port = 0
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def queue(self, method: str, path: str, *answers: Answer) -> None:
        self.routes.setdefault((method, path), []).extend(answers)

    def last(self, method: Optional[str] = None, path: Optional[str] = None) -> Recorded:
        for r in reversed(self.requests):
            if (method is None or r.method == method) and (path is None or r.path == path):
                return r
        raise AssertionError(f"no request {method} {path} in {self.requests}")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        try:
            os.unlink(self.socket_path)
        except OSError:
            pass
        os.rmdir(self.dir) if not os.listdir(self.dir) else None


def free_socket_path() -> str:
    """A path where no socket is (for DaemonNotRunningError)."""
    d = tempfile.mkdtemp(prefix="lbnone.")
    return os.path.join(d, "nanovmd.sock")


def refused_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
