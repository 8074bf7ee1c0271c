"""Rendering of ``robustctl hosts``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from robustctl.report.console import as_text, escape
from robustctl.timefmt import format_utc

if TYPE_CHECKING:
    from rich.console import Console

    from robustctl.commands.hosts import HostsResult

STATE_STYLE = {"suspect": "bold red", "evicted": "yellow", "standby": "cyan", "returned": "green"}


def render_hosts(result: HostsResult, console: Console) -> None:
    """A table (host, state, since (UTC), reason, last finding) and a one-line count per state."""
    if not result.hosts:
        console.print(as_text(f"no suspect, evicted or standby hosts (state store {result.state})"))
        return
    table = Table(title=f"hosts: {len(result.hosts)}", title_justify="left")
    for col in ("host", "state", "since (UTC)", "reason", "last finding"):
        table.add_column(col, overflow="fold")
    for e in result.hosts:
        state = escape(e.state + (f" ({e.readiness})" if e.readiness else ""))
        style = STATE_STYLE.get(e.state)
        since = format_utc(e.since) if e.since is not None else "(inventory)"
        finding = "(the reason)" if e.finding == e.reason else (e.finding or "-")
        host = e.host + ("" if e.in_inventory else " (not in inventory)")
        table.add_row(
            escape(host), f"[{style}]{state}[/]" if style else state, since, escape(e.reason), escape(finding)
        )
    console.print(table)
    counts: dict[str, int] = {}
    for e in result.hosts:
        counts[e.state] = counts.get(e.state, 0) + 1
    console.print(as_text(", ".join(f"{n} {s}" for s, n in counts.items())))
