"""One sweep at a time: an ``fcntl`` lock on ``<state>.sweep.lock``, beside the state store.

Separate from the store's action lock (:meth:`robustctl.store.Store.lock`), which ``--act`` takes in
turn through ``robustctl evict``: a sweep holds its own lock for its whole run, actions hold theirs
only while they plan and apply. A second sweep does not wait: it fails at once with
:class:`SweepBusy` (exit 3, "could not check"), naming the holder. The kernel drops the lock when
its holder dies, so a killed sweep leaves no stale lock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from robustctl.errors import RobustctlError
from robustctl.exit_codes import ExitCode
from robustctl.pidlock import held_lock

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

    Args:
        state: the state store's file (the lock is :func:`lock_path` beside it).

    Yields:
        The lock file's path, while the lock is held.

    Raises:
        SweepBusy: another process holds it (the message names its pid and start time).
        StoreError: the lock file cannot be created (the store's directory is missing or read-only).
    """
    with held_lock(
        lock_path(state),
        what="sweep lock",
        busy=lambda holder: SweepBusy(
            f"another sweep is running ({holder}); this one exits. Lock: {lock_path(state)}"
        ),
    ) as path:
        yield path
