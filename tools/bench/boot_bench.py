#!/usr/bin/env python3
"""Boot benchmark: nanovm vs QEMU microvm, same kernel + initramfs, interleaved runs.

For each run: wall time from exec to the guest's ready line on the console
("nanovm-init: ready uptime_ms=..."), the guest's own uptime at that line, and the
VMM's RSS overhead = process RSS minus the resident part of the guest-RAM mapping
(from /proc/PID/smaps), both in MiB, sampled right after the ready line while the
guest idles. Prints a table, then one JSON line (tools/bench/run conventions).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

READY = re.compile(rb"nanovm-init: ready uptime_ms=(\d+) cpus=")
GUEST_MIB = 512
# After its ready line the guest idles in a console shell; the harness samples RSS,
# then kills the VMM (QEMU microvm has no i8042, so it could not see a reboot=k reset).
BASE_CMDLINE = "console=ttyS0 reboot=k panic=-1 quiet"


def guest_ram_rss_kib(pid, guest_bytes):
    """Resident KiB of the mappings that hold guest RAM: nanovm's memfds
    (nanovm-ram-*) or, for QEMU, anonymous/shared mappings at least as big as RAM."""
    total_rss = 0
    ram_rss = 0
    current_is_ram = False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                start, end = (int(x, 16) for x in head[0].split("-"))
                name = head[5] if len(head) > 5 else ""
                size = end - start
                current_is_ram = "nanovm-ram" in name or (size >= guest_bytes // 2 and
                                                          (name == "" or name.startswith("/memfd")))
            elif head and head[0] == "Rss:":
                kib = int(head[1])
                total_rss += kib
                if current_is_ram:
                    ram_rss += kib
    return total_rss, ram_rss


def one_run(cmd, guest_bytes, timeout_s=120):
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)
    buf = b""
    wall_ms = uptime_ms = None
    overhead_mib = None
    deadline = t0 + timeout_s
    os.set_blocking(proc.stdout.fileno(), True)
    while time.monotonic() < deadline:
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        buf += chunk
        m = READY.search(buf)
        if m and wall_ms is None:
            wall_ms = (time.monotonic() - t0) * 1000.0
            uptime_ms = int(m.group(1))
            try:
                total, ram = guest_ram_rss_kib(proc.pid, guest_bytes)
                overhead_mib = (total - ram) / 1024.0
            except OSError:
                pass
            proc.kill()
            break
    try:
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if wall_ms is None:
        sys.stderr.write(f"run failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                         + buf[-2000:].decode(errors="replace") + "\n")
    return wall_ms, uptime_ms, overhead_mib


def med(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 2) if xs else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nanovm", required=True)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--initrd", required=True)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--cpus", type=int, default=1)
    ap.add_argument("--where", default="native")
    args = ap.parse_args()
    guest_bytes = GUEST_MIB * 1024 * 1024
    cmdline = BASE_CMDLINE
    systems = {
        "nanovm": [args.nanovm, "boot", "--kernel", args.kernel, "--initrd", args.initrd,
                   "--cpus", str(args.cpus), "--memory", str(GUEST_MIB), "--cmdline", cmdline],
    }
    qemu = shutil.which("qemu-system-x86_64")
    if qemu:
        systems["qemu"] = [qemu, "-M", "microvm,acpi=off,rtc=on", "-enable-kvm", "-cpu", "host",
                           "-smp", str(args.cpus), "-m", str(GUEST_MIB), "-nodefaults",
                           "-no-user-config", "-nographic", "-serial", "stdio", "-no-reboot",
                           "-kernel", args.kernel, "-initrd", args.initrd, "-append", cmdline]
    results = {name: {"wall": [], "uptime": [], "rss": []} for name in systems}
    for _ in range(args.runs):
        for name, cmd in systems.items():  # interleaved
            wall, uptime, rss = one_run(cmd, guest_bytes)
            results[name]["wall"].append(wall)
            results[name]["uptime"].append(uptime)
            results[name]["rss"].append(rss)

    out = {"case": "boot", "where": args.where, "runs": args.runs, "guest_mib": GUEST_MIB,
           "cpus": args.cpus}
    print(f"boot benchmark ({args.where}, {args.runs} interleaved runs, {args.cpus} vCPU, "
          f"{GUEST_MIB} MiB, medians)")
    print(f"{'system':8} {'exec->ready ms':>15} {'guest uptime ms':>16} {'RSS overhead MiB':>17} {'failed':>7}")
    for name, r in results.items():
        wall, up, rss = med(r["wall"]), med(r["uptime"]), med(r["rss"])
        failed = sum(1 for w in r["wall"] if w is None)
        print(f"{name:8} {wall!s:>15} {up!s:>16} {rss!s:>17} {failed:>7}")
        out[f"{name}_boot_ms"] = wall
        out[f"{name}_guest_uptime_ms"] = up
        out[f"{name}_rss_overhead_mib"] = rss
        out[f"{name}_failed_runs"] = failed
    if out.get("nanovm_boot_ms") and out.get("qemu_boot_ms"):
        out["qemu_over_nanovm_boot_ratio"] = round(out["qemu_boot_ms"] / out["nanovm_boot_ms"], 2)
        print(f"QEMU/nanovm exec->ready ratio: {out['qemu_over_nanovm_boot_ratio']}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
