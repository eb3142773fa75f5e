"""What a command gives back: :class:`CommandResult`, and :class:`CommandFailedError`
(which is itself a result) raised by :meth:`CommandResult.check`.

The daemon's exec answer (docs/api.md ``POST /v1/sandboxes/{id}/exec``):
``{"stdout", "stderr", "exit_code", "signal", "timed_out", "output_truncated",
"duration_ms"}``; with ``output_encoding: "base64"`` stdout and stderr are base64 of
the exact bytes.
"""

import base64
from typing import Any, Mapping, Optional, Sequence, Union

from .errors import LithosBoxError, LithosBoxTimeoutError

Cmd = Union[str, Sequence[str]]

__all__ = ["CommandResult", "CommandFailedError", "CommandTimedOutError"]

TAIL_CHARS = 2000  # how much of each stream a CommandFailedError's message shows


def describe_cmd(cmd: Optional[Cmd]) -> str:
    """The command as one line (an argv joined with spaces, quoted where needed)."""
    if cmd is None:
        return "<command>"
    if isinstance(cmd, str):
        return cmd
    import shlex
    return " ".join(shlex.quote(a) for a in cmd)


def _tail(text: str, limit: int = TAIL_CHARS) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


class CommandResult:
    """The result of one command run in a sandbox.

    Attributes:
        stdout, stderr: the output as text (UTF-8; invalid bytes became U+FFFD).
        stdout_bytes, stderr_bytes: the exact bytes with ``output_encoding="base64"``,
            else the UTF-8 encoding of ``stdout``/``stderr``.
        exit_code: the exit status; 128+N when signal N killed it; 127: no such program;
            None only while a background command still runs.
        signal: the signal that killed it, or None.
        timed_out: True when its ``timeout`` killed it.
        output_truncated: True when a stream passed the daemon's 16 MiB and was cut.
        duration_ms: how long it ran (milliseconds), or None when not reported.
        cmd: the command as it was given (a shell line or an argv).
    """

    def __init__(self, stdout: str = "", stderr: str = "", exit_code: Optional[int] = 0,
                 signal: Optional[int] = None, timed_out: bool = False,
                 output_truncated: bool = False, duration_ms: Optional[int] = None,
                 cmd: Optional[Cmd] = None, stdout_bytes: Optional[bytes] = None,
                 stderr_bytes: Optional[bytes] = None) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.stdout_bytes = stdout.encode("utf-8") if stdout_bytes is None else stdout_bytes
        self.stderr_bytes = stderr.encode("utf-8") if stderr_bytes is None else stderr_bytes
        self.exit_code = exit_code
        self.signal = signal
        self.timed_out = timed_out
        self.output_truncated = output_truncated
        self.duration_ms = duration_ms
        self.cmd = cmd

    @classmethod
    def from_json(cls, d: Mapping[str, Any], cmd: Optional[Cmd] = None,
                  encoding: str = "utf8") -> "CommandResult":
        """A result from the daemon's exec answer (``encoding``: its output_encoding)."""
        out, err = d.get("stdout") or "", d.get("stderr") or ""
        out_b = err_b = None
        if encoding == "base64":
            out_b, err_b = base64.b64decode(out), base64.b64decode(err)
            out, err = out_b.decode("utf-8", "replace"), err_b.decode("utf-8", "replace")
        return cls(stdout=out, stderr=err, exit_code=d.get("exit_code"), signal=d.get("signal"),
                   timed_out=bool(d.get("timed_out")), output_truncated=bool(d.get("output_truncated")),
                   duration_ms=d.get("duration_ms"), cmd=cmd, stdout_bytes=out_b, stderr_bytes=err_b)

    @property
    def ok(self) -> bool:
        """True when the command exited 0 (and did not time out)."""
        return self.exit_code == 0 and not self.timed_out

    def status_text(self) -> str:
        """How it ended, for people: ``exit status 3``, ``killed by signal 9``, ``timed out``."""
        if self.timed_out:
            return "timed out"
        if self.signal:
            return f"killed by signal {self.signal}"
        return f"exit status {self.exit_code}"

    def check(self) -> "CommandResult":
        """Answers this result when the command exited 0.

        Raises:
            CommandTimedOutError: its timeout killed it.
            CommandFailedError: any other non-zero exit (the exception is itself a
                result: ``e.stdout``, ``e.exit_code``...).
        """
        if self.ok:
            return self
        cls = CommandTimedOutError if self.timed_out else CommandFailedError
        raise cls(self)

    def __repr__(self) -> str:
        return (f"CommandResult(exit_code={self.exit_code!r}, stdout={_tail(self.stdout, 80)!r}, "
                f"stderr={_tail(self.stderr, 80)!r})")


class CommandFailedError(LithosBoxError, CommandResult):
    """A command did not exit 0; raised by :meth:`CommandResult.check`.

    It is itself a :class:`CommandResult` (``stdout``, ``stderr``, ``exit_code``...).
    The message names the command, how it ended and the tail of its output.
    """

    def __init__(self, result: CommandResult) -> None:
        CommandResult.__init__(self, result.stdout, result.stderr, result.exit_code, result.signal,
                               result.timed_out, result.output_truncated, result.duration_ms,
                               result.cmd, result.stdout_bytes, result.stderr_bytes)
        parts = [f"command {describe_cmd(result.cmd)!r} failed: {result.status_text()}"]
        if result.stderr.strip():
            parts.append("stderr: " + _tail(result.stderr.rstrip()))
        if result.stdout.strip():
            parts.append("stdout: " + _tail(result.stdout.rstrip()))
        LithosBoxError.__init__(self, "\n".join(parts), code="command_failed")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class CommandTimedOutError(CommandFailedError, LithosBoxTimeoutError):
    """A command's ``timeout`` killed it (a :class:`CommandFailedError` and a
    :class:`LithosBoxTimeoutError`)."""

    def __init__(self, result: CommandResult) -> None:
        CommandFailedError.__init__(self, result)
        self.code = "command_timed_out"
