"""Rendering of ``robustctl playbook`` results on stderr (rich). Every text from a playbook file, the
journal or a host is escaped (:func:`robustctl.report.console.escape`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from robustctl.commands.playbook import (
    PlaybookDryRunResult,
    PlaybookListResult,
    PlaybookShowResult,
    PlaybookValidateResult,
)
from robustctl.playbooks.engine import DryRunStep, RunOutcome, StepEvent
from robustctl.report.console import escape

__all__ = [
    "render_dry_run",
    "render_event",
    "render_list",
    "render_run",
    "render_show",
    "render_validate",
]

_STATUS = {"done": "green", "failed": "bold red", "skipped": "yellow"}


def render_list(result: PlaybookListResult, console: Console) -> None:
    """One row per playbook: name, origin, steps, destructive steps, description (or its errors)."""
    table = Table(title="playbooks", title_justify="left")
    for col in ("name", "origin", "steps", "destructive", "description"):
        table.add_column(col)
    for p in result.playbooks:
        if p.name is None:
            table.add_row("[bold red]invalid[/]", p.origin, "", "", escape(" | ".join(p.errors)[:300]))
            continue
        origin = p.origin + (" (overrides shipped)" if p.overrides else "")
        table.add_row(
            escape(p.name),
            origin,
            str(p.steps),
            escape(", ".join(p.destructive)),
            escape(_first_sentence(p.description)),
        )
    console.print(table)


def _first_sentence(text: str) -> str:
    head = text.split(". ", 1)[0]
    return head if len(head) <= 100 else head[:97] + "..."


def _tree(steps: Sequence[DryRunStep], console: Console, *, with_now: bool) -> None:
    for i, s in enumerate(steps):
        mark = " [bold red]destructive[/]" if s.destructive else ""
        console.print(f"[bold]{i + 1}. {escape(s.step)}[/] ({escape(s.kind)}){mark}: {escape(s.summary)}")
        if s.description:
            console.print(f"     {escape(s.description)}")
        if s.when:
            console.print(f"     when: {escape(s.when)}")
        if s.args:
            console.print(f"     args: {escape(json.dumps(s.args, default=str)[:300])}")
        extra = f", retries {s.retries}" if s.retries else ""
        console.print(f"     timeout {s.timeout_s:g} s{extra}")
        branches = ", ".join(f"{k} → {escape(v)}" for k, v in s.branches.items())
        console.print(f"     {branches}")
        if with_now:
            if s.now is not None:
                console.print(f"     now: {escape(_now_line(s.now))}")
            elif s.now_error:
                console.print(f"     now: [yellow]cannot plan[/]: {escape(s.now_error)}")
            elif s.note:
                console.print(f"     now: {escape(s.note)}")


def _now_line(doc: Mapping[str, Any]) -> str:
    """One line on a plan document (an action plan, a diagnose or replay plan)."""
    kind = doc.get("kind")
    if kind == "plan":
        targets = doc.get("targets") or []
        rails = [r.get("rule") for r in doc.get("rails") or [] if isinstance(r, dict) and not r.get("passed")]
        line = f"{doc.get('action')}: {len(targets)} target(s) {', '.join(map(str, targets[:8]))}"
        if rails:
            line += f"; REFUSED by {', '.join(map(str, rails))}"
        if doc.get("group"):
            line += f"; group {doc.get('group')}"
        return line
    if kind == "playbook-step-multi":
        return f"{doc.get('action')} for {', '.join(map(str, doc.get('hosts') or []))}"
    hosts = doc.get("hosts")
    if isinstance(hosts, list):
        return f"{kind}: {len(hosts)} host(s)"
    return f"{kind}: planned (see --json)"


def render_show(result: PlaybookShowResult, console: Console) -> None:
    """The decision tree: parameters, policy, then each step with its condition and branches."""
    console.print(f"[bold]{escape(result.name)}[/] ({escape(result.source)})")
    if result.description:
        console.print(escape(result.description))
    for name, p in result.params.items():
        req = "required" if p.get("required") else f"default {p.get('default')!r}"
        console.print(f"param {escape(name)} ({escape(req)}): {escape(p.get('description', ''))}")
    if result.policy.get("apply_without_confirmation"):
        console.print("policy: destructive steps run without --yes")
    _tree(result.steps, console, with_now=False)


def render_dry_run(result: PlaybookDryRunResult, console: Console) -> None:
    """The decision tree with what the first steps would do on the job now."""
    params = ", ".join(f"{k}={v}" for k, v in result.params.items())
    console.print(f"[bold]{escape(result.name)}[/] dry run ({escape(params)}): nothing is applied")
    _tree(result.steps, console, with_now=True)


def render_validate(result: PlaybookValidateResult, console: Console) -> None:
    """``ok`` with the name, or every error on its own line."""
    if result.ok:
        console.print(
            f"{escape(result.source)}: ok, playbook {escape(result.name)} with {result.steps} step(s)"
        )
        return
    for e in result.errors:
        console.print(escape(e), soft_wrap=True)


def render_event(ev: StepEvent, console: Console) -> None:
    """One line as a step starts or ends."""
    if ev.event == "start":
        again = f" (attempt {ev.attempt})" if ev.attempt > 1 else ""
        console.print(f"[dim]→ {escape(ev.step)} ({escape(ev.kind)}){again}[/]")
        return
    o = ev.outcome
    if o is None:
        return
    style = _STATUS.get(o.status, "")
    code = f" exit {o.exit_code}" if o.exit_code is not None else ""
    how = f" [{escape(o.resumed)}]" if o.resumed else ""
    err = f": {escape(o.error)}" if o.error else ""
    console.print(f"[{style}]{o.status:>7}[/] {escape(o.step)}{code}{how}{err}")


def render_run(result: RunOutcome, console: Console) -> None:
    """The run's final line: id, status, message, and how to resume a failed run's job."""
    style = _STATUS.get(result.status, "")
    what = "resumed run" if result.resumed else "run"
    console.print(
        f"playbook {escape(result.playbook)} {what} {result.run_id}: [{style}]{result.status}[/]: "
        f"{escape(result.message)}"
    )
