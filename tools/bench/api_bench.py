"""tools/bench/run api: nanovmd's API against the VM layer driven directly, from one
process, same run, interleaved (build/tests/client/api_bench; its header says what is
timed). Starts nanovm daemon on a fresh state directory, runs the driver, deletes what
is left and stops the daemon. Prints the driver's table, then its JSON line (DESIGN.md
"Conventions")."""
import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import archive_bench  # noqa: E402


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("nanovm", timeout=120)
        self.path_ = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path_)


def call(sock, method, target):
    c = UnixHTTP(sock)
    c.request(method, target)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nanovm", required=True)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--where", default="native")
    ap.add_argument("--rounds", default="5")
    ap.add_argument("--exec-runs", default="20")
    ap.add_argument("--file-runs", default="5")
    ap.add_argument("--pause-runs", default="10")
    ap.add_argument("--cpus", default="1")
    ap.add_argument("--memory", default="256")
    ap.add_argument("--archive-rounds", default="3", help="archive + unarchive rounds (0: none; archive_bench.py)")
    a = ap.parse_args()
    scratch = os.environ.get("NANOVM_SCRATCH") or tempfile.mkdtemp(prefix="nanovm-api-bench-")
    state = os.path.join(scratch, "api-bench-state")
    os.makedirs(state, exist_ok=True)
    sock = os.path.join(state, "nanovmd.sock")
    log = open(os.path.join(state, "daemon.log"), "wb")
    # Creates boot, as the direct side's do (no implicit template: tools/bench/run lifecycle measures those).
    daemon = subprocess.Popen([a.nanovm, "daemon", "--state-dir", state, "--implicit-templates", "0"],
                              stdin=subprocess.DEVNULL,
                              stdout=log, stderr=log)
    try:
        for _ in range(200):
            if os.path.exists(sock):
                try:
                    if call(sock, "GET", "/v1/health")[0] == 200:
                        break
                except OSError:
                    pass
            if daemon.poll() is not None:
                sys.exit(f"api bench: the daemon exited {daemon.returncode}")
            time.sleep(0.1)
        if int(a.rounds) == 0:  # the archive rounds alone
            result = {"case": "api", "where": a.where, "rounds": 0}
            result.update(archive_bench.run(sock, os.path.join(state, "daemon.log"), int(a.archive_rounds),
                                            int(a.cpus), int(a.memory)))
            print(json.dumps(result), flush=True)
            return
        bench = subprocess.run([a.bench, "--socket", sock, "--run-dir", os.path.join(scratch, "api-bench-direct"),
                                "--where", a.where, "--rounds", a.rounds, "--exec-runs", a.exec_runs,
                                "--file-runs", a.file_runs, "--pause-runs", a.pause_runs, "--cpus", a.cpus,
                                "--memory", a.memory], stdout=subprocess.PIPE, text=True)
        if bench.returncode != 0:
            sys.stdout.write(bench.stdout)
            sys.exit(f"api bench: the driver failed ({bench.returncode})")
        # The driver's table, then the archive rounds' lines, then one JSON line with both.
        lines = bench.stdout.rstrip("\n").split("\n")
        result = json.loads(lines[-1])
        sys.stdout.write("\n".join(lines[:-1]) + "\n")
        sys.stdout.flush()
        if int(a.archive_rounds) > 0:
            result.update(archive_bench.run(sock, os.path.join(state, "daemon.log"), int(a.archive_rounds),
                                            int(a.cpus), int(a.memory)))
        print(json.dumps(result), flush=True)
    finally:
        # The daemon's sandboxes outlive it: delete what a failed run left.
        try:
            status, body = call(sock, "GET", "/v1/sandboxes?limit=1000")
            for s in json.loads(body).get("sandboxes", []) if status == 200 else []:
                call(sock, "DELETE", f"/v1/sandboxes/{s['id']}")
        except (OSError, ValueError):
            pass
        daemon.terminate()
        daemon.wait(30)


if __name__ == "__main__":
    main()
