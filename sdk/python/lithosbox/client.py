"""The client: :class:`LithosBox`, one connection pool to one nanovmd."""

from types import TracebackType
from typing import Any, Dict, Optional, Type

from ._transport import Transport, find_endpoint
from .sandbox import Sandboxes
from .snapshots import Snapshots
from .templates import Templates

__all__ = ["LithosBox"]


class LithosBox:
    """A client of the nanovm daemon (nanovmd) on this machine.

    ``LithosBox()`` finds the daemon like the ``nanovm`` command line does:
    ``LITHOSBOX_URL`` (``http://127.0.0.1:PORT`` with ``LITHOSBOX_TOKEN``, or
    ``unix:///path/nanovmd.sock``), else ``NANOVM_URL`` (+ ``NANOVM_TOKEN``), else the
    Unix socket ``<state>/nanovmd.sock`` with ``<state>`` = ``$NANOVM_STATE_DIR``,
    ``/var/lib/nanovm`` for root, or ``${XDG_DATA_HOME:-~/.local/share}/nanovm``.
    Nothing is sent until the first call; a daemon that is not there raises
    DaemonNotRunningError then, saying how to start it.

    Args:
        url: ``http://127.0.0.1:PORT`` or ``unix:///path`` (instead of the environment).
        token: the bearer token for TCP (default: LITHOSBOX_TOKEN, NANOVM_TOKEN or
            ``<state>/token``).
        state_dir: the daemon's state directory (its socket is inside).
        timeout: seconds to wait for an answer to an ordinary call (default 600;
            commands and waits set their own from their ``timeout``).
        template_wait: seconds ``sandboxes.create(template=...)`` waits for a template
            that is still building (default 300).

    Attributes:
        sandboxes (:class:`Sandboxes`), snapshots (:class:`Snapshots`),
        templates (:class:`Templates`).

    A context manager: ``with LithosBox() as box:`` closes it at the end (sandboxes
    stay; delete them yourself).
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 state_dir: Optional[str] = None, timeout: Optional[float] = 600.0,
                 template_wait: float = 300.0) -> None:
        self._t = Transport(find_endpoint(url, token, state_dir), timeout)
        self.template_wait = float(template_wait)
        self.sandboxes = Sandboxes(self)
        self.snapshots = Snapshots(self)
        self.templates = Templates(self)

    @property
    def address(self) -> str:
        """The daemon's address: ``unix:///...`` or ``http://HOST:PORT``."""
        return self._t.endpoint.address()

    def health(self) -> Dict[str, Any]:
        """The daemon's ``GET /v1/health``: version, uptime, sandbox count."""
        return dict(self._t.call("GET", "/v1/health") or {})

    def close(self) -> None:
        """Closes the client's connections (sandboxes and snapshots stay). Calls after
        it raise LithosBoxError (``client_closed``)."""
        self._t.close()

    def __enter__(self) -> "LithosBox":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LithosBox({self.address!r})"
