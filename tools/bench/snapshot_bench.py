#!/usr/bin/env python3
"""Snapshot benchmark: nanovm vs QEMU on the same probe guest, rounds interleaved.

The guest: 1024 MiB, 2 vCPUs, 256 MiB of non-zero memory ([32 MiB, 288 MiB), each
8-byte word = its GPA ^ 0x5a5a5a5a5a5a5a5a) and a counter loop that keeps storing into
[1 MiB, 9 MiB).
  nanovm: build/tests/kvm/snapshot_bench --paced (one process, one VM for all rounds;
          the VMM writes the 256 MiB, both vCPUs run counter loops; it is paused while
          QEMU is measured). Each round prints one JSON line of its figures.
  QEMU:   -bios tools/bench/qemu/snapshot_probe_bios.S (assembled by tools/bench/run):
          the guest writes the 256 MiB itself, then vCPU 0 runs the same counter loop
          (the AP waits for SIPI). Driven over QMP (stdlib only): `stop` and `cont`
          round trips; save = `stop` + `migrate` to "exec:cat > FILE" until the
          MIGRATION event says completed (max-bandwidth raised first); restore = a new
          `qemu -incoming "exec:cat FILE" -S` from process start until its migration
          is completed (paused, ready), then `cont`. The source stays stopped between
          its rounds.
Prints a table (median and p99 = max over the runs), then one JSON line.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time

MIB = 1 << 20


def now_ms():
    return time.monotonic() * 1000.0


class Qmp:
    """A QMP client on a Unix socket: commands in order, events kept in a list."""

    def __init__(self, path, timeout_s=60.0):
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(path)
                break
            except OSError:
                self.sock.close()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"QMP socket {path}: no connection within {timeout_s:.0f} s")
                time.sleep(0.0005)
        self.buf = b""
        self.events = []
        self._read()  # greeting
        self.cmd("qmp_capabilities")

    def _read(self, timeout_s=300.0):
        self.sock.settimeout(timeout_s)
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("QMP connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def cmd(self, name, args=None, timeout_s=300.0):
        msg = {"execute": name}
        if args:
            msg["arguments"] = args
        self.sock.sendall(json.dumps(msg).encode() + b"\n")
        while True:
            reply = self._read(timeout_s)
            if "event" in reply:
                self.events.append(reply)
            elif "error" in reply:
                raise RuntimeError(f"QMP {name}: {reply['error']}")
            elif "return" in reply:
                return reply["return"]

    def wait_migration(self, timeout_s=600.0):
        """Until a MIGRATION event with status completed (failed/cancelled raise)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for ev in self.events:
                if ev.get("event") == "MIGRATION":
                    status = ev["data"]["status"]
                    if status == "completed":
                        self.events.clear()
                        return
                    if status in ("failed", "cancelled"):
                        raise RuntimeError(f"migration {status}")
            self.events.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError("migration did not complete in time")
            reply = self._read(left)
            if "event" in reply:
                self.events.append(reply)

    def read_dwords(self, gpa, n=1):
        """n guest-physical dwords at gpa (HMP xp)."""
        text = self.cmd("human-monitor-command", {"command-line": f"xp /{n}wx {gpa:#x}"})
        return [int(w, 16) for line in text.splitlines() for w in line.split(":", 1)[1].split()]

    def close(self):
        self.sock.close()


COUNTER_GPA = 0x3000  # the probe's counter (snapshot_probe_bios.S)
FILL_GPA = 32 * MIB   # first word of the 256 MiB: GPA ^ 0x5a5a5a5a5a5a5a5a


class QemuPeer:
    def __init__(self, qemu, bios, workdir, accel="kvm"):
        self.qemu, self.bios, self.workdir = qemu, bios, workdir
        # arch-capabilities off: a PVM /dev/kvm refuses QEMU's write of that MSR (0x10a)
        # and QEMU 7.2 aborts; the probe does not use it.
        cpu = ["-enable-kvm", "-cpu", "host,-arch-capabilities"] if accel == "kvm" else ["-accel", accel]
        self.base = [qemu] + cpu + ["-M", "pc", "-m", "1024", "-smp", "2",
                     "-bios", bios, "-nodefaults", "-no-user-config", "-nographic"]
        self.source = None
        self.qmp = None
        self.notes = []

    def start_source(self, timeout_s=600.0):
        dbg = os.path.join(self.workdir, "qemu-debugcon.log")
        sock = os.path.join(self.workdir, "qemu-source.qmp")
        t0 = time.monotonic()
        self.source = subprocess.Popen(
            self.base + ["-chardev", f"file,id=dbg,path={dbg}", "-device",
                         "isa-debugcon,iobase=0x402,chardev=dbg", "-qmp", f"unix:{sock},server=on,wait=off"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.qmp = Qmp(sock)
        while True:  # the guest says 'R' once its 256 MiB are written
            if os.path.exists(dbg) and os.path.getsize(dbg) > 0:
                break
            if self.source.poll() is not None:
                raise RuntimeError("QEMU source exited: " + self.source.stderr.read().decode(errors="replace"))
            if time.monotonic() - t0 > timeout_s:
                raise RuntimeError("QEMU probe guest did not finish writing its memory")
            time.sleep(0.05)
        fill_s = time.monotonic() - t0
        self.qmp.cmd("migrate-set-parameters", {"max-bandwidth": 1 << 40})
        self.qmp.cmd("migrate-set-capabilities", {"capabilities": [{"capability": "events", "state": True}]})
        return fill_s

    def round(self, r):
        q = self.qmp
        out = {}
        if q.cmd("query-status")["status"] != "running":
            q.cmd("cont")
        time.sleep(0.1)
        t = now_ms()
        q.cmd("stop")
        out["pause"] = now_ms() - t
        t = now_ms()
        q.cmd("cont")
        out["resume"] = now_ms() - t
        time.sleep(0.1)

        path = os.path.join(self.workdir, f"qemu-state{r}")
        t = now_ms()
        q.cmd("stop")
        q.cmd("migrate", {"uri": f"exec:cat > {path}"})
        q.wait_migration()
        out["snapshot"] = now_ms() - t
        saved_counter = q.read_dwords(COUNTER_GPA)[0]
        info = q.cmd("query-migrate")
        out["snapshot_qemu_total"] = float(info.get("total-time", 0))
        # `cat` may still be writing the tail when the source says completed
        deadline = time.monotonic() + 30
        size = -1
        while time.monotonic() < deadline:
            s = os.path.getsize(path)
            if s == size:
                break
            size = s
            time.sleep(0.2)
        out["snapshot_file_mib"] = size / MIB

        sock = os.path.join(self.workdir, f"qemu-dest{r}.qmp")
        t = now_ms()
        dest = subprocess.Popen(
            self.base + ["-S", "-incoming", f"exec:cat {path}", "-global", "migration.x-events=on",
                         "-qmp", f"unix:{sock},server=on,wait=off"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            dq = Qmp(sock)
            # events before qmp_capabilities are not sent: ask once, then wait for the event
            if dq.cmd("query-migrate").get("status") != "completed":
                dq.wait_migration()
            out["restore"] = now_ms() - t
            status = dq.cmd("query-status")["status"]
            if status != "paused":
                self.notes.append(f"round {r}: the restored QEMU was {status}, not paused, when ready")
            restored = dq.read_dwords(COUNTER_GPA)[0]
            fill = dq.read_dwords(FILL_GPA, 2)
            dq.cmd("cont")
            out["restore_cont"] = now_ms() - t
            # the restored guest has the saved memory and runs on from there
            if restored != saved_counter or fill != [FILL_GPA ^ 0x5a5a5a5a, 0x5a5a5a5a]:
                raise RuntimeError(f"restored QEMU: counter {restored} (saved {saved_counter}), "
                                   f"fill words {[hex(w) for w in fill]}")
            deadline = time.monotonic() + 10
            while dq.read_dwords(COUNTER_GPA)[0] == restored:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"restored QEMU: counter stays at {restored} after cont")
                time.sleep(0.01)
            dq.cmd("quit")
            dq.close()
            dest.wait(timeout=60)
        finally:
            if dest.poll() is None:
                dest.kill()
                dest.wait()
            os.unlink(path)
        return out

    def stop(self):
        if self.source and self.source.poll() is None:
            try:
                self.qmp.cmd("quit", timeout_s=10)
            except Exception:  # noqa: BLE001 - killed below anyway
                pass
            try:
                self.source.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.source.kill()
                self.source.wait()


class NanovmBench:
    """snapshot_bench --paced: 'ready' before each round, 'round {json}' after it."""

    def __init__(self, bench, workdir, runs, where, forks):
        self.proc = subprocess.Popen([bench, "--dir", workdir, "--runs", str(runs), "--where", where,
                                      "--forks", forks, "--paced"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.notes = []

    def _line(self):
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise RuntimeError(f"snapshot_bench ended (exit {code})")
        return line.rstrip("\n")

    def wait_ready(self):
        while True:
            line = self._line()
            if line == "ready":
                return
            self.notes.append(line)

    def round(self):
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        while True:
            line = self._line()
            if line.startswith("round "):
                return json.loads(line[len("round "):])
            self.notes.append(line)

    def finish(self):
        self.proc.stdin.close()
        rest = self.proc.stdout.read()
        code = self.proc.wait()
        if code != 0:
            raise RuntimeError(f"snapshot_bench exit {code}: {rest}")


def median(xs):
    return statistics.median(xs) if xs else None


# (table label, series name) of the keys the issue asks for, in table order.
MAIN = [
    ("snapshot (running VM: request -> resumed)", "snapshot"),
    ("snapshot, leave paused (request -> call returns)", "snapshot_paused"),
    ("snapshot again, same VM (over its frozen layer)", "snapshot_again"),
    ("time to durable (running snapshot)", "durable"),
    ("diff snapshot after 16 MiB (request -> resumed)", "diff_snapshot"),
    ("restore, file backend (exec -> vCPUs run)", "restore_file"),
    ("restore, uffd backend (exec -> vCPUs run)", "restore_uffd"),
    ("fork n=1 (request -> child runs; standby VMM)", "fork1"),
    ("fork n=4 (request -> last child runs; standbys)", "fork4"),
    ("fork n=1, cold (child process started at the request)", "fork1_cold"),
    ("fork n=4, cold", "fork4_cold"),
    ("snapshot of a restored VM, 256 MiB written (request -> resumed)", "snapshot_of_restored"),
    ("fork n=1 of a restored VM (request -> child runs)", "fork1_of_restored"),
    ("fork n=4 of a restored VM (request -> last child runs)", "fork4_of_restored"),
    ("restore into a standby (request -> vCPUs run)", "restore_standby"),
    ("pause", "pause"),
    ("resume", "resume"),
]
QEMU_MAIN = [
    ("snapshot (stop + migrate to file -> completed)", "snapshot"),
    ("restore (-incoming: start -> paused, ready)", "restore"),
    ("restore + cont (start -> cont returned)", "restore_cont"),
    ("pause (QMP stop)", "pause"),
    ("resume (QMP cont)", "resume"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True, help="build/tests/kvm/snapshot_bench")
    ap.add_argument("--bios", required=True, help="the QEMU probe image (64 KiB)")
    ap.add_argument("--dir", required=True, help="scratch directory for snapshot files")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--forks", default="1,4")
    ap.add_argument("--where", default="native")
    ap.add_argument("--qemu-only", action="store_true",
                    help="development: just the QEMU side (with --qemu-accel tcg it runs without /dev/kvm)")
    ap.add_argument("--qemu-accel", default="kvm")
    args = ap.parse_args()
    t_case = time.monotonic()
    nano_dir = os.path.join(args.dir, "nanovm")
    qemu_dir = os.path.join(args.dir, "qemu")
    for d in (nano_dir, qemu_dir):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)

    nano = None if args.qemu_only else NanovmBench(args.bench, nano_dir, args.runs, args.where, args.forks)
    notes = []
    qemu_bin = shutil.which("qemu-system-x86_64")
    peer = None
    nres, qres = {}, {}
    try:
        if nano:
            nano.wait_ready()  # ready for its first round (no guest of its own running)
        if qemu_bin:
            peer = QemuPeer(qemu_bin, args.bios, qemu_dir, args.qemu_accel)
            fill_s = peer.start_source()
            notes.append(f"QEMU guest wrote its 256 MiB in {fill_s:.1f} s (QEMU start included)")
        else:
            notes.append("qemu skipped: no qemu-system-x86_64")
        for r in range(args.runs):
            if nano:
                for k, v in nano.round().items():
                    nres.setdefault(k, []).append(v)
                if r + 1 < args.runs:
                    nano.wait_ready()  # between rounds, no guest of its own runs while QEMU does
            if peer:
                for k, v in peer.round(r).items():
                    qres.setdefault(k, []).append(v)
            print(f"  run {r + 1}:"
                  + (f" nanovm snapshot {nres['snapshot'][-1]:.2f} ms, fork4 {nres.get('fork4', [0])[-1]:.1f} ms;"
                     if nano else "")
                  + (f" qemu snapshot {qres['snapshot'][-1]:.1f} ms, restore {qres['restore'][-1]:.1f} ms"
                     if peer else ""), flush=True)
        if nano:
            nano.finish()
    finally:
        if peer:
            peer.stop()
        if nano and nano.proc.poll() is None:
            nano.proc.kill()
            nano.proc.wait()
    notes += [n for n in (nano.notes if nano else []) if n.startswith(("fallback", "path"))] + (peer.notes if peer else [])

    out = {"case": "snapshot", "where": args.where, "runs": args.runs, "guest_mib": 1024, "cpus": 2,
           "dirty_mib": 256}
    if nano and any(n.startswith("path") for n in nano.notes):
        # Restored VMs: memfds served by userfaultfd MISSING, frozen / write-protected (snapshot_bench.cpp).
        out["nanovm_restored_path"] = "6.1-compatible"
    print(f"snapshot benchmark ({args.where}, {args.runs} interleaved runs, 1024 MiB / 2 vCPU probe "
          f"with 256 MiB written; ms; p99 = max over the runs)")
    print(f"{'figure':52} {'nanovm':>10} {'p99':>10}   {'qemu':>10} {'p99':>10}")
    # QEMU's save is complete when it returns: it sits beside both nanovm's snapshot
    # (the VM runs again) and its time to durable (the file complete).
    qemu_of = {"snapshot": "snapshot", "durable": "snapshot", "restore_file": "restore", "pause": "pause",
               "resume": "resume"}

    def cell(xs, f):
        return f"{f(xs):10.3f}" if xs else f"{'-':>10}"

    for label, key in MAIN:
        xs = nres.get(key, [])
        qx = qres.get(qemu_of.get(key, ""), [])
        print(f"{label:52} {cell(xs, median)} {cell(xs, max)}   {cell(qx, median)} {cell(qx, max)}")
    print("QEMU 7.2 peer:")
    for label, key in QEMU_MAIN:
        qx = qres.get(key, [])
        print(f"  {label:50} {'':>10} {'':>10}   {cell(qx, median)} {cell(qx, max)}")
    print("parts and other figures (nanovm fork*_resumed: from the fork request):")
    main_keys = {k for _, k in MAIN}
    for key in sorted(nres):
        if key not in main_keys:
            xs = nres[key]
            unit = "" if key.endswith(("pages", "faults")) else " ms"
            print(f"  {key + unit:50} {cell(xs, median)} {cell(xs, max)}")
    if qres.get("snapshot_file_mib"):
        print(f"  {'qemu snapshot file MiB':50} {'':>10} {'':>10}   {cell(qres['snapshot_file_mib'], median)}")

    def put(system, res, key, name=None):
        xs = res.get(key)
        if xs:
            out[f"{system}_{name or key}_ms"] = round(median(xs), 3)
            out[f"{system}_{name or key}_p99_ms"] = round(max(xs), 3)

    for key in sorted(nres):
        if key.endswith(("pages", "faults")):
            out[f"nanovm_{key}"] = median(nres[key])
        else:
            put("nanovm", nres, key)
    for key in sorted(qres):
        if key == "snapshot_file_mib":
            out["qemu_snapshot_file_mib"] = round(median(qres[key]), 1)
        else:
            put("qemu", qres, key)
    ratios = {"snapshot": ("snapshot", "snapshot"), "durable": ("snapshot", "durable"),
              "restore": ("restore", "restore_file"),
              "pause": ("pause", "pause"), "resume": ("resume", "resume")}
    for name, (qk, nk) in ratios.items():
        qs, ns = qres.get(qk), nres.get(nk)
        if qs and ns:  # median of per-round ratios (a round's two systems are adjacent in time)
            rs = [q / n for q, n in zip(qs, ns) if n > 0]
            if rs:
                out[f"qemu_over_nanovm_{name}_ratio"] = round(median(rs), 2)
    if any(k.endswith("_ratio") for k in out):
        print("QEMU/nanovm (median of per-run ratios): " + ", ".join(
            f"{k[len('qemu_over_nanovm_'):-len('_ratio')]} {v}" for k, v in out.items() if k.endswith("_ratio")))
    notes += [
        "nanovm snapshot = pause + vm.state + freezing its RAM (a fresh VM each round: the first "
        "snapshot of a booted VM; mremap + mmap) + resume; the 256 MiB are written from the frozen "
        "memfd after the resume (durable = + write, fsync, manifest). snapshot_again = the same VM "
        "snapshotted again, now over its frozen layer: write-protect arming of what it holds. QEMU "
        "snapshot = stop + the whole migration stream into the file, so it compares with nanovm's "
        "durable as much as with its snapshot",
        "restore: nanovm from exec of snapshot_child until both vCPUs' counters moved (the file "
        "backend maps the full snapshot's memory.layer MAP_PRIVATE as it is; 'flatten' is its one-time check); QEMU from process start "
        "until its incoming migration completed (paused), restore_cont until `cont` returned",
        "fork n = of a fresh parent of the same shape (running 200 ms): pause, freeze its RAM as "
        "a shared layer of sealed memfds + vm.state, resume (fork*_resumed), then n snapshot_child "
        "processes map that layer MAP_PRIVATE at once, until "
        "the last child's vCPUs run; each child pauses right away and checks that both counters "
        "went on from the fork's values (exit 1 otherwise). fork1/fork4: the children are standbys, "
        "started while the parent runs, before the request (snapshot::make_fork_standby: VM, irqchip, "
        "memslots over empty RAM, vCPUs), as the VMM keeps them for `vm fork`; the request hands "
        "them the layer (opened through /proc/PID/fd) and they map it over their memslots' HVA. "
        "fork*_cold: a child process started at the request (the state and layer fds inherited). "
        "fork1_second: the same parent forked "
        "again: it keeps its layer, and the pages it wrote since the first fork go to the "
        "children as a delta copied in the pause (fork1_second_delta_pages)",
        "the guests: nanovm's 256 MiB are written by the VMM, both vCPUs run counter loops; "
        "QEMU's guest makes the same 65536 pages non-zero itself (one word per page) and only vCPU 0 runs the loop",
        "QEMU's snapshot file is not fsync'd (exec:cat into the page cache); nanovm's layer is. "
        "QEMU's source is stopped while it saves and restores; nanovm's guest runs its 2 counter loops "
        "during the background copy (durable) and forks, and is stopped during restores",
    ]
    for n in notes:
        print(f"note: {n}")
    out["notes"] = notes
    out["case_s"] = round(time.monotonic() - t_case, 1)
    print(f"case took {out['case_s']} s")
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
