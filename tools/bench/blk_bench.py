#!/usr/bin/env python3
"""virtio-blk benchmark: nanovm vs QEMU microvm's virtio-blk-device on the SAME raw image,
same kernel + initrd, one boot per system per run, systems interleaved (their order
alternates from run to run).

In each boot the guest runs /bench/blkbench (tools/bench/guest/blkbench.c) on the
image's disk, all O_DIRECT with one request in flight: sequential write of --mib MiB in
1 MiB blocks (then fsync, timed apart), sequential read of the same, then 4 KiB random
reads (QD1) for --rand-seconds. Figures are the guest's own clock; MB = 10^6 bytes.

Host caching is the same for both: nanovm opens the image without O_DIRECT, QEMU gets
cache=writeback (its default, aio=threads): both go through the host page cache. The
image is written once (zeros) before the runs, so no write pass pays for block
allocation, and its data sits in the host page cache: the read figures measure the
virtio path and the VMM, not the host disk.
Prints a table, then one JSON line (tools/bench/run conventions).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import bench_vm

SLACK_MIB = 64  # the image is --mib + this, so its size finds the disk in the guest
RESULT = rb"BLKBENCH (dev=\S+ [^\r\n]*|error=[^\r\n]*)\r?\n"
METRICS = ("seq_read_mbps", "seq_write_mbps", "randread_iops", "fsync_ms")


def make_image(path, size_bytes):
    """Writes the whole image once (dd of zeros, 1 MiB blocks, then fdatasync); returns
    the seconds it took. Every pass then overwrites allocated, written blocks that sit in
    the host page cache, as they do after any earlier pass: neither system pays for block
    allocation or for converting preallocated (unwritten) extents on its first write."""
    t0 = time.monotonic()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={size_bytes >> 20}",
                    "conv=fdatasync", "status=none"], check=True)
    return time.monotonic() - t0


def parse_result(line):
    kv = dict(item.split("=", 1) for item in line.split())
    if "error" in kv:
        raise RuntimeError(line)
    ns = lambda k: int(kv[k]) / 1e9  # noqa: E731
    return {
        "dev": kv["dev"],
        "seq_write_mbps": int(kv["seq_write_bytes"]) / ns("seq_write_ns") / 1e6,
        "seq_read_mbps": int(kv["seq_read_bytes"]) / ns("seq_read_ns") / 1e6,
        "randread_iops": int(kv["randread_ops"]) / ns("randread_ns"),
        "fsync_ms": int(kv["fsync_ns"]) / 1e6,
    }


def one_run(name, cmd, timeout_s):
    """Boots one guest, returns (metrics or None, seconds from exec to the result)."""
    with bench_vm.GuestVm(name, cmd) as vm:
        m = vm.wait_for(RESULT, timeout_s)
        took = vm.elapsed_s()
        if not m:
            sys.stderr.write(f"{name}: no BLKBENCH line (VMM ended or {timeout_s:g} s passed)\n{vm.tail()}\n")
            return None, took
        try:
            return parse_result(m.group(1).decode()), took
        except (RuntimeError, KeyError, ValueError, ZeroDivisionError) as e:
            sys.stderr.write(f"{name}: bad result: {e}\n{vm.tail()}\n")
            return None, took


def main():
    t_case = time.monotonic()
    ap = argparse.ArgumentParser()
    ap.add_argument("--nanovm", required=True)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--initrd", required=True, help="the guest initramfs + the bench cpio")
    ap.add_argument("--mib", type=int, default=512, help="MiB per sequential pass")
    ap.add_argument("--rand-seconds", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cpus", type=int, default=1)
    ap.add_argument("--memory", type=int, default=512, help="guest MiB")
    ap.add_argument("--image-dir", default=os.environ.get("NANOVM_SCRATCH") or "build/bench")
    ap.add_argument("--timeout", type=float, default=600.0, help="per boot, seconds")
    ap.add_argument("--where", default="native")
    args = ap.parse_args()

    size_bytes = (args.mib + SLACK_MIB) << 20
    image = os.path.join(args.image_dir, "nanovm-blk-bench.img")
    os.makedirs(args.image_dir, exist_ok=True)
    exec_command = (f"/bench/blkbench --size-bytes {size_bytes} --mib {args.mib} "
                    f"--rand-seconds {args.rand_seconds}")
    shape = (args.kernel, args.initrd, args.cpus, args.memory, exec_command)

    systems, notes = {}, []
    if bench_vm.supports_option(args.nanovm, "--disk"):
        systems["nanovm"] = bench_vm.nanovm_cmd(args.nanovm, *shape, ["--disk", image])
    else:
        notes.append("nanovm skipped: `nanovm boot` has no --disk yet")
    qemu = bench_vm.qemu_binary()
    if qemu:
        systems["qemu"] = bench_vm.qemu_cmd(qemu, *shape, [
            "-drive", f"id=d0,file={image},format=raw,if=none,cache=writeback",
            "-device", "virtio-blk-device,drive=d0"])
    else:
        notes.append("qemu skipped: no qemu-system-x86_64")

    fill_s = make_image(image, size_bytes)
    results = {name: {k: [] for k in METRICS} | {"boot_s": [], "failed": 0} for name in systems}
    try:
        names = list(systems)
        for run in range(args.runs):
            for name in (names if run % 2 == 0 else names[::-1]):
                r, took = one_run(name, systems[name], args.timeout)
                results[name]["boot_s"].append(took)
                if r is None:
                    results[name]["failed"] += 1
                    for k in METRICS:
                        results[name][k].append(None)
                    continue
                for k in METRICS:
                    results[name][k].append(r[k])
                print(f"  run {run + 1} {name:6}: read {r['seq_read_mbps']:.1f} MB/s, "
                      f"write {r['seq_write_mbps']:.1f} MB/s, {r['randread_iops']:.0f} IOPS, "
                      f"fsync {r['fsync_ms']:.0f} ms ({r['dev']}; {took:.1f} s exec->result)",
                      flush=True)
    finally:
        os.unlink(image)

    out = {"case": "blk", "where": args.where, "runs": args.runs, "mib": args.mib,
           "rand_seconds": args.rand_seconds, "cpus": args.cpus, "guest_mib": args.memory,
           "host_cache": "page cache (nanovm: no O_DIRECT; qemu: cache=writeback, aio=threads)",
           "guest_io": "O_DIRECT, QD1, 1 MiB sequential, 4 KiB random",
           "image_fill_s": round(fill_s, 1)}
    print(f"blk benchmark ({args.where}, {args.runs} interleaved runs, {args.cpus} vCPU, "
          f"{args.memory} MiB guest, medians; {args.mib} MiB sequential passes, "
          f"4 KiB QD1 random reads for {args.rand_seconds:g} s; guest O_DIRECT; host: page "
          f"cache for both (nanovm no O_DIRECT, QEMU cache=writeback); image "
          f"{image}, {size_bytes >> 20} MiB, written before the runs in {fill_s:.1f} s)")
    print(f"{'system':8} {'seq read MB/s':>14} {'seq write MB/s':>15} {'4K rand IOPS':>13} "
          f"{'fsync ms':>9} {'exec->result s':>15} {'failed':>7}")
    for name, r in results.items():
        row = {k: bench_vm.med(r[k]) for k in METRICS}
        boot_s = bench_vm.med(r["boot_s"], 1)
        print(f"{name:8} {bench_vm.fmt(row['seq_read_mbps']):>14} {bench_vm.fmt(row['seq_write_mbps']):>15} "
              f"{bench_vm.fmt(row['randread_iops']):>13} {bench_vm.fmt(row['fsync_ms']):>9} "
              f"{bench_vm.fmt(boot_s):>15} {r['failed']:>7}")
        for k in METRICS:
            out[f"{name}_blk_{k}"] = row[k]
        out[f"{name}_blk_exec_to_result_s"] = boot_s
        out[f"{name}_failed_runs"] = r["failed"]
    if "nanovm" in results and "qemu" in results:
        for k in ("seq_read", "seq_write", "randread"):
            metric = "randread_iops" if k == "randread" else f"{k}_mbps"
            rat = bench_vm.paired_ratio(results["nanovm"][metric], results["qemu"][metric])
            if rat is not None:
                out[f"nanovm_over_qemu_blk_{k}_ratio"] = rat
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
