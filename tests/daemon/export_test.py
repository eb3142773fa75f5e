#!/usr/bin/env python3
"""nanovmd's snapshot export and import endpoints without a guest: an export of an
unknown snapshot is 404; an import of an empty, random, foreign or out-of-range
file is 400 invalid_archive naming the check, of a well-formed export whose root
image this host lacks 422 image_not_found naming its sha256, of a body over
--max-import-size 413, of a Content-Length beyond the free space 507; an upload cut
off by its client is removed. After each: nothing in <state>/uploads or
<state>/imports, no snapshot recorded, the daemon serving. The CLI's `snapshot
export|import` exit statuses and messages for the same. TAP.
Usage: export_test.py NANOVM"""

import json
import os
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Daemon, Tap, main_guard, status_line  # noqa: E402

UUID = "00000000-0000-4000-8000-000000000000"
MAX_IMPORT = 1 << 20
DIGEST = "ab" * 32


def crc32c(data):
    """CRC-32C (Castagnoli, reflected), as snapshot/crc32c.hpp."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def archive_head(info, images=None):
    """The header and meta of an archive (api/daemon/archive/archive_format.hpp) with
    `info`; no body after them (an import reads the info before the body)."""
    meta = json.dumps({"images": images or [{"name": "vm.state", "bytes": 4096}, {"name": "memory", "bytes": 1 << 27}],
                       "info": info}).encode()
    head = b"NANOVMAR" + struct.pack("<III", 1, len(meta), crc32c(meta))
    return head + struct.pack("<I", crc32c(head)) + meta


def export_info(**over):
    info = {"format": "nanovm-snapshot", "format_version": 1, "snapshot_id": UUID, "created_ms": 1700000000000,
            "cpus": 1, "memory_mb": 128, "disable_internet": False, "image": "custom", "image_digest": DIGEST,
            "image_bytes": 4096, "disks": []}
    info.update(over)
    return info


def run():
    nanovm = sys.argv[1]
    tap = Tap()
    d = Daemon(nanovm, args=["--max-import-size", str(MAX_IMPORT)]).start()
    state = d.state_dir
    try:
        def leftovers():
            out = []
            for sub in ("uploads", "imports"):
                p = os.path.join(state, sub)
                out += [f"{sub}/{n}" for n in (os.listdir(p) if os.path.isdir(p) else ["<missing>"])]
            return out

        def clean(name):
            """Nothing left on disk or in the store, and the daemon answers."""
            deadline = time.time() + 5  # a connection's end is seen by the server a moment later
            while leftovers() and time.time() < deadline:
                time.sleep(0.05)
            snaps = d.get("/v1/snapshots").json()["snapshots"]
            tap.ok(not leftovers() and snaps == [] and d.get("/v1/health").status == 200,
                   f"{name}: nothing left in uploads/ or imports/, no snapshot, the daemon serves",
                   f"{leftovers()} {snaps}")

        def message(a):
            try:
                return a.json()["error"]["message"]
            except Exception:
                return a.body

        def expect(name, a, status, code, text=""):
            tap.ok(a.status == status and a.code() == code and text in message(a),
                   f"{name}: {status} {code}" + (f" ({text})" if text else ""), a)

        def imp(body, **kw):
            return d.post("/v1/snapshots/import", body, headers={"Content-Type": "application/octet-stream"}, **kw)

        for path in [f"/v1/snapshots/{UUID}/export", "/v1/snapshots/not-a-uuid/export"]:
            expect(f"GET {path}", d.get(path), 404, "snapshot_not_found")
        g = d.get("/v1/snapshots/import")
        tap.ok(g.status == 405 and g.code() == "method_not_allowed" and g.headers.get("Allow") == "POST",
               "GET /v1/snapshots/import: 405, Allow: POST (the import's path, not a snapshot id)", g)
        expect("PUT /v1/snapshots/import", d.request("PUT", "/v1/snapshots/import", b"x"), 405, "method_not_allowed")

        expect("import of an empty body", imp(b""), 400, "invalid_archive", "empty")
        clean("empty")
        expect("import of 64 KiB of noise", imp(bytes((i * 131 + 7) % 256 for i in range(65536))), 400,
               "invalid_archive", "bad magic")
        clean("noise")
        head = archive_head(export_info())
        broken = head[:30] + bytes([head[30] ^ 1]) + head[31:]
        expect("import with a flipped meta byte", imp(broken), 400, "invalid_archive", "meta checksum mismatch")
        expect("import cut inside the meta", imp(head[:-5]), 400, "invalid_archive", "truncated inside its meta")
        expect("import of a sandbox archive (no snapshot format)", imp(archive_head({"sandbox_id": UUID})), 400,
               "invalid_archive", "not a snapshot export")
        expect("import with cpus 64", imp(archive_head(export_info(cpus=64))), 400, "invalid_archive", '"cpus"')
        expect("import with a digest that is a path", imp(archive_head(export_info(image_digest="../../etc/passwd"))),
               400, "invalid_archive", "image_digest")
        expect("import of format_version 2", imp(archive_head(export_info(format_version=2))), 400, "invalid_archive",
               "format_version")
        clean("malformed headers")
        a = imp(head)
        expect("import over a root image this host lacks", a, 422, "image_not_found", DIGEST)
        clean("unknown root image")
        chunked = d.raw(b"POST /v1/snapshots/import HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                        b"Connection: close\r\n\r\n" + (b"3e8\r\n" + b"x" * 1000 + b"\r\n") * 2 + b"0\r\n\r\n")
        tap.ok(status_line(chunked) == 400 and b"invalid_archive" in chunked and b"bad magic" in chunked,
               "import of a chunked body of noise: 400 invalid_archive (bad magic)", chunked[:300])
        clean("chunked")

        over = d.raw(b"POST /v1/snapshots/import HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (MAX_IMPORT + 1))
        tap.ok(status_line(over) == 413 and b"body_too_large" in over, "a Content-Length over --max-import-size: 413",
               over[:300])
        chunked_over = d.raw(b"POST /v1/snapshots/import HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                             + b"%x\r\n" % (MAX_IMPORT + 4096) + b"z" * (MAX_IMPORT + 4096) + b"\r\n0\r\n\r\n")
        tap.ok(status_line(chunked_over) == 413, "a chunked body that grows over --max-import-size: 413",
               chunked_over[:300])
        clean("over the limit")
        cut = d.raw(b"POST /v1/snapshots/import HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + b"NANOVMAR" * 100,
                    read_timeout=0.5)
        tap.ok(cut == b"", "an upload whose client goes away gets no answer", cut[:200])
        clean("an upload cut off")

        # 507: a Content-Length beyond the state file system's free space (a second
        # daemon whose limit does not stop it first).
        d2 = Daemon(nanovm, args=["--max-import-size", str(1 << 50)]).start()  # the most it takes: 1 PiB
        try:
            full = d2.raw(b"POST /v1/snapshots/import HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (1 << 49))
            tap.ok(status_line(full) == 507 and b"disk_full" in full and b"free" in full,
                   "a Content-Length beyond the free space: 507 disk_full", full[:300])
            tap.ok(os.listdir(os.path.join(d2.state_dir, "uploads")) == [] and d2.get("/v1/health").status == 200,
                   "507: no upload file, the daemon serves")
        finally:
            d2.cleanup()

        # The CLI.
        env = dict(os.environ, NANOVM_STATE_DIR=state)
        env.pop("NANOVM_URL", None)
        work = tempfile.mkdtemp(prefix="nvexp-", dir=os.environ.get("TMPDIR", "/tmp"))
        try:
            def cli(*args):
                return subprocess.run([nanovm, "snapshot", *args], env=env, capture_output=True, text=True, timeout=60)

            out = os.path.join(work, "out.nvsnap")
            r = cli("export", UUID, out)
            tap.ok(r.returncode == 4 and "no snapshot" in r.stderr and os.listdir(work) == [],
                   "snapshot export of an unknown id: exit 4, no file and no partial file", (r.returncode, r.stderr))
            noise = os.path.join(work, "noise.nvsnap")
            with open(noise, "wb") as f:
                f.write(b"\0" * 5000)
            r = cli("import", noise)
            tap.ok(r.returncode == 2 and "bad magic" in r.stderr and r.stdout == "",
                   "snapshot import of a file of zeros: exit 2 with the check that failed", (r.returncode, r.stderr))
            with open(noise, "wb") as f:
                f.write(head)
            r = cli("import", noise)
            tap.ok(r.returncode == 2 and DIGEST in r.stderr, "snapshot import over an unknown root image: exit 2, its digest",
                   (r.returncode, r.stderr))
            big = os.path.join(work, "big.nvsnap")
            with open(big, "wb") as f:
                f.truncate(4 * MAX_IMPORT)
            r = cli("import", big)
            tap.ok(r.returncode == 2 and "at most" in r.stderr, "snapshot import of a file over the limit: exit 2, 413's message",
                   (r.returncode, r.stderr))
            r = cli("import", work)
            tap.ok(r.returncode == 2 and "not a regular file" in r.stderr, "snapshot import of a directory: exit 2",
                   (r.returncode, r.stderr))
            clean("the CLI's imports")
        finally:
            subprocess.run(["rm", "-rf", work])
    finally:
        if tap.failed:
            d.print_stderr_tail()
        d.cleanup()
    return tap.done()


if __name__ == "__main__":
    main_guard(run)
