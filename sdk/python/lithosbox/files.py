"""A sandbox's files (``sandbox.files``): docs/api.md "Files".

Guest paths are absolute, without NUL bytes or ``..`` components (else
InvalidRequestError, ``invalid_path``). Every call wakes a sleeping sandbox; on a paused
one it raises SandboxPausedError, on an archived one SandboxArchivedError.
"""

import os
from typing import IO, TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Union

from .errors import PathNotFoundError

if TYPE_CHECKING:
    from .sandbox import Sandbox

__all__ = ["FileInfo", "Files"]

_BLOCK = 1 << 20


class FileInfo:
    """One guest path's facts.

    Attributes:
        path: the absolute guest path.
        name: its last component.
        type: ``file``, ``directory``, ``symlink``, ``fifo``, ``socket``,
            ``char_device`` or ``block_device``.
        size: bytes.
        mode: permission bits (an int: ``0o644``).
        mtime: RFC 3339 UTC modification time (None in a write's answer).
    """

    def __init__(self, d: Mapping[str, Any]) -> None:
        self.raw: Dict[str, Any] = dict(d)
        self.path: str = d.get("path", "")
        self.name: str = d.get("name", "")
        self.type: str = d.get("type", "")
        self.size: int = int(d.get("size") or 0)
        self.mode: int = int(d.get("mode") or 0)
        self.mtime: Optional[str] = d.get("mtime")

    @property
    def is_dir(self) -> bool:
        """True for a directory (``type == "directory"``)."""
        return self.type == "directory"

    def __repr__(self) -> str:
        return f"FileInfo(path={self.path!r}, type={self.type!r}, size={self.size}, mode={oct(self.mode)})"


def _mode_query(mode: Optional[int]) -> Optional[str]:
    if mode is None:
        return None
    if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o7777:
        raise ValueError(f"mode must be permission bits such as 0o644, not {mode!r}")
    return format(mode, "o")


class Files:
    """The files of one sandbox."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sandbox = sandbox

    @property
    def _path(self) -> str:
        return f"/v1/sandboxes/{self._sandbox.id}/files"

    def read(self, path: str, encoding: str = "utf-8") -> str:
        """A file's content as text (UTF-8 by default).

        Raises: PathNotFoundError, PathConflictError (a directory), PermissionDeniedError,
            UnicodeDecodeError (not text: use :meth:`read_bytes`).
        """
        return self.read_bytes(path).decode(encoding)

    def read_bytes(self, path: str) -> bytes:
        """A file's exact bytes (held in memory; :meth:`read_to` for large files)."""
        return self._sandbox._call("GET", self._path, query={"path": path}, expect_json=False)

    def read_to(self, path: str, file: IO[bytes]) -> int:
        """Streams a file of any size into ``file`` (a binary file object, e.g.
        ``open(local, "wb")``) a MiB at a time; answers the bytes written."""
        resp = self._sandbox._request("GET", self._path, query={"path": path}, stream=True)
        n = 0
        for chunk in resp.iter_chunks(_BLOCK):
            file.write(chunk)
            n += len(chunk)
        return n

    def write(self, path: str, data: Union[str, bytes], mode: Optional[int] = None) -> FileInfo:
        """Writes a whole file (str as UTF-8), making missing parent directories; it
        appears whole or not at all.

        Args:
            mode: permission bits (default 0o644).
        Raises: FileTooLargeError (over the daemon's --max-file-size), PathConflictError,
            PermissionDeniedError, DiskFullError.
        """
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        return FileInfo(self._sandbox._call("PUT", self._path, raw,
                                            query={"path": path, "mode": _mode_query(mode)}))

    def write_from(self, path: str, file: IO[bytes], mode: Optional[int] = None,
                   size: Optional[int] = None) -> FileInfo:
        """Writes a file from a binary file object, streamed a MiB at a time (the
        daemon takes up to its --max-file-size). ``size``: the bytes to send, found
        from a seekable file when not given (else sent chunked)."""
        if size is None:
            try:
                pos = file.tell()
                size = os.fstat(file.fileno()).st_size - pos if hasattr(file, "fileno") else None
            except (OSError, ValueError, AttributeError):
                size = None
            if size is None:
                try:
                    pos = file.tell()
                    end = file.seek(0, os.SEEK_END)
                    file.seek(pos)
                    size = end - pos
                except (OSError, ValueError, AttributeError):
                    size = None
        resp = self._sandbox._request("PUT", self._path, file, query={"path": path, "mode": _mode_query(mode)},
                                      length=size)
        return FileInfo(resp.json_body())

    def stat(self, path: str) -> FileInfo:
        """A path's type, size, mode and mtime. Raises PathNotFoundError."""
        return FileInfo(self._sandbox._call("GET", self._path + "/stat", query={"path": path}))

    def exists(self, path: str) -> bool:
        """True when the guest path exists."""
        try:
            self.stat(path)
            return True
        except PathNotFoundError:
            return False

    def list(self, path: str = "/") -> List[FileInfo]:
        """The entries of a directory (symlinks as symlinks). Raises PathNotFoundError,
        PathConflictError (not a directory)."""
        answer = self._sandbox._call("GET", self._path + "/list", query={"path": path})
        return [FileInfo(e) for e in (answer or {}).get("entries", [])]

    def mkdir(self, path: str, parents: bool = True) -> None:
        """Makes a directory (and its missing parents unless ``parents=False``).
        Raises PathConflictError when it exists as a file."""
        self._sandbox._call("POST", self._path + "/mkdir", {"path": path, "parents": parents})

    def remove(self, path: str, recursive: bool = False) -> None:
        """Removes a file or an empty directory (``recursive=True``: any directory).
        Raises PathNotFoundError, PathConflictError (a directory that is not empty)."""
        self._sandbox._call("DELETE", self._path, query={"path": path, "recursive": recursive or None})
