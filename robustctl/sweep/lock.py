"""One sweep at a time: an ``fcntl`` lock on ``<state>.sweep.lock``, beside the state store.

Separate from the store's action lock (:meth:`robustctl.store.Store.lock`), which ``--act`` takes in
turn through ``robustctl evict``: a sweep holds its own lock for its whole run, actions hold theirs
only while they plan and apply. A second sweep does not wait: it fails at once with
:class:`SweepBusy` (exit 3, "could not check"), naming the holder. The kernel drops the lock when
its holder dies, so a killed sweep leaves no stale lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from robustctl.errors import RobustctlError
from robustctl.exit_codes import ExitCode
from robustctl.store import StoreError

__all__ = ["SweepBusy", "lock_path", "sweep_lock"]


class SweepBusy(RobustctlError):
    """Another sweep holds the sweep lock (exit 3: this sweep could not check anything)."""

    exit_code = ExitCode.UNKNOWN


def lock_path(state: Path) -> Path:
    """The sweep lock file of the store at ``state``."""
    return state.with_name(state.name + ".sweep.lock")


@contextlib.contextmanager
def sweep_lock(state: Path) -> Iterator[Path]:
    """Hold the sweep lock of ``state`` for the ``with`` block; yields the lock file's path.

    Raises:
        SweepBusy: another process holds it (the message names its pid and start time).
        StoreError: the lock file cannot be created (the store's directory is missing or read-only).
    """
    path = lock_path(state)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StoreError(f"{path}: cannot create the sweep lock: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise StoreError(f"{path}: cannot lock: {exc.strerror}") from None
            raise SweepBusy(
                f"another sweep is running ({_holder(fd)}); this one exits. Lock: {path}"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "since": time.time()}).encode(), 0)
        try:
            yield path
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _holder(fd: int) -> str:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        data = {}
    since = data.get("since") if isinstance(data, dict) else None
    if not isinstance(since, (int, float)):
        return "holder unknown"
    return f"pid {data.get('pid')}, started {time.time() - float(since):.0f} s ago"
