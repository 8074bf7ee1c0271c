"""The scheduler protocol: how robustctl takes machines out of service and puts them back.

A back end (``inventory``: the embedded default; ``slurm``; ``kubernetes``) implements
:class:`Scheduler`. Every operation is idempotent and reports, per host, whether it changed anything
(:class:`OpResult`): draining a drained host is a no-op result, never an error. Every call runs under
the back end's timeout (``scheduler.timeout_s``); a command or endpoint that fails, or hangs past the
timeout, raises :class:`SchedulerError` naming it.

Back-end modules expose one factory, looked up by :func:`robustctl.schedulers.make_scheduler`::

    def create(settings: SchedulerSettings, *, inventory: Inventory, store: Store) -> Scheduler

Vocabulary (what each back end maps it to):

* ``drain``: stop scheduling new work on the host and take it out of the job (Slurm ``state=drain``,
  Kubernetes cordon + taint + evict pods, inventory: a state in the store).
* ``resume``: make the host schedulable again (Slurm ``state=resume``, Kubernetes uncordon + untaint).
* ``hold_standby``: keep a warm standby out of scheduling, marked as a standby (Slurm: drained with a
  ``robustctl-standby`` reason; Kubernetes: cordoned with a standby taint).
* ``replace_host``: in a job's host list, put ``new`` where ``old`` was (same machine index, so the
  rank layout is kept).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from robustctl.errors import RobustctlError
from robustctl.exit_codes import ExitCode

__all__ = ["NodeState", "OpResult", "Scheduler", "SchedulerError"]


class NodeState(str, enum.Enum):
    """A host as the scheduler sees it."""

    ACTIVE = "active"
    """Schedulable (Slurm idle/alloc/mix, Kubernetes schedulable and Ready)."""
    DRAINED = "drained"
    """Out of scheduling because robustctl (or someone) drained it."""
    STANDBY = "standby"
    """Out of scheduling, held as a warm standby."""
    DOWN = "down"
    """The scheduler cannot reach it (Slurm down/not responding, Kubernetes NotReady)."""
    UNKNOWN = "unknown"
    """The scheduler does not know the host."""


@dataclass(frozen=True)
class OpResult:
    """What one scheduler operation did on one host.

    Attributes:
        host: the host (or the job, for job-level operations such as ``requeue``).
        operation: ``"drain"``, ``"resume"``, ``"hold_standby"``, ``"replace_host"``, ``"requeue"``.
        changed: False when the host was already in the wanted state (an idempotent no-op).
        detail: one human line (e.g. the command that ran, or "already drained").
    """

    host: str
    operation: str
    changed: bool
    detail: str = ""


class SchedulerError(RobustctlError):
    """A scheduler command or API call failed or timed out.

    Args:
        scheduler: back-end name.
        command: the command line or endpoint that failed.
        reason: why (stderr's last line, HTTP status, "timed out after 30 s").
    """

    exit_code = ExitCode.UNKNOWN

    def __init__(self, scheduler: str, command: str, reason: str) -> None:
        super().__init__(f"scheduler {scheduler}: {command}: {reason}")
        self.scheduler = scheduler
        self.command = command
        self.reason = reason


@runtime_checkable
class Scheduler(Protocol):
    """A scheduler back end. All methods are idempotent and bounded by the back end's timeout.

    Raises (every method):
        SchedulerError: the command/endpoint failed or timed out (the message names it).
    """

    name: str
    """Back-end name: ``"inventory"``, ``"slurm"``, ``"kubernetes"``."""

    def drain(self, hosts: Sequence[str], reason: str) -> list[OpResult]:
        """Take ``hosts`` out of scheduling with ``reason``; one result per host, in order."""
        ...

    def resume(self, hosts: Sequence[str], reason: str) -> list[OpResult]:
        """Make ``hosts`` schedulable again; one result per host, in order."""
        ...

    def hold_standby(self, hosts: Sequence[str], reason: str) -> list[OpResult]:
        """Keep ``hosts`` out of scheduling as warm standbys; one result per host, in order."""
        ...

    def state(self, hosts: Sequence[str]) -> Mapping[str, NodeState]:
        """The scheduler's view of each host (UNKNOWN for a host it does not know)."""
        ...

    def job_hosts(self, job: str) -> list[str]:
        """The job's machines in rank order (machine k holds ranks k·G … k·G+G-1).

        Args:
            job: the scheduler's job id or name.

        Returns:
            The machines' names, machine 0 first.

        Raises:
            SchedulerError: the job is unknown to the scheduler or the query failed.
        """
        ...

    def replace_host(self, job: str, old: str, new: str) -> OpResult:
        """Put ``new`` in ``old``'s place in the job's host list (no-op when already done)."""
        ...

    def requeue(self, job: str) -> OpResult:
        """Requeue (restart) the job so that it picks up its new host list."""
        ...
