#!/usr/bin/env python3
"""lithosbox against the real nanovmd binary without a guest (no KVM needed): the
errors a daemon gives before any VM runs, through the client. A daemon on a temporary
state directory with loopback TCP, --max-memory 128 and --max-file-size 1024: the
Unix socket found by NANOVM_STATE_DIR and by state_dir=; TCP with the token
(LITHOSBOX_URL + LITHOSBOX_TOKEN, and the token read from <state>/token) and without
it (UnauthorizedError); OverCapacityError (a 256 MiB create over the 128 MiB cap);
FileTooLargeError (2000 bytes over 1024); SandboxNotFoundError, SnapshotNotFoundError,
InvalidRequestError (a value out of range, an unknown state); DaemonNotRunningError
once the daemon is stopped. TAP.
Usage: daemon_noguest_test.py NANOVM"""

import os
import sys
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "daemon"))

from daemon_harness import Daemon, Tap, main_guard  # noqa: E402

from lithosbox import (DaemonNotRunningError, FileTooLargeError, InvalidRequestError,  # noqa: E402
                       LithosBox, OverCapacityError, SandboxNotFoundError, SnapshotNotFoundError,
                       UnauthorizedError)

NOBODY = "00000000-0000-4000-8000-000000000000"


def raises(cls, fn):
    """The exception fn raised if it is a cls, else None (with what happened)."""
    try:
        fn()
    except cls as e:
        return e
    except Exception as e:  # noqa: BLE001
        print(f"# raised {type(e).__name__}: {e}")
        return None
    print(f"# no {cls.__name__} raised")
    return None


def run():
    tap = Tap()
    d = Daemon(sys.argv[1], args=["--max-memory", "128", "--max-file-size", "1024"], listen=True).start()
    ok = tap.ok
    clean = {k: v for k, v in os.environ.items()
             if k not in ("LITHOSBOX_URL", "LITHOSBOX_TOKEN", "NANOVM_URL", "NANOVM_TOKEN")}
    try:
        with mock.patch.dict(os.environ, dict(clean, NANOVM_STATE_DIR=d.state_dir), clear=True):
            with LithosBox() as box:
                ok(box.address == f"unix://{d.socket_path}" and box.health()["status"] == "ok" and
                   box.sandboxes.list() == [] and box.snapshots.list() == [],
                   "NANOVM_STATE_DIR: the client finds the socket; health, empty lists")
            url = f"http://127.0.0.1:{d.tcp_port}"
            os.environ.update(LITHOSBOX_URL=url, LITHOSBOX_TOKEN=d.token())
            with LithosBox() as box:
                ok(box.address == url and box.health()["status"] == "ok", "LITHOSBOX_URL + LITHOSBOX_TOKEN: TCP")
            del os.environ["LITHOSBOX_TOKEN"]
            with LithosBox() as box:
                ok(box.health()["status"] == "ok", "LITHOSBOX_URL without a token: read from <state>/token")
            e = raises(UnauthorizedError, lambda: LithosBox(url=url, token="0" * 64).health())
            ok(e is not None and e.status == 401, "a wrong token: UnauthorizedError (401)", e)

        box = LithosBox(state_dir=d.state_dir)
        e = raises(OverCapacityError, lambda: box.sandboxes.create(cpus=1, memory_mb=256))
        ok(e is not None and "--max-memory" in str(e), "create over --max-memory: OverCapacityError naming the cap", e)
        e = raises(FileTooLargeError, lambda: _sandbox(box).files.write("/work/x", b"x" * 2000))
        ok(e is not None and e.status == 413, "a write over --max-file-size: FileTooLargeError (413)", e)
        e = raises(SandboxNotFoundError, lambda: box.sandboxes.get(NOBODY))
        ok(e is not None and e.code == "sandbox_not_found", "get of an unknown id: SandboxNotFoundError", e)
        e = raises(SandboxNotFoundError, lambda: _sandbox(box).run("true"))
        ok(e is not None, "run in an unknown sandbox: SandboxNotFoundError", e)
        e = raises(SnapshotNotFoundError, lambda: box.snapshots.wait_durable(NOBODY, timeout=1))
        ok(e is not None, "wait_durable of an unknown snapshot: SnapshotNotFoundError", e)
        e = raises(InvalidRequestError, lambda: box.sandboxes.create(cpus=1, memory_mb=64))
        ok(e is not None and e.code == "out_of_range" and "memory_mb" in str(e),
           "memory_mb=64: InvalidRequestError (out_of_range) naming the field", e)
        e = raises(InvalidRequestError, lambda: box.sandboxes.list(state="napping"))
        ok(e is not None, "list(state='napping'): InvalidRequestError", e)
        box.close()
    finally:
        d.stop()
    e = raises(DaemonNotRunningError, lambda: LithosBox(state_dir=d.state_dir).health())
    ok(e is not None and "nanovm daemon --state-dir" in str(e) and isinstance(e, ConnectionError),
       "the daemon stopped: DaemonNotRunningError, saying how to start it", e)
    d.cleanup()
    return tap.done()


def _sandbox(box):
    from lithosbox import Sandbox
    return Sandbox(box, {"id": NOBODY, "state": "running"})


if __name__ == "__main__":
    main_guard(run)
