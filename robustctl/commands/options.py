"""Option layering, in one place: built-in defaults < inventory file < environment ``ROBUSTCTL_*`` < flags.

Every request of :mod:`robustctl.commands` is built from already-layered values. This module is
where the layers meet:

* the **inventory**: ``-i PATH``, else ``$ROBUSTCTL_INVENTORY``, else the embedded default (this
  machine through the local transport), :func:`inventory`;
* the **state store**: ``--state PATH``, else ``$ROBUSTCTL_STATE``, else
  ``$XDG_STATE_HOME/robustctl/state.db`` (:func:`state_path`);
* the **diagnose settings** (:func:`diagnose_settings`): the inventory's ``diagnose:`` section, then
  ``ROBUSTCTL_CONCURRENCY``, ``ROBUSTCTL_HOST_TIMEOUT``, ``ROBUSTCTL_DEADLINE`` (see
  :data:`robustctl.config.ENV_VARS`), then the flags ``--concurrency``, ``--host-timeout``,
  ``--deadline``, ``--burn-seconds``. The environment applies to the embedded default inventory too.
  SSH settings from the environment (``ROBUSTCTL_SSH_*``) are applied to each host when the
  inventory is loaded (:func:`robustctl.config.apply_env`).

A flag left at ``None`` means "not given": the layer below shows through.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustctl.errors import ConfigError, InventoryError, UsageError

if TYPE_CHECKING:
    from robustctl.config import DiagnoseSettings, HostState
    from robustctl.inventory import Host, Inventory

__all__ = [
    "DIAGNOSE_ENV",
    "DiagnoseFlags",
    "diagnose_settings",
    "inventory",
    "inventory_if_given",
    "parse_duration",
    "select_hosts",
    "state_path",
]

DIAGNOSE_ENV: dict[str, str] = {
    "ROBUSTCTL_CONCURRENCY": "concurrency",
    "ROBUSTCTL_HOST_TIMEOUT": "host_timeout_s",
    "ROBUSTCTL_DEADLINE": "deadline_s",
}
"""Environment variable → ``diagnose:`` setting it overrides."""


@dataclass(frozen=True)
class DiagnoseFlags:
    """The diagnose settings given as flags (``None``: not given).

    Attributes:
        concurrency: hosts contacted at once. host_timeout_s: per-host, per-level deadline (s).
        deadline_s: deadline of the whole run (s). burn_seconds: L1 load per device (s).
    """

    concurrency: int | None = None
    host_timeout_s: float | None = None
    deadline_s: float | None = None
    burn_seconds: float | None = None


def inventory(path: Path | None, environ: Mapping[str, str] | None = None) -> Inventory:
    """The inventory: ``path``, else ``$ROBUSTCTL_INVENTORY``, else the embedded default
    (:func:`robustctl.inventory.resolve_inventory`, for a command's ``--inventory`` flag).

    Args:
        path: the ``--inventory`` value (None: not given).
        environ: the environment to read (None: ``os.environ``).

    Returns:
        The validated inventory.

    Raises:
        ConfigError / InventoryError: the file is invalid (``FILE:LINE``).
    """
    from robustctl.inventory import resolve_inventory

    return resolve_inventory(path, environ)


def inventory_if_given(path: Path | None, environ: Mapping[str, str] | None = None) -> Inventory | None:
    """:func:`inventory` when one is named (``path`` or ``$ROBUSTCTL_INVENTORY``), else None (not the
    embedded default: a command that can do without an inventory, such as ``hosts``, then uses none).

    Args:
        path: the ``--inventory`` value (None: not given).
        environ: the environment to read (None: ``os.environ``).

    Returns:
        The inventory, or None when none is named.

    Raises:
        ConfigError / InventoryError: the file is invalid.
    """
    from robustctl.inventory import resolve_inventory_if_given

    return resolve_inventory_if_given(path, environ)


def select_hosts(
    inv: Inventory, hosts: str | None, *, states: Iterable[HostState] | None = None
) -> list[Host]:
    """``inv.select(hosts, states=states)`` for a ``--hosts`` flag.

    Args:
        inv: the inventory.
        hosts: the ``--hosts`` range (None: every host, filtered by ``states``).
        states: keep only hosts in these states (None: active hosts when ``hosts`` is None, any state
            when hosts are named).

    Returns:
        The selected hosts, in the inventory's order.

    Raises:
        UsageError: ``hosts`` is a malformed range or names a host the inventory does not have (a
            flag, so exit 64, not the inventory's 78).
    """
    try:
        return inv.select(hosts, states=states)
    except InventoryError as exc:
        raise UsageError(str(exc)) from None


def state_path(path: Path | None, environ: Mapping[str, str] | None = None) -> Path:
    """The state store file: ``path``, else ``$ROBUSTCTL_STATE``, else the XDG default."""
    from robustctl.store import default_path

    return path if path is not None else default_path(environ)


def diagnose_settings(
    base: DiagnoseSettings,
    flags: DiagnoseFlags = DiagnoseFlags(),
    environ: Mapping[str, str] | None = None,
) -> DiagnoseSettings:
    """``base`` (the inventory's ``diagnose:``) with the environment, then ``flags``, laid over it.

    Args:
        base: the inventory's ``diagnose:`` settings.
        flags: the command-line values (None fields: not given).
        environ: the environment to read (None: ``os.environ``).

    Returns:
        The layered settings, validated.

    Raises:
        ConfigError: an environment variable holds a value the setting refuses (the message names
            the variable).
    """
    from pydantic import ValidationError

    from robustctl.config import DiagnoseSettings

    env = os.environ if environ is None else environ
    data: dict[str, Any] = base.model_dump()
    for var, key in DIAGNOSE_ENV.items():
        value = env.get(var, "")
        if value == "":
            continue
        try:
            data = DiagnoseSettings.model_validate({**data, key: value}).model_dump()
        except ValidationError as exc:
            why = exc.errors()[0].get("msg", "invalid value")
            raise ConfigError(f"${var}={value!r}: {why}") from None
    given: dict[str, float | None] = {
        "concurrency": flags.concurrency,
        "host_timeout_s": flags.host_timeout_s,
        "deadline_s": flags.deadline_s,
    }
    data.update({k: v for k, v in given.items() if v is not None})
    if flags.burn_seconds is not None:
        data["burn"] = {**data["burn"], "seconds": flags.burn_seconds}
    try:
        return DiagnoseSettings.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        flag = _FLAG_OF.get(tuple(str(x) for x in err.get("loc", ())), "option")
        raise UsageError(f"bad {flag}: {err.get('msg', 'invalid value')}") from None


_FLAG_OF: dict[tuple[str, ...], str] = {
    ("concurrency",): "--concurrency",
    ("host_timeout_s",): "--host-timeout",
    ("deadline_s",): "--deadline",
    ("burn", "seconds"): "--burn-seconds",
}
"""The flag behind each setting :func:`diagnose_settings` lays over, for its usage errors."""


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str) -> float:
    """``"90s"``, ``"30m"``, ``"24h"``, ``"7d"``, ``"2w"`` or plain seconds → seconds.

    Args:
        text: the flag's value.

    Returns:
        The duration in seconds.

    Raises:
        UsageError: not a duration.
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text.lower())
    if not m:
        raise UsageError(f"bad duration {text!r}: expected e.g. 90s, 30m, 24h, 7d")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]
