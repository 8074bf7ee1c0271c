"""Rich rendering of a diagnose :class:`~robustctl.models.RunReport`."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from robustctl.models import RunReport, Status
from robustctl.report.console import as_text, escape, styled


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
            table.add_row(escape(h.host), styled(h.status), "", "", note)
            continue
        for i, c in enumerate(sorted(shown, key=lambda c: (-c.status.severity, c.level, c.name))):
            dev = f" [{c.device}]" if c.device else ""
            summary = escape(c.summary)
            table.add_row(
                escape(h.host) if i == 0 else "",
                styled(h.status) if i == 0 else "",
                str(c.level),
                escape(c.name + dev),
                f"{styled(c.status)} {summary}" if c.status is not h.status else summary,
            )
    console.print(table)
    console.print(as_text(levels_line(report)))
    if report.suspects:
        console.print(f"[bold red]suspects ({len(report.suspects)}):[/] {escape(', '.join(report.suspects))}")
    if report.unknown:
        console.print(
            f"[magenta]could not check ({len(report.unknown)}):[/] {escape(', '.join(report.unknown))}"
        )
    console.print(
        f"{styled(report.status)}: {len(report.hosts)} host(s) in {report.finished_at - report.started_at:.1f}s"
        f" → exit {int(report.exit_code)}"
    )


def levels_line(report: RunReport) -> str:
    """``levels run: L0 quick (0.3s); not run: L1, L2 (stopped after L0 named suspects)`` (plain text).

    Skipped levels that share a reason are listed together, then the reason once.
    """
    ran = [f"L{lv.level} {lv.name} ({lv.elapsed_s:.1f}s)" for lv in report.levels if lv.ran]
    groups: list[tuple[list[str], str | None]] = []
    for lv in report.levels:
        if lv.ran:
            continue
        if groups and groups[-1][1] == lv.reason:
            groups[-1][0].append(f"L{lv.level}")
        else:
            groups.append(([f"L{lv.level}"], lv.reason))
    skipped = [", ".join(names) + (f" ({why})" if why else "") for names, why in groups]
    return f"levels run: {', '.join(ran) or 'none'}" + (f"; not run: {'; '.join(skipped)}" if skipped else "")


def print_plan(plan: dict[str, Any], console: Console) -> None:
    """Print a ``diagnose --dry-run`` plan: levels, limits, and each host's command line per level.

    Host-supplied and user-supplied text (names, addresses, wrappers) is printed without markup.
    """
    runs = [f"L{lv['level']} {lv['name']}" for lv in plan["levels"] if "skipped" not in lv]
    skipped = [f"L{lv['level']} {lv['name']} ({lv['skipped']})" for lv in plan["levels"] if "skipped" in lv]
    console.print(
        as_text(
            f"would run {', '.join(runs) or 'nothing'} on {len(plan['hosts'])} host(s)"
            + (" (all levels)" if plan["all_levels"] else " (stopping at the first level with suspects)")
            + f"; concurrency {plan['concurrency']}, per-host {plan['host_timeout_s']:g}s, deadline {plan['deadline_s']:g}s"
            + (f"; skipped: {', '.join(skipped)}" if skipped else "")
        )
    )
    table = Table(show_header=True, show_lines=True)
    for col in ("host", "via", "lvl", "command", "stdin"):
        table.add_column(col, overflow="fold")
    for h in plan["hosts"]:
        via = f"{h['transport']} {h.get('ssh', h['address'])}"
        rows = h.get("commands") or [{"level": "", "command": h["command"], "stdin": ""}]
        for i, c in enumerate(rows):
            what = f" {c['pair']} rank {c['rank']}" if "pair" in c else ""
            table.add_row(
                as_text(h["host"] if i == 0 else ""),
                as_text(via if i == 0 else ""),
                as_text(f"{c['level']}{what}"),
                as_text(c["command"]),
                as_text(c["stdin"]),
            )
    console.print(table)
    for note in plan.get("notes", []):
        console.print(as_text(f"note: {note}"))
