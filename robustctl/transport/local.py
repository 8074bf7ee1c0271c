"""The local transport: argv lists through subprocess, never a shell."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from robustctl.errors import CommandTimeout, HostUnreachable
from robustctl.transport.base import CommandResult

if TYPE_CHECKING:
    from robustctl.inventory import Host


class LocalTransport:
    """Runs commands on this machine. Each command gets its own process group, killed on timeout."""

    def run(
        self, host: Host, argv: Sequence[str], *, stdin: bytes | None = None, timeout_s: float
    ) -> CommandResult:
        """See :meth:`robustctl.transport.base.Transport.run`.

        Raises:
            HostUnreachable: the program does not exist or cannot be executed.
            CommandTimeout: ``timeout_s`` passed; the whole process group was killed.
        """
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise HostUnreachable(host.name, f"cannot run {argv[0]!r}: {exc.strerror or exc}") from None
        try:
            out, err = proc.communicate(input=stdin or b"", timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise CommandTimeout(host.name, f"command timed out after {timeout_s:g}s") from None
        except BaseException:
            _kill_group(proc)
            raise
        return CommandResult(host.name, proc.returncode, out, err, time.monotonic() - start)

    def close(self) -> None:
        """Nothing to release."""


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.communicate(timeout=5)
    except (subprocess.TimeoutExpired, ValueError, OSError):
        pass
