"""Stopping everything a run started when it is interrupted (SIGINT, SIGTERM).

Commands run in worker threads (:mod:`robustctl.transport.fanout`), and only the main thread sees a
signal, so the threads' children must be stopped from the outside. Each running command is
registered here while it runs:

- a local command (:func:`robustctl.process.run_argv`) as its process group, which
  :func:`stop_all` kills with SIGKILL;
- a remote command as the SSH transport that carries it, which :func:`stop_all` shuts down. A probe
  streamed by robustctl holds its standard input open as a lifeline (``diagnostics/_prelude.py``,
  :func:`robustctl.probes.streamed_argv`): when the connection closes, ``sshd`` closes that input
  and the probe kills its own process group, children included. The same lifeline stops a probe
  whose controller died with SIGKILL.

:func:`handle_signals` turns SIGTERM into the same :class:`Interrupted` as SIGINT, so one ``except``
in the CLI stops the children, prints one line and exits 130 (128 + SIGINT, the shell convention).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType

__all__ = [
    "Caught",
    "Interrupted",
    "Stopped",
    "handle_signals",
    "live_commands",
    "register_closer",
    "register_group",
    "stop_all",
]


class Interrupted(KeyboardInterrupt):
    """The run was interrupted by a signal (a ``KeyboardInterrupt``, so clean-up code treats both alike).

    Args:
        signame: ``"SIGINT"`` or ``"SIGTERM"``.
    """

    def __init__(self, signame: str) -> None:
        super().__init__(signame)
        self.signame = signame


@dataclass(frozen=True)
class Stopped:
    """What :func:`stop_all` stopped.

    Attributes:
        commands: labels (host names) of the commands that were still running, in start order.
        groups: local process groups killed. transports: transports shut down (their remote
            commands stop through their lifeline).
    """

    commands: tuple[str, ...]
    groups: int
    transports: int


_lock = threading.RLock()
"""Reentrant: the signal handler takes it in the main thread, which may already hold it."""
_groups: dict[int, str] = {}
"""pgid -> label of every local command running now."""
_closers: dict[int, tuple[str, Callable[[], None]]] = {}
"""token -> (label, shut-down callable) of every remote command running now."""
_next = [0]


@contextlib.contextmanager
def register_group(pgid: int, label: str) -> Iterator[None]:
    """Register the local process group ``pgid`` (running ``label``'s command) for its lifetime."""
    with _lock:
        _groups[pgid] = label
    try:
        yield
    finally:
        with _lock:
            _groups.pop(pgid, None)


@contextlib.contextmanager
def register_closer(label: str, close: Callable[[], None]) -> Iterator[None]:
    """Register a remote command of ``label``; ``close`` (e.g. the transport's shutdown) stops it."""
    with _lock:
        _next[0] += 1
        token = _next[0]
        _closers[token] = (label, close)
    try:
        yield
    finally:
        with _lock:
            _closers.pop(token, None)


def live_commands() -> tuple[str, ...]:
    """Labels of the commands running now (local, then remote)."""
    with _lock:
        return (*_groups.values(), *(label for label, _ in _closers.values()))


def stop_all() -> Stopped:
    """Kill every registered local process group (SIGKILL) and shut down every registered transport.

    Never raises; safe to call from the main thread while worker threads still wait on the commands
    (they then see the commands end). Each transport is shut down once, whatever the number of its
    commands.
    """
    with _lock:
        groups = dict(_groups)
        closers = list(_closers.values())
    killed = _kill_groups(groups)
    seen: set[int] = set()
    for _, close in closers:
        key = id(getattr(close, "__self__", close))
        if key in seen:
            continue
        seen.add(key)
        with contextlib.suppress(Exception):
            close()
    labels = (*groups.values(), *(label for label, _ in closers))
    return Stopped(commands=tuple(dict.fromkeys(labels)), groups=killed, transports=len(seen))


@dataclass
class Caught:
    """What :func:`handle_signals` caught: ``signame`` is ``"SIGINT"``/``"SIGTERM"``, or None.

    Libraries on the way up may turn the :class:`Interrupted` exception into something else (typer
    returns exit status 130 for any ``KeyboardInterrupt``); this record says it happened anyway.
    ``commands`` are the labels of the commands running when the signal came (the clean-up on the
    way up may end some before :func:`stop_all` runs).
    """

    signame: str | None = None
    commands: tuple[str, ...] = ()


def _kill_groups(groups: dict[int, str]) -> int:
    killed = 0
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed


@contextlib.contextmanager
def handle_signals() -> Iterator[Caught]:
    """Within the block, SIGINT and SIGTERM raise :class:`Interrupted` in the main thread.

    Yields the :class:`Caught` record of the signal. The handler kills the local process groups at
    once (no clean-up code on the way up may wait on them); remote commands are stopped by
    :func:`stop_all`, which the caller runs. Outside the main thread (where handlers cannot be set)
    it catches nothing. The previous handlers are restored on exit.
    """
    caught = Caught()
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return

    def raise_interrupted(signum: int, _frame: FrameType | None) -> None:
        # One interruption is enough: later signals during the clean-up are ignored.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        caught.signame = signal.Signals(signum).name
        caught.commands = live_commands()
        with _lock:
            groups = dict(_groups)
        _kill_groups(groups)
        raise Interrupted(caught.signame)

    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, raise_interrupted)
    try:
        yield caught
    finally:
        for s, h in previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
