"""Options and helpers shared by the commands (``resolve_inventory`` is re-exported for them)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from robustctl.inventory import resolve_inventory

InventoryOpt = Annotated[
    Path | None,
    typer.Option(
        "--inventory",
        "-i",
        help="Inventory YAML (default: $ROBUSTCTL_INVENTORY, else this machine through the local transport).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as one JSON document on stdout.")]
OutputOpt = Annotated[
    Path | None, typer.Option("--output", "-o", help="Also write the JSON document to this file.")
]


class State:
    """Global options, set by the root callback."""

    verbose: int = 0


__all__ = ["InventoryOpt", "JsonOpt", "OutputOpt", "State", "resolve_inventory"]
