"""Which hosts an action means: a host pattern resolved against the inventory, and a job's current hosts.

Both questions are answered here once, for every action (evict, return, standby add/check/activate)
and for the plan engine's ``job_hosts`` step.

**A job's hosts** (:func:`job_hosts`), in rank order (machine k holds ranks k·G … k·G+G-1), from the
first source that knows the job:

1. **the scheduler** (:meth:`Scheduler.job_hosts`): Slurm's ``NodeList`` (or the ``ReqNodeList`` a
   standby activation pinned), the Kubernetes job's pods in index order, the embedded ``inventory``
   back end's own list (the store's record, else the inventory's);
2. **the store's record** (:meth:`Store.job_hosts`): the list robustctl last wrote for the job (a
   standby activation records it for every back end), used when the scheduler cannot say (the
   job is not submitted, has finished and been forgotten, or the query failed);
3. **the inventory's** ``jobs.NAME.hosts``.

The answer names its source, and the scheduler's error when it fell back, so each caller decides
whether a fallback answer is good enough: over-eviction and the fraction rails take it (a job that
crashed and left the scheduler still has a layout over its last machines); ``standby activate``
needs the scheduler's own view (it changes the scheduler's job) and raises the scheduler's error;
``standby add``'s ``not-in-a-job`` rail counts only jobs the scheduler runs now.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from pathlib import Path

from robustctl.errors import ConfigError, InventoryError, UsageError
from robustctl.inventory import Inventory, Job
from robustctl.schedulers.base import Scheduler, SchedulerError
from robustctl.store import Store

__all__ = ["JobHosts", "JobHostsSource", "current_job", "job_hosts", "resolve_hosts"]


def resolve_hosts(inventory: Inventory, pattern: str) -> list[str]:
    """The inventory hosts ``pattern`` names (``node017``, ``'node[001-004],spare1'``), inventory order,
    whatever their state.

    Args:
        inventory: the resolved inventory.
        pattern: a host or range (``node017``, ``'node[001-004],spare1'``).

    Returns:
        The host names, inventory order.

    Raises:
        UsageError: a malformed range or a host that is not in the inventory (the message names it).
    """
    try:
        return [h.name for h in inventory.select(pattern, states=None)]
    except InventoryError as exc:
        raise UsageError(str(exc)) from None


class JobHostsSource(str, enum.Enum):
    """Where :func:`job_hosts` found the job's hosts (the fallback order, first to last)."""

    SCHEDULER = "scheduler"
    STORE = "store"
    INVENTORY = "inventory"


@dataclass(frozen=True)
class JobHosts:
    """A job's machines in rank order and where they came from.

    Attributes:
        job: the job's name. hosts: its machines, rank order. source: see :class:`JobHostsSource`.
        scheduler_error: why the scheduler could not say (None when ``source`` is the scheduler).
    """

    job: str
    hosts: tuple[str, ...]
    source: JobHostsSource
    scheduler_error: SchedulerError | None = None

    def require_scheduler(self) -> tuple[str, ...]:
        """``hosts`` when the scheduler gave them.

        Returns:
            The job's machines, rank order.

        Raises:
            SchedulerError: the scheduler's own error when the hosts came from a fallback.
        """
        if self.scheduler_error is not None:
            raise self.scheduler_error
        return self.hosts

    def note(self) -> str | None:
        """One line for a plan when the hosts came from a fallback, else None."""
        if self.scheduler_error is None:
            return None
        where = "robustctl's record in the store" if self.source is JobHostsSource.STORE else "the inventory"
        return (
            f"job {self.job}: hosts from {where}; the scheduler could not say ({self.scheduler_error.reason})"
        )


def job_hosts(
    job: str, *, scheduler: Scheduler, store: Store, inventory: Inventory | None = None
) -> JobHosts:
    """The current machines of ``job``: the scheduler's, else the store's record, else the inventory's.

    See the module docstring for the order and why. ``inventory`` None (the plan engine, which holds
    no inventory) stops after the store.

    Args:
        job: the job's name.
        scheduler: the back end asked first.
        store: the state store whose record is asked second.
        inventory: the inventory asked last, and checked to know ``job`` (None: not asked).

    Returns:
        The job's machines in rank order, their source, and the scheduler's error when it fell back.

    Raises:
        UsageError: ``inventory`` is given and has no job ``job``.
        SchedulerError: the scheduler failed and no later source knows the job.
    """
    spec = None
    if inventory is not None:
        try:
            spec = inventory.job(job)
        except InventoryError as exc:
            raise UsageError(str(exc)) from None
    try:
        return JobHosts(job, tuple(scheduler.job_hosts(job)), JobHostsSource.SCHEDULER)
    except SchedulerError as exc:
        error = exc
    stored = store.job_hosts(job)
    if stored:
        return JobHosts(job, tuple(stored), JobHostsSource.STORE, error)
    if spec is not None:
        return JobHosts(job, tuple(h.name for h in spec.hosts), JobHostsSource.INVENTORY, error)
    raise error


def current_job(inventory: Inventory, name: str, *, state: Path | None) -> tuple[Job, JobHosts]:
    """The inventory's job ``name`` with its hosts as they are now (after standby swaps), rank order.

    A command that maps ranks to machines (``stacks``, ``replay-sdc``) must use the job's current
    machines: after a standby took an evicted machine's place, the inventory's ``jobs.NAME.hosts``
    still lists the evicted one, and naming it would evict a machine that is no longer in the job
    while the real suspect stays. The hosts come from :func:`job_hosts` (scheduler, else the store's
    record, else the inventory) with the store at ``state``.

    Args:
        inventory: the resolved inventory.
        name: the job.
        state: the store file (None: the default).

    Returns:
        ``(job, found)``: the job with ``hosts`` replaced by the current ones (inventory hosts, rank
        order) and where they came from.

    Raises:
        UsageError: no such job.
        ConfigError: a current host is not in the inventory, or the count of current hosts does not
            fit the job's layout.
        StoreError: the store cannot be read.
        SchedulerError: the scheduler failed and no later source knows the job.
    """
    from robustctl.schedulers import make_scheduler

    try:
        job = inventory.job(name)
    except InventoryError as exc:
        raise UsageError(str(exc)) from None
    with Store.open(state) as store:
        scheduler = make_scheduler(inventory.scheduler, inventory=inventory, store=store)
        found = job_hosts(name, scheduler=scheduler, store=store, inventory=inventory)
    if found.source is JobHostsSource.INVENTORY:
        return job, found
    try:
        hosts = tuple(inventory.by_name(h) for h in found.hosts)
    except InventoryError as exc:
        raise ConfigError(f"job {name}: {exc} ({found.source.value})") from None
    if len(hosts) != len(job.hosts):
        raise ConfigError(
            f"job {name}: {len(hosts)} current host(s) ({found.source.value}) but its layout needs "
            f"{len(job.hosts)} ({job.layout.world_size} ranks, {job.ranks_per_host} per host)"
        )
    return dataclasses.replace(job, hosts=hosts), found
