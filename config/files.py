"""Atomic file writes shared by every layer (uploaded model bytes, generated variants, offline
outputs): a reader never sees half a file."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


def replace_atomic(path: Path, write: Callable[[Path], None], suffix: str = ".tmp") -> None:
    """Create ``path`` (parents too) by ``write``-ing a temporary file of its own beside it and
    renaming it over ``path``: a concurrent reader never sees half a file, and concurrent writers
    (two workers caching the same variant) never share, or rename away, each other's file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=suffix)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def unreadable(exc: OSError | UnicodeDecodeError) -> str:
    """Why a user's file could not be read, in the words of every command's one-line error
    (``PATH: no such file``): the config, a history CSV, a trace."""
    if isinstance(exc, UnicodeDecodeError):
        return "not a UTF-8 text file"
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, IsADirectoryError):
        return "is a directory"
    if isinstance(exc, PermissionError):
        return "permission denied"
    return f"cannot read ({exc.strerror or exc})"


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (:func:`replace_atomic`)."""
    replace_atomic(path, lambda tmp: tmp.write_bytes(data))
