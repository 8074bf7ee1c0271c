"""``robustctl replay-sdc``."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Annotated

import typer

from robustctl.cli.help import examples
from robustctl.cli.options import (
    ConcurrencyOpt,
    InventoryOpt,
    JsonOpt,
    NoRecordOpt,
    OutputOpt,
    QuietProgressOpt,
    StateOpt,
)
from robustctl.commands.base import exit_code_of, result_json

if TYPE_CHECKING:
    from pathlib import Path

    from robustctl.commands.replay_sdc import ReplaySdcRequest

EXAMPLES = examples(
    ("robustctl replay-sdc -i cluster.yaml --job llama70b --plan", "groups of both phases, cost; connects to nothing"),
    ("robustctl replay-sdc -i cluster.yaml --job llama70b", "two rounds: names the machine, or says why not"),
    ("robustctl replay-sdc -i cluster.yaml --job llama70b --command 'python train.py --iters 20'", "your script"),
)  # fmt: skip

MAX_PARALLEL_SIZE = 1_000_000
"""Largest --tp, --pp, --dp and --k accepted. A million ranks along one axis is far beyond any cluster
(the largest jobs run some 10^5 GPUs in all), and a bound keeps a typo from sizing the groups' plan by
an absurd product."""

JobOpt = Annotated[
    str | None, typer.Option("--job", "-j", help="Job name from the inventory's jobs: section.")
]
"""``-j/--job``: the job whose machines and layout are replayed (None: ``--hosts`` and the sizes)."""
HostsOpt = Annotated[
    str | None,
    typer.Option(
        "--hosts", "-H", help="The job's machines as a host range, in rank order (with --pp, --dp)."
    ),
]
"""``-H/--hosts``: the machines in rank order, without a job."""
TpOpt = Annotated[
    int | None,
    typer.Option(
        "--tp", min=1, max=MAX_PARALLEL_SIZE, help="Tensor-parallel size \\[default: ranks per host]."
    ),
]
"""``--tp``: the tensor-parallel size (None: the ranks per host)."""
PpOpt = Annotated[
    int | None, typer.Option("--pp", min=1, max=MAX_PARALLEL_SIZE, help="Pipeline-parallel size.")
]
"""``--pp``: the pipeline-parallel size."""
DpOpt = Annotated[int | None, typer.Option("--dp", min=1, max=MAX_PARALLEL_SIZE, help="Data-parallel size.")]
"""``--dp``: the data-parallel size."""
KOpt = Annotated[
    int | None,
    typer.Option(
        "--k",
        min=1,
        max=MAX_PARALLEL_SIZE,
        help="Pipelines per group (m = k*PP) \\[default: smallest k >= 2 with m <= n].",
    ),
]
"""``--k``: the pipelines per group (None: the smallest k >= 2 that fits)."""
StepsOpt = Annotated[
    int, typer.Option("--steps", min=1, max=10_000, help="Training steps each group replays.")
]
"""``--steps``: the training steps each group replays."""
CommandOpt = Annotated[
    str | None,
    typer.Option(
        "--command",
        help="Replay your own training command instead (it prints the robustctl_replay result line).",
    ),
]
"""``--command``: the operator's own replay command instead of the built-in job."""
DeadlineOpt = Annotated[
    float | None,
    typer.Option(
        "--deadline",
        min=0.1,
        max=86400,
        help="Deadline of each round in seconds \\[default: diagnose.deadline_s, 900].",
    ),
]
"""``--deadline``: the deadline of each round, seconds (None: the ``diagnose:`` settings)."""
PlanOpt = Annotated[
    bool, typer.Option("--plan", help="Print both phases' groups and the cost; connect to nothing.")
]
"""``--plan``: the groups of both phases and the cost, no host contacted."""
AcceptNewHostKeysOpt = Annotated[
    bool,
    typer.Option(
        "--accept-new-host-keys",
        help="Record unknown host keys in known_hosts (like OpenSSH accept-new).",
    ),
]
"""``--accept-new-host-keys``: trust on first use, as OpenSSH's ``accept-new``."""


def replay_sdc(
    inventory: InventoryOpt = None,
    job: JobOpt = None,
    hosts: HostsOpt = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    dp: DpOpt = None,
    k: KOpt = None,
    steps: StepsOpt = 4,
    command: CommandOpt = None,
    deadline: DeadlineOpt = None,
    concurrency: ConcurrencyOpt = None,
    plan: PlanOpt = False,
    accept_new_host_keys: AcceptNewHostKeysOpt = False,
    json_out: JsonOpt = False,
    output: OutputOpt = None,
    quiet: QuietProgressOpt = False,
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
    from robustctl.commands.replay_sdc import replay_sdc_request

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
    if plan:
        return _plan(request, quiet=quiet, json_out=json_out, output=output)
    return _run(request, quiet=quiet, json_out=json_out, output=output)


def _plan(request: ReplaySdcRequest, *, quiet: bool, json_out: bool, output: Path | None) -> int:
    """``--plan``: print both phases' groups and the cost (unless quiet), emit the plan document."""
    from robustctl.commands.replay_sdc import plan_replay_sdc
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.replay_sdc import print_plan

    the_plan = plan_replay_sdc(request)
    if not quiet:
        print_plan(the_plan.plan, stderr_console(wide=True))
    emit_json(result_json(the_plan), to_stdout=json_out, output=output)
    return exit_code_of(the_plan)


def _run(request: ReplaySdcRequest, *, quiet: bool, json_out: bool, output: Path | None) -> int:
    """Replay both rounds (each group on stderr as it ends), render the verdict and what was recorded."""
    from robustctl.commands.replay_sdc import run_replay_sdc
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.record import render_recorded
    from robustctl.report.replay_sdc import render_group_done, render_result

    console = stderr_console(wide=True)
    result = run_replay_sdc(request, on_group=None if quiet else partial(render_group_done, console=console))
    if not quiet:
        render_result(result, console)
    render_recorded(result.recorded, console, quiet=quiet)
    emit_json(result_json(result), to_stdout=json_out, output=output)
    return exit_code_of(result)
