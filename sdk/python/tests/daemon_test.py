#!/usr/bin/env python3
"""lithosbox against a real nanovmd with real guests (inside the test host:
``tools/testhost/run --with-daemon -- python3 sdk/python/tests/daemon_test.py``):
every client method whose endpoint the daemon has, every error class it can provoke,
the context manager and a second client reconnecting by id. 1-vCPU 256 MiB
sandboxes. Methods whose endpoint has not landed are skipped by name, with the route
they wait for. TAP."""

import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live import SHAPE, Live, equal, expect  # noqa: E402

from lithosbox import (CommandFailedError, CommandTimedOutError, DaemonNotRunningError,  # noqa: E402
                       InvalidRequestError, LithosBox, LithosBoxError, LithosBoxTimeoutError,
                       PathConflictError, PathNotFoundError, SandboxArchivedError, SandboxNotFoundError,
                       SandboxPausedError, Sandbox, SessionNotFoundError, SnapshotNotFoundError,
                       TemplateBuildingError, TemplateNotFoundError, WrongStateError)

SB = "/v1/sandboxes/{id}"


def main() -> int:
    t = Live()
    box = LithosBox()
    made = []  # every sandbox made, deleted at the end whatever happens
    snaps = []
    st = {}

    def create():
        s = box.sandboxes.create(**SHAPE, labels={"t": "sdk"}, timeout_s=3600)
        made.append(s)
        st["sb"] = s
        return equal((s.state, s.cpus, s.memory_mb, s.labels), ("running", 1, 256, {"t": "sdk"})) and s.end_at

    try:
        t.check("the client finds the daemon by NANOVM_STATE_DIR; health answers",
                lambda: box.address.endswith("/nanovmd.sock") and box.health()["status"] == "ok")
        if not t.check("sandboxes.create(cpus=1, memory_mb=256, labels, timeout_s): running", create):
            return t.done()
        sb = st["sb"]

        def second_client():
            with LithosBox() as other:
                again = other.sandboxes.get(sb.id)
                return equal((again.id, again.state), (sb.id, "running")) and \
                    equal(again.run("echo $((6*7))").check().stdout, "42\n")
        t.check("a second client (a context manager) gets the sandbox by id and runs in it", second_client)
        t.check("sandboxes.list(state=, labels=) finds it; another label finds nothing",
                lambda: equal([s.id for s in box.sandboxes.list(state="running", labels={"t": "sdk"})], [sb.id])
                and equal(box.sandboxes.list(labels={"t": "other"}), []))
        t.check("update(timeout_s=, labels=) and refresh()",
                lambda: sb.update(timeout_s=7200, labels={"t": "sdk", "k": "v"}) and
                equal((sb.refresh().timeout_s, sb.labels["k"]), (7200, "v")))

        # --- commands ---
        def run_result():
            r = sb.run("echo hi; echo err >&2; exit 3")
            return equal((r.stdout, r.stderr, r.exit_code, r.timed_out), ("hi\n", "err\n", 3, False))
        t.check("run(shell line): stdout, stderr, exit code 3", run_result)

        def check_raises():
            e = expect(CommandFailedError, lambda: sb.run("echo out; echo why >&2; exit 5").check(),
                       "exit status 5", "why", "echo out")
            return equal((e.exit_code, e.stdout, e.stderr), (5, "out\n", "why\n"))
        t.check("check() raises CommandFailedError: the command, its status, the output's tail; it is a result",
                check_raises)
        t.check("run(argv, env=, cwd=, user=)",
                lambda: equal(sb.run(["sh", "-c", "echo $FOO; pwd; id -u"], env={"FOO": "bar"}, cwd="/tmp",
                                     user=1000).check().stdout, "bar\n/tmp\n1000\n"))
        t.check("run(stdin=)", lambda: equal(sb.run(["cat"], stdin="from stdin").stdout, "from stdin"))
        t.check("run(timeout=1) of sleep 30: timed_out, check() raises CommandTimedOutError (a TimeoutError)",
                lambda: isinstance(expect(CommandTimedOutError, lambda: sb.run("sleep 30", timeout=1).check(),
                                          "timed out"), TimeoutError))
        t.check("run of a missing program: exit code 127", lambda: equal(sb.run(["no-such-program"]).exit_code, 127))

        def streamed():
            out, err = [], []
            r = sb.run("echo a; sleep 1; echo b >&2; echo c", on_stdout=out.append, on_stderr=err.append)
            return equal(("".join(out), "".join(err), r.stdout, r.exit_code), ("a\nc\n", "b\n", "a\nc\n", 0))
        t.check("run(on_stdout=, on_stderr=): output as it arrives, then the whole result", streamed)

        name = "run(output_encoding='base64'): the exact bytes"
        try:
            r = sb.run("printf '\\377\\000\\001'", output_encoding="base64")
            t.ok(r.stdout_bytes == b"\xff\x00\x01", name, r.stdout_bytes)
        except InvalidRequestError as e:
            if e.code == "unknown_field":
                t.skip(name, "waiting for the daemon's exec output_encoding (answered unknown_field)")
            else:
                t.ok(False, name, repr(e))
        except Exception as e:  # noqa: BLE001
            t.ok(False, name, repr(e))

        # --- files ---
        f = sb.files
        t.check("files.write(str) makes /work; read() gives it back",
                lambda: equal(f.write("/work/result.txt", "First result\n").size, 13) and
                equal(f.read("/work/result.txt"), "First result\n"))
        blob = bytes(range(256)) * 16
        t.check("files.write(bytes, mode=0o600), read_bytes(), stat()",
                lambda: f.write("/work/bin", blob, mode=0o600) and equal(f.read_bytes("/work/bin"), blob) and
                equal((f.stat("/work/bin").size, f.stat("/work/bin").mode & 0o777), (4096, 0o600)))
        t.check("files.mkdir, list, exists",
                lambda: f.mkdir("/work/d/e") is None and
                {"result.txt", "bin", "d"} <= {e.name for e in f.list("/work")} and f.exists("/work/d/e")
                and not f.exists("/work/none"))
        t.check("files.read of a missing path: PathNotFoundError (a FileNotFoundError)",
                lambda: isinstance(expect(PathNotFoundError, lambda: f.read("/work/none")), FileNotFoundError))
        t.check("files.remove of a non-empty directory: PathConflictError; recursive=True removes it",
                lambda: expect(PathConflictError, lambda: f.remove("/work/d")) and
                f.remove("/work/d", recursive=True) is None and not f.exists("/work/d"))
        big = os.urandom(3 << 20)

        def streamed_files():
            f.write_from("/work/big", io.BytesIO(big))
            sink = io.BytesIO()
            return equal(f.read_to("/work/big", sink), len(big)) and sink.getvalue() == big
        t.check("files.write_from / read_to a 3 MiB file over file objects", streamed_files)

        def chunked_upload():
            r, w = os.pipe()
            with os.fdopen(r, "rb") as reader:
                with os.fdopen(w, "wb") as writer:
                    writer.write(big[:60000])  # fits the pipe: no writer thread needed
                return equal(f.write_from("/work/piped", reader).size, 60000) and \
                    equal(f.read_bytes("/work/piped"), big[:60000])
        t.check("files.write_from a pipe (size unknown: sent chunked)", chunked_upload)

        # --- pause, resume ---
        def paused():
            equal(sb.pause().state, "paused")
            e = expect(SandboxPausedError, lambda: sb.run("true"), "resume")
            equal(e.state, "paused")
            expect(SandboxPausedError, lambda: f.read("/work/result.txt"))
            return equal(sb.resume().state, "running") and equal(sb.run("echo back").stdout, "back\n")
        t.check("pause(): run and files raise SandboxPausedError (state paused); resume() runs again", paused)

        # --- snapshots ---
        def snapshot_then_wait():
            s = sb.snapshot()
            snaps.append(s)
            d = box.snapshots.wait_durable(s.id, timeout=300)
            st["snap"] = d
            return equal((d.id, d.durable, d.state, d.cpus, d.memory_mb), (s.id, True, "ready", 1, 256))
        t.check("snapshot() then snapshots.wait_durable(id): durable", snapshot_then_wait)
        t.check("snapshots.get, snapshots.list, sandbox.snapshots()",
                lambda: "snap" in st and equal(box.snapshots.get(st["snap"].id).durable, True) and
                st["snap"].id in {s.id for s in box.snapshots.list()} and
                st["snap"].id in {s.id for s in sb.snapshots()})

        def leave_paused():
            s = sb.snapshot(wait_durable=True, leave_paused=True)
            snaps.append(s)
            return equal((s.durable, sb.refresh().state), (True, "sleeping")) and \
                equal(sb.run("cat /work/result.txt").stdout, "First result\n") and \
                equal(sb.refresh().state, "running")
        t.check("snapshot(wait_durable=True, leave_paused=True): sleeping; the next run wakes it", leave_paused)

        def restore():
            r = box.snapshots.restore(st["snap"].id, labels={"t": "restored"})
            made.append(r)
            return equal((r.state, r.snapshot_id, r.labels), ("running", st["snap"].id, {"t": "restored"})) and \
                equal(r.files.read("/work/result.txt"), "First result\n") and r.delete() is None
        t.check("snapshots.restore(id, labels=): a running sandbox with the file; delete() it", restore)

        # --- forks ---
        def fork_one():
            c = sb.fork()
            made.append(c)
            return isinstance(c, Sandbox) and equal(c.parent_id, sb.id) and \
                equal(c.files.read("/work/result.txt"), "First result\n")
        t.check("fork(): one Sandbox, the parent's file in it", fork_one)

        def fork_two():
            kids = sb.fork(n=2)
            made.extend(kids)
            return isinstance(kids, list) and equal(len({k.id for k in kids}), 2)
        t.check("fork(n=2): a list of two", fork_two)

        # --- endpoints landing this session ---
        def session():
            with sb.session(cwd="/tmp") as s:
                s.run("cd /work && export X=kept")
                r = s.run("pwd; echo $X")
                listed = [x.id for x in sb.sessions()]
                sid = s.id
            return equal(r.stdout, "/work\nkept\n") and sid in listed and \
                expect(SessionNotFoundError, lambda: s.run("true")) is not None
        t.check("session(): cwd and exported variables carry over; closed at the with's end", session,
                needs=("POST " + SB + "/sessions", "POST " + SB + "/sessions/{}/exec", "DELETE " + SB + "/sessions/{}"))

        def background():
            c = sb.run("read line; echo got $line; sleep 1; echo done", background=True)
            equal(c.state, "running")
            c.send_stdin("hello\n", eof=True)
            r = c.wait(timeout=60)
            k = sb.run("sleep 300", background=True)
            k.kill()
            return equal((r.stdout, r.exit_code), ("got hello\ndone\n", 0)) and \
                c.id in {x.id for x in sb.commands.list()} and \
                equal(sb.commands.get(k.id).refresh().state, "exited")
        t.check("run(background=True): send_stdin, wait, kill, commands.list/get", background,
                needs=("POST " + SB + "/commands", "POST " + SB + "/commands/{}/wait",
                       "POST " + SB + "/commands/{}/stdin", "POST " + SB + "/commands/{}/kill",
                       "GET " + SB + "/commands/{}/output"))

        def command_handle():
            c = sb.run("cat; echo end >&2", background=True)
            late = expect(LithosBoxTimeoutError, lambda: c.wait(timeout=1), "still runs")
            c.send_stdin("part\n")
            c.close_stdin()
            seen = []
            r = c.stream(on_stdout=seen.append)
            return late is not None and not c.running and \
                equal((r.stdout, r.stderr, r.exit_code, "".join(seen)), ("part\n", "end\n", 0, "part\n")) and \
                equal((c.output().stdout, c.output().exit_code), ("part\n", 0))
        t.check("a background command: wait(timeout=1) raises LithosBoxTimeoutError and it runs on; "
                "close_stdin, stream(on_stdout=), output()", command_handle,
                needs=("POST " + SB + "/commands", "POST " + SB + "/commands/{}/wait",
                       "POST " + SB + "/commands/{}/stdin", "GET " + SB + "/commands/{}/output"))
        t.check("metrics(), console_log(), vmm_log(), wait_state('running')",
                lambda: equal(sb.metrics().get("state"), "running") and isinstance(sb.console_log(4096), str) and
                len(sb.vmm_log(4096).encode()) <= 4096 and sb.wait_state("running", timeout=30) is sb)

        def sleep_wake():
            return equal(sb.sleep().state, "sleeping") and equal(sb.run("echo awake").stdout, "awake\n")
        t.check("sleep(): sleeping; the next run wakes it", sleep_wake, needs=("POST " + SB + "/sleep",))

        def archive():
            equal(sb.archive().state, "archived")
            e = expect(SandboxArchivedError, lambda: sb.run("true"), "unarchive")
            equal(e.state, "archived")
            return equal(sb.unarchive().state, "running") and \
                equal(f.read("/work/result.txt"), "First result\n")
        t.check("archive(): SandboxArchivedError on run; unarchive() keeps the file", archive,
                needs=("POST " + SB + "/archive", "POST " + SB + "/unarchive"))

        def reboot():
            return equal(sb.reboot().state, "running") and equal(f.read("/work/result.txt"), "First result\n")
        t.check("reboot(): running again, the file kept", reboot, needs=("POST " + SB + "/reboot",))

        def templates():
            tpl = box.templates.create("sdk-test", cpus=1, memory_mb=256, setup=["echo baked > /root/baked"])
            with LithosBox(template_wait=0) as impatient:  # the wait the client does for the caller, off
                expect(TemplateBuildingError, lambda: impatient.sandboxes.create(template="sdk-test"), "template_wait")
            tpl.wait_ready(timeout=240)
            s = box.sandboxes.create(template="sdk-test")
            made.append(s)
            listed = {x.name: x for x in box.templates.list()}
            ok = equal((s.state, s.files.read("/root/baked")), ("running", "baked\n")) and \
                equal(box.templates.get("sdk-test").state, "ready") and "sdk-test" in listed and \
                any(x.implicit for x in listed.values())
            e = expect(WrongStateError, lambda: tpl.delete())
            equal(e.code, "template_in_use")
            s.delete()
            tpl.delete()
            return ok and expect(TemplateNotFoundError, lambda: box.templates.get("sdk-test"))
        t.check("templates.create(setup=); while it builds a client with template_wait=0 gets "
                "TemplateBuildingError; wait_ready(); a sandbox from it has the setup's file; list (the implicit "
                "template too), get; delete: template_in_use while used, then TemplateNotFoundError", templates,
                needs=("POST /v1/templates", "GET /v1/templates/{}", "DELETE /v1/templates/{}"))

        # --- errors ---
        t.check("InvalidRequestError for cpus=9 (out_of_range)",
                lambda: equal(expect(InvalidRequestError, lambda: box.sandboxes.create(cpus=9), "cpus").code,
                              "out_of_range"))
        t.check("SnapshotNotFoundError for an unknown snapshot id",
                lambda: expect(SnapshotNotFoundError,
                               lambda: box.snapshots.get("00000000-0000-4000-8000-000000000000")))
        t.check("DaemonNotRunningError where no daemon is, saying how to start it",
                lambda: expect(DaemonNotRunningError,
                               lambda: LithosBox(state_dir="/nonexistent-nvd").sandboxes.list(),
                               "nanovm daemon", "/nonexistent-nvd/nanovmd.sock"))

        def deleted():
            sid = sb.id
            sb.delete()
            return expect(SandboxNotFoundError, lambda: box.sandboxes.get(sid)) and \
                expect(SandboxNotFoundError, lambda: sb.run("true"))
        t.check("delete(): SandboxNotFoundError after, for get and run", deleted)

        def wrong_state_on_deleted_snapshot():
            s = st["snap"]
            s.delete()
            return expect(SnapshotNotFoundError, lambda: box.snapshots.restore(s.id))
        t.check("snapshots.delete; restore of it: SnapshotNotFoundError", wrong_state_on_deleted_snapshot)
    finally:
        for s in made:
            try:
                s.delete()
            except LithosBoxError:
                pass
        for s in snaps:
            try:
                box.snapshots.delete(s.id)
            except LithosBoxError:
                pass
        left = box.sandboxes.list()
        t.ok(not left and not box.snapshots.list(), "every sandbox and snapshot deleted at the end",
             [s.id for s in left])
        box.close()
    return t.done()


if __name__ == "__main__":
    sys.exit(main())
