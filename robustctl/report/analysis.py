"""Rich rendering of a ``robustctl analyze`` :class:`~robustctl.analysis.detect.AnalysisReport`.

One overview table (file, kind, verdict, summary), then one block per artefact with the figures
that matter for its kind: nccl-tests (collective, ranks, hosts, peak and average busbw, wrong
values), kernel logs (one row per GPU and XID: name, category, action, pid/process; one line per NVSwitch
and SXid code) and
``dcgmi diag`` (one row per test: result and GPUs). Text taken from the artefacts is escaped, so a
log line can never inject rich markup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from robustctl.analysis import Finding
from robustctl.analysis.detect import AnalysisReport, ArtefactAnalysis
from robustctl.models import Status
from robustctl.report.console import escape, styled

__all__ = ["render_analysis"]

_PROBLEMS = (Status.CRITICAL, Status.WARNING, Status.UNKNOWN)
_WIDE = 120
"""Consoles narrower than this get one line per XID group / DCGM test instead of a table."""


def _pci(e: Mapping[str, Any], device: str | None) -> str:
    """The PCI column of an XID finding; a redacted or unknown device is said so, never blank."""
    pci = str(e.get("pci", device or "-"))
    if pci in ("redacted", "unknown"):
        raw = e.get("device_text")
        return f"(PCI id {pci}" + (f": {raw})" if raw else ")")
    return pci


def _pids(e: Mapping[str, Any]) -> str:
    pids = ", ".join(str(p) for p in e.get("pids", [])) or "-"
    procs = ", ".join(str(p) for p in e.get("processes", [])) or "-"
    return f"{pids} / {procs}"


def render_analysis(report: AnalysisReport, console: Console, *, verbose: bool = False) -> None:
    """Print the analysis of every artefact to ``console`` (meant to be stderr).

    Args:
        report: from :func:`robustctl.analysis.detect.analyze_paths`.
        console: where to print; colours follow the console (``NO_COLOR``, non-TTY).
        verbose: also list OK/not-applicable findings and every nccl-tests row.
    """
    overview = Table(title="robustctl analyze", title_justify="left")
    overview.add_column("file", overflow="fold")
    overview.add_column("kind", no_wrap=True)
    overview.add_column("verdict", no_wrap=True)
    overview.add_column("summary", overflow="fold")
    for a in report.artefacts:
        overview.add_row(escape(a.path), a.kind, styled(a.status), escape(a.summary))
    console.print(overview)

    for a in report.artefacts:
        if a.kind == "nccl-tests":
            _render_nccl(a, console, verbose=verbose)
        elif a.kind == "kernel-log":
            _render_kernel_log(a, console, verbose=verbose)
        elif a.kind == "dcgm-diag":
            _render_dcgm(a, console, verbose=verbose)
        elif a.kind != "unknown":
            _render_findings(a, console, verbose=verbose)

    n = len(report.artefacts)
    console.print(f"{styled(report.status)}: {n} file{'s' if n != 1 else ''} → exit {int(report.exit_code)}")


def _heading(a: ArtefactAnalysis, console: Console) -> None:
    console.print()
    console.print(f"[bold]{escape(a.path)}[/] ({a.kind}) {styled(a.status)}")


def _render_findings(a: ArtefactAnalysis, console: Console, *, verbose: bool) -> None:
    shown = _shown(a.findings, verbose)
    if not shown:
        return
    _heading(a, console)
    for f in shown:
        dev = " " + escape(f"[{f.device}]") if f.device else ""
        console.print(f"  {styled(f.status)}{dev} {escape(f.message)}")


def _shown(findings: Sequence[Finding], verbose: bool) -> list[Finding]:
    return [f for f in findings if verbose or f.status in _PROBLEMS]


def _gb(v: Any) -> str:
    return f"{v:.2f} GB/s" if isinstance(v, (int, float)) else "-"


def _size(n: Any) -> str:
    if not isinstance(n, int):
        return "-"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def _render_nccl(a: ArtefactAnalysis, console: Console, *, verbose: bool) -> None:
    d: Mapping[str, Any] = a.details
    _heading(a, console)
    t = Table(show_header=False, box=None, padding=(0, 2))
    t.add_column("key", style="dim", no_wrap=True)
    t.add_column("value", overflow="fold")
    src = d.get("collective_source")
    t.add_row("collective", escape(f"{d.get('collective') or 'unknown'}" + (f" (from {src})" if src else "")))
    ranks = d.get("rank_count")
    rsrc = d.get("rank_count_source")
    t.add_row(
        "ranks", escape(f"{ranks if ranks is not None else 'unknown'}" + (f" (from {rsrc})" if rsrc else ""))
    )
    hosts = d.get("hosts") or []
    if hosts:
        t.add_row("hosts", escape(", ".join(str(h) for h in hosts)))
    t.add_row(
        "peak busbw",
        escape(
            f"{_gb(d.get('peak_busbw_gbps'))} at {_size(d.get('peak_size_bytes'))} ({d.get('peak_placement') or '-'})"
        ),
    )
    t.add_row("avg busbw", _gb(d.get("avg_busbw_gbps")) + " (tool's average over all sizes)")
    if d.get("expected_busbw_gbps") is not None:
        t.add_row("expected", _gb(d.get("expected_busbw_gbps")))
    rows = d.get("rows") or []
    wrong = sum(
        1
        for r in rows
        for m in (r.get("out_of_place"), r.get("in_place"))
        if isinstance(m, Mapping) and isinstance(m.get("wrong"), (int, float)) and m["wrong"] > 0
    )
    oob = d.get("out_of_bounds")
    oob_ok = d.get("out_of_bounds_ok")
    oob_text = (
        "-" if oob is None else f"{oob} {'OK' if oob_ok else 'FAILED' if oob_ok is False else ''}".strip()
    )
    t.add_row(
        "wrong values",
        escape(
            f"{wrong} row half(s) with {d.get('error_column') or 'wrong/error'} > 0; out of bounds: {oob_text}"
        ),
    )
    t.add_row("rows", f"{len(rows)}" + (" (truncated table)" if d.get("truncated") else ""))
    console.print(t)
    if verbose and rows:
        rt = Table(show_lines=False)
        for col in ("size", "type", "redop", "oop busbw", "oop wrong", "ip busbw", "ip wrong"):
            rt.add_column(col, justify="right")
        for r in rows:
            oop = r.get("out_of_place") or {}
            ip = r.get("in_place") or {}
            rt.add_row(
                _size(r.get("size_bytes")),
                escape(str(r.get("dtype"))),
                escape(str(r.get("redop") or "-")),
                f"{oop.get('busbw_gbps', 0):.2f}",
                _wrong(oop.get("wrong")),
                f"{ip['busbw_gbps']:.2f}" if ip else "-",
                _wrong(ip.get("wrong")) if ip else "-",
            )
        console.print(rt)
    for f in _shown(a.findings, verbose):
        console.print(f"  {styled(f.status)} {escape(f.message)}")


def _wrong(v: Any) -> str:
    return "N/A" if v is None else f"{v:g}"


def _render_kernel_log(a: ArtefactAnalysis, console: Console, *, verbose: bool) -> None:
    _heading(a, console)
    if not a.findings:
        console.print(f"  {escape(a.summary)}")
        return
    switch_findings = [f for f in a.findings if "sxid" in f.evidence]
    gpu_findings = [f for f in a.findings if "sxid" not in f.evidence]
    if gpu_findings:
        _render_xid_findings(gpu_findings, console, verbose=verbose)
    for f in switch_findings:  # NVSwitch SXid findings: one line each, the finding's own message
        last = f.evidence.get("last")
        console.print(
            f"  {styled(f.status)} {escape(f.message)}" + (f"; last {escape(str(last))}" if last else "")
        )
        if verbose and f.evidence.get("note"):
            console.print(f"    [dim]{escape(str(f.evidence['note']))}[/]")


def _render_xid_findings(findings: Sequence[Finding], console: Console, *, verbose: bool) -> None:
    if console.width < _WIDE:
        for f in findings:
            e = f.evidence
            count = f" x{e.get('count')}" if e.get("count", 1) != 1 else ""
            console.print(
                f"  {styled(f.status)} {escape(_pci(e, f.device))} XID {escape(e.get('xid', '-'))}{count}: "
                f"{escape(str(e.get('name', '')))} - {escape(e.get('category', ''))} -> {escape(e.get('action', ''))}; "
                f"pid/process {escape(_pids(e))}; last {escape(str(e.get('last') or '-'))}"
            )
    else:
        t = Table()
        for col in ("verdict", "PCI", "XID", "count", "category", "action"):
            t.add_column(col, no_wrap=True)
        for col in ("name", "pid / process", "last seen"):
            t.add_column(col, overflow="fold")
        for f in findings:
            e = f.evidence
            t.add_row(
                styled(f.status),
                escape(_pci(e, f.device)),
                escape(e.get("xid", "-")),
                escape(e.get("count", 1)),
                escape(e.get("category", "")),
                escape(e.get("action", "")),
                escape(str(e.get("name", ""))),
                escape(_pids(e)),
                escape(str(e.get("last") or "-")),
            )
        console.print(t)
    if verbose:
        for f in findings:
            note = f.evidence.get("note")
            msg = f.evidence.get("message")
            console.print(
                f"  XID {escape(f.evidence.get('xid'))} on {escape(str(f.device))}: {escape(str(msg))}"
            )
            if note:
                console.print(f"    [dim]{escape(str(note))}[/]")


def _render_dcgm(a: ArtefactAnalysis, console: Console, *, verbose: bool) -> None:
    _heading(a, console)
    tests = a.details.get("tests") or []
    rows = [_dcgm_row(test, verbose) for test in tests]
    if rows and console.width < _WIDE:
        for section, name, result, gpus, message in rows:
            line = f"  {escape(section)} / {escape(name)}: {_result_markup(result)} ({escape(gpus)})"
            console.print(line + (f" - {escape(message)}" if message else ""))
    elif rows:
        t = Table()
        for col in ("section", "test", "result"):
            t.add_column(col, no_wrap=True)
        for col in ("GPUs", "message"):
            t.add_column(col, overflow="fold")
        for section, name, result, gpus, message in rows:
            t.add_row(escape(section), escape(name), _result_markup(result), escape(gpus), escape(message))
        console.print(t)
    for f in _shown(a.findings, verbose):
        dev = " " + escape(f"[{f.device}]") if f.device else ""
        console.print(f"  {styled(f.status)}{dev} {escape(f.message.split(' - ')[0])}")


def _dcgm_row(test: Mapping[str, Any], verbose: bool) -> tuple[str, str, str, str, str]:
    """``(section, test, result, GPUs, message)`` of one parsed DCGM test."""
    by_result: dict[str, list[str]] = {}
    for g in test.get("gpu_results") or []:
        by_result.setdefault(str(g.get("result")), []).append(str(g.get("gpu")))
    gpus = "; ".join(f"{res}: {', '.join(ids)}" for res, ids in by_result.items())
    if not gpus and test.get("all_gpus"):
        gpus = f"{test['all_gpus']}: all"
    if not gpus and test.get("gpus_named"):
        gpus = "named: " + ", ".join(str(g) for g in test["gpus_named"])
    messages = list(test.get("errors") or []) + list(test.get("warnings") or [])
    if verbose:
        messages += list(test.get("info") or [])
    return (
        str(test.get("section") or "-"),
        str(test.get("name")),
        str(test.get("result")),
        gpus or "-",
        " | ".join(messages),
    )


_RESULT_STYLE = {"pass": "green", "fail": "bold red", "error": "bold red", "warn": "yellow", "skip": "dim"}


def _result_markup(result: str) -> str:
    style = _RESULT_STYLE.get(result, "")
    return f"[{style}]{result.upper()}[/]" if style else escape(result.upper())
