"""``robustctl evict`` and ``robustctl return``.

Parse → :mod:`robustctl.commands.evict` → render (:mod:`robustctl.report.actions`) → exit code.

Exit codes: 0 applied or nothing to do (and ``--dry-run`` of an acceptable plan) · 2 refused by a safety
rail or by another robustctl holding the store's lock (the message names the rule and the override) ·
3 a scheduler step failed (the audit record says which steps ran) · 64 bad arguments, or no ``--yes``
without a terminal to confirm on · 78 bad inventory, an unreadable or invalid --from-report file, or a state store that cannot be written.

The option bundle of the action commands is declared in :mod:`robustctl.cli.options`, and their
confirm/show/finish glue in :mod:`robustctl.cli.session`; the names stay importable from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from robustctl.cli.help import examples
from robustctl.cli.options import (
    DryRunOpt,
    ForceOpt,
    ForceReasonOpt,
    InventoryOpt,
    JsonOpt,
    LockTimeoutOpt,
    QuietOpt,
    StateOpt,
    YesOpt,
    build_request,
)
from robustctl.cli.session import confirmer, finish, plan_shower

__all__ = [
    "EVICT_EXAMPLES",
    "RETURN_EXAMPLES",
    "DryRunOpt",
    "ForceOpt",
    "ForceReasonOpt",
    "LockTimeoutOpt",
    "QuietOpt",
    "YesOpt",
    "confirmer",
    "evict",
    "finish",
    "plan_shower",
    "return_",
]

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
    report: Annotated[
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
    lock_timeout_s: LockTimeoutOpt = None,
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
    cli = dict(locals())
    from robustctl.commands.evict import EvictRequest, run_evict

    result = run_evict(build_request(EvictRequest, cli), confirm=confirmer(yes), show=plan_shower(quiet))
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
    lock_timeout_s: LockTimeoutOpt = None,
    quiet: QuietOpt = False,
) -> int:
    """Put repaired machines back in service: resume them via the scheduler, mark them active.

    The store's history records evicted → returned → active. Exit: 0 applied or nothing to do,
    2 refused (empty target set, lock), 3 a scheduler step failed, 64 usage, 78 config/state store.
    """
    cli = dict(locals())
    from robustctl.commands.evict import ReturnRequest, run_return

    result = run_return(build_request(ReturnRequest, cli), confirm=confirmer(yes), show=plan_shower(quiet))
    return finish(result, json_out=json_out, quiet=quiet)
