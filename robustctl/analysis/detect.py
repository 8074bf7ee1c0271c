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
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from robustctl.analysis import (
    Finding,
    Verdict,
    dcgm,
    flightrec,
    nccl_tests,
    sort_findings,
    sxid,
    watchdog,
    xid,
)
from robustctl.exit_codes import ExitCode
from robustctl.inputfile import NotReadable, open_regular
from robustctl.models import SCHEMA_VERSION, Status

if TYPE_CHECKING:
    from robustctl.config import ParallelLayout

__all__ = [
    "HEAD_BYTES",
    "MAX_BYTES",
    "MAX_LINE_BYTES",
    "UNKNOWN_KIND",
    "AnalysisOptions",
    "AnalysisReport",
    "ArtefactAnalysis",
    "ArtefactKind",
    "GroupKind",
    "GroupMember",
    "analyze_file",
    "analyze_inputs",
    "analyze_paths",
    "analyze_text",
    "detect_kind",
    "group_kinds",
    "kinds",
    "register_group_kind",
    "register_kind",
]

MAX_BYTES = 64 * 1024 * 1024
"""Largest artefact read whole (after decompression), for kinds that do not stream (py-spy dumps:
the same bound as :data:`robustctl.stacks.parse.MAX_DUMP_BYTES`); larger ones are UNKNOWN. Kinds
with ``analyze_lines`` (nccl-tests, kernel logs, dcgmi diag) have no size bound: they are read line
by line in flat memory."""

HEAD_BYTES = 1024 * 1024
"""Bytes (after decompression) from the start of a file its kind is detected from. The sniffers look
at the first 400 (kernel log), 5,000 (dcgmi) or 20,000 (nccl-tests) lines; 1 MiB holds them for
ordinary line lengths while bounding what detection reads."""

MAX_LINE_BYTES = 64 * 1024
"""Longest line passed to a streaming parser; the rest of a longer line is skipped (no line of the
supported formats comes near it, and an endless line must not be held in memory)."""

MAX_GROUP_MEMBERS = 100_000
"""Files one group kind takes in one analysis: a dump or log per rank of a job of up to 100K ranks
(the largest jobs today run tens of thousands of GPUs, one rank each). Files past it are UNKNOWN."""

MAX_GROUP_BYTES = 1024 * 1024 * 1024
"""Bytes (after decompression) one group kind holds in memory for one analysis: 1 GiB, e.g. 16K
Flight Recorder dumps of 64 KiB each. A member that would pass it is UNKNOWN, not silently dropped."""

UNKNOWN_KIND = "unknown"
"""The ``kind`` of a file no registered kind recognised (or that could not be read)."""


@dataclass(frozen=True)
class AnalysisOptions:
    """Settings that analyse functions may use.

    Attributes:
        expected_busbw_gbps: expected peak nccl-tests busbw, GB/s (flag or config); ``None`` skips
            the bandwidth-floor rule.
        layout: the job's parallel layout (``--layout``), for kinds whose files are a job's ranks
            (world size, the process groups a rank belongs to); ``None``: unknown.
        ranks_per_host: ranks (GPUs) per machine (``-G``); ``None``: unknown.
    """

    expected_busbw_gbps: float | None = None
    layout: ParallelLayout | None = None
    ranks_per_host: int | None = None


@dataclass(frozen=True)
class ArtefactKind:
    """One kind of artefact ``robustctl analyze`` understands.

    Attributes:
        name: short identifier printed in reports, e.g. ``"nccl-tests"``.
        description: one human line.
        sniff: ``text -> bool``; cheap, never raises on any text.
        analyze: ``(text, options) -> Verdict``; never raises on any text the sniff accepted.
        priority: lower runs first (more specific formats first).
        analyze_lines: ``(lines, options) -> Verdict`` for kinds whose parser streams: called with
            the file's lines as they are read (each without its line end, at most
            :data:`MAX_LINE_BYTES`) and keeping bounded state, so a file of any size is analysed
            in flat memory. ``None``: the file is read whole (at most :data:`MAX_BYTES`) and
            passed to ``analyze``.
    """

    name: str
    description: str
    sniff: Callable[[str], bool]
    analyze: Callable[[str, AnalysisOptions], Verdict]
    priority: int = 100
    analyze_lines: Callable[[Iterable[str], AnalysisOptions], Verdict] | None = None


_REGISTRY: dict[str, ArtefactKind] = {}


def register_kind(kind: ArtefactKind) -> None:
    """Add ``kind`` to the registry.

    Args:
        kind: the kind, registered under its name.

    Raises:
        ValueError: a kind with this name is already registered, or the name is ``"unknown"``.
    """
    if kind.name == UNKNOWN_KIND or kind.name in _REGISTRY or kind.name in _GROUP_REGISTRY:
        raise ValueError(f"artefact kind {kind.name!r} is already registered")
    _REGISTRY[kind.name] = kind


def kinds() -> tuple[ArtefactKind, ...]:
    """Registered kinds in the order they are tried."""
    return tuple(sorted(_REGISTRY.values(), key=lambda k: (k.priority, k.name)))


@dataclass(frozen=True)
class GroupMember:
    """One file of a group kind, read whole.

    Attributes:
        name: what reports call it (the path as given, ``DIR/NAME``, ``ARCHIVE:MEMBER``).
        base: the file's own name (no directory, no archive), where a rank may be read from.
        data: the content, decompressed when it was gzip, at most :data:`MAX_BYTES`.
    """

    name: str
    base: str
    data: bytes


@dataclass(frozen=True)
class GroupKind:
    """A kind whose files are analysed together: one verdict for a set of per-rank files.

    Flight Recorder dumps and per-rank NCCL watchdog logs say little one by one; which rank the
    others wait on shows only across them. Every input file (on the command line, in a directory
    or in an archive) that a group kind claims is read whole and set aside; after the inputs are
    read, each group kind with members gets one :class:`ArtefactAnalysis` over all of them, in the
    report at the place of its first member. A file no group kind claims is analysed alone as
    before. Binary files are offered to the claims too (pickle dumps are binary).

    Attributes:
        name: short identifier printed in reports, e.g. ``"flight-recorder"``.
        description: one human line.
        claim: ``(base name, head bytes) -> bool``: the file is one of this kind's; the head is
            the first :data:`HEAD_BYTES` (decompressed). Cheap; never raises on any bytes.
        analyze: ``(members, options) -> Verdict`` over every claimed file, in input order; never
            raises on members the claim accepted.
        priority: lower claims first.
    """

    name: str
    description: str
    claim: Callable[[str, bytes], bool]
    analyze: Callable[[Sequence[GroupMember], AnalysisOptions], Verdict]
    priority: int = 100


_GROUP_REGISTRY: dict[str, GroupKind] = {}


def register_group_kind(kind: GroupKind) -> None:
    """Add ``kind`` to the group registry.

    Args:
        kind: the kind, registered under its name.

    Raises:
        ValueError: a kind (single-file or group) with this name is already registered, or the
            name is ``"unknown"``.
    """
    if kind.name == UNKNOWN_KIND or kind.name in _GROUP_REGISTRY or kind.name in _REGISTRY:
        raise ValueError(f"artefact kind {kind.name!r} is already registered")
    _GROUP_REGISTRY[kind.name] = kind


def group_kinds() -> tuple[GroupKind, ...]:
    """Registered group kinds in the order their claims are tried."""
    return tuple(sorted(_GROUP_REGISTRY.values(), key=lambda k: (k.priority, k.name)))


def _claimant(base: str, head: bytes) -> GroupKind | None:
    """The first group kind that claims a file, else ``None`` (a claim that raises claims nothing)."""
    for kind in group_kinds():
        try:
            if kind.claim(base, head):
                return kind
        except Exception:  # noqa: S112 - a broken claim must not hide the other kinds
            continue
    return None


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


def _nccl_lines(lines: Iterable[str], options: AnalysisOptions) -> Verdict:
    return nccl_tests.evaluate(
        nccl_tests.parse_nccl_tests(lines), expected_busbw_gbps=options.expected_busbw_gbps
    )


def _analyze_nccl(text: str, options: AnalysisOptions) -> Verdict:
    return _nccl_lines(text.splitlines(), options)


def _dcgm_lines(lines: Iterable[str], options: AnalysisOptions) -> Verdict:
    return dcgm.evaluate(dcgm.parse_dcgm_diag(lines))


def _analyze_dcgm(text: str, options: AnalysisOptions) -> Verdict:
    return _dcgm_lines(text.splitlines(), options)


_KERNEL_PREFIX_RE = re.compile(
    r"^(?:\[\s*\d+\.\d+\]|[A-Z][a-z]{2}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}\s|\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2})"
)


_SXID_SNIFF_RE = re.compile(r"nvidia-nvswitch[^\s:()]{0,16}\s*:\s*SXid\b")


def _sniff_kernel_log(text: str) -> bool:
    """An ``NVRM: Xid`` or ``nvidia-nvswitchN: SXid`` line, or mostly dmesg/syslog-prefixed lines
    (a clean kernel log)."""
    if "NVRM: Xid" in text:
        return True
    if "SXid" in text and _SXID_SNIFF_RE.search(text) is not None:
        return True
    lines = [ln for ln in text.splitlines()[:400] if ln.strip()]
    if len(lines) < 3:
        return False
    prefixed = sum(1 for ln in lines if _KERNEL_PREFIX_RE.match(ln.lstrip()))
    kernel_words = sum(1 for ln in lines if "kernel:" in ln or re.match(r"^\s*\[\s*\d+\.\d+\]", ln))
    return prefixed >= 0.8 * len(lines) and kernel_words >= 0.5 * len(lines)


_MAX_EVENTS_IN_DETAILS = 1000
_MAX_XID_GROUPS = 1000  # distinct (GPU, XID) findings kept; a real log has a handful
_MAX_PER_GROUP = 20  # distinct pids / process names kept per finding
_MAX_GPUS = 100_000

_MAX_SXID_GROUPS = 1000
"""Distinct (SXid code, NVSwitch) findings kept, as for XIDs: a host has at most 12 NVSwitches and
a real log a handful of codes; events past it are counted in ``sxid.events_not_grouped``."""

_MAX_SXID_LINKS = 64
"""Distinct links listed per SXid finding: an NVSwitch has at most 64 NVLink ports (third
generation); a flood on every port of a switch is still listed whole."""

_MAX_SWITCHES = 100_000
"""Distinct NVSwitches counted for the summary (as :data:`_MAX_GPUS` for GPUs)."""


@dataclass
class _XidGroup:
    """The events of one (GPU, XID) seen so far: bounded whatever the log's size."""

    first: xid.XidEvent
    last: xid.XidEvent
    count: int = 0
    pids: set[int] = field(default_factory=set)
    procs: set[str] = field(default_factory=set)

    def add(self, e: xid.XidEvent) -> None:
        self.count += 1
        self.last = e
        if e.pid is not None and len(self.pids) < _MAX_PER_GROUP:
            self.pids.add(e.pid)
        if e.process and len(self.procs) < _MAX_PER_GROUP:
            self.procs.add(e.process)


@dataclass
class _XidTally:
    """The XID events of a kernel log seen so far: bounded whatever the log's size."""

    event_count: int = 0
    shown: list[dict[str, Any]] = field(default_factory=list)
    groups: dict[tuple[str, int, str], _XidGroup] = field(default_factory=dict)
    groups_dropped: int = 0
    gpus: set[str] = field(default_factory=set)
    no_device: int = 0  # events whose PCI id was redacted or unrecognisable

    def add(self, e: xid.XidEvent) -> None:
        self.event_count += 1
        if len(self.shown) < _MAX_EVENTS_IN_DETAILS:
            self.shown.append(_event_json(e))
        if e.pci in (xid.DEVICE_REDACTED, xid.DEVICE_UNKNOWN):
            self.no_device += 1
        elif len(self.gpus) < _MAX_GPUS:
            self.gpus.add(e.pci)
        key = (e.pci, e.xid, e.info.name)
        group = self.groups.get(key)
        if group is None:
            if len(self.groups) >= _MAX_XID_GROUPS:
                self.groups_dropped += 1
                return
            group = self.groups[key] = _XidGroup(e, e)
        group.add(e)

    def details(self, n_lines: int) -> dict[str, Any]:
        details: dict[str, Any] = {
            "lines": n_lines,
            "event_count": self.event_count,
            "events": self.shown,
            "events_truncated": self.event_count > _MAX_EVENTS_IN_DETAILS,
        }
        if self.groups_dropped:
            details["events_not_grouped"] = self.groups_dropped
        if self.no_device:
            details["events_without_device"] = self.no_device
        return details

    def findings(self) -> list[Finding]:
        """One finding per (GPU, XID), in order of first appearance; repeated events are counted."""
        findings: list[Finding] = []
        for (pci, code, _name), g in self.groups.items():
            last = g.last
            info = last.info
            count = f" x{g.count}" if g.count > 1 else ""
            procs = sorted(g.procs)
            who = f" (process {', '.join(procs)})" if procs else ""
            findings.append(
                Finding(
                    info.severity,
                    f"XID {code}{count} on {_device_label(pci)}: {info.name} - {info.category.value} -> "
                    f"{info.action}{who}",
                    {
                        "xid": code,
                        "pci": pci,
                        "count": g.count,
                        "name": info.name,
                        "category": info.category.value,
                        "action": info.action,
                        "mnemonic": info.mnemonic,
                        "nvidia_resolution": info.resolution,
                        "pids": sorted(g.pids),
                        "processes": procs,
                        "first": g.first.timestamp,
                        "last": last.timestamp,
                        "message": last.message,
                        "note": info.note,
                        "device_text": last.device_text,
                        "redacted": sorted({f for ev in (g.first, last) for f in ev.redacted}),
                    },
                    device=pci,
                )
            )
        return findings

    def where(self) -> str:
        gpus, no_device = self.gpus, self.no_device
        where = f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"
        if no_device:
            events = f"{no_device} event{'s' if no_device != 1 else ''}"
            where = (
                f"a GPU whose PCI id is redacted or unknown ({events})"
                if not gpus
                else f"{where} (+ {events} with the PCI id redacted or unknown)"
            )
        return f"{self.event_count} XID event{'s' if self.event_count != 1 else ''} on {where}"


@dataclass
class _SXidGroup:
    """The SXid events of one (code, NVSwitch) seen so far: a flood is one finding with a count."""

    first: sxid.SXidEvent
    last: sxid.SXidEvent
    count: int = 0
    severity: Status = Status.OK
    action: str = ""
    fatal_lines: int = 0
    links: set[int] = field(default_factory=set)

    def add(self, e: sxid.SXidEvent) -> None:
        self.count += 1
        self.last = e
        if e.fatal:
            self.fatal_lines += 1
        if e.severity.severity > self.severity.severity or not self.action:
            self.severity, self.action = e.severity, e.action
        if e.link is not None and len(self.links) < _MAX_SXID_LINKS:
            self.links.add(e.link)


@dataclass
class _SXidTally:
    """The NVSwitch SXid events of a kernel log seen so far: bounded whatever the log's size."""

    event_count: int = 0
    continuation_lines: int = 0
    shown: list[dict[str, Any]] = field(default_factory=list)
    groups: dict[tuple[int, str, str], _SXidGroup] = field(default_factory=dict)
    groups_dropped: int = 0
    switches: set[tuple[str, str]] = field(default_factory=set)

    def add(self, e: sxid.SXidEvent) -> None:
        self.event_count += 1
        self.continuation_lines += e.continuation_count
        if len(self.shown) < _MAX_EVENTS_IN_DETAILS:
            self.shown.append(_sxid_json(e))
        if len(self.switches) < _MAX_SWITCHES:
            self.switches.add((e.switch, e.pci))
        key = (e.code, e.switch, e.pci)
        group = self.groups.get(key)
        if group is None:
            if len(self.groups) >= _MAX_SXID_GROUPS:
                self.groups_dropped += 1
                return
            group = self.groups[key] = _SXidGroup(e, e)
        group.add(e)

    def details(self) -> dict[str, Any]:
        details: dict[str, Any] = {
            "event_count": self.event_count,
            "continuation_lines": self.continuation_lines,
            "switches": len(self.switches),
            "events": self.shown,
            "events_truncated": self.event_count > _MAX_EVENTS_IN_DETAILS,
        }
        if self.groups_dropped:
            details["events_not_grouped"] = self.groups_dropped
        return details

    def findings(self) -> list[Finding]:
        """One finding per (code, NVSwitch), in order of first appearance; a flood is counted."""
        findings: list[Finding] = []
        for (code, _switch, _pci), g in self.groups.items():
            last, info = g.last, g.last.info
            count = f" x{g.count}" if g.count > 1 else ""
            links = sorted(g.links)
            on_links = f", link{'s' if len(links) > 1 else ''} {', '.join(map(str, links))}" if links else ""
            word = "fatal" if g.fatal_lines else info.nvidia_class
            name = info.name
            if info.nvidia_class == sxid.CLASS_UNKNOWN:  # the line's own words say what it is
                word = "fatal" if g.fatal_lines else "non-fatal" if last.fatal is False else word
                name = f"{last.message} (not in robustctl's catalogue)" if last.message else name
            findings.append(
                Finding(
                    g.severity,
                    f"SXid {code}{count} on NVSwitch {sxid.switch_label(last)}{on_links}: {name} "
                    f"- {word} -> {g.action}",
                    {
                        "sxid": code,
                        "switch": last.switch,
                        "pci": last.pci,
                        "count": g.count,
                        "fatal_lines": g.fatal_lines,
                        "links": links,
                        "name": info.name,
                        "nvidia_class": info.nvidia_class,
                        "action": g.action,
                        "first": g.first.timestamp,
                        "last": last.timestamp,
                        "message": last.message,
                        "continuation": list(last.continuation),
                        "note": info.note,
                        "device_text": last.device_text,
                        "redacted": sorted({f for ev in (g.first, last) for f in ev.redacted}),
                    },
                    device=last.pci
                    if last.pci not in (xid.DEVICE_REDACTED, xid.DEVICE_UNKNOWN)
                    else last.switch,
                )
            )
        return findings

    def where(self) -> str:
        n = len(self.switches)
        return (
            f"{self.event_count} NVSwitch SXid event{'s' if self.event_count != 1 else ''} "
            f"on {n} NVSwitch{'es' if n != 1 else ''}"
        )


def _analyze_kernel_log(text: str, options: AnalysisOptions) -> Verdict:
    return _kernel_log_lines(text.splitlines(), options)


def _kernel_log_lines(lines: Iterable[str], options: AnalysisOptions) -> Verdict:
    """GPU XID and NVSwitch SXid events of a kernel log, each class its own findings, one pass."""
    n_lines = 0
    xids = _XidTally()
    sxids = _SXidTally()
    parser = sxid.SXidParser()
    for raw in lines:
        n_lines += 1
        ln = raw.rstrip("\r\n")
        event = xid.parse_line(ln)
        if event is not None:
            xids.add(event)
        for s in parser.feed(ln):
            sxids.add(s)
    for s in parser.close():
        sxids.add(s)
    details = xids.details(n_lines)
    details["sxid"] = sxids.details()
    if not xids.event_count and not sxids.event_count:
        return Verdict(Status.OK, f"kernel log: no NVIDIA XID events in {n_lines} lines", (), details)
    findings = xids.findings() + sxids.findings()
    status = Status.worst(f.status for f in findings)
    ordered = sort_findings(findings)
    parts = [t.where() for t in (xids, sxids) if t.event_count]
    summary = f"kernel log: {', '.join(parts)}; worst: {ordered[0].message}"
    return Verdict(status, summary, ordered, details)


def _device_label(pci: str) -> str:
    """How a finding names the GPU: its PCI id, or what is known when it was redacted."""
    if pci == xid.DEVICE_REDACTED:
        return "a GPU with a redacted PCI id"
    if pci == xid.DEVICE_UNKNOWN:
        return "a GPU with an unknown PCI id"
    return pci


def _event_json(e: xid.XidEvent) -> dict[str, Any]:
    return {
        "pci": e.pci,
        "xid": e.xid,
        "pid": e.pid,
        "process": e.process,
        "message": e.message,
        "timestamp": e.timestamp,
        "host": e.host,
        "device_text": e.device_text,
        "redacted": list(e.redacted),
        "name": e.info.name,
        "category": e.info.category.value,
        "action": e.info.action,
        "severity": e.info.severity.value,
    }


def _sxid_json(e: sxid.SXidEvent) -> dict[str, Any]:
    return {
        "switch": e.switch,
        "pci": e.pci,
        "sxid": e.code,
        "fatal": e.fatal,
        "link": e.link,
        "message": e.message,
        "timestamp": e.timestamp,
        "host": e.host,
        "continuation": list(e.continuation),
        "continuation_count": e.continuation_count,
        "header_seen": e.header_seen,
        "device_text": e.device_text,
        "redacted": list(e.redacted),
        "name": e.info.name,
        "nvidia_class": e.info.nvidia_class,
        "action": e.action,
        "severity": e.severity.value,
    }


register_kind(
    ArtefactKind(
        name="dcgm-diag",
        description="`dcgmi diag` text output (DCGM 3.x or 4.x table, or rows of it)",
        sniff=dcgm.looks_like_dcgm_diag,
        analyze=_analyze_dcgm,
        priority=10,
        analyze_lines=_dcgm_lines,
    )
)
register_kind(
    ArtefactKind(
        name="nccl-tests",
        description="nccl-tests output (all_reduce_perf, all_gather_perf, alltoall_perf, ...)",
        sniff=nccl_tests.looks_like_nccl_tests,
        analyze=_analyze_nccl,
        priority=20,
        analyze_lines=_nccl_lines,
    )
)
register_kind(
    ArtefactKind(
        name="kernel-log",
        description="kernel log (dmesg, syslog, journal) scanned for NVIDIA XID and NVSwitch SXid events",
        sniff=_sniff_kernel_log,
        analyze=_analyze_kernel_log,
        priority=30,
        analyze_lines=_kernel_log_lines,
    )
)
register_group_kind(
    GroupKind(
        name="nccl-watchdog",
        description="PyTorch ProcessGroupNCCL watchdog logs: one with [rankN]: prefixes, or one per rank",
        claim=watchdog.claim,
        analyze=watchdog.analyze_members,
        priority=50,
    )
)
register_group_kind(
    GroupKind(
        name="flight-recorder",
        description="PyTorch Flight Recorder dumps (pickle or JSON, one per rank), analysed together",
        claim=flightrec.claim,
        analyze=flightrec.analyze_members,
        priority=40,
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

    Args:
        text: the artefact's text.
        path: the name the analysis carries (``"<text>"`` when it comes from no file).
        options: settings the analysis may use; None: the defaults.

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


class _Unreadable(Exception):
    """A file that cannot be analysed; the message is the one-line reason."""


def _open_binary(path: Path) -> IO[bytes]:
    """Open ``path`` for reading, decompressing a gzip file; only regular files.

    The file is opened with :func:`robustctl.inputfile.open_regular`, so a FIFO (which would block
    ``open`` until a writer comes) or a device is refused without waiting.

    Args:
        path: the file.

    Returns:
        The open file (a gzip reader over it when it starts with gzip's magic bytes); close it with
        :func:`_close`.

    Raises:
        _Unreadable: missing, a directory, a special file, permission denied, other ``OSError``.
    """
    try:
        fd = open_regular(path)
    except NotReadable as exc:
        raise _Unreadable(f"{exc.reason}: not read" if exc.special else exc.reason) from None
    try:
        fh: IO[bytes] = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    try:
        magic = fh.read(2)
        fh.seek(0)
    except OSError as exc:
        fh.close()
        raise _Unreadable(f"cannot read: {exc.strerror or exc}") from None
    if magic == b"\x1f\x8b":
        gz: IO[bytes] = cast("IO[bytes]", gzip.GzipFile(fileobj=fh, mode="rb"))
        return gz  # closing it does not close fh: see _close
    return fh


def _close(fh: IO[bytes]) -> None:
    inner = getattr(fh, "fileobj", None)
    fh.close()
    if inner is not None:
        inner.close()


_READ_ERRORS = (OSError, EOFError, zlib.error)
"""What reading a (possibly gzip-compressed) file can raise: I/O errors, a corrupt or truncated
gzip stream (``gzip.BadGzipFile`` is an ``OSError``; ``EOFError``; ``zlib.error``)."""


def _read_reason(exc: BaseException) -> str:
    if isinstance(exc, (EOFError, zlib.error, gzip.BadGzipFile)):
        return f"could not read: corrupt or truncated gzip file ({exc})"
    if isinstance(exc, OSError):
        return f"could not read: {exc.strerror or exc}"
    return f"could not read: {exc}"


def _iter_lines(fh: IO[bytes]) -> Iterator[str]:
    """The lines of ``fh`` decoded as UTF-8 (undecodable bytes replaced), without line ends; a line
    longer than :data:`MAX_LINE_BYTES` is cut there and the rest of it skipped."""
    while True:
        chunk = fh.readline(MAX_LINE_BYTES)
        if not chunk:
            return
        if len(chunk) >= MAX_LINE_BYTES and not chunk.endswith(b"\n"):
            while True:
                rest = fh.readline(MAX_LINE_BYTES)
                if not rest or rest.endswith(b"\n"):
                    break
        yield chunk.decode("utf-8", errors="replace").rstrip("\r\n")


def _read_head(path: Path) -> str:
    """The first :data:`HEAD_BYTES` of ``path`` (decompressed) as text, cut at the last line end.

    Args:
        path: the file.

    Returns:
        The text, UTF-8 with undecodable bytes replaced.

    Raises:
        _Unreadable: see :func:`_open_binary`; a read error; a binary file.
    """
    fh = _open_binary(path)
    try:
        data = fh.read(HEAD_BYTES)
    except _READ_ERRORS as exc:
        raise _Unreadable(_read_reason(exc)) from None
    finally:
        _close(fh)
    if b"\x00" in data[:65536]:
        raise _Unreadable("binary file (not text)")
    if len(data) == HEAD_BYTES and b"\n" in data:
        data = data[: data.rindex(b"\n") + 1]
    return data.decode("utf-8", errors="replace")


def _read_whole(path: Path) -> str:
    """All of ``path`` (decompressed) as text, at most :data:`MAX_BYTES`.

    Args:
        path: the file.

    Returns:
        The text, UTF-8 with undecodable bytes replaced.

    Raises:
        _Unreadable: see :func:`_read_head`; a file larger than :data:`MAX_BYTES`.
    """
    fh = _open_binary(path)
    try:
        data = fh.read(MAX_BYTES + 1)
    except _READ_ERRORS as exc:
        raise _Unreadable(_read_reason(exc)) from None
    finally:
        _close(fh)
    if len(data) > MAX_BYTES:
        raise _Unreadable(f"larger than {MAX_BYTES // (1024 * 1024)} MiB")
    return data.decode("utf-8", errors="replace")


def analyze_file(path: Path, *, options: AnalysisOptions | None = None) -> ArtefactAnalysis:
    """Detect the kind of the file at ``path`` and analyse it, in bounded memory. Never raises.

    The kind is detected from the first :data:`HEAD_BYTES` (decompressed when the file is gzip);
    a kind with ``analyze_lines`` then reads the file line by line, others read it whole (at most
    :data:`MAX_BYTES`). Only regular files are read: a FIFO, a device or a socket is refused without
    blocking.

    Args:
        path: the file (plain or gzip-compressed).
        options: settings the analysis may use; None: the defaults.

    Returns:
        The analysis; kind ``"unknown"`` and status UNKNOWN, with ``"PATH: reason"`` as summary,
        for a file that could not be read (missing, special, binary, corrupt gzip, too large).
    """
    opts = options or AnalysisOptions()
    name = str(path)

    def unreadable(reason: str, kind: str = UNKNOWN_KIND) -> ArtefactAnalysis:
        return ArtefactAnalysis(name, kind, Status.UNKNOWN, f"{name}: {reason}")

    try:
        head = _read_head(path)
    except _Unreadable as exc:
        return unreadable(str(exc))
    kind = detect_kind(head)
    if kind is None or kind.analyze_lines is None:
        try:
            text = head if kind is None else _read_whole(path)
        except _Unreadable as exc:
            return unreadable(str(exc), kind.name if kind is not None else UNKNOWN_KIND)
        return analyze_text(text, path=name, options=opts)
    try:
        fh = _open_binary(path)
    except _Unreadable as exc:
        return unreadable(str(exc), kind.name)
    try:
        verdict = kind.analyze_lines(_iter_lines(fh), opts)
    except _READ_ERRORS as exc:
        return unreadable(_read_reason(exc), kind.name)
    except Exception as exc:
        return ArtefactAnalysis(name, kind.name, Status.UNKNOWN, f"{kind.name}: analysis failed: {exc!r}")
    finally:
        _close(fh)
    return ArtefactAnalysis(
        path=name,
        kind=kind.name,
        status=verdict.status,
        summary=verdict.summary,
        findings=verdict.findings,
        details=dict(verdict.details),
    )


def analyze_paths(paths: Sequence[Path], *, expected_busbw_gbps: float | None = None) -> AnalysisReport:
    """Analyse every file of ``paths``; never raises for a bad file.

    Args:
        paths: files to analyse, in the order to report them.
        expected_busbw_gbps: expected peak nccl-tests busbw in GB/s (``--expected-busbw`` or
            config); ``None`` skips that rule.

    Returns:
        One :class:`ArtefactAnalysis` per path (:func:`analyze_file`: UNKNOWN with a reason for an
        unreadable, special, binary, corrupt or unrecognised file) and the worst status.
    """
    options = AnalysisOptions(expected_busbw_gbps=expected_busbw_gbps)
    results = [analyze_file(Path(p), options=options) for p in paths]
    return AnalysisReport(
        status=Status.worst(r.status for r in results),
        artefacts=tuple(results),
        expected_busbw_gbps=expected_busbw_gbps,
    )


def analyze_inputs(
    paths: Sequence[str | os.PathLike[str]],
    *,
    expected_busbw_gbps: float | None = None,
    layout: ParallelLayout | None = None,
    ranks_per_host: int | None = None,
) -> AnalysisReport:
    """:func:`analyze_paths` over files, directories of files and tar archives of files.

    The inputs are expanded by :func:`robustctl.analysis.sources.iter_sources` (a directory: the
    regular files directly inside it, sorted by name; a ``.tar``/``.tar.gz``/``.tgz`` archive: its
    regular members, named ``ARCHIVE:MEMBER``). Files are analysed by :func:`analyze_file`; an
    archive member is read whole (at most :data:`MAX_BYTES`; not decompressed) and analysed as text.
    A file a :class:`GroupKind` claims is set aside and analysed with the others it claims, in one
    entry at the place of the first (:func:`register_group_kind`).
    A link, subdirectory or device inside a directory or archive is a SKIPPED entry with its reason;
    an empty directory, a damaged archive or one past its bounds an UNKNOWN entry. Never raises for
    a bad input.

    Args:
        paths: files, directories and archives, in the order given.
        expected_busbw_gbps: expected peak nccl-tests busbw in GB/s; ``None`` skips that rule.
        layout: the job's parallel layout, for group kinds over a job's ranks; ``None``: unknown.
        ranks_per_host: ranks (GPUs) per machine; ``None``: unknown.

    Returns:
        One entry per file (or per group kind's set of files) and the worst status.
    """
    from robustctl.analysis.sources import iter_sources

    options = AnalysisOptions(
        expected_busbw_gbps=expected_busbw_gbps, layout=layout, ranks_per_host=ranks_per_host
    )
    groups = _Groups()
    results: list[ArtefactAnalysis | None] = []
    for src in iter_sources(paths, max_bytes=MAX_BYTES, read=False):
        if src.path is not None:
            claimed, entry = groups.take_file(src.path, src.base, len(results))
            results.append(entry if claimed else analyze_file(Path(src.path), options=options))
        elif src.data is not None:
            claimed, entry = groups.take_data(src.name, src.base, src.data, len(results))
            results.append(entry if claimed else _analyze_member(src.name, src.data, options))
        else:
            reason = f"{src.error}: not read" if src.special and not src.skipped else src.error
            status = Status.SKIPPED if src.skipped else Status.UNKNOWN
            results.append(ArtefactAnalysis(src.name, UNKNOWN_KIND, status, f"{src.name}: {reason}"))
    for slot, analysis in groups.analyses(options):
        results[slot] = analysis
    done = [r for r in results if r is not None]
    return AnalysisReport(
        status=Status.worst(r.status for r in done),
        artefacts=tuple(done),
        expected_busbw_gbps=expected_busbw_gbps,
    )


class _Groups:
    """The files group kinds claimed, set aside until every input is read (bounded per kind by
    :data:`MAX_GROUP_MEMBERS` and :data:`MAX_GROUP_BYTES`)."""

    def __init__(self) -> None:
        self._members: dict[str, list[GroupMember]] = {}
        self._bytes: dict[str, int] = {}
        self._slot: dict[str, int] = {}

    def take_file(self, path: str, base: str, slot: int) -> tuple[bool, ArtefactAnalysis | None]:
        """Offer a file on disk to the group kinds.

        Args:
            path: the file.
            base: its own name.
            slot: its index in the report.

        Returns:
            ``(claimed, entry)``: not claimed (or its head cannot be read: the caller's own analysis
            says why) is ``(False, None)``; taken is ``(True, None)`` (its group's entry fills a
            slot later); claimed but not held (unreadable, too large, past a group bound) is
            ``(True, UNKNOWN analysis)``.
        """
        if not _GROUP_REGISTRY:
            return False, None
        try:
            fh = _open_binary(Path(path))
        except _Unreadable:
            return False, None
        try:
            head = fh.read(HEAD_BYTES)
            kind = _claimant(base, head)
            if kind is None:
                return False, None
            data = head + fh.read(MAX_BYTES + 1 - len(head)) if len(head) == HEAD_BYTES else head
        except _READ_ERRORS as exc:
            return True, ArtefactAnalysis(path, UNKNOWN_KIND, Status.UNKNOWN, f"{path}: {_read_reason(exc)}")
        finally:
            _close(fh)
        return True, self._hold(kind, GroupMember(path, base, data), slot)

    def take_data(self, name: str, base: str, data: bytes, slot: int) -> tuple[bool, ArtefactAnalysis | None]:
        """Offer an archive member (its bytes, gzip decompressed here) to the group kinds.

        Args:
            name: ``ARCHIVE:MEMBER``.
            base: the member's own name.
            data: its bytes as read from the archive (at most ``MAX_BYTES + 1``).
            slot: its index in the report.

        Returns:
            As :meth:`take_file`.
        """
        if not _GROUP_REGISTRY:
            return False, None
        if data[:2] == b"\x1f\x8b":
            try:
                with gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb") as gz:
                    data = gz.read(MAX_BYTES + 1)
            except _READ_ERRORS:
                return False, None
        kind = _claimant(base, data[:HEAD_BYTES])
        if kind is None:
            return False, None
        return True, self._hold(kind, GroupMember(name, base, data), slot)

    def _hold(self, kind: GroupKind, member: GroupMember, slot: int) -> ArtefactAnalysis | None:
        size = len(member.data)
        held = self._members.setdefault(kind.name, [])
        if size > MAX_BYTES:
            reason = f"larger than {MAX_BYTES // (1024 * 1024)} MiB"
        elif len(held) >= MAX_GROUP_MEMBERS:
            reason = f"more than {MAX_GROUP_MEMBERS} {kind.name} files in one analysis"
        elif self._bytes.get(kind.name, 0) + size > MAX_GROUP_BYTES:
            reason = f"{kind.name} files past {MAX_GROUP_BYTES // (1024 * 1024)} MiB in one analysis"
        else:
            held.append(member)
            self._bytes[kind.name] = self._bytes.get(kind.name, 0) + size
            self._slot.setdefault(kind.name, slot)
            return None
        return ArtefactAnalysis(member.name, kind.name, Status.UNKNOWN, f"{member.name}: {reason}")

    def analyses(self, options: AnalysisOptions) -> Iterator[tuple[int, ArtefactAnalysis]]:
        """Each group kind's analysis over its members, with the report slot it fills.

        Args:
            options: settings the analyses may use.

        Yields:
            ``(slot, analysis)`` per group kind that holds members.
        """
        for name, members in self._members.items():
            if not members:
                continue
            kind = _GROUP_REGISTRY[name]
            path = _group_path([m.name for m in members])
            try:
                verdict = kind.analyze(members, options)
            except Exception as exc:
                analysis = ArtefactAnalysis(path, name, Status.UNKNOWN, f"{name}: analysis failed: {exc!r}")
            else:
                details = {"members": [m.name for m in members], **verdict.details}
                analysis = ArtefactAnalysis(
                    path, name, verdict.status, verdict.summary, verdict.findings, details
                )
            yield self._slot[name], analysis


def _group_path(names: Sequence[str]) -> str:
    """What a group's entry is called: the one file's name, else the files' common directory (or
    the first file's name) and how many files."""
    if len(names) == 1:
        return names[0]
    try:
        common = os.path.commonpath([n.split(":", 1)[0] if ":" in n else os.path.dirname(n) for n in names])
    except ValueError:
        common = ""
    return f"{common or names[0]} ({len(names)} files)"


def _analyze_member(name: str, data: bytes, options: AnalysisOptions) -> ArtefactAnalysis:
    """An archive member's content (at most ``MAX_BYTES + 1`` bytes) detected and analysed."""
    if len(data) > MAX_BYTES:
        reason = f"larger than {MAX_BYTES // (1024 * 1024)} MiB"
    elif b"\x00" in data[:65536]:
        reason = "binary file (not text)"
    else:
        return analyze_text(data.decode("utf-8", errors="replace"), path=name, options=options)
    return ArtefactAnalysis(name, UNKNOWN_KIND, Status.UNKNOWN, f"{name}: {reason}")
