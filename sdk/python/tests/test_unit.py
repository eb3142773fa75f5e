"""lithosbox against a scripted fake nanovmd (tests/fake_daemon.py): the error mapping
(every code of docs/api.md's catalogue and the session's contract), the requests'
shapes (paths, queries, bodies), streaming, waits and retries, discovery of the
daemon. No guest, no daemon binary. Run: python3 -m unittest (from sdk/python/tests)."""

import base64
import io
import json
import os
import sys
import time
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import lithosbox  # noqa: E402
from lithosbox import (BusyError, CommandFailedError, CommandNotFoundError, CommandResult,  # noqa: E402
                       CommandTimedOutError, DaemonNotRunningError, DiskFullError, FileTooLargeError,
                       ForkError, InternalError, InvalidRequestError, LithosBox, LithosBoxError,
                       LithosBoxTimeoutError, NotFoundError, OverCapacityError, PathConflictError,
                       PathNotFoundError, PermissionDeniedError, Sandbox, SandboxArchivedError,
                       SandboxNotFoundError, SandboxPausedError, SessionNotFoundError, SnapshotNotFoundError,
                       TemplateBuildingError, TemplateNotFoundError, UnauthorizedError, VMError,
                       WrongStateError)
from lithosbox._transport import default_state_dir, find_endpoint  # noqa: E402
from lithosbox.errors import error_from_answer  # noqa: E402
from fake_daemon import FakeDaemon, answer, error, free_socket_path, ndjson, refused_port  # noqa: E402

SID = "11111111-2222-4333-8444-555555555555"
SNAP = "99999999-8888-4777-8666-555555555555"


def sandbox_json(sid=SID, state="running", **kw):
    d = {"id": sid, "state": state, "error": None, "cpus": 1, "memory_mb": 256, "disable_internet": False,
         "image": "default", "template": None, "snapshot_id": None, "parent_id": None, "metadata": {}, "timeout_s": None,
         "end_at": None, "created_at": "2026-12-01T00:00:00Z"}
    d.update(kw)
    return d


def snapshot_json(sid=SNAP, durable=True, state="ready", **kw):
    d = {"id": sid, "sandbox_id": SID, "created_at": "2026-12-01T00:00:00Z", "state": state, "durable": durable,
         "size_bytes": 4096, "cpus": 1, "memory_mb": 256, "disable_internet": False, "error": None}
    d.update(kw)
    return d


# Every code of the catalogue (docs/api.md "Errors") and of the session's contract.
CATALOGUE = [
    ("bad_request", 400, InvalidRequestError), ("bad_json", 400, InvalidRequestError),
    ("invalid_field", 400, InvalidRequestError), ("unknown_field", 400, InvalidRequestError),
    ("invalid_path", 400, InvalidRequestError), ("unauthorized", 401, UnauthorizedError),
    ("permission_denied", 403, PermissionDeniedError), ("no_route", 404, NotFoundError),
    ("sandbox_not_found", 404, SandboxNotFoundError), ("snapshot_not_found", 404, SnapshotNotFoundError),
    ("path_not_found", 404, PathNotFoundError), ("session_not_found", 404, SessionNotFoundError),
    ("command_not_found", 404, CommandNotFoundError), ("template_not_found", 404, TemplateNotFoundError),
    ("method_not_allowed", 405, NotFoundError), ("wrong_state", 409, WrongStateError),
    ("sandbox_paused", 409, SandboxPausedError), ("sandbox_archived", 409, SandboxArchivedError),
    ("template_exists", 409, WrongStateError), ("template_in_use", 409, WrongStateError),
    ("path_conflict", 409, PathConflictError), ("body_too_large", 413, FileTooLargeError),
    ("file_too_large", 413, FileTooLargeError), ("out_of_range", 422, InvalidRequestError),
    ("invalid_value", 422, InvalidRequestError), ("shape_mismatch", 422, InvalidRequestError),
    ("header_too_large", 431, InvalidRequestError), ("internal", 500, InternalError),
    ("vm_error", 502, VMError), ("over_capacity", 503, OverCapacityError), ("busy", 503, BusyError),
    ("template_building", 503, TemplateBuildingError), ("disk_full", 507, DiskFullError),
]


class ErrorMappingTest(unittest.TestCase):
    def test_every_catalogue_code(self):
        for code, status, cls in CATALOGUE:
            body = json.dumps({"error": {"code": code, "message": f"the {code} message"}}).encode()
            e = error_from_answer(status, body)
            self.assertIs(type(e), cls, code)
            self.assertEqual((e.code, e.status, e.message), (code, status, f"the {code} message"))
            self.assertIn(f"the {code} message", str(e))
            self.assertIsInstance(e, LithosBoxError)

    def test_builtin_bases(self):
        e = error_from_answer(404, b'{"error": {"code": "path_not_found", "message": "no /x"}}')
        self.assertIsInstance(e, FileNotFoundError)
        self.assertIsNone(e.errno)
        self.assertIsInstance(error_from_answer(409, b'{"error":{"code":"path_conflict","message":"m"}}'),
                              FileExistsError)
        self.assertIsInstance(LithosBoxTimeoutError("t"), TimeoutError)
        self.assertIs(lithosbox.TimeoutError, LithosBoxTimeoutError)
        self.assertIsInstance(DaemonNotRunningError("unix:///x", "no such socket"), ConnectionError)

    def test_unknown_code_gets_the_class_of_its_status(self):
        e = error_from_answer(409, b'{"error": {"code": "sandbox_rebooting", "message": "later"}}')
        self.assertIs(type(e), WrongStateError)
        self.assertEqual(e.code, "sandbox_rebooting")
        e = error_from_answer(418, b'{"error": {"code": "teapot", "message": "short and stout"}}')
        self.assertIs(type(e), InvalidRequestError)

    def test_body_not_json(self):
        e = error_from_answer(502, b"<html>bad gateway</html>")
        self.assertIs(type(e), VMError)
        self.assertEqual(e.code, "http_502")
        self.assertIn("bad gateway", e.message)
        e = error_from_answer(500, b"")
        self.assertIs(type(e), InternalError)
        self.assertIn("HTTP 500", e.message)

    def test_wrong_state_carries_the_state(self):
        e = error_from_answer(409, b'{"error": {"code": "sandbox_paused", "message": "resume it first"}}')
        self.assertEqual(e.state, "paused")
        self.assertIn("[state: paused]", str(e))
        e = error_from_answer(409, b'{"error": {"code": "sandbox_archived", "message": "unarchive"}}')
        self.assertEqual(e.state, "archived")

    def test_template_building_keeps_retry_after(self):
        e = error_from_answer(503, b'{"error": {"code": "template_building", "message": "m"}}', "7")
        self.assertEqual(e.retry_after, 7.0)
        e = error_from_answer(503, b'{"error": {"code": "template_building", "message": "m"}}', "soon")
        self.assertIsNone(e.retry_after)


class CheckTest(unittest.TestCase):
    def test_check_returns_the_result(self):
        r = CommandResult("out\n", "", 0, cmd="true")
        self.assertIs(r.check(), r)
        self.assertEqual(r.check().stdout, "out\n")

    def test_check_raises_a_result(self):
        r = CommandResult("o" * 5000 + "END", "boom\n", 3, cmd=["sh", "-c", "exit 3"])
        with self.assertRaises(CommandFailedError) as cm:
            r.check()
        e = cm.exception
        self.assertIsInstance(e, CommandResult)
        self.assertEqual((e.exit_code, e.stderr, e.code), (3, "boom\n", "command_failed"))
        self.assertIn("sh -c 'exit 3'", str(e))
        self.assertIn("exit status 3", str(e))
        self.assertIn("boom", str(e))
        self.assertIn("END", str(e))
        self.assertLess(len(str(e)), 4500)  # the tail, not all of it

    def test_check_timed_out_and_signal(self):
        with self.assertRaises(CommandTimedOutError) as cm:
            CommandResult("", "", 137, signal=9, timed_out=True, cmd="sleep 9").check()
        self.assertIsInstance(cm.exception, TimeoutError)
        self.assertIn("timed out", str(cm.exception))
        with self.assertRaises(CommandFailedError) as cm2:
            CommandResult("", "", 137, signal=9, cmd="kill -9 $$").check()
        self.assertIn("killed by signal 9", str(cm2.exception))


class FakeCase(unittest.TestCase):
    tcp = False

    def setUp(self):
        self.fake = FakeDaemon(tcp=self.tcp)
        if self.tcp:
            self.box = LithosBox(url=f"http://127.0.0.1:{self.fake.port}", token="t0k")
        else:
            self.box = LithosBox(state_dir=self.fake.dir)
        self.fake.queue("GET", f"/v1/sandboxes/{SID}", answer(200, sandbox_json()))

    def tearDown(self):
        self.box.close()
        self.fake.close()
        self.assertEqual(self.fake.broken, [], "answers the client did not read")

    def sandbox(self, **kw):
        return Sandbox(self.box, sandbox_json(**kw))


class SandboxRequestsTest(FakeCase):
    def test_create_shape_and_labels(self):
        self.fake.queue("POST", "/v1/sandboxes", answer(201, sandbox_json(metadata={"job": "a"})))
        s = self.box.sandboxes.create(cpus=1, memory_mb=256, labels={"job": "a"}, timeout_s=60)
        self.assertEqual(self.fake.last("POST").json(),
                         {"cpus": 1, "memory_mb": 256, "metadata": {"job": "a"}, "timeout_s": 60})
        self.assertEqual((s.id, s.state, s.labels), (SID, "running", {"job": "a"}))
        self.assertEqual(self.fake.last().headers.get("Content-Type"), "application/json")

    def test_create_with_nothing_sends_an_empty_object(self):
        self.fake.queue("POST", "/v1/sandboxes", answer(201, sandbox_json()))
        self.box.sandboxes.create()
        self.assertEqual(self.fake.last("POST").json(), {})

    def test_get_refresh_and_not_found(self):
        s = self.box.sandboxes.get(SID)
        self.assertEqual(s.state, "running")
        self.fake.routes[("GET", f"/v1/sandboxes/{SID}")] = [answer(200, sandbox_json(state="paused"))]
        self.assertIs(s.refresh(), s)
        self.assertEqual(s.state, "paused")
        missing = "00000000-0000-4000-8000-000000000000"
        self.fake.queue("GET", f"/v1/sandboxes/{missing}", error(404, "sandbox_not_found", "no sandbox"))
        with self.assertRaises(SandboxNotFoundError) as cm:
            self.box.sandboxes.get(missing)
        self.assertEqual(cm.exception.status, 404)

    def test_template_from_get_and_list(self):
        # The daemon's Sandbox carries `template` (null for a boot): get and list fill it.
        other = "22222222-2222-4333-8444-555555555555"
        self.fake.routes[("GET", f"/v1/sandboxes/{SID}")] = [answer(200, sandbox_json(template="py"))]
        self.assertEqual(self.box.sandboxes.get(SID).template, "py")
        self.fake.queue("GET", "/v1/sandboxes", answer(200, {"sandboxes": [sandbox_json(template="auto:default:1x256"),
                                                                           sandbox_json(other)], "next": None}))
        self.assertEqual([s.template for s in self.box.sandboxes.list()], ["auto:default:1x256", None])

    def test_every_field_of_docs_api_md_sandbox_is_an_attribute(self):
        """docs/api.md's Sandbox object (its fields are the daemon's, checked by
        daemon-patch against openapi.json): each one has its Sandbox attribute."""
        import re
        path = os.path.join(HERE, "..", "..", "..", "docs", "api.md")
        if not os.path.exists(path):
            self.skipTest("no docs/api.md beside this copy of the tests")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        fields = re.findall(r'"([a-z_]+)"', re.search(r"A \*\*Sandbox\*\*: `\{(.*?)\}`", text, re.S).group(1))
        self.assertIn("template", fields)
        values = {f: f"value of {f}" for f in fields}
        values.update(metadata={"k": "v"}, disable_internet=True)
        s = lithosbox.Sandbox(self.box, values)
        renamed = {"metadata": "labels"}
        wrong = [f for f in fields if getattr(s, renamed.get(f, f), None) != values[f]]
        self.assertEqual(wrong, [], "docs/api.md Sandbox fields the client does not read")

    def test_ids_are_one_path_segment(self):
        # An id a caller gives is percent-encoded whole: "../../v1/health" cannot reach
        # another route; the daemon decodes it and answers not found.
        self.fake.queue("GET", "/v1/sandboxes/..%2F..%2Fv1%2Fhealth", error(404, "sandbox_not_found", "no sandbox"))
        with self.assertRaises(SandboxNotFoundError):
            self.box.sandboxes.get("../../v1/health")
        self.fake.queue("GET", "/v1/snapshots/a%3Fb", error(404, "snapshot_not_found", "no snapshot"))
        with self.assertRaises(LithosBoxError):
            self.box.snapshots.get("a?b")
        self.assertEqual([r.path for r in self.fake.requests][-2:],
                         ["/v1/sandboxes/..%2F..%2Fv1%2Fhealth", "/v1/snapshots/a%3Fb"])

    def test_list_filters_and_pages(self):
        other = "22222222-2222-4333-8444-555555555555"
        self.fake.queue("GET", "/v1/sandboxes", answer(200, {"sandboxes": [sandbox_json()], "next": SID}),
                        answer(200, {"sandboxes": [sandbox_json(other)], "next": None}))
        got = self.box.sandboxes.list(state="running", labels={"job": "a"})
        self.assertEqual([s.id for s in got], [SID, other])
        first, second = [r for r in self.fake.requests if r.path == "/v1/sandboxes"]
        self.assertEqual(first.query, {"state": "running", "metadata.job": "a", "limit": "1000"})
        self.assertEqual(second.query["after"], SID)

    def test_run_shell_line_and_argv(self):
        path = f"/v1/sandboxes/{SID}/exec"
        self.fake.queue("POST", path, answer(200, {"stdout": "/root\n", "stderr": "", "exit_code": 0, "signal": None,
                                                   "timed_out": False, "output_truncated": False,
                                                   "duration_ms": 3}))
        s = self.sandbox()
        self.assertEqual(s.run("pwd").check().stdout, "/root\n")
        self.assertEqual(self.fake.last("POST", path).json(), {"cmd": "pwd"})
        r = s.run(["ls", "-l"], env={"A": "1"}, cwd="/tmp", user="1000:1000", stdin="in", timeout=2.5)
        self.assertEqual(self.fake.last("POST", path).json(),
                         {"argv": ["ls", "-l"], "env": {"A": "1"}, "cwd": "/tmp", "user": "1000:1000",
                          "stdin": "in", "timeout_s": 3})
        self.assertEqual((r.exit_code, r.duration_ms, r.cmd), (0, 3, ["ls", "-l"]))
        with self.assertRaises(TypeError):
            s.run([])
        with self.assertRaises(ValueError):
            s.run("x", timeout=-1)
        sent = len(self.fake.requests)
        with self.assertRaisesRegex(ValueError, "not UTF-8 text \\(byte 2 of 4\\)"):
            s.run("cat", stdin=b"ok\xff\xfe")
        self.assertEqual(len(self.fake.requests), sent)  # refused before any request

    def test_run_base64_output(self):
        path = f"/v1/sandboxes/{SID}/exec"
        raw = bytes(range(256))
        self.fake.queue("POST", path, answer(200, {"stdout": base64.b64encode(raw).decode(), "stderr": "",
                                                   "exit_code": 0}))
        r = self.sandbox().run("head -c 256 /x", output_encoding="base64")
        self.assertEqual(self.fake.last("POST", path).json()["output_encoding"], "base64")
        self.assertEqual(r.stdout_bytes, raw)
        with self.assertRaises(ValueError):
            self.sandbox().run("x", output_encoding="latin1")

    def test_run_streamed(self):
        path = f"/v1/sandboxes/{SID}/exec"
        self.fake.queue("POST", path, ndjson({"type": "stdout", "data": "a\n"}, {"type": "stderr", "data": "e\n"},
                                             {"type": "stdout", "data": "b\n"},
                                             {"type": "exit", "exit_code": 4, "signal": None, "timed_out": False,
                                              "duration_ms": 9}))
        out, err = [], []
        r = self.sandbox().run("x", on_stdout=out.append, on_stderr=err.append)
        self.assertTrue(self.fake.last("POST", path).json()["stream"])
        self.assertEqual((out, err), (["a\n", "b\n"], ["e\n"]))
        self.assertEqual((r.stdout, r.stderr, r.exit_code, r.duration_ms), ("a\nb\n", "e\n", 4, 9))

    def test_run_streamed_error_line_and_cut_stream(self):
        path = f"/v1/sandboxes/{SID}/exec"
        self.fake.queue("POST", path, ndjson({"type": "stdout", "data": "a"},
                                             {"type": "error", "error": {"code": "vm_error", "message": "died"}}))
        with self.assertRaises(VMError):
            self.sandbox().run("x", on_stdout=lambda _: None)
        self.fake.routes[("POST", path)] = [ndjson({"type": "stdout", "data": "a"})]
        with self.assertRaises(LithosBoxError) as cm:
            self.sandbox().run("x", on_stdout=lambda _: None)
        self.assertEqual(cm.exception.code, "stream_ended")

    def test_wrong_state_reads_the_state(self):
        path = f"/v1/sandboxes/{SID}/exec"
        self.fake.queue("POST", path, error(409, "wrong_state", "the sandbox is creating"))
        self.fake.routes[("GET", f"/v1/sandboxes/{SID}")] = [answer(200, sandbox_json(state="creating"))]
        s = self.sandbox()
        with self.assertRaises(WrongStateError) as cm:
            s.run("true")
        self.assertEqual(cm.exception.state, "creating")
        self.assertEqual(s.state, "creating")

    def test_paused_sandbox(self):
        self.fake.queue("POST", f"/v1/sandboxes/{SID}/exec", error(409, "sandbox_paused", "resume it first"))
        with self.assertRaises(SandboxPausedError) as cm:
            self.sandbox().run("true")
        self.assertEqual(cm.exception.state, "paused")

    def test_transitions(self):
        s = self.sandbox()
        for action, state, call, body in [("pause", "paused", s.pause, {}), ("resume", "running", s.resume, {}),
                                          ("sleep", "sleeping", s.sleep, {}),
                                          ("archive", "archived", s.archive, {"wait": True}),
                                          ("unarchive", "running", s.unarchive, {"wait": True}),
                                          ("reboot", "running", s.reboot, {})]:
            self.fake.queue("POST", f"/v1/sandboxes/{SID}/{action}", answer(200, sandbox_json(state=state)))
            self.assertIs(call(), s)
            self.assertEqual(s.state, state, action)
            self.assertEqual(self.fake.last("POST").json(), body, action)
        self.fake.routes[("POST", f"/v1/sandboxes/{SID}/archive")] = [
            answer(202, sandbox_json(state="archiving", progress={"phase": "memory", "bytes_done": 1,
                                                                  "bytes_total": 2}))]
        s.archive(wait=False)
        self.assertEqual(self.fake.last("POST").json(), {"wait": False})
        self.assertEqual((s.state, s.progress["bytes_total"]), ("archiving", 2))

    def test_update_and_delete(self):
        self.fake.queue("PATCH", f"/v1/sandboxes/{SID}", answer(200, sandbox_json(timeout_s=30)))
        s = self.sandbox().update(timeout_s=30, labels={"a": "b"})
        self.assertEqual(self.fake.last("PATCH").json(), {"timeout_s": 30, "metadata": {"a": "b"}})
        self.sandbox().update(clear_timeout=True)
        self.assertEqual(self.fake.last("PATCH").json(), {"timeout_s": None})
        self.fake.routes[("PATCH", f"/v1/sandboxes/{SID}")] = [answer(200, sandbox_json(autosleep_s=90))]
        t = self.sandbox().update(autosleep_s=90)
        self.assertEqual(self.fake.last("PATCH").json(), {"autosleep_s": 90})
        self.assertEqual(t.autosleep_s, 90)
        self.sandbox().update(autosleep_s=0, timeout_s=5, labels={})
        self.assertEqual(self.fake.last("PATCH").json(), {"timeout_s": 5, "autosleep_s": 0, "metadata": {}})
        self.fake.routes[("PATCH", f"/v1/sandboxes/{SID}")] = [
            error(422, "out_of_range", "autosleep_s 604801: from 0 to 604800")]
        with self.assertRaises(InvalidRequestError) as cm:
            self.sandbox().update(autosleep_s=604801)
        self.assertIn("autosleep_s 604801", str(cm.exception))
        self.fake.queue("DELETE", f"/v1/sandboxes/{SID}", answer(204))
        s.delete()
        self.assertEqual(s.state, "deleted")

    def test_logs(self):
        vmm = f"/v1/sandboxes/{SID}/logs/vmm"
        self.fake.queue("GET", vmm, answer(200, "nanovm: restored in 12 ms\n\u00e9\n", {"Content-Type": "text/plain"}))
        self.assertEqual(self.sandbox().vmm_log(), "nanovm: restored in 12 ms\n\u00e9\n")
        self.assertEqual(self.fake.last("GET", vmm).query, {})
        self.fake.routes[("GET", vmm)] = [answer(200, b"end\xff", {"Content-Type": "text/plain"})]
        self.assertEqual(self.sandbox().vmm_log(tail_bytes=4), "end\ufffd")  # undecodable bytes replaced
        self.assertEqual(self.fake.last("GET", vmm).query, {"tail_bytes": "4"})
        self.fake.routes[("GET", vmm)] = [error(422, "out_of_range", "tail_bytes 0: from 1 to 1048576")]
        with self.assertRaises(InvalidRequestError):
            self.sandbox().vmm_log(tail_bytes=0)
        self.fake.routes[("GET", vmm)] = [error(404, "sandbox_not_found", "no sandbox")]
        with self.assertRaises(SandboxNotFoundError):
            self.sandbox().vmm_log()
        console = f"/v1/sandboxes/{SID}/logs/console"
        self.fake.queue("GET", console, answer(200, "login: ", {"Content-Type": "text/plain"}))
        self.assertEqual(self.sandbox().console_log(tail_bytes=7), "login: ")
        self.assertEqual(self.fake.last("GET", console).query, {"tail_bytes": "7"})

    def test_fork_shapes(self):
        kid = lambda i: {"sandbox": sandbox_json(f"{i}" * 8 + SID[8:], parent_id=SID), "error": None}  # noqa: E731
        path = f"/v1/sandboxes/{SID}/fork"
        self.fake.queue("POST", path, answer(200, {"children": [kid(3)]}))
        one = self.sandbox().fork()
        self.assertIsInstance(one, Sandbox)
        self.assertEqual(self.fake.last("POST", path).json(), {"n": 1})
        self.assertEqual(one.parent_id, SID)
        listed = self.sandbox().fork(n=1)
        self.assertIsInstance(listed, list)
        self.assertEqual(len(listed), 1)
        self.fake.routes[("POST", path)] = [answer(200, {"children": [kid(3), kid(4), kid(5), kid(6)]})]
        four = self.sandbox().fork(n=4)
        self.assertEqual(self.fake.last("POST", path).json(), {"n": 4})
        self.assertEqual(len({c.id for c in four}), 4)

    def test_fork_partial_failure(self):
        path = f"/v1/sandboxes/{SID}/fork"
        self.fake.queue("POST", path, answer(200, {"children": [
            {"sandbox": sandbox_json("33333333" + SID[8:]), "error": None},
            {"sandbox": None, "error": {"code": "over_capacity", "message": "16 sandboxes"}}]}))
        with self.assertRaises(ForkError) as cm:
            self.sandbox().fork(n=2)
        self.assertEqual([s.id for s in cm.exception.sandboxes], ["33333333" + SID[8:]])
        self.assertIs(type(cm.exception.errors[0]), OverCapacityError)
        self.assertIn("1 of 2", str(cm.exception))
        self.fake.routes[("POST", path)] = [error(503, "over_capacity", "no room")]
        with self.assertRaises(OverCapacityError):
            self.sandbox().fork()


class FilesTest(FakeCase):
    def test_write_read_list_remove(self):
        files = f"/v1/sandboxes/{SID}/files"
        self.fake.queue("PUT", files, answer(200, {"path": "/work/a", "name": "a", "type": "file", "size": 3,
                                                   "mode": 0o600}))
        info = self.sandbox().files.write("/work/a", "héy", mode=0o600)
        req = self.fake.last("PUT")
        self.assertEqual((req.query, req.body), ({"path": "/work/a", "mode": "600"}, "héy".encode()))
        self.assertEqual((info.size, info.mode), (3, 0o600))
        self.fake.queue("GET", files, answer(200, "First result\n".encode()))
        self.assertEqual(self.sandbox().files.read("/work/a"), "First result\n")
        self.assertEqual(self.fake.last("GET").query, {"path": "/work/a"})
        self.fake.routes[("GET", files)] = [answer(200, b"\xff\x00")]
        self.assertEqual(self.sandbox().files.read_bytes("/x"), b"\xff\x00")
        with self.assertRaises(UnicodeDecodeError):
            self.sandbox().files.read("/x")
        self.fake.queue("GET", files + "/list", answer(200, {"path": "/work", "entries": [
            {"path": "/work/a", "name": "a", "type": "file", "size": 3, "mode": 420, "mtime": "t"}]}))
        self.assertEqual([e.name for e in self.sandbox().files.list("/work")], ["a"])
        self.fake.queue("DELETE", files, answer(204))
        self.sandbox().files.remove("/work", recursive=True)
        self.assertEqual(self.fake.last("DELETE").query, {"path": "/work", "recursive": "true"})
        self.sandbox().files.remove("/work/a")
        self.assertEqual(self.fake.last("DELETE").query, {"path": "/work/a"})
        self.fake.queue("POST", files + "/mkdir", answer(201, {}))
        self.sandbox().files.mkdir("/w/x")
        self.assertEqual(self.fake.last("POST").json(), {"path": "/w/x", "parents": True})

    def test_streamed_variants(self):
        files = f"/v1/sandboxes/{SID}/files"
        data = os.urandom(3 << 20)
        self.fake.queue("GET", files, answer(200, data))
        sink = io.BytesIO()
        self.assertEqual(self.sandbox().files.read_to("/big", sink), len(data))
        self.assertEqual(sink.getvalue(), data)
        self.fake.queue("PUT", files, answer(200, {"path": "/big", "name": "big", "type": "file", "size": len(data),
                                                   "mode": 420}))
        self.sandbox().files.write_from("/big", io.BytesIO(data))
        req = self.fake.last("PUT")
        self.assertEqual((req.body == data, req.headers.get("Content-Length")), (True, str(len(data))))

        class Pipe(io.RawIOBase):  # not seekable: sent chunked
            def __init__(self):
                self.left = data

            def readable(self):
                return True

            def readinto(self, b):
                n = min(len(b), len(self.left), 100000)
                b[:n] = self.left[:n]
                self.left = self.left[n:]
                return n

        self.sandbox().files.write_from("/big", io.BufferedReader(Pipe()))
        req = self.fake.last("PUT")
        self.assertEqual((req.body == data, req.headers.get("Transfer-Encoding")), (True, "chunked"))

    def test_path_errors(self):
        files = f"/v1/sandboxes/{SID}/files"
        self.fake.queue("GET", files + "/stat", error(404, "path_not_found", "no such path"))
        self.assertFalse(self.sandbox().files.exists("/nope"))
        with self.assertRaises(FileNotFoundError):
            self.sandbox().files.stat("/nope")
        self.fake.queue("PUT", files, error(413, "file_too_large", "over 256 MiB"))
        with self.assertRaises(FileTooLargeError):
            self.sandbox().files.write("/x", b"1")
        with self.assertRaises(ValueError):
            self.sandbox().files.write("/x", b"1", mode=0o17777)


class SnapshotsTest(FakeCase):
    def test_snapshot_bodies(self):
        path = f"/v1/sandboxes/{SID}/snapshots"
        self.fake.queue("POST", path, answer(201, snapshot_json()))
        s = self.sandbox()
        snap = s.snapshot(wait_durable=True)
        self.assertEqual(self.fake.last("POST", path).json(), {"wait_durable": True, "leave_paused": False})
        self.assertEqual((snap.id, snap.durable), (SNAP, True))
        s.snapshot(leave_paused=True)
        self.assertEqual(self.fake.last("POST", path).json(), {"wait_durable": False, "leave_paused": True})
        self.assertEqual(s.state, "sleeping")

    def test_wait_durable_loops_then_times_out(self):
        path = f"/v1/snapshots/{SNAP}/wait"
        self.fake.queue("POST", path, answer(200, snapshot_json(durable=False, state="saving")),
                        answer(200, snapshot_json()))
        snap = self.box.snapshots.wait_durable(SNAP, timeout=30)
        self.assertTrue(snap.durable)
        waits = [r.json() for r in self.fake.requests if r.path == path]
        self.assertEqual(len(waits), 2)
        self.assertTrue(all(0 < w["timeout_s"] <= 30 for w in waits))
        self.fake.routes[("POST", path)] = [answer(200, snapshot_json(durable=False, state="saving"))]
        with self.assertRaises(LithosBoxTimeoutError) as cm:
            self.box.snapshots.wait_durable(SNAP, timeout=0)
        self.assertFalse(cm.exception.snapshot.durable)
        self.fake.routes[("POST", path)] = [answer(200, snapshot_json(durable=False, state="error", error="disk"))]
        with self.assertRaises(LithosBoxError) as cm2:
            self.box.snapshots.wait_durable(SNAP)
        self.assertEqual(cm2.exception.code, "snapshot_failed")

    def test_restore_list_delete(self):
        self.fake.queue("POST", f"/v1/snapshots/{SNAP}/restore", answer(201, sandbox_json(snapshot_id=SNAP)))
        r = self.box.snapshots.restore(SNAP, labels={"k": "v"})
        self.assertEqual(self.fake.last("POST").json(), {"metadata": {"k": "v"}})
        self.assertEqual(r.snapshot_id, SNAP)
        self.fake.queue("GET", "/v1/snapshots", answer(200, {"snapshots": [snapshot_json()], "next": None}))
        self.assertEqual([s.id for s in self.box.snapshots.list()], [SNAP])
        self.fake.queue("DELETE", f"/v1/snapshots/{SNAP}", answer(204), error(404, "snapshot_not_found", "gone"))
        self.box.snapshots.delete(SNAP)
        with self.assertRaises(SnapshotNotFoundError):
            self.box.snapshots.delete(SNAP)


class SessionsAndCommandsTest(FakeCase):
    def test_session(self):
        base = f"/v1/sandboxes/{SID}/sessions"
        self.fake.queue("POST", base, answer(201, {"id": "s1", "sandbox_id": SID, "created_at": "t"}))
        self.fake.queue("POST", base + "/s1/exec", answer(200, {"stdout": "/tmp\n", "stderr": "", "exit_code": 0}))
        self.fake.queue("DELETE", base + "/s1", answer(204))
        with self.sandbox().session(cwd="/", env={"A": "1"}) as sess:
            self.assertEqual(self.fake.last("POST", base).json(), {"cwd": "/", "env": {"A": "1"}})
            self.assertEqual(sess.run("cd /tmp; pwd", timeout=5).stdout, "/tmp\n")
            self.assertEqual(self.fake.last("POST", base + "/s1/exec").json(), {"cmd": "cd /tmp; pwd", "timeout_s": 5})
            with self.assertRaises(TypeError):
                sess.run(["pwd"])  # type: ignore[arg-type]
        self.assertEqual(self.fake.last().method, "DELETE")
        self.fake.queue("POST", base + "/s2/exec", error(404, "session_not_found", "no session s2"))
        gone = lithosbox.Session(self.sandbox(), {"id": "s2"})
        with self.assertRaises(SessionNotFoundError):
            gone.run("true")

    def test_background_command(self):
        base = f"/v1/sandboxes/{SID}/commands"
        running = {"id": "c1", "sandbox_id": SID, "state": "running", "exit_code": None, "signal": None,
                   "timed_out": False, "started_at": "t", "ended_at": None}
        exited = dict(running, state="exited", exit_code=0, ended_at="t2")
        self.fake.queue("POST", base, answer(201, running))
        cmd = self.sandbox().run("cat", background=True, env={"A": "1"}, timeout=100)
        self.assertEqual(self.fake.last("POST", base).json(), {"cmd": "cat", "env": {"A": "1"}, "timeout_s": 100})
        self.assertEqual((cmd.id, cmd.state), ("c1", "running"))
        self.fake.queue("POST", base + "/c1/stdin", answer(204))
        cmd.send_stdin("hello")
        cmd.close_stdin()
        stdin_reqs = [r for r in self.fake.requests if r.path == base + "/c1/stdin"]
        self.assertEqual([(r.body, r.query) for r in stdin_reqs], [(b"hello", {}), (b"", {"eof": "true"})])
        self.fake.queue("POST", base + "/c1/wait", answer(200, running), answer(200, exited))
        self.fake.queue("GET", base + "/c1/output", ndjson({"type": "stdout", "data": "hello"},
                                                           {"type": "exit", "exit_code": 0, "signal": None,
                                                            "timed_out": False}))
        res = cmd.wait()
        self.assertEqual((res.stdout, res.exit_code, cmd.state), ("hello", 0, "exited"))
        self.assertEqual(self.fake.last("GET", base + "/c1/output").query, {"follow": "false"})
        self.fake.routes[("POST", base + "/c1/wait")] = [answer(200, running)]
        with self.assertRaises(LithosBoxTimeoutError):
            cmd.wait(timeout=0)
        self.fake.queue("POST", base + "/c1/kill", answer(200, dict(exited, exit_code=137, signal=9)))
        cmd.kill()
        self.assertEqual((self.fake.last("POST", base + "/c1/kill").json(), cmd.signal), ({"signal": 9}, 9))
        self.fake.queue("GET", base + "/c9", error(404, "command_not_found", "no command c9"))
        with self.assertRaises(CommandNotFoundError):
            self.sandbox().commands.get("c9")
        with self.assertRaises(TypeError):
            self.sandbox().run("cat", background=True, stdin="x")


class TemplatesAndRetriesTest(FakeCase):
    def test_template_building_is_waited_out(self):
        building = error(503, "template_building", "template py is building", {"Retry-After": "0"})
        self.fake.queue("POST", "/v1/sandboxes", building, building, answer(201, sandbox_json(template="py")))
        s = self.box.sandboxes.create(template="py")
        self.assertEqual(s.template, "py")
        self.assertEqual(len([r for r in self.fake.requests if r.path == "/v1/sandboxes"]), 3)

    def test_template_building_past_the_wait(self):
        self.box.template_wait = 0.3
        self.fake.queue("POST", "/v1/sandboxes", error(503, "template_building", "building", {"Retry-After": "1"}))
        t0 = time.monotonic()
        with self.assertRaises(TemplateBuildingError) as cm:
            self.box.sandboxes.create(template="py")
        self.assertLess(time.monotonic() - t0, 2.0)
        self.assertIn("template_wait", str(cm.exception))

    def test_templates(self):
        tj = {"name": "py", "state": "building", "error": None, "image": "python:3.12-slim", "image_digest": None,
              "cpus": 1, "memory_mb": 256, "created_at": "t"}
        self.fake.queue("POST", "/v1/templates", answer(202, tj))
        t = self.box.templates.create("py", image="python:3.12-slim", cpus=1, memory_mb=256, setup=["true"])
        self.assertEqual(self.fake.last("POST").json(), {"name": "py", "image": "python:3.12-slim", "cpus": 1,
                                                         "memory_mb": 256, "setup": ["true"]})
        self.assertEqual(t.state, "building")
        self.fake.queue("GET", "/v1/templates/py", answer(200, dict(tj, state="ready")))
        self.assertEqual(t.wait_ready(timeout=5).state, "ready")
        self.fake.queue("GET", "/v1/templates", answer(200, {"templates": [tj]}))
        self.assertEqual([x.name for x in self.box.templates.list()], ["py"])
        self.fake.queue("DELETE", "/v1/templates/py", answer(204))
        self.box.templates.delete("py", force=True)
        self.assertEqual(self.fake.last("DELETE").query, {"force": "true"})
        self.fake.queue("GET", "/v1/templates/nope", error(404, "template_not_found", "no template nope"))
        with self.assertRaises(TemplateNotFoundError):
            self.box.templates.get("nope")

    def test_busy_is_retried(self):
        self.box._t.BUSY_FIRST_DELAY_S = 0.01
        self.fake.routes[("GET", f"/v1/sandboxes/{SID}")] = [error(503, "busy", "queue full"),
                                                             answer(200, sandbox_json())]
        self.assertEqual(self.box.sandboxes.get(SID).id, SID)
        self.fake.routes[("GET", f"/v1/sandboxes/{SID}")] = [error(503, "busy", "queue full")]
        with self.assertRaises(BusyError):
            self.box.sandboxes.get(SID)

    def test_keep_alive_and_close(self):
        for _ in range(5):
            self.box.sandboxes.get(SID)
        self.assertEqual(self.fake.connections, 1)
        with self.box as b:
            b.sandboxes.get(SID)
        with self.assertRaises(LithosBoxError) as cm:
            self.box.sandboxes.get(SID)
        self.assertEqual(cm.exception.code, "client_closed")


class TcpTest(FakeCase):
    tcp = True

    def test_token_header(self):
        self.box.sandboxes.get(SID)
        self.assertEqual(self.fake.last().headers.get("Authorization"), "Bearer t0k")
        self.fake.routes[("GET", f"/v1/sandboxes/{SID}")] = [error(401, "unauthorized", "bad token")]
        with self.assertRaises(UnauthorizedError):
            self.box.sandboxes.get(SID)


class SurfaceTest(unittest.TestCase):
    """Every public name has a docstring, every public method and property type hints,
    and docs/python.md names every public method and property."""

    def test_docstrings_and_docs(self):
        import inspect
        docs_path = os.path.join(HERE, "..", "..", "..", "docs", "python.md")
        docs = None
        if os.path.exists(docs_path):  # (absent from an installed copy of the tests)
            with open(docs_path, encoding="utf-8") as f:
                docs = f.read()
        missing = []
        for name in lithosbox.__all__:
            obj = getattr(lithosbox, name)
            self.assertTrue(inspect.getdoc(obj), name)
            if docs is not None and f"`{name}" not in docs:
                missing.append(name)
            if not inspect.isclass(obj) or issubclass(obj, BaseException):
                continue
            for attr, member in vars(obj).items():
                if attr.startswith("_"):
                    continue
                if isinstance(member, property):
                    self.assertTrue(inspect.getdoc(member), f"{name}.{attr} (a property) has no docstring")
                    self.assertIn("return", member.fget.__annotations__, f"{name}.{attr} has no type hint")
                    if docs is not None and f"`{attr}`" not in docs:
                        missing.append(f"{name}.{attr}")
                    continue
                if not callable(member):
                    continue
                self.assertTrue(inspect.getdoc(member), f"{name}.{attr} has no docstring")
                hints = member.__annotations__
                unhinted = [p for p in inspect.signature(member).parameters if p not in ("self", "cls")
                            and p not in hints] + ([] if "return" in hints else ["return"])
                self.assertEqual(unhinted, [], f"{name}.{attr}: no type hints for these")
                if docs is not None and f"{attr}(" not in docs:
                    missing.append(f"{name}.{attr}")
        self.assertEqual(missing, [], "public names docs/python.md does not name")


class CatalogueTest(unittest.TestCase):
    def test_every_code_of_docs_api_md_has_its_class(self):
        """docs/api.md's error table (the daemon's catalogue, checked against the daemon
        by daemon-docs): every code has its entry in the mapping."""
        import re
        from lithosbox.errors import _BY_CODE
        path = os.path.join(HERE, "..", "..", "..", "docs", "api.md")
        if not os.path.exists(path):
            self.skipTest("no docs/api.md beside this copy of the tests")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        section = text[text.index("\n## Errors"):]
        section = section[:section.index("\n## ", 5)]
        codes = re.findall(r"^\| `([a-z_]+)` \| \d{3} \|", section, re.M)
        self.assertGreater(len(codes), 25)
        self.assertEqual([c for c in codes if c not in _BY_CODE], [], "codes of docs/api.md without a class")


class DiscoveryTest(unittest.TestCase):
    def test_no_daemon_on_the_socket(self):
        path = free_socket_path()
        box = LithosBox(state_dir=os.path.dirname(path))
        with self.assertRaises(DaemonNotRunningError) as cm:
            box.sandboxes.list()
        msg = str(cm.exception)
        self.assertIn(path, msg)
        self.assertIn("no such socket", msg)
        self.assertIn("nanovm daemon --state-dir", msg)
        self.assertIsInstance(cm.exception, ConnectionError)

    def test_refused_tcp(self):
        box = LithosBox(url=f"http://127.0.0.1:{refused_port()}", token="x")
        with self.assertRaises(DaemonNotRunningError) as cm:
            box.health()
        self.assertIn("connection refused", str(cm.exception))

    def test_environment_rule(self):
        env = {k: v for k, v in os.environ.items()
               if k not in ("LITHOSBOX_URL", "LITHOSBOX_TOKEN", "NANOVM_URL", "NANOVM_TOKEN", "NANOVM_STATE_DIR")}
        with mock.patch.dict(os.environ, env, clear=True):
            os.environ["NANOVM_STATE_DIR"] = "/srv/nv"
            self.assertEqual(find_endpoint().unix_socket, "/srv/nv/nanovmd.sock")
            del os.environ["NANOVM_STATE_DIR"]
            os.environ["XDG_DATA_HOME"] = "/xdg"
            if os.geteuid() == 0:
                self.assertEqual(default_state_dir(), "/var/lib/nanovm")
            else:
                self.assertEqual(default_state_dir(), "/xdg/nanovm")
            os.environ["LITHOSBOX_URL"] = "unix:///run/x.sock"
            self.assertEqual(find_endpoint().unix_socket, "/run/x.sock")
            os.environ["LITHOSBOX_URL"] = "http://127.0.0.1:8080"
            os.environ["LITHOSBOX_TOKEN"] = "abc"
            ep = find_endpoint()
            self.assertEqual((ep.host, ep.port, ep.token), ("127.0.0.1", 8080, "abc"))
            os.environ["LITHOSBOX_URL"] = "ftp://x"
            with self.assertRaises(LithosBoxError):
                find_endpoint()
            del os.environ["LITHOSBOX_URL"]
            os.environ["NANOVM_URL"] = "http://127.0.0.1:9"
            os.environ["NANOVM_STATE_DIR"] = "/nonexistent-state"
            with self.assertRaises(LithosBoxError) as cm:
                find_endpoint()
            self.assertIn("NANOVM_URL is set but there is no token", str(cm.exception))
            os.environ["NANOVM_TOKEN"] = "tk"
            self.assertEqual(find_endpoint().token, "tk")


if __name__ == "__main__":
    unittest.main()
