"""tools/bench/run lifecycle: sandbox lifecycle operations through nanovmd's API, beside
a cold boot of the same shape with `nanovm vm start` and the VMM's control socket's
own pause and resume, in the same run, round by round (1 vCPU / 256 MiB by default).

Starts `nanovm daemon` on a fresh state directory, makes the shape's template ready
(the first create of an image and shape builds it: 503 template_building until then;
that wait is not timed), then per round runs every op in OPS in order, each timing
what a client waits for: create (from the ready template), sleep (POST .../sleep) and
wake (the next exec `true` on the sleeping sandbox: sleep -> first command answered,
--sleep-runs times a round), reboot, delete. Beside sleep and wake, on the same
sandbox in the same round: the control socket's pause and resume of its VMM
(<state>/vms/<vm_id>/control.sock, one connection per request as the daemon's
vm_ops do: the direct path tools/bench/run api drives) and an exec `true` on it
running (wake minus that is what the wake adds to a command). After the rounds,
archive and unarchive of one sandbox with 256 MiB written (tools/bench/archive_bench.py,
--archive-rounds times; its zstd MB/s from the daemon's log).

Prints a table, then one JSON line: for op X the keys nanovm_api_X_ms (median) and
nanovm_api_X_p99_ms (X: create, sleep, wake, archive, unarchive, reboot, delete);
nanovm_cold_boot_ms and _p99_ms; vmm_control_pause_ms, vmm_control_resume_ms and
nanovm_api_exec_running_ms (with _p99_ms); nanovm_archive_zstd_mb_s; and the goals'
figures: create_speedup_vs_cold_boot (cold boot / create, goal >= 10),
sleep_over_pause_ms and wake_over_resume_ms (API sleep - control pause; wake - exec
on a running sandbox - control resume: goal each <= max(2 ms, 10% of the control
socket's), *_within_goal), unarchive_speedup_vs_archive (goal >= 2).

An op is one function registered with @op("name"): it gets the Bench and returns
the milliseconds of one sample, or a dict of sample lists by name when it times
several things; b.sandbox() gives it a running sandbox made from the template
(deleted at the end of the round), b.timed(method, target, body) times one request.
Ops that need more setup (a sandbox with data written, a snapshot) make it
themselves, untimed."""
import argparse
import http.client
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import archive_bench  # noqa: E402


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("nanovm", timeout=timeout)
        self.path_ = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path_)


class Bench:
    def __init__(self, args, sock, state):
        self.a = args
        self.sock = sock
        self.state = state
        self.shape = {"cpus": args.cpus, "memory_mb": args.memory}
        self.made = []  # sandboxes of this round
        self.notes = {}  # name -> samples of figures an op reads from the VMM's log (not timed by us)

    def call(self, method, target, body=None, timeout=600):
        c = UnixHTTP(self.sock, timeout)
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, target, body=data, headers={"Content-Type": "application/json"} if data else {})
        r = c.getresponse()
        raw = r.read()
        c.close()
        return r.status, (json.loads(raw) if raw else None), dict(r.getheaders())

    def text(self, target):
        """GET of a text answer (a log)."""
        c = UnixHTTP(self.sock, 60)
        c.request("GET", target)
        body = c.getresponse().read().decode(errors="replace")
        c.close()
        return body

    def must(self, want, method, target, body=None):
        status, answer, _ = self.call(method, target, body)
        if status != want:
            raise SystemExit(f"lifecycle bench: {method} {target}: {status} {answer}")
        return answer

    def timed(self, method, target, body=None, want=200):
        """Milliseconds of one request (which must answer `want`), and its answer."""
        t0 = time.perf_counter()
        answer = self.must(want, method, target, body)
        return (time.perf_counter() - t0) * 1000, answer

    def sandbox(self):
        """A running sandbox from the template, deleted at the end of the round."""
        answer = self.must(201, "POST", "/v1/sandboxes", self.shape)
        self.made.append(answer["id"])
        return answer["id"]

    def control_socket(self, sid):
        """The control socket of the sandbox's VMM (its vm_id from the daemon's store, read-only)."""
        db = sqlite3.connect(os.path.join(self.state, "store.db"), timeout=10)
        try:
            row = db.execute("SELECT vm_id FROM sandboxes WHERE id = ?", (sid,)).fetchone()
        finally:
            db.close()
        if not row or not row[0]:
            raise SystemExit(f"lifecycle bench: sandbox {sid} has no VM in the store")
        return os.path.join(self.state, "vms", row[0], "control.sock")

    def end_round(self):
        for sid in self.made:
            self.call("DELETE", f"/v1/sandboxes/{sid}")
        self.made = []

    def ready_template(self):
        """Creates until the shape's template is ready (not timed); returns the seconds it took."""
        t0 = time.time()
        while True:
            status, answer, headers = self.call("POST", "/v1/sandboxes", self.shape)
            if status == 201:
                self.call("DELETE", f"/v1/sandboxes/{answer['id']}")
                return time.time() - t0
            if status != 503 or answer["error"]["code"] != "template_building":
                raise SystemExit(f"lifecycle bench: the template did not build: {status} {answer}")
            time.sleep(float(headers.get("Retry-After", "1")))


OPS = []  # (name, function(Bench) -> ms), run in this order each round


def op(name):
    def register(fn):
        OPS.append((name, fn))
        return fn
    return register


@op("create")
def op_create(b):
    ms, answer = b.timed("POST", "/v1/sandboxes", b.shape, want=201)
    b.made.append(answer["id"])
    # Where the time went, from the new VMM's log: its restore, and the agent's resync.
    text = b.text(f"/v1/sandboxes/{answer['id']}/logs/vmm?tail_bytes=8192")
    for key, pattern in (("create_vmm_restore_ms", r"restored \S+ \(.*?\) in ([0-9.]+) ms"),
                         ("create_agent_ready_ms", r"ready: the agent answered ([0-9.]+) ms")):
        m = re.search(pattern, text)
        if m:
            b.notes.setdefault(key, []).append(float(m.group(1)))
    b.notes.setdefault("create_in_standby", []).append(1.0 if "standby made ahead" in text else 0.0)
    return ms


def control(path, command):
    """Milliseconds of one control-socket request (a new connection, as vm_ops' control_call)."""
    t0 = time.perf_counter()
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(30)
    c.connect(path)
    c.sendall(json.dumps({"command": command}).encode() + b"\n")
    line = b""
    while not line.endswith(b"\n"):
        chunk = c.recv(4096)
        if not chunk:
            break
        line += chunk
    c.close()
    ms = (time.perf_counter() - t0) * 1000
    answer = json.loads(line)
    if not answer.get("ok"):
        raise SystemExit(f"lifecycle bench: control {command}: {answer}")
    return ms


def exec_true(b, sid):
    ms, answer = b.timed("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "true"})
    if answer.get("exit_code") != 0:
        raise SystemExit(f"lifecycle bench: exec true: {answer}")
    return ms


@op("sleep")
def op_sleep_wake(b):
    """API sleep and wake (exec on the sleeping sandbox), the control socket's pause and
    resume and an exec on the running sandbox, --sleep-runs times each, interleaved."""
    sid = b.sandbox()
    exec_true(b, sid)  # the restored guest's first answer (its memory faulted in): not timed
    path = b.control_socket(sid)
    out = {"sleep": [], "wake": [], "exec_running": [], "vmm_control_pause": [], "vmm_control_resume": []}
    for _ in range(b.a.sleep_runs):
        out["vmm_control_pause"].append(control(path, "pause"))
        out["vmm_control_resume"].append(control(path, "resume"))
        out["exec_running"].append(exec_true(b, sid))
        ms, answer = b.timed("POST", f"/v1/sandboxes/{sid}/sleep")
        if answer["state"] != "sleeping":
            raise SystemExit(f"lifecycle bench: sleep answered {answer['state']}")
        out["sleep"].append(ms)
        out["wake"].append(exec_true(b, sid))
        state = b.must(200, "GET", f"/v1/sandboxes/{sid}")["state"]
        if state != "running":
            raise SystemExit(f"lifecycle bench: after the wake the sandbox is {state}")
    return out


@op("reboot")
def op_reboot(b):
    sid = b.sandbox()
    ms, answer = b.timed("POST", f"/v1/sandboxes/{sid}/reboot")
    if answer["state"] != "running":
        raise SystemExit(f"lifecycle bench: reboot answered {answer['state']}")
    return ms


@op("delete")
def op_delete(b):
    sid = b.sandbox()
    b.made.remove(sid)
    return b.timed("DELETE", f"/v1/sandboxes/{sid}", want=204)[0]


def cold_boot(args):
    """`nanovm vm start` of the same shape until it prints the id (its agent answers); stopped after."""
    t0 = time.perf_counter()
    out = subprocess.run([args.nanovm, "vm", "start", "--cpus", str(args.cpus), "--memory", str(args.memory),
                          "--fork-standby", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ms = (time.perf_counter() - t0) * 1000
    if out.returncode != 0:
        raise SystemExit(f"lifecycle bench: nanovm vm start failed: {out.stderr.strip()}")
    subprocess.run([args.nanovm, "vm", "stop", "--force", out.stdout.strip()], stdout=subprocess.DEVNULL)
    return ms


def quantile(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))] if v else -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nanovm", required=True)
    ap.add_argument("--where", default="native")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpus", type=int, default=1)
    ap.add_argument("--memory", type=int, default=256)
    ap.add_argument("--standbys", type=int, default=1, help="the daemon's --standbys")
    ap.add_argument("--warm", type=int, default=0, help="the daemon's --warm (VMs restored ahead of creates)")
    ap.add_argument("--sleep-runs", type=int, default=3, help="sleep/wake and control pause/resume pairs a round")
    ap.add_argument("--archive-rounds", type=int, default=3, help="archive + unarchive rounds after the rounds (0: none)")
    a = ap.parse_args()
    scratch = os.environ.get("NANOVM_SCRATCH") or tempfile.mkdtemp(prefix="nanovm-lifecycle-")
    state = tempfile.mkdtemp(prefix="lc.", dir=scratch)  # short: the sockets' sun_path
    sock = os.path.join(state, "nanovmd.sock")
    log = open(os.path.join(state, "daemon.log"), "wb")
    daemon = subprocess.Popen([a.nanovm, "daemon", "--state-dir", state, "--standbys", str(a.standbys),
                               "--warm", str(a.warm)],
                              stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    samples = {name: [] for name in ("create", "sleep", "wake", "reboot", "delete", "cold_boot",
                                     "vmm_control_pause", "vmm_control_resume", "exec_running")}
    archive = {}
    errors = []
    b = Bench(a, sock, state)
    try:
        for _ in range(200):
            if os.path.exists(sock):
                try:
                    if b.call("GET", "/v1/health", timeout=5)[0] == 200:
                        break
                except OSError:
                    pass
            if daemon.poll() is not None:
                sys.exit(f"lifecycle bench: the daemon exited {daemon.returncode}")
            time.sleep(0.1)
        build_s = b.ready_template()
        for r in range(a.rounds):
            # The cold boot first or last, alternating, so neither side always follows the other.
            if r % 2 == 0:
                samples["cold_boot"].append(cold_boot(a))
            for name, fn in OPS:
                try:
                    got = fn(b)
                except (SystemExit, Exception) as e:  # one failed op is reported; the others go on
                    errors.append(f"round {r + 1} {name}: {e}")
                    print(f"lifecycle bench: round {r + 1} {name} failed: {e}", flush=True)
                    continue
                for key, v in (got.items() if isinstance(got, dict) else ((name, [got]),)):
                    samples.setdefault(key, []).extend(v)
                time.sleep(0.2)  # the pool's standby is made again behind a create
            b.end_round()
            if r % 2 == 1:
                samples["cold_boot"].append(cold_boot(a))
        if a.archive_rounds > 0:
            try:
                archive = archive_bench.run(sock, os.path.join(state, "daemon.log"), a.archive_rounds, a.cpus,
                                            a.memory)
            except (SystemExit, Exception) as e:
                errors.append(f"archive: {e}")
                print(f"lifecycle bench: archive rounds failed: {e}", flush=True)
    finally:
        try:
            b.end_round()
            status, answer, _ = b.call("GET", "/v1/sandboxes?limit=1000")
            for s in answer.get("sandboxes", []) if status == 200 else []:
                b.call("DELETE", f"/v1/sandboxes/{s['id']}")
        except (OSError, ValueError):
            pass
        daemon.terminate()
        daemon.wait(60)

    out = {"case": "lifecycle", "where": a.where, "rounds": a.rounds, "cpus": a.cpus, "memory_mib": a.memory,
           "standbys": a.standbys, "warm": a.warm, "sleep_runs": a.sleep_runs,
           "template_build_s": round(build_s, 1)}
    if errors:
        out["errors"] = errors
    print(f"lifecycle benchmark ({a.where}, {a.rounds} rounds, {a.cpus} vCPU / {a.memory} MiB, --standbys "
          f"{a.standbys} --warm {a.warm}; the template "
          f"took {build_s:.1f} s to build, not timed)")
    print(f"{'operation':<34}{'p50 ms':>10}{'p99 ms':>10}{'n':>5}")
    for name, v in samples.items():
        key, label = {"cold_boot": ("nanovm_cold_boot", "cold boot (nanovm vm start)"),
                      "vmm_control_pause": ("vmm_control_pause", "control socket pause"),
                      "vmm_control_resume": ("vmm_control_resume", "control socket resume"),
                      "exec_running": ("nanovm_api_exec_running", "API exec true (running)")}.get(
                          name, (f"nanovm_api_{name}", f"API {name}"))
        out[f"{key}_ms"] = round(quantile(v, 0.5), 2)
        out[f"{key}_p99_ms"] = round(quantile(v, 0.99), 2)
        print(f"{label:<34}{quantile(v, 0.5):>10.1f}{quantile(v, 0.99):>10.1f}{len(v):>5}")
    for name in ("archive", "unarchive"):
        if f"nanovm_api_{name}_ms" in archive:
            print(f"{'API ' + name:<34}{archive[f'nanovm_api_{name}_ms']:>10.1f}"
                  f"{archive[f'nanovm_api_{name}_p99_ms']:>10.1f}{archive['archive_rounds']:>5}")
    out.update(archive)
    for key, v in b.notes.items():
        if key == "create_in_standby":
            out["create_in_standby_fraction"] = round(sum(v) / len(v), 2)
            print(f"creates restored into a pre-made VMM: {sum(v):.0f} of {len(v)}")
        else:
            out[key] = round(quantile(v, 0.5), 2)
            print(f"{'  ' + key + ' (vmm.log)':<34}{quantile(v, 0.5):>10.1f}{quantile(v, 0.99):>10.1f}")
    if out.get("nanovm_api_create_ms", 0) > 0:
        out["create_speedup_vs_cold_boot"] = round(out["nanovm_cold_boot_ms"] / out["nanovm_api_create_ms"], 1)
        print(f"create from a ready template: {out['create_speedup_vs_cold_boot']}x faster than a cold boot "
              f"(goal: >= 10x)")
    if samples["sleep"] and samples["vmm_control_pause"] and samples["exec_running"]:
        pause, resume = out["vmm_control_pause_ms"], out["vmm_control_resume_ms"]
        out["sleep_over_pause_ms"] = round(out["nanovm_api_sleep_ms"] - pause, 2)
        out["wake_over_resume_ms"] = round(out["nanovm_api_wake_ms"] - out["nanovm_api_exec_running_ms"] - resume, 2)
        out["sleep_within_goal"] = out["sleep_over_pause_ms"] <= max(2.0, 0.1 * pause)
        out["wake_within_goal"] = out["wake_over_resume_ms"] <= max(2.0, 0.1 * resume)
        print(f"sleep - control pause: {out['sleep_over_pause_ms']:+.2f} ms; wake - exec (running) - control resume: "
              f"{out['wake_over_resume_ms']:+.2f} ms (goal: each <= max(2 ms, 10% of the control socket's): "
              f"{'met' if out['sleep_within_goal'] else 'missed'}, {'met' if out['wake_within_goal'] else 'missed'})")
    if archive.get("nanovm_api_unarchive_ms"):
        out["unarchive_speedup_vs_archive"] = round(archive["nanovm_api_archive_ms"] / archive["nanovm_api_unarchive_ms"], 2)
        print(f"archive of {archive['archive_fill_mib']} MiB written: zstd {archive.get('nanovm_archive_zstd_mb_s')} MB/s; "
              f"unarchive {out['unarchive_speedup_vs_archive']}x faster than archive (goal: >= 2)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
