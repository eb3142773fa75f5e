"""lithosbox: the Python client of nanovmd, nanovm's sandbox daemon.

Standard library only, Python >= 3.9. The reference is docs/python.md::

    from lithosbox import LithosBox

    with LithosBox() as box:
        sandbox = box.sandboxes.create(cpus=1, memory_mb=256)
        print(sandbox.run("uname -r").check().stdout)
        sandbox.delete()
"""

from .client import LithosBox
from .commands import Command, Commands
from .errors import (BusyError, CommandNotFoundError, DaemonNotRunningError, DiskFullError,
                     FileTooLargeError, ForkError, InternalError, InvalidRequestError, LithosBoxError,
                     LithosBoxTimeoutError, NotFoundError, OverCapacityError, PathConflictError,
                     PathNotFoundError, PermissionDeniedError, SandboxArchivedError, SandboxNotFoundError,
                     SandboxPausedError, SessionNotFoundError, SnapshotNotFoundError, TemplateBuildingError,
                     TemplateNotFoundError, UnauthorizedError, VMError, WrongStateError)
from .files import FileInfo, Files
from .results import CommandFailedError, CommandResult, CommandTimedOutError
from .sandbox import Sandbox, Sandboxes
from .sessions import Session
from .snapshots import Snapshot, Snapshots
from .templates import Template, Templates

# The timeout class by a short name, as lithosbox.TimeoutError (kept out of __all__:
# a star import must not shadow the builtin TimeoutError, of which it is a subclass).
TimeoutError = LithosBoxTimeoutError  # noqa: A001

__version__ = "0.1.0"

__all__ = [
    "LithosBox", "Sandbox", "Sandboxes", "Snapshot", "Snapshots", "Template", "Templates",
    "Session", "Command", "Commands", "CommandResult", "FileInfo", "Files",
    "LithosBoxError", "DaemonNotRunningError", "InvalidRequestError", "UnauthorizedError",
    "PermissionDeniedError", "NotFoundError", "SandboxNotFoundError", "SnapshotNotFoundError",
    "PathNotFoundError", "SessionNotFoundError", "CommandNotFoundError", "TemplateNotFoundError",
    "WrongStateError", "SandboxPausedError", "SandboxArchivedError", "PathConflictError",
    "FileTooLargeError", "OverCapacityError", "BusyError", "TemplateBuildingError", "VMError",
    "DiskFullError", "InternalError", "LithosBoxTimeoutError", "ForkError",
    "CommandFailedError", "CommandTimedOutError",
]
