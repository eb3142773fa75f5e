#!/usr/bin/env python3
"""Guest side of the vsock check (runs in the default root disk's python3).

1. Serves an echo service on vsock port 1234 for the host's streams.
2. Opens STREAMS connections to the host (CID 2) port 5000 at once; on each sends
   SIZE random bytes, half-closes, reads the echo back and compares sha256.
Prints "vsock-guest: streams=N ok=N" when the guest-initiated streams are done, then
keeps serving the echo port until the host's line "done" arrives on port 1235.
"""
import hashlib
import os
import socket
import sys
import threading

STREAMS = int(sys.argv[1]) if len(sys.argv) > 1 else 64
SIZE = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20


def echo(conn):
    with conn:
        while True:
            data = conn.recv(1 << 16)
            if not data:
                break
            conn.sendall(data)


def serve_echo():
    srv = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    srv.bind((socket.VMADDR_CID_ANY, 1234))
    srv.listen(128)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=echo, args=(conn,), daemon=True).start()


def one_stream(results, i):
    payload = os.urandom(SIZE)
    try:
        s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        s.connect((socket.VMADDR_CID_HOST, 5000))
        got = bytearray()
        reader_done = threading.Event()

        def reader():
            while True:
                b = s.recv(1 << 16)
                if not b:
                    break
                got.extend(b)
            reader_done.set()

        t = threading.Thread(target=reader)
        t.start()
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        t.join(120)
        s.close()
        results[i] = hashlib.sha256(got).digest() == hashlib.sha256(payload).digest()
    except OSError as e:
        print(f"vsock-guest: stream {i}: {e}", flush=True)
        results[i] = False


threading.Thread(target=serve_echo, daemon=True).start()
done_srv = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
done_srv.bind((socket.VMADDR_CID_ANY, 1235))
done_srv.listen(1)
print("vsock-guest: listening", flush=True)

results = [None] * STREAMS
threads = [threading.Thread(target=one_stream, args=(results, i)) for i in range(STREAMS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"vsock-guest: streams={STREAMS} ok={sum(1 for r in results if r)}", flush=True)
conn, _ = done_srv.accept()
conn.recv(16)
conn.sendall(b"bye\n")
conn.close()
print("vsock-guest: host done", flush=True)
