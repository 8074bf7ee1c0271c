"""The ``robustctl stacks`` result (:class:`StacksReport`, the ``--json`` document) and the pure
pipeline that builds it from dumps: :func:`analyze_stacks` = cluster → blame → report.

Status (and exit code, :data:`robustctl.exit_codes`):

* CRITICAL (2): suspects named (outliers localized in a group, or unreadable processes next to a
  dominant class);
* WARNING (1): ambiguous: no dominant class, or outliers spread over no small group: said, not guessed;
* UNKNOWN (3): nothing could be read, or some ranks of the layout were not collected and nothing was
  found among the others (not checked is never healthy);
* OK (0): a dominant class and no outlier (or a job making progress between two samples).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from robustctl.analysis.flightrec import FrAnalysis, FrChain, FrSuspect
from robustctl.config import ParallelLayout
from robustctl.exit_codes import ExitCode
from robustctl.inventory.hostrange import compact_ranges
from robustctl.inventory.topology import Topology
from robustctl.models import SCHEMA_VERSION, Status
from robustctl.stacks.blame import BlameOptions, BlameResult, GroupChoice, Suspect, blame
from robustctl.stacks.cluster import (
    ClusterOptions,
    ClusterResult,
    Divergence,
    SampleComparison,
    StackClass,
    cluster,
    compare_samples,
)
from robustctl.stacks.model import ProcessDump
from robustctl.stacks.waitsfor import WaitsFor

__all__ = [
    "Agreement",
    "ClassSummary",
    "FlightRecorderSection",
    "InputFile",
    "ProcessRef",
    "RoleSummary",
    "StacksReport",
    "analyze_stacks",
    "build_report",
    "compare_ranks",
    "hosts_from_dumps",
    "with_flight_recorder",
]

MAX_CLASSES_PER_ROLE = 50
"""Classes listed per role in a report; the rest are counted in ``RoleSummary.classes_omitted``."""
MAX_PROCESSES_PER_CLASS = 100
"""Member processes listed per outlier class (all of them are counted)."""
PROGRESS_FRACTION = 0.5
"""With two samples, a job where more than this share of ranks changed stack is making progress."""


@dataclass(frozen=True)
class ProcessRef:
    """One process of an outlier class, as evidence.

    Attributes:
        rank, host, pid, parent_pid, role, state (``/proc`` state letter), source: as collected.
        error: py-spy's error for an unreadable process.
    """

    rank: int | None
    host: str | None
    pid: int | None
    parent_pid: int | None
    role: str
    state: str | None
    source: str | None
    error: str | None


@dataclass(frozen=True)
class InputFile:
    """One dump file of an offline analysis.

    Attributes:
        path: as given. status: OK when parsed (even if py-spy's error output: that is evidence),
            UNKNOWN when unreadable or not a py-spy dump. processes: processes it held.
        ranks: ranks of those processes (compact ranges). error: why it could not be used.
    """

    path: str
    status: Status
    processes: int = 0
    ranks: str = ""
    error: str | None = None


@dataclass(frozen=True)
class ClassSummary:
    """One stack class in the report.

    Attributes:
        role: the processes' role. id: class id within the role (0 = largest).
        size: processes in it. ranks: their ranks as compact ranges (``"0-5,7"``). n_ranks: how many.
        category: ``compute``, ``collective``, ``p2p``, ``dataloader``, ``checkpoint``, ``io``,
            ``unknown`` or ``unreadable``.
        healthy: treated as healthy (dominant, or a large waiting class promoted by blame).
        dominant: the role's dominant class. unreadable: py-spy could not read these processes.
        frames: normalized path, outermost first (empty for unreadable).
        divergence: where it leaves the dominant path. reasons: py-spy errors with counts (unreadable).
        partial: cut stacks merged into it. processes: members (outlier classes only, at most
        :data:`MAX_PROCESSES_PER_CLASS`). hosts: distinct hosts of the members, when known.
    """

    role: str
    id: int
    size: int
    ranks: str
    n_ranks: int
    category: str
    healthy: bool
    dominant: bool
    unreadable: bool
    frames: tuple[str, ...]
    divergence: Divergence | None = None
    reasons: tuple[tuple[str, int], ...] = ()
    partial: int = 0
    processes: tuple[ProcessRef, ...] = ()
    hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class RoleSummary:
    """One role's clustering outcome.

    Attributes:
        role, processes (read or not), readable, n_classes (readable classes), dominant (class id or
        None), ambiguous, reason (why ambiguous), classes_omitted (not listed, beyond the cap).
    """

    role: str
    processes: int
    readable: int
    n_classes: int
    dominant: int | None
    ambiguous: bool
    reason: str | None
    classes_omitted: int = 0


@dataclass(frozen=True)
class FlightRecorderSection:
    """The Flight Recorder dumps of a directory read whole by ``analyze`` (:mod:`robustctl.analysis.flightrec`).

    Attributes:
        status: the analysis's (UNKNOWN also when a dump could not be read and nothing was found).
        summary: its one line. suspects: the ranks at fault, named as ``stacks --json`` names its
            suspects (rank, host, machine, kind, reason, evidence). suspect_ranks: their ranks.
        likely_culprits: suspects not waiting on a peer (roots, missing ranks, odd ranks of a vote).
        chains: the chains of waits to each root. ranks: ranks with a dump (compact ranges).
        missing_dumps: member ranks without one (compact ranges). blocked: rank → its oldest
        incomplete operation. undecided: why nobody is named while ranks are blocked.
        files: the dumps read. not_read: ``{"file", "reason"}`` of each dump that could not be
        loaded. notes: the analysis's other observations.
    """

    status: Status
    summary: str
    suspects: tuple[FrSuspect, ...]
    suspect_ranks: tuple[int, ...]
    likely_culprits: tuple[int, ...]
    chains: tuple[FrChain, ...]
    ranks: str
    missing_dumps: str
    blocked: Mapping[str, str]
    undecided: str | None
    files: tuple[str, ...]
    not_read: tuple[Mapping[str, str], ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Agreement:
    """Whether the stacks and the Flight Recorder name the same ranks.

    Each source's ranks are its likely culprits (ranks at fault that wait on nobody) when it has
    any, else all its suspect ranks.

    Attributes:
        verdict: ``"agree"`` (the same ranks), ``"overlap"`` (some in common, some not),
            ``"disagree"`` (none in common), ``"stacks-only"`` / ``"flight-recorder-only"`` (one
            source names a rank) or ``"none"`` (neither does).
        summary: one line (``"stacks and Flight Recorder agree on rank 3"``).
        agree: ranks both name. stacks_only: ranks only the stacks name. fr_only: ranks only the
            Flight Recorder names.
        stacks_ranks: the stacks' ranks compared. fr_ranks: the Flight Recorder's.
    """

    verdict: str
    summary: str
    agree: tuple[int, ...]
    stacks_only: tuple[int, ...]
    fr_only: tuple[int, ...]
    stacks_ranks: tuple[int, ...]
    fr_ranks: tuple[int, ...]


@dataclass(frozen=True)
class StacksReport:
    """The result of ``robustctl stacks`` or of ``robustctl analyze`` on py-spy dumps.

    Attributes:
        status: see the module docstring. summary: one human line.
        processes: dumps considered. readable: dumps py-spy read.
        roles: per-role outcome. classes: per-role classes, largest first, unreadable last.
        suspects: outlier processes (empty when ambiguous). suspect_ranks / suspect_hosts: distinct.
        likely_culprits: suspect ranks not waiting on a peer.
        group: smallest parallel group containing the suspects (None without a layout).
        over_eviction: hosts to evict. healthy_machines_taken: those running no suspect.
        ambiguous / ambiguity: the picture does not support naming suspects, and why.
        not_collected: layout ranks with no dump (compact ranges); n_not_collected: count.
        unplaced: outlier processes with no rank.
        layout: ``{"tp": …, "pp": …, "dp": …, "cp": …, "ep": …, "order": …}`` or None.
        world_size, ranks_per_host: when known.
        progress: the two-sample comparison, when a previous sample was given.
        inputs: offline only: one entry per dump file (UNKNOWN when unusable).
        notes: other observations. elapsed_s: analysis time (seconds).
        waits_for: the waits-for analysis (who waits for whom; chains ending at the suspects), when run.
        decided_by: ``"classes"`` (outlier stack classes) or ``"waits-for"`` (the chains named the
            suspects where the classes could not).
        flight_recorder: ``analyze`` of a directory holding Flight Recorder dumps beside the stack
            dumps: their analysis (:class:`FlightRecorderSection`); ``None`` otherwise. With it,
            ``status`` is the worse of the stacks' and the Flight Recorder's.
        agreement: whether the stacks and the Flight Recorder name the same ranks
            (:class:`Agreement`), with ``flight_recorder``; ``None`` otherwise.
        schema_version, kind (``"stacks"``).
    """

    status: Status
    summary: str
    processes: int
    readable: int
    roles: tuple[RoleSummary, ...]
    classes: tuple[ClassSummary, ...]
    suspects: tuple[Suspect, ...]
    suspect_ranks: tuple[int, ...]
    suspect_hosts: tuple[str, ...]
    likely_culprits: tuple[int, ...]
    group: GroupChoice | None
    over_eviction: tuple[str, ...]
    healthy_machines_taken: int
    ambiguous: bool
    ambiguity: str | None
    not_collected: str
    n_not_collected: int
    unplaced: tuple[str, ...]
    layout: Mapping[str, object] | None
    world_size: int | None
    ranks_per_host: int | None
    progress: SampleComparison | None = None
    inputs: tuple[InputFile, ...] = ()
    notes: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    waits_for: WaitsFor | None = None
    decided_by: str = "classes"
    flight_recorder: FlightRecorderSection | None = None
    agreement: Agreement | None = None
    schema_version: int = SCHEMA_VERSION
    kind: str = "stacks"

    @property
    def exit_code(self) -> ExitCode:
        """CRITICAL 2 (suspects), WARNING 1 (ambiguous), UNKNOWN 3 (nothing read / not collected), OK 0."""
        return self.status.exit_code


def _process_ref(d: ProcessDump) -> ProcessRef:
    return ProcessRef(
        rank=d.rank,
        host=d.host,
        pid=d.pid,
        parent_pid=d.parent_pid,
        role=d.role.value,
        state=d.state,
        source=d.source,
        error=d.error,
    )


def _class_summary(c: StackClass, clusters: ClusterResult, healthy: bool) -> ClassSummary:
    procs: tuple[ProcessRef, ...] = ()
    hosts: tuple[str, ...] = ()
    if not healthy:
        members = c.members[:MAX_PROCESSES_PER_CLASS]
        procs = tuple(_process_ref(clusters.dumps[i]) for i in members)
        hosts = tuple(dict.fromkeys(h for i in c.members if (h := clusters.dumps[i].host) is not None))
    return ClassSummary(
        role=c.role.value,
        id=c.id,
        size=c.size,
        ranks=compact_ranges(c.ranks),
        n_ranks=len(c.ranks),
        category=c.category.value,
        healthy=healthy,
        dominant=c.dominant,
        unreadable=c.unreadable,
        frames=c.frames,
        divergence=c.divergence,
        reasons=c.reasons,
        partial=c.partial,
        processes=procs,
        hosts=hosts,
    )


def _summary(status: Status, res: BlameResult, clusters: ClusterResult, progress: bool) -> str:
    if clusters.readable == 0:
        return f"no process could be read ({len(clusters.dumps)} unreadable)" if clusters.dumps else "no dump"
    if progress:
        return "job is making progress: most ranks changed stack between the two samples; no hang"
    if res.ambiguous:
        return f"ambiguous, no suspect named: {res.ambiguity}"
    if res.suspects:
        by_cat: dict[str, list[int]] = {}
        for s in res.suspects:
            if s.rank is not None:
                by_cat.setdefault(s.category.value, []).append(s.rank)
        parts = "; ".join(
            f"{'rank' if len(set(v)) == 1 else 'ranks'} {compact_ranges(v)} {k}" for k, v in by_cat.items()
        )
        n = len(res.suspect_ranks)
        msg = f"{n} outlier rank{'s' if n != 1 else ''} ({parts or 'no rank'})"
        if res.group is not None:
            msg += f" in {res.group.kind} group {res.group.index}"
        if res.decided_by == "waits-for" and res.waits_for is not None and res.waits_for.chains:
            msg += f", named by the waits-for chain {res.waits_for.chains[0].text}"
        if res.over_eviction:
            msg += (
                f" → over-evict {len(res.over_eviction)} machine{'s' if len(res.over_eviction) != 1 else ''}"
                f" ({res.healthy_machines_taken} healthy taken)"
            )
        return msg
    if status is Status.UNKNOWN and res.n_not_collected:
        return f"no outlier among the ranks read, but {res.n_not_collected} ranks were not collected"
    if status is Status.UNKNOWN:
        return "no outlier among the dumps read, but some files could not be used"
    return "no outlier: every process is in the dominant class"


def build_report(
    clusters: ClusterResult,
    result: BlameResult,
    topology: Topology | None = None,
    *,
    progress: SampleComparison | None = None,
    inputs: Sequence[InputFile] = (),
    elapsed_s: float = 0.0,
) -> StacksReport:
    """Assemble the :class:`StacksReport` from a clustering and its blame (pure)."""
    moving = progress is not None and progress.compared > 0 and progress.changed_fraction > PROGRESS_FRACTION
    if moving:
        result = BlameResult(
            not_collected=result.not_collected,
            n_not_collected=result.n_not_collected,
            healthy_classes=result.healthy_classes,
            waits_for=result.waits_for,
            notes=(
                *result.notes,
                f"{len(progress.changed) if progress else 0} of {progress.compared if progress else 0} ranks "
                "changed stack between samples: classes describe a running job",
            ),
        )
    if clusters.readable == 0:
        status = Status.UNKNOWN
    elif result.suspects:
        status = Status.CRITICAL
    elif result.ambiguous:
        status = Status.WARNING
    elif (result.n_not_collected or any(f.status is Status.UNKNOWN for f in inputs)) and not moving:
        status = Status.UNKNOWN
    else:
        status = Status.OK
    healthy = set(result.healthy_classes)
    roles: list[RoleSummary] = []
    classes: list[ClassSummary] = []
    for rc in clusters.roles:
        listed = list(rc.classes[:MAX_CLASSES_PER_ROLE])
        if rc.classes and rc.classes[-1].unreadable and rc.classes[-1] not in listed:
            listed.append(rc.classes[-1])
        roles.append(
            RoleSummary(
                role=rc.role.value,
                processes=rc.processes,
                readable=rc.readable,
                n_classes=sum(1 for c in rc.classes if not c.unreadable),
                dominant=rc.dominant,
                ambiguous=rc.ambiguous,
                reason=rc.reason,
                classes_omitted=len(rc.classes) - len(listed),
            )
        )
        classes.extend(_class_summary(c, clusters, (rc.role, c.id) in healthy) for c in listed)
    layout = topology.layout if topology is not None else None
    return StacksReport(
        status=status,
        summary=_summary(status, result, clusters, moving),
        processes=len(clusters.dumps),
        readable=clusters.readable,
        roles=tuple(roles),
        classes=tuple(classes),
        suspects=result.suspects,
        suspect_ranks=result.suspect_ranks,
        suspect_hosts=result.suspect_hosts,
        likely_culprits=result.likely_culprits,
        group=result.group,
        over_eviction=result.over_eviction,
        healthy_machines_taken=result.healthy_machines_taken,
        ambiguous=result.ambiguous,
        ambiguity=result.ambiguity,
        not_collected=result.not_collected,
        n_not_collected=result.n_not_collected,
        unplaced=result.unplaced,
        layout=_layout_json(layout),
        world_size=layout.world_size if layout is not None else None,
        ranks_per_host=topology.ranks_per_host if topology is not None else None,
        progress=progress,
        inputs=tuple(inputs),
        notes=result.notes,
        elapsed_s=round(elapsed_s, 6),
        waits_for=result.waits_for,
        decided_by=result.decided_by,
    )


def _layout_json(layout: ParallelLayout | None) -> dict[str, object] | None:
    if layout is None:
        return None
    return {
        "tp": layout.tp,
        "cp": layout.cp,
        "ep": layout.ep,
        "dp": layout.dp,
        "pp": layout.pp,
        "order": layout.order,
    }


def hosts_from_dumps(dumps: Sequence[ProcessDump], world_size: int, ranks_per_host: int) -> list[str] | None:
    """Machine names in rank order as the dumps report them (``ProcessDump.host`` of a rank on machine
    ``k``); ``machine-k`` where no dump says; ``None`` when no dump has both a rank and a host."""
    names: dict[int, str] = {}
    for d in dumps:
        if d.rank is not None and d.host and 0 <= d.rank < world_size:
            names.setdefault(d.rank // ranks_per_host, d.host)
    if not names:
        return None
    n = -(-world_size // ranks_per_host)
    return [names.get(k, f"machine-{k}") for k in range(n)]


def analyze_stacks(
    dumps: Sequence[ProcessDump],
    *,
    layout: ParallelLayout | None = None,
    ranks_per_host: int | None = None,
    hosts: Sequence[str] | None = None,
    previous: Sequence[ProcessDump] | None = None,
    expected_ranks: Iterable[int] | None = None,
    cluster_options: ClusterOptions | None = None,
    blame_options: BlameOptions | None = None,
) -> StacksReport:
    """Cluster ``dumps``, blame, and report: the whole pure pipeline of ``robustctl stacks``.

    Args:
        dumps: every process collected (rank processes and their children; unreadable ones with
            ``error`` set); frames innermost first.
        layout: the job's parallel layout; without it suspects are named by rank/host only.
        ranks_per_host: G (ranks per machine); needed for machines and the over-eviction set.
        hosts: the job's hosts in rank order (``Job.hosts`` names); default: the hosts the dumps
            name (:func:`hosts_from_dumps`), else ``machine-k``.
        previous: an earlier sample of the same job (e.g. 1–2 s before); when most ranks changed
            stack since, the job is progressing and no suspect is named (OK).
        expected_ranks: ranks that were asked for (default: every rank of the layout); those
            without a main-process dump are reported "not collected".
        cluster_options: how stacks are normalized and classes judged (None: the defaults).
        blame_options: the thresholds of the blame (None: the defaults).

    Returns:
        The report: status, suspects, classes and the progress against ``previous``.

    Raises:
        UsageError: the dumps' ranks do not fit the layout, or hosts cannot hold the layout.
    """
    t0 = time.perf_counter()
    if hosts is None and layout is not None and ranks_per_host:
        hosts = hosts_from_dumps(dumps, layout.world_size, ranks_per_host)
    topology = Topology(layout, ranks_per_host, hosts) if layout is not None else None
    clusters = cluster(dumps, cluster_options)
    result = blame(clusters, topology, blame_options, expected_ranks=expected_ranks)
    progress = compare_samples(previous, dumps) if previous is not None else None
    return build_report(clusters, result, topology, progress=progress, elapsed_s=time.perf_counter() - t0)


def _ranks_text(ranks: Sequence[int]) -> str:
    return f"rank{'s' if len(ranks) != 1 else ''} {compact_ranges(ranks)}"


def compare_ranks(stacks_ranks: Sequence[int], fr_ranks: Sequence[int]) -> Agreement:
    """The :class:`Agreement` of two sets of ranks at fault (pure).

    Args:
        stacks_ranks: the ranks the stacks name.
        fr_ranks: the ranks the Flight Recorder names.

    Returns:
        The verdict, its line, and the ranks in common and apart.
    """
    st, fr = sorted(set(stacks_ranks)), sorted(set(fr_ranks))
    both = sorted(set(st) & set(fr))
    only_st = sorted(set(st) - set(fr))
    only_fr = sorted(set(fr) - set(st))
    if st and fr and not only_st and not only_fr:
        verdict, line = "agree", f"stacks and Flight Recorder agree on {_ranks_text(both)}"
    elif both:
        extra = [f"stacks also name {compact_ranges(only_st)}"] if only_st else []
        extra += [f"Flight Recorder also names {compact_ranges(only_fr)}"] if only_fr else []
        verdict = "overlap"
        line = f"stacks and Flight Recorder agree on {_ranks_text(both)} ({'; '.join(extra)})"
    elif st and fr:
        verdict = "disagree"
        line = f"disagree: stacks name {compact_ranges(st)}, Flight Recorder names {compact_ranges(fr)}"
    elif st:
        verdict, line = "stacks-only", f"only one source names a rank: stacks name {compact_ranges(st)}"
    elif fr:
        verdict = "flight-recorder-only"
        line = f"only one source names a rank: Flight Recorder names {compact_ranges(fr)}"
    else:
        verdict, line = "none", "neither stacks nor Flight Recorder names a rank"
    return Agreement(verdict, line, tuple(both), tuple(only_st), tuple(only_fr), tuple(st), tuple(fr))


def with_flight_recorder(
    report: StacksReport,
    analysis: FrAnalysis,
    *,
    files: Sequence[str],
    not_read: Sequence[tuple[str, str]] = (),
) -> StacksReport:
    """``report`` with the Flight Recorder section, the agreement and the worse of both statuses (pure).

    The summary gains the agreement's line; suspects, classes and every other field of the stacks
    stay as they were.

    Args:
        report: the stacks' report.
        analysis: :func:`robustctl.analysis.flightrec.analyze_dumps` of the same job's dumps.
        files: the Flight Recorder files read.
        not_read: ``(file, reason)`` of each Flight Recorder file that could not be loaded.

    Returns:
        The combined report.
    """
    fr_status = analysis.status
    if not_read and fr_status in (Status.OK, Status.WARNING):
        fr_status = Status.UNKNOWN
    culprits = tuple(sorted({s.rank for s in analysis.suspects if s.likely_culprit}))
    section = FlightRecorderSection(
        status=fr_status,
        summary=analysis.summary + (f"; {len(not_read)} file(s) not read" if not_read else ""),
        suspects=analysis.suspects,
        suspect_ranks=analysis.suspect_ranks,
        likely_culprits=culprits,
        chains=analysis.chains,
        ranks=compact_ranges(analysis.ranks),
        missing_dumps=compact_ranges(analysis.missing_dumps),
        blocked={str(k): v for k, v in analysis.blocked.items()},
        undecided=analysis.undecided,
        files=tuple(files),
        not_read=tuple({"file": f, "reason": r} for f, r in not_read),
        notes=analysis.notes,
    )
    agreement = compare_ranks(
        report.likely_culprits or report.suspect_ranks, culprits or analysis.suspect_ranks
    )
    return replace(
        report,
        status=Status.worst([report.status, fr_status]),
        summary=f"{report.summary}; {agreement.summary}",
        flight_recorder=section,
        agreement=agreement,
    )
