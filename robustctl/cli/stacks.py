"""``robustctl stacks``: name the hung or slow ranks of a running job from py-spy dumps."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from robustctl.cli.common import (
    InventoryOpt,
    JsonOpt,
    NoRecordOpt,
    OutputOpt,
    State,
    StateOpt,
    record_findings,
    resolve_inventory,
)


def stacks(
    job: Annotated[
        str,
        typer.Option("--job", "-j", help="Job name from the inventory's jobs: section.", show_default=False),
    ],
    inventory: InventoryOpt = None,
    hosts: Annotated[
        str | None, typer.Option("--hosts", "-H", help="Only these hosts of the job (host range).")
    ] = None,
    slow: Annotated[
        bool, typer.Option("--slow", help="Fail-slow voting over several rounds instead of a hang snapshot.")
    ] = False,
    rounds: Annotated[int, typer.Option("--rounds", min=1, max=100, help="Fail-slow rounds.")] = 5,
    interval: Annotated[
        float,
        typer.Option("--interval", min=0.0, help="Seconds between rounds (fail-slow) or samples (hang)."),
    ] = 10.0,
    samples: Annotated[
        int,
        typer.Option(
            "--samples",
            min=1,
            max=10,
            help="Hang mode: samples taken; with 2+, a job whose ranks change stack between samples is progressing, not hung.",
        ),
    ] = 2,
    sample_interval: Annotated[
        float, typer.Option("--sample-interval", min=0.0, help="Hang mode: seconds between samples.")
    ] = 1.0,
    native: Annotated[
        bool,
        typer.Option("--native", help="Include C/C++ frames (py-spy --native; pauses each process ~1 s)."),
    ] = False,
    blocking: Annotated[
        bool,
        typer.Option("--blocking", help="Pause each process while dumping (py-spy without --nonblocking)."),
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1.0, help="Per-host probe budget in seconds.")
    ] = 30.0,
    json_out: JsonOpt = False,
    output: OutputOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No tree or table on stderr.")] = False,
    state: StateOpt = None,
    no_record: NoRecordOpt = False,
) -> int:
    """Dump every rank of a job with py-spy, cluster the stacks, name the outlier ranks, machines and group.

    Hang mode (default): the dominant stack classes are healthy, the rest are outliers; the smallest
    parallel group (TP/PP/DP/...) holding every outlier is the over-eviction set. Its suspect hosts
    are recorded as suspect in the state store (unless --no-record; never evicted or standby hosts;
    nothing is ever cleared), and the --json document's 'recorded' says what; a store that cannot
    be written is one warning line. Fail-slow mode (--slow): the group with the most outliers in
    each round gets a vote; the most-voted group is the degrader (a group, not machine suspects:
    nothing is recorded). Exit: 0 no outlier, 1 ambiguous, 2 suspects named, 3 nothing could be read.
    """
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.stacks import render_failslow, render_stacks
    from robustctl.stacks.collect import CollectSettings
    from robustctl.stacks.live import stacks_failslow, stacks_hang
    from robustctl.transport.pool import TransportPool

    inv = resolve_inventory(inventory)
    the_job = inv.job(job)
    targets = None
    if hosts is not None:
        wanted = {h.name for h in inv.select(hosts)}
        targets = [h for h in the_job.hosts if h.name in wanted]
    settings = CollectSettings.from_diagnose(
        inv.diagnose,
        native=native,
        nonblocking=not blocking,
        probe_timeout_s=timeout,
    )
    console = stderr_console()

    def note(i: int, col: object) -> None:
        if not quiet:
            from robustctl.stacks.collect import StackCollection

            assert isinstance(col, StackCollection)
            bad = len(col.unknown_hosts)
            console.print(
                f"[dim]sample {i + 1}: {len(col.mains)} rank(s) from {len(col.hosts) - bad}/{len(col.hosts)} host(s) "
                f"in {col.elapsed_s:.1f}s[/]"
            )

    pool = TransportPool()
    try:
        if slow:
            fs = stacks_failslow(
                the_job,
                pool,
                hosts=targets,
                settings=settings,
                rounds=rounds,
                interval_s=interval,
                on_round=note,
            )
            if not quiet:
                render_failslow(fs.result, console)
            emit_json(fs.to_json(), to_stdout=json_out, output=output)
            return int(fs.exit_code)
        live = stacks_hang(
            the_job,
            pool,
            hosts=targets,
            settings=settings,
            samples=samples,
            interval_s=sample_interval,
            on_sample=note,
        )
    finally:
        pool.close()
    if not quiet:
        render_stacks(live.report, console, verbose=State.verbose > 0)
        for col in live.collections[-1:]:
            for h in col.unknown_hosts:
                console.print(f"[magenta]{h.host}: {h.status.value}: {h.error}[/]")
    if not no_record:
        from robustctl.suspects import stacks_findings

        recorded = record_findings(
            state, stacks_findings(live.report), source="stacks", inventory=inv, console=console, quiet=quiet
        )
        live = dataclasses.replace(live, recorded=recorded)
    emit_json(live.to_json(), to_stdout=json_out, output=output)
    return int(live.exit_code)
