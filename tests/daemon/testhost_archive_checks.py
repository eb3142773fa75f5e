#!/usr/bin/env python3
"""nanovmd's archive and unarchive with real guests, run INSIDE the test host
(tests/testhost/daemon_checks.sh), 256 MiB 1-vCPU sandboxes: the pinned root image;
archive through `nanovm sandbox archive` (wait false, its progress phases on stderr,
then archived: no VMM, end_at null, exec 409) -> daemon restart -> `nanovm sandbox
unarchive` with the same hostname, a file and a background process intact, then the
CLI's update, metrics and logs on it;
archive -> the daemon and every VMM stopped (a host reboot as the state directory
sees it) -> start -> unarchive; kill -9 of the daemon during an archive and during an
unarchive (each started with the CLI's --no-wait), then a restart: archived or running,
never lost, never both. TAP.
Usage: testhost_archive_checks.py NANOVM"""

import json
import os
import re
import signal
import subprocess
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

    def cli(*args, timeout=600, raw=False):
        """`nanovm sandbox ARGS` on this daemon: (exit status, stdout (bytes with raw), stderr)."""
        p = subprocess.run([nanovm, "sandbox", *args], env=dict(os.environ, NANOVM_STATE_DIR=state),
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        out = p.stdout if raw else p.stdout.decode(errors="replace")
        return p.returncode, out, p.stderr.decode(errors="replace")

    def cli_json(*args, timeout=600):
        """`nanovm sandbox ARGS --json`: (exit status, the JSON it printed or {}, stderr)."""
        rc, out, err = cli(*args, "--json", timeout=timeout)
        try:
            return rc, json.loads(out), err
        except ValueError:
            return rc, {}, err + out

    def phases_of(err, verb):
        """The phases `nanovm sandbox archive|unarchive` printed (stderr not a terminal:
        one line each, "nanovm: archive 1a2b3c4d: pack")."""
        return re.findall(rf"^nanovm: {verb} [0-9a-f]{{8}}: (\w+)$", err, re.M)

    def in_order(seen, phases):
        """True if `seen` is `phases` with some left out (each once, in order)."""
        return all(p in phases for p in seen) and [p for p in phases if p in seen] == seen

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

        # Archive with the CLI: it asks for wait false (202 archiving), shows each
        # progress phase on stderr and ends once the sandbox is archived.
        t0 = time.time()
        rc, g, err = cli_json("archive", sid[:8])
        archive_s = time.time() - t0
        phases = phases_of(err, "archive")
        ok(rc == 0 and g.get("state") == "archived" and g.get("end_at", "") is None and g.get("progress", "") is None,
           f"CLI archive (a prefix): exit 0, archived, end_at null ({archive_s:.1f} s; phases on stderr: {phases})",
           (rc, g, err))
        ok("pack" in phases and in_order(phases, ["snapshot", "pack", "stop"]),
           "progress was visible while it ran: each phase once, in order", err)
        rc, m, err = cli_json("metrics", sid)
        ok(rc == 0 and m.get("state") == "archived" and m.get("vmm_running") is False,
           f"CLI metrics of the archived sandbox: no VMM ({m})", (rc, m, err))
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
        rc, u, err = cli_json("unarchive", sid)
        unarchive_s = time.time() - t0
        phases = phases_of(err, "unarchive")
        ok(rc == 0 and u.get("state") == "running" and u.get("end_at"),
           f"CLI unarchive: exit 0, running with end_at again ({unarchive_s:.1f} s; phases on stderr: {phases})",
           (rc, u, err))
        ok(phases and in_order(phases, ["unpack", "restore"]), "its phases were visible, in order", err)
        running, seen = counter_runs(sid)
        ok(sh(sid, "cat /work/keep.txt") == "kept across archives\n", "the same id, the file")
        ok(running, f"the background process runs on ({seen})")
        after = sh(sid, "hostname").strip()
        ok(after == host, f"the same hostname ({after})")
        # The CLI's update, logs and metrics on the unarchived sandbox.
        rc, p, err = cli_json("update", sid, "--timeout", "7200", "--autosleep", "3600", "-l", "via=cli", "-l", "n=2")
        ok(rc == 0 and p.get("timeout_s") == 7200 and p.get("autosleep_s") == 3600 and
           p.get("metadata") == {"via": "cli", "n": "2"} and p.get("state") == "running",
           "CLI update: timeout, autosleep and labels in one PATCH", (rc, p, err))
        rc, p, err = cli_json("update", sid, "--no-timeout", "--clear-labels")
        ok(rc == 0 and p.get("timeout_s") is None and p.get("end_at", "") is None and p.get("metadata") == {} and
           p.get("autosleep_s") == 3600, "CLI update --no-timeout --clear-labels: no end_at, no labels, autosleep kept",
           (rc, p, err))
        rc, out, err = cli("metrics", sid)
        rows = [line.split() for line in out.splitlines()]
        ok(rc == 0 and len(rows) == 2 and rows[0] == ["STATE", "CPU_TIME", "VMM_RSS", "DISK", "VMM"] and
           rows[1][0] == "running" and rows[1][-1] == "running" and float(rows[1][1]) > 0 and float(rows[1][3]) > 0,
           f"CLI metrics: a table, running, CPU time and RSS ({out.strip().splitlines()[-1] if out.strip() else ''})",
           (rc, out, err))
        rc, out, err = cli("logs", sid, "--vmm", "--tail-bytes", "300", raw=True)
        full = d.get(f"/v1/sandboxes/{sid}/logs/vmm").raw
        ok(rc == 0 and 0 < len(out) <= 300 and out in full,
           f"CLI logs --vmm --tail-bytes 300: the end of the VMM log ({len(out)} bytes)", (rc, out, err))
        rc, out, err = cli("logs", sid, raw=True)
        console = d.get(f"/v1/sandboxes/{sid}/logs/console").raw
        ok(rc == 0 and out == console, f"CLI logs: the guest console as the API gives it ({len(out)} bytes)",
           (rc, out[-300:], err))
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
            rc, out, err = cli(path, sid, "--no-wait", timeout=60)  # the daemon's 202: at once
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
            ok(rc == 0 and out == what[:-1] + "ing\n" and whole,
               f"CLI {what} --no-wait: {out.strip()}; kill -9 during it (phase {phase}), restart: {st}, "
               f"{len(vmms)} VMM(s), {len(left)} blob(s)", (rc, out, err, d.stderr()[-1500:]))
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
