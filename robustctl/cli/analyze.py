"""``robustctl analyze``: explain saved artefacts offline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from robustctl.cli.common import JsonOpt, OutputOpt


def analyze(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Artefacts: nccl-tests output, kernel logs with XID lines, dcgmi diag output.",
            show_default=False,
        ),
    ],
    expected_busbw: Annotated[
        float | None,
        typer.Option(
            "--expected-busbw", min=0.0, help="Expected peak all-reduce busbw in GB/s; below it is a finding."
        ),
    ] = None,
    json_out: JsonOpt = False,
    output: OutputOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No table on stderr.")] = False,
) -> int:
    """Detect each file's kind from its content and explain it: verdict, findings, evidence.

    Exit: 0 nothing wrong, 1 warning, 2 faults found, 3 a file could not be read or recognised.
    """
    from robustctl.analysis.detect import analyze_paths
    from robustctl.report.analysis import render_analysis
    from robustctl.report.console import emit_json, stderr_console

    report = analyze_paths(files, expected_busbw_gbps=expected_busbw)
    if not quiet:
        render_analysis(report, stderr_console())
    emit_json(report, to_stdout=json_out, output=output)
    return int(report.exit_code)
