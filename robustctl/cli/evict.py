"""``robustctl evict`` and ``robustctl return`` (and the plan rendering the action commands share).

Exit codes: 0 applied or nothing to do (and ``--dry-run`` of an acceptable plan) · 2 refused by a safety
rail or by another robustctl holding the store's lock (the message names the rule and the override) ·
3 a scheduler step failed (the audit record says which steps ran) · 64 bad arguments, or no ``--yes``
without a terminal to confirm on · 78 bad inventory, or a state store that cannot be written.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from robustctl.cli.common import InventoryOpt, JsonOpt, StateOpt
from robustctl.errors import UsageError
from robustctl.exit_codes import ExitCode

if TYPE_CHECKING:
    from rich.console import Console

    from robustctl.actions import ActionContext
    from robustctl.actions.plan import ApplyResult, Plan

YesOpt = Annotated[
    bool, typer.Option("--yes", "-y", help="Apply without asking (required without a terminal).")
]
DryRunOpt = Annotated[
    bool,
    typer.Option(
        "--dry-run", help="Print the plan apply would run (with --json: the plan document); change nothing."
    ),
]
LockTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--lock-timeout",
        min=0,
        help="Seconds to wait for another robustctl acting on the store \\[default: policy, 30].",
    ),
]
ForceOpt = Annotated[
    bool,
    typer.Option("--force", help="Override the failing safety rails that allow it (needs --force-reason)."),
]
ForceReasonOpt = Annotated[
    str | None,
    typer.Option("--force-reason", help="Why the rails are overridden (recorded in the audit log)."),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No table on stderr.")]


def render_plan(plan: Plan, console: Console) -> None:
    """The plan as a rich table (steps) plus the rails and notes, on ``console``."""
    from rich.table import Table

    title = f"{plan.action} plan: {len(plan.targets)} target(s) via {plan.scheduler}"
    table = Table(title=title, title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("step")
    table.add_column("now")
    for i, step in enumerate(plan.steps):
        table.add_row(str(i), step.describe(), "[dim]already done[/]" if step.noop else "to do")
    console.print(table)
    if plan.suspects:
        console.print(f"suspects: {', '.join(plan.suspects)}")
    if plan.group:
        console.print(f"over-eviction ({plan.over_evict}): {plan.group}")
    if plan.source:
        console.print(f"evidence: {plan.source}")
    console.print(f"reason: {plan.reason}")
    for r in plan.rails:
        mark = (
            "[green]ok[/]"
            if r.passed
            else ("[yellow]forced[/]" if plan.forced and r.overridable else "[bold red]REFUSED[/]")
        )
        console.print(
            f"rail {r.rule}: {mark} {r.detail}" + ("" if r.passed else f" (override: {r.override})")
        )
    for note in plan.notes:
        console.print(f"note: {note}")


def render_result(result: ApplyResult, console: Console) -> None:
    """Each step's outcome and the final line, on ``console``."""
    style = {"done": "green", "noop": "dim", "failed": "bold red", "skipped": "yellow"}
    for r in result.results:
        console.print(f"[{style.get(r.status, '')}]{r.status:>7}[/] {r.description}: {r.detail}")
    console.print(f"{result.plan.action}: {result.status}: {result.message} (audit #{result.audit_id})")


def run_plan(
    ctx: ActionContext,
    plan: Plan,
    *,
    dry_run: bool,
    yes: bool,
    json_out: bool,
    quiet: bool,
) -> int:
    """Render ``plan``, then (unless ``dry_run``) confirm and apply it; return the exit code.

    Raises:
        ActionRefused: a rail failed (also with ``--dry-run``, after printing the plan).
        UsageError: no ``--yes`` and stdin is not a terminal.
    """
    from robustctl.actions.plan import apply_json, apply_plan, plan_json
    from robustctl.report.console import emit_json, stderr_console

    console = stderr_console()
    if not quiet:
        render_plan(plan, console)
    if dry_run:
        emit_json(plan_json(plan), to_stdout=json_out, output=None)
        if plan.refused:
            raise plan.refusal()
        return int(ExitCode.OK)
    if plan.refused:
        emit_json(plan_json(plan), to_stdout=json_out, output=None)  # the rails, for scripts
        apply_plan(plan, ctx.scheduler, ctx.store)  # audits the refusal and raises ActionRefused
    if not plan.nothing_to_do and not yes:
        if not sys.stdin.isatty():
            raise UsageError(
                "not applied: pass --yes to apply without a terminal to confirm on (or --dry-run)"
            )
        if not typer.confirm(f"Apply this {plan.action} plan?", default=False, err=True):
            console.print("not applied")
            return int(ExitCode.OK)
    result = apply_plan(plan, ctx.scheduler, ctx.store)
    if not quiet:
        render_result(result, console)
    emit_json(apply_json(result), to_stdout=json_out, output=None)
    return int(result.exit_code)


def evict(
    hosts: Annotated[
        str | None, typer.Argument(help="Hosts to evict: names or ranges, e.g. node017 or 'node[001-004]'.")
    ] = None,
    inventory: InventoryOpt = None,
    from_report: Annotated[
        Path | None,
        typer.Option(
            "--from-report", help="Take the suspects from a 'diagnose --json' or 'stacks --json' report."
        ),
    ] = None,
    job: Annotated[
        str | None, typer.Option("--job", help="The job whose parallel layout defines the groups.")
    ] = None,
    over_evict: Annotated[
        str | None,
        typer.Option(
            "--over-evict",
            help="Evict every machine of the suspects' group: tp, pp, dp, cp, ep, or auto (the smallest group "
            "containing every suspect; with a stacks report and no --job, the report's own group).",
        ),
    ] = None,
    reason: Annotated[
        str, typer.Option("--reason", help="Why (recorded by the scheduler and the audit log).")
    ] = "",
    state: StateOpt = None,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    lock_timeout: LockTimeoutOpt = None,
    force: ForceOpt = False,
    force_reason: ForceReasonOpt = None,
    quiet: QuietOpt = False,
) -> int:
    """Take machines out of service: drain them via the scheduler and mark them evicted.

    Shows the plan, asks (or needs --yes), applies step by step with an audit record. Idempotent:
    a host already drained or evicted is a no-op step. Safety rails (policy: in the inventory):
    empty target set, evictions per hour, fraction of the cluster and of a job per window, and a
    circuit breaker when too many hosts look bad at once.
    Exit: 0 applied or nothing to do, 2 refused by a rail or the lock, 3 a scheduler step failed,
    64 usage (or no --yes without a terminal), 78 config or unwritable state store.
    """
    from robustctl.actions import open_context
    from robustctl.actions.evict import EvictRequest, plan_evict

    if hosts is not None and from_report is not None:
        raise UsageError("give hosts or --from-report, not both")
    request = EvictRequest(
        hosts=hosts,
        report=from_report,
        job=job,
        over_evict=over_evict.lower() if over_evict else None,
        reason=reason or _default_reason("evict", from_report),
        force=force,
        force_reason=force_reason,
    )
    ctx = open_context(inventory, state)
    try:
        if not dry_run:
            ctx.lock("evict", lock_timeout)
        plan = plan_evict(request, ctx)
        return run_plan(ctx, plan, dry_run=dry_run, yes=yes, json_out=json_out, quiet=quiet)
    finally:
        ctx.close()


def return_(
    hosts: Annotated[
        str, typer.Argument(help="Hosts to put back in service, e.g. node017 or 'node[001-004]'.")
    ],
    reason: Annotated[str, typer.Option("--reason", help="Why (e.g. 'GPU replaced').")] = "",
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    lock_timeout: LockTimeoutOpt = None,
    quiet: QuietOpt = False,
) -> int:
    """Put repaired machines back in service: resume them via the scheduler, mark them active.

    The store's history records evicted → returned → active. Exit: 0 applied or nothing to do,
    2 refused (empty target set, lock), 3 a scheduler step failed, 64 usage, 78 config/state store.
    """
    from robustctl.actions import open_context
    from robustctl.actions.evict import plan_return

    ctx = open_context(inventory, state)
    try:
        if not dry_run:
            ctx.lock("return", lock_timeout)
        plan = plan_return(hosts, reason or _default_reason("return", None), ctx)
        return run_plan(ctx, plan, dry_run=dry_run, yes=yes, json_out=json_out, quiet=quiet)
    finally:
        ctx.close()


def _default_reason(action: str, report: Path | None) -> str:
    return f"robustctl {action}" + (f" from {report}" if report is not None else "") + " (no --reason given)"
