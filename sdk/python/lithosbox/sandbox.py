"""Sandboxes (docs/api.md "Sandboxes", "Commands"): :class:`Sandbox` and
``box.sandboxes``.

A Sandbox object holds the daemon's last answer about it (``state`` and the rest);
:meth:`Sandbox.refresh` reads it again. Every method names the errors it raises; any
call may also raise DaemonNotRunningError, LithosBoxTimeoutError, BusyError and
InternalError.
"""

import json
import time
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, TypeVar, Union,
                    overload)

from ._exec import OutputCallback, run_exec
from ._transport import Body, Query, Response, segment
from .commands import Command, Commands
from .errors import (ForkError, LithosBoxError, TemplateBuildingError, WrongStateError, error_from_answer)
from .files import Files
from .results import Cmd, CommandResult
from .sessions import Session
from .snapshots import Snapshot

try:  # Python >= 3.8
    from typing import Literal
except ImportError:  # pragma: no cover
    from typing_extensions import Literal  # type: ignore

if TYPE_CHECKING:
    from .client import LithosBox

__all__ = ["Sandbox", "Sandboxes"]

T = TypeVar("T")
_DEFAULT = "default"


class Sandbox:
    """One sandbox: a microVM with its own kernel, disk and processes.

    Attributes (the daemon's last answer; :meth:`refresh` reads them again):
        id: its UUID (keep it to reconnect with ``box.sandboxes.get(id)``).
        state: ``creating``, ``running``, ``paused``, ``sleeping``, ``archiving``,
            ``archived``, ``unarchiving``, ``rebooting``, ``deleting`` or ``error``.
        error: why it is in ``error``, or None.
        cpus, memory_mb, disable_internet, image, template: its shape and origin
            (``template``: the template it was restored from, a named one or an
            implicit ``auto:IMAGE:CPUSxMiB``; None for a boot, a snapshot's restore or
            a fork child).
        image_digest: the SHA-256 of the pinned root image its disks read.
        snapshot_id: the snapshot it was restored from; parent_id: its fork parent.
        labels: its labels (the API's ``metadata``).
        timeout_s, end_at: its lifetime; the daemon deletes it at ``end_at``
            (``on_timeout``: ``delete`` or ``archive``).
        autosleep_s: idle this long, it sleeps (0: never).
        created_at: RFC 3339 UTC.
        progress: ``{"phase", "bytes_done", "bytes_total"}`` while archiving or
            unarchiving, else None.
        files: its files (:class:`Files`); commands: its background commands.
    """

    def __init__(self, box: "LithosBox", data: Mapping[str, Any]) -> None:
        self._box = box
        self.files = Files(self)
        self.commands = Commands(self)
        self._update(data)

    def _update(self, d: Mapping[str, Any]) -> None:
        self.raw: Dict[str, Any] = dict(d)
        self.id: str = d.get("id", "")
        self.state: str = d.get("state", "")
        self.error: Optional[str] = d.get("error")
        self.cpus: Optional[int] = d.get("cpus")
        self.memory_mb: Optional[int] = d.get("memory_mb")
        self.disable_internet: bool = bool(d.get("disable_internet"))
        self.image: Optional[str] = d.get("image")
        self.template: Optional[str] = d.get("template")
        self.image_digest: Optional[str] = d.get("image_digest")
        self.snapshot_id: Optional[str] = d.get("snapshot_id")
        self.parent_id: Optional[str] = d.get("parent_id")
        self.labels: Dict[str, str] = dict(d.get("metadata") or {})
        self.timeout_s: Optional[int] = d.get("timeout_s")
        self.end_at: Optional[str] = d.get("end_at")
        self.on_timeout: Optional[str] = d.get("on_timeout")
        self.autosleep_s: Optional[int] = d.get("autosleep_s")
        self.created_at: Optional[str] = d.get("created_at")
        self.progress: Optional[Dict[str, Any]] = d.get("progress")

    # --- requests, with a 409's state filled in ---------------------------------------
    @property
    def _path(self) -> str:
        return f"/v1/sandboxes/{self.id}"

    def _guard(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except WrongStateError as e:
            if e.state is None:
                try:
                    e.state = self._box._t.call("GET", self._path).get("state")
                    self.state = e.state or self.state
                except LithosBoxError:
                    pass
            raise

    def _call(self, method: str, path: str, body: Body = None, query: Query = None,
              timeout: Union[float, None, str] = _DEFAULT, expect_json: bool = True) -> Any:
        return self._guard(lambda: self._box._t.call(method, path, body, query, timeout, expect_json))

    def _request(self, method: str, path: str, body: Body = None, query: Query = None,
                 timeout: Union[float, None, str] = _DEFAULT, stream: bool = False,
                 length: Optional[int] = None) -> Response:
        return self._guard(lambda: self._box._t.request(method, path, body, query, timeout, stream,
                                                        length=length))

    def _transition(self, action: str, body: Optional[Mapping[str, Any]] = None) -> "Sandbox":
        self._update(self._call("POST", f"{self._path}/{action}", body if body is not None else {}))
        return self

    # --- state ---------------------------------------------------------------------------
    def refresh(self) -> "Sandbox":
        """Reads its state and fields again; answers self. Raises SandboxNotFoundError."""
        self._update(self._box._t.call("GET", self._path))
        return self

    def update(self, *, timeout_s: Optional[int] = None, labels: Optional[Mapping[str, str]] = None,
               clear_timeout: bool = False, autosleep_s: Optional[int] = None) -> "Sandbox":
        """Changes its lifetime, its autosleep and/or its labels (in any state but
        ``deleting``; it never wakes it). Arguments left None stay as they are.

        Args:
            timeout_s: ``end_at`` becomes now + ``timeout_s`` seconds (0: no timeout).
            labels: replace all its labels with these.
            clear_timeout: no timeout (``end_at`` null); wins over ``timeout_s``.
            autosleep_s: idle this many seconds, it sleeps (0: never; up to 604800).
                The idle time already counted applies: a sandbox idle longer than the
                new value sleeps at the daemon's next check (0.5 s).
        Raises:
            InvalidRequestError: a value out of range or a bad label.
            WrongStateError: it is being deleted.
            SandboxNotFoundError.
        """
        body: Dict[str, Any] = {}
        if clear_timeout:
            body["timeout_s"] = None
        elif timeout_s is not None:
            body["timeout_s"] = timeout_s
        if autosleep_s is not None:
            body["autosleep_s"] = autosleep_s
        if labels is not None:
            body["metadata"] = dict(labels)
        self._update(self._call("PATCH", self._path, body))
        return self

    # --- commands --------------------------------------------------------------------------
    def _command_body(self, cmd: Cmd, env: Optional[Mapping[str, str]], cwd: Optional[str],
                      user: Union[int, str, None]) -> Dict[str, Any]:
        body: Dict[str, Any] = {}
        if isinstance(cmd, str):
            body["cmd"] = cmd
        elif isinstance(cmd, (list, tuple)) and cmd and all(isinstance(a, str) for a in cmd):
            body["argv"] = list(cmd)
        else:
            raise TypeError("cmd is a shell line (str) or an argv (a non-empty list of str)")
        if env is not None:
            body["env"] = dict(env)
        if cwd is not None:
            body["cwd"] = cwd
        if user is not None:
            body["user"] = user
        return body

    @overload
    def run(self, cmd: Cmd, *, env: Optional[Mapping[str, str]] = ..., cwd: Optional[str] = ...,
            user: Union[int, str, None] = ..., stdin: Union[str, bytes, None] = ...,
            timeout: Optional[float] = ..., on_stdout: Optional[OutputCallback] = ...,
            on_stderr: Optional[OutputCallback] = ..., output_encoding: str = ...,
            background: Literal[False] = ...) -> CommandResult: ...

    @overload
    def run(self, cmd: Cmd, *, env: Optional[Mapping[str, str]] = ..., cwd: Optional[str] = ...,
            user: Union[int, str, None] = ..., stdin: Union[str, bytes, None] = ...,
            timeout: Optional[float] = ..., on_stdout: Optional[OutputCallback] = ...,
            on_stderr: Optional[OutputCallback] = ..., output_encoding: str = ...,
            background: Literal[True]) -> Command: ...

    def run(self, cmd: Cmd, *, env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
            user: Union[int, str, None] = None, stdin: Union[str, bytes, None] = None,
            timeout: Optional[float] = None, on_stdout: Optional[OutputCallback] = None,
            on_stderr: Optional[OutputCallback] = None, output_encoding: str = "utf8",
            background: bool = False) -> Union[CommandResult, Command]:
        """Runs a command in a new shell (cwd and variables do not carry over: see
        :meth:`session`) and answers its result; a non-zero exit is not an error until
        ``.check()``.

        Args:
            cmd: a shell line (``str``, run by ``/bin/sh -c``) or an argv (list of str).
            env: variables to set; cwd: the absolute directory to run in.
            user: a uid (int) or ``"uid"`` / ``"uid:gid"``.
            stdin: text, or bytes that are UTF-8 text (else ValueError), sent to it, then
                closed.
            timeout: seconds; the command's process group is killed in the guest when
                it passes (``result.timed_out``, and ``check()`` raises
                CommandTimedOutError). None: no limit.
            on_stdout, on_stderr: called with each piece of output text as it arrives
                (the result still holds all of it).
            output_encoding: ``"base64"`` to get the exact bytes in
                ``result.stdout_bytes`` (``"utf8"``: invalid bytes become U+FFFD).
            background: start it and answer a :class:`Command` handle at once (wait
                on it, send it input, kill it); ``stdin`` and the callbacks do not
                apply (use ``Command.send_stdin`` and ``Command.stream``).
        Raises: SandboxNotFoundError, SandboxPausedError, SandboxArchivedError,
            WrongStateError (``.state``), InvalidRequestError (a bad cwd, user,
            timeout), VMError.
        """
        if background:
            if stdin is not None or on_stdout is not None or on_stderr is not None:
                raise TypeError("a background command takes its input with send_stdin and "
                                "its output with stream/output/wait")
            return self.commands.start(cmd, env=env, cwd=cwd, user=user, timeout=timeout)
        body = self._command_body(cmd, env, cwd, user)
        if stdin is not None:
            if isinstance(stdin, bytes):
                try:
                    stdin = stdin.decode("utf-8")
                except UnicodeDecodeError as e:
                    # The API takes stdin as a JSON string: text only.
                    raise ValueError(f"stdin is not UTF-8 text (byte {e.start} of {len(stdin)}); for binary "
                                     "input write it to a file (files.write) and redirect from it, or run in "
                                     "the background and use Command.send_stdin") from None
            body["stdin"] = stdin
        return self._guard(lambda: run_exec(self._box._t, self._path + "/exec", body, cmd, timeout,
                                             on_stdout, on_stderr, output_encoding))

    def session(self, *, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                user: Union[int, str, None] = None) -> Session:
        """Starts a shell session whose cwd and exported variables carry over between
        its commands (a context manager that closes it). Raises SandboxNotFoundError,
        WrongStateError, InvalidRequestError."""
        body: Dict[str, Any] = {}
        if cwd is not None:
            body["cwd"] = cwd
        if env is not None:
            body["env"] = dict(env)
        if user is not None:
            body["user"] = user
        return Session(self, self._call("POST", self._path + "/sessions", body))

    def sessions(self) -> List[Session]:
        """The sandbox's open sessions."""
        answer = self._call("GET", self._path + "/sessions") or {}
        return [Session(self, d) for d in answer.get("sessions", [])]

    # --- snapshots and forks ------------------------------------------------------------------
    def snapshot(self, wait_durable: bool = False, leave_paused: bool = False) -> Snapshot:
        """Snapshots the sandbox's memory, disk and processes (a pause of milliseconds;
        it runs on after unless ``leave_paused``).

        Args:
            wait_durable: answer once the snapshot is saved (``durable`` True).
            leave_paused: leave the sandbox ``sleeping``: its next command or file call
                wakes it (no ``resume()`` needed).
        Raises: SandboxNotFoundError, WrongStateError, VMError, DiskFullError.
        """
        body = {"wait_durable": bool(wait_durable), "leave_paused": bool(leave_paused)}
        snap = Snapshot(self._box, self._call("POST", self._path + "/snapshots", body))
        if leave_paused:
            self.state = "sleeping"
        return snap

    def snapshots(self) -> List[Snapshot]:
        """The snapshots taken of this sandbox."""
        return self._box.snapshots.list(sandbox_id=self.id)

    @overload
    def fork(self) -> "Sandbox": ...

    @overload
    def fork(self, n: int) -> List["Sandbox"]: ...

    def fork(self, n: Optional[int] = None) -> Union["Sandbox", List["Sandbox"]]:
        """Copies the sandbox as it is now (memory, files, processes) into new running
        sandboxes; changes in one do not reach the others.

        ``fork()`` answers one Sandbox; ``fork(n=k)`` (1-4) answers a list, also for
        k=1.
        Raises: ForkError (some children made, some not: ``.sandboxes``, ``.errors``),
            the first child's error when none was made (OverCapacityError, VMError...),
            SandboxNotFoundError, WrongStateError, InvalidRequestError (n out of range).
        """
        body = {"n": 1 if n is None else n}
        answer = self._call("POST", self._path + "/fork", body) or {}
        made: List[Sandbox] = []
        errors: List[LithosBoxError] = []
        for child in answer.get("children", []):
            if child.get("sandbox"):
                made.append(Sandbox(self._box, child["sandbox"]))
            else:
                errors.append(error_from_answer(0, json.dumps({"error": child.get("error") or {}}).encode()))
        if errors or not made:
            if not errors:
                errors.append(LithosBoxError("the daemon answered a fork without children", code="fork_failed"))
            raise ForkError(made, errors)
        return made[0] if n is None else made

    # --- rest states -----------------------------------------------------------------------------
    def pause(self) -> "Sandbox":
        """Stops its vCPUs until :meth:`resume` (commands and files raise
        SandboxPausedError meanwhile). Raises WrongStateError, VMError."""
        return self._transition("pause")

    def resume(self) -> "Sandbox":
        """Lets a paused or sleeping sandbox run again. Raises WrongStateError, VMError."""
        return self._transition("resume")

    def sleep(self) -> "Sandbox":
        """Stops its vCPUs; its next command or file call wakes it transparently.
        Raises WrongStateError, VMError."""
        return self._transition("sleep")

    def archive(self, wait: bool = True) -> "Sandbox":
        """Saves its memory, disk and processes and frees its VM (``archived``; it
        stops counting against the daemon's caps). ``wait=False`` answers at once
        (``archiving``, with ``progress``). Raises WrongStateError, VMError, DiskFullError."""
        return self._transition("archive", {"wait": bool(wait)})

    def unarchive(self, wait: bool = True) -> "Sandbox":
        """Brings an archived sandbox back (``running``, its processes as they were).
        ``wait=False`` answers at once (``unarchiving``). Raises WrongStateError,
        OverCapacityError, VMError."""
        return self._transition("unarchive", {"wait": bool(wait)})

    def reboot(self) -> "Sandbox":
        """Restarts its guest: files stay; processes and sessions end. Answers once
        the guest answers again. Raises WrongStateError, VMError."""
        return self._transition("reboot")

    def wait_state(self, *states: str, timeout: float = 300.0, poll: float = 0.5) -> "Sandbox":
        """Polls until its state is one of ``states`` (e.g. after ``archive(wait=False)``).
        Raises LithosBoxTimeoutError, WrongStateError (it went to ``error``)."""
        from .errors import LithosBoxTimeoutError
        deadline = time.monotonic() + timeout
        while True:
            self.refresh()
            if self.state in states:
                return self
            if self.state == "error":
                raise WrongStateError(f"sandbox {self.id} failed: {self.error}", state="error")
            if time.monotonic() >= deadline:
                raise LithosBoxTimeoutError(f"sandbox {self.id} is {self.state}, not {'/'.join(states)}, "
                                            f"after {timeout} s")
            time.sleep(poll)

    def delete(self) -> None:
        """Stops its VM and deletes it (its snapshots stay). Raises SandboxNotFoundError."""
        self._call("DELETE", self._path)
        self.state = "deleted"

    # --- logs and figures --------------------------------------------------------------------------
    def console_log(self, tail_bytes: Optional[int] = None) -> str:
        """The end of its guest console (default 64 KiB)."""
        return self._call("GET", self._path + "/logs/console", query={"tail_bytes": tail_bytes},
                          expect_json=False).decode("utf-8", "replace")

    def vmm_log(self, tail_bytes: Optional[int] = None) -> str:
        """The end of its VMM process's log (how it started, restored, ended).

        Args:
            tail_bytes: at most this many bytes (1 to 1 MiB; default 64 KiB).
        Raises:
            InvalidRequestError: ``tail_bytes`` out of range.
            SandboxNotFoundError.
        """
        return self._call("GET", self._path + "/logs/vmm", query={"tail_bytes": tail_bytes},
                          expect_json=False).decode("utf-8", "replace")

    def metrics(self) -> Dict[str, Any]:
        """Host-side figures (``cpu_time_ms``, ``vmm_rss_bytes``, ``disk_bytes``...);
        never wakes it."""
        return dict(self._call("GET", self._path + "/metrics") or {})

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, state={self.state!r})"


class Sandboxes:
    """The daemon's sandboxes (``box.sandboxes``)."""

    def __init__(self, box: "LithosBox") -> None:
        self._box = box

    def create(self, image: Optional[str] = None, *, template: Optional[str] = None,
               snapshot_id: Optional[str] = None, cpus: Optional[int] = None,
               memory_mb: Optional[int] = None, disable_internet: Optional[bool] = None,
               labels: Optional[Mapping[str, str]] = None, timeout_s: Optional[int] = None,
               autosleep_s: Optional[int] = None, on_timeout: Optional[str] = None) -> Sandbox:
        """Creates a sandbox and answers it once its guest answers (``running``).

        Args:
            image: an image name (``default``, ``tiny``), default the daemon's.
            template: a template's name; while it builds, the client waits (up to the
                client's ``template_wait``, 300 s by default).
            snapshot_id: restore this snapshot instead (its shape).
            cpus: 1-4 (default 2); memory_mb: 128-8192 (default 1024).
            labels: string labels (the API's ``metadata``).
            timeout_s: delete it this many seconds after creation (0: never).
            autosleep_s: sleep it after this many idle seconds (0: never).
            on_timeout: ``"delete"`` (default) or ``"archive"`` at ``end_at``.
        Raises: InvalidRequestError (out of range, unknown image, shape_mismatch),
            SnapshotNotFoundError, TemplateNotFoundError, TemplateBuildingError (still
            building after ``template_wait``), OverCapacityError, VMError, DiskFullError.
        """
        body: Dict[str, Any] = {}
        for key, value in (("image", image), ("template", template), ("snapshot_id", snapshot_id),
                           ("cpus", cpus), ("memory_mb", memory_mb), ("disable_internet", disable_internet),
                           ("timeout_s", timeout_s), ("autosleep_s", autosleep_s), ("on_timeout", on_timeout)):
            if value is not None:
                body[key] = value
        if labels is not None:
            body["metadata"] = dict(labels)
        deadline = time.monotonic() + self._box.template_wait
        while True:
            try:
                return Sandbox(self._box, self._box._t.call("POST", "/v1/sandboxes", body))
            except TemplateBuildingError as e:
                left = deadline - time.monotonic()
                if left <= 0:
                    e.message += f" (waited {self._box.template_wait:.0f} s: the client's template_wait)"
                    raise
                time.sleep(min(left, max(0.2, 1.0 if e.retry_after is None else e.retry_after)))

    def get(self, sandbox_id: str) -> Sandbox:
        """A sandbox by id (e.g. from another script). Raises SandboxNotFoundError."""
        return Sandbox(self._box, self._box._t.call("GET", f"/v1/sandboxes/{segment(sandbox_id)}"))

    def list(self, state: Optional[str] = None, labels: Optional[Mapping[str, str]] = None) -> List[Sandbox]:
        """Every sandbox, or those in ``state`` having all of ``labels``. Raises
        InvalidRequestError (an unknown state)."""
        query: Dict[str, Any] = {"state": state}
        for k, v in (labels or {}).items():
            query[f"metadata.{k}"] = v
        return [Sandbox(self._box, d) for d in self._box._t.pages("/v1/sandboxes", "sandboxes", query)]

    def delete(self, sandbox_id: str) -> None:
        """Deletes a sandbox by id (``Sandbox.delete``)."""
        self._box._t.call("DELETE", f"/v1/sandboxes/{segment(sandbox_id)}")

