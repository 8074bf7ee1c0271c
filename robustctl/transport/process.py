"""Running one argv list as its own process group, never leaving the group behind on a failure.

The one runner of the local transport and of the Slurm back end: no shell, a timeout on every call, and
the whole process group (the command and anything it started) killed with SIGKILL when the call does not
end normally: on timeout, and on any exception while waiting, ``KeyboardInterrupt`` included. A command
that exits by itself keeps whatever it started in the background (``nohup ... &``), as a shell would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Completed", "kill_group", "run_argv"]

_REAP_S = 5.0
"""How long a killed group's leader is waited for (reaped, its pipes drained) before giving up."""


@dataclass(frozen=True)
class Completed:
    """A command that ended by itself.

    Attributes:
        returncode: its exit status (negative: killed by that signal, from outside).
        stdout, stderr: what it printed, as bytes. elapsed_s: seconds from start to exit (monotonic).
    """

    returncode: int
    stdout: bytes
    stderr: bytes
    elapsed_s: float


def run_argv(
    argv: Sequence[str],
    *,
    timeout_s: float,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
) -> Completed:
    """Run ``argv`` (no shell) in a new session and process group and wait for it.

    Args:
        argv: the program and its arguments. timeout_s: seconds before the group is killed.
        stdin: bytes written to its standard input, which is then closed; ``None``: ``/dev/null``.
        env: its whole environment (``None``: this process's).

    Returns:
        Its exit status and output.

    Raises:
        OSError: the program does not exist or cannot be executed (nothing was started).
        subprocess.TimeoutExpired: ``timeout_s`` passed; the whole process group was killed first.
        BaseException: whatever interrupted the wait (``KeyboardInterrupt`` …), after killing the group.
    """
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=None if env is None else dict(env),
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(input=stdin, timeout=timeout_s)
    except BaseException:  # timeout, KeyboardInterrupt, SystemExit …: never leave the group running
        kill_group(proc)
        raise
    return Completed(proc.returncode, out, err, time.monotonic() - start)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group led by ``proc`` (started with ``start_new_session``) and reap ``proc``.

    Never raises: a group already gone, or a leader that does not exit within a few seconds, is left.
    """
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.communicate(timeout=_REAP_S)
    except (subprocess.TimeoutExpired, ValueError, OSError):
        pass
