"""``robustctl watch``: the watch loop, one evaluation of a job's signals (``--once``), or its recorded
decisions (``--history``)."""

from __future__ import annotations

from typing import Annotated

import typer

from robustctl.cli.help import examples
from robustctl.cli.options import InventoryOpt, JsonOpt, StateOpt
from robustctl.commands.base import exit_code_of, result_json

WATCH_EXAMPLES = examples(
    ("robustctl watch -i cluster.yaml --job llm --yes", "watch unattended until stopped or the job ends"),
    (
        "robustctl watch -i cluster.yaml --job llm --once --advise",
        "what the watcher would do now, acting on nothing",
    ),
    ("robustctl watch --history --job llm", "every decision recorded for the job"),
)


def watch(
    job: Annotated[str, typer.Option("--job", "-j", help="The job to watch (an inventory job).")],
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    once: Annotated[
        bool, typer.Option("--once", help="Make one evaluation and exit (cron, timers, tests).")
    ] = False,
    advise: Annotated[
        bool, typer.Option("--advise", help="Decide and record, act on nothing (prints what would run).")
    ] = False,
    resume: Annotated[
        bool, typer.Option("--resume", help="Clear the pause after the hourly recovery limit.")
    ] = False,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes", "-y", help="Run the decided playbooks' destructive steps unattended (or say --advise)."
        ),
    ] = False,
    history: Annotated[
        bool, typer.Option("--history", help="List the job's recorded decisions (nothing is read or run).")
    ] = False,
    json_out: JsonOpt = False,
) -> int:
    """Judge a job's signals and run the matching recovery playbook unattended.

    Without --once: evaluate every watch.interval_s (default 30 s), holding the job's watch lock, until
    SIGINT/SIGTERM (exit 130) or the job ends (exit 0); a status line on a terminal, --json one JSON
    document per evaluation (JSON lines). A recovery run left unfinished by a watcher that died is
    resumed through the playbook journal, never started twice.
    One evaluation (--once): read progress, liveness, log tails and host findings; classify (crash,
    hang, fail-slow, nan-loss, host-critical); decide with rails (one playbook at a time, one recovery
    per incident, cool-down, hourly limit); record the decision; with --yes run the playbook
    (destructive steps included), with --advise only say what would run: one of the two is required.
    One watcher per job: a second exits 3 naming the holder's pid. Settings: the inventory's watch:.
    Exit: 0 healthy, 1 a rail held it back, 2 a fault found (recovery run, advised, or stopped),
    3 could not check / recovery failed / another watcher, 64 usage, 78 config or store.
    """
    from robustctl.errors import UsageError
    from robustctl.report.console import emit_json, stderr_console

    if history:
        flags = (("--once", once), ("--advise", advise), ("--resume", resume), ("--yes", yes))
        refused = [f for f, on in flags if on]
        if refused or inventory is not None:
            raise UsageError(f"{(refused or ['--inventory'])[0]} cannot take effect with --history")
        from robustctl.commands.watch import WatchHistoryRequest, run_watch_history
        from robustctl.report.watch import render_watch_history

        hist = run_watch_history(WatchHistoryRequest(job=job, state=state))
        if json_out:
            emit_json(result_json(hist), to_stdout=True, output=None)
        else:
            render_watch_history(hist, stderr_console(wide=True))
        return exit_code_of(hist)
    if advise == yes:
        raise UsageError(
            "watch acts on a job unattended: say --yes to let it run the decided playbooks "
            "(their destructive steps included), or --advise to decide and record only"
            if not yes
            else "--advise and --yes cannot both take effect"
        )
    from robustctl.commands import options
    from robustctl.commands.watch import WatchRequest, run_watch_loop, run_watch_once
    from robustctl.report.watch import LoopView, render_watch

    request = WatchRequest(
        inventory=options.inventory(inventory), job=job, state=state, advise=advise, resume=resume, yes=yes
    )
    console = stderr_console(wide=True)
    if once:
        result = run_watch_once(request)
        render_watch(result, console)
        if json_out:
            emit_json(result_json(result), to_stdout=True, output=None)
        return exit_code_of(result)
    with LoopView(console, job, request.inventory.watch.interval_s, json_lines=json_out) as view:
        ended = run_watch_loop(request, on_result=view.show)
        view.finish(ended)
    return exit_code_of(ended)
