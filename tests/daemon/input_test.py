#!/usr/bin/env python3
"""nanovmd's answers to bad input on the resource routes (no guest needed): malformed
JSON, a field named twice, null fields, wrong types, unknown fields and query
parameters, values out of range, oversize bodies, unknown ids,
../ and NUL in ids and guest paths; each a 4xx from the catalogue while the daemon
keeps serving. A create on a host whose /dev/kvm cannot boot the guest fails with
its reason (502 vm_error), and leaves no record. TAP.
Usage: input_test.py NANOVM"""

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Daemon, Tap, main_guard  # noqa: E402

UUID = "00000000-0000-4000-8000-000000000000"


def run():
    nanovm = sys.argv[1]
    tap = Tap()
    d = Daemon(nanovm).start()
    try:
        def expect(name, answer, status, code):
            tap.ok(answer.status == status and answer.code() == code, f"{name}: {status} {code}", answer)

        post = d.post

        def msg(answer):
            """An error answer's message ("" for none)."""
            try:
                return answer.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                return ""
        expect("malformed JSON", post("/v1/sandboxes", '{"cpus": 1'), 400, "bad_json")
        expect("a JSON array instead of an object", post("/v1/sandboxes", "[1, 2]"), 400, "bad_json")
        expect("JSON nested 10000 deep", post("/v1/sandboxes", '{"metadata":' + "[" * 10000 + "]" * 10000 + "}"),
               400, "bad_json")
        expect("cpus as a string", post("/v1/sandboxes", {"cpus": "2"}), 400, "invalid_field")
        expect("cpus as a float", post("/v1/sandboxes", {"cpus": 1.5}), 400, "invalid_field")
        expect("memory_mb as a boolean", post("/v1/sandboxes", {"memory_mb": True}), 400, "invalid_field")
        expect("a label value that is a number", post("/v1/sandboxes", {"metadata": {"a": 1}}), 400, "invalid_field")
        expect("a label key with a slash", post("/v1/sandboxes", {"metadata": {"a/b": "x"}}), 400, "invalid_field")
        expect("an unknown field", post("/v1/sandboxes", {"cpus": 1, "gpu": True}), 400, "unknown_field")
        expect("image and snapshot_id together", post("/v1/sandboxes", {"image": "default", "snapshot_id": UUID}),
               400, "invalid_field")
        expect("cpus 0", post("/v1/sandboxes", {"cpus": 0}), 422, "out_of_range")
        expect("cpus 5", post("/v1/sandboxes", {"cpus": 5}), 422, "out_of_range")
        expect("memory_mb 127", post("/v1/sandboxes", {"memory_mb": 127}), 422, "out_of_range")
        expect("memory_mb 8193", post("/v1/sandboxes", {"memory_mb": 8193}), 422, "out_of_range")
        expect("memory_mb 2^64", post("/v1/sandboxes", '{"memory_mb": 18446744073709551615}'), 422, "out_of_range")
        expect("a negative timeout", post("/v1/sandboxes", {"timeout_s": -1}), 422, "out_of_range")
        expect("an image given as a host path", post("/v1/sandboxes", {"image": "/etc/passwd"}), 422, "invalid_value")
        expect("an image name with ../", post("/v1/sandboxes", {"image": "../../etc"}), 422, "invalid_value")
        expect("a restore of an unknown snapshot", post("/v1/sandboxes", {"snapshot_id": UUID}), 404, "snapshot_not_found")
        expect("a 100 KiB create body", post("/v1/sandboxes", {"metadata": {"a": "x" * 100000}}), 413, "body_too_large")

        # A field named twice: refused at any depth (parsers differ on which one counts);
        # the same name in two different objects is fine.
        a = post("/v1/sandboxes", '{"cpus": 1, "cpus": 4}')
        expect("a field named twice", a, 400, "bad_json")
        tap.ok('"cpus" twice' in msg(a), "... and the message names it", a)
        a = post("/v1/sandboxes", '{"metadata": {"a": "1", "a": "2"}}')
        expect("a label named twice", a, 400, "bad_json")
        tap.ok('"a" twice in "metadata"' in msg(a), "... and the message names it and its object", a)
        expect("a field named twice in PATCH (before the sandbox is looked up)",
               d.request("PATCH", f"/v1/sandboxes/{UUID}", '{"timeout_s": 1, "timeout_s": null}'), 400, "bad_json")
        expect("one name in two objects is not a repeat", post("/v1/sandboxes", '{"metadata": {"cpus": "1"}, "cpus": 5}'),
               422, "out_of_range")
        # null is not "left out" (PATCH's timeout_s excepted: null is no timeout).
        a = post("/v1/sandboxes", {"image": None})
        expect('"image": null in a create', a, 400, "invalid_field")
        tap.ok('"image" is null' in msg(a), "... and the message says to leave it out", a)
        expect('"cpus": null in a create', post("/v1/sandboxes", {"cpus": None}), 400, "invalid_field")
        expect('"snapshot_id": null beside an image', post("/v1/sandboxes", {"image": "tiny", "snapshot_id": None}),
               400, "invalid_field")
        expect('PATCH "timeout_s": null stays allowed (then the unknown sandbox)',
               d.request("PATCH", f"/v1/sandboxes/{UUID}", {"timeout_s": None}), 404, "sandbox_not_found")
        expect('PATCH "autosleep_s": null', d.request("PATCH", f"/v1/sandboxes/{UUID}", {"autosleep_s": None}),
               400, "invalid_field")
        # pause, resume, sleep, reboot take no fields (their body: none or {}).
        for action in ("pause", "resume", "sleep", "reboot"):
            expect(f"{action} with a field", post(f"/v1/sandboxes/{UUID}/{action}", {"force": True}), 400, "unknown_field")
            expect(f"{action} with a body that is not JSON", post(f"/v1/sandboxes/{UUID}/{action}", "now"), 400, "bad_json")
            expect(f"{action} with {{}}", post(f"/v1/sandboxes/{UUID}/{action}", {}), 404, "sandbox_not_found")
        # A query parameter the route does not take, on any route.
        a = d.get("/v1/sandboxes?limt=5")
        expect("a list with a misspelt query parameter", a, 400, "unknown_field")
        tap.ok('"limt"' in msg(a) and "state, metadata.KEY, limit, after" in msg(a),
               "... named, with the ones the route takes", a)
        expect("GET /v1/health?verbose=1", d.get("/v1/health?verbose=1"), 400, "unknown_field")
        expect("a sandbox get with a query (before the sandbox is looked up)", d.get(f"/v1/sandboxes/{UUID}?x=1"),
               400, "unknown_field")
        expect("the snapshots list with limit and after", d.get(f"/v1/snapshots?limit=5&after={UUID}"), 200, None)
        expect("the snapshots list with sandbox_id (not a parameter)", d.get(f"/v1/snapshots?sandbox_id={UUID}"),
               400, "unknown_field")
        expect("a list with its parameters", d.get("/v1/sandboxes?state=running&metadata.k=v&limit=5"), 200, None)
        expect("a template delete with force", d.request("DELETE", "/v1/templates/nope?force=true"), 404,
               "template_not_found")
        expect("a create with a query parameter", post("/v1/sandboxes?wait=true", {"cpus": 1}), 400, "unknown_field")

        many = "&".join(f"metadata.k{i}=v" for i in range(65))
        expect("a list with 65 metadata filters", d.get("/v1/sandboxes?" + many), 422, "out_of_range")
        many = "&".join(f"metadata.k{i}=v" for i in range(1000))
        expect("a list with 1000 metadata filters (was a 500: SQL too large)", d.get("/v1/sandboxes?" + many),
               422, "out_of_range")
        expect("a list with 64 metadata filters", d.get("/v1/sandboxes?" + "&".join(f"metadata.k{i}=v" for i in range(64))),
               200, None)
        for path in [f"/v1/sandboxes/{UUID}", "/v1/sandboxes/not-a-uuid", "/v1/sandboxes/..%2F..%2Fetc%2Fpasswd",
                     "/v1/sandboxes/%00", "/v1/sandboxes/" + "a" * 5000]:
            expect(f"GET {path[:60]}", d.get(path), 404, "sandbox_not_found")
        expect("GET /v1/sandboxes/../../etc/passwd", d.get("/v1/sandboxes/../../etc/passwd"), 404, "no_route")
        expect("DELETE of an unknown sandbox", d.request("DELETE", f"/v1/sandboxes/{UUID}"), 404, "sandbox_not_found")
        expect("PATCH of an unknown sandbox", d.request("PATCH", f"/v1/sandboxes/{UUID}", {"timeout_s": 5}),
               404, "sandbox_not_found")
        expect("PATCH with a bad field", d.request("PATCH", f"/v1/sandboxes/{UUID}", {"labels": {}}), 400, "unknown_field")
        expect("pause of an unknown sandbox", post(f"/v1/sandboxes/{UUID}/pause"), 404, "sandbox_not_found")
        expect("fork n=5", post(f"/v1/sandboxes/{UUID}/fork", {"n": 5}), 422, "out_of_range")
        expect("fork of an unknown sandbox", post(f"/v1/sandboxes/{UUID}/fork", {"n": 2}), 404, "sandbox_not_found")
        expect("exec without cmd or argv", post(f"/v1/sandboxes/{UUID}/exec", {}), 400, "invalid_field")
        expect("exec with an empty argv", post(f"/v1/sandboxes/{UUID}/exec", {"argv": []}), 400, "invalid_field")
        expect("exec with a relative cwd", post(f"/v1/sandboxes/{UUID}/exec", {"cmd": "ls", "cwd": "tmp"}),
               400, "invalid_path")
        expect("exec with a bad user", post(f"/v1/sandboxes/{UUID}/exec", {"cmd": "ls", "user": "root"}),
               400, "invalid_field")
        expect("exec of an unknown sandbox", post(f"/v1/sandboxes/{UUID}/exec", {"argv": ["true"]}),
               404, "sandbox_not_found")
        # env is a command's environment, not labels: a token or a PATH is longer than
        # a label's 255 bytes, and a build may pass more than 64 variables. Accepted
        # bodies reach the sandbox lookup (404); refused ones say why.
        exec_path = f"/v1/sandboxes/{UUID}/exec"
        expect("exec with a 4 KiB env value", post(exec_path, {"cmd": "env", "env": {"TOKEN": "t" * 4096}}),
               404, "sandbox_not_found")
        expect("exec with 200 env variables", post(exec_path, {"cmd": "env", "env": {f"V_{i}": "x" for i in range(200)}}),
               404, "sandbox_not_found")
        expect("a background command with a 4 KiB env value",
               post(f"/v1/sandboxes/{UUID}/commands", {"cmd": "env", "env": {"TOKEN": "t" * 4096}}),
               404, "sandbox_not_found")
        expect("a session with a 4 KiB env value", post(f"/v1/sandboxes/{UUID}/sessions", {"env": {"TOKEN": "t" * 4096}}),
               404, "sandbox_not_found")
        expect("an env name with =", post(exec_path, {"cmd": "env", "env": {"A=B": "x"}}), 400, "invalid_field")
        expect("an empty env name", post(exec_path, {"cmd": "env", "env": {"": "x"}}), 400, "invalid_field")
        expect("an env value that is a number", post(exec_path, {"cmd": "env", "env": {"A": 1}}), 400, "invalid_field")
        expect("an env value with NUL", post(exec_path, {"cmd": "env", "env": {"A": "x\u0000y"}}), 400, "invalid_field")
        r = post(exec_path, {"cmd": "env", "env": {"BIG": "x" * (128 * 1024)}})
        expect("an env variable over Linux's MAX_ARG_STRLEN", r, 422, "out_of_range")
        tap.ok("BIG" in r.json()["error"]["message"], "its message names the variable", r)
        r = post(exec_path, {"argv": ["echo"] + ["a" * (120 * 1024)] * 9})
        expect("argv of 1.05 MiB (over the agent's one request)", r, 422, "out_of_range")
        tap.ok("1048576" in r.json()["error"]["message"], "its message gives the bound", r)
        files = f"/v1/sandboxes/{UUID}/files"
        expect("a file read without a path", d.get(files), 400, "invalid_field")
        expect("a relative guest path", d.get(files + "?path=etc/passwd"), 400, "invalid_path")
        expect("a guest path with ..", d.get(files + "?path=/tmp/../../etc/passwd"), 400, "invalid_path")
        expect("a guest path with NUL", d.get(files + "?path=/tmp/a%00b"), 400, "invalid_path")
        r = d.get(files + "?path=a%00b")  # relative too: the NUL is said, not a message cut at it
        expect("a relative guest path with NUL", r, 400, "invalid_path")
        tap.ok("NUL" in r.json()["error"]["message"], "its message names the NUL", r)
        expect("mkdir with a NUL in the body's path", post(files + "/mkdir", {"path": "/a\u0000b"}), 400, "invalid_path")
        expect("exec with a NUL in cwd", post(f"/v1/sandboxes/{UUID}/exec", {"cmd": "ls", "cwd": "/a\u0000b"}),
               400, "invalid_path")
        expect("a bad percent escape in the path", d.get("/v1/sandboxes/%zz"), 400, "bad_request")
        expect("a file read of an unknown sandbox", d.get(files + "?path=/etc/hostname"), 404, "sandbox_not_found")
        expect("mkdir with a path of the wrong type", post(files + "/mkdir", {"path": 5}), 400, "invalid_field")
        expect("a bad list limit", d.get("/v1/sandboxes?limit=0"), 422, "out_of_range")
        expect("a list limit that is not a number", d.get("/v1/sandboxes?limit=ten"), 400, "invalid_field")
        expect("an unknown state filter", d.get("/v1/sandboxes?state=dancing"), 400, "invalid_field")
        expect("GET of an unknown snapshot", d.get(f"/v1/snapshots/{UUID}"), 404, "snapshot_not_found")
        expect("a snapshot id with ../", d.get("/v1/snapshots/..%2Fstore.db"), 404, "snapshot_not_found")
        r = d.get("/v1/templates/no%3Asuch%3A1x256")  # a path parameter is percent-decoded
        expect("a template name with escaped ':'", r, 404, "template_not_found")
        tap.ok("no template no:such:1x256" in r.json()["error"]["message"], "the name decoded in its message", r)
        expect("restore of an unknown snapshot", post(f"/v1/snapshots/{UUID}/restore"), 404, "snapshot_not_found")
        expect("wait with a timeout over an hour", post(f"/v1/snapshots/{UUID}/wait", {"timeout_s": 99999}),
               422, "out_of_range")
        expect("DELETE of an unknown snapshot", d.request("DELETE", f"/v1/snapshots/{UUID}"), 404, "snapshot_not_found")
        expect("snapshot of an unknown sandbox", post(f"/v1/sandboxes/{UUID}/snapshots", {"wait_durable": True}),
               404, "sandbox_not_found")
        expect("snapshot with leave_paused as a string", post(f"/v1/sandboxes/{UUID}/snapshots", {"leave_paused": "yes"}),
               400, "invalid_field")

        # A create: on a host whose /dev/kvm cannot run the guest (this machine's PVM),
        # it fails with the reason; where it can, it makes a sandbox (deleted again).
        # (Through its implicit template: 503 template_building until it is built or failed.)
        c, _ = d.create({"cpus": 1, "memory_mb": 256, "metadata": {"test": "input"}}, deadline_s=240)
        if c.status == 502:
            msg = c.json()["error"]["message"]
            tap.ok(c.code() == "vm_error" and ("kvm" in msg.lower() or "did not start" in msg),
                   f"a create where the guest cannot boot: 502 vm_error with the reason ({msg[:120]})", c)
        else:
            tap.ok(c.status == 201 and c.json()["state"] == "running", "a create where KVM works: 201 running", c)
            if c.status == 201:
                d.request("DELETE", f"/v1/sandboxes/{c.json()['id']}", timeout=120)
        listed = d.get("/v1/sandboxes")
        tap.ok(listed.status == 200 and listed.json()["sandboxes"] == [], "no sandbox record is left behind", listed)

        h = d.get("/v1/health")
        tap.ok(h.status == 200 and d.alive(), "after all of that the daemon still serves", h)
        m = d.get("/metrics").body
        # bad_json: 3 malformed bodies, 3 fields named twice, 4 pause|resume|sleep|reboot bodies not JSON.
        tap.ok('nanovm_api_errors_total{code="bad_json"} 10' in m and 'code="out_of_range"' in m,
               "/metrics counted the errors by code", m[-1500:])
    finally:
        code = d.stop()
        tap.ok(code == 0, f"SIGTERM: exit 0 ({code})", d.stderr()[-2000:])
    # A cap no sandbox fits under is refused at the start (a sandbox takes 128 MiB at least).
    with tempfile.TemporaryDirectory() as state:
        p = subprocess.run([nanovm, "daemon", "--state-dir", state, "--max-memory", "0"], capture_output=True,
                           text=True, timeout=30)
        tap.ok(p.returncode == 2 and "--max-memory: Value 0 not in range 128" in p.stderr,
               f"--max-memory 0: refused at the start, exit 2 ({p.returncode})", p.stderr)
        # Likewise an upload limit no upload fits under (0: every file write was a 413).
        for flag, value, want in [("--max-file-size", "0", "--max-file-size: Value 0 not in range 1024 to 4294967296"),
                                  ("--max-file-size", "4294967297", "--max-file-size: Value 4294967297 not in range"),
                                  ("--max-import-size", "0", "--max-import-size: Value 0 not in range 1048576 to")]:
            p = subprocess.run([nanovm, "daemon", "--state-dir", state, flag, value], capture_output=True,
                               text=True, timeout=30)
            tap.ok(p.returncode == 2 and want in p.stderr, f"{flag} {value}: refused at the start, exit 2 ({p.returncode})",
                   p.stderr)
    # The caps: a create over the committed-memory cap is refused before any VM starts.
    capped = Daemon(nanovm, args=["--max-memory", "300", "--max-sandboxes", "1"]).start()
    try:
        a = capped.post("/v1/sandboxes", {"memory_mb": 512})
        tap.ok(a.status == 503 and a.code() == "over_capacity" and "--max-memory" in a.body,
               "a create over --max-memory: 503 over_capacity", a)
        a = capped.post("/v1/sandboxes/" + UUID + "/fork", {"n": 4})
        tap.ok(a.status == 404, "a fork of an unknown sandbox is 404 before any cap", a)
        tap.ok(capped.get("/v1/sandboxes").json()["sandboxes"] == [], "nothing is recorded for a refused create")
    finally:
        capped.cleanup()
    # The store survives a restart of the daemon.
    again = Daemon(nanovm, state_dir=d.state_dir).start()
    try:
        a = again.get("/v1/sandboxes")
        tap.ok(a.status == 200, "a restarted daemon opens its store again", a)
    finally:
        again.stop()
        d.cleanup()
    return tap.done()


if __name__ == "__main__":
    main_guard(run)
