"""Rich rendering of ``robustctl analyze`` results (plain text console, no colours)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from robustctl.analysis import Finding
from robustctl.analysis.detect import AnalysisReport, ArtefactAnalysis, analyze_paths
from robustctl.models import Status
from robustctl.report.analysis import render_analysis

DATA = Path(__file__).resolve().parents[1] / "data"


def render(report: AnalysisReport, *, verbose: bool = False) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=220, no_color=True, highlight=False)
    render_analysis(report, console, verbose=verbose)
    return buf.getvalue()


def test_nccl_block() -> None:
    out = render(analyze_paths([DATA / "nccl-tests/bitdeer-h100-8gpu-1node-allreduce.txt"]))
    assert "nccl-tests" in out and "OK" in out
    assert "470.73 GB/s at 2 GiB" in out
    assert "448.21 GB/s" in out
    assert "8 (from devices)" in out
    assert "out of bounds: 0 OK" in out
    assert out.rstrip().endswith("OK: 1 file → exit 0")


def test_nccl_verbose_lists_rows() -> None:
    out = render(
        analyze_paths([DATA / "nccl-tests/issue-nccltests287-rtx5090-1gpu-alltoall-avg0.txt"]), verbose=True
    )
    assert "32 MiB" in out and "N/A" in out
    assert "NOT_APPLICABLE" in out and "one rank" in out


def test_xid_block_lists_every_gpu_and_code() -> None:
    out = render(analyze_paths([DATA / "kernel-log/xid-lines.txt"]))
    for pci in ("0000:10:1c", "0000:90:1c", "0000:07:00", "0000:01:00"):
        assert pci in out
    assert "Double bit ECC error" in out and "hardware" in out and "evict" in out
    assert "application" in out and "check user code" in out
    assert "1850 / -" in out
    assert "exit 2" in out


def test_dcgm_block_names_gpus() -> None:
    out = render(analyze_paths([DATA / "dcgm/crafted-dcgm4-gpu2-memory-fail-skip.txt"]))
    assert "pass: 0, 1, 3; fail: 2" in out
    assert "SKIP" in out and "skip: 0, 1, 2, 3" in out
    assert "[GPU 2] memory: failed on GPU 2" in out


def test_unknown_files_and_markup_is_escaped(tmp_path: Path) -> None:
    bad = ArtefactAnalysis("[bold]evil[/bold].txt", "unknown", Status.UNKNOWN, "x: [red]not[/red] markup")
    weird = ArtefactAnalysis(
        "k.log",
        "some-future-kind",
        Status.WARNING,
        "summary",
        (Finding(Status.WARNING, "message with [link=x]brackets[/link]", {}, "[dev]"),),
    )
    out = render(AnalysisReport(Status.UNKNOWN, (bad, weird)))
    assert "[bold]evil[/bold].txt" in out
    assert "[red]not[/red] markup" in out
    assert "[[dev]] message with [link=x]brackets[/link]" in out
    assert "exit 3" in out


def test_narrow_console_prints_lines_not_tables() -> None:
    report = analyze_paths(
        [DATA / "kernel-log/xid-lines.txt", DATA / "dcgm/crafted-dcgm4-gpu2-memory-fail-skip.txt"]
    )
    buf = io.StringIO()
    render_analysis(report, Console(file=buf, width=80, no_color=True, highlight=False))
    out = buf.getvalue()
    assert "CRITICAL 0000:07:00 XID 48: Double bit ECC error (DBE) - hardware -> evict" in " ".join(
        out.split()
    )
    assert "Hardware / memory: FAIL (pass: 0, 1, 3; fail: 2)" in " ".join(out.split())
