"""Scheduler back ends: the :class:`~robustctl.schedulers.base.Scheduler` protocol and a factory.

:func:`make_scheduler` picks the back end named by the inventory's ``scheduler.kind`` and imports its
module only then (``robustctl.schedulers.<kind>``, which exposes ``create(settings, *, inventory,
store)``), so the Kubernetes client is never imported for a Slurm cluster.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from robustctl.errors import ConfigError
from robustctl.schedulers.base import NodeState, OpResult, Scheduler, SchedulerError

if TYPE_CHECKING:
    from robustctl.config import SchedulerSettings
    from robustctl.inventory import Inventory
    from robustctl.store import Store

__all__ = ["NodeState", "OpResult", "Scheduler", "SchedulerError", "make_scheduler"]


def make_scheduler(settings: SchedulerSettings, *, inventory: Inventory, store: Store) -> Scheduler:
    """The back end ``settings.kind`` names, configured from ``settings``.

    Args:
        settings: the inventory's ``scheduler:`` section.
        inventory: the inventory, handed to the back end's ``create``.
        store: the state store, handed to the back end's ``create``.

    Returns:
        The configured back end.

    Raises:
        ConfigError: the back end is not available in this installation (module or ``create`` missing).
    """
    try:
        module = importlib.import_module(f"robustctl.schedulers.{settings.kind}")
    except ImportError as exc:
        raise ConfigError(f"scheduler.kind {settings.kind!r} is not available: {exc}") from None
    create: Any = getattr(module, "create", None)
    if create is None:
        raise ConfigError(
            f"scheduler.kind {settings.kind!r}: robustctl.schedulers.{settings.kind} has no create()"
        )
    sched: Scheduler = create(settings, inventory=inventory, store=store)
    return sched
