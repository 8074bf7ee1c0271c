"""``robustctl standby list|check|add|activate|size``: the warm-standby pool.

Parse → :mod:`robustctl.commands.standby` → render (:mod:`robustctl.report.actions`) → exit code.
"""

from __future__ import annotations

from typing import Annotated

import typer

from robustctl.cli.help import examples
from robustctl.cli.options import (
    AuditReasonOpt,
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

app = typer.Typer(
    help="Warm standbys: self-checked machines that replace evicted ones, and the pool's size.",
    no_args_is_help=True,
    epilog=examples(
        ("robustctl standby size --machines 1024 --daily-failure-rate 0.0012", "how many standbys: 4"),
        ("robustctl standby add 'spare[01-04]' --yes", "hold four machines as standbys"),
        ("robustctl standby activate --for node017 --job llama70b --yes", "swap a ready standby in"),
    ),
)


@app.command(
    "list",
    epilog=examples(
        ("robustctl standby list", "the pool with each host's readiness"),
        ("robustctl standby list --json", "the same as one JSON document"),
    ),
)
def list_(inventory: InventoryOpt = None, state: StateOpt = None, json_out: JsonOpt = False) -> int:
    """List the standby pool with each host's readiness (ready, bad, unchecked). Exit: 0, 78 config."""
    cli = dict(locals())
    from robustctl.commands.base import exit_code_of, result_json
    from robustctl.commands.standby import StandbyListRequest, run_standby_list
    from robustctl.report.actions import render_standby_list
    from robustctl.report.console import emit_json, stderr_console

    result = run_standby_list(build_request(StandbyListRequest, cli))
    render_standby_list(result.standbys, stderr_console())
    emit_json(result_json(result), to_stdout=json_out, output=None)
    return exit_code_of(result)


@app.command(
    "add",
    epilog=examples(
        ("robustctl standby add 'spare[01-04]' --dry-run", "show the plan; change nothing"),
        (
            "robustctl standby add spare05 --reason 'back from repair' --yes",
            "hold a repaired machine as a standby",
        ),
    ),
)
def add(
    hosts: Annotated[str, typer.Argument(help="Hosts to add to the pool, e.g. 'spare[01-04]'.")],
    reason: AuditReasonOpt = "warm standby",
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    lock_timeout_s: LockTimeoutOpt = None,
    force: ForceOpt = False,
    force_reason: ForceReasonOpt = None,
    quiet: QuietOpt = False,
) -> int:
    """Hold hosts out of scheduling as standbys (unchecked until 'standby check' passes).

    Refuses a host that runs a job (rail not-in-a-job; --force to override). Exit: 0, 2 refused,
    3 scheduler step failed, 64 usage, 78 config/state store.
    """
    cli = dict(locals())
    from robustctl.commands.standby import StandbyAddRequest, run_standby_add

    request = build_request(StandbyAddRequest, cli)
    result = run_standby_add(request, confirm=confirmer(yes), show=plan_shower(quiet))
    return finish(result, json_out=json_out, quiet=quiet)


@app.command(
    "check",
    epilog=examples(
        ("robustctl standby check", "self-check the whole pool (diagnose L0-L1)"),
        ("robustctl standby check spare01 --json", "one standby, JSON on stdout"),
    ),
)
def check(
    hosts: Annotated[
        str | None, typer.Argument(help="Standbys to check \\[default: the whole pool].")
    ] = None,
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    json_out: JsonOpt = False,
    lock_timeout_s: LockTimeoutOpt = None,
) -> int:
    """Self-check standbys with diagnose L0-L1 and mark each ready (healthy) or bad (anything else).

    Exit: 0 every standby ready, 2 some bad, 64 usage (no standby), 78 config/state store.
    """
    cli = dict(locals())
    from robustctl.commands.base import exit_code_of, result_json
    from robustctl.commands.standby import StandbyCheckRequest, run_standby_check
    from robustctl.report.actions import render_standby_check
    from robustctl.report.console import emit_json, stderr_console

    result = run_standby_check(build_request(StandbyCheckRequest, cli))
    render_standby_check(result.results, stderr_console(), not_in_inventory=result.not_in_inventory)
    emit_json(result_json(result), to_stdout=json_out, output=None)
    return exit_code_of(result)


@app.command(
    "activate",
    epilog=examples(
        ("robustctl standby activate --for node017 --job llama70b --dry-run", "show the swap plan"),
        (
            "robustctl standby activate --for node017 --job llama70b --standby spare02 --requeue --yes",
            "swap in spare02 and requeue the job",
        ),
    ),
)
def activate(
    for_host: Annotated[str, typer.Option("--for", help="The evicted host of the job to replace.")],
    job: Annotated[str, typer.Option("--job", help="The job whose host list changes.")],
    standby: Annotated[
        str | None, typer.Option("--standby", help="The standby to use \\[default: the first ready one].")
    ] = None,
    requeue: Annotated[bool, typer.Option("--requeue", help="Requeue the job afterwards.")] = False,
    reason: AuditReasonOpt = "",
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    lock_timeout_s: LockTimeoutOpt = None,
    force: ForceOpt = False,
    force_reason: ForceReasonOpt = None,
    quiet: QuietOpt = False,
) -> int:
    """Swap a ready standby in for an evicted host of a job (scheduler, job host list, audit).

    Exit: 0 applied, 2 refused (host not evicted, no ready standby), 3 scheduler step failed,
    64 usage, 78 config/state store.
    """
    cli = dict(locals())
    from robustctl.commands.standby import StandbyActivateRequest, run_standby_activate

    request = build_request(StandbyActivateRequest, cli)
    result = run_standby_activate(request, confirm=confirmer(yes), show=plan_shower(quiet))
    return finish(result, json_out=json_out, quiet=quiet)


@app.command(
    "size",
    epilog=examples(
        ("robustctl standby size --machines 1024 --daily-failure-rate 0.0012", "prints 4"),
        ("robustctl standby size --from-history --history-days 90 --json", "from the store's evictions"),
    ),
)
def size(
    machines: Annotated[
        int | None,
        typer.Option(
            "--machines",
            min=0,
            max=1_000_000,
            help="Machines the pool covers \\[default: the inventory's hosts].",
        ),
    ] = None,
    daily_failure_rate: Annotated[
        float | None,
        typer.Option("--daily-failure-rate", min=0, max=1, help="Failures per machine per day, e.g. 0.0012."),
    ] = None,
    from_history: Annotated[
        bool,
        typer.Option("--from-history", help="Use the daily failure rate observed in the store's evictions."),
    ] = False,
    history_days: Annotated[
        float,
        typer.Option("--history-days", min=0.01, max=3650, help="How far back --from-history looks, days."),
    ] = 30.0,
    repair_window_days: Annotated[
        float | None,
        typer.Option(
            "--repair-window-days",
            min=0.001,
            max=365,
            help="Days a failed machine stays out \\[default: policy, 1].",
        ),
    ] = None,
    quantile: Annotated[
        float | None,
        typer.Option("--quantile", min=0.5, max=0.999999, help="Coverage \\[default: policy, 0.99]."),
    ] = None,
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    json_out: JsonOpt = False,
) -> int:
    """Print the standby pool size: the P99 of Binomial(machines, rate × repair window).

    The smallest k with P\\[failures <= k] >= 0.99 (ByteRobust's Table 5: 2, 2, 3, 4 spares for 128,
    256, 512, 1024 machines at 0.12% a day). Exit: 0, 64 usage, 78 config/state store.
    """
    cli = dict(locals())
    from robustctl.commands.base import exit_code_of, result_json
    from robustctl.commands.standby import StandbySizeRequest, run_standby_size
    from robustctl.report.console import emit_json, write_stdout

    result = run_standby_size(build_request(StandbySizeRequest, cli))
    if json_out:
        emit_json(result_json(result), to_stdout=True, output=None)
    else:
        write_stdout(f"{result.standbys}\n")
    return exit_code_of(result)
