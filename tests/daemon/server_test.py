#!/usr/bin/env python3
"""nanovmd's HTTP server and its protocol-level answers (no guest needed): the
Unix socket, loopback TCP with the bearer token, unknown routes and methods, body
and header limits, connections opened and dropped, /v1/health, /metrics and the
OpenAPI document against the routes the daemon really has; --listen localhost and the
non-loopback addresses it refuses. TAP.
Usage: server_test.py NANOVM"""

import os
import socket
import stat
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Daemon, Tap, main_guard, status_line  # noqa: E402


def run():
    nanovm = sys.argv[1]
    tap = Tap()
    d = Daemon(nanovm, listen=True).start()
    try:
        h = d.get("/v1/health")
        tap.ok(h.status == 200 and h.json()["status"] == "ok", "GET /v1/health over the Unix socket: 200 ok", h)
        mode = stat.S_IMODE(os.stat(d.socket_path).st_mode)
        tap.ok(mode == 0o600, f"the socket is 0600 (it is {mode:o})")
        tok_mode = stat.S_IMODE(os.stat(os.path.join(d.state_dir, "token")).st_mode)
        tap.ok(tok_mode == 0o600 and len(d.token()) == 64, f"the token file is 0600 with 64 hex digits ({tok_mode:o})")

        # --- auth over TCP ---
        a = d.get("/v1/health", tcp=True)
        tap.ok(a.status == 401 and a.code() == "unauthorized", "TCP without a token: 401 unauthorized", a)
        a = d.get("/v1/health", tcp=True, headers={"Authorization": "Bearer " + "0" * 64})
        tap.ok(a.status == 401 and a.code() == "unauthorized", "TCP with a wrong token: 401", a)
        a = d.get("/v1/health", tcp=True, headers={"Authorization": "Bearer " + d.token()[:-1]})
        tap.ok(a.status == 401, "TCP with a token one digit short: 401", a)
        a = d.get("/v1/health", tcp=True, headers={"Authorization": "Basic " + d.token()})
        tap.ok(a.status == 401, "TCP with the token under another scheme: 401", a)
        a = d.get("/v1/nope", tcp=True)
        tap.ok(a.status == 401 and "nope" not in a.body, "TCP without a token on an unknown path: 401 and nothing more", a)
        a = d.get("/v1/health", tcp=True, headers={"Authorization": "Bearer " + d.token()})
        tap.ok(a.status == 200 and a.json()["status"] == "ok", "TCP with the right token: 200", a)
        a = d.get("/v1/health", tcp=True, headers={"Authorization": "bEARER " + d.token()})
        tap.ok(a.status == 200, "TCP with the scheme in another case (RFC 9110 §11.1): 200", a)
        a = d.get("/v1/health", tcp=True, headers={"Authorization": "Basic! " + d.token()})
        tap.ok(a.status == 401, "TCP with another scheme of that length: 401", a)

        # --- routing ---
        a = d.get("/v1/nope")
        tap.ok(a.status == 404 and a.code() == "no_route", "unknown path: 404 no_route", a)
        a = d.request("DELETE", "/v1/health")
        tap.ok(a.status == 405 and a.code() == "method_not_allowed" and "GET" in a.headers.get("Allow", ""),
               "wrong method: 405 with Allow", a)
        a = d.get("/v1/health/../../etc/passwd")
        tap.ok(a.status == 404, "../ in a path: 404", a)
        a = d.get("/v1/health?x=%zz")
        tap.ok(a.status == 400 and a.code() == "bad_request", "a bad percent escape in the query: 400", a)

        # --- limits ---
        a = d.post("/v1/health", body="x" * (2 << 20))
        tap.ok(a.status == 413 and a.code() == "body_too_large", "a 2 MiB body where 64 KiB is the limit: 413", a)
        raw = d.raw(b"POST /v1/health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                    + (b"10000\r\n" + b"y" * 0x10000 + b"\r\n") * 3 + b"0\r\n\r\n")
        tap.ok(status_line(raw) == 413, "a chunked body over the limit: 413", raw[:200])
        big = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (10 << 20) + b"\r\n\r\n"
        raw = d.raw(big)
        tap.ok(status_line(raw) == 431 and b"header_too_large" in raw, "a 10 MB header: 431 header_too_large", raw[:200])
        raw = d.raw(b"GARBAGE\r\n\r\n")
        tap.ok(status_line(raw) == 400, "a request line that is not HTTP: 400", raw[:200])
        raw = d.raw(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n")
        tap.ok(status_line(raw) == 400, "a negative Content-Length: 400", raw[:200])

        # The file upload route's limit is --max-file-size: its own code, and the flag named.
        raw = d.raw(b"PUT /v1/sandboxes/00000000-0000-4000-8000-000000000000/files?path=/x HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Length: 300000000\r\n\r\n")
        tap.ok(status_line(raw) == 413 and b"file_too_large" in raw and b"--max-file-size" in raw,
               "a file upload over --max-file-size: 413 file_too_large naming the flag", raw[:300])
        # Expect: 100-continue (curl sends it for bodies of 1 MiB and more, then waits 1 s
        # for the go-ahead): answered at once, then the body is read and the request answered.
        ask = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ask.connect(d.socket_path)
        ask.settimeout(0.5)
        ask.sendall(b"POST /v1/sandboxes/00000000-0000-4000-8000-000000000000/sleep HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Length: 2\r\nExpect: 100-continue\r\n\r\n")
        try:
            interim = ask.recv(4096)
        except socket.timeout:
            interim = b"(nothing in 0.5 s)"
        tap.ok(interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), "Expect: 100-continue: 100 Continue at once", interim)
        ask.settimeout(10)
        ask.sendall(b"{}")
        final = interim[len(b"HTTP/1.1 100 Continue\r\n\r\n"):] if interim.startswith(b"HTTP/1.1 100") else b""
        while b"sandbox_not_found" not in final:
            chunk = ask.recv(4096)
            if not chunk:
                break
            final += chunk
        tap.ok(final.startswith(b"HTTP/1.1 404") and b"sandbox_not_found" in final,
               "then the body is read and the request answered (404 sandbox_not_found)", final[:200])
        ask.close()

        # A request that never ends holds only its own connection.
        slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        slow.connect(d.socket_path)
        slow.sendall(b"POST /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
        a = d.get("/v1/health")
        tap.ok(a.status == 200, "a half-sent request on another connection does not block the daemon", a)
        slow.close()

        # 1000 connections opened and dropped, some mid-request.
        def hammer(k):
            for i in range(250):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.connect(d.socket_path)
                    if i % 3 == 1:
                        s.sendall(b"GET /v1/health HTTP/1.1\r\nHo")
                    elif i % 3 == 2:
                        s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
                finally:
                    s.close()
        threads = [threading.Thread(target=hammer, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        a = d.get("/v1/health")
        tap.ok(a.status == 200 and d.alive(), "1000 connections opened and dropped: the daemon still serves", a)

        # Keep-alive: several requests on one connection.
        conn = d.connection()
        statuses = []
        for path in ["/v1/health", "/v1/nope", "/v1/health"]:
            conn.request("GET", path)
            r = conn.getresponse()
            r.read()
            statuses.append(r.status)
        conn.close()
        tap.ok(statuses == [200, 404, 200], f"three requests on one keep-alive connection: {statuses}")

        # --- metrics ---
        m = d.get("/metrics")
        tap.ok(m.status == 200 and m.headers.get("Content-Type", "").startswith("text/plain"),
               "GET /metrics: 200 text/plain", m)
        tap.ok('nanovm_api_errors_total{code="no_route"}' in m.body
               and 'nanovm_api_errors_total{code="unauthorized"}' in m.body,
               "/metrics counts errors by code (no_route, unauthorized)", m.body[-2000:])
        tap.ok('nanovm_api_operation_seconds_bucket{op="GET /v1/health",le="+Inf"}' in m.body
               and "# TYPE nanovm_api_operation_seconds histogram" in m.body,
               "/metrics has a latency histogram per operation", m.body[:2000])
        tap.ok("# TYPE nanovm_sandboxes gauge" in m.body and 'nanovm_sandboxes{state="running"} 0' in m.body
               and 'nanovm_sandboxes{state="archived"} 0' in m.body,
               "/metrics has the sandboxes-per-state gauge, a line for every state (0 with no sandboxes)", m.body[:800])

        # --- OpenAPI against the routes the daemon has ---
        doc = d.get("/v1/openapi.json")
        tap.ok(doc.status == 200 and doc.json()["openapi"].startswith("3."), "GET /v1/openapi.json: an OpenAPI 3 document", doc)
        spec = doc.json()
        missing = []
        for path, ops in spec["paths"].items():
            concrete = path.replace("{id}", "00000000-0000-4000-8000-000000000000")
            for method in ops:
                a = d.request(method.upper(), concrete + ("?path=/x" if "files" in path else ""),
                              body=None if method in ("get", "delete") else "{}")
                if a.code() in ("no_route", "method_not_allowed"):
                    missing.append(f"{method.upper()} {path}: {a}")
        tap.ok(not missing and len(spec["paths"]) >= 3,
               f"every one of the document's {sum(len(v) for v in spec['paths'].values())} operations is a route of the daemon",
               "\n".join(missing))
        documented = {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops}
        undocumented = []
        for method in ["GET", "POST", "PUT", "PATCH", "DELETE"]:
            for path in spec["paths"]:
                if (method, path) in documented:
                    continue
                concrete = path.replace("{id}", "00000000-0000-4000-8000-000000000000")
                a = d.request(method, concrete, body=None if method in ("GET", "DELETE") else "{}")
                if a.code() != "method_not_allowed":
                    undocumented.append(f"{method} {path}: {a}")
        tap.ok(not undocumented, "no method the document leaves out is served on its paths (405)", "\n".join(undocumented))
        codes = {e["code"] for e in spec["x-nanovm-errors"]}
        tap.ok({"bad_json", "unauthorized", "no_route", "body_too_large", "header_too_large"} <= codes,
               "the document carries the error catalogue (x-nanovm-errors)")

        # --- a second daemon on the same state directory is refused ---
        other = Daemon(nanovm, state_dir=d.state_dir)
        try:
            other.start(timeout=5)
            tap.ok(False, "a second daemon on the same state directory is refused")
        except RuntimeError as e:
            tap.ok("another nanovmd serves" in str(e), "a second daemon on the same state directory is refused", e)
        a = d.get("/v1/health")
        tap.ok(a.status == 200, "the first daemon still serves", a)
    finally:
        code = d.stop()
        tap.ok(code == 0 and not os.path.exists(d.socket_path), f"SIGTERM: exit 0 and the socket removed (exit {code})",
               d.stderr()[-2000:])
        d.cleanup()

    # A state directory whose socket path is too long: a clear error.
    long_dir = "/tmp/" + "d" * 120
    r = Daemon(nanovm, state_dir=long_dir)
    try:
        r.start(timeout=5)
        tap.ok(False, "a state directory too long for sun_path is refused")
    except RuntimeError as e:
        tap.ok("too long" in str(e) and "sockaddr_un" in str(e), "a state directory too long for sun_path is refused", e)
    finally:
        r.stop()
        import shutil
        shutil.rmtree(long_dir, ignore_errors=True)

    # --listen localhost:PORT is 127.0.0.1 (no lookup), with the token as ever; a host
    # that is not loopback is refused at the start, naming the flag.
    lo = Daemon(nanovm, listen="localhost:0")
    try:
        lo.start()
        tap.ok("http://127.0.0.1:" in lo.stderr(), "--listen localhost:0 serves on 127.0.0.1", lo.stderr()[-500:])
        a = lo.get("/v1/health", tcp=True)
        tap.ok(a.status == 401, "--listen localhost: TCP without a token is 401", a)
        a = lo.get("/v1/health", tcp=True, headers={"Authorization": "Bearer " + lo.token()})
        tap.ok(a.status == 200 and a.json()["status"] == "ok", "--listen localhost: TCP with the token is 200", a)
    except RuntimeError as e:
        tap.ok(False, "--listen localhost:0 starts", e)
    finally:
        lo.cleanup()
    for listen in ("0.0.0.0:0", "example.com:0", "localhost.example.com:0", "[::]:0", "192.168.1.1:0"):
        with tempfile.TemporaryDirectory() as state:
            p = subprocess.run([nanovm, "daemon", "--state-dir", state, "--listen", listen], capture_output=True,
                               text=True, timeout=30)
        tap.ok(p.returncode == 2 and f"--listen {listen}: only a loopback address" in p.stderr,
               f"--listen {listen}: refused at the start, exit 2 ({p.returncode})", p.stderr)
    return tap.done()


if __name__ == "__main__":
    main_guard(run)
