"""``robustctl analyze``: explain saved artefacts offline."""

from __future__ import annotations

from typing import Annotated

import typer

from robustctl.cli.common import State
from robustctl.cli.help import examples
from robustctl.cli.options import JsonOpt, OutputOpt, QuietOpt
from robustctl.commands.base import exit_code_of, result_json

EXAMPLES = examples(
    ("robustctl analyze nccl.log kern.log dcgmi-diag.txt", "explain saved artefacts, each by its content"),
    (
        "robustctl analyze dumps/ --layout tp=8,pp=8,dp=16 -G 8",
        "cluster saved py-spy dumps (a dir, files, .tgz)",
    ),
    (
        "robustctl analyze fr/ logs/rank*.log --layout tp=8,pp=4,dp=32 -G 8",
        "one job's Flight Recorder dumps and watchdog logs: who the others wait on",
    ),
)


def analyze(
    files: Annotated[
        list[str],
        typer.Argument(
            help="Artefacts: nccl-tests output, kernel logs with XID lines, dcgmi diag output, py-spy dumps,"
            " faulthandler tracebacks and exception texts (one per rank),"
            " NCCL watchdog logs (one with \\[rankN]: prefixes, or one per rank),"
            " PyTorch Flight Recorder dumps (pickle or JSON, one per rank; give --layout for gloo's);"
            " files, directories of them (one level deep) or .tar/.tar.gz/.tgz archives of them.",
            show_default=False,
        ),
    ],
    expected_busbw: Annotated[
        float | None,
        typer.Option(
            "--expected-busbw",
            min=0.0,
            max=100_000,
            help="Expected peak all-reduce busbw in GB/s; below it is a finding.",
        ),
    ] = None,
    layout: Annotated[
        str | None,
        typer.Option(
            "--layout",
            help="Parallel layout of the job the dumps or logs came from, e.g. 'tp=2,pp=4,dp=4'"
            " (order=tp-cp-ep-dp-pp): groups, world size, silent ranks.",
        ),
    ] = None,
    ranks_per_host: Annotated[
        int | None,
        typer.Option(
            "--ranks-per-host", "-G", min=1, help="Ranks (GPUs) per machine, to name the machine of a rank."
        ),
    ] = None,
    json_out: JsonOpt = False,
    output: OutputOpt = None,
    quiet: QuietOpt = False,
) -> int:
    """Detect each file's kind from its content and explain it: verdict, findings, evidence.

    A directory gives the files directly inside it; a .tar/.tar.gz/.tgz archive its members
    (ARCHIVE:MEMBER). Per-rank stacks (py-spy dumps, faulthandler tracebacks, with exception texts as
    a rank's error) are clustered together as one job's ranks: outlier ranks, their machines and the
    smallest parallel group holding them; Flight Recorder dumps beside them are analysed too, and
    the report says whether both sources name the same ranks.
    Per-rank files given together (Flight Recorder dumps, NCCL watchdog logs) are read as one job's
    ranks, whichever arguments they came from: give one job's files at a time.
    Exit: 0 nothing wrong, 1 warning, 2 faults found, 3 a file could not be read or recognised.
    """
    from robustctl.commands.analyze import analyze_request, run_analyze
    from robustctl.report.console import emit_json, stderr_console

    result = run_analyze(
        analyze_request(
            files, expected_busbw_gbps=expected_busbw, layout=layout, ranks_per_host=ranks_per_host
        )
    )
    if not quiet:
        from robustctl.report.analysis import render_analysis
        from robustctl.report.stacks import render_stacks
        from robustctl.stacks.result import StacksReport

        report = result.report
        if isinstance(report, StacksReport):
            render_stacks(report, stderr_console(), verbose=State.verbose > 0)
        else:
            render_analysis(report, stderr_console(), verbose=State.verbose > 0)
    if json_out or output is not None:
        emit_json(result_json(result), to_stdout=json_out, output=output)
    return exit_code_of(result)
