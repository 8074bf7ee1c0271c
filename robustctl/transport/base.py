"""The Transport protocol and its result type."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from robustctl import process as _process

if TYPE_CHECKING:
    from robustctl.inventory import Host


MAX_STDOUT_BYTES = _process.MAX_STDOUT_BYTES
"""Bound on one command's stdout, bytes (see :data:`robustctl.process.MAX_STDOUT_BYTES`)."""
MAX_STDERR_BYTES = _process.MAX_STDERR_BYTES
"""What is kept of one command's stderr: its last bytes."""


@dataclass(frozen=True)
class CommandResult:
    """What one command printed and how it ended.

    Attributes:
        host: inventory name. exit_status: the command's exit status (-N: killed by signal N).
        stdout: raw bytes, complete. stderr: raw bytes, its last :data:`MAX_STDERR_BYTES`. elapsed_s: wall seconds including connection setup.
    """

    host: str
    exit_status: int
    stdout: bytes
    stderr: bytes
    elapsed_s: float

    def stderr_tail(self, limit: int = 200) -> str:
        """Last non-empty stderr line (e.g. a traceback's exception line), at most ``limit`` chars."""
        lines = [ln.strip() for ln in self.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
        return lines[-1][:limit] if lines else ""


class Transport(Protocol):
    """Runs commands on one kind of host connection.

    Implementations raise :class:`~robustctl.errors.HostUnreachable` (cannot connect or
    authenticate; retryable), :class:`~robustctl.errors.HostKeyError` (not retryable),
    :class:`~robustctl.errors.CommandTimeout` (deadline passed; the remote command is abandoned) and
    :class:`~robustctl.errors.OutputTooLarge` (the command printed too much and was stopped).
    """

    def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout_s: float,
        keep_stdin_open: bool = False,
    ) -> CommandResult:
        """Run ``argv`` on ``host``, feeding ``stdin``; wait at most ``timeout_s``.

        ``stdin`` is closed once written, unless ``keep_stdin_open``: then it stays open until the
        command ends or the run is stopped, the lifeline of a streamed probe
        (:func:`robustctl.probes.streamed_argv`). stdout is bounded by
        :data:`MAX_STDOUT_BYTES` (:class:`~robustctl.errors.OutputTooLarge` past it); only the
        last :data:`MAX_STDERR_BYTES` of stderr are kept.
        """
        ...

    def close(self) -> None:
        """Release every connection; further ``run`` calls reconnect."""
        ...


def remote_command(argv: Sequence[str]) -> str:
    """The single string an SSH server hands to the login shell: ``argv`` quoted once with shlex."""
    if not argv:
        raise ValueError("empty argv")
    return shlex.join(argv)
