#!/usr/bin/env python3
"""nanovmd's sessions, background commands and binary-safe output with a real guest,
run INSIDE the test host (tests/testhost/daemon_checks.sh, after testhost_checks.py):
one 256 MiB 1-vCPU sandbox; a session keeps its cwd and a variable where a plain exec
does not; a background command streams its output while it runs, takes stdin, is
waited for and killed; binary output round-trips byte for byte with base64 (whole,
streamed, in a session, from a background command) and becomes U+FFFD in UTF-8; a
session and a command outlive a kill -9 of the daemon. TAP (numbered from 1; the
wrapper renumbers).
Usage: testhost_session_checks.py NANOVM"""

import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Daemon, Tap, main_guard  # noqa: E402


# Sandboxes boot (no implicit template: a first create would answer 503 template_building).
ARGS = ["--implicit-templates", "0"]


def ndjson(answer):
    return [json.loads(x) for x in answer.body.splitlines() if x.strip()] if answer.status == 200 else []


def joined(lines, stream, encoding="utf8"):
    parts = [x["data"] for x in lines if x.get("type") == stream]
    if encoding == "base64":
        return b"".join(base64.b64decode(p) for p in parts)
    return "".join(parts)


def timed_lines(d, path, timeout=60):
    """GET an NDJSON answer line by line: [(seconds since the request, object)]."""
    conn = d.connection(timeout=timeout)
    t0 = time.time()
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        out = []
        while True:
            line = r.readline()
            if not line:
                break
            if line.strip():
                out.append((time.time() - t0, json.loads(line)))
        return r.status, out
    finally:
        conn.close()


def run():
    nanovm = sys.argv[1]
    tap = Tap()
    state = tempfile.mkdtemp(prefix="nvs.", dir="/tmp")  # short: the sockets' sun_path
    d = Daemon(nanovm, state_dir=state, args=ARGS).start()
    ok = tap.ok
    try:
        t0 = time.time()
        c = d.post("/v1/sandboxes", {"cpus": 1, "memory_mb": 256, "timeout_s": 3600}, timeout=300)
        ok(c.status == 201, f"create (1 vCPU, 256 MiB) ({time.time() - t0:.1f} s)", c)
        if c.status != 201:
            print("# daemon stderr:\n# " + d.stderr()[-3000:].replace("\n", "\n# "))
            return tap.done()
        sb = f"/v1/sandboxes/{c.json()['id']}"

        def exec_(body, path=f"{sb}/exec"):
            return d.post(path, body, timeout=120)

        # --- sessions ---
        s = d.post(f"{sb}/sessions", {"cwd": "/tmp", "env": {"GREETING": "hello"}})
        ok(s.status == 201 and s.json()["sandbox_id"] == c.json()["id"] and s.json()["created_at"],
           "create a session (cwd /tmp, env GREETING): 201 Session", s)
        sid = s.json().get("id", "x")
        sx = f"{sb}/sessions/{sid}/exec"
        e = exec_({"cmd": "pwd; echo $GREETING"}, sx)
        ok(e.status == 200 and e.json()["stdout"] == "/tmp\nhello\n", "the session starts in its cwd with its env", e)
        e = exec_({"cmd": "mkdir -p /work/s && cd /work/s && export FOO=bar && MINE=1"}, sx)
        ok(e.status == 200 and e.json()["exit_code"] == 0, "a session exec: cd, export and a shell variable", e)
        e = exec_({"cmd": "pwd; echo $FOO; echo ${MINE:-unset}"}, sx)
        ok(e.status == 200 and e.json()["stdout"] == "/work/s\nbar\n1\n",
           "the next session exec keeps the cwd, the exported and the shell variable", e)
        e = exec_({"cmd": "pwd; echo x${FOO}x"})
        ok(e.status == 200 and e.json()["stdout"] == "/\nxx\n", "a plain exec keeps neither", e)
        e = exec_({"cmd": "echo out; echo err >&2; false"}, sx)
        ok(e.status == 200 and e.json()["stdout"] == "out\n" and e.json()["stderr"] == "err\n" and
           e.json()["exit_code"] == 1, "a session exec's result: stdout, stderr, exit code 1", e)
        st = exec_({"cmd": "echo a; sleep 1; echo b >&2; (exit 4)", "stream": True}, sx)
        lines = ndjson(st)
        ok(joined(lines, "stdout") == "a\n" and joined(lines, "stderr") == "b\n" and lines[-1]["type"] == "exit" and
           lines[-1]["exit_code"] == 4, "a streamed session exec: NDJSON output then the exit line", st)
        t1 = time.time()
        e = exec_({"cmd": "sleep 30", "timeout_s": 1}, sx)
        ok(e.status == 200 and e.json()["timed_out"] and time.time() - t1 < 20, "a session exec's timeout kills it", e)
        e = exec_({"cmd": "pwd"}, sx)
        ok(e.status == 200 and e.json()["stdout"] == "/work/s\n", "the session goes on after a timeout, cwd kept", e)
        ls = d.get(f"{sb}/sessions")
        ok(ls.status == 200 and [x["id"] for x in ls.json()["sessions"]] == [sid], "list the sessions", ls)
        s2 = d.post(f"{sb}/sessions", {}).json().get("id", "y")
        exec_({"cmd": "exit 3"}, f"{sb}/sessions/{s2}/exec")
        e = exec_({"cmd": "pwd"}, f"{sb}/sessions/{s2}/exec")
        ok(e.status == 404 and e.code() == "session_not_found",
           "a session whose shell ran exit: its next exec is 404 session_not_found", e)

        # --- binary-safe output ---
        blob = exec_({"cmd": "head -c 200000 /dev/urandom > /tmp/blob; printf '\\000\\377\\376\\200' >> /tmp/blob"})
        raw = d.get(f"{sb}/files?path=/tmp/blob")
        ok(blob.status == 200 and raw.status == 200 and len(raw.raw) == 200004, "a 200004-byte random file", raw)
        e = exec_({"cmd": "cat /tmp/blob", "output_encoding": "base64"})
        ok(e.status == 200 and base64.b64decode(e.json()["stdout"]) == raw.raw,
           "exec with base64: stdout is the file byte for byte", e.body[:200])
        st = exec_({"cmd": "cat /tmp/blob; cat /tmp/blob >&2", "output_encoding": "base64", "stream": True})
        lines = ndjson(st)
        ok(joined(lines, "stdout", "base64") == raw.raw and joined(lines, "stderr", "base64") == raw.raw and
           lines[-1]["type"] == "exit", f"streamed exec with base64: both streams byte for byte ({len(lines)} lines)",
           st.body[:200])
        e = exec_({"cmd": "printf 'caf\\303\\251 \\377 \\342\\202\\254'"})
        ok(e.status == 200 and e.json()["stdout"] == "caf\u00e9 \ufffd \u20ac",
           "exec with utf8: valid text kept, an invalid byte becomes U+FFFD", e)
        e = exec_({"cmd": "printf '\\000\\001\\377'", "output_encoding": "base64"}, sx)
        ok(e.status == 200 and e.json()["stdout"] == "AAH/", "a session exec with base64", e)

        # --- background commands ---
        cm = f"{sb}/commands"
        b = d.post(cm, {"cmd": "while read line; do echo got:$line; done; echo done >&2; exit 7"})
        ok(b.status == 201 and b.json()["state"] == "running" and b.json()["exit_code"] is None and
           b.json()["cmd"].startswith("while read"), "start a background command: 201 running, its id at once", b)
        cid = b.json().get("id", "0")
        i1 = d.post(f"{cm}/{cid}/stdin", body="one\ntwo\n")
        seen = ""
        for _ in range(50):
            seen = joined(ndjson(d.get(f"{cm}/{cid}/output")), "stdout")
            if "got:two" in seen:
                break
            time.sleep(0.2)
        ok(i1.status == 204 and seen == "got:one\ngot:two\n", f"stdin reaches it; output without follow ({seen!r})", i1)
        g = d.get(f"{cm}/{cid}")
        ok(g.status == 200 and g.json()["state"] == "running" and g.json()["stdin_open"], "get: still running", g)
        i2 = d.post(f"{cm}/{cid}/stdin?eof=true", body="three\n")
        w = d.post(f"{cm}/{cid}/wait", {"timeout_s": 30}, timeout=60)
        ok(i2.status == 204 and w.status == 200 and w.json()["state"] == "exited" and w.json()["exit_code"] == 7 and
           w.json()["ended_at"], "stdin with eof=true ends it: wait answers exited, exit code 7", w)
        out = ndjson(d.get(f"{cm}/{cid}/output?follow=true"))
        ok(joined(out, "stdout") == "got:one\ngot:two\ngot:three\n" and joined(out, "stderr") == "done\n" and
           out[-1] == {"type": "exit", "exit_code": 7, "signal": None, "timed_out": False},
           "its whole output and the exit line, read again after its end", out)
        late = d.post(f"{cm}/{cid}/stdin", body="x")
        ok(late.status == 409 and late.code() == "wrong_state", "stdin after the end: 409 wrong_state", late)

        t = d.post(cm, {"argv": ["sh", "-c", "for i in 1 2 3 4 5 6; do echo tick$i; sleep 0.5; done"]})
        tid = t.json().get("id", "0")
        status, timed = timed_lines(d, f"{cm}/{tid}/output?follow=true")
        ticks = [x for _, x in timed if x.get("type") == "stdout"]
        first = next((s for s, x in timed if x.get("type") == "stdout"), 99)
        last = timed[-1][0] if timed else 0
        ok(status == 200 and "".join(x["data"] for x in ticks) == "".join(f"tick{i}\n" for i in range(1, 7)) and
           timed[-1][1].get("type") == "exit" and last - first > 1.5,
           f"follow streams the output as it comes (first line at {first:.1f} s, exit at {last:.1f} s)", timed)

        k = d.post(cm, {"cmd": "sleep 300"})
        kid = k.json().get("id", "0")
        kl = d.post(f"{cm}/{kid}/kill", {})
        ok(kl.status == 200 and kl.json()["state"] == "exited" and kl.json()["signal"] == 9 and
           kl.json()["exit_code"] == 137, "kill: SIGKILL, exited with signal 9 (exit code 137)", kl)
        bc = d.post(cm, {"cmd": "printf '\\000\\377'; printf '\\200' >&2"})
        bcid = bc.json().get("id", "0")
        d.post(f"{cm}/{bcid}/wait", {"timeout_s": 30}, timeout=60)
        out = ndjson(d.get(f"{cm}/{bcid}/output?output_encoding=base64"))
        ok(joined(out, "stdout", "base64") == b"\x00\xff" and joined(out, "stderr", "base64") == b"\x80",
           "a background command's output with base64", out)
        ls = d.get(cm)
        ids = [x["id"] for x in ls.json().get("commands", [])] if ls.status == 200 else []
        ok(ls.status == 200 and all(x in ids for x in (cid, tid, kid, bcid)) and
           any(x.get("argv") == ["sh", "-c", "for i in 1 2 3 4 5 6; do echo tick$i; sleep 0.5; done"]
               for x in ls.json()["commands"]), "list: every command, with its cmd or argv", ls)
        nf = d.get(f"{cm}/99999")
        ok(nf.status == 404 and nf.code() == "command_not_found", "an unknown command id: 404 command_not_found", nf)
        bad = d.post(cm, {"argv": ["/no/such/program"]})
        ok(bad.status == 422 and bad.code() == "invalid_value", "a program that cannot start: 422 with the reason", bad)

        # --- the command line (nanovm sandbox exec --session / --background, command logs) ---
        env = dict(os.environ, NANOVM_STATE_DIR=state)

        def cli(*args):
            p = subprocess.run([nanovm, "sandbox", *args], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=120)
            return p.returncode, p.stdout, p.stderr.decode(errors="replace")

        box = c.json()["id"]
        rc, out, err = cli("session", "create", box, "--cwd", "/tmp")
        csid = out.decode().strip()
        rc1, _, err1 = cli("exec", box, "--session", csid[:8], "--", "cd /work &&", "export X=1")
        rc2, out2, err2 = cli("exec", box, "--session", csid, "--", "echo $X; pwd")
        ok(rc == 0 and rc1 == 0 and rc2 == 0 and out2 == b"1\n/work\n",
           "CLI: session create, then exec --session (a prefix) keeps cd and export", (rc, rc1, rc2, out2, err, err1, err2))
        rc, out, err = cli("exec", box, "--", "sh", "-c", "printf '\\000\\377\\200'; exit 5")
        ok(rc == 5 and out == b"\x00\xff\x80", "CLI: exec writes binary output byte for byte, exits 5", (rc, out, err))
        rc, out, err = cli("exec", box, "--background", "--", "sh", "-c", "sleep 1; echo bg; exit 3")
        rc2, out2, err2 = cli("command", "logs", box, out.decode().strip(), "-f")
        ok(rc == 0 and out.decode().strip().isdigit() and rc2 == 3 and out2 == b"bg\n",
           "CLI: exec --background prints the id; command logs -f follows it and exits 3", (rc, out, rc2, out2, err2))

        # --- kill -9 of the daemon: the session and a command live on in the guest ---
        late = d.post(cm, {"cmd": "sleep 2; echo later"})
        lid = late.json().get("id", "0")
        d.stop(sig=signal.SIGKILL)
        d = Daemon(nanovm, state_dir=state, args=ARGS).start()
        w = d.post(f"{cm}/{lid}/wait", {"timeout_s": 30}, timeout=60)
        out = ndjson(d.get(f"{cm}/{lid}/output"))
        ok(w.status == 200 and w.json()["exit_code"] == 0 and joined(out, "stdout") == "later\n",
           "a background command started before a kill -9 of the daemon ends and is read after the restart", w)
        e = exec_({"cmd": "pwd; echo $FOO"}, sx)
        ok(e.status == 200 and e.json()["stdout"] == "/work/s\nbar\n", "the session too, its cwd and variable kept", e)
        dl = d.request("DELETE", f"{sb}/sessions/{sid}")
        e = exec_({"cmd": "pwd"}, sx)
        ok(dl.status == 204 and e.status == 404 and e.code() == "session_not_found",
           "delete the session: 204, then its exec is 404 session_not_found", e)
        d.request("DELETE", sb, timeout=120)
        gone = d.get(f"{sb}/sessions")
        ok(gone.status == 404, "the sandbox deleted: its sessions are gone with it", gone)
    finally:
        d.cleanup()
    return tap.done()


if __name__ == "__main__":
    main_guard(run)
