"""Options shared by the commands, and the global ``-v`` state."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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

StateOpt = Annotated[
    Path | None,
    typer.Option(
        "--state",
        help="State store (SQLite) \\[default: $ROBUSTCTL_STATE, else $XDG_STATE_HOME/robustctl/state.db].",
        show_default=False,
    ),
]
NoRecordOpt = Annotated[
    bool,
    typer.Option("--no-record", help="Do not record the suspects in the state store (write nothing)."),
]


class State:
    """Global options: ``-v``/``--verbose`` (anywhere on the command line, counted by ``main``), and
    the command being run (``"diagnose"``, ``"standby add"``), for the line an interruption prints."""

    verbose: int = 0
    command: str = ""


__all__ = [
    "InventoryOpt",
    "JsonOpt",
    "NoRecordOpt",
    "OutputOpt",
    "State",
    "StateOpt",
]
