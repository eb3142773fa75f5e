#!/usr/bin/env python3
"""docs/api.md against the daemon: every endpoint it documents is a route the daemon
serves (from /v1/openapi.json, which the router makes) and every route is documented,
each with exactly the error codes the route declares; its error table is the
daemon's catalogue, code for code and status for status; its sandbox state table is
the daemon's transition table (x-nanovm-transitions), cell for cell. TAP.
Usage: docs_test.py NANOVM DOCS_API_MD"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Daemon, Tap, main_guard  # noqa: E402

COMMON = {"bad_request", "unauthorized", "body_too_large", "header_too_large", "internal", "busy"}


def run():
    nanovm, docs = sys.argv[1], sys.argv[2]
    tap = Tap()
    text = open(docs).read()
    d = Daemon(nanovm).start()
    try:
        spec = d.get("/v1/openapi.json").json()
    finally:
        d.cleanup()
    routes = {}
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            codes = {c for r in op["responses"].values() for c in r.get("x-nanovm-codes", [])}
            ok = [s for s in op["responses"] if s.startswith("2")][0]
            routes[f"{method.upper()} {path}"] = (codes - COMMON, ok)

    sections = re.split(r"^### `([A-Z]+ [^`]+)`\s*$", text, flags=re.M)
    documented = {sections[i]: sections[i + 1] for i in range(1, len(sections) - 1, 2)}
    tap.ok(set(documented) == set(routes), f"docs/api.md documents exactly the daemon's {len(routes)} routes",
           f"documented, not served: {sorted(set(documented) - set(routes))}\n"
           f"served, not documented: {sorted(set(routes) - set(documented))}")
    wrong = []
    for key, body in documented.items():
        if key not in routes:
            continue
        codes, ok = routes[key]
        m = re.search(r"^Answers (\d{3})\.(?: Errors: (.*)\.)?$", body, flags=re.M)
        if not m:
            wrong.append(f"{key}: no 'Answers NNN. Errors: ...' line")
            continue
        listed = set(re.findall(r"`([a-z_]+)`", m.group(2) or ""))
        if m.group(1) != ok or listed != codes:
            wrong.append(f"{key}: docs say {m.group(1)} {sorted(listed)}, the route {ok} {sorted(codes)}")
    tap.ok(not wrong, "each documented endpoint's success status and error codes are the route's", "\n".join(wrong))

    errors_section = text.split("\n## Errors\n", 1)[-1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)` \| (\d{3}) \|", errors_section, flags=re.M)
    catalogue = [(e["code"], str(e["status"])) for e in spec["x-nanovm-errors"]]
    tap.ok(rows == catalogue, f"the error table is the daemon's catalogue ({len(catalogue)} codes, in order)",
           f"docs: {rows}\ndaemon: {catalogue}")
    used = set().union(*(c for c, _ in routes.values())) | COMMON
    unused = [c for c, _ in catalogue if c not in used and c not in ("no_route", "method_not_allowed")]
    tap.ok(not unused, "every catalogue code is answered by some route (or the router)", unused)
    check_transitions(tap, text, spec["x-nanovm-transitions"])
    return tap.done()


def check_transitions(tap, text, table):
    """The "operation | `creating` | ..." table of docs/api.md against the daemon's."""
    lines = [ln for ln in text.splitlines() if ln.startswith("| operation |")]
    if len(lines) != 1:
        tap.ok(False, "docs/api.md has one sandbox transition table", f"{len(lines)} tables")
        return
    header = lines[0]
    rows = text.split(header, 1)[1].splitlines()[2:]
    states = re.findall(r"`([a-z_]+)`", header)
    tap.ok(states == table["states"], f"the transition table's columns are the daemon's {len(states)} states",
           f"docs: {states}\ndaemon: {table['states']}")
    documented = {}
    for row in rows:
        if not row.startswith("| `"):
            break
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        m = re.fullmatch(r"`([a-z_]+)`(?: \(`([a-z_]+)`\))?(?: → `([a-z_]+)`)?", cells[0])
        documented[m.group(1) if m else cells[0]] = (m, cells[1:])
    ops = {op["op"]: op for op in table["ops"]}
    tap.ok(set(documented) == set(ops), f"the transition table has a row for each of the daemon's {len(ops)} operations",
           f"docs: {sorted(documented)}\ndaemon: {sorted(ops)}")
    wrong = []
    for name, op in ops.items():
        if name not in documented:
            continue
        m, cells = documented[name]
        if not m or (m.group(2), m.group(3)) != (op["during"], op["to"]):
            wrong.append(f"{name}: docs say ({m and m.group(2)}) -> {m and m.group(3)}, "
                         f"the daemon ({op['during']}) -> {op['to']}")
        for state, cell in zip(states, cells):
            c = op["states"].get(state, {})
            want = ("no-op" if c.get("no_op") else "yes") if c.get("allowed") else \
                ("409" if c.get("code") == "wrong_state" else f"409 `{c.get('code')}`")
            if cell != want:
                wrong.append(f"{name} in {state}: docs say {cell!r}, the daemon {want!r} ({c.get('message', '')})")
    tap.ok(not wrong, "every cell of the transition table is the daemon's (allowed, no-op, or 409 with its code)",
           "\n".join(wrong))


if __name__ == "__main__":
    main_guard(run)
