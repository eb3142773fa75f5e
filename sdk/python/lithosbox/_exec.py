"""Running a command through an exec route (a sandbox's or a session's), whole or
streamed as NDJSON (docs/api.md ``POST /v1/sandboxes/{id}/exec``)."""

import base64
import codecs
import json
from typing import Any, Callable, Dict, List, Optional

from ._transport import Transport, drain_ndjson
from .errors import LithosBoxError, error_from_answer
from .results import Cmd, CommandResult

OutputCallback = Callable[[str], None]
ENCODINGS = ("utf8", "base64")
HTTP_MARGIN_S = 60.0  # how much longer than a command's own timeout the client waits


def http_timeout(timeout: Optional[float]) -> Optional[float]:
    """The socket timeout for a call whose daemon-side wait is ``timeout`` seconds."""
    return None if not timeout else float(timeout) + HTTP_MARGIN_S


def whole_seconds(timeout: Optional[float], name: str = "timeout") -> Optional[int]:
    """A timeout in seconds as the daemon's integer (rounded up; None stays None)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise ValueError(f"{name} must be a non-negative number of seconds, not {timeout!r}")
    whole = int(timeout)
    return whole if whole == timeout else whole + 1


def check_encoding(output_encoding: str) -> None:
    if output_encoding not in ENCODINGS:
        raise ValueError(f"output_encoding must be 'utf8' or 'base64', not {output_encoding!r}")


def error_of_line(err: Any) -> LithosBoxError:
    """The exception for a streamed ``{"type": "error", "error": {...}}`` line."""
    return error_from_answer(0, json.dumps({"error": err if isinstance(err, dict) else {}}).encode())


class StreamCollector:
    """Collects streamed output lines into a :class:`CommandResult`, calling the
    callbacks with each piece of text as it arrives."""

    def __init__(self, cmd: Optional[Cmd], encoding: str, on_stdout: Optional[OutputCallback],
                 on_stderr: Optional[OutputCallback]) -> None:
        self.cmd = cmd
        self.encoding = encoding
        self.callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        self.parts: Dict[str, List[bytes]] = {"stdout": [], "stderr": []}
        self.decoders = {k: codecs.getincrementaldecoder("utf-8")("replace") for k in self.parts}
        self.exit: Optional[Dict[str, Any]] = None
        self.error: Optional[LithosBoxError] = None

    def __call__(self, line: Dict[str, Any]) -> None:
        kind = line.get("type")
        if kind in ("stdout", "stderr"):
            data = line.get("data") or ""
            raw = base64.b64decode(data) if self.encoding == "base64" else data.encode("utf-8")
            self.parts[kind].append(raw)
            cb = self.callbacks[kind]
            if cb is not None:
                text = self.decoders[kind].decode(raw) if self.encoding == "base64" else data
                if text:
                    cb(text)
        elif kind == "exit":
            self.exit = line
        elif kind == "error":
            self.error = error_of_line(line.get("error"))

    def result(self) -> CommandResult:
        if self.error is not None:
            raise self.error
        if self.exit is None:
            raise LithosBoxError("the command's output ended without its exit line (the daemon went away?)",
                                 code="stream_ended")
        out, err = b"".join(self.parts["stdout"]), b"".join(self.parts["stderr"])
        e = self.exit
        return CommandResult(stdout=out.decode("utf-8", "replace"), stderr=err.decode("utf-8", "replace"),
                             exit_code=e.get("exit_code"), signal=e.get("signal"),
                             timed_out=bool(e.get("timed_out")),
                             output_truncated=bool(e.get("output_truncated")),
                             duration_ms=e.get("duration_ms"), cmd=self.cmd, stdout_bytes=out, stderr_bytes=err)


def run_exec(t: Transport, path: str, body: Dict[str, Any], cmd: Optional[Cmd], timeout: Optional[float],
             on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback],
             output_encoding: str) -> CommandResult:
    """POSTs an exec body to ``path``; streamed when a callback is given.

    ``output_encoding`` is sent only when it is not the default ("utf8"), so the
    call works with daemons that predate it.
    """
    check_encoding(output_encoding)
    if output_encoding != "utf8":
        body["output_encoding"] = output_encoding
    if timeout is not None:
        body["timeout_s"] = whole_seconds(timeout)
    if on_stdout is None and on_stderr is None:
        answer = t.call("POST", path, body, timeout=http_timeout(timeout))
        return CommandResult.from_json(answer or {}, cmd, output_encoding)
    body["stream"] = True
    resp = t.request("POST", path, body, timeout=http_timeout(timeout), stream=True)
    collector = StreamCollector(cmd, output_encoding, on_stdout, on_stderr)
    drain_ndjson(resp.iter_lines(), collector)
    return collector.result()
