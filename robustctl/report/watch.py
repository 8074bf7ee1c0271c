"""Rendering of ``robustctl watch --once`` and ``watch --history`` on stderr (rich); all text escaped."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table

from robustctl.report.console import as_text
from robustctl.report.timefmt import format_utc

if TYPE_CHECKING:
    from rich.console import Console

    from robustctl.commands.watch import WatchHistoryResult, WatchResult


def _evidence_lines(verdicts: list[dict[str, Any]]) -> list[str]:
    return [f"  {v.get('signal')} {v.get('rule')}: {v.get('evidence')}" for v in verdicts]


def render_watch(result: WatchResult, console: Console) -> None:
    """One status line (job, action, class, playbook, reason), then the evidence, one line per
    verdict, and what the recovery run or the notifier did."""
    d = result.decision
    head = f"watch {result.job}: {d['action']}"
    if d.get("signal"):
        head += f" {d['signal']}"
    if d.get("playbook") and d["action"] in ("run", "advise"):
        params = " ".join(f"{k}={v}" for k, v in dict(d.get("params") or {}).items())
        head += f" -> {d['playbook']}" + (f" ({params})" if params else "")
    if d.get("incident"):
        head += f" [{d['incident']}]"
    console.print(as_text(f"{head}: {d['reason']}"))
    for line in _evidence_lines(list(d.get("evidence") or [])):
        console.print(as_text(line))
    run = result.playbook_run
    if run is not None:
        console.print(
            as_text(
                f"  playbook {run.get('playbook')} run {run.get('run_id')}: {run.get('status')}: {run.get('message')}"
            )
        )
    if result.notify is not None:
        n = result.notify
        console.print(
            as_text(f"  notify: exit {n.get('exit_code')}" + (f": {n['error']}" if n.get("error") else ""))
        )


def render_watch_history(result: WatchHistoryResult, console: Console) -> None:
    """The job's events, oldest first, one row each."""
    if not result.events:
        console.print(as_text(f"watch {result.job}: no decision recorded"))
        return
    table = Table(title=f"watch {result.job}: {len(result.events)} decision(s)", title_justify="left")
    for col in ("id", "at (UTC)", "action", "class", "rule", "playbook", "run", "reason"):
        table.add_column(col, overflow="fold")
    for e in result.events:
        table.add_row(
            str(e.id),
            as_text(format_utc(e.at)),
            as_text(e.action.value),
            as_text(e.signal_class),
            as_text(e.rule),
            as_text(e.playbook or "-"),
            as_text("-" if e.playbook_run_id is None else str(e.playbook_run_id)),
            as_text(e.reason),
        )
    console.print(table)
