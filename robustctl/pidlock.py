"""A process lock that is not waited for (or only briefly): an ``fcntl`` lock on a file that names its holder.

Used where a second run must not start beside the first (one sweep at a time, one watcher per job,
one playbook run per job): the second fails at once (or after a short wait), naming the holder's pid
and how long it has held the lock. The kernel
drops the lock when its holder dies, so a killed holder leaves no stale lock; the file itself stays
(it is truncated on release).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from robustctl.store import LOCK_HOLDER_BYTES, PID_MAX, StoreError, flock_within, lock_holder

__all__ = ["HOLDER_BYTES", "POLL_S", "held_lock"]

HOLDER_BYTES = LOCK_HOLDER_BYTES
"""Most bytes of a lock file read to name its holder (the store's :data:`~robustctl.store.LOCK_HOLDER_BYTES`)."""

POLL_S = 0.1
"""Seconds between tries while waiting for a held lock: a holder's release is seen within it, and
ten tries a second cost nothing."""


@contextlib.contextmanager
def held_lock(
    path: Path,
    *,
    what: str,
    busy: Callable[[str], Exception],
    facts: Mapping[str, Any] | None = None,
    timeout_s: float = 0.0,
) -> Iterator[Path]:
    """Hold an exclusive lock on ``path`` for the ``with`` block, or fail; yields ``path``.

    The holder writes ``{"pid", "since", **facts}`` into the file for the next one's message.

    Args:
        path: the lock file (created when missing; emptied when the lock is released).
        what: the lock in messages ("sweep lock").
        busy: builds the error raised when another process holds the lock, from
            ``"pid N, started S s ago"``.
        facts: more JSON fields to record.
        timeout_s: how long to wait for the holder to let go, seconds, polling every
            :data:`POLL_S` (0: fail at once).

    Yields:
        ``path``, while the lock is held.

    Raises:
        Exception: the error ``busy`` builds: another process holds the lock.
        StoreError: the lock file cannot be created or locked (the directory is missing or read-only).
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StoreError(f"{path}: cannot create the {what}: {exc.strerror}") from None
    try:
        if not flock_within(fd, path, timeout_s, POLL_S):
            raise busy(_holder(fd))
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), **(facts or {}), "since": time.time()}).encode(), 0)
        try:
            yield path
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _holder(fd: int) -> str:
    """Who holds the lock, from what it wrote: ``pid N, started S s ago`` (or that it is unknown)."""
    data = lock_holder(fd)
    pid = data.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= PID_MAX:
        return "holder's pid unknown"
    since = data.get("since")
    ago = ""
    if isinstance(since, (int, float)) and not isinstance(since, bool) and abs(since) < 1e12:
        ago = f", started {time.time() - float(since):.0f} s ago"
    return f"pid {pid}{ago}"
