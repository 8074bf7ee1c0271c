"""Rendering of ``robustctl ettr``: the ETTR figures, the breakdown by cause and one row per incident,
as rich tables on stderr (every value from the store escaped: :func:`robustctl.report.console.escape`).
The ``--json`` document is :meth:`robustctl.commands.ettr.EttrResult.to_json`, written by the house
:func:`robustctl.report.console.emit_json`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from robustctl.report.console import escape
from robustctl.timefmt import format_utc

if TYPE_CHECKING:
    from rich.console import Console

    from robustctl.commands.ettr import EttrResult

__all__ = ["render_ettr"]

SHOWN_MACHINES = 4
"""Machines evicted named in an incident's row; more are counted (``+N``): a row stays one line on an
80-column terminal for the usual one to a few machines over-evicted per incident."""


def _duration(seconds: float | None) -> str:
    """``seconds`` as ``1h02m03s`` / ``2m03s`` / ``4.2s``; ``-`` for None."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def _machines(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:SHOWN_MACHINES])
    more = len(names) - SHOWN_MACHINES
    return (shown + (f" +{more}" if more > 0 else "")) or "-"


def render_ettr(result: EttrResult, console: Console) -> None:
    """The ledger as three tables (ETTR, breakdown, incidents) and its notes; without data, the one
    line saying why (the exit code is 3)."""
    led = result.ledger
    if led is None:
        console.print(f"[yellow]ettr: {escape(result.message)}[/]")
        return
    head = Table(title=f"ETTR of job {escape(result.job)}", title_justify="left", show_edge=False)
    for col in ("window (UTC)", "cumulative", f"sliding ({_duration(led.sliding_window_s)})", "step time"):
        head.add_column(escape(col), overflow="fold")
    step = "unknown" if led.step_time_s is None else f"{led.step_time_s:.3g}s ({led.step_time_source})"
    head.add_row(
        escape(f"{format_utc(led.start_s)} → {format_utc(led.end_s)} ({_duration(led.total_s)})"),
        f"{led.cumulative_ettr:.1%}",
        f"{led.sliding_ettr:.1%}",
        escape(step),
    )
    console.print(head)
    causes = Table(title="time by cause", title_justify="left", show_edge=False)
    for col, justify in (("cause", "left"), ("seconds", "right"), ("share", "right")):
        causes.add_column(col, justify=justify)  # type: ignore[arg-type]
    for cause, seconds, fraction in result.breakdown():
        causes.add_row(escape(cause), f"{seconds:.1f}", f"{fraction:.1%}")
    console.print(causes)
    rows = Table(title=f"incidents: {len(led.incidents)}", title_justify="left", show_edge=False)
    for col in ("id", "onset (UTC)", "class", "playbook", "MTTR", "evicted"):
        rows.add_column(col, overflow="fold")
    for row in led.incidents:
        mttr = _duration(row.mttr_s) + (" (inferred)" if row.first_new_step_inferred else "")
        if row.mttr_s is None:
            mttr = "no new step yet"
        rows.add_row(
            escape(row.incident_id),
            escape(format_utc(row.onset_s)),
            escape(row.incident_class.value),
            escape(row.playbook or "-"),
            escape(mttr),
            escape(_machines(row.machines_evicted)),
        )
    console.print(rows)
    for note in led.notes:
        console.print(f"note: {escape(note)}")
