"""HTTP/1.1 to nanovmd over its Unix socket or loopback TCP (http.client only).

Where the daemon is (docs/api.md "Reaching the daemon", the CLI's rule):
``LITHOSBOX_URL`` (``http://127.0.0.1:PORT`` with ``LITHOSBOX_TOKEN``, or
``unix:///path/to/nanovmd.sock``), else ``NANOVM_URL`` (token from ``NANOVM_TOKEN`` or
``<state>/token``), else the socket ``<state>/nanovmd.sock`` where ``<state>`` is
``$NANOVM_STATE_DIR``, else ``/var/lib/nanovm`` for root, else
``${XDG_DATA_HOME:-~/.local/share}/nanovm``.
"""

import errno
import http.client
import json
import os
import socket
import threading
import time
import urllib.parse
from typing import IO, Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from .errors import (BusyError, DaemonNotRunningError, InternalError, LithosBoxError,
                     LithosBoxTimeoutError, error_from_answer)

Body = Union[None, bytes, Mapping[str, Any], IO[bytes]]
Query = Optional[Mapping[str, Union[str, int, bool, None]]]

_BLOCK = 1 << 20  # bytes per read/write of file bodies


def segment(value: str) -> str:
    """``value`` (an id or a name a caller gave) as one URL path segment: every character
    but RFC 3986's unreserved ones percent-encoded, so a ``/`` or ``?`` in it cannot
    reach another route (``"../x"`` is the id ``../x``: not found)."""
    return urllib.parse.quote(str(value), safe="")


def default_state_dir() -> str:
    """The daemon's state directory by the CLI's rule (without ``--state-dir``)."""
    env = os.environ.get("NANOVM_STATE_DIR")
    if env:
        return os.path.abspath(env)
    if os.geteuid() == 0:
        return "/var/lib/nanovm"
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.abspath(os.path.join(data, "nanovm"))


class Endpoint:
    """Where the daemon is: a Unix socket path, or a loopback host and port with a token."""

    def __init__(self, unix_socket: Optional[str] = None, host: Optional[str] = None,
                 port: int = 0, token: Optional[str] = None, state_dir: Optional[str] = None) -> None:
        self.unix_socket = unix_socket
        self.host = host
        self.port = port
        self.token = token
        self.state_dir = state_dir

    def address(self) -> str:
        if self.unix_socket:
            return f"unix://{self.unix_socket}"
        return f"http://{self.host}:{self.port}"


def _parse_http_url(url: str, var: str) -> Tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or not parts.port:
        raise LithosBoxError(f"{var}={url}: want http://127.0.0.1:PORT (or unix:///path/nanovmd.sock)",
                             code="bad_url")
    return parts.hostname, parts.port


def find_endpoint(url: Optional[str] = None, token: Optional[str] = None,
                  state_dir: Optional[str] = None) -> Endpoint:
    """The daemon's endpoint from the arguments, else the environment (module docstring)."""
    var = "url"
    if url is None and state_dir is None:
        if os.environ.get("LITHOSBOX_URL"):
            url, var = os.environ["LITHOSBOX_URL"], "LITHOSBOX_URL"
            token = token or os.environ.get("LITHOSBOX_TOKEN") or None
        elif os.environ.get("NANOVM_URL"):
            url, var = os.environ["NANOVM_URL"], "NANOVM_URL"
            token = token or os.environ.get("NANOVM_TOKEN") or None
    sdir = os.path.abspath(state_dir) if state_dir else default_state_dir()
    if url:
        if url.startswith("unix://"):
            sock = url[len("unix://"):]
            # The daemon's socket is <state dir>/nanovmd.sock: that state directory is
            # the one to name when nothing answers there (none for another socket path).
            own = os.path.dirname(os.path.abspath(sock)) if os.path.basename(sock) == "nanovmd.sock" else None
            return Endpoint(unix_socket=sock, state_dir=own)
        host, port = _parse_http_url(url, var)
        if not token:
            path = os.path.join(sdir, "token")
            try:
                with open(path) as f:
                    token = f.read().strip()
            except OSError:
                raise LithosBoxError(
                    f"{var} is set but there is no token: set LITHOSBOX_TOKEN (or NANOVM_TOKEN), "
                    f"or make {path} readable", code="no_token") from None
        return Endpoint(host=host, port=port, token=token, state_dir=sdir)
    return Endpoint(unix_socket=os.path.join(sdir, "nanovmd.sock"), state_dir=sdir)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__("nanovm", timeout=timeout, blocksize=_BLOCK)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self._path)
        except BaseException:
            s.close()
            raise
        self.sock = s


class Response:
    """An answer being read: status, headers, and the body (whole or streamed)."""

    def __init__(self, transport: "Transport", conn: http.client.HTTPConnection,
                 resp: http.client.HTTPResponse) -> None:
        self._transport = transport
        self._conn: Optional[http.client.HTTPConnection] = conn
        self._resp = resp
        self.status = resp.status
        self.headers = resp.headers
        self.body: Optional[bytes] = None  # the whole body, once read by Transport.request

    def json_body(self) -> Any:
        """The whole body (read by Transport.request) as JSON; None when empty."""
        data = self.body if self.body is not None else self.read()
        if not data:
            return None
        try:
            return json.loads(data.decode("utf-8"))
        except ValueError:
            raise InternalError(f"the daemon answered {self.status} with a body that is not JSON: "
                                f"{data[:200]!r}", code="bad_answer", status=self.status) from None

    def read(self) -> bytes:
        try:
            data = self._resp.read()
        except (OSError, http.client.HTTPException) as e:
            self._discard()
            raise self._transport._broken(e) from e
        self.close()
        return data

    def iter_chunks(self, size: int = _BLOCK) -> Iterator[bytes]:
        try:
            while True:
                chunk = self._resp.read1(size) if hasattr(self._resp, "read1") else self._resp.read(size)
                if not chunk:
                    break
                yield chunk
        except (OSError, http.client.HTTPException) as e:
            self._discard()
            raise self._transport._broken(e) from e
        self.close()

    def iter_lines(self) -> Iterator[bytes]:
        try:
            while True:
                line = self._resp.readline()
                if not line:
                    break
                if line.strip():
                    yield line
        except (OSError, http.client.HTTPException) as e:
            self._discard()
            raise self._transport._broken(e) from e
        self.close()

    def close(self) -> None:
        """Gives the connection back for reuse once the body was read whole."""
        if self._conn is None:
            return
        if self._resp.isclosed() and not self._resp.will_close:
            self._transport._give_back(self._conn)
        else:
            self._conn.close()
        self._conn = None

    def _discard(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class Transport:
    """Requests to one daemon; idle keep-alive connections are reused (thread-safe)."""

    BUSY_RETRIES = 4  # 503 busy: tried again after 0.2, 0.4, 0.8, 1.6 s
    BUSY_FIRST_DELAY_S = 0.2

    def __init__(self, endpoint: Endpoint, timeout: Optional[float] = 600.0) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self._idle: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def _new_connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self.endpoint.unix_socket:
            return _UnixConnection(self.endpoint.unix_socket, timeout)
        return http.client.HTTPConnection(self.endpoint.host or "127.0.0.1", self.endpoint.port,
                                          timeout=timeout, blocksize=_BLOCK)

    def _take(self, timeout: Optional[float]) -> Tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._closed:
                raise LithosBoxError("this LithosBox client is closed", code="client_closed")
            conn = self._idle.pop() if self._idle else None
        if conn is not None:
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            return conn, True
        return self._new_connection(timeout), False

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < 8:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def _broken(self, e: BaseException) -> LithosBoxError:
        if isinstance(e, socket.timeout):
            return LithosBoxTimeoutError(f"nanovmd at {self.endpoint.address()} did not answer in time ({e})")
        if isinstance(e, (FileNotFoundError, ConnectionRefusedError)) or (
                isinstance(e, OSError) and e.errno in (errno.ENOENT, errno.ECONNREFUSED)):
            reason = "no such socket" if isinstance(e, FileNotFoundError) or e.errno == errno.ENOENT \
                else "connection refused"
            return DaemonNotRunningError(self.endpoint.address(), reason, self.endpoint.state_dir)
        return LithosBoxError(f"the connection to nanovmd at {self.endpoint.address()} failed: {e}",
                              code="connection_failed")

    def request(self, method: str, path: str, body: Body = None, query: Query = None,
                timeout: Union[float, None, str] = "default", stream: bool = False,
                headers: Optional[Mapping[str, str]] = None, length: Optional[int] = None) -> Response:
        """Sends one request; answers the Response of a 2xx, raises the mapped error else.

        Args:
            body: a mapping (sent as JSON), bytes, or a binary file object (streamed:
                with ``length`` as Content-Length, else chunked).
            query: query parameters (None values left out; booleans as true/false).
            timeout: seconds to wait for the daemon (None: forever; "default": the
                client's).
            stream: leave the body unread (iterate the Response).
        Raises: DaemonNotRunningError, LithosBoxTimeoutError, a LithosBoxError subclass
            for the daemon's error answers (errors.error_from_answer).
        """
        t: Optional[float] = self.timeout if timeout == "default" else timeout  # type: ignore[assignment]
        target = path
        if query:
            pairs = [(k, ("true" if v else "false") if isinstance(v, bool) else str(v))
                     for k, v in query.items() if v is not None]
            if pairs:
                target += "?" + urllib.parse.urlencode(pairs)
        hdrs: Dict[str, str] = {"Accept": "application/json"}
        data: Any = None
        if isinstance(body, Mapping):
            data = json.dumps(body).encode("utf-8")
            hdrs["Content-Type"] = "application/json"
        elif isinstance(body, (bytes, bytearray, memoryview)):
            data = bytes(body)
            hdrs["Content-Type"] = "application/octet-stream"
        elif body is not None:
            data = body
            hdrs["Content-Type"] = "application/octet-stream"
            if length is not None:
                hdrs["Content-Length"] = str(length)
        if self.endpoint.token:
            hdrs["Authorization"] = f"Bearer {self.endpoint.token}"
        hdrs.update(headers or {})
        replayable = data is None or isinstance(data, bytes)
        busy_delay = self.BUSY_FIRST_DELAY_S
        attempt = 0
        while True:
            attempt += 1
            conn, reused = self._take(t)
            try:
                chunked = data is not None and not isinstance(data, bytes) and "Content-Length" not in hdrs
                conn.request(method, target, body=data, headers=hdrs, encode_chunked=chunked)
                resp = conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                conn.close()
                if reused and replayable:
                    continue  # a keep-alive connection the daemon had closed meanwhile
                raise self._broken(e) from e
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise self._broken(e) from e
            answer = Response(self, conn, resp)
            if 200 <= resp.status < 300:
                if not stream:
                    answer.body = answer.read()
                return answer
            raw = answer.read()
            err = error_from_answer(resp.status, raw, resp.headers.get("Retry-After"))
            if isinstance(err, BusyError) and err.code == "busy" and replayable and attempt <= self.BUSY_RETRIES:
                time.sleep(busy_delay)
                busy_delay *= 2
                continue
            raise err

    def call(self, method: str, path: str, body: Body = None, query: Query = None,
             timeout: Union[float, None, str] = "default", expect_json: bool = True) -> Any:
        """One request answered whole: its JSON (None for an empty body, e.g. 204)."""
        answer = self.request(method, path, body=body, query=query, timeout=timeout)
        if not expect_json:
            return answer.body or b""
        return answer.json_body()

    def pages(self, path: str, field: str, query: Query = None) -> List[Dict[str, Any]]:
        """Every item of a paged list (``{field: [...], "next": id|null}``)."""
        items: List[Dict[str, Any]] = []
        after: Optional[str] = None
        while True:
            q: Dict[str, Any] = dict(query or {})
            q["limit"] = 1000
            if after:
                q["after"] = after
            page = self.call("GET", path, query=q)
            items.extend(page.get(field) or [])
            nxt = page.get("next")
            if not isinstance(nxt, str) or not nxt:
                return items
            after = nxt


def drain_ndjson(lines: Iterator[bytes], on_line: Callable[[Dict[str, Any]], None]) -> None:
    """Parses NDJSON lines, handing each object to ``on_line``."""
    for raw in lines:
        try:
            obj = json.loads(raw.decode("utf-8"))
        except ValueError:
            raise InternalError(f"the daemon streamed a line that is not JSON: {raw[:200]!r}",
                                code="bad_answer") from None
        if isinstance(obj, dict):
            on_line(obj)
