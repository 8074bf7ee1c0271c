"""One transport per kind, shared by a whole run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from robustctl.transport.base import CommandResult, Transport
from robustctl.transport.local import LocalTransport

if TYPE_CHECKING:
    from robustctl.config import SchedulerSettings
    from robustctl.inventory import Host
    from robustctl.transport.srun import SrunTransport
    from robustctl.transport.ssh import SshTransport


class TransportPool:
    """Routes each host to the local, SSH or srun transport; paramiko is imported only when needed.

    Args:
        accept_new_host_keys: passed to the SSH transport (``--accept-new-host-keys``).
        override: use this transport for every host (tests: :class:`robustctl.testing.FakeTransport`).
        scheduler: the inventory's ``scheduler:`` section, for the srun transport's ``slurm.conf``.
        srun: the srun transport to use (tests: a fake with ``run``/``run_batch``); None: made on first use.
    """

    def __init__(
        self,
        *,
        accept_new_host_keys: bool = False,
        override: Transport | None = None,
        scheduler: SchedulerSettings | None = None,
        srun: SrunTransport | None = None,
    ) -> None:
        self._accept_new = accept_new_host_keys
        self._local = LocalTransport()
        self._ssh: SshTransport | None = None
        self._srun: SrunTransport | None = srun
        self._scheduler = scheduler
        self._override = override

    def for_host(self, host: Host) -> Transport:
        """The transport that reaches ``host``."""
        if self._override is not None:
            return self._override
        if host.transport == "local":
            return self._local
        if host.transport == "srun":
            return self.srun()
        if self._ssh is None:
            from robustctl.transport.ssh import SshTransport

            self._ssh = SshTransport(accept_new_host_keys=self._accept_new)
        return self._ssh

    def srun(self) -> SrunTransport:
        """The srun transport (created on first use)."""
        if self._srun is None:
            from robustctl.transport.srun import SrunTransport

            self._srun = SrunTransport.for_scheduler(self._scheduler)
        return self._srun

    def batched(self, hosts: Sequence[Host]) -> tuple[list[Host], list[Host]]:
        """(hosts reached many at a time, through one srun step per batch; the others, one by one)."""
        if self._override is not None:
            return [], list(hosts)
        return [h for h in hosts if h.transport == "srun"], [h for h in hosts if h.transport != "srun"]

    def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout_s: float,
        keep_stdin_open: bool = False,
    ) -> CommandResult:
        """Run ``argv`` on ``host`` through its transport."""
        return self.for_host(host).run(
            host, argv, stdin=stdin, timeout_s=timeout_s, keep_stdin_open=keep_stdin_open
        )

    def preflight(self, hosts: Sequence[Host]) -> None:
        """Fail fast on local problems (unreadable identity files) before any connection."""
        if self._override is None and any(h.transport == "ssh" for h in hosts):
            from robustctl.transport.ssh import preflight

            preflight(hosts)

    def close(self) -> None:
        """Close every connection."""
        self._local.close()
        if self._ssh is not None:
            self._ssh.close()

    def shutdown(self) -> None:
        """Close every connection and refuse new ones (global deadline)."""
        if self._ssh is not None:
            self._ssh.shutdown()
