"""tools/bench/run lifecycle: sandbox lifecycle operations through nanovmd's API, beside
a cold boot of the same shape with `nanovm vm start` and the VMM's control socket's
own pause and resume, in the same run, round by round (1 vCPU / 256 MiB by default).
Sleep, wake, the exec on a running sandbox and GET /v1/health are sent over a bare
socket (raw_request: one write, read to Content-Length), as the control socket's
requests are, so the comparison is of the two servers and not of Python's
http.client against a JSON line; GET /v1/health is also timed through http.client
(nanovm_api_health_httpclient_ms), what the other ops use.

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
socket's), *_within_goal), unarchive_speedup_vs_archive (goal >= 2). Where the sleep
and wake go: the daemon's own time per request (GET /metrics, read between the timed
requests: sleep_daemon_ms, wake_daemon_ms for the waking exec, exec_running_daemon_ms,
health_daemon_ms), its log lines' parts ("asleep in": sleep_daemon_{lookup,pause,
store}_ms; "woken in": wake_daemon_{lookup,resume,store}_ms; the step of the guest's
clock, sent ahead of the waking call's request: wake_daemon_clock_step_ms), sleep_http_ms (the
client's sleep minus the daemon's), GET /v1/health through the API (nanovm_api_health_ms,
the HTTP floor) and, once a round, a wake after --long-sleep-s asleep
(nanovm_api_wake_after_long_sleep_ms: does the wake grow with the time asleep?).

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


def raw_request(path, method, target, body=None, timeout=600):
    """One HTTP/1.1 request to nanovmd's Unix socket at `path` over a bare socket:
    (status, the JSON answer or None). Reads the status line, the headers up to the
    blank line and exactly Content-Length bytes of body (nanovmd always sends it)."""
    data = json.dumps(body).encode() if body is not None else b""
    head = f"{method} {target} HTTP/1.1\r\nHost: nanovm\r\nContent-Length: {len(data)}\r\n"
    if data:
        head += "Content-Type: application/json\r\n"
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(timeout)
    try:
        c.connect(path)
        c.sendall(head.encode() + b"\r\n" + data)
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = c.recv(65536)
            if not chunk:
                raise SystemExit(f"lifecycle bench: {method} {target}: the connection closed before the headers")
            got += chunk
        header, rest = got.split(b"\r\n\r\n", 1)
        lines = header.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        while len(rest) < length:
            chunk = c.recv(65536)
            if not chunk:
                raise SystemExit(f"lifecycle bench: {method} {target}: the connection closed in the body")
            rest += chunk
    finally:
        c.close()
    return status, (json.loads(rest[:length]) if length else None)


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

    def raw_timed(self, method, target, body=None, want=200):
        """Milliseconds of one request sent and read over a bare socket (a new
        connection, one write, reads until the body's Content-Length is in; the client
        the control-socket timings use, so the two compare like with like: Python's
        http.client spends ~8 ms more per request in the test host building and
        parsing headers), and its answer, which must be `want`."""
        t0 = time.perf_counter()
        status, answer = raw_request(self.sock, method, target, body)
        ms = (time.perf_counter() - t0) * 1000
        if status != want:
            raise SystemExit(f"lifecycle bench: {method} {target}: {status} {answer}")
        return ms, answer

    def sandbox(self):
        """A running sandbox from the template, deleted at the end of the round. With
        --warm, it waits (untimed) for a warm VM before and for the one restored behind
        it after, so no background restore runs beside the op's timings."""
        self.wait_warm()
        answer = self.must(201, "POST", "/v1/sandboxes", self.shape)
        self.made.append(answer["id"])
        self.wait_warm()
        return answer["id"]

    def daemon_log(self):
        with open(os.path.join(self.state, "daemon.log"), errors="replace") as f:
            return f.read()

    def warm_ready(self):
        """The warm VMs the daemon has ready now (its log: restored and paused, not taken or ended)."""
        text = self.daemon_log()
        ready = set(re.findall(r"warm VM ([0-9a-f]+) ready \(paused", text))
        gone = set(re.findall(r"took warm VM ([0-9a-f]+)", text)) | set(re.findall(r"warm VM ([0-9a-f]+) ended", text))
        return sorted(ready - gone)

    def wait_warm(self, timeout_s=120):
        """With --warm: until the daemon has a warm VM ready (untimed); else at once."""
        if self.a.warm <= 0:
            return
        end = time.time() + timeout_s
        while time.time() < end and not self.warm_ready():
            time.sleep(0.05)

    def create_line(self, sid):
        """The daemon's line for the create of `sid`: its path and total ms, or (None, None)."""
        for _ in range(20):
            m = re.search(r"sandbox " + re.escape(sid) + r": created from template \S+ in ([0-9.]+) ms \(([^)]*)\): (.*)",
                          self.daemon_log())
            if m:
                return m.group(2), float(m.group(1)), m.group(3)
            time.sleep(0.05)
        return None, None, ""

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


def note_create(b, sid, prefix):
    """Notes where a create's time went from the daemon's line: its path, the daemon's ms and their parts."""
    path, daemon_ms, parts = b.create_line(sid)
    b.notes.setdefault(prefix + "_paths", []).append(path or "?")
    if daemon_ms is not None:
        b.notes.setdefault(prefix + "_daemon_ms", []).append(daemon_ms)
    for name, value in re.findall(r"([A-Za-z][A-Za-z ]*?) ([0-9.]+) ms", parts):
        name = name.replace("no warm VM", "take").replace(" ", "_").lower()
        b.notes.setdefault(f"{prefix}_daemon_{name}_ms", []).append(float(value))
    if path == "took a warm VM":
        # What the guest said on its console after the resume (a clock jump: soft
        # lockup, RCU stall or clocksource lines, each slow on a serial console).
        text = b.text(f"/v1/sandboxes/{sid}/logs/console?tail_bytes=4096")
        b.notes.setdefault(prefix + "_console_warnings", []).append(
            float(len(re.findall(r"soft lockup|rcu.*stall|clocksource|watchdog", text, re.I))))
    if path and path.startswith("restored"):
        # Where the VM start went, from the new VMM's log: its restore (the prefetch in
        # it), the agent's first answer and the resync.
        text = b.text(f"/v1/sandboxes/{sid}/logs/vmm?tail_bytes=8192")
        for key, pattern in (("vmm_restore_ms", r"restored \S+ \(.*?\) in ([0-9.]+) ms"),
                             ("agent_ready_ms", r"ready: the agent answered ([0-9.]+) ms"),
                             ("resync_ms", r"hostname and vsock reset took ([0-9.]+) ms"),
                             ("prefetch_end_ms", r"prefetch ended ([0-9.]+) ms after")):
            m = re.search(pattern, text)
            if m:
                b.notes.setdefault(f"{prefix}_{key}", []).append(float(m.group(1)))
        b.notes.setdefault(f"{prefix}_in_standby", []).append(1.0 if "standby made ahead" in text else 0.0)
        b.notes.setdefault(f"{prefix}_layer_checked_whole", []).append(1.0 if "found good whole" in text else 0.0)
    return path


@op("create")
def op_create(b):
    b.wait_warm()  # with --warm: a create that finds its warm VM ready (the restore path is timed apart)
    ms, answer = b.timed("POST", "/v1/sandboxes", b.shape, want=201)
    b.made.append(answer["id"])
    note_create(b, answer["id"], "create")
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


def daemon_seconds(b):
    """The daemon's own time so far per operation ("METHOD ROUTE" -> seconds summed over
    every request: GET /metrics, from a request's end to its answer's end)."""
    out = {}
    for op_name, value in re.findall(r'^nanovm_api_operation_seconds_sum\{op="([^"]*)"\} (\S+)$', b.text("/metrics"), re.M):
        out[op_name] = float(value)
    return out


def daemon_ms_between(before, after, op_name):
    """Milliseconds the daemon spent on `op_name` between two daemon_seconds() reads."""
    return (after.get(op_name, 0.0) - before.get(op_name, 0.0)) * 1000


def last_line_parts(b, sid, what):
    """The parts of the daemon's last "sandbox SID: WHAT in N ms: part N ms, ..." line
    (asleep, woken): {"total": N, part: N}, or {}."""
    found = re.findall(r"sandbox " + re.escape(sid) + ": " + what + r" in ([0-9.]+) ms: (.*)", b.daemon_log())
    if not found:
        return {}
    total, parts = found[-1]
    out = {"total": float(total)}
    for name, value in re.findall(r"([a-z]+) ([0-9.]+) ms", parts):
        out[name] = float(value)
    return out


def exec_true(b, sid):
    ms, answer = b.raw_timed("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "true"})
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
    out = {"sleep": [], "wake": [], "exec_running": [], "vmm_control_pause": [], "vmm_control_resume": [],
           "health": [], "health_httpclient": []}
    exec_op, sleep_op = "POST /v1/sandboxes/{id}/exec", "POST /v1/sandboxes/{id}/sleep"
    for _ in range(b.a.sleep_runs):
        out["vmm_control_pause"].append(control(path, "pause"))
        out["vmm_control_resume"].append(control(path, "resume"))
        da = daemon_seconds(b)  # untimed, as the reads below: what the daemon spent of each request
        out["health"].append(b.raw_timed("GET", "/v1/health")[0])  # the API's floor, same run
        out["health_httpclient"].append(b.timed("GET", "/v1/health")[0])  # the same through Python's http.client
        d0 = daemon_seconds(b)
        out["exec_running"].append(exec_true(b, sid))
        d1 = daemon_seconds(b)
        ms, answer = b.raw_timed("POST", f"/v1/sandboxes/{sid}/sleep")
        if answer["state"] != "sleeping":
            raise SystemExit(f"lifecycle bench: sleep answered {answer['state']}")
        out["sleep"].append(ms)
        out["wake"].append(exec_true(b, sid))
        d2 = daemon_seconds(b)
        state = b.must(200, "GET", f"/v1/sandboxes/{sid}")["state"]
        if state != "running":
            raise SystemExit(f"lifecycle bench: after the wake the sandbox is {state}")
        note = b.notes.setdefault
        note("health_daemon_ms", []).append(daemon_ms_between(da, d0, "GET /v1/health"))
        note("exec_running_daemon_ms", []).append(daemon_ms_between(d0, d1, exec_op))
        note("sleep_daemon_ms", []).append(daemon_ms_between(d1, d2, sleep_op))
        note("wake_daemon_ms", []).append(daemon_ms_between(d1, d2, exec_op))
        for what, prefix in (("asleep", "sleep_daemon"), ("woken", "wake_daemon")):
            for part, value in last_line_parts(b, sid, what).items():
                note(f"{prefix}_{part}_ms", []).append(value)
        # The step of the guest's wall clock (frozen by the sleep), sent ahead of the waking call's request.
        steps = re.findall(r"sandbox " + re.escape(sid) + r": guest clock step sent ahead of the waking call in ([0-9.]+) ms",
                           b.daemon_log())
        if steps:
            note("wake_daemon_clock_step_ms", []).append(float(steps[-1]))
    if b.a.long_sleep_s > 0:
        # A wake after the guest slept longer (what an autoslept sandbox's next call
        # meets): does the wake grow with the time asleep?
        b.must(200, "POST", f"/v1/sandboxes/{sid}/sleep")
        time.sleep(b.a.long_sleep_s)
        out["wake_after_long_sleep"] = [exec_true(b, sid)]
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


def vm_memory(state, vm_id):
    """RSS, PSS and PSS of shmem (the guest pages it owns: its memfds), anon and file
    of the VMM of `vm_id`, MiB (/proc/PID/smaps_rollup; pid from its vm.json)."""
    try:
        with open(os.path.join(state, "vms", vm_id, "vm.json")) as f:
            pid = json.load(f)["pid"]
        fields = {}
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                    fields[parts[0][:-1]] = int(parts[1]) / 1024
        return {k: round(fields.get(v, -1), 1) for k, v in (("rss", "Rss"), ("pss", "Pss"), ("pss_shmem", "Pss_Shmem"),
                                                             ("pss_anon", "Pss_Anon"), ("pss_file", "Pss_File"))}
    except (OSError, ValueError, KeyError) as e:
        return {"error": str(e)}


def start_daemon(a, state, warm):
    log = open(os.path.join(state, "daemon.log"), "ab")
    return subprocess.Popen([a.nanovm, "daemon", "--state-dir", state, "--standbys", str(a.standbys),
                             "--warm", str(warm)], stdin=subprocess.DEVNULL, stdout=log, stderr=log)


def wait_health(b, daemon):
    for _ in range(200):
        if os.path.exists(b.sock):
            try:
                if b.call("GET", "/v1/health", timeout=5)[0] == 200:
                    return
            except OSError:
                pass
        if daemon.poll() is not None:
            sys.exit(f"lifecycle bench: the daemon exited {daemon.returncode}")
        time.sleep(0.1)


def restore_phase(b, a, rounds):
    """Creates that restore (no warm VM): the daemon started again over the same state
    with --warm 0 (the template stays ready), one untimed create and delete to make
    the pool's standby, then `rounds` creates, each deleted, 0.5 s apart."""
    out = []
    for r in range(rounds + 1):
        time.sleep(0.5)  # the pool's standby is made again behind a create
        ms, answer = b.timed("POST", "/v1/sandboxes", b.shape, want=201)
        if r > 0:
            out.append(ms)
            note_create(b, answer["id"], "create_restore")
        b.call("DELETE", f"/v1/sandboxes/{answer['id']}")
    return out


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
    ap.add_argument("--warm", type=int, default=1,
                    help="the daemon's --warm (VMs restored ahead of creates and paused); the creates that restore "
                         "are timed apart after the rounds, with --warm 0")
    ap.add_argument("--sleep-runs", type=int, default=6, help="sleep/wake and control pause/resume pairs a round")
    ap.add_argument("--long-sleep-s", type=float, default=2.0,
                    help="a round's last wake comes after this many seconds asleep (0: none)")
    ap.add_argument("--archive-rounds", type=int, default=3, help="archive + unarchive rounds after the rounds (0: none)")
    a = ap.parse_args()
    scratch = os.environ.get("NANOVM_SCRATCH") or tempfile.mkdtemp(prefix="nanovm-lifecycle-")
    state = tempfile.mkdtemp(prefix="lc.", dir=scratch)  # short: the sockets' sun_path
    sock = os.path.join(state, "nanovmd.sock")
    daemon = start_daemon(a, state, a.warm)
    samples = {name: [] for name in ("create", "sleep", "wake", "reboot", "delete", "cold_boot",
                                     "vmm_control_pause", "vmm_control_resume", "exec_running")}
    archive = {}
    errors = []
    memory = {}
    b = Bench(a, sock, state)
    try:
        wait_health(b, daemon)
        build_s = b.ready_template()
        if a.warm > 0:
            # What a paused warm VM costs: the one restored behind the template's first create.
            b.wait_warm()
            ready = b.warm_ready()
            if ready:
                memory = vm_memory(state, ready[0])
        for r in range(a.rounds):
            # The cold boot first or last, alternating, so neither side always follows the other.
            if r % 2 == 0:
                b.wait_warm()  # no warm restore beside it
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
                b.wait_warm()
                samples["cold_boot"].append(cold_boot(a))
        if a.archive_rounds > 0:
            try:
                archive = archive_bench.run(sock, os.path.join(state, "daemon.log"), a.archive_rounds, a.cpus,
                                            a.memory)
            except (SystemExit, Exception) as e:
                errors.append(f"archive: {e}")
                print(f"lifecycle bench: archive rounds failed: {e}", flush=True)
        if a.warm > 0:
            # The cold-restore path (no warm VM), same run: the daemon again with --warm 0.
            b.end_round()
            daemon.terminate()
            daemon.wait(60)
            daemon = start_daemon(a, state, 0)
            wait_health(b, daemon)
            try:
                samples["create_restore"] = restore_phase(b, a, a.rounds)
            except (SystemExit, Exception) as e:
                errors.append(f"restore phase: {e}")
                print(f"lifecycle bench: the restore-path creates failed: {e}", flush=True)
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
                      "exec_running": ("nanovm_api_exec_running", "API exec true (running)"),
                      "health": ("nanovm_api_health", "API GET /v1/health"),
                      "health_httpclient": ("nanovm_api_health_httpclient", "API GET /v1/health (http.client)")}.get(
                          name, (f"nanovm_api_{name}", f"API {name}"))
        out[f"{key}_ms"] = round(quantile(v, 0.5), 2)
        out[f"{key}_p99_ms"] = round(quantile(v, 0.99), 2)
        print(f"{label:<34}{quantile(v, 0.5):>10.1f}{quantile(v, 0.99):>10.1f}{len(v):>5}")
    for name in ("archive", "unarchive"):
        if f"nanovm_api_{name}_ms" in archive:
            print(f"{'API ' + name:<34}{archive[f'nanovm_api_{name}_ms']:>10.1f}"
                  f"{archive[f'nanovm_api_{name}_p99_ms']:>10.1f}{archive['archive_rounds']:>5}")
    out.update(archive)
    if a.warm == 0 and samples["create"]:
        samples["create_restore"] = samples["create"]
        b.notes["create_restore_paths"] = b.notes.get("create_paths", [])
    if samples.get("create_restore"):
        v = samples["create_restore"]
        out["nanovm_api_create_restore_ms"] = round(quantile(v, 0.5), 2)
        out["nanovm_api_create_restore_p99_ms"] = round(quantile(v, 0.99), 2)
    if memory:
        out.update({f"warm_vm_{k}_mib": v for k, v in memory.items()})
        print(f"a paused warm VM's VMM (smaps_rollup, MiB): {memory}")
    for key, v in b.notes.items():
        if key.endswith("_in_standby") or key.endswith("_checked_whole"):
            out[key + "_fraction"] = round(sum(v) / len(v), 2)
            print(f"{key}: {sum(v):.0f} of {len(v)}")
        elif key.endswith("_paths"):
            counts = {p: v.count(p) for p in sorted(set(v))}
            out[key] = counts
            print(f"{key[:-6]}: the daemon's path per create: {counts}")
        else:
            out[key] = round(quantile(v, 0.5), 2)
            source = "(daemon)" if "_daemon" in key else "(vmm.log)"
            print(f"{'  ' + key + ' ' + source:<34}{quantile(v, 0.5):>10.1f}{quantile(v, 0.99):>10.1f}")
    if out.get("nanovm_api_create_ms", 0) > 0:
        out["create_speedup_vs_cold_boot"] = round(out["nanovm_cold_boot_ms"] / out["nanovm_api_create_ms"], 1)
        paths = out.get("create_paths", {})
        out["create_mode"] = "warm" if a.warm > 0 and paths.get("took a warm VM", 0) == sum(paths.values()) else \
            "restore" if a.warm == 0 else "mixed"
        print(f"create from a ready template ({out['create_mode']}: --warm {a.warm}, paths {paths}): "
              f"{out['create_speedup_vs_cold_boot']}x faster than a cold boot (goal: >= 10x)")
    if out.get("nanovm_api_create_restore_ms", 0) > 0:
        out["create_restore_speedup_vs_cold_boot"] = round(out["nanovm_cold_boot_ms"] /
                                                           out["nanovm_api_create_restore_ms"], 1)
        print(f"create that restores (no warm VM): {out['create_restore_speedup_vs_cold_boot']}x faster than a cold boot")
    if samples["sleep"] and samples["vmm_control_pause"] and samples["exec_running"]:
        pause, resume = out["vmm_control_pause_ms"], out["vmm_control_resume_ms"]
        out["sleep_over_pause_ms"] = round(out["nanovm_api_sleep_ms"] - pause, 2)
        out["wake_over_resume_ms"] = round(out["nanovm_api_wake_ms"] - out["nanovm_api_exec_running_ms"] - resume, 2)
        out["sleep_within_goal"] = out["sleep_over_pause_ms"] <= max(2.0, 0.1 * pause)
        out["wake_within_goal"] = out["wake_over_resume_ms"] <= max(2.0, 0.1 * resume)
        print(f"sleep - control pause: {out['sleep_over_pause_ms']:+.2f} ms; wake - exec (running) - control resume: "
              f"{out['wake_over_resume_ms']:+.2f} ms (goal: each <= max(2 ms, 10% of the control socket's): "
              f"{'met' if out['sleep_within_goal'] else 'missed'}, {'met' if out['wake_within_goal'] else 'missed'})")
        if "sleep_daemon_ms" in out and "wake_daemon_ms" in out:
            # Where the excess goes: the daemon's own time (metrics) and the rest, the
            # HTTP exchange and the client (GET /v1/health: its floor, same run).
            out["sleep_http_ms"] = round(out["nanovm_api_sleep_ms"] - out["sleep_daemon_ms"], 2)
            out["wake_daemon_over_running_ms"] = round(out["wake_daemon_ms"] - out["exec_running_daemon_ms"], 2)
            print(f"sleep: daemon {out['sleep_daemon_ms']:.1f} ms (its pause {out.get('sleep_daemon_pause_ms', -1):.1f}) "
                  f"+ HTTP and client {out['sleep_http_ms']:.1f} ms (GET /v1/health {out['nanovm_api_health_ms']:.1f}, of it "
                  f"the daemon {out.get('health_daemon_ms', -1):.1f}); "
                  f"wake: the daemon's exec {out['wake_daemon_ms']:.1f} ms vs {out['exec_running_daemon_ms']:.1f} running "
                  f"(+{out['wake_daemon_over_running_ms']:.1f}; its resume {out.get('wake_daemon_resume_ms', -1):.1f})")
    if archive.get("nanovm_api_unarchive_ms"):
        out["unarchive_speedup_vs_archive"] = round(archive["nanovm_api_archive_ms"] / archive["nanovm_api_unarchive_ms"], 2)
        print(f"archive of {archive['archive_fill_mib']} MiB written: zstd {archive.get('nanovm_archive_zstd_mb_s')} MB/s; "
              f"unarchive {out['unarchive_speedup_vs_archive']}x faster than archive (goal: >= 2)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
