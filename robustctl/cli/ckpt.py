"""``robustctl ckpt status``: a job's checkpoint iterations, their completeness, and where each rank's shards live.

Parse → :mod:`robustctl.commands.ckpt` → render (:mod:`robustctl.report.ckpt`) → exit code.
"""

from __future__ import annotations

from typing import Annotated

import typer

from robustctl.cli.help import examples
from robustctl.cli.options import InventoryJobOpt, InventoryOpt, JsonOpt, OutputOpt, QuietOpt, StateOpt

app = typer.Typer(
    help="Checkpoints: which iterations are complete on the job's hosts, and which one a restart uses.",
    no_args_is_help=True,
    epilog=examples(
        ("robustctl ckpt status -i cluster.yaml --job llama70b", "iterations, completeness, tracker"),
        ("robustctl ckpt status -i cluster.yaml -j llama70b --layout", "also the backup placement rule"),
    ),
)


@app.command(
    "status",
    epilog=examples(
        ("robustctl ckpt status -i cluster.yaml --job llama70b", "iterations, completeness, tracker"),
        (
            "robustctl ckpt status -i cluster.yaml -j llama70b --layout --json",
            "with the backup check, as JSON",
        ),
    ),
)
def status(
    job: InventoryJobOpt,
    inventory: InventoryOpt = None,
    layout: Annotated[
        bool,
        typer.Option(
            "--layout",
            help="Also check that each rank's backup peer shares none of its TP, PP or DP groups.",
        ),
    ] = False,
    json_out: JsonOpt = False,
    output: OutputOpt = None,
    quiet: QuietOpt = False,
    state: StateOpt = None,
) -> int:
    """Read the job's checkpoint directory on its current hosts and judge every iteration.

    An iteration is complete only when every rank's shard is present and readable on a host still
    in the job; the tracker file (latest_checkpointed_iteration.txt) is shown, never trusted alone.
    Exit: 0 the newest complete iteration is the tracker's, 1 they differ or a backup breaks the
    layout rule (--layout), 2 no complete iteration, 3 a host could not be read, 64 unknown job,
    78 a job without a ckpt: section.
    """
    from robustctl.commands.base import exit_code_of, result_json
    from robustctl.commands.ckpt import ckpt_status_request, run_ckpt_status
    from robustctl.report.ckpt import render_ckpt_status
    from robustctl.report.console import emit_json, stderr_console

    request = ckpt_status_request(job=job, inventory=inventory, layout=layout, state=state)
    result = run_ckpt_status(request)
    if not quiet:
        render_ckpt_status(result, stderr_console())
    emit_json(result_json(result), to_stdout=json_out, output=output)
    return exit_code_of(result)
