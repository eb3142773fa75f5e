"""Background commands: :class:`Command`, a handle to a command that runs on in the
sandbox while the caller does other things (``sandbox.run(cmd, background=True)``).

Routes (the session's API contract, HELPERS.md): ``POST /v1/sandboxes/{id}/commands``
-> Command ``{"id", "sandbox_id", "state" (running|exited), "exit_code", "signal",
"timed_out", "started_at", "ended_at"}``; ``GET .../commands[/{cid}]``;
``GET .../commands/{cid}/output?follow=`` (NDJSON like a streamed exec);
``POST .../wait`` ``{timeout_s}``; ``POST .../stdin`` (raw bytes, ``eof=true``);
``POST .../kill`` ``{signal}``. A missing command is 404 ``command_not_found``.
"""

import time
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Union

from ._exec import OutputCallback, StreamCollector, http_timeout, whole_seconds
from ._transport import drain_ndjson
from .errors import LithosBoxTimeoutError
from .results import Cmd, CommandResult

if TYPE_CHECKING:
    from .sandbox import Sandbox

__all__ = ["Command", "Commands"]

WAIT_STEP_S = 60  # one daemon-side wait when the caller waits without a limit


class Command:
    """A background command in a sandbox.

    Attributes:
        id: its id (unique in the sandbox).
        sandbox_id: the sandbox it runs in.
        state: ``"running"`` or ``"exited"`` (as of the last answer; :meth:`refresh`).
        exit_code, signal, timed_out: how it ended (None while it runs).
        started_at, ended_at: RFC 3339 UTC times (``ended_at`` None while it runs).
        cmd: the command as given (None for one got by id).
    """

    def __init__(self, sandbox: "Sandbox", data: Mapping[str, Any], cmd: Optional[Cmd] = None) -> None:
        self._sandbox = sandbox
        self.cmd = cmd
        self._update(data)

    def _update(self, d: Mapping[str, Any]) -> None:
        self.raw: Dict[str, Any] = dict(d)
        self.id: str = d.get("id", "")
        self.sandbox_id: str = d.get("sandbox_id", self._sandbox.id)
        self.state: str = d.get("state", "")
        self.exit_code: Optional[int] = d.get("exit_code")
        self.signal: Optional[int] = d.get("signal")
        self.timed_out: bool = bool(d.get("timed_out"))
        self.started_at: Optional[str] = d.get("started_at")
        self.ended_at: Optional[str] = d.get("ended_at")

    @property
    def _path(self) -> str:
        return f"/v1/sandboxes/{self._sandbox.id}/commands/{self.id}"

    @property
    def running(self) -> bool:
        """True while it runs (as of the last answer)."""
        return self.state == "running"

    def refresh(self) -> "Command":
        """Reads its state again. Raises CommandNotFoundError, SandboxNotFoundError."""
        self._update(self._sandbox._call("GET", self._path))
        return self

    def wait(self, timeout: Optional[float] = None) -> CommandResult:
        """Waits until it ends and answers its result with all its output.

        Args:
            timeout: seconds to wait at most (None: as long as it takes). The command
                goes on running when the wait runs out.
        Raises:
            LithosBoxTimeoutError: still running after ``timeout``.
            CommandNotFoundError, SandboxNotFoundError, WrongStateError.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = WAIT_STEP_S if deadline is None else max(0, min(WAIT_STEP_S, int(deadline - time.monotonic() + 0.999)))
            self._update(self._sandbox._call("POST", self._path + "/wait", {"timeout_s": step},
                                             timeout=http_timeout(step)))
            if not self.running:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise LithosBoxTimeoutError(f"command {self.id} still runs after {timeout} s "
                                            "(it goes on; wait again or kill it)")
        return self.output()

    def output(self) -> CommandResult:
        """Its output so far (without waiting) and, once it ended, how it ended."""
        return self._read_output(False, None, None)

    def stream(self, on_stdout: Optional[OutputCallback] = None,
               on_stderr: Optional[OutputCallback] = None) -> CommandResult:
        """Follows its output until it ends, calling the callbacks with each piece of
        text (from the start of its buffered output); answers its result."""
        return self._read_output(True, on_stdout, on_stderr)

    def _read_output(self, follow: bool, on_stdout: Optional[OutputCallback],
                     on_stderr: Optional[OutputCallback]) -> CommandResult:
        resp = self._sandbox._request("GET", self._path + "/output", query={"follow": follow},
                                      timeout=None if follow else "default", stream=True)
        collector = StreamCollector(self.cmd, "utf8", on_stdout, on_stderr)
        drain_ndjson(resp.iter_lines(), collector)
        if collector.exit is None and collector.error is None:
            if follow:
                self.refresh()
            collector.exit = {"exit_code": self.exit_code, "signal": self.signal, "timed_out": self.timed_out}
        elif collector.exit is not None:
            self.state = "exited"
            self.exit_code = collector.exit.get("exit_code")
            self.signal = collector.exit.get("signal")
            self.timed_out = bool(collector.exit.get("timed_out"))
        return collector.result()

    def send_stdin(self, data: Union[str, bytes], eof: bool = False) -> None:
        """Writes ``data`` (str as UTF-8) to its stdin; ``eof=True`` closes stdin after."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        self._sandbox._call("POST", self._path + "/stdin", raw, query={"eof": True} if eof else None)

    def close_stdin(self) -> None:
        """Closes its stdin (the program reads end of file)."""
        self.send_stdin(b"", eof=True)

    def kill(self, signal: int = 9) -> "Command":
        """Sends ``signal`` (default 9, SIGKILL) to it; answers the command's state."""
        self._update(self._sandbox._call("POST", self._path + "/kill", {"signal": signal}))
        return self

    def __repr__(self) -> str:
        return f"Command(id={self.id!r}, state={self.state!r}, exit_code={self.exit_code!r})"


class Commands:
    """The background commands of one sandbox (``sandbox.commands``)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sandbox = sandbox

    def list(self) -> List[Command]:
        """Every background command the sandbox knows (running and ended)."""
        answer = self._sandbox._call("GET", f"/v1/sandboxes/{self._sandbox.id}/commands")
        return [Command(self._sandbox, c) for c in (answer or {}).get("commands", [])]

    def get(self, command_id: str) -> Command:
        """One background command by id. Raises CommandNotFoundError."""
        return Command(self._sandbox, self._sandbox._call(
            "GET", f"/v1/sandboxes/{self._sandbox.id}/commands/{command_id}"))

    def start(self, cmd: Cmd, *, env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
              user: Union[int, str, None] = None, timeout: Optional[float] = None) -> Command:
        """Starts ``cmd`` in the background (same as ``sandbox.run(cmd, background=True)``)."""
        body: Dict[str, Any] = self._sandbox._command_body(cmd, env, cwd, user)
        if timeout is not None:
            body["timeout_s"] = whole_seconds(timeout)
        return Command(self._sandbox, self._sandbox._call(
            "POST", f"/v1/sandboxes/{self._sandbox.id}/commands", body), cmd)

