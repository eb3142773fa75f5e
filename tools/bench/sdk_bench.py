"""tools/bench/run sdk: what the Python client (sdk/python/lithosbox) adds to nanovmd's
API. In one run, interleaved round by round (the side that goes first alternates),
the same operations on the same 1-vCPU 256 MiB sandbox through the client and as bare
HTTP requests (http.client on one keep-alive Unix-socket connection, the JSON built
by hand): run("true") / POST exec; files.write + files.read_bytes of 1 MiB / PUT + GET;
snapshot() / POST snapshots; fork() / POST fork n=1. p50 and p99 per side;
lithosbox_<op>_overhead_ms = the median over rounds of the per-round median
difference, and lithosbox_<op>_within_budget = overhead <= max(1 ms, 10% of the bare
p50) (issue 20's budget). Snapshots are waited durable and deleted, fork children
deleted, outside the timing. Starts nanovm daemon on a fresh state directory and stops
it after. Prints a table, then the JSON line (DESIGN.md "Conventions")."""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
from lithosbox import LithosBox  # noqa: E402

MIB = 1 << 20


class Bare:
    """Bare HTTP/1.1 over the daemon's socket: one keep-alive connection."""

    def __init__(self, path):
        self.path = path
        self.conn = None

    def call(self, method, target, body=None, ctype="application/json"):
        if self.conn is None:
            self.conn = http.client.HTTPConnection("nanovm", timeout=300)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(self.path)
            self.conn.sock = s
        headers = {"Content-Type": ctype} if body is not None else {}
        self.conn.request(method, target, body=body, headers=headers)
        r = self.conn.getresponse()
        data = r.read()
        if r.status >= 300:
            raise RuntimeError(f"{method} {target}: {r.status} {data[:200]!r}")
        return data


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nanovm", required=True)
    ap.add_argument("--where", default="native")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--exec-runs", type=int, default=20)
    ap.add_argument("--file-runs", type=int, default=5)
    ap.add_argument("--snapshot-runs", type=int, default=4)
    ap.add_argument("--fork-runs", type=int, default=6)
    a = ap.parse_args()
    scratch = os.environ.get("NANOVM_SCRATCH") or tempfile.mkdtemp(prefix="nanovm-sdk-bench-")
    state = tempfile.mkdtemp(prefix="sdkb.", dir=scratch)
    sock = os.path.join(state, "nanovmd.sock")
    log = open(os.path.join(state, "daemon.log"), "wb")
    daemon = subprocess.Popen([a.nanovm, "daemon", "--state-dir", state], stdin=subprocess.DEVNULL,
                              stdout=log, stderr=log)
    box = LithosBox(state_dir=state)
    try:
        for _ in range(200):
            try:
                box.health()
                break
            except Exception:  # noqa: BLE001 -- not up yet
                if daemon.poll() is not None:
                    sys.exit(f"sdk bench: the daemon exited {daemon.returncode}")
                time.sleep(0.1)
        sb = box.sandboxes.create(cpus=1, memory_mb=256)
        bare = Bare(sock)
        blob = os.urandom(MIB)
        base = f"/v1/sandboxes/{sb.id}"
        fpath = "/v1/sandboxes/%s/files?path=/work/bench.bin" % sb.id

        def c_exec():
            sb.run("true")

        def b_exec():
            bare.call("POST", base + "/exec", json.dumps({"cmd": "true"}).encode())

        def c_files():
            sb.files.write("/work/bench.bin", blob)
            assert len(sb.files.read_bytes("/work/bench.bin")) == MIB

        def b_files():
            bare.call("PUT", fpath, blob, "application/octet-stream")
            assert len(bare.call("GET", fpath)) == MIB

        made = []

        def c_snapshot():
            made.append(("snapshot", sb.snapshot().id))

        def b_snapshot():
            made.append(("snapshot", json.loads(bare.call("POST", base + "/snapshots", b"{}"))["id"]))

        def c_fork():
            made.append(("sandbox", sb.fork().id))

        def b_fork():
            kids = json.loads(bare.call("POST", base + "/fork", json.dumps({"n": 1}).encode()))["children"]
            made.append(("sandbox", kids[0]["sandbox"]["id"]))

        def tidy():
            for kind, rid in made:
                if kind == "snapshot":
                    box.snapshots.wait_durable(rid)
                    box.snapshots.delete(rid)
                else:
                    box.sandboxes.delete(rid)
            made.clear()

        ops = [("exec_true", c_exec, b_exec, a.exec_runs), ("files_1mib", c_files, b_files, a.file_runs),
               ("snapshot", c_snapshot, b_snapshot, a.snapshot_runs), ("fork", c_fork, b_fork, a.fork_runs)]
        samples = {op: {"lithosbox": [], "bare": []} for op, *_ in ops}
        per_round = {op: [] for op, *_ in ops}
        c_exec(), b_exec(), c_files(), b_files()  # warm both paths
        for rnd in range(a.rounds):
            for op, client_fn, bare_fn, runs in ops:
                sides = [("lithosbox", client_fn), ("bare", bare_fn)]
                if rnd % 2:
                    sides.reverse()
                got = {}
                for side, fn in sides:
                    xs = []
                    for _ in range(runs):
                        t0 = time.perf_counter()
                        fn()
                        xs.append((time.perf_counter() - t0) * 1000)
                        tidy()
                    got[side] = xs
                    samples[op][side].extend(xs)
                per_round[op].append(statistics.median(got["lithosbox"]) - statistics.median(got["bare"]))
        result = {"case": "sdk", "where": a.where}
        print(f"{'operation':<12} {'lithosbox p50':>14} {'p99':>9} {'bare p50':>10} {'p99':>9} "
              f"{'overhead':>9} {'budget':>8}")
        for op, *_ in ops:
            c, b = samples[op]["lithosbox"], samples[op]["bare"]
            over = statistics.median(per_round[op])
            budget = max(1.0, 0.10 * pct(b, 50))
            within = over <= budget
            print(f"{op:<12} {pct(c, 50):>11.2f} ms {pct(c, 99):>6.2f} ms {pct(b, 50):>7.2f} ms "
                  f"{pct(b, 99):>6.2f} ms {over:>6.2f} ms {budget:>5.2f} ms{'' if within else '  OVER'}")
            result.update({f"lithosbox_{op}_p50_ms": round(pct(c, 50), 3),
                           f"lithosbox_{op}_p99_ms": round(pct(c, 99), 3),
                           f"bare_http_{op}_p50_ms": round(pct(b, 50), 3),
                           f"bare_http_{op}_p99_ms": round(pct(b, 99), 3),
                           f"lithosbox_{op}_overhead_ms": round(over, 3),
                           f"lithosbox_{op}_within_budget": within})
        print(f"({a.rounds} rounds; per round {a.exec_runs} exec, {a.file_runs} files, {a.snapshot_runs} snapshot, "
              f"{a.fork_runs} fork samples per side; 1 vCPU / 256 MiB)")
        print(json.dumps(result))
    finally:
        try:
            for s in box.sandboxes.list():
                s.delete()
            for s in box.snapshots.list():
                box.snapshots.wait_durable(s.id)
                box.snapshots.delete(s.id)
        except Exception as e:  # noqa: BLE001 -- best effort before stopping the daemon
            print(f"sdk bench: cleanup: {e}", file=sys.stderr)
        box.close()
        daemon.terminate()
        daemon.wait(30)


if __name__ == "__main__":
    main()
