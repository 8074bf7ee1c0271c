"""Rendering of ``robustctl watch`` (the loop's status line and JSON lines), ``watch --once`` and
``watch --history`` on stderr (rich); all text escaped."""

from __future__ import annotations

import json
from types import TracebackType
from typing import TYPE_CHECKING, Any

from rich.table import Table

from robustctl.report.console import as_text
from robustctl.timefmt import format_utc

if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status

    from robustctl.commands.watch import WatchHistoryResult, WatchLoopResult, WatchResult


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
    resumed = result.resumed
    if resumed is not None:
        console.print(
            as_text(
                f"  resumed playbook {resumed.get('playbook')} run {resumed.get('run_id')} (its watcher died): "
                f"{resumed.get('status')}: {resumed.get('message')}"
            )
        )
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


class LoopView:
    """What ``robustctl watch`` (the loop) shows: each evaluation whose action is not ``none``, or that
    differs from the previous one, rendered as :func:`render_watch` does; on a terminal, a status line
    (rich) under it saying when the last evaluation was and what it found; with ``json_lines``, one
    JSON document per evaluation on stdout (a line each, flushed), and the loop's end as the last.
    A context manager (the status line lives within it)."""

    def __init__(self, console: Console, job: str, interval_s: float, *, json_lines: bool = False) -> None:
        self._console = console
        self._job = job
        self._interval_s = interval_s
        self._json = json_lines
        self._previous: str | None = None
        self._status: Status | None = None

    def __enter__(self) -> LoopView:
        if self._console.is_terminal:
            self._status = self._console.status(as_text(f"watch {self._job}: first evaluation"))
            self._status.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._status is not None:
            self._status.stop()

    def show(self, result: WatchResult) -> None:
        """One evaluation."""
        from robustctl.commands.base import result_json
        from robustctl.report.console import write_stdout

        if self._json:
            write_stdout(json.dumps(result_json(result), allow_nan=False) + "\n")
        action = result.action
        if action != "none" or action != self._previous:
            render_watch(result, self._console)
        self._previous = action
        if self._status is not None:
            step = result.reading.get("step")
            at = result.reading.get("read_at")
            when = format_utc(float(at)) if isinstance(at, (int, float)) else "?"
            self._status.update(
                as_text(
                    f"watch {self._job}: {action} at {when} (step {step if step is not None else '?'}); "
                    f"next evaluation in {self._interval_s:g} s"
                )
            )

    def finish(self, ended: WatchLoopResult) -> None:
        """The final line (stderr) and, with ``json_lines``, the loop's document."""
        from robustctl.commands.base import result_json
        from robustctl.report.console import write_stdout

        if self._status is not None:
            self._status.stop()
            self._status = None
        why = (
            "the job ended (its back end says it completed) and no recovery runs"
            if ended.reason == "job-ended"
            else "stopped"
        )
        self._console.print(as_text(f"watch {ended.job}: {why}; {ended.evaluations} evaluation(s); exiting"))
        if self._json:
            write_stdout(json.dumps(result_json(ended), allow_nan=False) + "\n")
