"""Shared pieces of the device benchmarks (blk_bench.py, vsock_bench.py): the two VMMs'
command lines for the same kernel, initrd and shape, a guest whose console is read in
the background, medians. tools/bench/run conventions: a table, then one JSON line.
"""
import re
import shutil
import statistics
import subprocess
import threading
import time

# Same as the boot bench and `nanovm boot`'s default (api/vm/boot_options.hpp). The guest
# runs its benchmark program through guest-init's nanovm.exec= and the harness kills
# the VMM once it has the result line (QEMU microvm without ACPI cannot power off).
BASE_CMDLINE = "console=ttyS0 reboot=k panic=-1 quiet"


def exec_param(command):
    """guest-init's nanovm.exec kernel parameter for a shell command (no '"' inside)."""
    if '"' in command:
        raise ValueError("nanovm.exec command must not contain '\"'")
    return f'nanovm.exec="{command}"'


def nanovm_cmd(nanovm, kernel, initrd, cpus, memory_mib, exec_command, device_args):
    """`nanovm boot` argv: `device_args` e.g. ["--disk", PATH] or ["--vsock", PATH]."""
    return [nanovm, "boot", "--kernel", kernel, "--initrd", initrd, "--cpus", str(cpus),
            "--memory", str(memory_mib), "--cmdline", BASE_CMDLINE,
            "--append", exec_param(exec_command)] + device_args


def qemu_binary():
    return shutil.which("qemu-system-x86_64")


def qemu_cmd(qemu, kernel, initrd, cpus, memory_mib, exec_command, device_args):
    """QEMU microvm argv (virtio-mmio devices: QEMU adds their virtio_mmio.device=
    parameters to the command line itself when ACPI is off)."""
    return [qemu, "-M", "microvm,acpi=off,rtc=on", "-enable-kvm", "-cpu", "host",
            "-smp", str(cpus), "-m", str(memory_mib), "-nodefaults", "-no-user-config",
            "-nographic", "-serial", "stdio", "-no-reboot", "-kernel", kernel,
            "-initrd", initrd, "-append", f"{BASE_CMDLINE} {exec_param(exec_command)}"
            ] + device_args


def supports_option(nanovm, option):
    """True when `nanovm boot --help` lists `option` (devices land in nanovm one by one)."""
    try:
        out = subprocess.run([nanovm, "boot", "--help"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return re.search(rf"(^|\s){re.escape(option)}\b", out) is not None


class GuestVm:
    """One VMM process running a guest; its console (stdout) is collected by a thread,
    stderr goes to a pipe read the same way. Use as a context manager: the VMM is
    killed on exit unless it has ended by itself."""

    def __init__(self, name, cmd):
        self.name = name
        self.cmd = cmd
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self._out = bytearray()
        self._err = bytearray()
        self._cond = threading.Condition()
        self._eof = 0
        self._threads = [threading.Thread(target=self._pump, args=(self.proc.stdout, self._out), daemon=True),
                         threading.Thread(target=self._pump, args=(self.proc.stderr, self._err), daemon=True)]
        for t in self._threads:
            t.start()

    def _pump(self, stream, buf):
        while True:
            chunk = stream.read1(65536)
            with self._cond:
                if not chunk:
                    self._eof += 1
                    self._cond.notify_all()
                    return
                buf.extend(chunk)
                self._cond.notify_all()

    def wait_for(self, pattern, timeout_s):
        """The first match of the bytes regex `pattern` on the console, or None when the
        VMM ended or `timeout_s` passed first."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                m = regex.search(self._out)
                if m:
                    return m
                left = deadline - time.monotonic()
                if left <= 0 or self._eof == 2:
                    return None
                self._cond.wait(min(left, 1.0))

    def wait_exit(self, timeout_s):
        """The VMM's exit status, or None if it is still running after `timeout_s`."""
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def elapsed_s(self):
        return time.monotonic() - self.t0

    def tail(self, n=1500):
        """The end of the console and of stderr, for error messages."""
        with self._cond:
            out = bytes(self._out[-n:]).decode(errors="replace")
            err = bytes(self._err[-n:]).decode(errors="replace")
        return f"--- {self.name} console (end) ---\n{out}\n--- {self.name} stderr (end) ---\n{err}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def med(xs, digits=2):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), digits) if xs else None


def paired_ratio(xs, ys):
    """Median over runs of xs[i] / ys[i] (None entries: failed runs, skipped). The two
    boots of one run are adjacent in time, so the machine's load, which drifts a lot on
    shared build machines, cancels out better than in a ratio of the two medians."""
    rs = [x / y for x, y in zip(xs, ys) if x and y]
    return round(statistics.median(rs), 2) if rs else None


def fmt(x):
    return "-" if x is None else str(x)
