#!/usr/bin/env python3
"""The usage shapes of the documents nanovm started from (/work/shared/seeds), written
anew and run end to end against a real nanovmd (inside the test host:
``tools/testhost/run --with-daemon -- python3 sdk/python/tests/seed_usage_test.py``):
reconnect by id; a plain run keeps no shell state, a session does; save, restore, read
back; snapshot without waiting then wait_durable; leave_paused then a command wakes
it; fork one (the parent keeps its file), fork(n=4) with different random bytes,
fork(n=1) a list; pause/resume, sleep, archive/unarchive, reboot keep the file;
snapshots outlive their sandbox; every resource deleted. Shapes whose endpoint has not
landed are skipped by name. TAP."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live import SHAPE, Live, equal  # noqa: E402

from lithosbox import LithosBox, LithosBoxError, Sandbox  # noqa: E402

SB = "/v1/sandboxes/{id}"
NOTE = "/work/notes/plan.txt"


def main() -> int:
    t = Live()
    box = LithosBox()
    made = []
    st = {}
    try:
        # A sandbox with a file, checkpointed until durable.
        def save():
            sandbox = box.sandboxes.create(**SHAPE)
            made.append(sandbox)
            sandbox.files.write(NOTE, "step 1: measure\n")
            snapshot = sandbox.snapshot(wait_durable=True)
            st.update(sandbox=sandbox, snapshot=snapshot)
            return snapshot.durable and len(snapshot.id) == 36
        if not t.check("create, write a file, snapshot(wait_durable=True): durable, with an id", save):
            return t.done()
        sandbox = st["sandbox"]

        def reconnect():
            with LithosBox() as other:
                again = other.sandboxes.get(sandbox.id)
                return equal(again.run("pwd").check().stdout.strip().startswith("/"), True) and \
                    equal(again.files.read(NOTE), "step 1: measure\n")
        t.check("reconnect by id from another client (with LithosBox() as box) and run", reconnect)

        def plain_runs_forget():
            sandbox.run("cd /tmp && export STEP=two").check()
            return equal(sandbox.run("pwd; echo \"[$STEP]\"").check().stdout.split("\n")[1], "[]") and \
                sandbox.run("pwd").check().stdout != "/tmp\n"
        t.check("a plain run() starts a new shell: cd and export do not carry over", plain_runs_forget)

        def session_keeps():
            with sandbox.session() as shell:
                shell.run("cd /work/notes && export STEP=two").check()
                return equal(shell.run("pwd; echo $STEP").check().stdout, "/work/notes\ntwo\n")
        t.check("a session keeps its working directory and variables", session_keeps,
                needs=("POST " + SB + "/sessions", "POST " + SB + "/sessions/{}/exec"))

        def restore_reads_back():
            restored = box.snapshots.restore(st["snapshot"].id)
            made.append(restored)
            st["restored"] = restored
            return restored.id != sandbox.id and equal(restored.files.read(NOTE), "step 1: measure\n")
        t.check("snapshots.restore(id): a new sandbox that reads the file back", restore_reads_back)

        def later_changes_stay_out():
            sandbox.files.write(NOTE, "step 2: changed after the snapshot\n")
            again = box.snapshots.restore(st["snapshot"].id)
            made.append(again)
            ok = equal(again.files.read(NOTE), "step 1: measure\n")
            again.files.write(NOTE, "only in the copy\n")
            ok = ok and equal(sandbox.files.read(NOTE), "step 2: changed after the snapshot\n")
            again.delete()
            return ok
        t.check("changes after the snapshot are not in a restore; the copy's changes do not reach the original",
                later_changes_stay_out)

        def check_later():
            checkpoint = sandbox.snapshot()
            st["checkpoint"] = checkpoint
            checkpoint = box.snapshots.wait_durable(checkpoint.id)
            return equal(checkpoint.durable, True)
        t.check("snapshot() without waiting, then snapshots.wait_durable(id): durable", check_later)

        def rest_after_checkpoint():
            snap = sandbox.snapshot(leave_paused=True, wait_durable=True)
            st["rested"] = snap
            return equal((snap.durable, sandbox.refresh().state), (True, "sleeping")) and \
                equal(sandbox.run("echo woke").check().stdout, "woke\n")
        t.check("snapshot(leave_paused=True, wait_durable=True): sleeping; the next command wakes it",
                rest_after_checkpoint)

        def fork_one():
            child = sandbox.fork()
            made.append(child)
            child.run(f"printf 'another approach\\n' > {NOTE}").check()
            ok = isinstance(child, Sandbox) and equal(child.files.read(NOTE), "another approach\n") and \
                equal(sandbox.files.read(NOTE), "step 2: changed after the snapshot\n")
            child.delete()
            return ok
        t.check("fork(): the child's write stays in the child, the parent keeps its file", fork_one)

        def fork_four():
            children = sandbox.fork(n=4)
            made.extend(children)
            try:
                draws = [c.run("head -c 16 /dev/urandom | od -An -tx1").check().stdout for c in children]
                return equal(len(children), 4) and equal(len(set(draws)), 4) and \
                    equal(len({c.id for c in children}), 4)
            finally:
                for c in children:
                    c.delete()
        t.check("fork(n=4): four sandboxes whose random bytes differ", fork_four)

        def fork_n1():
            children = sandbox.fork(n=1)
            made.extend(children)
            ok = isinstance(children, list) and equal(len(children), 1)
            for c in children:
                c.delete()
            return ok
        t.check("fork(n=1): a list of one", fork_n1)

        def pause_resume():
            sandbox.pause()
            return equal(sandbox.resume().state, "running") and \
                equal(sandbox.files.read(NOTE), "step 2: changed after the snapshot\n")
        t.check("pause() then resume(): the file is there", pause_resume)

        def sleep_then_run():
            sandbox.sleep()
            return equal(sandbox.run(f"cat {NOTE}").check().stdout, "step 2: changed after the snapshot\n")
        t.check("sleep() then a command: it wakes, the file is there", sleep_then_run, needs=("POST " + SB + "/sleep",))

        def archive_unarchive():
            sandbox.archive()
            sandbox.unarchive()
            return equal(sandbox.files.read(NOTE), "step 2: changed after the snapshot\n")
        t.check("archive() then unarchive(): the file is there", archive_unarchive,
                needs=("POST " + SB + "/archive", "POST " + SB + "/unarchive"))

        def reboot_keeps():
            sandbox.reboot()
            return equal(sandbox.files.read(NOTE), "step 2: changed after the snapshot\n")
        t.check("reboot(): the file is there", reboot_keeps, needs=("POST " + SB + "/reboot",))

        def snapshots_outlive():
            ids = {st[k].id for k in ("snapshot", "checkpoint", "rested") if k in st}
            sandbox.delete()
            return ids <= {s.id for s in box.snapshots.list()}
        t.check("snapshots are listed after their sandbox is deleted", snapshots_outlive)

        def clean_up():
            st["restored"].delete()
            for k in ("snapshot", "checkpoint", "rested"):
                box.snapshots.delete(st[k].id)
            return equal(box.sandboxes.list(), []) and equal(box.snapshots.list(), [])
        t.check("clean up: restored.delete(), every snapshot deleted; nothing left", clean_up)
        box.close()
        t.check("box.close(): a call after it raises LithosBoxError (client_closed)",
                lambda: _closed_error(box) == "client_closed")
    finally:
        with LithosBox() as sweeper:
            for s in made:
                try:
                    sweeper.sandboxes.delete(s.id)
                except LithosBoxError:
                    pass
            for snap in sweeper.snapshots.list():
                try:
                    sweeper.snapshots.delete(snap.id)
                except LithosBoxError:
                    pass
    return t.done()


def _closed_error(box: LithosBox) -> str:
    try:
        box.sandboxes.list()
    except LithosBoxError as e:
        return e.code
    return "no error"


if __name__ == "__main__":
    sys.exit(main())
