"""tools/bench/run exec: the guest agent through a real VM. Starts one sandbox with
`nanovm vm start` (default root disk, overlay, agent on vsock port 1024), then runs
build/tests/agent/agent_bench against its vsock socket: round trip of `true` (EXEC ->
EXIT, median and p99 over --runs), PING, and writing then reading one --mib MiB file
in the guest's --guest-dir (default /tmp: guest RAM, so the figure is the agent and
vsock path, not the disk). Also times `nanovm vm start` (to the agent's first answer),
`nanovm vm stop` and one whole `nanovm run -- true`.

No peer is measured: there is no other agent on the same vsock path to compare with
(QEMU microvm + vhost-vsock + this same agent would be one; not done yet).
Prints a table, then one JSON line (DESIGN.md "Conventions").
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def timed(cmd, **kw):
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    return proc, (time.monotonic() - t0) * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nanovm", required=True)
    ap.add_argument("--agent-bench", required=True)
    ap.add_argument("--image", default="")
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--guest-dir", default="/tmp")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--memory", type=int, default=1024)
    ap.add_argument("--where", default="native")
    a = ap.parse_args()
    if a.mib >= a.memory // 2 and a.guest_dir == "/tmp":
        sys.exit(f"exec bench: --mib {a.mib} does not fit the guest's /tmp (RAM) with --memory {a.memory}")

    scratch = os.environ.get("NANOVM_SCRATCH") or tempfile.mkdtemp(prefix="nanovm-exec-bench-")
    env = dict(os.environ, NANOVM_RUN_DIR=os.path.join(scratch, "exec-bench-run"))
    shape = ["--cpus", str(a.cpus), "--memory", str(a.memory)] + (["--image", a.image] if a.image else [])

    # One whole `nanovm run -- true` first: it also makes the writable disk's template.
    run_proc, run_ms_first = timed([a.nanovm, "run"] + shape + ["--", "true"], env=env, stdin=subprocess.DEVNULL)
    if run_proc.returncode != 0:
        sys.exit(f"exec bench: nanovm run -- true failed: {run_proc.stderr.strip()}")
    run_proc, run_ms = timed([a.nanovm, "run"] + shape + ["--", "true"], env=env, stdin=subprocess.DEVNULL)

    start, start_ms = timed([a.nanovm, "vm", "start"] + shape, env=env, stdin=subprocess.DEVNULL)
    if start.returncode != 0:
        sys.exit(f"exec bench: nanovm vm start failed: {start.stderr.strip()}")
    vm_id = start.stdout.strip()
    sock = os.path.join(env["NANOVM_RUN_DIR"], "vms", vm_id, "vsock.sock")
    try:
        bench = subprocess.run([a.agent_bench, "--socket", sock, "--vsock-port", "1024", "--runs", str(a.runs),
                                "--file-mib", str(a.mib), "--guest-dir", a.guest_dir, "--where", a.where],
                               capture_output=True, text=True)
    finally:
        stop, stop_ms = timed([a.nanovm, "vm", "stop", vm_id], env=env)
    if bench.returncode != 0:
        sys.exit(f"exec bench: agent_bench failed: {bench.stderr.strip()}")
    figures = json.loads(bench.stdout.strip().splitlines()[-1])

    rows = [
        ("exec round trip of true, median", figures["nanovm_exec_ms"], "ms"),
        ("exec round trip of true, p99", figures["nanovm_exec_p99_ms"], "ms"),
        ("ping round trip, median", figures["nanovm_ping_ms"], "ms"),
        (f"file write {a.mib} MiB to {a.guest_dir}", figures["nanovm_file_write_mbps"], "MB/s"),
        (f"file read {a.mib} MiB from {a.guest_dir}", figures["nanovm_file_read_mbps"], "MB/s"),
        ("nanovm vm start (to agent ready)", start_ms, "ms"),
        ("nanovm vm stop (guest power-off)", stop_ms, "ms"),
        ("nanovm run -- true (whole)", run_ms, "ms"),
        ("nanovm run -- true (first, + template)", run_ms_first, "ms"),
    ]
    print(f"exec bench ({a.where}; {a.runs} runs, {a.cpus} vCPU / {a.memory} MiB; no peer measured)")
    print(f"{'figure':44} {'value':>10}")
    for name, value, unit in rows:
        print(f"{name:44} {value:10.2f} {unit}")
    out = {"case": "exec", "where": a.where, "runs": a.runs, "file_mib": a.mib, "guest_dir": a.guest_dir}
    for key in ("nanovm_exec_ms", "nanovm_exec_p99_ms", "nanovm_ping_ms", "nanovm_file_write_mbps",
                "nanovm_file_read_mbps"):
        out[key] = figures[key]
    out["nanovm_vm_start_ms"] = round(start_ms, 1)
    out["nanovm_vm_stop_ms"] = round(stop_ms, 1)
    out["nanovm_run_true_ms"] = round(run_ms, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
