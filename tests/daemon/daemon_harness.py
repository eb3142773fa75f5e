"""Test harness for nanovmd: starts the real daemon binary on a temporary state
directory and talks HTTP to it over its Unix socket (or loopback TCP), with the
Python standard library only. TAP output through Tap."""

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over an AF_UNIX stream socket."""

    def __init__(self, path, timeout=30):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class Answer:
    def __init__(self, status, headers, body, raw=b""):
        self.status = status
        self.headers = headers
        self.body = body
        self.raw = raw

    def json(self):
        return json.loads(self.body)

    def code(self):
        """The error code of an error answer, or None."""
        try:
            return self.json()["error"]["code"]
        except Exception:
            return None

    def __repr__(self):
        return f"{self.status} {self.body[:300]!r}"


class Daemon:
    """One nanovmd process on its own state directory."""

    count = 0

    def __init__(self, nanovm, state_dir=None, args=(), listen=False, env=None):
        self.nanovm = nanovm
        self.own_dir = state_dir is None
        self.state_dir = state_dir or tempfile.mkdtemp(prefix="nanovmd-test-", dir=os.environ.get("TMPDIR", "/tmp"))
        self.socket_path = os.path.join(self.state_dir, "nanovmd.sock")
        self.args = list(args)
        self.listen = listen
        self.env = dict(os.environ, **(env or {}))
        self.proc = None
        self.tcp_port = None
        Daemon.count += 1
        self.stderr_path = os.path.join(self.state_dir, f"daemon-{os.getpid()}-{Daemon.count}.stderr")

    def start(self, timeout=20):
        cmd = [self.nanovm, "daemon", "--state-dir", self.state_dir] + self.args
        if self.listen:
            cmd += ["--listen", self.listen if isinstance(self.listen, str) else "127.0.0.1:0"]
        os.makedirs(self.state_dir, exist_ok=True)
        self.stderr_file = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.stderr_file, env=self.env)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nanovmd exited with {self.proc.returncode}: {self.stderr()}")
            text = self.stderr()
            if "serving on" in text:
                m = re.findall(r"http://127\.0\.0\.1:(\d+)", text)
                if m:
                    self.tcp_port = int(m[-1])
                if not self.listen or self.tcp_port:
                    return self
            time.sleep(0.05)
        raise RuntimeError(f"nanovmd did not start within {timeout} s: {self.stderr()}")

    def stderr(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def print_stderr_tail(self, limit=3000):
        """The end of the daemon's stderr (its last `limit` characters) as TAP comments:
        what a test script prints after a failed check."""
        print("# daemon stderr (end):")
        for line in self.stderr()[-limit:].splitlines():
            print("# " + line)

    def token(self):
        with open(os.path.join(self.state_dir, "token")) as f:
            return f.read().strip()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr_file.close()
        code = self.proc.returncode
        self.proc = None
        return code

    def cleanup(self):
        self.stop()
        if self.own_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    # --- requests ---
    def connection(self, tcp=False, timeout=60):
        if tcp:
            return http.client.HTTPConnection("127.0.0.1", self.tcp_port, timeout=timeout)
        return UnixHTTPConnection(self.socket_path, timeout=timeout)

    def request(self, method, path, body=None, headers=None, tcp=False, timeout=60):
        """One request on a new connection. `body`: dict/list (sent as JSON), str or bytes."""
        headers = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            headers.setdefault("Content-Type", "application/json")
        if isinstance(body, str):
            body = body.encode()
        conn = self.connection(tcp, timeout)
        try:
            conn.request(method, path, body=body, headers=headers)
            r = conn.getresponse()
            data = r.read()
            data = data or b""
            return Answer(r.status, dict(r.getheaders()), data.decode(errors="replace"), data)
        finally:
            conn.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body if body is not None else {}, **kw)

    def create(self, body, deadline_s=600, timeout=300):
        """POST /v1/sandboxes, retried while the answer is 503 template_building (after
        its Retry-After seconds), for at most deadline_s. Returns (the last answer,
        how many 503 template_building answers came first)."""
        end = time.time() + deadline_s
        building = 0
        while True:
            a = self.post("/v1/sandboxes", body, timeout=timeout)
            if a.status != 503 or a.code() != "template_building" or time.time() >= end:
                return a, building
            building += 1
            time.sleep(float(a.headers.get("Retry-After", "1")))

    def raw(self, data, tcp=False, read_timeout=10, send_timeout=30):
        """Sends raw bytes on a new connection; returns what came back (maybe b'')."""
        if tcp:
            s = socket.create_connection(("127.0.0.1", self.tcp_port))
        else:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(self.socket_path)
        s.settimeout(send_timeout)
        out = b""
        try:
            try:
                s.sendall(data)
            except (BrokenPipeError, ConnectionResetError, socket.timeout):
                pass
            s.settimeout(read_timeout)
            while True:
                try:
                    chunk = s.recv(65536)
                except (ConnectionResetError, socket.timeout):
                    break
                if not chunk:
                    break
                out += chunk
        finally:
            s.close()
        return out


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def ok(self, cond, name, diag=None):
        self.n += 1
        if cond:
            print(f"ok {self.n} - {name}", flush=True)
        else:
            self.failed += 1
            print(f"not ok {self.n} - {name}", flush=True)
            if diag is not None:
                for line in str(diag).splitlines()[:40]:
                    print(f"# {line}", flush=True)
        return cond

    def skip(self, name, why):
        self.n += 1
        print(f"ok {self.n} - {name} # SKIP {why}", flush=True)

    def done(self):
        print(f"1..{self.n}", flush=True)
        return 1 if self.failed else 0


def status_line(raw):
    """The status code of a raw HTTP answer, or None."""
    m = re.match(rb"HTTP/1\.[01] (\d{3})", raw)
    return int(m.group(1)) if m else None


def main_guard(fn):
    try:
        sys.exit(fn())
    except Exception as e:  # a harness failure is a TAP bail-out, with the reason
        import traceback
        print(f"Bail out! {type(e).__name__}: {e}")
        traceback.print_exc()
        sys.exit(1)
