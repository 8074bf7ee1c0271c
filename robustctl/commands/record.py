"""Best-effort suspect recording, shared by :func:`~robustctl.commands.diagnose.run_diagnose` and
:func:`~robustctl.commands.stacks.run_stacks`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from robustctl.inventory import Inventory
    from robustctl.suspects import RecordResult


def record_findings(
    state: Path | None,
    named: Mapping[str, str],
    *,
    cleared: Iterable[str] = (),
    source: str,
    clear_reason: str | None = None,
    inventory: Inventory,
) -> RecordResult:
    """Record a report's suspects in the store, best effort (:func:`robustctl.suspects.record_in_store`).

    Never raises for the store: when it cannot be opened or written, the result carries the
    ``error`` (its :meth:`~robustctl.suspects.RecordResult.summary` is then a warning line) and the
    command keeps its report and exit code. Prints nothing.
    """
    from robustctl.store import MachineState, StoreError, default_path
    from robustctl.suspects import RecordResult, record_in_store

    try:
        return record_in_store(
            state,
            named,
            cleared=cleared,
            source=source,
            clear_reason=clear_reason,
            inventory_states={h.name: MachineState(h.state.value) for h in inventory.hosts},
        )
    except StoreError as exc:
        return RecordResult(source, str(state if state is not None else default_path()), error=str(exc))
