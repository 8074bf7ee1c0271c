"""Rich rendering of a diagnose :class:`~robustctl.models.RunReport`."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from robustctl.models import RunReport, Status
from robustctl.report.console import styled


def render_run(report: RunReport, console: Console, *, verbose: bool = False) -> None:
    """Print a host table (problems first, each non-OK check on its own row) and a summary line.

    With ``verbose``, OK checks are listed too.
    """
    table = Table(title="robustctl diagnose", title_justify="left", show_lines=False, expand=False)
    table.add_column("host", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("lvl", justify="right")
    table.add_column("check", no_wrap=True)
    table.add_column("finding")
    order = sorted(report.hosts, key=lambda h: -h.status.severity)
    for h in order:
        shown = [
            c for c in h.checks if verbose or c.status in (Status.CRITICAL, Status.WARNING, Status.UNKNOWN)
        ]
        if not shown:
            na = sum(1 for c in h.checks if c.status is Status.NOT_APPLICABLE)
            ok = sum(1 for c in h.checks if c.status is Status.OK)
            note = f"{ok} checks ok" + (f", {na} not applicable" if na else "")
            table.add_row(h.host, styled(h.status), "", "", note)
            continue
        for i, c in enumerate(sorted(shown, key=lambda c: (-c.status.severity, c.level, c.name))):
            dev = f" [{c.device}]" if c.device else ""
            table.add_row(
                h.host if i == 0 else "",
                styled(h.status) if i == 0 else "",
                str(c.level),
                c.name + dev,
                f"{styled(c.status)} {c.summary}" if c.status is not h.status else c.summary,
            )
    console.print(table)
    ran = [f"L{lv.level} {lv.name} ({lv.elapsed_s:.1f}s)" for lv in report.levels if lv.ran]
    skipped = [f"L{lv.level}" for lv in report.levels if not lv.ran]
    console.print(
        f"levels run: {', '.join(ran) or 'none'}" + (f"; not run: {', '.join(skipped)}" if skipped else "")
    )
    if report.suspects:
        console.print(f"[bold red]suspects ({len(report.suspects)}):[/] {', '.join(report.suspects)}")
    if report.unknown:
        console.print(f"[magenta]could not check ({len(report.unknown)}):[/] {', '.join(report.unknown)}")
    console.print(
        f"{styled(report.status)}: {len(report.hosts)} host(s) in {report.finished_at - report.started_at:.1f}s"
        f" → exit {int(report.exit_code)}"
    )


def print_plan(plan: dict[str, Any], console: Console) -> None:
    """Print a ``diagnose --dry-run`` plan: levels, limits and one row per host."""
    levels = ", ".join(f"L{lv['level']} {lv['name']}" for lv in plan["levels"])
    console.print(
        f"would run {levels} on {len(plan['hosts'])} host(s)"
        + (" (all levels)" if plan["all_levels"] else " (stopping at the first level with suspects)")
        + f"; concurrency {plan['concurrency']}, per-host {plan['host_timeout_s']:g}s, deadline {plan['deadline_s']:g}s"
    )
    table = Table(show_header=True)
    for col in ("host", "transport", "address", "gpus", "command"):
        table.add_column(col)
    for h in plan["hosts"]:
        table.add_row(h["host"], h["transport"], h.get("ssh", h["address"]), str(h["gpus"]), h["command"])
    console.print(table)
