"""The embedded ``inventory`` scheduler: every state lives in robustctl's store, nothing else runs.

Use it where robustctl is the only thing deciding which machines a job runs on (a static host list
launched by ``torchrun``/``mpirun``), or to rehearse an action. Node states are the store's
``sched_nodes`` rows; a host without one is in its inventory state (``active`` → ACTIVE, ``standby`` →
STANDBY, ``evicted`` → DRAINED). A job's host list is the store's (after a standby activation), else the
inventory's ``jobs:`` entry. ``requeue`` cannot restart anything here: it is a no-op that says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from robustctl.config import HostState, SchedulerSettings
from robustctl.errors import InventoryError
from robustctl.inventory import Inventory
from robustctl.schedulers.base import NodeState, OpResult, SchedulerError
from robustctl.store import Store

__all__ = ["InventoryScheduler", "create"]

_FROM_INVENTORY = {
    HostState.ACTIVE: NodeState.ACTIVE,
    HostState.STANDBY: NodeState.STANDBY,
    HostState.EVICTED: NodeState.DRAINED,
}


class InventoryScheduler:
    """The ``inventory`` back end over ``store`` for the hosts and jobs of ``inventory``."""

    name = "inventory"

    def __init__(self, inventory: Inventory, store: Store) -> None:
        self.inventory = inventory
        self.store = store
        self._hosts = {h.name: h for h in inventory.hosts}

    def _known(self, op: str, host: str) -> None:
        if host not in self._hosts:
            raise SchedulerError(self.name, f"{op} {host}", f"unknown host (not in {self.inventory.source})")

    def _current(self, host: str) -> NodeState:
        stored = self.store.sched_state(host)
        if stored is not None:
            return NodeState(stored)
        h = self._hosts.get(host)
        return _FROM_INVENTORY[h.state] if h is not None else NodeState.UNKNOWN

    def _set(self, op: str, hosts: Sequence[str], to: NodeState, reason: str) -> list[OpResult]:
        out: list[OpResult] = []
        for host in hosts:
            self._known(op, host)
            if self._current(host) is to:
                out.append(OpResult(host, op, False, f"already {to.value}"))
                continue
            self.store.set_sched_state(host, to.value, reason)
            out.append(OpResult(host, op, True, f"{to.value} in the store"))
        return out

    def drain(self, hosts: Sequence[str], reason: str) -> list[OpResult]:
        """Mark ``hosts`` drained. Raises SchedulerError for a host not in the inventory."""
        return self._set("drain", hosts, NodeState.DRAINED, reason)

    def resume(self, hosts: Sequence[str], reason: str) -> list[OpResult]:
        """Mark ``hosts`` active. Raises SchedulerError for a host not in the inventory."""
        return self._set("resume", hosts, NodeState.ACTIVE, reason)

    def hold_standby(self, hosts: Sequence[str], reason: str) -> list[OpResult]:
        """Mark ``hosts`` standby. Raises SchedulerError for a host not in the inventory."""
        return self._set("hold_standby", hosts, NodeState.STANDBY, reason)

    def state(self, hosts: Sequence[str]) -> Mapping[str, NodeState]:
        """Each host's state (UNKNOWN when not in the inventory)."""
        return {h: self._current(h) for h in hosts}

    def job_hosts(self, job: str) -> list[str]:
        """The store's host list of ``job``, else the inventory's. Raises SchedulerError for an unknown job."""
        stored = self.store.job_hosts(job)
        if stored is not None:
            return stored
        try:
            return [h.name for h in self.inventory.job(job).hosts]
        except InventoryError as exc:
            raise SchedulerError(self.name, f"job_hosts {job}", str(exc)) from None

    def replace_host(self, job: str, old: str, new: str) -> OpResult:
        """Put ``new`` at ``old``'s index in the job's host list (in the store).

        Args:
            job: the job's name in the inventory.
            old: the host leaving the job.
            new: the host taking its place.

        Returns:
            The result for ``new``: changed, or not when ``old`` was already replaced by ``new``.

        Raises:
            SchedulerError: unknown job or host, ``old`` not in the job, or ``new`` already in it elsewhere.
        """
        self._known("replace_host", new)
        hosts = self.job_hosts(job)
        if old not in hosts:
            if new in hosts:
                return OpResult(new, "replace_host", False, f"{old} already replaced by {new} in job {job}")
            raise SchedulerError(self.name, f"replace_host {job} {old} {new}", f"{old} is not in job {job}")
        if new in hosts:
            raise SchedulerError(
                self.name, f"replace_host {job} {old} {new}", f"{new} already runs job {job}"
            )
        hosts[hosts.index(old)] = new
        self.store.set_job_hosts(job, hosts)
        return OpResult(new, "replace_host", True, f"{new} takes {old}'s place in job {job}")

    def requeue(self, job: str) -> OpResult:
        """No-op: the embedded back end cannot restart a job (the result says so)."""
        self.job_hosts(job)
        return OpResult(
            job, "requeue", False, "inventory back end: restart the job with its new host list yourself"
        )


def create(settings: SchedulerSettings, *, inventory: Inventory, store: Store) -> InventoryScheduler:
    """The factory :func:`robustctl.schedulers.make_scheduler` calls."""
    del settings
    return InventoryScheduler(inventory, store)
