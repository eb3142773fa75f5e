"""Templates: a named starting environment (an image, a shape, setup lines) built once
and checkpointed, so that sandboxes created from it restore instead of booting.

Routes (docs/api.md "Templates"): ``POST /v1/templates`` ``{name, image?, cpus?,
memory_mb?, snapshot_id?, setup?}`` -> 202 Template ``{"name", "state"
(building|ready|failed), "error", "image", "image_digest", "cpus", "memory_mb",
"snapshot_id", "setup", "implicit", "uses", "created_at", "last_used_at"}``;
``GET /v1/templates[/{name}]``; ``DELETE /v1/templates/{name}?force=``. A sandbox
created from a template that is still building (also the first create of an image and
shape: its implicit template) gets 503 ``template_building`` with ``Retry-After`` (the
client waits that out). 404 ``template_not_found``; 409 ``template_exists``,
``template_in_use``.
"""

import time
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence

from ._transport import segment
from .errors import LithosBoxError, LithosBoxTimeoutError

if TYPE_CHECKING:
    from .client import LithosBox

__all__ = ["Template", "Templates"]

POLL_S = 1.0


def _name_path(name: str) -> str:
    return "/v1/templates/" + segment(name)


class Template:
    """A template.

    Attributes:
        name: its name (what ``sandboxes.create(template=...)`` takes).
        state: ``building``, ``ready`` or ``failed``.
        error: why it failed, or None.
        image, image_digest: the image it was made from.
        cpus, memory_mb: the shape its sandboxes get.
        snapshot_id: the snapshot it restores; setup: the shell lines run in its build.
        implicit: True for the daemon's own ``auto:IMAGE:CPUSxMiB`` templates (made by
            creates with an image and shape).
        uses: sandboxes made from it; created_at, last_used_at: RFC 3339 UTC.
    """

    def __init__(self, box: "LithosBox", data: Mapping[str, Any]) -> None:
        self._box = box
        self._update(data)

    def _update(self, d: Mapping[str, Any]) -> None:
        self.raw: Dict[str, Any] = dict(d)
        self.name: str = d.get("name", "")
        self.state: str = d.get("state", "")
        self.error: Optional[str] = d.get("error")
        self.image: Optional[str] = d.get("image")
        self.image_digest: Optional[str] = d.get("image_digest")
        self.cpus: Optional[int] = d.get("cpus")
        self.memory_mb: Optional[int] = d.get("memory_mb")
        self.snapshot_id: Optional[str] = d.get("snapshot_id")
        self.setup: List[str] = list(d.get("setup") or [])
        self.implicit: bool = bool(d.get("implicit"))
        self.uses: int = int(d.get("uses") or 0)
        self.created_at: Optional[str] = d.get("created_at")
        self.last_used_at: Optional[str] = d.get("last_used_at")

    def refresh(self) -> "Template":
        """Reads it again. Raises TemplateNotFoundError."""
        self._update(self._box._t.call("GET", _name_path(self.name)))
        return self

    def wait_ready(self, timeout: Optional[float] = 300.0) -> "Template":
        """Polls until it is ``ready``; answers self.

        Raises: LithosBoxError (code ``template_failed``) when its build failed,
            LithosBoxTimeoutError when still building after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.refresh()
            if self.state == "ready":
                return self
            if self.state == "failed":
                raise LithosBoxError(f"template {self.name} failed to build: {self.error}", code="template_failed")
            if deadline is not None and time.monotonic() >= deadline:
                raise LithosBoxTimeoutError(f"template {self.name} still building after {timeout} s")
            time.sleep(POLL_S)

    def delete(self, force: bool = False) -> None:
        """Deletes it (``box.templates.delete``)."""
        self._box.templates.delete(self.name, force=force)

    def __repr__(self) -> str:
        return f"Template(name={self.name!r}, state={self.state!r})"


class Templates:
    """The daemon's templates (``box.templates``)."""

    def __init__(self, box: "LithosBox") -> None:
        self._box = box

    def create(self, name: str, image: Optional[str] = None, cpus: Optional[int] = None,
               memory_mb: Optional[int] = None, *, snapshot_id: Optional[str] = None,
               setup: Optional[Sequence[str]] = None, wait: bool = False,
               timeout: Optional[float] = 300.0) -> Template:
        """Registers a template; the daemon builds it in the background.

        Args:
            name: the template's name.
            image: the image to build from (default: the daemon's default image).
            cpus, memory_mb: the shape of its sandboxes.
            snapshot_id: make it from this snapshot instead of booting an image.
            setup: shell lines run once in the build (their effects are kept).
            wait: answer only once it is ready (up to ``timeout`` seconds).
        Raises: InvalidRequestError (a bad name, image or shape), WrongStateError
            (``template_exists``: the name is taken), SnapshotNotFoundError,
            LithosBoxTimeoutError, LithosBoxError (``template_failed``).
        """
        body: Dict[str, Any] = {"name": name}
        for key, value in (("image", image), ("cpus", cpus), ("memory_mb", memory_mb),
                           ("snapshot_id", snapshot_id)):
            if value is not None:
                body[key] = value
        if setup is not None:
            if isinstance(setup, str):
                raise TypeError("setup is a list of shell lines, not one str")
            body["setup"] = list(setup)
        t = Template(self._box, self._box._t.call("POST", "/v1/templates", body))
        return t.wait_ready(timeout) if wait else t

    def get(self, name: str) -> Template:
        """One template by name. Raises TemplateNotFoundError."""
        return Template(self._box, self._box._t.call("GET", _name_path(name)))

    def list(self) -> List[Template]:
        """Every template."""
        answer = self._box._t.call("GET", "/v1/templates") or {}
        return [Template(self._box, d) for d in answer.get("templates", [])]

    def delete(self, name: str, force: bool = False) -> None:
        """Deletes a template (``force``: also while sandboxes made from it exist).
        Raises TemplateNotFoundError, WrongStateError (``template_in_use`` without
        ``force``; ``wrong_state`` while it is being built)."""
        self._box._t.call("DELETE", _name_path(name), query={"force": True} if force else None)
