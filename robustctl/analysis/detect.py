"""Recognise saved artefacts by their content and analyse them: ``robustctl analyze FILE...``.

A small registry maps an artefact kind to a sniff function (does this text look like my kind?) and
an analyse function (text -> :class:`~robustctl.analysis.Verdict`). Kinds are tried in priority
order; the first whose sniff function accepts the text wins. Adding a kind (e.g. py-spy dumps) is
one :func:`register_kind` call; names must be unique.

File names are never used to decide the kind. An unreadable path, a directory, a binary file or a
text no kind accepts gives that file an UNKNOWN result with a one-line reason; the other files are
still analysed.
"""

from __future__ import annotations

import gzip
import io
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robustctl.analysis import Finding, Verdict, dcgm, nccl_tests, sort_findings, xid
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION, Status

__all__ = [
    "MAX_BYTES",
    "UNKNOWN_KIND",
    "AnalysisOptions",
    "AnalysisReport",
    "ArtefactAnalysis",
    "ArtefactKind",
    "analyze_paths",
    "analyze_text",
    "detect_kind",
    "kinds",
    "register_kind",
]

MAX_BYTES = 512 * 1024 * 1024
"""Largest artefact read (after decompression); larger files are UNKNOWN."""

UNKNOWN_KIND = "unknown"
"""The ``kind`` of a file no registered kind recognised (or that could not be read)."""


@dataclass(frozen=True)
class AnalysisOptions:
    """Settings that analyse functions may use.

    Attributes:
        expected_busbw_gbps: expected peak nccl-tests busbw, GB/s (flag or config); ``None`` skips
            the bandwidth-floor rule.
    """

    expected_busbw_gbps: float | None = None


@dataclass(frozen=True)
class ArtefactKind:
    """One kind of artefact ``robustctl analyze`` understands.

    Attributes:
        name: short identifier printed in reports, e.g. ``"nccl-tests"``.
        description: one human line.
        sniff: ``text -> bool``; cheap, never raises on any text.
        analyze: ``(text, options) -> Verdict``; never raises on any text the sniff accepted.
        priority: lower runs first (more specific formats first).
    """

    name: str
    description: str
    sniff: Callable[[str], bool]
    analyze: Callable[[str, AnalysisOptions], Verdict]
    priority: int = 100


_REGISTRY: dict[str, ArtefactKind] = {}


def register_kind(kind: ArtefactKind) -> None:
    """Add ``kind`` to the registry.

    Raises:
        ValueError: a kind with this name is already registered, or the name is ``"unknown"``.
    """
    if kind.name == UNKNOWN_KIND or kind.name in _REGISTRY:
        raise ValueError(f"artefact kind {kind.name!r} is already registered")
    _REGISTRY[kind.name] = kind


def kinds() -> tuple[ArtefactKind, ...]:
    """Registered kinds in the order they are tried."""
    return tuple(sorted(_REGISTRY.values(), key=lambda k: (k.priority, k.name)))


@dataclass(frozen=True)
class ArtefactAnalysis:
    """The analysis of one file.

    Attributes:
        path: the path as given.
        kind: the registered kind name, or ``"unknown"``.
        status: the verdict (UNKNOWN when unreadable or unrecognised).
        summary: one human line (the reason, for UNKNOWN).
        findings: every observation, most severe first.
        details: the parsed artefact as plain JSON-ready data (empty for UNKNOWN).
    """

    path: str
    kind: str
    status: Status
    summary: str
    findings: tuple[Finding, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AnalysisReport:
    """The result of ``robustctl analyze`` (the ``--json`` document).

    Attributes:
        status: worst of the artefacts' statuses (SKIPPED when there are none).
        artefacts: one analysis per path, in the order given; no path is dropped.
        expected_busbw_gbps: the expected busbw the nccl-tests verdicts used, if any.
        schema_version: :data:`robustctl.models.SCHEMA_VERSION`. kind: always ``"analyze"``.
    """

    status: Status
    artefacts: tuple[ArtefactAnalysis, ...]
    expected_busbw_gbps: float | None = None
    schema_version: int = SCHEMA_VERSION
    kind: str = "analyze"

    @property
    def exit_code(self) -> ExitCode:
        """Exit code: CRITICAL (2) > UNKNOWN (3) > WARNING (1) > OK (0), as for ``diagnose``."""
        return self.status.exit_code


# --- built-in kinds ----------------------------------------------------------------------------


def _analyze_nccl(text: str, options: AnalysisOptions) -> Verdict:
    return nccl_tests.evaluate(
        nccl_tests.parse_nccl_tests(text), expected_busbw_gbps=options.expected_busbw_gbps
    )


def _analyze_dcgm(text: str, options: AnalysisOptions) -> Verdict:
    return dcgm.evaluate(dcgm.parse_dcgm_diag(text))


_KERNEL_PREFIX_RE = re.compile(
    r"^(?:\[\s*\d+\.\d+\]|[A-Z][a-z]{2}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}\s|\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2})"
)


def _sniff_kernel_log(text: str) -> bool:
    """An ``NVRM: Xid`` line, or mostly dmesg/syslog-prefixed lines (a clean kernel log)."""
    if "NVRM: Xid" in text:
        return True
    lines = [ln for ln in text.splitlines()[:400] if ln.strip()]
    if len(lines) < 3:
        return False
    prefixed = sum(1 for ln in lines if _KERNEL_PREFIX_RE.match(ln.lstrip()))
    kernel_words = sum(1 for ln in lines if "kernel:" in ln or re.match(r"^\s*\[\s*\d+\.\d+\]", ln))
    return prefixed >= 0.8 * len(lines) and kernel_words >= 0.5 * len(lines)


_MAX_EVENTS_IN_DETAILS = 1000


def _analyze_kernel_log(text: str, options: AnalysisOptions) -> Verdict:
    events = xid.parse_kernel_log(text)
    n_lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    details: dict[str, Any] = {
        "lines": n_lines,
        "event_count": len(events),
        "events": [_event_json(e) for e in events[:_MAX_EVENTS_IN_DETAILS]],
        "events_truncated": len(events) > _MAX_EVENTS_IN_DETAILS,
    }
    if not events:
        return Verdict(Status.OK, f"kernel log: no NVIDIA XID events in {n_lines} lines", (), details)
    # One finding per (GPU, XID), in order of first appearance; repeated events are counted.
    groups: dict[tuple[str, int, str], list[xid.XidEvent]] = {}
    for e in events:
        groups.setdefault((e.pci, e.xid, e.info.name), []).append(e)
    findings: list[Finding] = []
    for (pci, code, _name), evs in groups.items():
        last = evs[-1]
        info = last.info
        count = f" x{len(evs)}" if len(evs) > 1 else ""
        who = ""
        procs = sorted({e.process for e in evs if e.process})
        if procs:
            who = f" (process {', '.join(procs)})"
        findings.append(
            Finding(
                info.severity,
                f"XID {code}{count} on {pci}: {info.name} - {info.category.value} -> {info.action}{who}",
                {
                    "xid": code,
                    "pci": pci,
                    "count": len(evs),
                    "name": info.name,
                    "category": info.category.value,
                    "action": info.action,
                    "mnemonic": info.mnemonic,
                    "nvidia_resolution": info.resolution,
                    "pids": sorted({e.pid for e in evs if e.pid is not None}),
                    "processes": procs,
                    "first": evs[0].timestamp,
                    "last": last.timestamp,
                    "message": last.message,
                    "note": info.note,
                },
                device=pci,
            )
        )
    status = Status.worst(f.status for f in findings)
    gpus = sorted({e.pci for e in events})
    worst = sort_findings(findings)[0]
    summary = (
        f"kernel log: {len(events)} XID event{'s' if len(events) != 1 else ''} on "
        f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}; worst: {worst.message}"
    )
    return Verdict(status, summary, sort_findings(findings), details)


def _event_json(e: xid.XidEvent) -> dict[str, Any]:
    return {
        "pci": e.pci,
        "xid": e.xid,
        "pid": e.pid,
        "process": e.process,
        "message": e.message,
        "timestamp": e.timestamp,
        "host": e.host,
        "name": e.info.name,
        "category": e.info.category.value,
        "action": e.info.action,
        "severity": e.info.severity.value,
    }


register_kind(
    ArtefactKind(
        name="dcgm-diag",
        description="`dcgmi diag` text output (DCGM 3.x or 4.x table, or rows of it)",
        sniff=dcgm.looks_like_dcgm_diag,
        analyze=_analyze_dcgm,
        priority=10,
    )
)
register_kind(
    ArtefactKind(
        name="nccl-tests",
        description="nccl-tests output (all_reduce_perf, all_gather_perf, alltoall_perf, ...)",
        sniff=nccl_tests.looks_like_nccl_tests,
        analyze=_analyze_nccl,
        priority=20,
    )
)
register_kind(
    ArtefactKind(
        name="kernel-log",
        description="kernel log (dmesg, syslog, journal) scanned for NVIDIA XID events",
        sniff=_sniff_kernel_log,
        analyze=_analyze_kernel_log,
        priority=30,
    )
)


# --- entry points ------------------------------------------------------------------------------


def detect_kind(text: str) -> ArtefactKind | None:
    """The first registered kind whose sniff function accepts ``text``, else ``None``."""
    for kind in kinds():
        try:
            if kind.sniff(text):
                return kind
        except Exception:  # noqa: S112 - a broken sniffer must not hide the other kinds
            continue
    return None


def analyze_text(
    text: str, *, path: str = "<text>", options: AnalysisOptions | None = None
) -> ArtefactAnalysis:
    """Detect the kind of ``text`` and analyse it. Never raises.

    Returns:
        The analysis; kind ``"unknown"`` and status UNKNOWN when no kind recognises the text.
    """
    opts = options or AnalysisOptions()
    kind = detect_kind(text)
    if kind is None:
        return ArtefactAnalysis(
            path,
            UNKNOWN_KIND,
            Status.UNKNOWN,
            "unrecognised artefact: not nccl-tests output, a kernel log or dcgmi diag output",
        )
    try:
        verdict = kind.analyze(text, opts)
    except Exception as exc:
        return ArtefactAnalysis(path, kind.name, Status.UNKNOWN, f"{kind.name}: analysis failed: {exc!r}")
    return ArtefactAnalysis(
        path=path,
        kind=kind.name,
        status=verdict.status,
        summary=verdict.summary,
        findings=verdict.findings,
        details=dict(verdict.details),
    )


def _read_text(path: Path) -> tuple[str | None, str]:
    """``(text, "")`` or ``(None, one-line reason)``."""
    try:
        if path.is_dir():
            return None, "is a directory"
        with path.open("rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None, "no such file"
    except PermissionError:
        return None, "permission denied"
    except OSError as exc:
        return None, f"cannot read: {exc.strerror or exc}"
    if data[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as gz:
                data = gz.read(MAX_BYTES + 1)
        except (OSError, EOFError) as exc:
            return None, f"corrupt gzip file: {exc}"
    if len(data) > MAX_BYTES:
        return None, f"larger than {MAX_BYTES // (1024 * 1024)} MiB"
    if b"\x00" in data[:65536]:
        return None, "binary file (not text)"
    return data.decode("utf-8", errors="replace"), ""


def analyze_paths(paths: Sequence[Path], *, expected_busbw_gbps: float | None = None) -> AnalysisReport:
    """Analyse every file of ``paths``; never raises for a bad file.

    Args:
        paths: files to analyse, in the order to report them.
        expected_busbw_gbps: expected peak nccl-tests busbw in GB/s (``--expected-busbw`` or
            config); ``None`` skips that rule.

    Returns:
        One :class:`ArtefactAnalysis` per path (UNKNOWN with a reason for an unreadable, binary or
        unrecognised file) and the worst status.
    """
    options = AnalysisOptions(expected_busbw_gbps=expected_busbw_gbps)
    results: list[ArtefactAnalysis] = []
    for p in paths:
        path = Path(p)
        text, reason = _read_text(path)
        if text is None:
            results.append(ArtefactAnalysis(str(p), UNKNOWN_KIND, Status.UNKNOWN, f"{p}: {reason}"))
            continue
        results.append(analyze_text(text, path=str(p), options=options))
    return AnalysisReport(
        status=Status.worst(r.status for r in results),
        artefacts=tuple(results),
        expected_busbw_gbps=expected_busbw_gbps,
    )
