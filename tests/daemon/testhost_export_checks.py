#!/usr/bin/env python3
"""nanovmd's snapshot export and import with a real guest, run INSIDE the test host
(tests/testhost/daemon_checks.sh), one 256 MiB 1-vCPU sandbox booted cold: a file
written -> snapshot -> export to a file (streamed) -> snapshot AND sandbox deleted ->
import (a new snapshot: no sandbox_id, durable) -> restore -> the file is there; a
flipped byte in the file is 400 invalid_archive with nothing left behind; then on a
second daemon with its own fresh state directory (another host, as far as the files
go: no pinned image) `nanovm snapshot import` of an export made by `nanovm snapshot
export` pins its image by digest, and its restore has the file too. TAP.
Usage: testhost_export_checks.py NANOVM"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Daemon, Tap, main_guard  # noqa: E402

SHAPE = {"cpus": 1, "memory_mb": 256}
TEXT = "exported and imported\n"


def run():
    nanovm = sys.argv[1]
    tap = Tap()
    ok = tap.ok
    state = tempfile.mkdtemp(prefix="nve.", dir="/tmp")  # short: the sockets' sun_path
    other = tempfile.mkdtemp(prefix="nvf.", dir="/tmp")
    work = tempfile.mkdtemp(prefix="nvx.", dir="/tmp")
    d = Daemon(nanovm, state_dir=state, args=["--implicit-templates", "0"]).start()
    d2 = None

    def sh(dm, sid, line):
        a = dm.post(f"/v1/sandboxes/{sid}/exec", {"cmd": line}, timeout=120)
        return a.json().get("stdout", "") if a.status == 200 else f"<{a}>"

    def leftovers(st):
        return [f"{sub}/{n}" for sub in ("uploads", "imports") for n in os.listdir(os.path.join(st, sub))]

    def cli(st, *args):
        env = dict(os.environ, NANOVM_STATE_DIR=st)
        env.pop("NANOVM_URL", None)
        return subprocess.run([nanovm, "snapshot", *args], env=env, capture_output=True, text=True, timeout=300)

    try:
        c = d.post("/v1/sandboxes", dict(SHAPE, timeout_s=3600), timeout=300)
        ok(c.status == 201, "create (1 vCPU, 256 MiB, booted)", c)
        if c.status != 201:
            return tap.done()
        sid = c.json()["id"]
        w = d.request("PUT", f"/v1/sandboxes/{sid}/files?path=/work/export.txt", TEXT.encode())
        sn = d.post(f"/v1/sandboxes/{sid}/snapshots", {"wait_durable": True}, timeout=300)
        ok(w.status == 200 and sn.status == 201 and sn.json()["durable"], "a file, then a durable snapshot", sn)
        snap = sn.json()["id"]

        t0 = time.time()
        ex = d.get(f"/v1/snapshots/{snap}/export", timeout=300)
        export_s = time.time() - t0
        path = os.path.join(work, "one.nvsnap")
        with open(path, "wb") as f:
            f.write(ex.raw)
        ok(ex.status == 200 and ex.headers.get("Content-Type") == "application/octet-stream" and ex.raw[:8] == b"NANOVMAR",
           f"export: 200 octet-stream, {len(ex.raw) / 1e6:.1f} MB in {export_s:.1f} s", ex if ex.status != 200 else "")
        ds = d.request("DELETE", f"/v1/snapshots/{snap}")
        dx = d.request("DELETE", f"/v1/sandboxes/{sid}", timeout=120)
        ok(ds.status == 204 and dx.status == 204 and d.get(f"/v1/snapshots/{snap}").status == 404,
           "the snapshot and its sandbox deleted", (ds, dx))

        t0 = time.time()
        im = d.post("/v1/snapshots/import", ex.raw, headers={"Content-Type": "application/octet-stream"}, timeout=300)
        import_s = time.time() - t0
        j = im.json() if im.status == 201 else {}
        ok(im.status == 201 and j["id"] != snap and j["sandbox_id"] is None and j["durable"] and j["state"] == "ready"
           and j["cpus"] == 1 and j["memory_mb"] == 256 and j["image_digest"] == sn.json()["image_digest"],
           f"import: 201, a new durable snapshot without sandbox_id, the same shape and root image ({import_s:.1f} s)", im)
        ok(leftovers(state) == [], "no upload or unpacked import left", leftovers(state))
        if im.status == 201:
            t0 = time.time()
            r = d.post(f"/v1/snapshots/{j['id']}/restore", {}, timeout=300)
            restore_s = time.time() - t0
            rid = r.json()["id"] if r.status == 201 else None
            ok(r.status == 201 and sh(d, rid, "cat /work/export.txt") == TEXT,
               f"restore of the import ({restore_s:.1f} s): the file is there", r)
            if rid:
                d.request("DELETE", f"/v1/sandboxes/{rid}", timeout=120)

        bad = bytearray(ex.raw)
        bad[len(bad) // 2] ^= 0x40
        b = d.post("/v1/snapshots/import", bytes(bad), headers={"Content-Type": "application/octet-stream"}, timeout=300)
        left, kept = leftovers(state), [x["id"] for x in d.get("/v1/snapshots").json()["snapshots"]]
        ok(b.status == 400 and b.code() == "invalid_archive" and left == [] and len(kept) == 1,
           "a flipped byte in the middle: 400 invalid_archive, nothing left, no snapshot added",
           f"{b.status} {b.body[:300]!r}; left {left}; snapshots {kept}")

        # The CLI, and a second daemon with nothing pinned (another host's state).
        if im.status == 201:
            two = os.path.join(work, "two.nvsnap")
            e = cli(state, "export", j["id"], two)
            ok(e.returncode == 0 and os.path.exists(two) and not os.path.exists(two + ".nanovm-part"),
               f"nanovm snapshot export: exit 0, {os.path.getsize(two) / 1e6 if os.path.exists(two) else 0:.1f} MB",
               e.stderr)
            d.stop()
            d2 = Daemon(nanovm, state_dir=other, args=["--implicit-templates", "0"]).start()
            t0 = time.time()
            i = cli(other, "import", two)
            new = i.stdout.strip()
            g = d2.get(f"/v1/snapshots/{new}") if new else None
            ok(i.returncode == 0 and g is not None and g.status == 200 and g.json()["durable"]
               and os.listdir(os.path.join(other, "images")) == [j["image_digest"]],
               f"nanovm snapshot import on a fresh state directory: exit 0, its id, the image pinned by digest "
               f"({time.time() - t0:.1f} s)", (i.returncode, i.stderr, g))
            if g is not None and g.status == 200:
                r = d2.post(f"/v1/snapshots/{new}/restore", {}, timeout=300)
                rid = r.json()["id"] if r.status == 201 else None
                ok(r.status == 201 and sh(d2, rid, "cat /work/export.txt") == TEXT,
                   "its restore there has the file too", r)
                if rid:
                    d2.request("DELETE", f"/v1/sandboxes/{rid}", timeout=120)
        print(f"# export {export_s:.1f} s, import {import_s:.1f} s")
    finally:
        for dm in (d, d2):
            if dm is not None and dm.alive():
                if tap.failed:
                    dm.print_stderr_tail()
                dm.stop()
        for st in (state, other):
            vms = os.path.join(st, "vms")
            for name in os.listdir(vms) if os.path.isdir(vms) else []:
                try:
                    with open(os.path.join(vms, name, "vm.json")) as f:
                        os.kill(int(json.load(f)["pid"]), signal.SIGKILL)
                except (OSError, ValueError, KeyError):
                    pass
        shutil.rmtree(work, ignore_errors=True)
    return tap.done()


if __name__ == "__main__":
    main_guard(run)
