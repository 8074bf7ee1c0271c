"""Rendering of ``robustctl audit``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from robustctl.report.console import escape
from robustctl.timefmt import format_utc

if TYPE_CHECKING:
    from rich.console import Console

    from robustctl.commands.audit import AuditResult
    from robustctl.store import AuditRecord


_COLUMNS = (
    ("id", 2),
    ("started (UTC)", 10),
    ("who", 4),
    ("action", 6),
    ("targets", 6),
    ("status", 7),
    ("steps", 3),
    ("reason", 8),
)
"""Columns and the least width of each: together they fit 80 columns."""


def render_audit(result: AuditResult, console: Console) -> None:
    """The audit log as a table: id, start (UTC), who, action, targets, status, steps, reason.

    Long cells wrap (never an ellipsis), so a narrow console loses no text; use a wide console
    (:func:`robustctl.report.console.stderr_console` ``wide=True``) for a pipe.
    """
    table = Table(title=f"audit log: {len(result.records)} record(s)", title_justify="left", show_edge=False)
    for col, least in _COLUMNS:
        table.add_column(col, overflow="fold", min_width=least)
    gone = set(result.incomplete)
    for r in result.records:
        status = f"incomplete (pid {r.pid} is gone)" if r.id in gone else r.status
        cells = (str(r.id), _when(r.started_at), r.who, r.action, _targets(r), status, _steps(r), r.reason)
        table.add_row(*(escape(c) for c in cells))
    console.print(table)


def _when(at: float) -> str:
    return format_utc(at)


def _targets(r: AuditRecord) -> str:
    return ", ".join(r.targets[:4]) + (f" +{len(r.targets) - 4}" if len(r.targets) > 4 else "")


def _steps(r: AuditRecord) -> str:
    done = sum(s.status in ("done", "noop") for s in r.steps)
    running = [s.index for s in r.steps if s.status == "running"]
    steps = f"{done}/{len(r.plan.get('steps', [])) if r.plan else len(r.steps)}"
    return steps + (f" (step {running[0]} was running)" if running else "")
