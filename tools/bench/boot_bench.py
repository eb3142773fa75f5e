#!/usr/bin/env python3
"""Boot benchmark: nanovm vs QEMU microvm, same kernel + initramfs, interleaved runs.

For each run: wall time from exec to the guest's ready line on the console
("nanovm-init: ready uptime_ms=..."), the guest's own uptime at that line, and the
VMM's RSS overhead = process RSS minus the resident part of the guest-RAM mapping
(from /proc/PID/smaps) and the anonymous part of it (the process's own memory; the
rest is binary and library pages shared with every process running them), in MiB,
sampled right after the ready line while the guest idles, and how much of the guest's
RAM huge pages map. Prints a table, then one JSON line (tools/bench/run conventions).

Like with like: same kernel, initramfs and command line (each VMM adds its
virtio_mmio.device= parameter); both VMMs give a serial console, a CMOS RTC, the
in-kernel PIT/PIC/IOAPIC and one virtio-rng on modern virtio-mmio (nanovm's default
set; QEMU's microvm gets virtio-rng-device). Guest RAM differs: QEMU's is anonymous
memory, which gets transparent huge pages under the host's default; nanovm's is a
memfd (its snapshots and forks freeze it), which gets none under Linux's default
shmem_enabled "never": KVM then takes one nested page fault per 4 KiB the guest
touches (~10,300 by the ready line in the test host, QEMU ~350: --save's counters).
nanovm madvise(MADV_HUGEPAGE)s its RAM, so with shmem_enabled "advise" (or "always"/
"within_size") it gets huge pages too. The bench leaves the host as it is; --shmem-thp
advise (test host only: a throwaway VM where it runs as root) sets "advise" for its
run. The JSON names the setting (host_shmem_enabled) and how much guest RAM huge
pages map (*_ram_huge_mib).

--save DIR, for finding where boot time and memory go (not for the figures): at the
ready line each run also keeps the VMM's /proc/PID/smaps (DIR/<system>-<run>.smaps)
and, where KVM's debugfs is (mounted in the test host if need be), the VM's exit and
page-fault counters (.kvm; their medians go in the table and the JSON as
<system>_kvm_<counter>); then it types `dmesg` into the guest's console shell and
keeps the printk-timestamped answer (.dmesg) for tools/bench/boot_timeline.py, which
lays both guests' boots side by side. --append adds kernel parameters to both
command lines (e.g. initcall_debug log_buf_len=4M).
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
SHMEM_ENABLED = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"


def shmem_enabled():
    """The host's shmem THP setting (the bracketed word), or "unknown"."""
    try:
        with open(SHMEM_ENABLED) as f:
            m = re.search(r"\[(\w+)\]", f.read())
        return m.group(1) if m else "unknown"
    except OSError:
        return "unknown"


def guest_ram_rss_kib(pid, guest_bytes):
    """Resident KiB of the process, resident KiB of the mappings that hold guest RAM
    (nanovm's memfds, nanovm-ram-*, or for QEMU anonymous/shared mappings at least half
    as big as RAM), KiB of that RAM mapped by huge pages (AnonHugePages +
    ShmemPmdMapped) and KiB of anonymous memory outside it (heap, stacks, copied-on-
    write library data: the process's own, where the rest of the RSS overhead is
    binary and library pages every process running them shares)."""
    total_rss = 0
    ram_rss = 0
    ram_huge = 0
    other_anon = 0
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
            elif head and head[0] in ("AnonHugePages:", "ShmemPmdMapped:") and current_is_ram:
                ram_huge += int(head[1])
            elif head and head[0] == "Anonymous:" and not current_is_ram:
                other_anon += int(head[1])
    return total_rss, ram_rss, ram_huge, other_anon


DMESG_END = b"@@dmesg-end@@"
KVM_DEBUGFS = "/sys/kernel/debug/kvm"
# KVM's per-VM counters (summed over vCPUs) the table shows: Documentation/virt/kvm/api
# "binary statistics"; the same names in debugfs.
KVM_COUNTERS = ("exits", "pf_fixed", "pf_taken", "io_exits", "mmio_exits", "halt_exits",
                "irq_exits", "irq_injections", "insn_emulation", "tlb_flush")


def kvm_debugfs_ready():
    """True if KVM's debugfs directory is there; in the test host (a throwaway VM)
    debugfs is mounted if it is not."""
    if os.path.isdir(KVM_DEBUGFS):
        return True
    if os.environ.get("NANOVM_TESTHOST") == "1" and os.path.isdir("/sys/kernel/debug"):
        subprocess.run(["mount", "-t", "debugfs", "debugfs", "/sys/kernel/debug"],
                       stderr=subprocess.DEVNULL, check=False)
    return os.path.isdir(KVM_DEBUGFS)


def kvm_counters(pid):
    """{counter: value} of the VM process `pid` made (debugfs dir "<pid>-<vm fd>"), or {}."""
    try:
        dirs = [d for d in os.listdir(KVM_DEBUGFS) if d.startswith(f"{pid}-")]
    except OSError:
        return {}
    out = {}
    for d in dirs:
        for name in os.listdir(os.path.join(KVM_DEBUGFS, d)):
            path = os.path.join(KVM_DEBUGFS, d, name)
            if os.path.isfile(path):
                try:
                    with open(path) as f:
                        out[name] = out.get(name, 0) + int(f.read().split()[0])
                except (OSError, ValueError, IndexError):
                    pass
    return out


def read_dmesg(proc, buf, deadline):
    """Types `dmesg` into the guest's console shell; returns its output (bytes), or
    None if the end marker did not come back before the deadline."""
    # The marker is quoted apart so the console's echo of the command line does not
    # match it.
    proc.stdin.write(b"dmesg; echo @@dmesg-''end@@\n")
    proc.stdin.flush()
    start = len(buf)
    while time.monotonic() < deadline:
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            return None
        buf += chunk
        end = buf.find(DMESG_END, start)
        if end >= 0:
            return buf[start:end]
    return None


def one_run(cmd, guest_bytes, save_prefix=None, timeout_s=120):
    """(wall ms, guest uptime ms, RSS overhead MiB, anonymous part of it MiB, guest RAM
    in huge pages MiB, {KVM counter: value}) of one boot;
    with save_prefix, its smaps, KVM counters and dmesg go to save_prefix.{smaps,kvm,dmesg}."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.PIPE if save_prefix else subprocess.DEVNULL)
    buf = b""
    wall_ms = uptime_ms = None
    overhead_mib = huge_mib = anon_mib = None
    counters = {}
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
                total, ram, huge, anon = guest_ram_rss_kib(proc.pid, guest_bytes)
                overhead_mib = (total - ram) / 1024.0
                huge_mib = huge / 1024.0
                anon_mib = anon / 1024.0
            except OSError:
                pass
            if save_prefix:
                counters = kvm_counters(proc.pid)
                with open(save_prefix + ".kvm", "w") as f:
                    f.writelines(f"{k} {v}\n" for k, v in sorted(counters.items()))
                try:
                    shutil.copyfile(f"/proc/{proc.pid}/smaps", save_prefix + ".smaps")
                except OSError:
                    pass
                text = read_dmesg(proc, buf[m.end():], deadline)
                with open(save_prefix + ".dmesg", "wb") as f:
                    f.write(text if text is not None else b"(no dmesg: the guest did not answer)\n")
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
    return wall_ms, uptime_ms, overhead_mib, anon_mib, huge_mib, counters


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
    ap.add_argument("--save", metavar="DIR", help="keep each run's dmesg, VMM smaps and KVM counters "
                    "as DIR/<system>-<run>.{dmesg,smaps,kvm} (relative: under $NANOVM_TESTHOST_KEEP "
                    "in the test host)")
    ap.add_argument("--append", default="", help="kernel parameters added to both command lines")
    ap.add_argument("--shmem-thp", choices=["host", "advise"], default="host",
                    help="advise: set the host's shmem_enabled to advise for the run (test host only), "
                    "so that nanovm's madvise(MADV_HUGEPAGE)d memfd RAM gets huge pages")
    args = ap.parse_args()
    if args.shmem_thp == "advise":
        if args.where != "testhost":
            sys.exit("--shmem-thp advise changes a host-wide setting: only in the test host")
        with open(SHMEM_ENABLED, "w") as f:
            f.write("advise")
    thp = shmem_enabled()
    guest_bytes = GUEST_MIB * 1024 * 1024
    cmdline = BASE_CMDLINE + (" " + args.append if args.append else "")
    if args.save:
        # In the test host the checkout is read-only: a relative DIR goes under the
        # directory tools/testhost/run brings back (<cache>/testhost/kept/...).
        keep = os.environ.get("NANOVM_TESTHOST_KEEP")
        if keep and not os.path.isabs(args.save):
            args.save = os.path.join(keep, args.save)
        os.makedirs(args.save, exist_ok=True)
        print(f"each run's dmesg, smaps and KVM counters: {args.save}"
              + ("" if kvm_debugfs_ready() else f" (no {KVM_DEBUGFS}: no KVM counters)"))
    systems = {
        "nanovm": [args.nanovm, "boot", "--kernel", args.kernel, "--initrd", args.initrd,
                   "--cpus", str(args.cpus), "--memory", str(GUEST_MIB), "--cmdline", cmdline],
    }
    qemu = shutil.which("qemu-system-x86_64")
    if qemu:
        systems["qemu"] = [qemu, "-M", "microvm,acpi=off,rtc=on", "-enable-kvm", "-cpu", "host",
                           "-smp", str(args.cpus), "-m", str(GUEST_MIB), "-nodefaults",
                           "-no-user-config", "-nographic", "-serial", "stdio", "-no-reboot",
                           "-kernel", args.kernel, "-initrd", args.initrd, "-append", cmdline,
                           "-global", "virtio-mmio.force-legacy=false", "-device", "virtio-rng-device"]
    results = {name: {"wall": [], "uptime": [], "rss": [], "anon": [], "huge": [], "kvm": []} for name in systems}
    for run in range(args.runs):
        for name, cmd in systems.items():  # interleaved
            prefix = os.path.join(args.save, f"{name}-{run}") if args.save else None
            wall, uptime, rss, anon, huge, counters = one_run(cmd, guest_bytes, prefix)
            results[name]["anon"].append(anon)
            results[name]["kvm"].append(counters)
            results[name]["huge"].append(huge)
            results[name]["wall"].append(wall)
            results[name]["uptime"].append(uptime)
            results[name]["rss"].append(rss)

    out = {"case": "boot", "where": args.where, "runs": args.runs, "guest_mib": GUEST_MIB,
           "cpus": args.cpus, "devices": "serial,rtc,virtio-rng", "host_shmem_enabled": thp}
    if args.append:
        out["cmdline_append"] = args.append
    print(f"boot benchmark ({args.where}, {args.runs} interleaved runs, {args.cpus} vCPU, "
          f"{GUEST_MIB} MiB, medians; both: serial, RTC, virtio-rng; host shmem THP: {thp})")
    print(f"{'system':8} {'exec->ready ms':>15} {'guest uptime ms':>16} {'RSS overhead MiB':>17} "
          f"{'of it anon MiB':>15} {'RAM in huge pages MiB':>22} {'failed':>7}")
    for name, r in results.items():
        wall, up, rss, huge = med(r["wall"]), med(r["uptime"]), med(r["rss"]), med(r["huge"])
        anon = med(r["anon"])
        failed = sum(1 for w in r["wall"] if w is None)
        print(f"{name:8} {wall!s:>15} {up!s:>16} {rss!s:>17} {anon!s:>15} {huge!s:>22} {failed:>7}")
        out[f"{name}_boot_ms"] = wall
        out[f"{name}_guest_uptime_ms"] = up
        out[f"{name}_rss_overhead_mib"] = rss
        out[f"{name}_anon_overhead_mib"] = anon
        out[f"{name}_ram_huge_mib"] = huge
        out[f"{name}_failed_runs"] = failed
    if out.get("nanovm_boot_ms") and out.get("qemu_boot_ms"):
        out["qemu_over_nanovm_boot_ratio"] = round(out["qemu_boot_ms"] / out["nanovm_boot_ms"], 2)
        print(f"QEMU/nanovm exec->ready ratio: {out['qemu_over_nanovm_boot_ratio']}")
    if any(c for r in results.values() for c in r["kvm"]):
        print("KVM counters at the ready line (medians): " + ", ".join(KVM_COUNTERS))
        for name, r in results.items():
            row = []
            for c in KVM_COUNTERS:
                v = med([k.get(c) for k in r["kvm"] if k])
                out[f"{name}_kvm_{c}"] = v
                row.append(str(v))
            print(f"{name:8} " + " ".join(row))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
