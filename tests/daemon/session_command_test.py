#!/usr/bin/env python3
"""nanovmd's sessions, background commands and output_encoding without a guest:
every body, query and id the routes refuse before a guest is reached (each a 4xx
with its catalogue code, the daemon serving on), unknown sandboxes (404), and the
OpenAPI document's new routes and codes. What they do in a guest is checked in the
test host (testhost_session_checks.py). TAP.
Usage: session_command_test.py NANOVM"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_harness import Daemon, Tap, main_guard  # noqa: E402

NOBODY = "00000000-0000-4000-8000-000000000000"


def run():
    nanovm = sys.argv[1]
    tap = Tap()
    d = Daemon(nanovm).start()
    sb = f"/v1/sandboxes/{NOBODY}"

    def expect(name, answer, status, code):
        tap.ok(answer.status == status and answer.code() == code, f"{name}: {status} {code}", answer)

    try:
        # --- sessions ---
        expect("create a session in an unknown sandbox", d.post(f"{sb}/sessions", {}), 404, "sandbox_not_found")
        expect("list the sessions of an unknown sandbox", d.get(f"{sb}/sessions"), 404, "sandbox_not_found")
        expect("a session with a relative cwd", d.post(f"{sb}/sessions", {"cwd": "work"}), 400, "invalid_path")
        expect("a session with a .. cwd", d.post(f"{sb}/sessions", {"cwd": "/a/../b"}), 400, "invalid_path")
        expect("a session with an unknown field", d.post(f"{sb}/sessions", {"shell": "bash"}), 400, "unknown_field")
        expect("a session with env not an object", d.post(f"{sb}/sessions", {"env": ["A=1"]}), 400, "invalid_field")
        expect("a session as another user (sessions run as root)", d.post(f"{sb}/sessions", {"user": 1000}),
               422, "invalid_value")
        expect("a session with user of the wrong type", d.post(f"{sb}/sessions", {"user": [0]}), 400, "invalid_field")
        expect("a session as root, in an unknown sandbox", d.post(f"{sb}/sessions", {"user": "0:0", "cwd": "/tmp"}),
               404, "sandbox_not_found")
        sx = f"{sb}/sessions/{NOBODY}/exec"
        expect("a session exec without cmd", d.post(sx, {}), 400, "invalid_field")
        expect("a session exec with an empty cmd", d.post(sx, {"cmd": ""}), 400, "invalid_field")
        expect("a session exec with argv (a session takes shell lines)", d.post(sx, {"argv": ["ls"]}), 400,
               "unknown_field")
        expect("a session exec with timeout_s -1", d.post(sx, {"cmd": "ls", "timeout_s": -1}), 422, "out_of_range")
        expect("a session exec with output_encoding hex", d.post(sx, {"cmd": "ls", "output_encoding": "hex"}), 422,
               "invalid_value")
        expect("a session exec in an unknown sandbox", d.post(sx, {"cmd": "ls"}), 404, "sandbox_not_found")
        expect("a streamed session exec in an unknown sandbox (refused before the stream)",
               d.post(sx, {"cmd": "ls", "stream": True}), 404, "sandbox_not_found")
        expect("delete a session of an unknown sandbox", d.request("DELETE", f"{sb}/sessions/{NOBODY}"), 404,
               "sandbox_not_found")
        expect("delete a session with a ../ id", d.request("DELETE", f"{sb}/sessions/..%2F..%2Fstore.db"), 404,
               "sandbox_not_found")

        # --- output_encoding on exec ---
        expect("exec with output_encoding hex", d.post(f"{sb}/exec", {"cmd": "ls", "output_encoding": "hex"}), 422,
               "invalid_value")
        expect("exec with output_encoding 64", d.post(f"{sb}/exec", {"cmd": "ls", "output_encoding": 64}), 400,
               "invalid_field")
        expect("exec with output_encoding base64, in an unknown sandbox",
               d.post(f"{sb}/exec", {"cmd": "ls", "output_encoding": "base64"}), 404, "sandbox_not_found")

        # --- background commands ---
        cm = f"{sb}/commands"
        expect("start a command with stream (not taken)", d.post(cm, {"cmd": "ls", "stream": True}), 400,
               "unknown_field")
        expect("start a command with both cmd and argv", d.post(cm, {"cmd": "ls", "argv": ["ls"]}), 400,
               "invalid_field")
        expect("start a command with neither cmd nor argv", d.post(cm, {}), 400, "invalid_field")
        expect("start a command with timeout_s over a day", d.post(cm, {"cmd": "ls", "timeout_s": 86401}), 422,
               "out_of_range")
        expect("start a command with a relative cwd", d.post(cm, {"cmd": "ls", "cwd": "tmp"}), 400, "invalid_path")
        expect("start a command in an unknown sandbox", d.post(cm, {"argv": ["sleep", "1"]}), 404, "sandbox_not_found")
        expect("list the commands of an unknown sandbox", d.get(cm), 404, "sandbox_not_found")
        expect("get a command of an unknown sandbox", d.get(f"{cm}/1"), 404, "sandbox_not_found")
        expect("get a command with a non-numeric id, of an unknown sandbox", d.get(f"{cm}/abc"), 404,
               "sandbox_not_found")
        expect("output with follow=maybe", d.get(f"{cm}/1/output?follow=maybe"), 400, "invalid_field")
        expect("output with output_encoding=hex", d.get(f"{cm}/1/output?output_encoding=hex"), 422, "invalid_value")
        expect("output of a command of an unknown sandbox", d.get(f"{cm}/1/output?follow=true"), 404,
               "sandbox_not_found")
        expect("wait with timeout_s 3601", d.post(f"{cm}/1/wait", {"timeout_s": 3601}), 422, "out_of_range")
        expect("wait with an unknown field", d.post(f"{cm}/1/wait", {"timeout": 1}), 400, "unknown_field")
        expect("wait in an unknown sandbox", d.post(f"{cm}/1/wait", {}), 404, "sandbox_not_found")
        expect("kill with signal 65", d.post(f"{cm}/1/kill", {"signal": 65}), 422, "out_of_range")
        expect("kill with signal \"KILL\"", d.post(f"{cm}/1/kill", {"signal": "KILL"}), 400, "invalid_field")
        expect("kill in an unknown sandbox", d.post(f"{cm}/1/kill", {}), 404, "sandbox_not_found")
        expect("stdin with eof=maybe", d.post(f"{cm}/1/stdin?eof=maybe", body="x"), 400, "invalid_field")
        expect("stdin of 17 MiB (16 MiB is the limit)", d.post(f"{cm}/1/stdin", body="x" * (17 << 20)), 413,
               "body_too_large")
        expect("stdin in an unknown sandbox", d.post(f"{cm}/1/stdin?eof=true", body=b"\x00\xff"), 404,
               "sandbox_not_found")
        expect("a command route with a wrong method", d.request("DELETE", f"{cm}/1"), 405, "method_not_allowed")

        # --- the OpenAPI document ---
        spec = d.get("/v1/openapi.json").json()
        paths = spec["paths"]
        want = {f"/v1/sandboxes/{{id}}/sessions": {"get", "post"},
                f"/v1/sandboxes/{{id}}/sessions/{{sid}}": {"delete"},
                f"/v1/sandboxes/{{id}}/sessions/{{sid}}/exec": {"post"},
                f"/v1/sandboxes/{{id}}/commands": {"get", "post"},
                f"/v1/sandboxes/{{id}}/commands/{{cid}}": {"get"},
                f"/v1/sandboxes/{{id}}/commands/{{cid}}/output": {"get"},
                f"/v1/sandboxes/{{id}}/commands/{{cid}}/wait": {"post"},
                f"/v1/sandboxes/{{id}}/commands/{{cid}}/stdin": {"post"},
                f"/v1/sandboxes/{{id}}/commands/{{cid}}/kill": {"post"}}
        tap.ok(all(set(paths.get(p, {})) == m for p, m in want.items()),
               "the OpenAPI document has every session and command route",
               {p: sorted(paths.get(p, {})) for p in want})
        codes = {e["code"]: e["status"] for e in spec["x-nanovm-errors"]}
        tap.ok(codes.get("session_not_found") == 404 and codes.get("command_not_found") == 404,
               "the catalogue has session_not_found and command_not_found (404)", codes)
        cid = [p for p in paths[f"/v1/sandboxes/{{id}}/commands/{{cid}}"]["get"]["parameters"] if p["name"] == "cid"]
        tap.ok(cid and "format" not in cid[0]["schema"], "a command id is a string, not a UUID, in the document", cid)
        enc = spec["components"]["schemas"]["Exec"]["properties"].get("output_encoding", {})
        tap.ok(enc.get("enum") == ["utf8", "base64"], "Exec takes output_encoding utf8 or base64", enc)
        tap.ok(d.get("/v1/health").status == 200 and d.alive(), "the daemon serves on after all of them")
    finally:
        d.cleanup()
    return tap.done()


if __name__ == "__main__":
    main_guard(run)
