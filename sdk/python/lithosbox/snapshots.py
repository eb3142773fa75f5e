"""Snapshots (docs/api.md "Snapshots"): :class:`Snapshot` and ``box.snapshots``.

A snapshot holds a sandbox's memory, disk and processes; it outlives its sandbox and
can be restored into new sandboxes (the snapshot's shape). ``durable`` becomes true
once it is saved whole.
"""

import time
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional

from ._exec import http_timeout, whole_seconds
from ._transport import segment
from .errors import LithosBoxError, LithosBoxTimeoutError

if TYPE_CHECKING:
    from .client import LithosBox
    from .sandbox import Sandbox

__all__ = ["Snapshot", "Snapshots"]

WAIT_STEP_S = 600  # one daemon-side wait (its limit is 3600)
DEFAULT_DURABLE_WAIT_S = 600.0


class Snapshot:
    """A snapshot.

    Attributes:
        id: its UUID.
        sandbox_id: the sandbox it was taken of (which may be deleted since).
        state: ``saving``, ``ready`` or ``error``.
        durable: True once saved whole (``wait_durable``).
        size_bytes: bytes only this snapshot holds.
        cpus, memory_mb, disable_internet: the shape a restore gets.
        created_at: RFC 3339 UTC. error: why it failed, or None.
    """

    def __init__(self, box: "LithosBox", data: Mapping[str, Any]) -> None:
        self._box = box
        self._update(data)

    def _update(self, d: Mapping[str, Any]) -> None:
        self.raw: Dict[str, Any] = dict(d)
        self.id: str = d.get("id", "")
        self.sandbox_id: Optional[str] = d.get("sandbox_id")
        self.state: str = d.get("state", "")
        self.durable: bool = bool(d.get("durable"))
        self.size_bytes: int = int(d.get("size_bytes") or 0)
        self.cpus: Optional[int] = d.get("cpus")
        self.memory_mb: Optional[int] = d.get("memory_mb")
        self.disable_internet: bool = bool(d.get("disable_internet"))
        self.created_at: Optional[str] = d.get("created_at")
        self.error: Optional[str] = d.get("error")

    def refresh(self) -> "Snapshot":
        """Reads it again. Raises SnapshotNotFoundError."""
        self._update(self._box._t.call("GET", f"/v1/snapshots/{self.id}"))
        return self

    def wait_durable(self, timeout: Optional[float] = DEFAULT_DURABLE_WAIT_S) -> "Snapshot":
        """Waits until it is durable (``box.snapshots.wait_durable``); answers self."""
        self._update(self._box.snapshots.wait_durable(self.id, timeout).raw)
        return self

    def restore(self, **kwargs: Any) -> "Sandbox":
        """Restores it into a new sandbox (``box.snapshots.restore``)."""
        return self._box.snapshots.restore(self.id, **kwargs)

    def delete(self) -> None:
        """Deletes it (``box.snapshots.delete``)."""
        self._box.snapshots.delete(self.id)

    def __repr__(self) -> str:
        return f"Snapshot(id={self.id!r}, state={self.state!r}, durable={self.durable!r})"


class Snapshots:
    """Every snapshot of the daemon (``box.snapshots``)."""

    def __init__(self, box: "LithosBox") -> None:
        self._box = box

    def get(self, snapshot_id: str) -> Snapshot:
        """One snapshot by id. Raises SnapshotNotFoundError."""
        return Snapshot(self._box, self._box._t.call("GET", f"/v1/snapshots/{segment(snapshot_id)}"))

    def list(self, sandbox_id: Optional[str] = None) -> List[Snapshot]:
        """Every snapshot (or those of one sandbox, which must still exist), oldest
        first by id order of the daemon's pages."""
        path = f"/v1/sandboxes/{sandbox_id}/snapshots" if sandbox_id else "/v1/snapshots"
        return [Snapshot(self._box, d) for d in self._box._t.pages(path, "snapshots")]

    def restore(self, snapshot_id: str, *, labels: Optional[Mapping[str, str]] = None,
                timeout_s: Optional[int] = None) -> "Sandbox":
        """Restores a snapshot into a new running sandbox of the snapshot's shape (a
        snapshot still saving is waited for by the daemon first).

        Args:
            labels: the new sandbox's labels (the API's ``metadata``).
            timeout_s: the new sandbox's lifetime in seconds (0: none; default the
                daemon's ``--default-timeout``).
        Raises: SnapshotNotFoundError, WrongStateError (the snapshot failed),
            OverCapacityError, VMError, DiskFullError.
        """
        from .sandbox import Sandbox
        body: Dict[str, Any] = {}
        if labels is not None:
            body["metadata"] = dict(labels)
        if timeout_s is not None:
            body["timeout_s"] = timeout_s
        return Sandbox(self._box, self._box._t.call("POST", f"/v1/snapshots/{segment(snapshot_id)}/restore", body))

    def wait_durable(self, snapshot_id: str, timeout: Optional[float] = DEFAULT_DURABLE_WAIT_S) -> Snapshot:
        """Waits until the snapshot is durable and answers it (``.durable`` True).

        Args:
            timeout: seconds at most (default 600; None: as long as it takes).
        Raises:
            LithosBoxTimeoutError: not durable in time (the saving goes on: wait
                again, or read it with ``get``).
            LithosBoxError (code ``snapshot_failed``): the saving failed.
            SnapshotNotFoundError.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT_STEP_S if deadline is None else max(0.0, deadline - time.monotonic())
            step = min(WAIT_STEP_S, whole_seconds(left) or 0)
            snap = Snapshot(self._box, self._box._t.call(
                "POST", f"/v1/snapshots/{segment(snapshot_id)}/wait", {"timeout_s": step}, timeout=http_timeout(step)))
            if snap.durable:
                return snap
            if snap.state == "error":
                raise LithosBoxError(f"snapshot {snapshot_id} failed: {snap.error}", code="snapshot_failed")
            if deadline is not None and time.monotonic() >= deadline:
                err = LithosBoxTimeoutError(f"snapshot {snapshot_id} is not durable after {timeout} s "
                                            "(the saving goes on; wait again)")
                err.snapshot = snap  # type: ignore[attr-defined]
                raise err

    def delete(self, snapshot_id: str) -> None:
        """Deletes a snapshot (its files go once nothing restored from it needs them).
        Raises SnapshotNotFoundError, WrongStateError (still saving)."""
        self._box._t.call("DELETE", f"/v1/snapshots/{segment(snapshot_id)}")
