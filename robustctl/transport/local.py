"""The local transport: argv lists through subprocess, never a shell."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import TYPE_CHECKING

from robustctl.errors import CommandTimeout, HostUnreachable, OutputTooLarge
from robustctl.process import OutputLimitExceeded, run_argv
from robustctl.transport.base import MAX_STDOUT_BYTES, CommandResult

if TYPE_CHECKING:
    from robustctl.inventory import Host


class LocalTransport:
    """Runs commands on this machine, each in its own process group, killed on timeout or interruption.

    One runner for this and the Slurm back end: :func:`robustctl.process.run_argv`.

    Args:
        max_stdout: bound on one command's stdout, bytes.
    """

    def __init__(self, *, max_stdout: int = MAX_STDOUT_BYTES) -> None:
        self.max_stdout = max_stdout

    def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout_s: float,
        keep_stdin_open: bool = False,
    ) -> CommandResult:
        """See :meth:`robustctl.transport.base.Transport.run`.

        Args:
            host: the inventory host the command is for (its name labels the result and errors).
            argv: the program and its arguments, run directly (never through a shell).
            stdin: bytes written to the command's input; None: nothing.
            timeout_s: seconds the command may run before its process group is killed.
            keep_stdin_open: leave the input open after ``stdin`` is written, until the command ends.

        Returns:
            The command's exit status, its stdout, the last of its stderr and its elapsed seconds.

        Raises:
            HostUnreachable: the program does not exist or cannot be executed.
            CommandTimeout: ``timeout_s`` passed; the whole process group was killed.
            OutputTooLarge: it printed more than ``max_stdout`` bytes; the group was killed.
        """
        try:
            done = run_argv(
                argv,
                timeout_s=timeout_s,
                stdin=stdin or b"",
                keep_stdin_open=keep_stdin_open,
                max_stdout=self.max_stdout,
                label=host.name,
            )
        except subprocess.TimeoutExpired:
            raise CommandTimeout(host.name, f"command timed out after {timeout_s:g}s") from None
        except OutputLimitExceeded as exc:
            raise OutputTooLarge(host.name, str(exc)) from None
        except OSError as exc:
            raise HostUnreachable(host.name, f"cannot run {argv[0]!r}: {exc.strerror or exc}") from None
        return CommandResult(host.name, done.returncode, done.stdout, done.stderr, done.elapsed_s)

    def close(self) -> None:
        """Nothing to release."""
