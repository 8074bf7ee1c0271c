"""``robustctl evict`` and ``robustctl return`` (and the glue the action commands share: confirm, show, finish).

Parse → :mod:`robustctl.commands.evict` → render (:mod:`robustctl.report.actions`) → exit code.

Exit codes: 0 applied or nothing to do (and ``--dry-run`` of an acceptable plan) · 2 refused by a safety
rail or by another robustctl holding the store's lock (the message names the rule and the override) ·
3 a scheduler step failed (the audit record says which steps ran) · 64 bad arguments, or no ``--yes``
without a terminal to confirm on · 78 bad inventory, an unreadable or invalid --from-report file, or a state store that cannot be written.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from robustctl.cli.common import InventoryOpt, JsonOpt, StateOpt
from robustctl.cli.help import examples

if TYPE_CHECKING:
    from robustctl.actions.session import ActionResult, Confirm, ShowPlan

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
        max=3600,
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


def confirmer(yes: bool) -> Confirm | None:
    """``--yes``: always; a terminal on stdin: ask there; else None (the library's usage error, 64)."""
    from robustctl.actions.session import always

    if yes:
        return always
    if not sys.stdin.isatty():
        return None
    return lambda plan: typer.confirm(f"Apply this {plan.action} plan?", default=False, err=True)


def plan_shower(quiet: bool) -> ShowPlan | None:
    """The hook that renders the plan on stderr before it is confirmed (None with ``--quiet``)."""
    if quiet:
        return None
    from robustctl.report.actions import render_plan
    from robustctl.report.console import stderr_console

    console = stderr_console()
    return lambda plan: render_plan(plan, console)


def finish(result: ActionResult, *, json_out: bool, quiet: bool) -> int:
    """Render what happened, print the JSON document (``--json``), and return the exit code.

    Raises:
        ActionRefused: the plan was refused (after its document, with the failing rails, is printed).
    """
    from robustctl.actions.session import Outcome
    from robustctl.commands.base import exit_code_of, result_json
    from robustctl.report.actions import render_action_outcome
    from robustctl.report.console import emit_json, stderr_console

    if not quiet or result.outcome is Outcome.DECLINED:
        render_action_outcome(result, stderr_console())
    if result.outcome is not Outcome.DECLINED:
        emit_json(result_json(result), to_stdout=json_out, output=None)
    if result.outcome is Outcome.REFUSED:
        raise result.refused_error()
    return exit_code_of(result)


EVICT_EXAMPLES = examples(
    (
        "robustctl evict node017 --job llama70b --over-evict pp --reason 'xid 79' --dry-run",
        "plan: the PP group",
    ),
    ("robustctl evict 'node[001-004]' --reason 'IB link flaps' --yes", "drain four machines"),
    ("robustctl evict --from-report stacks.json --over-evict auto --reason hang --yes", "what stacks named"),
)
RETURN_EXAMPLES = examples(
    ("robustctl return node017 --reason 'GPU replaced' --dry-run", "show the plan; change nothing"),
    ("robustctl return 'node[001-004]' --reason 'IB cables reseated' --yes", "resume four machines"),
)


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
    64 usage (or no --yes without a terminal), 78 config, a bad --from-report file or an unwritable state store.
    """
    from robustctl.commands.evict import EvictRequest, run_evict

    request = EvictRequest(
        hosts=hosts,
        report=from_report,
        job=job,
        over_evict=over_evict,
        reason=reason,
        force=force,
        force_reason=force_reason,
        inventory=inventory,
        state=state,
        dry_run=dry_run,
        lock_timeout_s=lock_timeout,
    )
    result = run_evict(request, confirm=confirmer(yes), show=plan_shower(quiet))
    return finish(result, json_out=json_out, quiet=quiet)


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
    from robustctl.commands.evict import ReturnRequest, run_return

    request = ReturnRequest(
        hosts=hosts,
        reason=reason,
        inventory=inventory,
        state=state,
        dry_run=dry_run,
        lock_timeout_s=lock_timeout,
    )
    return finish(
        run_return(request, confirm=confirmer(yes), show=plan_shower(quiet)), json_out=json_out, quiet=quiet
    )
