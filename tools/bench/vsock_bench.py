#!/usr/bin/env python3
"""virtio-vsock benchmark: nanovm (--vsock PATH: the host side is a Unix socket, a host
program connects and writes "CONNECT <port>\\n") vs QEMU microvm with vhost-vsock-device
(the host side is an AF_VSOCK socket to the guest's CID), same kernel + initrd, one boot
per system per run, systems interleaved (their order alternates from run to run).

In each boot the guest runs /bench/vsockbench (tools/bench/guest/vsockbench.c), a
listener on one port. The harness makes one untimed 1 MiB transfer each way, then one
timed transfer of --mib MiB each way, on a new connection each:
  host->guest: from the request line until the guest's "done N" (all bytes read by the
               guest program);
  guest->host: from the request line until EOF after N bytes.
Timed on the host (time.monotonic); MB = 10^6 bytes. Connection set-up is outside the
timed part. Prints a table, then one JSON line (tools/bench/run conventions).
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import bench_vm

PORT = 5201
LISTENING = rb"VSOCKBENCH listening port=\d+"
CHUNK = 1 << 20
WARMUP_BYTES = 1 << 20


def ensure_vhost_vsock():
    """Loads vhost_vsock if /dev/vhost-vsock is missing (in the test host its modules are
    under $NANOVM_TESTHOST_MODROOT). Returns None when usable, else why not."""
    if os.path.exists("/dev/vhost-vsock"):
        return None
    cmd = ["modprobe"]
    if os.environ.get("NANOVM_TESTHOST_MODROOT"):
        cmd += ["-d", os.environ["NANOVM_TESTHOST_MODROOT"]]
    cmd.append("vhost_vsock")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if os.path.exists("/dev/vhost-vsock"):
        return None
    return f"no /dev/vhost-vsock ({' '.join(cmd)}: exit {r.returncode} {r.stderr.strip()})"


def connect_nanovm(path, timeout_s):
    """A stream to the guest's PORT through nanovm's Unix socket (CONNECT handshake)."""
    if not os.path.exists(path):  # the guest listens, so the VMM has made it by now
        raise ConnectionError(f"nanovm made no socket at {path} (is --vsock wired into nanovm boot?)")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout_s)
    s.connect(path)
    s.sendall(f"CONNECT {PORT}\n".encode())
    reply = b""
    while not reply.endswith(b"\n"):  # byte by byte: the guest's bytes follow it
        c = s.recv(1)
        if not c:
            raise ConnectionError(f"nanovm closed the socket after CONNECT (got {reply!r})")
        reply += c
        if len(reply) > 64:
            break
    if not reply.startswith(b"OK "):
        raise ConnectionError(f"CONNECT {PORT}: {reply!r}")
    return s


def connect_vsock(cid, timeout_s):
    s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    s.settimeout(timeout_s)
    s.connect((cid, PORT))
    return s


def host_to_guest(s, nbytes):
    """Seconds from the request line to the guest's "done N"."""
    buf = memoryview(bytes((i * 131 + 7) & 0xFF for i in range(256)) * (CHUNK // 256))
    t0 = time.monotonic()
    s.sendall(f"recv {nbytes}\n".encode())
    left = nbytes
    while left:
        n = min(left, CHUNK)
        s.sendall(buf[:n])
        left -= n
    reply = b""
    while not reply.endswith(b"\n"):
        c = s.recv(64)
        if not c:
            raise ConnectionError(f"guest closed before 'done' (got {reply!r})")
        reply += c
    took = time.monotonic() - t0
    if reply.strip() != f"done {nbytes}".encode():
        raise ConnectionError(f"unexpected reply {reply!r}")
    return took


def guest_to_host(s, nbytes):
    """Seconds from the request line to EOF after `nbytes`."""
    buf = bytearray(CHUNK)
    t0 = time.monotonic()
    s.sendall(f"send {nbytes}\n".encode())
    got = 0
    while True:
        n = s.recv_into(buf)
        if not n:
            break
        got += n
    took = time.monotonic() - t0
    if got != nbytes:
        raise ConnectionError(f"got {got} bytes of {nbytes}")
    return took


def one_run(name, cmd, connect, nbytes, timeout_s):
    """Boots one guest; returns ({h2g_mbps, g2h_mbps} or None, seconds exec->listening)."""
    with bench_vm.GuestVm(name, cmd) as vm:
        if not vm.wait_for(LISTENING, timeout_s):
            sys.stderr.write(f"{name}: guest listener not up within {timeout_s} s\n{vm.tail()}\n")
            return None, vm.elapsed_s()
        up = vm.elapsed_s()
        try:
            for fn in (host_to_guest, guest_to_host):  # warm-up
                with connect(timeout_s) as s:
                    fn(s, WARMUP_BYTES)
            with connect(timeout_s) as s:
                h2g = host_to_guest(s, nbytes)
            with connect(timeout_s) as s:
                g2h = guest_to_host(s, nbytes)
            with connect(timeout_s) as s:
                s.sendall(b"quit\n")
        except (OSError, ConnectionError) as e:
            sys.stderr.write(f"{name}: transfer failed: {e!r}\n{vm.tail()}\n")
            return None, up
        vm.wait_exit(5)
        return {"host_to_guest_mbps": nbytes / h2g / 1e6,
                "guest_to_host_mbps": nbytes / g2h / 1e6}, up


def main():
    t_case = time.monotonic()
    ap = argparse.ArgumentParser()
    ap.add_argument("--nanovm", required=True)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--initrd", required=True, help="the guest initramfs + the bench cpio")
    ap.add_argument("--mib", type=int, default=256, help="MiB per timed transfer")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cpus", type=int, default=1)
    ap.add_argument("--memory", type=int, default=512, help="guest MiB")
    ap.add_argument("--qemu-cid", type=int, default=3, help="guest CID for vhost-vsock")
    ap.add_argument("--timeout", type=float, default=300.0, help="per boot and per transfer, s")
    ap.add_argument("--where", default="native")
    args = ap.parse_args()
    nbytes = args.mib << 20
    exec_command = f"/bench/vsockbench --port {PORT}"
    shape = (args.kernel, args.initrd, args.cpus, args.memory, exec_command)
    sockdir = tempfile.mkdtemp(prefix="nanovm-vsock-bench.")
    sock_path = os.path.join(sockdir, "vsock")

    systems, notes = {}, []
    if bench_vm.supports_option(args.nanovm, "--vsock"):
        systems["nanovm"] = (bench_vm.nanovm_cmd(args.nanovm, *shape, ["--vsock", sock_path]),
                             lambda t: connect_nanovm(sock_path, t))
    else:
        notes.append("nanovm skipped: `nanovm boot` has no --vsock yet")
    qemu = bench_vm.qemu_binary()
    why_not = "no qemu-system-x86_64" if not qemu else ensure_vhost_vsock()
    if why_not is None:
        systems["qemu"] = (bench_vm.qemu_cmd(qemu, *shape, [
            "-device", f"vhost-vsock-device,guest-cid={args.qemu_cid}"]),
            lambda t: connect_vsock(args.qemu_cid, t))
    else:
        notes.append(f"qemu skipped: {why_not}")

    metrics = ("host_to_guest_mbps", "guest_to_host_mbps")
    results = {name: {k: [] for k in metrics} | {"up_s": [], "failed": 0} for name in systems}
    try:
        names = list(systems)
        for run in range(args.runs):
            for name in (names if run % 2 == 0 else names[::-1]):
                if os.path.exists(sock_path):
                    os.unlink(sock_path)
                cmd, connect = systems[name]
                r, up = one_run(name, cmd, connect, nbytes, args.timeout)
                results[name]["up_s"].append(up)
                if r is None:
                    results[name]["failed"] += 1
                    for k in metrics:
                        results[name][k].append(None)
                    continue
                for k in metrics:
                    results[name][k].append(r[k])
                print(f"  run {run + 1} {name:6}: host->guest {r['host_to_guest_mbps']:.1f} MB/s, "
                      f"guest->host {r['guest_to_host_mbps']:.1f} MB/s "
                      f"(listener up {up:.1f} s after exec)", flush=True)
    finally:
        shutil.rmtree(sockdir, ignore_errors=True)

    out = {"case": "vsock", "where": args.where, "runs": args.runs, "mib": args.mib,
           "cpus": args.cpus, "guest_mib": args.memory,
           "host_side": "nanovm: Unix socket + CONNECT; qemu: vhost-vsock, AF_VSOCK"}
    print(f"vsock benchmark ({args.where}, {args.runs} interleaved runs, {args.cpus} vCPU, "
          f"{args.memory} MiB guest, medians; one {args.mib} MiB stream each way per run, "
          f"timed on the host; nanovm: Unix socket + CONNECT, QEMU: vhost-vsock + AF_VSOCK)")
    print(f"{'system':8} {'host->guest MB/s':>17} {'guest->host MB/s':>17} "
          f"{'exec->listening s':>18} {'failed':>7}")
    for name, r in results.items():
        row = {k: bench_vm.med(r[k]) for k in metrics}
        up = bench_vm.med(r["up_s"], 1)
        print(f"{name:8} {bench_vm.fmt(row['host_to_guest_mbps']):>17} "
              f"{bench_vm.fmt(row['guest_to_host_mbps']):>17} {bench_vm.fmt(up):>18} {r['failed']:>7}")
        for k in metrics:
            out[f"{name}_vsock_{k}"] = row[k]
        out[f"{name}_failed_runs"] = r["failed"]
    if "nanovm" in results and "qemu" in results:
        for k in ("host_to_guest", "guest_to_host"):
            rat = bench_vm.paired_ratio(results["nanovm"][f"{k}_mbps"], results["qemu"][f"{k}_mbps"])
            if rat is not None:
                out[f"nanovm_over_qemu_vsock_{k}_ratio"] = rat
                print(f"nanovm/QEMU {k.replace('_', ' ')} (median of per-run ratios): {rat}")
    for n in notes:
        print(f"note: {n}")
    if notes:
        out["notes"] = notes
    out["case_s"] = round(time.monotonic() - t_case, 1)
    print(f"case took {out['case_s']} s")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
