"""Atomic file output: the whole new file or the old one, never half of either."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from robustctl.errors import ConfigError

__all__ = ["write_atomic"]


def write_atomic(path: Path, text: str, flag: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory, flushed and renamed
    over it (POSIX ``rename`` is atomic within a file system: a reader such as node_exporter's
    textfile collector sees the old file or the new one). The file is made readable by all (0644).

    Args:
        path: the file to write (replaced whole).
        text: its new content, written as UTF-8.
        flag: the option that named ``path`` (``--textfile``), for the message.

    Raises:
        ConfigError: the directory is missing or not writable, or the disk is full (one line naming
            ``flag`` and the path; the previous file is left as it was).
    """
    parent = path.parent if str(path.parent) else Path(".")
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
