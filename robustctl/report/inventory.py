"""Rendering of ``robustctl inventory validate|show``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from robustctl.report.console import as_text, escape

if TYPE_CHECKING:
    from rich.console import Console

    from robustctl.commands.inventory import InventoryShow, InventoryValidation


def render_validation(result: InventoryValidation, console: Console) -> None:
    """One line: ``FILE: valid, N host(s) (3 active, 1 standby)``."""
    parts = ", ".join(f"{n} {s}" for s, n in result.hosts.items())
    total = sum(result.hosts.values())
    console.print(as_text(f"{result.file}: valid, {total} host(s) ({parts})"))


def render_inventory(result: InventoryShow, console: Console) -> None:
    """A table: host, address, transport, user, port, gpus, state, labels (``-`` for unset)."""
    table = Table()
    for col in ("host", "address", "transport", "user", "port", "gpus", "state", "labels"):
        table.add_column(col)
    for r in result.hosts:
        cells = (r.host, r.address, r.transport, r.user, r.port, r.gpus, r.state)
        table.add_row(
            *(escape(str(c)) if c is not None else "-" for c in cells),
            escape(",".join(f"{k}={v}" for k, v in r.labels.items())),
        )
    console.print(table)
