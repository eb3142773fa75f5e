#!/usr/bin/env python3
"""nanovmd's archive and unarchive with real guests, run INSIDE the test host
(tests/testhost/daemon_checks.sh), 256 MiB 1-vCPU sandboxes: the pinned root image;
archive (202 with progress, then archived: no VMM, end_at null, exec 409) -> daemon
restart -> unarchive with the same hostname, a file and a background process intact;
archive -> the daemon and every VMM stopped (a host reboot as the state directory
sees it) -> start -> unarchive; kill -9 of the daemon during an archive and during an
unarchive, then a restart: archived or running, never lost, never both. TAP.
Usage: testhost_archive_checks.py NANOVM"""

import json
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Daemon, Tap, main_guard  # noqa: E402

SHAPE = {"cpus": 1, "memory_mb": 256}
# A process that keeps counting in the background (its own session: it outlives the exec).
COUNTER = ("setsid nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /work/counter.new; mv /work/counter.new /work/counter; sleep 0.5; done' "
           "</dev/null >/dev/null 2>&1 &")


def live_vmms(state):
    """PIDs of the live VMMs of the state directory's VMs (from their vm.json)."""
    pids = []
    vms = os.path.join(state, "vms")
    for name in os.listdir(vms) if os.path.isdir(vms) else []:
        try:
            with open(os.path.join(vms, name, "vm.json")) as f:
                pid = int(json.load(f)["pid"])
            os.kill(pid, 0)
            pids.append(pid)
        except (OSError, ValueError, KeyError):
            pass
    return pids


def blobs(state):
    d = os.path.join(state, "archives")
    return sorted(x for x in os.listdir(d) if not x.startswith(".")) if os.path.isdir(d) else []


# --warm 0: the VMMs counted here are the sandboxes' own (no warm VM of the template
# waits beside them: tests/daemon/testhost_templates.py checks those).
ARGS = ["--warm", "0"]


def run():
    nanovm = sys.argv[1]
    tap = Tap()
    ok = tap.ok
    state = tempfile.mkdtemp(prefix="nva.", dir="/tmp")  # short: the sockets' sun_path
    d = Daemon(nanovm, state_dir=state, args=ARGS).start()

    def sh(sid, line):
        a = d.post(f"/v1/sandboxes/{sid}/exec", {"cmd": line}, timeout=120)
        return a.json().get("stdout", "") if a.status == 200 else f"<{a}>"

    def counter_runs(sid):
        first = sh(sid, "cat /work/counter").strip()
        time.sleep(1.6)
        second = sh(sid, "cat /work/counter").strip()
        return first.isdigit() and second.isdigit() and int(second) > int(first), f"{first} -> {second}"

    def state_of(sid):
        g = d.get(f"/v1/sandboxes/{sid}")
        return g.json()["state"] if g.status == 200 else f"<{g.status}>"

    def wait_state(sid, states, limit=300):
        deadline = time.time() + limit
        seen = set()
        while time.time() < deadline:
            g = d.get(f"/v1/sandboxes/{sid}").json()
            if g.get("progress"):
                seen.add(g["progress"]["phase"])
            if g["state"] in states:
                return g, seen
            time.sleep(0.2)
        return d.get(f"/v1/sandboxes/{sid}").json(), seen

    try:
        t0 = time.time()
        c, building = d.create(dict(SHAPE, timeout_s=3600))
        ok(c.status == 201, f"create (1 vCPU, 256 MiB) ({time.time() - t0:.1f} s, {building} x 503 template_building)", c)
        if c.status != 201:
            return tap.done()
        sid = c.json()["id"]
        digest = c.json().get("image_digest") or ""
        sn = d.post(f"/v1/sandboxes/{sid}/snapshots", {"wait_durable": True}, timeout=300)
        ok(sn.status == 201 and (sn.json().get("image_digest") or "") == digest, "a snapshot records the same image digest",
           sn)
        host = sh(sid, "hostname").strip()
        ok(host == sid, f"its hostname is its id ({host})")
        w = d.request("PUT", f"/v1/sandboxes/{sid}/files?path=/work/keep.txt", b"kept across archives\n")
        sh(sid, COUNTER)
        time.sleep(1.5)  # its first count
        running, seen = counter_runs(sid)
        ok(w.status == 200 and running, f"a file and a background process ({seen})")

        # Archive in the background: 202, progress, then archived.
        t0 = time.time()
        a = d.post(f"/v1/sandboxes/{sid}/archive", {"wait": False}, timeout=300)
        ok(a.status == 202 and a.json()["state"] == "archiving", "archive with wait false: 202 archiving", a)
        g, phases = wait_state(sid, ("archived", "running", "error"))
        archive_s = time.time() - t0
        ok(g["state"] == "archived" and g["end_at"] is None and g["progress"] is None,
           f"then archived, end_at null ({archive_s:.1f} s; progress phases seen: {sorted(phases)})", g)
        ok(bool(phases), "progress was visible while it ran", phases)
        e = d.post(f"/v1/sandboxes/{sid}/exec", {"cmd": "true"})
        ok(e.status == 409 and e.code() == "sandbox_archived" and "unarchive it first" in e.body,
           "exec on an archived sandbox: 409 sandbox_archived", e)
        ok(live_vmms(state) == [] and len(blobs(state)) == 1, f"no VMM runs; one archive blob ({blobs(state)})",
           live_vmms(state))
        pins = os.listdir(os.path.join(state, "images")) if os.path.isdir(os.path.join(state, "images")) else []
        ok(len(pins) == 1 and len(pins[0]) == 64 and (not digest or pins == [digest]),
           f"the root image it runs over is pinned under images/ ({[p[:12] for p in pins]})", pins)
        d.request("DELETE", f"/v1/snapshots/{sn.json()['id']}")  # the archive does not need it

        # A daemon restart, then unarchive.
        d.stop()
        d = Daemon(nanovm, state_dir=state, args=ARGS).start()
        ok(state_of(sid) == "archived", "after a daemon restart it is archived still")
        t0 = time.time()
        u = d.post(f"/v1/sandboxes/{sid}/unarchive", {}, timeout=600)
        unarchive_s = time.time() - t0
        ok(u.status == 200 and u.json()["state"] == "running" and u.json()["end_at"],
           f"unarchive: 200 running with end_at again ({unarchive_s:.1f} s)", u)
        running, seen = counter_runs(sid)
        ok(sh(sid, "cat /work/keep.txt") == "kept across archives\n", "the same id, the file")
        ok(running, f"the background process runs on ({seen})")
        after = sh(sid, "hostname").strip()
        ok(after == host, f"the same hostname ({after})")
        # The archive goes once the unpacked files are durable, after the answer.
        deadline = time.time() + 300
        while blobs(state) and time.time() < deadline:
            time.sleep(0.1)
        ok(blobs(state) == [], "the archive is removed once its unpacked files are durable", blobs(state))
        ok("its unarchived files are durable" in d.stderr(), "the daemon says they are")

        # Archive, then the daemon and every VMM stopped (a host reboot), start, unarchive.
        other, _ = d.create(SHAPE)
        a = d.post(f"/v1/sandboxes/{sid}/archive", {}, timeout=600)
        ok(a.status == 200 and a.json()["state"] == "archived", "archive with wait (default): 200 archived", a)
        d.stop()
        killed = live_vmms(state)
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        d = Daemon(nanovm, state_dir=state, args=ARGS).start()
        oid = other.json()["id"] if other.status == 201 else None
        ok(state_of(sid) == "archived" and (oid is None or state_of(oid) == "error"),
           f"daemon and {len(killed)} VMM(s) stopped, started again: archived (the other sandbox: error)")
        u = d.post(f"/v1/sandboxes/{sid}/unarchive", {}, timeout=600)
        running, seen = counter_runs(sid) if u.status == 200 else (False, "")
        ok(u.status == 200 and sh(sid, "cat /work/keep.txt") == "kept across archives\n" and running,
           f"unarchive after it: the file and the process ({seen})", u)
        if oid:
            d.request("DELETE", f"/v1/sandboxes/{oid}", timeout=120)

        # kill -9 of the daemon during an archive, then a restart.
        for what, path in (("archive", "archive"), ("unarchive", "unarchive")):
            if what == "unarchive" and state_of(sid) != "archived":
                a = d.post(f"/v1/sandboxes/{sid}/archive", {}, timeout=600)
            r = d.post(f"/v1/sandboxes/{sid}/{path}", {"wait": False}, timeout=60)
            phase = None
            deadline = time.time() + 120
            while time.time() < deadline:  # into the middle of it: the packing or unpacking
                g = d.get(f"/v1/sandboxes/{sid}").json()
                phase = (g.get("progress") or {}).get("phase")
                if phase in ("pack", "unpack", "restore") or g["state"] not in ("archiving", "unarchiving"):
                    break
                time.sleep(0.05)
            d.stop(sig=signal.SIGKILL)
            d = Daemon(nanovm, state_dir=state, args=ARGS).start()
            st = state_of(sid)
            vmms, left = live_vmms(state), blobs(state)
            if st == "running":
                whole = sh(sid, "cat /work/keep.txt") == "kept across archives\n" and left == [] and len(vmms) == 1
            elif st == "archived":
                whole = vmms == [] and len(left) == 1
            else:
                whole = False
            ok(r.status == 202 and whole,
               f"kill -9 during {what} (phase {phase}), restart: {st}, {len(vmms)} VMM(s), {len(left)} blob(s)",
               d.stderr()[-1500:])
            if st == "archived" and what == "archive":
                u = d.post(f"/v1/sandboxes/{sid}/unarchive", {}, timeout=600)
                ok(u.status == 200 and sh(sid, "cat /work/keep.txt") == "kept across archives\n",
                   "and it unarchives", u)

        # kill -9 right after an unarchive answered, before (or while) its unpacked files
        # are made durable in the background: the restart finishes that (its VMM runs
        # on): running, its archive removed; never archived and running both.
        if state_of(sid) != "archived":
            d.post(f"/v1/sandboxes/{sid}/archive", {}, timeout=600)
        u = d.post(f"/v1/sandboxes/{sid}/unarchive", {}, timeout=600)
        d.stop(sig=signal.SIGKILL)
        d = Daemon(nanovm, state_dir=state, args=ARGS).start()
        st, vmms, left = state_of(sid), live_vmms(state), blobs(state)
        ok(u.status == 200 and st == "running" and len(vmms) == 1 and left == [] and
           sh(sid, "cat /work/keep.txt") == "kept across archives\n",
           f"kill -9 just after an unarchive answered, restart: {st}, {len(vmms)} VMM(s), {len(left)} blob(s)",
           d.stderr()[-1500:])

        dl = d.request("DELETE", f"/v1/sandboxes/{sid}", timeout=120)
        ok(dl.status == 204 and blobs(state) == [] and live_vmms(state) == [],
           "delete: no blob, no VMM left", (dl, blobs(state)))
        print(f"# archive {archive_s:.1f} s, unarchive {unarchive_s:.1f} s")
    finally:
        if d.alive():
            d.stop()
        for pid in live_vmms(state):
            os.kill(pid, signal.SIGKILL)
        if tap.failed:
            d.print_stderr_tail()
    return tap.done()


if __name__ == "__main__":
    main_guard(run)
