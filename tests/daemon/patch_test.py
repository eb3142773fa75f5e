#!/usr/bin/env python3
"""PATCH /v1/sandboxes/{id} without a guest: autosleep_s (with timeout_s and metadata
beside it) on a sandbox seeded into the daemon's store (state `error`, no VM: one the
daemon leaves as it is at a start), every refusal of a bad value (4xx with its
catalogue code, the stored value unchanged), the value kept across a daemon restart,
and the OpenAPI document's PatchSandbox. A second seeded sandbox, recorded as restored
from template `py`: every Sandbox answer (get, list, PATCH) says its `template` (null
for the first), the answer's fields are the OpenAPI Sandbox's, and `nanovm sandbox ls`
shows it. What autosleep then does in a guest is checked in the test host. TAP.
Usage: patch_test.py NANOVM"""

import json
import os
import sqlite3
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Daemon, Tap, main_guard  # noqa: E402

SID = "5a1e0000-0000-4000-8000-00000000000a"
FROM_TEMPLATE = "5a1e0000-0000-4000-8000-00000000000b"
NOBODY = "00000000-0000-4000-8000-000000000000"


def seed(state_dir):
    """One sandbox in `error` without a VM (a crashed one whose VMM is gone), labels k=v;
    a second like it, restored from template `py` (as create_from_template records it)."""
    db = sqlite3.connect(os.path.join(state_dir, "store.db"))
    now = int(time.time() * 1000)
    db.execute("INSERT INTO sandboxes (id, state, error, cpus, memory_mb, labels, created_ms, updated_ms) "
               "VALUES (?, 'error', 'seeded by patch_test.py', 1, 256, ?, ?, ?)", (SID, json.dumps({"k": "v"}), now, now))
    db.execute("INSERT INTO sandboxes (id, state, error, cpus, memory_mb, image, template, created_ms, updated_ms) "
               "VALUES (?, 'error', 'seeded by patch_test.py', 1, 256, 'default', 'py', ?, ?)",
               (FROM_TEMPLATE, now, now))
    db.execute("INSERT INTO template_sandboxes (sandbox_id, template) VALUES (?, 'py')", (FROM_TEMPLATE,))
    db.commit()
    db.close()


def restart(d):
    """Starts the stopped daemon again, until it answers (its stderr file says
    `serving on` from the last start already)."""
    d.start()
    for _ in range(200):
        try:
            if d.get("/v1/health").status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("the daemon did not answer after a restart")


def run():
    nanovm = sys.argv[1]
    tap = Tap()
    d = Daemon(nanovm).start()  # makes the store's schema
    d.stop()
    seed(d.state_dir)
    restart(d)
    path = f"/v1/sandboxes/{SID}"

    def patch(body):
        return d.request("PATCH", path, body, headers={"Content-Type": "application/json"})

    def expect(name, answer, status, code):
        tap.ok(answer.status == status and answer.code() == code, f"{name}: {status} {code}", answer)

    def stored():
        return d.get(path).json().get("autosleep_s")

    try:
        a = d.get(path)
        tap.ok(a.status == 200 and a.json()["state"] == "error" and a.json()["autosleep_s"] == 0,
               "the seeded sandbox: error, autosleep_s 0", a)

        a = patch({"autosleep_s": 300})
        j = a.json() if a.status == 200 else {}
        tap.ok(a.status == 200 and j.get("autosleep_s") == 300, "PATCH autosleep_s 300: answered 300", a)
        tap.ok(j.get("state") == "error" and j.get("metadata") == {"k": "v"} and j.get("timeout_s") is None,
               "the rest unchanged (state, metadata, timeout_s)", j)
        tap.ok(stored() == 300, "GET: autosleep_s 300")

        a = patch({"autosleep_s": 0, "metadata": {"a": "b"}})
        j = a.json() if a.status == 200 else {}
        tap.ok(a.status == 200 and j.get("autosleep_s") == 0 and j.get("metadata") == {"a": "b"},
               "PATCH autosleep_s 0 with metadata: both changed", a)

        patch({"autosleep_s": 45})
        a = patch({"timeout_s": 60})
        j = a.json() if a.status == 200 else {}
        tap.ok(a.status == 200 and j.get("autosleep_s") == 45 and j.get("timeout_s") == 60,
               "PATCH timeout_s alone leaves autosleep_s (45)", a)
        a = patch({"metadata": {"c": "d"}})
        tap.ok(a.status == 200 and a.json().get("autosleep_s") == 45, "PATCH metadata alone leaves autosleep_s", a)

        a = patch({"autosleep_s": 604800})
        tap.ok(a.status == 200 and a.json().get("autosleep_s") == 604800, "PATCH autosleep_s 604800 (the most)", a)
        for name, body, status, code in [
                ("-1", {"autosleep_s": -1}, 422, "out_of_range"),
                ("604801", {"autosleep_s": 604801}, 422, "out_of_range"),
                ("2^64", '{"autosleep_s": 18446744073709551615}', 422, "out_of_range"),
                ("a string", {"autosleep_s": "60"}, 400, "invalid_field"),
                ("1.5", {"autosleep_s": 1.5}, 400, "invalid_field"),
                ("true", {"autosleep_s": True}, 400, "invalid_field"),
                ("null", {"autosleep_s": None}, 400, "invalid_field"),
                ("a bad one beside a good timeout_s", {"autosleep_s": -5, "timeout_s": 10}, 422, "out_of_range")]:
            expect(f"PATCH autosleep_s {name}", patch(body), status, code)
        a = d.get(path).json()
        tap.ok(a.get("autosleep_s") == 604800 and a.get("timeout_s") == 60,
               "after the refusals: autosleep_s 604800 and timeout_s 60 as before", a)
        expect("PATCH autosleep_s of an unknown sandbox",
               d.request("PATCH", f"/v1/sandboxes/{NOBODY}", {"autosleep_s": 5}), 404, "sandbox_not_found")

        d.stop()
        restart(d)
        tap.ok(stored() == 604800, "after a daemon restart: autosleep_s 604800")

        spec = d.get("/v1/openapi.json").json()
        prop = spec["components"]["schemas"]["PatchSandbox"]["properties"].get("autosleep_s", {})
        tap.ok(prop.get("type") == "integer" and prop.get("minimum") == 0 and prop.get("maximum") == 604800,
               "openapi.json: PatchSandbox.autosleep_s integer 0-604800", prop)

        # `template`: the template a sandbox was restored from, null for the others.
        a = d.get(f"/v1/sandboxes/{FROM_TEMPLATE}")
        tap.ok(a.status == 200 and a.json().get("template") == "py", "GET: a sandbox made from template py says so", a)
        a = d.get(path)
        tap.ok(a.status == 200 and "template" in a.json() and a.json()["template"] is None,
               "GET: the other sandbox's template is null", a)
        listed = {s["id"]: s for s in d.get("/v1/sandboxes").json()["sandboxes"]}
        tap.ok(listed.get(FROM_TEMPLATE, {}).get("template") == "py" and "template" in listed.get(SID, {})
               and listed[SID]["template"] is None, "list: template py and null", listed)
        a = d.request("PATCH", f"/v1/sandboxes/{FROM_TEMPLATE}", {"metadata": {"t": "1"}})
        tap.ok(a.status == 200 and a.json().get("template") == "py", "PATCH answers template too, and keeps it", a)
        schema = spec["components"]["schemas"]["Sandbox"]["properties"]
        tap.ok(set(a.json()) == set(schema) and schema.get("template", {}).get("nullable") is True,
               "the Sandbox answer's fields are openapi.json's Sandbox (template a nullable string)",
               f"answer: {sorted(a.json())}\nschema: {sorted(schema)}")
        p = subprocess.run([nanovm, "sandbox", "ls", "--state-dir", d.state_dir], capture_output=True, text=True,
                           timeout=60)
        row = [ln for ln in p.stdout.splitlines() if ln.startswith(FROM_TEMPLATE)]
        tap.ok(p.returncode == 0 and row and "template py" in row[0], "nanovm sandbox ls: its SOURCE is template py",
               p.stdout + p.stderr)
        # A session id prefix is looked up in the sessions list, which takes no query
        # parameters (the CLI sent limit=1000 and got 400 unknown_field).
        p = subprocess.run([nanovm, "sandbox", "session", "rm", SID, "abc", "--state-dir", d.state_dir],
                           capture_output=True, text=True, timeout=60)
        tap.ok(p.returncode == 4 and "no session has an id starting with abc" in p.stderr,
               f"nanovm sandbox session rm ID PREFIX: the sessions list read without paging (exit {p.returncode})",
               p.stderr)
    except Exception:
        d.print_stderr_tail()
        raise
    finally:
        d.cleanup()
    return tap.done()


if __name__ == "__main__":
    main_guard(run)
