"""Live ``robustctl stacks``: collect a running job's stacks, then judge them.

Two modes, both built from the pure pipeline (:func:`~robustctl.stacks.result.analyze_stacks`,
:func:`~robustctl.stacks.failslow.vote`) over live collections
(:func:`~robustctl.stacks.collect.collect_stacks`):

- **hang** (default): ``samples`` collections ``interval_s`` apart; the last is clustered and blamed,
  the one before it tells a progressing job (most ranks changed stack) from a stuck one.
Each rank's main process is read through the in-job agent's debug server where it runs one, py-spy
otherwise (:mod:`robustctl.stacks.collect`); the ``--json`` document says which source read each
process. When the servers gave Flight Recorder traces with entries for every rank read, they are
analysed (:func:`robustctl.analysis.flightrec.analyze_dumps`) and joined to the stacks' verdict as
``analyze`` joins a directory's dumps (:func:`robustctl.stacks.result.with_flight_recorder`: the
``flight_recorder`` section and the ``agreement``).

- **fail-slow** (``--slow``): ``rounds`` collections ``interval_s`` apart, each clustered; the
  parallel group with the most outlier ranks in each round gets a vote, the group voted most often
  is the degrader (ByteRobust, arXiv 2509.16293 §5: 10 s × 5 rounds).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from robustctl.analysis.flightrec import FrDump, FrLoadError, load_dump
from robustctl.analysis.flightrec import analyze_dumps as analyze_fr_dumps
from robustctl.inventory.hostrange import compact_ranges
from robustctl.models import SCHEMA_VERSION, Status, to_jsonable
from robustctl.stacks.cluster import cluster
from robustctl.stacks.collect import DEBUG_SERVER, PY_SPY, CollectSettings, StackCollection, collect_stacks
from robustctl.stacks.failslow import FailSlowResult, vote
from robustctl.stacks.result import PROGRESS_FRACTION, StacksReport, analyze_stacks, with_flight_recorder

if TYPE_CHECKING:
    from robustctl.exit_codes import ExitCode
    from robustctl.inventory import Host, Job
    from robustctl.transport.pool import TransportPool


@dataclass(frozen=True)
class LiveStacks:
    """A live hang analysis: the report on the last sample plus what each collection got.

    Attributes:
        report: the verdict. collections: every collection, oldest first.

    What ``robustctl stacks`` recorded in the state store is not part of it: see
    :class:`robustctl.commands.stacks.StacksResult`.
    """

    report: StacksReport
    collections: tuple[StackCollection, ...]

    @property
    def exit_code(self) -> ExitCode:
        """The report's exit code (2 suspects, 1 ambiguous, 3 nothing could be read, 0 OK)."""
        return self.report.exit_code

    def to_json(self) -> dict[str, Any]:
        """The StacksReport fields plus ``collection`` (per host, per sample: with ``evidence``, the
        rank counts per source, and ``sources``, the source of each process) and ``evidence`` (the
        last sample's counts and line)."""
        doc: dict[str, Any] = to_jsonable(self.report)
        doc["collection"] = [
            {
                "started_at": c.started_at,
                "elapsed_s": c.elapsed_s,
                "missing_ranks": list(c.missing_ranks),
                "hosts": [h.as_dict() for h in c.hosts],
                "evidence": evidence_json(c),
                "sources": [x.as_dict() for x in c.sources],
            }
            for c in self.collections
        ]
        doc["evidence"] = evidence_json(self.collections[-1]) if self.collections else None
        return doc


def evidence_json(col: StackCollection) -> dict[str, Any]:
    """``{"debug_server": n, "py_spy": m, "fallback": {reason: count}, "summary": line}`` of the rank
    main processes of one collection.

    Args:
        col: the collection.

    Returns:
        The counts and :meth:`StackCollection.evidence_line`.
    """
    n = col.source_counts()
    fallback: dict[str, int] = {}
    for src in col.sources:
        if src.main and src.fallback_reason:
            fallback[src.fallback_reason] = fallback.get(src.fallback_reason, 0) + 1
    return {
        "debug_server": n.get(DEBUG_SERVER, 0),
        "py_spy": n.get(PY_SPY, 0),
        "fallback": fallback,
        "flight_recorder_traces": len(col.fr_traces),
        "summary": col.evidence_line(),
    }


def with_traces(report: StacksReport, col: StackCollection, job: Job) -> StacksReport:
    """``report`` joined with the Flight Recorder traces the ranks' debug servers gave (pure).

    Joined (:func:`~robustctl.stacks.result.with_flight_recorder`) only when a trace holds an entry
    (the ring is on: ``TORCH_FR_BUFFER_SIZE``), every rank read has a trace (a rank read by py-spy
    has none, and the analysis would name it missing), and the job is not seen running: the rings of
    a running job are caught mid-flight (ranks a collective or two apart), which the analysis reads
    as ranks waiting on each other. Running is what the stacks say: most ranks changed stack between
    the two samples (``PROGRESS_FRACTION``, as the verdict reads it), or, from one sample, no outlier
    at all. Otherwise ``report`` unchanged, with a note when traces with entries were left aside.

    Args:
        report: the stacks' report on ``col``.
        col: the collection.
        job: the job (layout, ranks per host).

    Returns:
        The report, with ``flight_recorder`` and ``agreement`` when joined.
    """
    if not col.fr_traces:
        return report
    dumps: list[FrDump] = []
    not_read: list[tuple[str, str]] = []
    for t in col.fr_traces:
        name = f"{t.host}:{t.pid}"
        base = f"rank{t.rank:05d}.json" if t.rank is not None else None
        try:
            dumps.append(load_dump(name, t.data, base=base))
        except FrLoadError as exc:
            not_read.append((name, str(exc)))
    if not any(d.entries for d in dumps):
        return report
    ranks = {d.rank for d in col.mains if d.rank is not None}
    traced = {d.rank for d in dumps if d.rank is not None}
    progress = report.progress
    if ranks - traced:
        bare = sorted(ranks - traced)
        note = (
            f"Flight Recorder traces of {len(traced)} of {len(ranks)} ranks left aside: "
            f"{'ranks' if len(bare) > 1 else 'rank'} {compact_ranges(bare)} "
            f"{'have' if len(bare) > 1 else 'has'} none (read by py-spy)"
        )
        return replace(report, notes=(*report.notes, note))
    if progress is not None and progress.compared > 0 and progress.changed_fraction > PROGRESS_FRACTION:
        note = "Flight Recorder traces left aside: the job is running (its rings were caught mid-flight)"
        return replace(report, notes=(*report.notes, note))
    if progress is None and report.status is Status.OK:
        note = (
            "Flight Recorder traces left aside: one sample with no outlier (take two to check a running job)"
        )
        return replace(report, notes=(*report.notes, note))
    analysis = analyze_fr_dumps(dumps, job.layout, job.ranks_per_host)
    files = [f"{t.host}:{t.pid}" for t in col.fr_traces]
    return with_flight_recorder(report, analysis, files=files, not_read=not_read)


@dataclass(frozen=True)
class LiveFailSlow:
    """A fail-slow vote over live rounds.

    Attributes:
        result: the vote. collections: one per round. status: CRITICAL when a degrader is named,
        WARNING when the vote is ambiguous, UNKNOWN when no round could be read, OK otherwise.
    """

    result: FailSlowResult
    collections: tuple[StackCollection, ...]
    status: Status

    @property
    def exit_code(self) -> ExitCode:
        """Exit code of :attr:`status`."""
        return self.status.exit_code

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document (``kind: "stacks-failslow"``)."""
        return {
            "kind": "stacks-failslow",
            "schema_version": SCHEMA_VERSION,
            "status": self.status.value,
            "exit_code": int(self.exit_code),
            "result": to_jsonable(self.result),
            "collection": [
                {"started_at": c.started_at, "elapsed_s": c.elapsed_s, "missing_ranks": list(c.missing_ranks)}
                for c in self.collections
            ],
        }


def _rounds(
    job: Job,
    pool: TransportPool,
    n: int,
    interval_s: float,
    hosts: Sequence[Host] | None,
    settings: CollectSettings,
    on_round: Callable[[int, StackCollection], None] | None,
) -> list[StackCollection]:
    out: list[StackCollection] = []
    for i in range(n):
        t0 = time.monotonic()
        col = collect_stacks(job, pool, hosts=hosts, settings=settings)
        out.append(col)
        if on_round is not None:
            on_round(i, col)
        if i + 1 < n:
            time.sleep(max(0.0, interval_s - (time.monotonic() - t0)))
    return out


def stacks_hang(
    job: Job,
    pool: TransportPool,
    *,
    hosts: Sequence[Host] | None = None,
    settings: CollectSettings | None = None,
    samples: int = 2,
    interval_s: float = 1.0,
    on_sample: Callable[[int, StackCollection], None] | None = None,
) -> LiveStacks:
    """Collect ``samples`` times (``interval_s`` apart, ≥ 1 sample) and judge the last sample.

    Args:
        job: the job (hosts in rank order, ``ranks_per_host``, layout, process spec).
        pool: transports to the hosts.
        hosts: only these hosts of the job (default: all of them).
        settings: how each collection runs (None: the defaults of :class:`CollectSettings`).
        samples: how many collections (fewer than 1 counts as 1); the one before the last tells a
            progressing job from a stuck one.
        interval_s: seconds from the start of one collection to the start of the next.
        on_sample: called with each sample's index (from 0) and its collection as it completes.

    Returns:
        The report on the last sample, with every collection, oldest first.

    Raises:
        ConfigError: the job has no ``process:`` spec.
        InventoryError: a host in ``hosts`` is not one of the job's.
        UsageError: dumps do not fit the layout.
    """
    settings = settings or CollectSettings()
    cols = _rounds(job, pool, max(1, samples), interval_s, hosts, settings, on_sample)
    last = cols[-1]
    report = analyze_stacks(
        last.dumps,
        layout=job.layout,
        ranks_per_host=job.ranks_per_host,
        hosts=[h.name for h in job.hosts],
        previous=cols[-2].dumps if len(cols) > 1 else None,
        expected_ranks=last.expected_ranks,
    )
    return LiveStacks(with_traces(report, last, job), tuple(cols))


def stacks_failslow(
    job: Job,
    pool: TransportPool,
    *,
    hosts: Sequence[Host] | None = None,
    settings: CollectSettings | None = None,
    rounds: int = 5,
    interval_s: float = 10.0,
    on_round: Callable[[int, StackCollection], None] | None = None,
) -> LiveFailSlow:
    """Fail-slow voting over ``rounds`` live collections ``interval_s`` apart.

    Args:
        job: the job (hosts in rank order, ``ranks_per_host``, layout, process spec).
        pool: transports to the hosts.
        hosts: only these hosts of the job (default: all of them).
        settings: how each collection runs (None: the defaults of :class:`CollectSettings`).
        rounds: how many collections vote (fewer than 1 counts as 1).
        interval_s: seconds from the start of one collection to the start of the next.
        on_round: called with each round's index (from 0) and its collection as it completes.

    Returns:
        The vote, one collection per round, and the status (CRITICAL: a degrader is named).

    Raises:
        ConfigError: the job has no ``process:`` spec.
        InventoryError: a host in ``hosts`` is not one of the job's.
        UsageError: dumps do not fit the layout.
    """
    from robustctl.inventory.topology import Topology

    settings = settings or CollectSettings()
    cols = _rounds(job, pool, max(1, rounds), interval_s, hosts, settings, on_round)
    topo = Topology(job.layout, job.ranks_per_host, [h.name for h in job.hosts])
    readable = [c for c in cols if any(d.error is None for d in c.dumps)]
    result = vote([cluster(c.dumps) for c in cols], topo)
    if not readable:
        status = Status.UNKNOWN
    elif result.degrader is not None:
        status = Status.CRITICAL
    elif result.ambiguous:
        status = Status.WARNING
    else:
        status = Status.OK
    return LiveFailSlow(result, tuple(cols), status)
