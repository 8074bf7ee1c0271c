"""Options and helpers shared by the commands."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from robustctl.inventory import Inventory, default_inventory, load_inventory

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


def resolve_inventory(path: Path | None) -> Inventory:
    """Load ``path``, else ``$ROBUSTCTL_INVENTORY``, else the embedded default.

    Raises:
        ConfigError / InventoryError: the file is invalid.
    """
    if path is None and os.environ.get("ROBUSTCTL_INVENTORY"):
        path = Path(os.environ["ROBUSTCTL_INVENTORY"])
    if path is None:
        return default_inventory()
    return load_inventory(path)
