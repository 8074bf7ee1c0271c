"""Offline analysis of saved py-spy dumps: ``robustctl analyze dumps/rank*.txt --layout tp=2,pp=4,dp=4``.

Two entry points:

* importing this module registers the ``"pyspy"`` :class:`~robustctl.analysis.detect.ArtefactKind`
  (sniff: :func:`~robustctl.stacks.parse.looks_like_pyspy`), so ``robustctl analyze`` recognises a
  py-spy dump among other artefacts and reports each one alone (its processes, their state; a file
  holding several main processes is clustered within itself);
* :func:`analyze_dumps` clusters *across* all the given files and blames, like the live command; the
  CLI goes through :func:`analyze_if_dumps`, which reads a job's evidence directory whole: py-spy
  dumps, faulthandler dumps and exception texts (:mod:`robustctl.stacks.faulthandler`) clustered
  together, the Flight Recorder dumps beside them (their group kind's claim, whatever their names)
  analysed by :func:`robustctl.analysis.flightrec.analyze_dumps`, and whether both name the same
  ranks (:func:`robustctl.stacks.result.with_flight_recorder`).

The rank of a file's processes comes from the dump (``RANK=N``, a JSON record's ``rank``, a
``[rankN]:`` line prefix), else from the file name (``rank12.txt``, ``rank_12``, ``dump-r12``). A
file that cannot be read or is not stack evidence is an UNKNOWN input with its reason, never a
traceback and never a suspect; py-spy's own error output, and a rank's exception text, are parsed
into an unreadable process (evidence, a suspect when it has a rank).
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from robustctl.analysis import Finding, Verdict
from robustctl.analysis.detect import (
    HEAD_BYTES,
    AnalysisOptions,
    ArtefactKind,
    group_kinds,
    kinds,
    register_kind,
)
from robustctl.analysis.flightrec import FrDump, FrLoadError, load_dump
from robustctl.analysis.flightrec import analyze_dumps as analyze_fr_dumps
from robustctl.analysis.sources import Source, iter_sources
from robustctl.config import ParallelLayout
from robustctl.errors import UsageError
from robustctl.inventory.hostrange import compact_ranges
from robustctl.inventory.topology import Topology
from robustctl.models import Status
from robustctl.stacks.blame import BlameOptions, blame
from robustctl.stacks.cluster import (
    ClusterOptions,
    categorize,
    cluster,
    normalize_function,
    normalize_path,
)
from robustctl.stacks.faulthandler import looks_like_traceback, parse_traceback_text
from robustctl.stacks.model import DumpParseError, ProcessDump, ProcessRole
from robustctl.stacks.parse import (
    MAX_DUMP_BYTES,
    looks_like_pyspy,
    parse_dump_data,
    parse_dump_text,
    rank_from_name,
)
from robustctl.stacks.result import (
    InputFile,
    StacksReport,
    analyze_stacks,
    build_report,
    with_flight_recorder,
)

__all__ = ["FLIGHT_RECORDER", "KIND", "all_pyspy", "analyze_dumps", "analyze_if_dumps", "load_dumps"]

KIND = "pyspy"
"""Name of the registered artefact kind."""

FLIGHT_RECORDER = "flight-recorder"
"""Name of the group kind (:mod:`robustctl.analysis.detect`) whose files are Flight Recorder dumps:
the files it claims are set aside and analysed by :func:`robustctl.analysis.flightrec.analyze_dumps`."""

_SNIFF_BYTES = 256 * 1024


def load_dumps(paths: Sequence[str | Path]) -> tuple[list[ProcessDump], list[InputFile]]:
    """Parse every input (files, directories of files, tar archives); never raises for a bad one.

    Inputs are expanded by :func:`robustctl.analysis.sources.iter_sources`: a directory gives the
    regular files directly inside it, sorted by name; a ``.tar``/``.tar.gz``/``.tgz`` archive gives
    its regular members, named ``ARCHIVE:MEMBER``. Each is read once, at most
    :data:`~robustctl.stacks.parse.MAX_DUMP_BYTES`.

    Args:
        paths: dump files, directories of them and tar archives of them, in the order given.

    Returns:
        ``(dumps, inputs)``: all processes found (input order), and one :class:`InputFile` per
        input (UNKNOWN with the reason for one that could not be used; SKIPPED for a link,
        subdirectory or device inside a directory or archive).
    """
    with _gc_paused():
        loaded = _load_all(paths, strict=False, groups=False)
    assert loaded is not None  # strict=False and groups=False never stop early
    return loaded.dumps, loaded.inputs


def _source_error(src: Source) -> str:
    """``NAME: reason`` for an input that was not read, worded as :func:`parse_dump_file` words it."""
    reason = src.error or ""
    if src.special:
        return f"{src.name}: {reason}: not read"
    if src.unopened and not reason.startswith("cannot read"):
        return f"{src.name}: cannot read: {reason}"
    return f"{src.name}: {reason}"


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while dumps are parsed.

    Parsing allocates millions of objects that are all kept (frames, threads, processes) and form
    no reference cycle, so the collector's passes over them find nothing, yet cost about a third
    of the load time at 100,000 ranks; clustering and blame allocate more while they are live, and
    would pay the same again. Reference counting still frees what is dropped; the
    collector is re-enabled (if it was) on the way out, error or not.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass
class _Loaded:
    """What one pass over the inputs read.

    Attributes:
        dumps: the processes of the stack-like inputs (py-spy, faulthandler, exception texts).
        inputs: one entry per stack-like input or unusable input (Flight Recorder files are in
            ``fr_files``).
        fr: the Flight Recorder dumps loaded. fr_files: every Flight Recorder file (loaded or not).
        fr_not_read: ``(file, reason)`` of those that could not be loaded.
        notes: what the traceback parser observed (fatal errors).
        stack_files: inputs read as py-spy or faulthandler dumps (an exception text alone is not).
    """

    dumps: list[ProcessDump] = field(default_factory=list)
    inputs: list[InputFile] = field(default_factory=list)
    fr: list[FrDump] = field(default_factory=list)
    fr_files: list[str] = field(default_factory=list)
    fr_not_read: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stack_files: int = 0


def _claimed_by(base: str, data: bytes, *, only: str | None = None) -> str | None:
    """The name of the group kind (:func:`robustctl.analysis.detect.group_kinds`) that claims a
    file, in their priority order, else ``None`` (a claim that raises claims nothing).

    Args:
        base: the file's own name.
        data: its content (the claims see the first :data:`~robustctl.analysis.detect.HEAD_BYTES`).
        only: test this kind's claim alone (None: every kind's).

    Returns:
        The claiming kind's name, or None.
    """
    head = data[:HEAD_BYTES]
    for kind in group_kinds():
        if only is not None and kind.name != only:
            continue
        try:
            if kind.claim(base, head):
                return kind.name
        except Exception:  # noqa: S112 - a broken claim must not hide the other kinds
            continue
    return None


def _load_all(paths: Sequence[str | Path], *, strict: bool, groups: bool) -> _Loaded | None:
    """One pass over the inputs; each file's kind from its content.

    A file is, in this order: a Flight Recorder dump (with ``groups``: its group kind's claim),
    a py-spy dump, a faulthandler dump or exception text (its first 256 KiB), or something else
    (read as a py-spy dump: an UNKNOWN input saying what it is). Only a file that is not a py-spy
    dump is offered to the other group kinds' claims (a watchdog log; py-spy dumps, nearly every
    file of a large job, never print their markers).

    Args:
        paths: files, directories and archives.
        strict: ``None`` as soon as an input is unreadable or not a stack-like text (py-spy,
            faulthandler, exception; with ``groups``, a Flight Recorder dump too), and at the end
            when nothing was read or no input was a py-spy or faulthandler dump.
        groups: Flight Recorder dumps are loaded apart; a file another group kind claims ends the
            pass (``None``) unless it is an exception text (a watchdog log holding a rank's
            traceback is that rank's error); with Flight Recorder dumps or another kind's file,
            no py-spy or faulthandler dump among the inputs ends it too (the group kinds read
            them). Without ``groups`` no claim is tested.

    Returns:
        What was read, or ``None`` (see ``strict`` and ``groups``).
    """
    out = _Loaded()
    read_one = claimed = False
    for src in iter_sources(paths, max_bytes=MAX_DUMP_BYTES):
        data = src.data
        if data is None:
            if src.skipped:
                out.inputs.append(
                    InputFile(path=src.name, status=Status.SKIPPED, error=f"{src.name}: {src.error}")
                )
                continue
            if strict:
                return None
            out.inputs.append(InputFile(path=src.name, status=Status.UNKNOWN, error=_source_error(src)))
            continue
        if groups and _claimed_by(src.base, data, only=FLIGHT_RECORDER) is not None:
            _load_fr(out, src, data)
            continue
        pyspy = _sniff(data)
        traceback = not pyspy and _sniff_traceback(data)
        if groups and not pyspy and _claimed_by(src.base, data) is not None:
            if not traceback:
                return None
            claimed = True
        if not pyspy and not traceback and strict:
            return None
        read_one = True
        if traceback and len(data) <= MAX_DUMP_BYTES:
            _load_traceback(out, src, data.decode("utf-8", errors="replace"))
            continue
        try:
            found = parse_dump_data(data, source=src.name, name=src.base)
        except DumpParseError as exc:
            out.inputs.append(InputFile(path=src.name, status=Status.UNKNOWN, error=str(exc)))
            continue
        out.stack_files += pyspy
        _add(out, src.name, found)
    if strict and not read_one:
        return None
    if groups and (strict or out.fr_files or claimed) and not out.stack_files:
        return None
    return out


def _sniff_traceback(data: bytes) -> bool:
    """The first 256 KiB hold no NUL byte and a faulthandler dump or an exception traceback."""
    head = data[:_SNIFF_BYTES]
    return b"\x00" not in head and looks_like_traceback(head.decode("utf-8", errors="replace"))


def _add(out: _Loaded, name: str, found: Sequence[ProcessDump]) -> None:
    out.dumps.extend(found)
    ranks = [d.rank for d in found if d.rank is not None]
    out.inputs.append(
        InputFile(
            path=name,
            status=Status.OK,
            processes=len(found),
            ranks=str(ranks[0]) if len(ranks) == 1 else compact_ranges(ranks),
        )
    )


def _load_traceback(out: _Loaded, src: Source, text: str) -> None:
    """A faulthandler dump or exception text: its processes (a rank's error for an exception)."""
    try:
        parsed = parse_traceback_text(text, source=src.name, rank=rank_from_name(src.base))
    except DumpParseError as exc:
        out.inputs.append(InputFile(path=src.name, status=Status.UNKNOWN, error=f"{src.name}: {exc}"))
        return
    out.stack_files += any(d.threads for d in parsed.dumps)
    out.notes.extend(parsed.notes)
    _add(out, src.name, parsed.dumps)


def _load_fr(out: _Loaded, src: Source, data: bytes) -> None:
    """A Flight Recorder dump, loaded (or why not) and kept apart."""
    out.fr_files.append(src.name)
    if len(data) > MAX_DUMP_BYTES:
        out.fr_not_read.append((src.name, f"{src.name}: larger than {MAX_DUMP_BYTES // (1024 * 1024)} MiB"))
        return
    try:
        out.fr.append(load_dump(src.name, data, base=src.base))
    except FrLoadError as exc:
        out.fr_not_read.append((src.name, str(exc)))


def _sniff(data: bytes) -> bool:
    """The first 256 KiB hold no NUL byte and look like py-spy output."""
    head = data[:_SNIFF_BYTES]
    return b"\x00" not in head and looks_like_pyspy(head.decode("utf-8", errors="replace"))


def all_pyspy(paths: Sequence[str | Path]) -> bool:
    """True when every input (a file, each regular file of a directory, each regular member of an
    archive: :func:`load_dumps`) is readable text that looks like py-spy output (reads ≤ 256 KiB
    of each file; links and devices inside a directory or archive are not inputs)."""
    seen = False
    for src in iter_sources(paths, max_bytes=_SNIFF_BYTES - 1):
        if src.data is None:
            if src.skipped:
                continue
            return False
        if not _sniff(src.data):
            return False
        seen = True
    return seen


def analyze_dumps(
    paths: Sequence[str | Path],
    *,
    layout: ParallelLayout | None = None,
    ranks_per_host: int | None = None,
    hosts: Sequence[str] | None = None,
    cluster_options: ClusterOptions | None = None,
    blame_options: BlameOptions | None = None,
) -> StacksReport:
    """Cluster the processes of every dump together, blame, and report.

    Args:
        paths: dump files (py-spy text or JSON, any mix; one or several processes each),
            directories of them and tar archives of them (:func:`load_dumps`).
        layout: the job's layout (``--layout``, :func:`robustctl.inventory.topology.parse_layout`);
            needed for groups and "not collected" ranks.
        ranks_per_host: G; needed for machines and the over-eviction set.
        hosts: hosts in rank order, when known (default ``machine-k``).
        cluster_options: how stacks are normalized and classes judged (None: the defaults).
        blame_options: the thresholds of the blame (None: the defaults).

    Returns:
        A :class:`StacksReport` whose ``inputs`` lists every input (UNKNOWN ones with their reason).

    Raises:
        UsageError: a dump's rank lies outside the layout (the layout does not match), or
            ``ranks_per_host`` does not divide the layout's world size (without a layout: the
            number of ranks the dumps span, highest rank + 1).
    """
    t0 = time.perf_counter()
    with _gc_paused():
        loaded = _load_all(paths, strict=False, groups=False)
    assert loaded is not None  # strict=False and groups=False never stop early
    return _report(
        loaded.dumps,
        loaded.inputs,
        t0,
        notes=loaded.notes,
        layout=layout,
        ranks_per_host=ranks_per_host,
        hosts=hosts,
        cluster_options=cluster_options,
        blame_options=blame_options,
    )


def analyze_if_dumps(
    paths: Sequence[str | Path],
    *,
    layout: ParallelLayout | None = None,
    ranks_per_host: int | None = None,
) -> StacksReport | None:
    """:func:`analyze_dumps` in one pass over the inputs, each file's kind from its content, when
    they are one job's stack evidence; else ``None`` (the caller then explains each input alone).

    Stack evidence: py-spy dumps, faulthandler dumps and exception texts
    (:mod:`robustctl.stacks.faulthandler`), clustered together. Flight Recorder dumps beside them
    (pickle or JSON, whatever their names) are set aside and analysed together
    (:func:`robustctl.analysis.flightrec.analyze_dumps`); the report then carries their section and
    whether both name the same ranks (:func:`robustctl.stacks.result.with_flight_recorder`).

    ``None`` (having stopped reading at the first input that decides it) when: no layout is given
    and an input is unreadable or not stack evidence or a Flight Recorder dump; another group kind
    claims an input (a watchdog log without a traceback); or no input is a py-spy or faulthandler
    dump while Flight Recorder dumps are there or no layout is given (a directory of Flight Recorder
    dumps alone is then read again by their group kind). With a layout and no group kind's file,
    every input is analysed as a dump, as before (one that is not is an UNKNOWN input).

    Args:
        paths: dump files, directories of them and tar archives of them (:func:`load_dumps`).
        layout: the job's layout, as :func:`analyze_dumps`; when given, an input that is not stack
            evidence is an UNKNOWN input instead of ending the pass.
        ranks_per_host: G, as :func:`analyze_dumps`.

    Returns:
        The report, or None (see above).

    Raises:
        UsageError: as :func:`analyze_dumps`.
    """
    t0 = time.perf_counter()
    with _gc_paused():
        loaded = _load_all(paths, strict=layout is None, groups=True)
    if loaded is None:
        return None
    report = _report(
        loaded.dumps, loaded.inputs, t0, notes=loaded.notes, layout=layout, ranks_per_host=ranks_per_host
    )
    if loaded.fr_files:
        analysis = analyze_fr_dumps(loaded.fr, layout, ranks_per_host)
        report = with_flight_recorder(report, analysis, files=loaded.fr_files, not_read=loaded.fr_not_read)
    return report


def _report(
    dumps: list[ProcessDump],
    inputs: list[InputFile],
    t0: float,
    *,
    layout: ParallelLayout | None,
    ranks_per_host: int | None,
    notes: Sequence[str] = (),
    hosts: Sequence[str] | None = None,
    cluster_options: ClusterOptions | None = None,
    blame_options: BlameOptions | None = None,
) -> StacksReport:
    _check_ranks_per_host(dumps, layout, ranks_per_host)
    topology = Topology(layout, ranks_per_host, hosts) if layout is not None else None
    with _gc_paused():  # the parsed dumps are all live: a collector pass over them finds nothing
        clusters = cluster(dumps, cluster_options)
        result = blame(clusters, topology, blame_options)
    dup = [
        r
        for r, n in Counter(
            d.rank for d in dumps if d.role is ProcessRole.MAIN and d.rank is not None
        ).items()
        if n > 1
    ]
    report = build_report(clusters, result, topology, inputs=inputs, elapsed_s=time.perf_counter() - t0)
    extra: list[str] = list(notes)
    if dup:
        extra.append(f"ranks {compact_ranges(dup)} have more than one main-process dump")
    no_rank = sum(1 for d in dumps if d.rank is None and d.role is ProcessRole.MAIN)
    if no_rank and layout is not None:
        extra.append(
            f"{no_rank} main process{'es' if no_rank != 1 else ''} without a rank (name files rankN.txt)"
        )
    if extra:
        report = replace(report, notes=(*report.notes, *extra))
    return report


def _check_ranks_per_host(
    dumps: Sequence[ProcessDump], layout: ParallelLayout | None, ranks_per_host: int | None
) -> None:
    """Machines hold G ranks each, so G must divide the world size; otherwise -G is a typo.

    Args:
        dumps: the parsed processes (their highest rank + 1 is the world size without a layout).
        layout: the job's layout (None: not given).
        ranks_per_host: G (None: not given, nothing to check).

    Raises:
        UsageError: it does not divide (one line naming both numbers).
    """
    if ranks_per_host is None:
        return
    if layout is not None:
        world, source = layout.world_size, "the layout's world size"
    else:
        ranks = [d.rank for d in dumps if d.rank is not None]
        if not ranks:
            return
        world, source = max(ranks) + 1, "the ranks of the dumps (highest rank + 1)"
    if world % ranks_per_host:
        raise UsageError(
            f"--ranks-per-host {ranks_per_host} does not divide {source}, {world}: "
            "give the number of ranks (GPUs) per machine"
        )


# --- the per-file artefact kind ------------------------------------------------------------------------


def _process_json(d: ProcessDump) -> dict[str, Any]:
    t = d.main_thread
    frames = t.frames if t is not None else ()
    return {
        "pid": d.pid,
        "rank": d.rank,
        "role": d.role.value,
        "error": d.error,
        "threads": len(d.threads),
        "category": categorize(frames).value if d.error is None else "unreadable",
        "main_stack": [
            f"{normalize_function(f.function)} ({normalize_path(f.short_file or f.file)})"
            for f in reversed(frames)
        ][-60:],
    }


def _analyze_file(text: str, options: AnalysisOptions) -> Verdict:
    try:
        dumps = parse_dump_text(text)
    except DumpParseError as exc:
        return Verdict(Status.UNKNOWN, f"py-spy dump: {exc}")
    details: dict[str, Any] = {"processes": [_process_json(d) for d in dumps[:1000]]}
    readable = [d for d in dumps if d.error is None]
    mains = [d for d in readable if d.role is ProcessRole.MAIN]
    if not readable:
        errs = "; ".join(sorted({d.error or "" for d in dumps}))
        return Verdict(
            Status.UNKNOWN,
            f"py-spy could not read the process: {errs}",
            (Finding(Status.UNKNOWN, f"py-spy error: {errs}", {"error": errs}),),
            details,
        )
    if len(mains) >= 3:
        report = analyze_stacks(dumps)
        details["stacks"] = {
            "status": report.status.value,
            "suspect_ranks": list(report.suspect_ranks),
            "ambiguity": report.ambiguity,
        }
        findings = tuple(
            Finding(Status.CRITICAL, f"pid {s.pid} rank {s.rank}: {s.reason}", {"pid": s.pid, "rank": s.rank})
            for s in report.suspects
        )
        return Verdict(
            report.status, f"py-spy dumps of {len(dumps)} processes: {report.summary}", findings, details
        )
    findings_l: list[Finding] = []
    for d in dumps:
        who = f"pid {d.pid}" if d.pid is not None else "process"
        if d.rank is not None:
            who += f" rank {d.rank}"
        if d.error is not None:
            findings_l.append(Finding(Status.UNKNOWN, f"{who}: could not be read: {d.error}", {"pid": d.pid}))
            continue
        t = d.main_thread
        frames = t.frames if t is not None else ()
        cat = categorize(frames)
        top = (
            f"{normalize_function(frames[0].function)} ({normalize_path(frames[0].short_file or frames[0].file)})"
            if frames
            else "no Python frame"
        )
        findings_l.append(
            Finding(
                Status.OK,
                f"{who} ({d.role.value}, {len(d.threads)} threads): {cat.value} in {top}",
                {"pid": d.pid, "category": cat.value},
            )
        )
    status = Status.worst(f.status for f in findings_l)
    cats = Counter(categorize(d.main_thread.frames if d.main_thread else ()).value for d in readable)
    summary = (
        f"py-spy dump: {len(dumps)} process{'es' if len(dumps) != 1 else ''}; main threads: "
        + ", ".join(f"{k} ×{n}" if n > 1 else k for k, n in cats.most_common())
        + " (compare with the other ranks' dumps to find outliers)"
    )
    return Verdict(status, summary, tuple(findings_l), details)


def _register() -> None:
    if any(k.name == KIND for k in kinds()):
        return
    register_kind(
        ArtefactKind(
            name=KIND,
            description="py-spy dump (text or --json) or py-spy's error output",
            sniff=looks_like_pyspy,
            analyze=_analyze_file,
            priority=40,
        )
    )


_register()
