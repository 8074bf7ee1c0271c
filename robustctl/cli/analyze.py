"""``robustctl analyze``: explain saved artefacts offline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from robustctl.cli.common import JsonOpt, OutputOpt, State


def analyze(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Artefacts: nccl-tests output, kernel logs with XID lines, dcgmi diag output, py-spy dumps.",
            show_default=False,
        ),
    ],
    expected_busbw: Annotated[
        float | None,
        typer.Option(
            "--expected-busbw", min=0.0, help="Expected peak all-reduce busbw in GB/s; below it is a finding."
        ),
    ] = None,
    layout: Annotated[
        str | None,
        typer.Option(
            "--layout",
            help="Parallel layout of the job the py-spy dumps came from, e.g. 'tp=2,pp=4,dp=4' (order=tp-cp-ep-dp-pp).",
        ),
    ] = None,
    ranks_per_host: Annotated[
        int | None,
        typer.Option("--ranks-per-host", "-G", min=1, help="Ranks (GPUs) per machine, for py-spy dumps."),
    ] = None,
    json_out: JsonOpt = False,
    output: OutputOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No table on stderr.")] = False,
) -> int:
    """Detect each file's kind from its content and explain it: verdict, findings, evidence.

    When every file is a py-spy dump (or --layout is given), the dumps are clustered together as one
    job's ranks: outlier ranks, their machines and the smallest parallel group holding them.
    Exit: 0 nothing wrong, 1 warning, 2 faults found, 3 a file could not be read or recognised.
    """
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.stacks.analyze import all_pyspy

    console = stderr_console()
    if layout is not None or all_pyspy(files):
        from robustctl.inventory.topology import parse_layout
        from robustctl.report.stacks import render_stacks
        from robustctl.stacks.analyze import analyze_dumps

        lay = parse_layout(layout) if layout is not None else None
        report = analyze_dumps(files, layout=lay, ranks_per_host=ranks_per_host)
        if not quiet:
            render_stacks(report, console, verbose=State.verbose > 0)
        emit_json(report, to_stdout=json_out, output=output)
        return int(report.exit_code)

    from robustctl.analysis.detect import analyze_paths
    from robustctl.report.analysis import render_analysis

    areport = analyze_paths(files, expected_busbw_gbps=expected_busbw)
    if not quiet:
        render_analysis(areport, console, verbose=State.verbose > 0)
    emit_json(areport, to_stdout=json_out, output=output)
    return int(areport.exit_code)
