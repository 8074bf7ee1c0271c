"""``robustctl update stage|list`` and ``robustctl rollback``: hot update and rollback of a job's code.

Parse → :mod:`robustctl.commands.update` → render on stderr (text from hosts and the store escaped)
→ JSON on stdout with ``--json`` → exit code (see that module).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from robustctl.cli.help import examples
from robustctl.cli.options import (
    AuditReasonOpt,
    DryRunOpt,
    InventoryOpt,
    JsonOpt,
    LockTimeoutOpt,
    QuietOpt,
    StateOpt,
    YesOpt,
    build_request,
)
from robustctl.cli.session import asker, confirmer, plan_shower

if TYPE_CHECKING:
    from robustctl.commands.update import RollbackPlan

JobOpt = Annotated[str, typer.Option("--job", "-j", help="The inventory job whose code changes.")]

STAGE_EXAMPLES = examples(
    (
        "robustctl update stage --job llama70b --ref 3f2c1e0 --reason 'fused rmsnorm'",
        "applied at the next restart",
    ),
    (
        "robustctl update stage --job llama70b --ref v1.4 --reason 'loss spike fix' --urgent --yes",
        "restart now",
    ),
)
APPLY_EXAMPLES = examples(
    (
        "robustctl update apply --job llama70b --yes",
        "restart now if a lazy change's window has passed (cron)",
    ),
    ("robustctl update apply --job llama70b --now --yes", "apply the pending change now"),
)
LIST_EXAMPLES = examples(("robustctl update list --job llama70b", "pending, applied, forced; who, why, when"))
ROLLBACK_EXAMPLES = examples(
    ("robustctl rollback --job llama70b --dry-run", "the plan: back to the last stable version"),
    ("robustctl rollback --job llama70b --to v1.3 --yes", "check out v1.3 on every host, restart"),
)

app = typer.Typer(
    help="Stage code updates of a job (applied at its next restart) and list its code history.",
    no_args_is_help=True,
    epilog=examples(
        (
            "robustctl update stage --job llama70b --ref 3f2c1e0 --reason 'fused rmsnorm'",
            "at the next restart",
        ),
        ("robustctl update list --job llama70b", "pending, applied, forced; who, why, when"),
    ),
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    from robustctl.timefmt import format_utc

    return format_utc(t, zone=True)


def _short(commit: str | None) -> str:
    return commit[:12] if commit else "-"


def _emit(doc: dict[str, Any], json_out: bool) -> None:
    from robustctl.report.console import emit_json

    emit_json(doc, to_stdout=json_out, output=None)


@app.command("stage", epilog=STAGE_EXAMPLES)
def stage(
    job: JobOpt,
    ref: Annotated[str, typer.Option("--ref", help="Branch, tag or commit; must exist on every host.")],
    reason: Annotated[str, typer.Option("--reason", help="Why the code changes (recorded).")],
    urgent: Annotated[bool, typer.Option("--urgent", help="Restart the job now to apply it.")] = False,
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    lock_timeout_s: LockTimeoutOpt = None,
    quiet: QuietOpt = False,
) -> int:
    """Record a code change of a job: the ref is resolved on every host first (one commit everywhere).

    A lazy change is applied at the job's next restart, or forced once code.update_window_s passed;
    --urgent restarts the job now. Exit: 0 staged, 2 refused, 3 a host could not be read, 64 bad ref or
    ref missing on a host, 78 no code: section, path not a git work tree, or a bad state store.
    """
    cli = dict(locals())
    from robustctl.commands.base import exit_code_of, result_json
    from robustctl.commands.update import UpdateStageRequest, run_update_stage
    from robustctl.report.console import escape, stderr_console

    res = run_update_stage(
        build_request(UpdateStageRequest, cli), confirm=confirmer(yes), show=plan_shower(quiet)
    )
    if not quiet:
        what = "would stage" if res.dry_run else f"staged change {res.change.id if res.change else '?'}:"
        when = "restart now" if res.urgent else "at the next restart"
        stderr_console().print(
            f"{what} job {escape(res.job)} {_short(res.from_commit)} → {_short(res.commit)} "
            f"({escape(res.ref)}) on {len(res.hosts)} host(s), {when}"
            + (f"; hosts on another version: {escape(', '.join(res.disagreeing))}" if res.disagreeing else "")
        )
    _emit(result_json(res), json_out)
    return exit_code_of(res)


@app.command("apply", epilog=APPLY_EXAMPLES)
def apply(
    job: JobOpt,
    now: Annotated[bool, typer.Option("--now", help="Apply the pending change even if not due yet.")] = False,
    reason: Annotated[str, typer.Option("--reason", help="Why (default: the change is due).")] = "",
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    lock_timeout_s: LockTimeoutOpt = None,
    quiet: QuietOpt = False,
) -> int:
    """Restart the job to apply its pending code change once it is due (its code.update_window_s passed).

    Run it from cron: a lazy change waits for the next restart and is forced by the first run after its
    window. Exit: 0 nothing pending, not due yet, or applied; else the restart's exit code.
    """
    cli = dict(locals())
    from robustctl.commands.base import exit_code_of, result_json
    from robustctl.commands.update import UpdateApplyRequest, run_update_apply
    from robustctl.report.console import escape, stderr_console

    res = run_update_apply(
        build_request(UpdateApplyRequest, cli), confirm=confirmer(yes), show=plan_shower(quiet)
    )
    if not quiet:
        if res.commit is None:
            line = f"job {escape(res.job)}: no pending code change"
        elif not (res.due or now):
            line = f"job {escape(res.job)}: {_short(res.commit)} pending, due {_when(res.due_at)}"
        else:
            verb = "would restart" if res.dry_run else "restarted"
            line = f"job {escape(res.job)}: {verb} to apply {_short(res.commit)}"
        stderr_console().print(line)
    _emit(result_json(res), json_out)
    return exit_code_of(res)


@app.command("list", epilog=LIST_EXAMPLES)
def list_(
    job: JobOpt,
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="Do not read the progress signal (no host contacted).")
    ] = False,
    json_out: JsonOpt = False,
) -> int:
    """The job's code changes (pending, applied, forced, superseded, rolled back: who, why, when,
    from, to) and versions (started, steps seen, stable since). Exit 0; 64/78 for bad input."""
    from rich.table import Table

    from robustctl.commands.base import exit_code_of, result_json
    from robustctl.commands.update import UpdateListRequest, run_update_list
    from robustctl.report.console import escape, stderr_console

    res = run_update_list(
        UpdateListRequest(job=job, read_progress=not no_progress, inventory=inventory, state=state)
    )
    console = stderr_console(wide=True)
    t = Table(title=f"code changes of job {escape(job)}")
    for col in ("id", "kind", "state", "from", "to", "ref", "urgent", "who", "staged", "applied", "reason"):
        t.add_column(col)
    for c in res.changes:
        t.add_row(
            str(c.id), c.kind, c.state.value, _short(c.from_ref), _short(c.commit), escape(c.ref),
            "yes" if c.urgent else "", escape(c.who), _when(c.staged_at), _when(c.applied_at), escape(c.reason),
        )  # fmt: skip
    console.print(t)
    v = Table(title="versions")
    for col in ("commit", "started", "steps seen", "last progress", "stable since"):
        v.add_column(col)
    for x in res.versions:
        v.add_row(_short(x.commit), _when(x.started_at), str(x.steps_seen), _when(x.last_progress_at),
                  _when(x.stable_at))  # fmt: skip
    console.print(v)
    pend = (
        f"pending: {_short(res.pending_commit)} (changes {', '.join(map(str, res.pending_ids))})"
        + (" — window passed: forced at the next check" if res.forced else "")
        if res.pending_commit
        else "nothing pending"
    )
    stable = f"last stable: {_short(res.last_stable.commit)}" if res.last_stable else "no stable version yet"
    console.print(f"{pend}; {stable}; {escape(res.progress_note)}")
    _emit(result_json(res), json_out)
    return exit_code_of(res)


def _plan_printer(quiet: bool) -> Any:
    if quiet:
        return None
    from robustctl.report.console import escape, stderr_console

    console = stderr_console()

    def show(plan: RollbackPlan) -> None:
        console.print(
            f"rollback plan: job {escape(plan.job)} → {_short(plan.commit)} ({escape(plan.source)}"
            + (f", {escape(plan.ref)}" if plan.ref else "")
            + f"); reason: {escape(plan.reason)}"
        )
        for host, head in plan.hosts:
            console.print(f"  {escape(host)}: {_short(head)} → {_short(plan.commit)}")
        for i, step in enumerate(plan.steps, 1):
            console.print(f"  step {i}: {escape(step)}")

    return show


def _rollback_question(plan: RollbackPlan) -> str:
    return f"Roll job {plan.job} back to {plan.commit[:12]} and restart it?"


def rollback(
    job: JobOpt,
    to: Annotated[
        str | None, typer.Option("--to", help="Go back to this ref [default: the last stable version].")
    ] = None,
    reason: AuditReasonOpt = "",
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    lock_timeout_s: LockTimeoutOpt = None,
    quiet: QuietOpt = False,
) -> int:
    """Check out the job's last stable version (or --to) on every host, all or none, and restart it.

    A host that fails leaves nothing switched (every switched host is put back). Exit: 0 rolled back
    (or dry run), 2 refused (no stable version and no --to, local changes on a host, the lock),
    3 a host could not be read or the checkout failed, 64 bad ref or ref missing on a host, 78 config.
    """
    cli = dict(locals())
    from robustctl.commands.base import exit_code_of, result_json
    from robustctl.commands.update import RollbackRequest, run_rollback
    from robustctl.report.console import escape, stderr_console

    res = run_rollback(
        build_request(RollbackRequest, cli),
        confirm=asker(yes, _rollback_question),
        show=_plan_printer(quiet),
        restart_show=plan_shower(quiet),
    )
    if not quiet or res.exit_code != 0:
        console = stderr_console()
        if res.switch is not None and not res.switch.ok:
            for h in res.switch.hosts:
                console.print(f"  {escape(h.host)}: {h.status} {escape(h.detail)}")
        console.print(f"rollback: {res.outcome.value}: {escape(res.message)}")
    _emit(result_json(res), json_out)
    return exit_code_of(res)
