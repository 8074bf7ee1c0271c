"""Rich rendering of the action commands: plans, apply results, the standby pool and its self-check.

Everything that came from a user, a host, a scheduler or the store (host names, reasons, rail
details, step details) is escaped before rich renders it: a reason such as ``"[/] broken"`` prints as
written instead of being read as markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from robustctl.actions.plan import ApplyResult, Plan
from robustctl.actions.session import ActionResult, Outcome
from robustctl.actions.standby import StandbyInfo
from robustctl.report.console import escape
from robustctl.store import Readiness

if TYPE_CHECKING:
    from robustctl.commands.standby import CheckedStandby

__all__ = [
    "render_action_outcome",
    "render_plan",
    "render_result",
    "render_standby_check",
    "render_standby_list",
]

_STEP_STYLE = {"done": "green", "noop": "dim", "failed": "bold red", "skipped": "yellow"}


def render_plan(plan: Plan, console: Console) -> None:
    """The plan as a table of steps, then its suspects, group, evidence, reason, rails and notes."""
    title = f"{plan.action} plan: {len(plan.targets)} target(s) via {plan.scheduler}"
    table = Table(title=escape(title), title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("step")
    table.add_column("now")
    for i, step in enumerate(plan.steps):
        table.add_row(str(i), escape(step.describe()), "[dim]already done[/]" if step.noop else "to do")
    console.print(table)
    if plan.suspects:
        console.print(f"suspects: {escape(', '.join(plan.suspects))}")
    if plan.group:
        console.print(f"over-eviction ({escape(str(plan.over_evict))}): {escape(plan.group)}")
    if plan.source:
        console.print(f"evidence: {escape(plan.source)}")
    console.print(f"reason: {escape(plan.reason)}")
    for r in plan.rails:
        if r.passed:
            mark = "[green]ok[/]"
        elif plan.forced and r.overridable:
            mark = "[yellow]forced[/]"
        else:
            mark = "[bold red]REFUSED[/]"
        override = "" if r.passed else f" (override: {escape(r.override)})"
        console.print(f"rail {escape(r.rule)}: {mark} {escape(r.detail)}{override}")
    for note in plan.notes:
        console.print(f"note: {escape(note)}")
    for ck in plan.checkpoints:
        style = {"survives": "green", "not-affected": "green", "unknown": "yellow"}.get(
            ck.status.value, "bold red"
        )
        console.print(f"[{style}]{escape(ck.summary)}[/]")


def render_result(result: ApplyResult, console: Console) -> None:
    """Each step's outcome, then the final line with the audit record's id."""
    for r in result.results:
        style = _STEP_STYLE.get(r.status, "")
        status = f"[{style}]{r.status:>7}[/]" if style else f"{r.status:>7}"
        console.print(f"{status} {escape(r.description)}: {escape(r.detail)}")
    console.print(
        f"{escape(result.plan.action)}: {result.status}: {escape(result.message)} (audit #{result.audit_id})"
    )


def render_action_outcome(result: ActionResult, console: Console) -> None:
    """What happened after the plan was shown: the apply result, or one line when it was declined."""
    if result.applied is not None:
        render_result(result.applied, console)
    elif result.outcome is Outcome.DECLINED:
        console.print("not applied")


def render_standby_list(standbys: Sequence[StandbyInfo], console: Console) -> None:
    """The pool as a table: host, readiness, the scheduler's view, the reason of the last change."""
    table = Table(title=f"standby pool: {len(standbys)} host(s)", title_justify="left")
    for col in ("host", "readiness", "scheduler", "reason"):
        table.add_column(col)
    for s in standbys:
        table.add_row(escape(s.host), s.readiness.value, s.scheduler_state.value, escape(s.reason))
    console.print(table)


def render_standby_check(
    results: Sequence[CheckedStandby], console: Console, *, not_in_inventory: Sequence[str] = ()
) -> None:
    """One line per standby checked: its readiness (green ready, red bad), host and why; then one
    note naming the store's standbys the inventory no longer has (not checked)."""
    for r in results:
        style = "green" if r.readiness is Readiness.READY else "bold red"
        console.print(f"[{style}]{r.readiness.value:>5}[/] {escape(r.host)}: {escape(r.summary)}")
    if not_in_inventory:
        console.print(f"note: not in the inventory, so not checked: {escape(', '.join(not_in_inventory))}")
