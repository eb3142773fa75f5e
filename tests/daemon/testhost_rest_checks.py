#!/usr/bin/env python3
"""nanovmd's rest states with real guests, run INSIDE the test host
(tests/testhost/daemon_checks.sh), 256 MiB 1-vCPU sandboxes: sleep, then an exec and
a file read wake it; after 5 s asleep the guest's wall clock is the host's at once
and its uptime did not count the sleep; autosleep after the idle time, but not while
a command runs nor while a guest process burns a CPU (the VMM's CPU share of a burner
and of an idle guest are printed: they are compared, never a value near the
threshold); reboot keeps a synced file and loses a process, also of a template-made
(restored) sandbox; a guest's own reboot is booted again; a crashed guest (sysrq c) goes to
error and reboots. TAP (numbered from 1; the wrapper renumbers).
Usage: testhost_rest_checks.py NANOVM"""

import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Daemon, Tap, main_guard  # noqa: E402

SHAPE = {"cpus": 1, "memory_mb": 256}
AUTOSLEEP_S = 4
# The daemon's idle threshold for this run: a burning vCPU is ~1 CPU, an idle guest
# far below; 0.5 is far from both (the shares are printed).
AUTOSLEEP_CPU = 0.5
# Seconds a sandbox sleeps before its guest's clock is compared with the host's.
CLOCK_SLEEP_S = 5


def run():
    nanovm = sys.argv[1]
    tap = Tap()
    ok = tap.ok
    state = tempfile.mkdtemp(prefix="nvr.", dir="/tmp")  # short: the sockets' sun_path
    # --implicit-templates 0: creates boot (a reboot over a booted disk; templates have their own checks).
    d = Daemon(nanovm, state_dir=state, args=["--autosleep-cpu", str(AUTOSLEEP_CPU), "--implicit-templates", "0"]).start()

    def get_state(sid):
        return d.get(f"/v1/sandboxes/{sid}").json().get("state")

    def sh(sid, line, timeout=120):
        a = d.post(f"/v1/sandboxes/{sid}/exec", {"cmd": line}, timeout=timeout)
        return a.json().get("stdout", "") if a.status == 200 else f"<{a}>"

    def wait_state(sid, want, seconds):
        end = time.time() + seconds
        while time.time() < end:
            if get_state(sid) == want:
                return True
            time.sleep(0.25)
        return get_state(sid) == want

    def cpu_share(sid, seconds):
        a = d.get(f"/v1/sandboxes/{sid}/metrics").json()["cpu_time_ms"]
        time.sleep(seconds)
        b = d.get(f"/v1/sandboxes/{sid}/metrics").json()["cpu_time_ms"]
        return (b - a) / (seconds * 1000)

    started = time.time()
    try:
        t0 = time.time()
        c = d.post("/v1/sandboxes", dict(SHAPE, timeout_s=3600), timeout=300)
        ok(c.status == 201 and c.json()["state"] == "running" and c.json()["autosleep_s"] == 0 and
           c.json()["on_timeout"] == "delete", f"create: running, autosleep_s 0, on_timeout delete ({time.time() - t0:.1f} s)", c)
        if c.status != 201:
            print("# daemon stderr:\n# " + d.stderr()[-3000:].replace("\n", "\n# "))
            return tap.done()
        sid = c.json()["id"]
        files = f"/v1/sandboxes/{sid}/files"

        # sleep, then transparent wakes.
        sl = d.post(f"/v1/sandboxes/{sid}/sleep")
        ok(sl.status == 200 and sl.json()["state"] == "sleeping", "sleep: sleeping", sl)
        again = d.post(f"/v1/sandboxes/{sid}/sleep")
        ok(again.status == 200 and again.json()["state"] == "sleeping", "sleep of a sleeping sandbox: a no-op", again)
        ok(sh(sid, "echo awake") == "awake\n" and get_state(sid) == "running", "an exec wakes the sleeping sandbox")
        d.request("PUT", files + "?path=/work/keep.txt", b"kept\n")
        d.post(f"/v1/sandboxes/{sid}/sleep")
        r = d.get(files + "?path=/work/keep.txt")
        ok(get_state(sid) == "running" and r.status == 200 and r.body == "kept\n", "a file read wakes it", r)
        # The guest's clocks after a longer sleep, as the command that woke it reads
        # them: its wall clock within a second of the host's, and its uptime (the
        # monotonic clock) not counting the time asleep (frozen with its vCPUs: no
        # timers to catch up at the wake).
        def clocks():
            try:
                up, wall = sh(sid, "cut -d' ' -f1 /proc/uptime; date +%s.%N").split()
                return float(up), float(wall)
            except ValueError:
                return 0.0, 0.0
        up0, _ = clocks()
        h0 = time.time()
        d.post(f"/v1/sandboxes/{sid}/sleep")
        time.sleep(CLOCK_SLEEP_S)
        # A snapshot of it asleep (it stays asleep) records its clock as it was when it
        # fell asleep, so a sandbox restored from it does not count the sleep either.
        snap = d.post(f"/v1/sandboxes/{sid}/snapshots", {"wait_durable": True}, timeout=300)
        ok(snap.status == 201 and get_state(sid) == "sleeping", "a snapshot of the sleeping sandbox: it sleeps on",
           snap)
        t0 = time.time()
        up1, wall = clocks()
        t1 = time.time()
        ok(t0 - 1 <= wall <= t1 + 1,
           f"after {CLOCK_SLEEP_S} s asleep the woken guest's wall clock is the host's (guest {wall:.2f}, host "
           f"{t0:.2f}..{t1:.2f})")
        ok(0 < up1 - up0 <= t1 - h0 - CLOCK_SLEEP_S + 1,
           f"its uptime did not count the time asleep (+{up1 - up0:.2f} s over {t1 - h0:.2f} s, {CLOCK_SLEEP_S} s "
           f"of them asleep)")
        if snap.status == 201:
            rs = d.post("/v1/sandboxes", {"snapshot_id": snap.json()["id"]}, timeout=300)
            ok(rs.status == 201, "a sandbox restored from the snapshot taken asleep", rs)
            if rs.status == 201:
                rid = rs.json()["id"]
                up_r, wall_r = (lambda t: (float(t[0]), float(t[1])))(
                    (sh(rid, "cut -d' ' -f1 /proc/uptime; date +%s.%N").split() + ["0", "0"])[:2])
                t2 = time.time()
                ok(abs(wall_r - t2) <= 2, f"its wall clock is the host's (guest {wall_r:.2f}, host {t2:.2f})")
                ok(0 < up_r - up0 <= t2 - h0 - CLOCK_SLEEP_S + 1,
                   f"its uptime does not count the {CLOCK_SLEEP_S} s its source slept before the snapshot "
                   f"(+{up_r - up0:.2f} s over {t2 - h0:.2f} s)")
                d.request("DELETE", f"/v1/sandboxes/{rid}", timeout=120)
            d.request("DELETE", f"/v1/snapshots/{snap.json()['id']}", timeout=120)
        log = d.stderr()
        ok("guest clock step sent ahead of the waking call" in log and
           "stepping the guest's clock after its sleep:" not in log,
           "the daemon stepped the guest's clock ahead of the waking call, and the agent took it", log[-800:])

        # reboot: the synced file stays, the process goes.
        sh(sid, "sync; setsid sh -c 'exec sleep 9999' </dev/null >/dev/null 2>&1 & echo started")
        procs = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 9999 $'"
        before = sh(sid, procs).strip()
        t0 = time.time()
        rb = d.post(f"/v1/sandboxes/{sid}/reboot", timeout=300)
        took = time.time() - t0
        ok(rb.status == 200 and rb.json()["state"] == "running" and rb.json()["id"] == sid,
           f"reboot: 200 running, same id ({took:.1f} s)", rb)
        after = sh(sid, procs).strip()
        ok(before == "1" and after == "0", f"the process is gone after the reboot ({before} -> {after})")
        r = d.get(files + "?path=/work/keep.txt")
        ok(r.status == 200 and r.body == "kept\n", "the synced file is kept", r)
        boots = d.get(f"/v1/sandboxes/{sid}/logs/vmm?tail_bytes=65536").body
        ok("cold over its kept disks" in boots, "the VMM log says it booted over the kept disks", boots[-800:])

        # A guest that reboots itself (PID 1 gets SIGTERM: guest-init announces a
        # reboot) is booted again by the daemon the same way.
        boot_id = "cat /proc/sys/kernel/random/boot_id"
        first = sh(sid, boot_id)
        d.post(f"/v1/sandboxes/{sid}/exec", {"cmd": "kill -TERM 1"}, timeout=60)
        end, now = time.time() + 90, first
        while time.time() < end and (now == first or now.startswith("<")):
            time.sleep(0.5)
            now = sh(sid, boot_id)
        ok(len(first) == 37 and len(now) == 37 and now != first and get_state(sid) == "running" and
           sh(sid, "cat /work/keep.txt") == "kept\n" and "its guest rebooted itself" in d.stderr(),
           f"a guest's own reboot: the daemon boots it again over its disks (boot id {first.strip()[:8]} -> "
           f"{now.strip()[:8]})", d.stderr()[-1500:])

        # A crashed guest: error, then rebooted.
        sh(sid, "echo crashme > /work/crash.txt; sync")
        d.post(f"/v1/sandboxes/{sid}/exec", {"cmd": "echo c > /proc/sysrq-trigger"}, timeout=60)
        ok(wait_state(sid, "error", 60), "a crashed guest (sysrq c): error", d.get(f"/v1/sandboxes/{sid}").body)
        e = d.post(f"/v1/sandboxes/{sid}/exec", {"cmd": "true"})
        ok(e.status == 409 and e.code() == "wrong_state" and "reboot it" in e.body, "exec on error: 409 naming reboot", e)
        rb = d.post(f"/v1/sandboxes/{sid}/reboot", timeout=300)
        ok(rb.status == 200 and rb.json()["state"] == "running" and rb.json()["error"] is None and
           sh(sid, "cat /work/crash.txt") == "crashme\n", "reboot from error: running, its files there", rb)
        dl = d.request("DELETE", f"/v1/sandboxes/{sid}", timeout=120)
        ok(dl.status == 204, "delete", dl)

        # autosleep.
        t0 = time.time()
        c = d.post("/v1/sandboxes", dict(SHAPE, autosleep_s=AUTOSLEEP_S, timeout_s=3600), timeout=300)
        ok(c.status == 201 and c.json()["autosleep_s"] == AUTOSLEEP_S,
           f"create with autosleep_s {AUTOSLEEP_S} ({time.time() - t0:.1f} s)", c)
        if c.status != 201:
            return tap.done()
        aid = c.json()["id"]
        # A command that runs longer than autosleep_s: never asleep meanwhile.
        seen = set()
        done = threading.Event()

        def watch():
            while not done.is_set():
                seen.add(get_state(aid))
                time.sleep(0.25)

        w = threading.Thread(target=watch)
        w.start()
        out = sh(aid, f"sleep {AUTOSLEEP_S * 2 + 2}; echo slept", timeout=120)
        done.set()
        w.join()
        ok(out == "slept\n" and seen == {"running"}, f"not asleep while a command runs ({sorted(seen)})", out)
        # A guest process burning a CPU keeps it awake.
        sh(aid, "setsid sh -c 'echo $$ > /tmp/burn.pid; while :; do :; done' </dev/null >/dev/null 2>&1 & sleep 0.5")
        burn = cpu_share(aid, AUTOSLEEP_S + 3)
        st = get_state(aid)
        ok(st == "running" and burn > AUTOSLEEP_CPU,
           f"not asleep while a guest process burns a CPU (VMM CPU share {burn:.2f} > {AUTOSLEEP_CPU}; {st})")
        killed = sh(aid, "kill $(cat /tmp/burn.pid) && echo killed")
        ok(killed == "killed\n", "the burner is stopped", killed)
        t0 = time.time()
        slept = wait_state(aid, "sleeping", AUTOSLEEP_S + 25)
        idle = time.time() - t0
        ok(slept and idle >= AUTOSLEEP_S - 0.5, f"idle: asleep after {idle:.1f} s (autosleep_s {AUTOSLEEP_S})",
           d.stderr()[-1500:])
        m = d.get(f"/v1/sandboxes/{aid}/metrics").json()
        ok(m["state"] == "sleeping", "metrics never wake it", m)
        time.sleep(2)
        ok(get_state(aid) == "sleeping", "the daemon never wakes it by itself")
        ok(sh(aid, "echo up") == "up\n" and get_state(aid) == "running", "an exec wakes the autoslept sandbox")
        # The idle share, measured right after the wake (it must not fall asleep first).
        d.post(f"/v1/sandboxes/{aid}/resume")
        idle_share = cpu_share(aid, min(3, AUTOSLEEP_S - 1))
        print(f"# VMM CPU share: burning {burn:.2f}, idle {idle_share:.2f} of one CPU (threshold {AUTOSLEEP_CPU})")
        ok(idle_share < AUTOSLEEP_CPU / 2 < burn / 2,
           f"an idle guest's VMM is far under the threshold ({idle_share:.2f}) and a burner far over ({burn:.2f})")
        d.request("DELETE", f"/v1/sandboxes/{aid}", timeout=120)

        # A sandbox restored from a template (its disk a layer over the template's
        # snapshot): a reboot boots over that chain, its own writes kept.
        t0 = time.time()
        nt = d.post("/v1/templates", dict(SHAPE, name="rb", setup=["echo baked > /root/baked.txt", "sync"]))
        end = time.time() + 200
        while nt.status == 202 and time.time() < end and d.get("/v1/templates/rb").json()["state"] == "building":
            time.sleep(1)
        k = d.post("/v1/sandboxes", {"template": "rb"}, timeout=120)
        ok(k.status == 201, f"a sandbox from a template ({time.time() - t0:.1f} s)", k)
        if k.status == 201:
            kid = k.json()["id"]
            sh(kid, "echo own > /root/own.txt; sync")
            rb = d.post(f"/v1/sandboxes/{kid}/reboot", timeout=300)
            files = sh(kid, "cat /root/baked.txt /root/own.txt")
            ok(rb.status == 200 and rb.json()["state"] == "running" and files == "baked\nown\n",
               f"reboot of a template-made sandbox: the template's and its own files ({files!r})", rb)
            d.request("DELETE", f"/v1/sandboxes/{kid}", timeout=120)
        d.request("DELETE", "/v1/templates/rb?force=true")
        print(f"# rest checks: {time.time() - started:.0f} s")
    finally:
        if d.alive():
            d.stop()
        if tap.failed:
            d.print_stderr_tail()
    return tap.done()


if __name__ == "__main__":
    main_guard(run)
