"""The Transport protocol and its result type."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from robustctl.inventory import Host


@dataclass(frozen=True)
class CommandResult:
    """What one command printed and how it ended.

    Attributes:
        host: inventory name. exit_status: the command's exit status (-N: killed by signal N).
        stdout, stderr: raw bytes, complete. elapsed_s: wall seconds including connection setup.
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
    authenticate; retryable), :class:`~robustctl.errors.HostKeyError` (not retryable) and
    :class:`~robustctl.errors.CommandTimeout` (deadline passed; the remote command is abandoned).
    """

    def run(
        self, host: Host, argv: Sequence[str], *, stdin: bytes | None = None, timeout_s: float
    ) -> CommandResult:
        """Run ``argv`` on ``host``, feeding ``stdin`` then closing it; wait at most ``timeout_s``."""
        ...

    def close(self) -> None:
        """Release every connection; further ``run`` calls reconnect."""
        ...


def remote_command(argv: Sequence[str]) -> str:
    """The single string an SSH server hands to the login shell: ``argv`` quoted once with shlex."""
    if not argv:
        raise ValueError("empty argv")
    return shlex.join(argv)
