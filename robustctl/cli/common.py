"""Options and helpers shared by the commands (``resolve_inventory`` is re-exported for them)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from robustctl.inventory import resolve_inventory

if TYPE_CHECKING:
    from rich.console import Console

    from robustctl.inventory import Inventory
    from robustctl.suspects import RecordResult

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
    """Global options, set by the root callback."""

    verbose: int = 0


def record_findings(
    state: Path | None,
    named: Mapping[str, str],
    *,
    cleared: Iterable[str] = (),
    source: str,
    clear_reason: str | None = None,
    inventory: Inventory,
    console: Console,
    quiet: bool,
) -> RecordResult:
    """Record a report's suspects in the store, best effort (see :func:`robustctl.suspects.record_suspects`).

    Prints one line on ``console``: what was recorded (unless ``quiet``) or, when the store cannot be
    opened or written, a warning naming the file (always). Never raises for the store: the command
    keeps its report and exit code, and the result carries the ``error``.
    """
    from robustctl.store import MachineState, StoreError, default_path
    from robustctl.suspects import RecordResult, record_in_store

    try:
        result = record_in_store(
            state,
            named,
            cleared=cleared,
            source=source,
            clear_reason=clear_reason,
            inventory_states={h.name: MachineState(h.state.value) for h in inventory.hosts},
        )
    except StoreError as exc:
        result = RecordResult(source, str(state if state is not None else default_path()), error=str(exc))
    if result.error is not None or not quiet:
        console.print(result.summary(), markup=False, highlight=False, soft_wrap=True)
    return result


__all__ = [
    "InventoryOpt",
    "JsonOpt",
    "NoRecordOpt",
    "OutputOpt",
    "State",
    "StateOpt",
    "record_findings",
    "resolve_inventory",
]
