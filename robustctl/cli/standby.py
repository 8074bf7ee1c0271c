"""``robustctl standby list|check|add|activate|size``: the warm-standby pool."""

from __future__ import annotations

from typing import Annotated

import typer

from robustctl.cli.common import InventoryOpt, JsonOpt, StateOpt
from robustctl.cli.evict import (
    DryRunOpt,
    ForceOpt,
    ForceReasonOpt,
    LockTimeoutOpt,
    QuietOpt,
    YesOpt,
    run_plan,
)
from robustctl.errors import UsageError
from robustctl.exit_codes import ExitCode

app = typer.Typer(
    help="Warm standbys: self-checked machines that replace evicted ones, and the pool's size.",
    no_args_is_help=True,
)


@app.command("list")
def list_(inventory: InventoryOpt = None, state: StateOpt = None, json_out: JsonOpt = False) -> int:
    """List the standby pool with each host's readiness (ready, bad, unchecked). Exit: 0, 78 config."""
    from rich.table import Table

    from robustctl.actions import open_context
    from robustctl.actions.standby import list_standbys
    from robustctl.models import SCHEMA_VERSION
    from robustctl.report.console import emit_json, stderr_console

    ctx = open_context(inventory, state)
    try:
        pool = list_standbys(ctx)
    finally:
        ctx.close()
    table = Table(title=f"standby pool: {len(pool)} host(s)", title_justify="left")
    for col in ("host", "readiness", "scheduler", "reason"):
        table.add_column(col)
    for s in pool:
        table.add_row(s.host, s.readiness.value, s.scheduler_state.value, s.reason)
    stderr_console().print(table)
    emit_json(
        {"kind": "standby-list", "schema_version": SCHEMA_VERSION, "standbys": pool},
        to_stdout=json_out,
        output=None,
    )
    return int(ExitCode.OK)


@app.command("add")
def add(
    hosts: Annotated[str, typer.Argument(help="Hosts to add to the pool, e.g. 'spare[01-04]'.")],
    reason: Annotated[
        str, typer.Option("--reason", help="Why (recorded in the audit log).")
    ] = "warm standby",
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    lock_timeout: LockTimeoutOpt = None,
    force: ForceOpt = False,
    force_reason: ForceReasonOpt = None,
    quiet: QuietOpt = False,
) -> int:
    """Hold hosts out of scheduling as standbys (unchecked until 'standby check' passes).

    Refuses a host that runs a job (rail not-in-a-job; --force to override). Exit: 0, 2 refused,
    3 scheduler step failed, 64 usage, 78 config/state store.
    """
    from robustctl.actions import open_context
    from robustctl.actions.standby import plan_add

    ctx = open_context(inventory, state)
    try:
        if not dry_run:
            ctx.lock("standby-add", lock_timeout)
        plan = plan_add(hosts, reason, ctx, force=force, force_reason=force_reason)
        return run_plan(ctx, plan, dry_run=dry_run, yes=yes, json_out=json_out, quiet=quiet)
    finally:
        ctx.close()


@app.command("check")
def check(
    hosts: Annotated[
        str | None, typer.Argument(help="Standbys to check \\[default: the whole pool].")
    ] = None,
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    json_out: JsonOpt = False,
    lock_timeout: LockTimeoutOpt = None,
) -> int:
    """Self-check standbys with diagnose L0-L1 and mark each ready (healthy) or bad (anything else).

    Exit: 0 every standby ready, 2 some bad, 64 usage (no standby), 78 config/state store.
    """
    from robustctl.actions import open_context
    from robustctl.actions.standby import check_standbys
    from robustctl.models import SCHEMA_VERSION
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.store import Readiness
    from robustctl.transport.pool import TransportPool

    ctx = open_context(inventory, state)
    pool = TransportPool()
    try:
        ctx.lock("standby-check", lock_timeout)
        result = check_standbys(ctx, pool, hosts=hosts)
    finally:
        pool.close()
        ctx.close()
    console = stderr_console()
    for host, ready, line in result.results:
        style = "green" if ready is Readiness.READY else "bold red"
        console.print(f"[{style}]{ready.value:>5}[/] {host}: {line}")
    doc = {
        "kind": "standby-check",
        "schema_version": SCHEMA_VERSION,
        "audit_id": result.audit_id,
        "results": [{"host": h, "readiness": r.value, "summary": s} for h, r, s in result.results],
        "report": result.report,
    }
    emit_json(doc, to_stdout=json_out, output=None)
    bad = any(r is not Readiness.READY for _, r, _ in result.results)
    return int(ExitCode.CRITICAL if bad else ExitCode.OK)


@app.command("activate")
def activate(
    for_host: Annotated[str, typer.Option("--for", help="The evicted host of the job to replace.")],
    job: Annotated[str, typer.Option("--job", help="The job whose host list changes.")],
    standby: Annotated[
        str | None, typer.Option("--standby", help="The standby to use \\[default: the first ready one].")
    ] = None,
    requeue: Annotated[bool, typer.Option("--requeue", help="Requeue the job afterwards.")] = False,
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded in the audit log).")] = "",
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    lock_timeout: LockTimeoutOpt = None,
    force: ForceOpt = False,
    force_reason: ForceReasonOpt = None,
    quiet: QuietOpt = False,
) -> int:
    """Swap a ready standby in for an evicted host of a job (scheduler, job host list, audit).

    Exit: 0 applied, 2 refused (host not evicted, no ready standby), 3 scheduler step failed,
    64 usage, 78 config/state store.
    """
    from robustctl.actions import open_context
    from robustctl.actions.standby import plan_activate

    ctx = open_context(inventory, state)
    try:
        if not dry_run:
            ctx.lock("standby-activate", lock_timeout)
        plan = plan_activate(
            ctx,
            for_host=for_host,
            job=job,
            standby=standby,
            reason=reason,
            requeue=requeue,
            force=force,
            force_reason=force_reason,
        )
        return run_plan(ctx, plan, dry_run=dry_run, yes=yes, json_out=json_out, quiet=quiet)
    finally:
        ctx.close()


@app.command("size")
def size(
    machines: Annotated[
        int | None,
        typer.Option(
            "--machines", min=0, help="Machines the pool covers \\[default: the inventory's hosts]."
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
        float, typer.Option("--history-days", min=0.01, help="How far back --from-history looks, days.")
    ] = 30.0,
    repair_window_days: Annotated[
        float | None,
        typer.Option(
            "--repair-window-days", min=0.001, help="Days a failed machine stays out \\[default: policy, 1]."
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

    The smallest k with P[failures <= k] >= 0.99 (ByteRobust's Table 5: 2, 2, 3, 4 spares for 128, 256,
    512, 1024 machines at 0.12% a day). 'size --machines 1024 --daily-failure-rate 0.0012' prints 4.
    Exit: 0, 64 usage, 78 config/state store.
    """
    import sys

    from robustctl.actions import open_context
    from robustctl.actions.standby import observed_daily_rate, pool_size
    from robustctl.models import SCHEMA_VERSION
    from robustctl.report.console import emit_json

    if (daily_failure_rate is None) == (not from_history):
        raise UsageError("give --daily-failure-rate RATE or --from-history (one of them)")
    evictions: int | None = None
    if from_history or machines is None or inventory is not None:
        ctx = open_context(inventory, state)
        try:
            n = machines if machines is not None else len(ctx.inventory.hosts)
            policy = ctx.policy
            if from_history:
                daily_failure_rate, evictions, _ = observed_daily_rate(ctx, n, history_days)
        finally:
            ctx.close()
    else:
        n = machines
        policy = None
    window = repair_window_days or (policy.standby_repair_window_days if policy else 1.0)
    q = quantile or (policy.standby_quantile if policy else 0.99)
    assert daily_failure_rate is not None
    k = pool_size(n, daily_failure_rate, window_days=window, quantile=q)
    if json_out:
        doc = {
            "kind": "standby-size",
            "schema_version": SCHEMA_VERSION,
            "machines": n,
            "daily_failure_rate": daily_failure_rate,
            "repair_window_days": window,
            "quantile": q,
            "observed_evictions": evictions,
            "standbys": k,
        }
        emit_json(doc, to_stdout=True, output=None)
    else:
        sys.stdout.write(f"{k}\n")
    return int(ExitCode.OK)
