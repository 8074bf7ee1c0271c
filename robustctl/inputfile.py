"""Opening a file a user named, without ever blocking on it: regular files only.

Every reader of user-given files (inventory YAML, ``--from-report`` JSON, ``analyze`` artefacts,
saved py-spy dumps, SSH identity files, known_hosts, the SSH client config, kubeconfig and the
credentials it names) opens through :func:`open_regular`, and each turns :class:`NotReadable` into
its own error (a config error, an unreadable artefact entry, a dump that could not be parsed).
:func:`read_regular` is the whole-file read of such a path under a byte bound the caller names.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["NotReadable", "file_kind", "open_regular", "read_bounded", "read_regular"]

_CHUNK = 1 << 20
"""Most bytes asked of one ``os.read`` by :func:`read_bounded` (a buffer of that size is allocated)."""


class NotReadable(Exception):
    """``path`` cannot be read as a regular file.

    Args:
        reason: one line without the path, e.g. ``"no such file"``, ``"is a directory"``,
            ``"is a FIFO, not a regular file"``, ``"permission denied"``, ``"cannot read: Input/output error"``.
        special: True when the path exists but is not a regular file (a directory, FIFO, device, socket).
        missing: True when nothing is at the path (``"no such file"``), for readers that treat an
            absent optional file (a default known_hosts, ``~/.ssh/config``) as empty.
    """

    def __init__(self, reason: str, *, special: bool = False, missing: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.special = special
        self.missing = missing


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

    Args:
        path: the file.

    Returns:
        The open descriptor (read-only, non-blocking, close-on-exec).

    Raises:
        NotReadable: missing, a directory, a FIFO, a device or socket, no permission, or any other
            ``OSError``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise NotReadable("no such file", missing=True) from None
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


def read_bounded(fd: int, max_bytes: int) -> bytes:
    """Everything left in the open regular file ``fd``, at most ``max_bytes`` bytes.

    At most ``max_bytes + 1`` bytes are read, so a file that grows past the bound after an ``fstat``
    (or a ``/proc``-style file that says 0 bytes) is refused too, and memory stays bounded. The
    caller keeps and closes ``fd``.

    Args:
        fd: an open regular file, read from its current offset.
        max_bytes: the bound, bytes.

    Returns:
        The bytes read.

    Raises:
        NotReadable: ``"is larger than N bytes"`` past the bound, ``"cannot read: ..."`` when a read
            fails.
    """
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise NotReadable(f"is larger than {max_bytes} bytes")
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:
            # what fstat said (and one byte more, to see growth), then _CHUNK at a time: os.read
            # allocates what it is asked for, so a small file is not read into a large buffer
            want = size + 1 - total if total <= size else _CHUNK
            chunk = os.read(fd, min(want, _CHUNK, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise NotReadable(f"cannot read: {exc.strerror or exc}") from None
    if total > max_bytes:
        raise NotReadable(f"is larger than {max_bytes} bytes")
    return b"".join(chunks)


def read_regular(path: str | Path, max_bytes: int) -> bytes:
    """The whole regular file ``path``, at most ``max_bytes`` bytes, read without ever blocking.

    :func:`open_regular` then :func:`read_bounded`: a FIFO, a device such as ``/dev/zero``, a
    directory or a socket is refused before any read, and a regular file past the bound is refused
    after at most ``max_bytes + 1`` bytes.

    Args:
        path: the file.
        max_bytes: the bound, bytes (the caller's named constant for its kind of file).

    Returns:
        The file's bytes.

    Raises:
        NotReadable: as :func:`open_regular` and :func:`read_bounded`.
    """
    fd = open_regular(path)
    try:
        return read_bounded(fd, max_bytes)
    finally:
        os.close(fd)
