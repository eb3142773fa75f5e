#!/usr/bin/env python3
"""nanovmd with real guests, run INSIDE the test host (tests/testhost/daemon_checks.sh):
every endpoint once with 256 MiB 1-vCPU sandboxes; restore and fork with a file and a
running process; a snapshot of a fork child restored after parent and child are
deleted; kill -9 of the daemon and a restart with every record back and the running
sandboxes answering; everything deleted leaves nothing on disk. TAP (numbered from 1;
the wrapper renumbers).
Usage: testhost_checks.py NANOVM"""

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
# Each count replaces the file whole (a rename): `echo $i > file` truncates first, and a
# read between the truncation and the write saw an empty file (the check failed 1 of ~5 runs).
COUNTER = ("setsid sh -c 'i=0; while true; do i=$((i+1)); echo $i > /work/counter.new; "
           "mv /work/counter.new /work/counter; sleep 0.5; done' "
           "</dev/null >/dev/null 2>&1 &")


def run():
    nanovm = sys.argv[1]
    tap = Tap()
    state = tempfile.mkdtemp(prefix="nvd.", dir="/tmp")  # short: the sockets' sun_path
    # Booted sandboxes (their console shows the boot): templates are testhost_templates.py's.
    d = Daemon(nanovm, state_dir=state, args=["--implicit-templates", "0"]).start()
    ok = tap.ok

    def exec_(sid, body, **kw):
        return d.post(f"/v1/sandboxes/{sid}/exec", body, timeout=120, **kw)

    def sh(sid, line):
        a = exec_(sid, {"cmd": line})
        return a.json().get("stdout", "") if a.status == 200 else f"<{a}>"

    def counter_runs(sid):
        first = sh(sid, "cat /work/counter").strip()
        time.sleep(1.6)
        second = sh(sid, "cat /work/counter").strip()
        return first.isdigit() and second.isdigit() and int(second) > int(first), f"{first} -> {second}"

    try:
        t0 = time.time()
        c = d.post("/v1/sandboxes", dict(SHAPE, metadata={"t": "th"}, timeout_s=3600), timeout=300)
        ok(c.status == 201 and c.json()["state"] == "running" and c.json()["end_at"],
           f"create (1 vCPU, 256 MiB): 201 running with end_at ({time.time() - t0:.1f} s)", c)
        if c.status != 201:
            print("# daemon stderr:\n# " + d.stderr()[-3000:].replace("\n", "\n# "))
            return tap.done()
        sid = c.json()["id"]
        g = d.get(f"/v1/sandboxes/{sid}")
        ok(g.status == 200 and g.json()["cpus"] == 1 and g.json()["memory_mb"] == 256, "get: the shape", g)
        ls = d.get("/v1/sandboxes?state=running&metadata.t=th")
        ok(ls.status == 200 and [s["id"] for s in ls.json()["sandboxes"]] == [sid], "list by state and label", ls)
        p = d.request("PATCH", f"/v1/sandboxes/{sid}", {"timeout_s": 7200, "metadata": {"t": "th", "k": "v"}})
        ok(p.status == 200 and p.json()["timeout_s"] == 7200 and p.json()["metadata"]["k"] == "v", "patch: timeout and labels", p)

        e = exec_(sid, {"cmd": "echo hi; echo err >&2; exit 3"})
        ok(e.status == 200 and e.json()["stdout"] == "hi\n" and e.json()["stderr"] == "err\n" and e.json()["exit_code"] == 3,
           "exec a shell line: stdout, stderr, exit code 3", e)
        e = exec_(sid, {"argv": ["sh", "-c", "echo $FOO; pwd; id -u; id -g"], "env": {"FOO": "bar"}, "cwd": "/tmp",
                        "user": "1000:1001"})
        ok(e.status == 200 and e.json()["stdout"] == "bar\n/tmp\n1000\n1001\n", "exec an argv with env, cwd and user", e)
        e = exec_(sid, {"argv": ["cat"], "stdin": "from stdin"})
        ok(e.status == 200 and e.json()["stdout"] == "from stdin", "exec with stdin", e)
        e = exec_(sid, {"cmd": "sleep 31", "timeout_s": 1})
        left = sh(sid, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 31 $'")
        ok(e.status == 200 and e.json()["timed_out"] and e.json()["duration_ms"] < 20000 and left.strip() == "0",
           f"exec timeout_s kills the command in the guest (left: {left.strip()})", e)
        e = exec_(sid, {"argv": ["no-such-program"]})
        ok(e.status == 200 and e.json()["exit_code"] == 127, "exec of a missing program: exit code 127", e)
        s = exec_(sid, {"cmd": "echo a; sleep 1; echo b >&2", "stream": True})
        lines = [json.loads(x) for x in s.body.splitlines() if x.strip()] if s.status == 200 else []
        ok(s.status == 200 and s.headers.get("Content-Type") == "application/x-ndjson" and
           {"type": "stdout", "data": "a\n"} in lines and {"type": "stderr", "data": "b\n"} in lines and
           lines[-1]["type"] == "exit" and lines[-1]["exit_code"] == 0, "exec stream: NDJSON output then the exit", s)

        files = f"/v1/sandboxes/{sid}/files"
        w = d.request("PUT", files + "?path=/work/result.txt", b"First result\n")
        ok(w.status == 200 and w.json()["size"] == 13, "file write into a missing directory (/work made)", w)
        r = d.get(files + "?path=/work/result.txt")
        ok(r.status == 200 and r.body == "First result\n", "file read", r)
        st = d.get(files + "/stat?path=/work/result.txt")
        ok(st.status == 200 and st.json()["size"] == 13 and st.json()["type"] == "file", "file stat", st)
        mk = d.post(files + "/mkdir", {"path": "/work/d/e"})
        ok(mk.status == 201, "mkdir with parents", mk)
        li = d.get(files + "/list?path=/work")
        ok(li.status == 200 and {"result.txt", "d"} <= {x["name"] for x in li.json()["entries"]}, "list a directory", li)
        rm = d.request("DELETE", files + "?path=/work/d&recursive=true")
        ok(rm.status == 204 and d.get(files + "/stat?path=/work/d").code() == "path_not_found", "remove -r, then 404", rm)
        data = os.urandom(3 << 20)
        big = d.request("PUT", files + "?path=/work/big", data)
        back = d.get(files + "?path=/work/big")
        ok(big.status == 200 and back.status == 200 and back.raw == data and
           back.headers.get("Transfer-Encoding") == "chunked", "a 3 MiB file written, then streamed back the same", big)

        sh(sid, COUNTER)
        sh(sid, "for i in $(seq 50); do [ -s /work/counter ] && break; sleep 0.1; done")  # its first count
        running, seen = counter_runs(sid)
        ok(running, f"a background process counts in the sandbox ({seen})")

        pa = d.post(f"/v1/sandboxes/{sid}/pause")
        ok(pa.status == 200 and pa.json()["state"] == "paused", "pause", pa)
        e = exec_(sid, {"cmd": "true"})
        ok(e.status == 409 and e.code() == "sandbox_paused" and "resume it first" in e.body, "exec on a paused sandbox: 409", e)
        e = d.get(files + "?path=/work/result.txt")
        ok(e.status == 409 and e.code() == "sandbox_paused", "file read on a paused sandbox: 409", e)
        m = d.get(f"/v1/sandboxes/{sid}/metrics")
        ok(m.status == 200 and m.json()["vmm_rss_bytes"] > 0 and m.json()["cpu_time_ms"] > 0 and m.json()["disk_bytes"] > 0
           and m.json()["state"] == "paused", "metrics of a paused sandbox (host-side; it stays paused)", m)
        re_ = d.post(f"/v1/sandboxes/{sid}/resume")
        ok(re_.status == 200 and re_.json()["state"] == "running" and sh(sid, "echo back") == "back\n", "resume, then exec", re_)
        con = d.get(f"/v1/sandboxes/{sid}/logs/console")
        vlog = d.get(f"/v1/sandboxes/{sid}/logs/vmm?tail_bytes=4096")
        ok(con.status == 200 and "nanovm-init" in con.body and vlog.status == 200, "console and VMM logs", con.body[-500:])

        t0 = time.time()
        sn = d.post(f"/v1/sandboxes/{sid}/snapshots", {"wait_durable": True}, timeout=300)
        ok(sn.status == 201 and sn.json()["durable"] and sn.json()["sandbox_id"] == sid,
           f"snapshot with wait_durable: durable ({time.time() - t0:.1f} s)", sn)
        snap = sn.json()["id"] if sn.status == 201 else None
        ok(d.get(f"/v1/snapshots/{snap}").status == 200 and
           [x["id"] for x in d.get(f"/v1/sandboxes/{sid}/snapshots").json()["snapshots"]] == [snap] and
           snap in [x["id"] for x in d.get("/v1/snapshots").json()["snapshots"]], "snapshot get and lists")
        sl = d.post(f"/v1/sandboxes/{sid}/snapshots", {"leave_paused": True}, timeout=300)
        st = d.get(f"/v1/sandboxes/{sid}").json()["state"]
        ok(sl.status == 201 and st == "sleeping", f"snapshot with leave_paused: the sandbox sleeps ({st})", sl)
        wt = d.post(f"/v1/snapshots/{sl.json()['id']}/wait", {"timeout_s": 120}, timeout=200) if sl.status == 201 else sl
        ok(wt.status == 200 and wt.json()["durable"], "wait until durable", wt)
        woke = sh(sid, "echo awake")
        ok(woke == "awake\n" and d.get(f"/v1/sandboxes/{sid}").json()["state"] == "running",
           "an exec wakes the sleeping sandbox transparently", woke)
        dl = d.request("DELETE", f"/v1/snapshots/{sl.json()['id']}") if sl.status == 201 else sl
        ok(dl.status == 204 and d.get(f"/v1/snapshots/{sl.json()['id']}").status == 404, "snapshot delete", dl)

        t0 = time.time()
        rs = d.post(f"/v1/snapshots/{snap}/restore", {"metadata": {"from": "snap"}}, timeout=300)
        ok(rs.status == 201 and rs.json()["snapshot_id"] == snap and rs.json()["cpus"] == 1,
           f"restore into a new sandbox ({time.time() - t0:.1f} s)", rs)
        rid = rs.json()["id"] if rs.status == 201 else None
        if rid:
            ok(sh(rid, "cat /work/result.txt") == "First result\n", "the restored sandbox has the file")
            running, seen = counter_runs(rid)
            ok(running, f"the restored sandbox's background process runs on ({seen})")

        t0 = time.time()
        fk = d.post(f"/v1/sandboxes/{sid}/fork", {"n": 2}, timeout=300)
        kids = [c["sandbox"]["id"] for c in fk.json().get("children", []) if c.get("sandbox")] if fk.status == 200 else []
        ok(fk.status == 200 and len(kids) == 2, f"fork n=2: two children ({time.time() - t0:.1f} s)", fk)
        for k in kids:
            running, seen = counter_runs(k)
            ok(sh(k, "cat /work/result.txt") == "First result\n" and running,
               f"fork child {k[:8]}: the file, and the process runs on ({seen})")
        if kids:
            sh(kids[0], "echo child > /work/result.txt")
            ok(sh(sid, "cat /work/result.txt") == "First result\n" and sh(kids[0], "cat /work/result.txt") == "child\n",
               "a child's write does not reach the parent")

        # kill -9 of the daemon: the VMMs live on; a new daemon finds every record.
        before = {s["id"]: s["state"] for s in d.get("/v1/sandboxes").json()["sandboxes"]}
        snaps_before = sorted(x["id"] for x in d.get("/v1/snapshots").json()["snapshots"])
        d.stop(sig=signal.SIGKILL)
        d = Daemon(nanovm, state_dir=state, args=["--implicit-templates", "0"]).start()
        after = {s["id"]: s["state"] for s in d.get("/v1/sandboxes").json()["sandboxes"]}
        ok(after == before and len(after) == 4, f"after kill -9 and a restart every record is back ({after})", before)
        ok(sorted(x["id"] for x in d.get("/v1/snapshots").json()["snapshots"]) == snaps_before, "and every snapshot")
        answers = [sh(x, "echo alive") for x in after]
        ok(all(a == "alive\n" for a in answers), "every running sandbox answers after the restart", answers)
        ok("adopted its running VMM" in d.stderr(), "the restarted daemon adopted the live VMMs", d.stderr()[-1500:])

        # A snapshot of a fork child, then parent and child deleted, then restored.
        if kids:
            ks = d.post(f"/v1/sandboxes/{kids[1]}/snapshots", {"wait_durable": True}, timeout=300)
            ok(ks.status == 201 and ks.json()["durable"], "snapshot of a fork child", ks)
            d1 = d.request("DELETE", f"/v1/sandboxes/{kids[1]}", timeout=120)
            d2 = d.request("DELETE", f"/v1/sandboxes/{sid}", timeout=120)
            ok(d1.status == 204 and d2.status == 204 and d.get(f"/v1/sandboxes/{sid}").status == 404,
               "the parent and that child deleted", d2)
            rk = d.post(f"/v1/snapshots/{ks.json()['id']}/restore", {}, timeout=300) if ks.status == 201 else ks
            ok(rk.status == 201 and sh(rk.json()["id"], "cat /work/result.txt") == "First result\n",
               "that snapshot restores after its fork's parent and child are gone", rk)

        metrics = d.get("/metrics").body
        ok('nanovm_sandboxes{state="running"}' in metrics and 'op="POST /v1/sandboxes/{id}/exec"' in metrics,
           "/metrics: sandboxes per state and the exec histogram", metrics[:1500])

        # Everything deleted: nothing is left on disk.
        for x in d.get("/v1/sandboxes").json()["sandboxes"]:
            d.request("DELETE", f"/v1/sandboxes/{x['id']}", timeout=120)
        for x in d.get("/v1/snapshots").json()["snapshots"]:
            d.request("DELETE", f"/v1/snapshots/{x['id']}")
        left = {sub: sorted(os.listdir(os.path.join(state, sub))) if os.path.isdir(os.path.join(state, sub)) else []
                for sub in ("vms", "snapshots", "forks")}
        ok(d.get("/v1/sandboxes").json()["sandboxes"] == [] and not any(left.values()),
           f"all deleted: no VM, snapshot or fork base directory left ({left})")
    finally:
        if d.alive():
            d.stop()
        err = d.stderr()
        if tap.failed:
            print("# daemon stderr (end):")
            for line in err[-3000:].splitlines():
                print("# " + line)
    return tap.done()


if __name__ == "__main__":
    main_guard(run)
