"""``robustctl analyze`` as a library call: :func:`run_analyze` explains saved artefacts offline."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from robustctl.models import to_jsonable

if TYPE_CHECKING:
    from robustctl.analysis.detect import AnalysisReport
    from robustctl.config import ParallelLayout
    from robustctl.exit_codes import ExitCode
    from robustctl.stacks.result import StacksReport

__all__ = ["AnalyzeRequest", "AnalyzeResult", "analyze_request", "run_analyze"]


@dataclass(frozen=True)
class AnalyzeRequest:
    """What to analyse.

    Attributes:
        files: the artefacts (nccl-tests output, kernel logs, dcgmi diag output, py-spy dumps):
            files, directories of files (read one level deep) and ``.tar``/``.tar.gz``/``.tgz``
            archives of files (:mod:`robustctl.analysis.sources`), as given on the command line.
        expected_busbw_gbps: expected peak all-reduce busbw (GB/s); below it is a finding.
        layout: parallel layout of the job py-spy dumps came from; given, the files are read as dumps
            (a file that is not a py-spy dump, e.g. a kernel log, is an UNKNOWN input saying what
            it is, never parsed as a dump).
        ranks_per_host: ranks (GPUs) per machine, for py-spy dumps; must divide the world size.
    """

    files: tuple[str, ...]
    expected_busbw_gbps: float | None = None
    layout: ParallelLayout | None = None
    ranks_per_host: int | None = None


@dataclass(frozen=True)
class AnalyzeResult:
    """The analysis: a :class:`~robustctl.stacks.result.StacksReport` when the files are stack dumps
    (clustered together as one job's ranks, with the Flight Recorder dumps beside them), else an :class:`~robustctl.analysis.detect.AnalysisReport`
    (one explanation per file). Its JSON document is the inner report's (``kind`` ``"stacks"`` or
    ``"analyze"``)."""

    report: StacksReport | AnalysisReport

    @property
    def kind(self) -> str:
        """``"stacks"`` (py-spy dumps) or ``"analyze"``."""
        return self.report.kind

    @property
    def schema_version(self) -> int:
        """The inner report's schema version."""
        return self.report.schema_version

    @property
    def exit_code(self) -> ExitCode:
        """0 nothing wrong, 1 warning, 2 faults found, 3 a file could not be read or recognised."""
        return self.report.exit_code

    def to_json(self) -> dict[str, Any]:
        """The inner report's document."""
        doc: dict[str, Any] = to_jsonable(self.report)
        return doc


def analyze_request(
    files: Sequence[str | os.PathLike[str]],
    *,
    expected_busbw_gbps: float | None = None,
    layout: str | None = None,
    ranks_per_host: int | None = None,
) -> AnalyzeRequest:
    """An :class:`AnalyzeRequest` from command-line values (``layout`` as ``"tp=2,pp=4,dp=4"``).

    Args:
        files: the paths (files, directories, tar archives), in the order given.
        expected_busbw_gbps: the expected peak all-reduce busbw, GB/s; below it is a finding (None: none).
        layout: the job's parallel layout as ``"tp=2,pp=4,dp=4"`` (None: none; dumps are clustered by rank only).
        ranks_per_host: ranks (GPUs) per machine, for py-spy dumps; must divide the world size (None: unknown).

    Returns:
        The request :func:`run_analyze` takes.

    Raises:
        UsageError: a malformed layout.
    """
    from robustctl.inventory.topology import parse_layout

    return AnalyzeRequest(
        files=tuple(os.fspath(f) for f in files),
        expected_busbw_gbps=expected_busbw_gbps,
        layout=parse_layout(layout) if layout is not None else None,
        ranks_per_host=ranks_per_host,
    )


def run_analyze(request: AnalyzeRequest) -> AnalyzeResult:
    """Detect each file's kind from its content and explain it; never raises for a bad file.

    Files, directories (the regular files directly inside, sorted by name) and tar archives
    (``.tar``, ``.tar.gz``, ``.tgz``: each regular member, ``ARCHIVE:MEMBER``) are accepted, mixed
    (:mod:`robustctl.analysis.sources`). When the inputs are one job's stack evidence (py-spy
    dumps, faulthandler dumps, exception texts; or a layout is given), they are clustered together
    in one pass over the inputs: outlier ranks, their machines and the smallest parallel group
    holding them. Flight Recorder dumps beside them are analysed together and the report says
    whether both name the same ranks
    (:func:`robustctl.stacks.analyze.analyze_if_dumps`); Flight Recorder dumps alone, and any
    input another group kind claims, are explained by :func:`robustctl.analysis.detect.analyze_inputs`.

    Memory is bounded whatever the files' sizes (:func:`robustctl.analysis.detect.analyze_file`):
    the kind is detected from the first MiB, nccl-tests output, kernel logs and ``dcgmi diag``
    output are read line by line with capped state. Only regular files are read: a FIFO or device
    is an UNKNOWN entry naming the file, as is a file that cannot be read (e.g. a corrupt gzip);
    the other files are still analysed.

    Args:
        request: the files, directories or archives, and what to judge them against.

    Returns:
        One entry per file analysed (its kind, verdict and evidence), and the clustered dumps when there are any.

    Raises:
        UsageError: the dumps do not fit the layout, or ``ranks_per_host`` does not divide the
            world size.
    """
    from robustctl.analysis.detect import analyze_inputs
    from robustctl.stacks.analyze import analyze_if_dumps

    # stack evidence (py-spy, faulthandler, exception texts), with Flight Recorder dumps beside it,
    # is one job's: clustered together; a layout forces that reading unless another group kind
    # (watchdog logs) claims an input or only Flight Recorder dumps are there: the layout then serves them
    report = analyze_if_dumps(request.files, layout=request.layout, ranks_per_host=request.ranks_per_host)
    if report is not None:
        return AnalyzeResult(report)
    return AnalyzeResult(
        analyze_inputs(
            request.files,
            expected_busbw_gbps=request.expected_busbw_gbps,
            layout=request.layout,
            ranks_per_host=request.ranks_per_host,
        )
    )
