"""Sessions: a shell in the sandbox whose working directory and exported variables
carry over from one command to the next (a plain ``sandbox.run`` starts a new shell
each time).

Routes (the session's API contract, HELPERS.md): ``POST /v1/sandboxes/{id}/sessions``
``{cwd?, env?, user?}`` -> 201 ``{"id", "sandbox_id", "created_at"}``;
``GET .../sessions`` -> ``{"sessions": [...]}``; ``POST .../sessions/{sid}/exec``
``{cmd, timeout_s?, stream?, output_encoding?}`` -> the exec result;
``DELETE .../sessions/{sid}`` -> 204. A missing session is 404 ``session_not_found``;
a reboot ends every session.
"""

from types import TracebackType
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Type

from ._exec import OutputCallback, run_exec
from .errors import SandboxNotFoundError, SessionNotFoundError
from .results import CommandResult

if TYPE_CHECKING:
    from .sandbox import Sandbox

__all__ = ["Session"]


class Session:
    """A shell whose cwd and variables persist across :meth:`run` calls; a context
    manager that closes it on exit.

    Attributes:
        id: the session's id.
        sandbox_id: its sandbox.
        created_at: RFC 3339 UTC.
    """

    def __init__(self, sandbox: "Sandbox", data: Mapping[str, Any]) -> None:
        self._sandbox = sandbox
        self.raw: Dict[str, Any] = dict(data)
        self.id: str = data.get("id", "")
        self.sandbox_id: str = data.get("sandbox_id", sandbox.id)
        self.created_at: Optional[str] = data.get("created_at")

    @property
    def _path(self) -> str:
        return f"/v1/sandboxes/{self._sandbox.id}/sessions/{self.id}"

    def run(self, cmd: str, *, timeout: Optional[float] = None, on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None, output_encoding: str = "utf8") -> CommandResult:
        """Runs a shell line in this session (``cd`` and ``export`` carry over).

        Args:
            cmd: one shell line.
            timeout: seconds; the command is killed in the guest when it passes
                (``result.timed_out``).
            on_stdout, on_stderr: called with each piece of output as it arrives.
            output_encoding: ``"base64"`` to get exact bytes (``result.stdout_bytes``).
        Raises: SessionNotFoundError, SandboxNotFoundError, SandboxPausedError,
            SandboxArchivedError, WrongStateError, VMError.
        """
        if not isinstance(cmd, str):
            raise TypeError("a session runs shell lines (str); use sandbox.run for an argv")
        return self._sandbox._guard(lambda: run_exec(self._sandbox._box._t, self._path + "/exec", {"cmd": cmd},
                                                     cmd, timeout, on_stdout, on_stderr, output_encoding))

    def close(self) -> None:
        """Ends the session's shell (a session already gone is not an error)."""
        try:
            self._sandbox._call("DELETE", self._path)
        except (SessionNotFoundError, SandboxNotFoundError):
            pass

    delete = close

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Session(id={self.id!r}, sandbox_id={self.sandbox_id!r})"
