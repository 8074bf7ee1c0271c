"""``robustctl inventory validate|show`` as library calls."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION

__all__ = [
    "InventoryHostRow",
    "InventoryShow",
    "InventoryShowRequest",
    "InventoryValidateRequest",
    "InventoryValidation",
    "run_inventory_show",
    "run_inventory_validate",
]


@dataclass(frozen=True)
class InventoryValidateRequest:
    """Attributes: path: the inventory YAML file."""

    path: Path


@dataclass(frozen=True)
class InventoryValidation:
    """A valid inventory (an invalid one raises): its file and host count per state.

    Attributes:
        file: as given. valid: always True. hosts: state → host count, in first-seen order.
        kind: ``"inventory-validate"``. schema_version.
    """

    file: str
    hosts: Mapping[str, int]
    valid: bool = True
    kind: str = "inventory-validate"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """Always OK (an invalid inventory is a ConfigError, 78)."""
        return ExitCode.OK


@dataclass(frozen=True)
class InventoryShowRequest:
    """Attributes: path: the inventory YAML file. hosts: a host range (None: every host, any state)."""

    path: Path
    hosts: str | None = None


@dataclass(frozen=True)
class InventoryHostRow:
    """One host as the inventory resolves it (effective address, transport, SSH user and port)."""

    host: str
    address: str
    transport: str
    user: str | None
    port: int | None
    gpus: int
    state: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class InventoryShow:
    """The hosts of an inventory. Attributes: file, hosts (rows in file order), kind ``"inventory"``."""

    file: str
    hosts: tuple[InventoryHostRow, ...]
    kind: str = "inventory"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """Always OK."""
        return ExitCode.OK


def run_inventory_validate(request: InventoryValidateRequest) -> InventoryValidation:
    """Strictly validate an inventory.

    Args:
        request: the inventory file to validate.

    Returns:
        The validated inventory's summary (hosts, jobs, back end).

    Raises:
        ConfigError / InventoryError: unknown keys, bad host ranges or names (``FILE:LINE``).
    """
    from robustctl.inventory import load_inventory

    inv = load_inventory(request.path)
    counts: dict[str, int] = {}
    for h in inv.hosts:
        counts[h.state.value] = counts.get(h.state.value, 0) + 1
    return InventoryValidation(file=str(request.path), hosts=counts)


def run_inventory_show(request: InventoryShowRequest) -> InventoryShow:
    """The hosts of an inventory (``hosts`` selects by range, in any state).

    Args:
        request: the inventory and the host range to show (None: every host).

    Returns:
        The selected hosts, in the inventory's order.

    Raises:
        ConfigError / InventoryError: an invalid inventory.
        UsageError: ``hosts`` is a bad range or names an unknown host (a flag: exit 64).
    """
    from robustctl.commands.options import select_hosts
    from robustctl.config import HostState
    from robustctl.inventory import load_inventory

    inv = load_inventory(request.path)
    selected = select_hosts(inv, request.hosts, states=list(HostState)) if request.hosts else list(inv.hosts)
    rows = tuple(
        InventoryHostRow(
            host=h.name,
            address=h.address,
            transport=h.transport,
            user=h.ssh.user,
            port=h.ssh.port,
            gpus=h.gpus,
            state=h.state.value,
            labels=dict(h.labels),
        )
        for h in selected
    )
    return InventoryShow(file=str(request.path), hosts=rows)
