"""Running one argv list as its own process group, never leaving the group behind on a failure.

The one runner of the local transport and of the Slurm back end: no shell, a timeout on every call, a
bound on what the command may print, and the whole process group (the command and anything it
started) killed with SIGKILL when the call does not end normally: on timeout, on too much output, and
on any exception while waiting, ``KeyboardInterrupt`` included. While it runs the group is registered
with :mod:`robustctl.interrupts`, so an interruption seen by another thread stops it too. A command
that exits by itself keeps whatever it started in the background (``nohup ... &``), as a shell would.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from robustctl import interrupts

__all__ = [
    "MAX_STDERR_BYTES",
    "MAX_STDOUT_BYTES",
    "Completed",
    "OutputLimitExceeded",
    "TailBuffer",
    "kill_group",
    "run_argv",
]

MAX_STDOUT_BYTES = 16 << 20
"""Default bound on what one command may print on stdout (16 MiB). The largest legitimate output is
a ``stacks`` probe of a host with 8 ranks and thousands of threads (a few MiB); 64 hosts at once at
the bound stay near 1 GiB on the controller. A command that prints more is killed."""

MAX_STDERR_BYTES = 1 << 20
"""What is kept of a command's stderr: its last 1 MiB (only its last lines are ever shown)."""

_REAP_S = 5.0
"""How long a killed group's leader is waited for (reaped, its pipes drained) before giving up."""
_CHUNK = 1 << 16


class OutputLimitExceeded(Exception):
    """The command printed more than its stdout bound; its process group was killed.

    Args:
        limit: the bound, bytes.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(f"printed more than {limit} bytes on stdout; stopped")
        self.limit = limit


@dataclass(frozen=True)
class Completed:
    """A command that ended by itself.

    Attributes:
        returncode: its exit status (negative: killed by that signal, from outside).
        stdout, stderr: what it printed, as bytes (stderr: its last :data:`MAX_STDERR_BYTES`).
        elapsed_s: seconds from start to exit (monotonic).
    """

    returncode: int
    stdout: bytes
    stderr: bytes
    elapsed_s: float


class TailBuffer:
    """The last ``limit`` bytes of a stream (older bytes are dropped as new ones arrive)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buf = bytearray()

    def add(self, data: bytes) -> None:
        """Append ``data``, keeping the last ``limit`` bytes."""
        self._buf += data
        if len(self._buf) > 2 * self.limit:
            del self._buf[: len(self._buf) - self.limit]

    def value(self) -> bytes:
        """The kept bytes (at most ``limit``)."""
        return bytes(self._buf[-self.limit :]) if self.limit else b""


def run_argv(
    argv: Sequence[str],
    *,
    timeout_s: float,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
    keep_stdin_open: bool = False,
    max_stdout: int = MAX_STDOUT_BYTES,
    label: str = "",
) -> Completed:
    """Run ``argv`` (no shell) in a new session and process group and wait for it.

    Args:
        argv: the program and its arguments.
        timeout_s: seconds before the group is killed.
        stdin: bytes written to its standard input; ``None``: ``/dev/null``.
        env: its whole environment (``None``: this process's).
        keep_stdin_open: after ``stdin`` is written, keep the pipe open until the command ends (a
            streamed probe's lifeline: it stops itself when the pipe closes); else close it.
        max_stdout: bound on its stdout, bytes.
        label: what :mod:`robustctl.interrupts` calls it.

    Returns:
        Its exit status and output.

    Raises:
        OSError: the program does not exist or cannot be executed (nothing was started).
        subprocess.TimeoutExpired: ``timeout_s`` passed; the whole process group was killed first.
        OutputLimitExceeded: it printed more than ``max_stdout`` bytes; the group was killed first.
        BaseException: whatever interrupted the wait (``KeyboardInterrupt`` …), after killing the group.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=None if env is None else dict(env),
        start_new_session=True,
    )
    try:
        with interrupts.register_group(proc.pid, label or os.path.basename(str(argv[0]))):
            out, err = _pump(proc, stdin or b"", keep_stdin_open, deadline, max_stdout)
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise subprocess.TimeoutExpired(list(argv), timeout_s) from None
    except BaseException:  # too much output, KeyboardInterrupt, SystemExit …: never leave the group running
        kill_group(proc)
        raise
    finally:
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            _close(stream)
    return Completed(proc.returncode, out, err, time.monotonic() - start)


def _pump(
    proc: subprocess.Popen[bytes], data: bytes, keep_open: bool, deadline: float, max_stdout: int
) -> tuple[bytes, bytes]:
    """Write ``data`` to the command and read its stdout and stderr until both end."""
    assert proc.stdout is not None and proc.stderr is not None
    out = bytearray()
    err = TailBuffer(MAX_STDERR_BYTES)
    view = memoryview(data)
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        if proc.stdin is not None:
            if view:
                os.set_blocking(proc.stdin.fileno(), False)
                sel.register(proc.stdin, selectors.EVENT_WRITE)
            elif not keep_open:
                _close(proc.stdin)
        readers = 2
        while readers:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, 0)
            for key, _ in sel.select(timeout=min(left, 1.0)):
                if key.fileobj is proc.stdin:
                    try:
                        sent = os.write(proc.stdin.fileno(), view[:_CHUNK])
                    except BrokenPipeError:
                        sent, view = 0, view[:0]
                    view = view[sent:]
                    if not view:
                        sel.unregister(proc.stdin)
                        if not keep_open:
                            _close(proc.stdin)
                    continue
                chunk = os.read(key.fd, _CHUNK)
                if not chunk:
                    sel.unregister(key.fileobj)
                    readers -= 1
                elif key.data is out:
                    out += chunk
                    if len(out) > max_stdout:
                        raise OutputLimitExceeded(max_stdout)
                else:
                    err.add(chunk)
    return bytes(out), err.value()


def _close(stream: object) -> None:
    close = getattr(stream, "close", None)
    if close is not None:
        try:
            close()
        except OSError:
            pass


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group led by ``proc`` (started with ``start_new_session``) and reap ``proc``.

    Never raises: a group already gone, or a leader that does not exit within a few seconds, is left.
    """
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=_REAP_S)
    except (subprocess.TimeoutExpired, OSError):
        pass
