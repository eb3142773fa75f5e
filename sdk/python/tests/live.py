"""The harness of the client's tests against a real nanovmd (run under
``tools/testhost/with-daemon``, which sets NANOVM_STATE_DIR and PYTHONPATH): TAP
output, and which endpoints the daemon has (its /v1/openapi.json), so that a check
waiting for an endpoint is skipped by name with the reason, and runs once the
endpoint lands."""

import os
import re
import sys
import time
import traceback
from typing import Any, Callable, List, Optional, Set, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from lithosbox import LithosBox  # noqa: E402

SHAPE = {"cpus": 1, "memory_mb": 256}  # every sandbox of these tests


def _norm(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


class Live:
    """TAP lines numbered from 1; ``check`` runs one named check, ``skip`` names one
    that cannot run and why. ``routes`` are the daemon's (METHOD, path with {})."""

    def __init__(self) -> None:
        self.n = 0
        self.failed = 0
        self.skipped: List[str] = []
        self.t0 = time.monotonic()
        with LithosBox() as box:
            doc = box._t.call("GET", "/v1/openapi.json")
        self.routes: Set[Tuple[str, str]] = {(m.upper(), _norm(p)) for p, ops in doc.get("paths", {}).items()
                                             for m in ops}

    def has(self, method: str, path: str) -> bool:
        """True when the daemon serves METHOD path (``{...}`` params match any name)."""
        return (method.upper(), _norm(path)) in self.routes

    def missing(self, *routes: str) -> Optional[str]:
        """The first of ``"METHOD /path"`` the daemon lacks, as a skip reason; None if all there."""
        for r in routes:
            method, path = r.split(" ", 1)
            if not self.has(method, path):
                return f"waiting for the daemon's {r}"
        return None

    def ok(self, cond: Any, name: str, diag: Any = None) -> bool:
        self.n += 1
        if cond:
            print(f"ok {self.n} - {name}", flush=True)
            return True
        self.failed += 1
        print(f"not ok {self.n} - {name}", flush=True)
        if diag is not None:
            for line in str(diag).splitlines()[-30:]:
                print(f"# {line}", flush=True)
        return False

    def skip(self, name: str, why: str) -> None:
        self.n += 1
        self.skipped.append(name)
        print(f"ok {self.n} - {name} # SKIP {why}", flush=True)

    def check(self, name: str, fn: Callable[[], Any], needs: Tuple[str, ...] = ()) -> Any:
        """Runs ``fn``; a falsy answer or an exception fails ``name``. ``needs``:
        routes (``"POST /v1/..."``) without which it is skipped. Answers fn's value
        (None when skipped or failed)."""
        why = self.missing(*needs)
        if why:
            self.skip(name, why)
            return None
        t = time.monotonic()
        try:
            value = fn()
        except Exception:  # noqa: BLE001 -- a check that raises is a failed check, with its traceback
            self.ok(False, name, traceback.format_exc())
            return None
        self.ok(value is not False and value is not None, f"{name} ({time.monotonic() - t:.1f} s)",
                f"the check answered {value!r}")
        return value

    def done(self) -> int:
        print(f"1..{self.n}")
        print(f"# {self.n - self.failed - len(self.skipped)} passed, {self.failed} failed, "
              f"{len(self.skipped)} skipped in {time.monotonic() - self.t0:.0f} s", flush=True)
        return 1 if self.failed else 0


def expect(exc_type: type, fn: Callable[[], Any], *contains: str) -> Any:
    """Runs fn, which must raise exc_type whose str contains every ``contains``;
    answers the exception (raises AssertionError otherwise)."""
    try:
        fn()
    except exc_type as e:
        for c in contains:
            if c not in str(e):
                raise AssertionError(f"{type(e).__name__} {str(e)!r} does not say {c!r}") from e
        return e
    raise AssertionError(f"no {exc_type.__name__} raised")


def equal(got: Any, want: Any) -> bool:
    if got != want:
        raise AssertionError(f"got {got!r}, want {want!r}")
    return True
