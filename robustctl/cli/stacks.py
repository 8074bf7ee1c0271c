"""``robustctl stacks``: name the hung or slow ranks of a running job from py-spy dumps."""

from __future__ import annotations

from functools import partial
from typing import Annotated

import typer

from robustctl.cli.common import State
from robustctl.cli.help import examples
from robustctl.cli.options import InventoryJobOpt, InventoryOpt, JsonOpt, NoRecordOpt, OutputOpt, StateOpt
from robustctl.commands.base import exit_code_of, result_json

EXAMPLES = examples(
    ("robustctl stacks -i cluster.yaml --job llama70b", "py-spy every rank, cluster, name the hung ranks"),
    ("robustctl stacks -i cluster.yaml -j llama70b --slow --rounds 5", "fail-slow voting over 5 rounds"),
    ("robustctl stacks -i cluster.yaml -j llama70b --json --no-record", "JSON report, store untouched"),
)


def stacks(
    job: InventoryJobOpt,
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
        typer.Option(
            "--interval", min=0.0, max=3600, help="Seconds between rounds (fail-slow) or samples (hang)."
        ),
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
        float,
        typer.Option("--sample-interval", min=0.0, max=3600, help="Hang mode: seconds between samples."),
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
        float, typer.Option("--timeout", min=1.0, max=86400, help="Per-host probe budget in seconds.")
    ] = 30.0,
    no_debug_server: Annotated[
        bool,
        typer.Option(
            "--no-debug-server",
            help="py-spy for every rank, even where the in-job agent's debug server answers.",
        ),
    ] = False,
    json_out: JsonOpt = False,
    output: OutputOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No tree or table on stderr.")] = False,
    state: StateOpt = None,
    no_record: NoRecordOpt = False,
) -> int:
    """Dump every rank of a job, cluster the stacks, name the outlier ranks, machines and group.

    Each rank is read through its in-job agent's debug server (robustctl.agent) when it has one,
    else with py-spy; the report says which source read each rank (--no-debug-server: py-spy only).

    Hang mode (default): the dominant stack classes are healthy, the rest are outliers; the smallest
    parallel group (TP/PP/DP/...) holding every outlier is the over-eviction set. Its suspect hosts
    are recorded as suspect in the state store (unless --no-record; never evicted or standby hosts;
    nothing is ever cleared), and the --json document's 'recorded' says what; a store that cannot
    be written is one warning line. Fail-slow mode (--slow): the group with the most outliers in
    each round gets a vote; the most-voted group is the degrader (a group, not machine suspects:
    nothing is recorded). Exit: 0 no outlier, 1 ambiguous, 2 suspects named, 3 nothing could be read.
    """
    from robustctl.commands.stacks import StacksResult, run_stacks, stacks_request
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.record import render_recorded
    from robustctl.report.stacks import render_collection_note, render_failslow, render_live_stacks

    request = stacks_request(
        job=job,
        inventory=inventory,
        hosts=hosts,
        slow=slow,
        rounds=rounds,
        interval_s=interval,
        samples=samples,
        sample_interval_s=sample_interval,
        native=native,
        blocking=blocking,
        timeout_s=timeout,
        state=state,
        record=not no_record,
        debug_server=not no_debug_server,
    )
    console = stderr_console()
    result = run_stacks(request, progress=None if quiet else partial(render_collection_note, console=console))
    if isinstance(result, StacksResult):
        if not quiet:
            render_live_stacks(
                result.live.report, result.live.collections, console, verbose=State.verbose > 0
            )
        render_recorded(result.recorded, console, quiet=quiet)
    elif not quiet:
        render_failslow(result.live.result, console)
    emit_json(result_json(result), to_stdout=json_out, output=output)
    return exit_code_of(result)
