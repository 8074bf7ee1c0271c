"""``robustctl restart`` and ``robustctl stop``.

Parse → :mod:`robustctl.commands.restart` → render (:mod:`robustctl.report.actions`) → exit code.

Exit codes: 0 applied (and ``--dry-run``) · 2 another robustctl holds the store's lock · 3 a step
failed (unreachable machine, processes that would not die, ranks that did not start) · 64 bad
arguments, or no ``--yes`` without a terminal to confirm on · 78 bad inventory (on the inventory back
end: a job without ``launch:`` for restart, without ``process:`` for stop) or an unwritable state store.
"""

from __future__ import annotations

from typing import Annotated

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
from robustctl.cli.session import confirmer, finish, plan_shower

RESTART_EXAMPLES = examples(
    ("robustctl restart --job llama70b --dry-run", "show the plan: stop, checkpoint, launch, wait"),
    (
        "robustctl restart --job llama70b --from-checkpoint 1200 --reason 'loss spike' --yes",
        "from iteration 1200",
    ),
)
STOP_EXAMPLES = examples(
    ("robustctl stop --job llama70b --dry-run", "show what would be stopped"),
    ("robustctl stop --job llama70b --reason maintenance --yes", "TERM, grace, KILL, verified gone"),
)

JobOpt = Annotated[str, typer.Option("--job", help="The job (a jobs: entry of the inventory).")]
"""``--job`` of restart and stop."""


def restart(
    job: JobOpt,
    from_checkpoint: Annotated[
        str,
        typer.Option(
            "--from-checkpoint",
            help="latest-complete (the newest iteration with every shard present), none, or an iteration.",
        ),
    ] = "latest-complete",
    reason: AuditReasonOpt = "",
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    lock_timeout_s: LockTimeoutOpt = None,
    quiet: QuietOpt = False,
) -> int:
    """Restart a job on its current machines.

    Inventory back end (jobs.J.launch): stop its processes (TERM, grace, KILL, verified gone), pick
    the checkpoint (with checkpoint directories local to each host, copy its shards onto the hosts
    that load them and lack them, a warm standby), launch every rank detached, wait until every rank
    runs. Slurm: scontrol requeue,
    then wait until it runs. Kubernetes: delete its pods for its controller to recreate.
    Exit: 0 applied, 2 lock held, 3 a step failed, 64 usage, 78 config (no launch: section).
    """
    cli = dict(locals())
    from robustctl.commands.restart import RestartRequest, run_restart

    result = run_restart(build_request(RestartRequest, cli), confirm=confirmer(yes), show=plan_shower(quiet))
    return finish(result, json_out=json_out, quiet=quiet)


def stop(
    job: JobOpt,
    reason: AuditReasonOpt = "",
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    lock_timeout_s: LockTimeoutOpt = None,
    quiet: QuietOpt = False,
) -> int:
    """Stop a job the inventory back end runs: its process trees get SIGTERM, the grace, SIGKILL.

    Exit: 0 applied, 2 lock held, 3 a host unreachable or processes left, 64 usage, 78 config.
    """
    cli = dict(locals())
    from robustctl.commands.restart import StopRequest, run_stop

    result = run_stop(build_request(StopRequest, cli), confirm=confirmer(yes), show=plan_shower(quiet))
    return finish(result, json_out=json_out, quiet=quiet)
