"""Writing output files safely: path checks before any work, and atomic replacement so a
reader never sees a partial trace.

Owns output path checks and atomic writes; it may import nothing of cute_prof but
:mod:`.errors`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import ProfileBufferError

__all__ = ["atomic_open", "atomic_write", "check_output_path"]


def check_output_path(path) -> Path:
    """Validate a trace output path before any work is done; returns it as a Path."""
    try:
        target = Path(os.fspath(path))
    except TypeError:
        raise ProfileBufferError(f"trace path must be a str or os.PathLike, got {path!r}") from None
    if target.is_dir():
        raise ProfileBufferError(f"trace path {str(target)!r} is a directory; give a file name")
    parent = target.parent
    if not parent.is_dir():
        raise ProfileBufferError(
            f"cannot write {str(target)!r}: directory {str(parent)!r} does not exist; create it "
            "first (os.makedirs) or choose another path"
        )
    return target


@contextlib.contextmanager
def atomic_open(path, mode: str = "w", *, encoding: str | None = "utf-8") -> Iterator[Any]:
    """Open a temporary sibling of ``path`` for writing; on success fsync and rename it
    over ``path``, on any exception delete it. Readers never see a partial file."""
    target = check_output_path(path)
    temp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
    # O_EXCL: never clobber someone else's file; 0o666 lets the umask decide permissions.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        binary = "b" in mode
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable where supported
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def atomic_write(path: str | os.PathLike):
    """Binary :func:`atomic_open`."""
    return atomic_open(path, "wb")
