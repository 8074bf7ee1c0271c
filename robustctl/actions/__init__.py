"""Destructive actions (evict, return, warm standbys): plan → render → apply, with rails and an audit log.

:class:`ActionContext` bundles what every action needs: the inventory, its ``scheduler:`` and
``policy:`` sections, the state store and the scheduler back end. :func:`open_context` builds one from
an inventory path (``-i``/``$ROBUSTCTL_INVENTORY``/the embedded default) and a state path
(``--state``/``$ROBUSTCTL_STATE``/the user's state directory).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from robustctl.config import InventoryFile, PolicySettings, SchedulerSettings, apply_env
from robustctl.inventory import Inventory, default_inventory, load_inventory
from robustctl.schedulers import make_scheduler
from robustctl.schedulers.base import Scheduler
from robustctl.store import Store
from robustctl.yamlsrc import load_yaml

__all__ = ["ActionContext", "load_action_settings", "open_context"]


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

    def close(self) -> None:
        """Close the store (releasing the action lock)."""
        self.store.close()


def load_action_settings(path: Path | None) -> tuple[SchedulerSettings, PolicySettings]:
    """The ``scheduler:`` and ``policy:`` sections of the inventory at ``path`` (defaults without one).

    The file must already have passed :func:`robustctl.inventory.load_inventory`, which validates them.
    """
    if path is None:
        return SchedulerSettings(), PolicySettings()
    data, _ = load_yaml(path)
    model = InventoryFile.model_validate(apply_env(dict(data or {})))
    return model.scheduler, model.policy


def open_context(
    inventory_path: Path | None,
    state_path: Path | None,
    *,
    clock: Callable[[], float] = time.time,
) -> ActionContext:
    """Load the inventory and its action settings, open the store and the scheduler back end.

    Raises:
        ConfigError / InventoryError: the inventory is invalid. StoreError: the store cannot be opened.
    """
    if inventory_path is None and os.environ.get("ROBUSTCTL_INVENTORY"):
        inventory_path = Path(os.environ["ROBUSTCTL_INVENTORY"])
    inventory = load_inventory(inventory_path) if inventory_path is not None else default_inventory()
    sched_settings, policy = load_action_settings(inventory_path)
    store = Store.open(state_path, clock=clock)
    try:
        scheduler = make_scheduler(sched_settings, inventory=inventory, store=store)
    except BaseException:
        store.close()
        raise
    return ActionContext(inventory, sched_settings, policy, store, scheduler, clock)
