#!/usr/bin/env python3
"""Host side of the vsock check: usage vsock_host.py SOCKET STREAMS SIZE.

Serves an echo listener at SOCKET_5000 (the guest's connections to CID 2 port 5000),
waits for the guest's echo port, then opens STREAMS connections through SOCKET
("CONNECT 1234\\n" -> "OK <port>\\n") at once, each sending SIZE random bytes and
comparing the echo's sha256. Prints "vsock-host: streams=N ok=N", then tells the guest
it is done (CONNECT 1235, "done").
"""
import hashlib
import os
import socket
import sys
import threading
import time

path, STREAMS, SIZE = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def echo(conn):
    with conn:
        while True:
            data = conn.recv(1 << 16)
            if not data:
                break
            conn.sendall(data)


def listen():
    """The listener for the guest's connections to CID 2 port 5000, listening when
    this returns (the check starts the VM only once SOCKET_5000 exists)."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.unlink(path + "_5000")
    except FileNotFoundError:
        pass
    tmp = path + "_5000.tmp"
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    srv.bind(tmp)
    srv.listen(128)
    os.rename(tmp, path + "_5000")
    return srv


def serve(srv):
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=echo, args=(conn,), daemon=True).start()


def connect(port, deadline):
    while True:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            s.sendall(f"CONNECT {port}\n".encode())
            line = b""
            while not line.endswith(b"\n"):
                b = s.recv(1)
                if not b:
                    break
                line += b
            if line.startswith(b"OK "):
                return s
            s.close()
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no guest listener on vsock port {port}")
        time.sleep(0.2)


def one_stream(results, i):
    payload = os.urandom(SIZE)
    try:
        s = connect(1234, time.monotonic() + 120)
        got = bytearray()

        def reader():
            while True:
                b = s.recv(1 << 16)
                if not b:
                    break
                got.extend(b)

        t = threading.Thread(target=reader)
        t.start()
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        t.join(120)
        s.close()
        results[i] = hashlib.sha256(got).digest() == hashlib.sha256(payload).digest()
    except OSError as e:
        print(f"vsock-host: stream {i}: {e}", flush=True)
        results[i] = False


threading.Thread(target=serve, args=(listen(),), daemon=True).start()
# Wait until the guest serves its echo port, then run every stream at once.
connect(1234, time.monotonic() + 180).close()
results = [None] * STREAMS
threads = [threading.Thread(target=one_stream, args=(results, i)) for i in range(STREAMS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"vsock-host: streams={STREAMS} ok={sum(1 for r in results if r)}", flush=True)
# Keep the _5000 listener up until the guest's own streams are done: the guest
# answers on port 1235 only after them.
s = connect(1235, time.monotonic() + 600)
s.sendall(b"done\n")
s.recv(16)
s.close()
