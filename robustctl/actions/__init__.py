"""Destructive actions (evict, return, warm standbys, restart, rollback): plan → render → apply, with rails
and an audit log.

:class:`ActionContext` bundles what every action needs: the inventory, its ``scheduler:`` and
``policy:`` sections, the state store and the scheduler back end. :func:`open_context` builds one from
an inventory path (``-i``/``$ROBUSTCTL_INVENTORY``/the embedded default) and a state path
(``--state``/``$ROBUSTCTL_STATE``/the user's state directory).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from robustctl.actions.hosts import JobHosts, job_hosts, resolve_hosts
from robustctl.config import PolicySettings, SchedulerSettings
from robustctl.inventory import Inventory, resolve_inventory
from robustctl.schedulers import make_scheduler
from robustctl.schedulers.base import Scheduler
from robustctl.store import Store

__all__ = ["ActionContext", "open_context"]


@dataclass
class ActionContext:
    """Everything an action plans and applies against.

    Attributes:
        inventory: hosts and jobs. scheduler_settings / policy: the inventory's ``scheduler:`` and
        ``policy:`` sections. store: the open state store. scheduler: the back end. clock: UNIX s.
    """

    inventory: Inventory
    scheduler_settings: SchedulerSettings
    policy: PolicySettings
    store: Store
    scheduler: Scheduler
    clock: Callable[[], float] = field(default=time.time)

    def lock(self, action: str, timeout_s: float | None = None) -> None:
        """Take the store's action lock for ``action``, waiting ``timeout_s`` (default: policy).

        Args:
            action: the action taking it (written into the lock file for a waiting process's message).
            timeout_s: how long to wait for another holder, seconds (None: the policy's
                ``lock_timeout_s``).

        Raises:
            StoreLocked: another process holds it past the timeout.
            StoreError: the lock file cannot be created.
        """
        self.store.lock(action, timeout_s=self.policy.lock_timeout_s if timeout_s is None else timeout_s)

    def close(self) -> None:
        """Close the store (releasing the action lock)."""
        self.store.close()

    def resolve_hosts(self, pattern: str) -> list[str]:
        """The inventory hosts ``pattern`` names (:func:`robustctl.actions.hosts.resolve_hosts`).

        Args:
            pattern: a host or range (``node017``, ``'node[001-004],spare1'``).

        Returns:
            The host names, inventory order.

        Raises:
            UsageError: a malformed range or an unknown host.
        """
        return resolve_hosts(self.inventory, pattern)

    def job_hosts(self, job: str) -> JobHosts:
        """The job's current machines: scheduler, else the store's record, else the inventory
        (:func:`robustctl.actions.hosts.job_hosts`, where the order is documented).

        Args:
            job: the job's name.

        Returns:
            The job's machines in rank order and where they came from.

        Raises:
            UsageError: a job not in the inventory.
        """
        return job_hosts(job, scheduler=self.scheduler, store=self.store, inventory=self.inventory)


def open_context(
    inventory_path: Path | None,
    state_path: Path | None,
    *,
    clock: Callable[[], float] = time.time,
) -> ActionContext:
    """Load the inventory and its action settings, open the store and the scheduler back end.

    Args:
        inventory_path: the inventory file (None: ``$ROBUSTCTL_INVENTORY``, else the embedded default).
        state_path: the store file (None: ``$ROBUSTCTL_STATE``, else the user's state directory).
        clock: UNIX seconds (tests pass a fake).

    Returns:
        The context; the caller closes it (:meth:`ActionContext.close`).

    Raises:
        ConfigError / InventoryError: the inventory is invalid.
        StoreError: the store cannot be opened.
    """
    inventory = resolve_inventory(inventory_path)
    store = Store.open(state_path, clock=clock)
    try:
        scheduler = make_scheduler(inventory.scheduler, inventory=inventory, store=store)
    except BaseException:
        store.close()
        raise
    return ActionContext(inventory, inventory.scheduler, inventory.policy, store, scheduler, clock)
