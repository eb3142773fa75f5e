"""The client's exceptions, and the mapping from nanovmd's error answers to them.

Every error the daemon answers is ``{"error": {"code", "message"}}`` with an HTTP
status (docs/api.md "Errors", the catalogue). :func:`error_from_answer` turns one into
the most specific class below; a code this client does not know yet still becomes a
:class:`LithosBoxError` (or the class of its status), never a crash.
"""

from typing import Any, Dict, List, Optional, Sequence, Type

__all__ = [
    "LithosBoxError",
    "DaemonNotRunningError",
    "InvalidRequestError",
    "UnauthorizedError",
    "PermissionDeniedError",
    "NotFoundError",
    "SandboxNotFoundError",
    "SnapshotNotFoundError",
    "PathNotFoundError",
    "SessionNotFoundError",
    "CommandNotFoundError",
    "TemplateNotFoundError",
    "WrongStateError",
    "SandboxPausedError",
    "SandboxArchivedError",
    "PathConflictError",
    "FileTooLargeError",
    "OverCapacityError",
    "BusyError",
    "TemplateBuildingError",
    "VMError",
    "DiskFullError",
    "InternalError",
    "LithosBoxTimeoutError",
    "ForkError",
    "error_from_answer",
]


class LithosBoxError(Exception):
    """Base class of every error this client raises.

    Attributes:
        code: the daemon's error code (docs/api.md, the catalogue), e.g.
            ``"sandbox_not_found"``; the client's own errors use codes of their own
            (``"daemon_not_running"``, ``"timeout"``, ``"fork_failed"``...).
        status: the HTTP status of the daemon's answer, or 0 when there was none.
        message: one line for a person (the daemon's message when it answered).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> "LithosBoxError":
        # One argument for the builtin bases: OSError (ConnectionError, TimeoutError...)
        # would read (message, code, status) as (errno, strerror, filename).
        base = OSError if issubclass(cls, OSError) else Exception
        return base.__new__(cls, args[0] if args else "")  # type: ignore[return-value]

    def __init__(self, message: str, code: str = "error", status: int = 0) -> None:
        super().__init__(message)
        self.args = (message,)
        self.message = message
        self.code = code
        self.status = status

    def __str__(self) -> str:
        if self.status:
            return f"{self.message} ({self.code}, HTTP {self.status})"
        return self.message


class DaemonNotRunningError(LithosBoxError, ConnectionError):
    """Nothing answers at the daemon's address: no socket, or a refused connection.

    The message names the address tried and how to start the daemon
    (``nanovm daemon``, or ``tools/systemd/nanovmd.service``). ``address`` is that
    address (``unix:///...`` or ``http://HOST:PORT``).
    """

    def __init__(self, address: str, reason: str, state_dir: Optional[str] = None) -> None:
        start = "nanovm daemon" + (f" --state-dir {state_dir}" if state_dir else "")
        super().__init__(
            f"nanovmd is not running at {address} ({reason}): start it with `{start}` "
            "(build/nanovmd is the same; as a service: tools/systemd/nanovmd.service), "
            "or point the client elsewhere with NANOVM_STATE_DIR or LITHOSBOX_URL",
            code="daemon_not_running",
        )
        self.address = address
        self.reason = reason


class InvalidRequestError(LithosBoxError, ValueError):
    """The daemon refused a value or the request's shape (400 or 422: ``invalid_field``,
    ``unknown_field``, ``invalid_path``, ``out_of_range``, ``invalid_value``,
    ``shape_mismatch``, ``bad_json``, a snapshot import's ``invalid_archive`` and
    ``image_not_found``...)."""


class UnauthorizedError(LithosBoxError, PermissionError):
    """401 ``unauthorized``: over TCP, no token or the wrong one (LITHOSBOX_TOKEN)."""


class PermissionDeniedError(LithosBoxError, PermissionError):
    """403 ``permission_denied``: the guest refused access to a path."""


class NotFoundError(LithosBoxError, LookupError):
    """A 404: the thing named does not exist (the subclasses say which kind)."""


class SandboxNotFoundError(NotFoundError):
    """404 ``sandbox_not_found``: no sandbox has this id (deleted, or never was)."""


class SnapshotNotFoundError(NotFoundError):
    """404 ``snapshot_not_found``: no snapshot has this id."""


class PathNotFoundError(NotFoundError, FileNotFoundError):
    """404 ``path_not_found``: the guest path does not exist (also a ``FileNotFoundError``)."""


class SessionNotFoundError(NotFoundError):
    """404 ``session_not_found``: no session has this id in that sandbox (a reboot ends them)."""


class CommandNotFoundError(NotFoundError):
    """404 ``command_not_found``: no background command has this id in that sandbox."""


class TemplateNotFoundError(NotFoundError):
    """404 ``template_not_found``: no template has this name."""


class WrongStateError(LithosBoxError):
    """409: the sandbox (or snapshot) is not in a state that allows this operation.

    Attributes:
        state: the resource's state when the client asked (``"paused"``,
            ``"archived"``, ``"creating"``...), or None when it could not be read.
    """

    def __init__(self, message: str, code: str = "wrong_state", status: int = 409,
                 state: Optional[str] = None) -> None:
        super().__init__(message, code, status)
        self.state = state

    def __str__(self) -> str:
        base = super().__str__()
        return f"{base} [state: {self.state}]" if self.state else base


class SandboxPausedError(WrongStateError):
    """409 ``sandbox_paused``: the sandbox is paused; call ``resume()`` first."""


class SandboxArchivedError(WrongStateError):
    """409 ``sandbox_archived``: the sandbox is archived; call ``unarchive()`` first."""


class PathConflictError(LithosBoxError, FileExistsError):
    """409 ``path_conflict``: the guest path exists, is a directory, or is not empty."""


class FileTooLargeError(LithosBoxError):
    """413 ``file_too_large`` / ``body_too_large``: more bytes than the daemon takes."""


class OverCapacityError(LithosBoxError):
    """503 ``over_capacity``: the daemon's cap on sandboxes or committed memory is reached."""


class BusyError(LithosBoxError):
    """503 ``busy``: the daemon has too many requests queued (retried a few times first)."""


class TemplateBuildingError(LithosBoxError):
    """503 ``template_building``: the template is still being built.

    Creating a sandbox from a building template waits it out (up to the client's
    ``template_wait``, 300 s by default); this is raised when that time runs out.
    ``retry_after`` is the daemon's ``Retry-After`` in seconds (None without one).
    """

    def __init__(self, message: str, code: str = "template_building", status: int = 503,
                 retry_after: Optional[float] = None) -> None:
        super().__init__(message, code, status)
        self.retry_after = retry_after


class VMError(LithosBoxError):
    """502 ``vm_error``: the sandbox's VM or guest agent failed; the message says why."""


class DiskFullError(LithosBoxError, OSError):
    """507 ``disk_full``: the daemon's state file system, or the guest's disk, is full."""


class InternalError(LithosBoxError):
    """500 ``internal``: a bug in the daemon (the message says where), or an answer
    this client could not read."""


class LithosBoxTimeoutError(LithosBoxError, TimeoutError):
    """A wait ran out: the daemon did not answer in time, a snapshot was not durable,
    a background command had not ended, a template was not ready. Waiting again is
    safe: the operation itself goes on (also a builtin ``TimeoutError``)."""

    def __init__(self, message: str, code: str = "timeout", status: int = 0) -> None:
        super().__init__(message, code, status)


class ForkError(LithosBoxError):
    """``fork(n=...)`` made some children but not all.

    Attributes:
        sandboxes: the children that were made (running; delete them when done).
        errors: one :class:`LithosBoxError` per child that failed.
    """

    def __init__(self, sandboxes: Sequence[Any], errors: Sequence[LithosBoxError]) -> None:
        made, failed = len(sandboxes), len(errors)
        first = errors[0] if errors else None
        super().__init__(
            f"fork made {made} of {made + failed} sandboxes; the first failure: {first}",
            code="fork_failed",
        )
        self.sandboxes: List[Any] = list(sandboxes)
        self.errors: List[LithosBoxError] = list(errors)


# The catalogue's codes (docs/api.md "Errors" and the session's API contract).
_BY_CODE: Dict[str, Type[LithosBoxError]] = {
    "bad_request": InvalidRequestError,
    "bad_json": InvalidRequestError,
    "invalid_field": InvalidRequestError,
    "unknown_field": InvalidRequestError,
    "invalid_path": InvalidRequestError,
    "out_of_range": InvalidRequestError,
    "invalid_value": InvalidRequestError,
    "shape_mismatch": InvalidRequestError,
    "invalid_archive": InvalidRequestError,
    "image_not_found": InvalidRequestError,
    "header_too_large": InvalidRequestError,
    "unauthorized": UnauthorizedError,
    "permission_denied": PermissionDeniedError,
    "no_route": NotFoundError,
    "sandbox_not_found": SandboxNotFoundError,
    "snapshot_not_found": SnapshotNotFoundError,
    "path_not_found": PathNotFoundError,
    "session_not_found": SessionNotFoundError,
    "command_not_found": CommandNotFoundError,
    "template_not_found": TemplateNotFoundError,
    "method_not_allowed": NotFoundError,
    "wrong_state": WrongStateError,
    "sandbox_paused": SandboxPausedError,
    "sandbox_archived": SandboxArchivedError,
    "template_exists": WrongStateError,
    "template_in_use": WrongStateError,
    "path_conflict": PathConflictError,
    "body_too_large": FileTooLargeError,
    "file_too_large": FileTooLargeError,
    "internal": InternalError,
    "vm_error": VMError,
    "over_capacity": OverCapacityError,
    "busy": BusyError,
    "template_building": TemplateBuildingError,
    "disk_full": DiskFullError,
}

# A code this client does not know: the class of its status.
_BY_STATUS: Dict[int, Type[LithosBoxError]] = {
    400: InvalidRequestError, 401: UnauthorizedError, 403: PermissionDeniedError,
    404: NotFoundError, 405: NotFoundError, 409: WrongStateError, 413: FileTooLargeError,
    422: InvalidRequestError, 431: InvalidRequestError, 500: InternalError, 502: VMError,
    503: BusyError, 504: LithosBoxTimeoutError, 507: DiskFullError,
}

# A sandbox state named in a 409 for these codes without reading it back.
_STATE_OF_CODE = {"sandbox_paused": "paused", "sandbox_archived": "archived"}


def error_from_answer(status: int, body: bytes, retry_after: Optional[str] = None,
                      state: Optional[str] = None) -> LithosBoxError:
    """The exception for one error answer of the daemon.

    Args:
        status: the HTTP status (>= 400).
        body: the answer's body, ideally ``{"error": {"code", "message"}}``; anything
            else (not JSON, another shape) gives the class of ``status`` with the
            body's start as the message.
        retry_after: the ``Retry-After`` header (seconds), kept on
            :class:`TemplateBuildingError`.
        state: the resource's state if the caller read it, for :class:`WrongStateError`.
    """
    import json

    code, message = "", ""
    try:
        parsed = json.loads(body.decode("utf-8", "replace")) if body else None
        err = parsed.get("error") if isinstance(parsed, dict) else None
        if isinstance(err, dict):
            code = str(err.get("code") or "")
            message = str(err.get("message") or "")
    except ValueError:
        pass
    if not message:
        text = body[:200].decode("utf-8", "replace").strip() if body else ""
        message = text or f"HTTP {status} without an error body"
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or (
        InternalError if status >= 500 else InvalidRequestError if status >= 400 else LithosBoxError)
    code = code or f"http_{status}"
    if issubclass(cls, WrongStateError):
        return cls(message, code, status, state=state or _STATE_OF_CODE.get(code))
    if issubclass(cls, TemplateBuildingError):
        seconds: Optional[float] = None
        try:
            seconds = float(retry_after) if retry_after else None
        except ValueError:
            seconds = None
        return cls(message, code, status, retry_after=seconds)
    if issubclass(cls, LithosBoxTimeoutError):
        return cls(message, code, status)
    return cls(message, code, status)
