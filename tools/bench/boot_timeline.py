#!/usr/bin/env python3
"""Lays two guests' boots side by side from their dmesg (tools/bench/boot_bench.py
--save DIR saves <system>-<run>.dmesg): every message both printed, in boot order,
with each system's printk time (median over its runs), and the segments between
consecutive common messages where the first system spent the most time over the second.

    tools/bench/boot_timeline.py DIR [--a nanovm] [--b qemu] [--top 15] [--all]

Messages are matched by their text with digits and hex numbers masked (addresses,
sizes and counts differ between VMMs); a message printed more than once counts at its
first time. Times are the guest's own clock (printk: CLOCK_MONOTONIC from the
kernel's clocksource, 0 at its start), so a segment is guest time, not wall time.
"""
import argparse
import glob
import os
import re
import statistics
import sys

LINE = re.compile(r"^\[\s*(\d+\.\d+)\]\s?(.*)$")
MASK = re.compile(r"0x[0-9a-fA-F]+|[0-9a-fA-F]{8,}|\d+")


def parse(path):
    """{masked message: (first time s, the message as printed)}, in boot order."""
    seen = {}
    with open(path, errors="replace") as f:
        for raw in f:
            m = LINE.match(raw.strip("\r\n"))
            if not m:
                continue
            text = m.group(2).strip()
            key = MASK.sub("#", text)
            if key not in seen:
                seen[key] = (float(m.group(1)), text)
    return seen


def median_times(paths):
    """{key: (median time s over the runs that printed it, text)} for keys every run printed."""
    runs = [parse(p) for p in paths]
    common = set(runs[0])
    for r in runs[1:]:
        common &= set(r)
    out = {}
    for key in runs[0]:
        if key in common:
            out[key] = (statistics.median(r[key][0] for r in runs), runs[0][key][1])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--a", default="nanovm")
    ap.add_argument("--b", default="qemu")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--all", action="store_true", help="print every common message")
    args = ap.parse_args()
    paths = {s: sorted(glob.glob(os.path.join(args.dir, f"{s}-*.dmesg"))) for s in (args.a, args.b)}
    for s, p in paths.items():
        if not p:
            sys.exit(f"boot_timeline: no {s}-*.dmesg in {args.dir}")
    a, b = median_times(paths[args.a]), median_times(paths[args.b])
    common = [k for k in a if k in b]  # in a's boot order
    # Keep b's order consistent: drop messages that went backwards in b (reordered probes).
    ordered, last_b = [], -1.0
    for k in common:
        if b[k][0] >= last_b:
            ordered.append(k)
            last_b = b[k][0]
    print(f"{len(paths[args.a])} {args.a} and {len(paths[args.b])} {args.b} runs; "
          f"{len(ordered)} messages in both (medians, guest seconds)")
    rows = []
    prev = None
    for k in ordered:
        ta, tb = a[k][0], b[k][0]
        if prev is not None:
            da, db = ta - a[prev][0], tb - b[prev][0]
            rows.append((da - db, da, db, a[prev][1], a[k][1]))
        if args.all:
            print(f"{ta:9.3f} {tb:9.3f} {ta - tb:+8.3f}  {a[k][1][:100]}")
        prev = k
    if ordered:
        last = ordered[-1]
        print(f"last common message: {args.a} {a[last][0]:.3f} s, {args.b} {b[last][0]:.3f} s: {a[last][1][:80]}")
    print(f"\nsegments where {args.a} spent the most over {args.b} (s: extra, {args.a}, {args.b}; from -> to):")
    for extra, da, db, frm, to in sorted(rows, reverse=True)[:args.top]:
        print(f"{extra:+7.3f} {da:7.3f} {db:7.3f}  {frm[:60]}\n{'':26}-> {to[:60]}")
    only_a = [a[k][1] for k in a if k not in b]
    if only_a:
        print(f"\n{len(only_a)} messages only {args.a} printed (first 40):")
        for t in only_a[:40]:
            print(f"  {t[:110]}")
    only_b = [b[k][1] for k in b if k not in a]
    if only_b:
        print(f"\n{len(only_b)} messages only {args.b} printed (first 40):")
        for t in only_b[:40]:
            print(f"  {t[:110]}")


if __name__ == "__main__":
    main()
