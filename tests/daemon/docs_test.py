#!/usr/bin/env python3
"""docs/api.md against the daemon: every endpoint it documents is a route the daemon
serves (from /v1/openapi.json, which the router makes) and every route is documented,
each with exactly the error codes the route declares, every query parameter the
route takes, and the body limit of a route whose limit is not the 64 KiB default (its
size, or the daemon option that sets it); the fields of its Sandbox, Snapshot,
Session and Command objects and of each "Answer: `{...}`" are the OpenAPI schema's;
its error table is the daemon's catalogue, code for code and status for status; its
sandbox state table is the daemon's transition table (x-nanovm-transitions), cell for
cell. TAP.
Usage: docs_test.py NANOVM DOCS_API_MD"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Daemon, Tap, main_guard  # noqa: E402

COMMON = {"bad_request", "unauthorized", "unknown_field", "body_too_large", "header_too_large", "internal", "busy"}


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
    ops_by_key = {}
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            codes = {c for r in op["responses"].values() for c in r.get("x-nanovm-codes", [])}
            ok = [s for s in op["responses"] if s.startswith("2")][0]
            routes[f"{method.upper()} {path}"] = (codes - COMMON, ok)
            ops_by_key[f"{method.upper()} {path}"] = op

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
        # A route with a body lists unknown_field (an unknown field); every route may
        # answer it (an unknown query parameter): the common codes are not compared.
        listed = set(re.findall(r"`([a-z_]+)`", m.group(2) or "")) - COMMON
        if m.group(1) != ok or listed != codes:
            wrong.append(f"{key}: docs say {m.group(1)} {sorted(listed)}, the route {ok} {sorted(codes)}")
    tap.ok(not wrong, "each documented endpoint's success status and error codes are the route's", "\n".join(wrong))
    check_queries_and_limits(tap, documented, ops_by_key)
    check_objects(tap, text, documented, ops_by_key, spec["components"]["schemas"])

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


def size_text(n):
    """64 KiB, 20 MiB, 1.5 GiB: how docs/api.md writes a byte count."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def check_queries_and_limits(tap, documented, ops):
    """Each query parameter of a route is named in its section (`limit`, `metadata.`);
    a body limit other than the 64 KiB default is stated there (its size, or the
    `--option` that sets it)."""
    missing, limits = [], []
    for key, body in documented.items():
        op = ops.get(key)
        if op is None:
            continue
        for p in op.get("parameters", []):
            if p["in"] != "query":
                continue
            name = p["name"].split(".")[0] + "." if "." in p["name"] else p["name"]
            if f"`{name}" not in body:
                missing.append(f"{key}: query parameter {p['name']}")
        limit = op.get("x-nanovm-body-limit")
        if limit is None or limit == 64 * 1024:
            continue
        option = op.get("x-nanovm-body-limit-option")
        want = f"`{option}`" if option else size_text(limit)
        if want not in body:
            limits.append(f"{key}: its body limit ({want}) is not stated")
    tap.ok(not missing, "every query parameter of a route is named in its section", "\n".join(missing))
    tap.ok(not limits, "every body limit other than 64 KiB is stated in its route's section (size or option)",
           "\n".join(limits))


def fields_of(span):
    """The top-level field names of a documented object: `{"id", "state" (a, b), ...}`."""
    names, depth = [], 0
    for m in re.finditer(r'[{}\[\]]|"([a-z_]+)"', span):
        tok = m.group(0)
        if tok in "{[":
            depth += 1
        elif tok in "}]":
            depth -= 1
        elif depth == 1:
            names.append(m.group(1))
    return names


def check_objects(tap, text, documented, ops, schemas):
    """The documented objects' fields against the OpenAPI schemas: A **Sandbox**:
    `{...}` and its kind, and each route's "Answer: `{...}`" against its response
    schema."""
    wrong = []
    for name in ("Sandbox", "Snapshot", "Session", "Command"):
        m = re.search(r"A \*\*" + name + r"\*\*: `(\{.*?\})`", text, re.S)
        if not m:
            wrong.append(f"no 'A **{name}**: `{{...}}`' in docs/api.md")
            continue
        doc, schema = fields_of(m.group(1)), list(schemas[name]["properties"])
        if sorted(doc) != sorted(schema):
            wrong.append(f"{name}: docs {sorted(set(doc) ^ set(schema))} differ (docs {doc}, schema {schema})")
    for key, body in documented.items():
        m = re.search(r"Answer: `(\{.*?\})`", body, re.S)
        op = ops.get(key)
        if not m or op is None:
            continue
        ok = [r for s, r in op["responses"].items() if s.startswith("2")][0]
        ref = ok.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref", "")
        if not ref:
            continue
        schema = list(schemas[ref.rsplit("/", 1)[1]]["properties"])
        doc = fields_of(m.group(1))
        if sorted(doc) != sorted(schema):
            wrong.append(f"{key}: its Answer's fields {doc}, the schema {ref.rsplit('/', 1)[1]}'s {schema}")
    tap.ok(not wrong, "the documented objects' and answers' fields are the OpenAPI schemas'", "\n".join(wrong))


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
