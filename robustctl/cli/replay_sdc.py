"""``robustctl replay-sdc``."""

from __future__ import annotations

from functools import partial
from typing import Annotated

import typer

from robustctl.cli.common import InventoryOpt, JsonOpt, NoRecordOpt, OutputOpt, StateOpt
from robustctl.cli.help import examples
from robustctl.commands.base import exit_code_of, result_json

EXAMPLES = examples(
    ("robustctl replay-sdc -i cluster.yaml --job llama70b --plan", "groups of both phases, cost; connects to nothing"),
    ("robustctl replay-sdc -i cluster.yaml --job llama70b", "two rounds: names the machine, or says why not"),
    ("robustctl replay-sdc -i cluster.yaml --job llama70b --command 'python train.py --iters 20'", "your script"),
)  # fmt: skip


def replay_sdc(
    inventory: InventoryOpt = None,
    job: Annotated[
        str | None, typer.Option("--job", "-j", help="Job name from the inventory's jobs: section.")
    ] = None,
    hosts: Annotated[
        str | None,
        typer.Option(
            "--hosts", "-H", help="The job's machines as a host range, in rank order (with --pp, --dp)."
        ),
    ] = None,
    tp: Annotated[
        int | None,
        typer.Option("--tp", min=1, max=1_000_000, help="Tensor-parallel size \\[default: ranks per host]."),
    ] = None,
    pp: Annotated[
        int | None, typer.Option("--pp", min=1, max=1_000_000, help="Pipeline-parallel size.")
    ] = None,
    dp: Annotated[int | None, typer.Option("--dp", min=1, max=1_000_000, help="Data-parallel size.")] = None,
    k: Annotated[
        int | None,
        typer.Option(
            "--k",
            min=1,
            max=1_000_000,
            help="Pipelines per group (m = k*PP) \\[default: smallest k >= 2 with m <= n].",
        ),
    ] = None,
    steps: Annotated[
        int, typer.Option("--steps", min=1, max=10_000, help="Training steps each group replays.")
    ] = 4,
    command: Annotated[
        str | None,
        typer.Option(
            "--command",
            help="Replay your own training command instead (it prints the robustctl_replay result line).",
        ),
    ] = None,
    deadline: Annotated[
        float | None,
        typer.Option(
            "--deadline",
            min=0.1,
            max=86400,
            help="Deadline of each round in seconds \\[default: diagnose.deadline_s, 900].",
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", "-c", min=1, help="Hosts contacted at once \\[default: 64]."),
    ] = None,
    plan: Annotated[
        bool, typer.Option("--plan", help="Print both phases' groups and the cost; connect to nothing.")
    ] = False,
    accept_new_host_keys: Annotated[
        bool,
        typer.Option(
            "--accept-new-host-keys",
            help="Record unknown host keys in known_hosts (like OpenSSH accept-new).",
        ),
    ] = False,
    json_out: JsonOpt = False,
    output: OutputOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No table or progress on stderr.")] = False,
    state: StateOpt = None,
    no_record: NoRecordOpt = False,
) -> int:
    """Find the machine that silently corrupts data, in two rounds of group replays (dual-phase replay).

    Every group of m = k*PP machines replays a small deterministic job with the job's TP and PP and
    DP = k: first the horizontal groups (m consecutive machines), then the vertical ones (every n-th
    machine). Healthy groups agree bit for bit; a group whose final-parameter digest differs from
    its phase's majority, or whose loss is NaN/Inf, is faulty, and the faulty groups of both phases
    meet in the faulty machine. Verdicts: isolated (one machine), candidates (several, or an
    intermittent fault), not_reproduced, failed_to_run (a group could not run: never blamed).
    The isolated machine or the candidates are recorded as suspect (unless --no-record).
    Exit: 2 isolated/candidates, 1 not reproduced, 3 failed to run, 64 usage, 78 config.
    """
    from robustctl.commands.replay_sdc import plan_replay_sdc, replay_sdc_request, run_replay_sdc
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.record import render_recorded
    from robustctl.report.replay_sdc import print_plan, render_group_done, render_result

    request = replay_sdc_request(
        inventory=inventory,
        job=job,
        hosts=hosts,
        tp=tp,
        pp=pp,
        dp=dp,
        k=k,
        steps=steps,
        command=command,
        deadline_s=deadline,
        concurrency=concurrency,
        accept_new_host_keys=accept_new_host_keys,
        state=state,
        record=not no_record,
    )
    console = stderr_console(wide=True)
    if plan:
        the_plan = plan_replay_sdc(request)
        if not quiet:
            print_plan(the_plan.plan, console)
        emit_json(result_json(the_plan), to_stdout=json_out, output=output)
        return exit_code_of(the_plan)
    result = run_replay_sdc(request, on_group=None if quiet else partial(render_group_done, console=console))
    if not quiet:
        render_result(result, console)
    render_recorded(result.recorded, console, quiet=quiet)
    emit_json(result_json(result), to_stdout=json_out, output=output)
    return exit_code_of(result)
