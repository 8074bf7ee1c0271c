"""Opening a file a user named, without ever blocking on it: regular files only.

Every reader of user-given files (inventory YAML, ``--from-report`` JSON, ``analyze`` artefacts,
saved py-spy dumps) opens through :func:`open_regular`, and each turns :class:`NotReadable` into
its own error (a config error, an unreadable artefact entry, a dump that could not be parsed).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["NotReadable", "file_kind", "open_regular"]


class NotReadable(Exception):
    """``path`` cannot be read as a regular file.

    Attributes:
        reason: one line without the path, e.g. ``"no such file"``, ``"is a directory"``,
            ``"is a FIFO, not a regular file"``, ``"permission denied"``, ``"cannot read: Input/output error"``.
        special: True when the path exists but is not a regular file (a directory, FIFO, device, socket).
    """

    def __init__(self, reason: str, *, special: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.special = special


def file_kind(mode: int) -> str:
    """What a non-regular ``st_mode`` is, for messages: ``"FIFO"``, ``"character device"``, ..."""
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def open_regular(path: str | Path) -> int:
    """Open ``path`` read-only and return the descriptor, only if it is a regular file.

    The file is opened with ``O_NONBLOCK`` (opening a FIFO with no writer would otherwise wait
    forever) and checked with ``fstat`` on the open descriptor, so there is no race between a check
    and the open. Reading a regular file is unaffected by ``O_NONBLOCK``. The caller closes the
    descriptor.

    Raises:
        NotReadable: missing, a directory, a FIFO, a device or socket, no permission, or any other
            ``OSError``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise NotReadable("no such file") from None
    except IsADirectoryError:
        raise NotReadable("is a directory", special=True) from None
    except PermissionError:
        raise NotReadable("permission denied") from None
    except OSError as exc:
        raise NotReadable(f"cannot read: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise NotReadable(f"cannot read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        os.close(fd)
        raise NotReadable("is a directory", special=True)
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotReadable(f"is a {file_kind(mode)}, not a regular file", special=True)
    return fd
