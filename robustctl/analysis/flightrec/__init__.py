"""PyTorch Flight Recorder dumps: which rank every other rank waits on, and who called the odd collective.

PyTorch's Flight Recorder (``torch/distributed/flight_recorder/``; on with ``TORCH_FR_BUFFER_SIZE``,
formerly ``TORCH_NCCL_TRACE_BUFFER_SIZE``) keeps each rank's last N collectives. A rank's dump is a
pickle (``torch._C._distributed_c10d._dump_fr_trace()``, what ProcessGroupNCCL writes on a timeout to
``TORCH_FR_DUMP_TEMP_FILE<rank>``, by default ``/tmp/nccl_trace_rank_<rank>``) or JSON
(``_dump_fr_trace_json()``, the debug server's ``fr_trace_json``) of a dict: ``version``,
``pg_config`` (process group name → ``{name, desc, ranks}``; gloo leaves it empty: one entry with
``ranks: "[]"``), ``pg_status`` and ``entries``, each with ``record_id``, ``pg_id``,
``process_group`` ``(name, desc)``, ``collective_seq_id``, ``p2p_seq_id``, ``op_id``,
``profiling_name`` (``"nccl:all_reduce"``, ``"gloo:broadcast"``, ``"nccl:send 0->1"``),
``input_sizes``, ``output_sizes``, ``input_dtypes``, ``state`` (``scheduled``/``started``/
``completed``), ``retired``, ``time_created_ns`` and ``frames``. Torch 2.13's gloo backend records
collectives but no point-to-point operation, never moves ``state`` past ``scheduled`` and marks a
finished collective ``retired``; an entry is *complete* when its state is ``completed`` or it is
retired.

The analysis (:func:`analyze_dumps`), all of it a pure function of the dumps:

1. **Loading** (:func:`load_dump`): JSON, or pickle through an unpickler that admits no class or
   function at all (plain containers and scalars only: a pickle from a host never runs code);
   bounded by :data:`MAX_DUMP_BYTES` and :data:`MAX_ENTRIES`. The rank comes from the dump's
   ``rank`` field, else the file name as torch names it (``nccl_trace_rank_3``, ``rank3.json``).
2. **Groups**: each process group's ranks come from ``pg_config``; when it is empty (gloo), from
   the job's layout (the group of the layout kind the group's description names, Megatron's
   ``TENSOR_MODEL_PARALLEL_GROUP`` → tp, else the smallest layout group holding every rank that
   recorded it); without a layout, the ranks that recorded it (the default group: every rank).
3. **Votes**: per (group, collective sequence number) a majority over the member ranks of op, then
   sizes, then dtypes: the ranks off the majority are the odd ones, whatever order the dumps were
   read in; a tie names nobody and says so. Only the first mismatch of a group is a suspect (the
   later ones follow from it). With a layout the electorate is wider: the groups of one kind in the
   same pipeline stages (every DP group of stage 1, every TP group of stage 0) run the same schedule,
   so where a group's own vote ties (a 2-rank DP group) or is unanimous, its rank off a strict
   majority of all those groups' members at the same sequence number is named
   (:func:`~robustctl.analysis.flightrec.groups.comparable_groups`, ``votes.wide_vote``).
4. **Waits-for**: rank A waits on rank B when A's oldest incomplete operation, in group G, is one B
   never reached (B's last sequence number in G is behind, or B left no dump). The ends of the
   chains, ranks that wait on nobody, are the roots (a rank stuck in another group's collective
   waits on someone there, so the chain goes on through it). The longest chain to each root is the
   evidence; ranks that only wait on each other are a cycle, reported as one. Inside a cycle the
   rank that skipped a collective is the likely culprit: it is behind in a group where a peer
   waits, yet since its last entry there it completed more collectives elsewhere than that peer
   did before entering the one it waits in (``waits.find_skips``).
5. **Roots explained**: a root with nothing pending is *idle in Flight Recorder* (blocked outside
   any recorded collective: compute, the data loader, or a send/recv gloo does not record); a
   root blocked in the collective a decided mismatch names someone else in is that mismatch's
   victim; where a desync (mismatch or skip) is found and the backend recorded no send/recv, idle
   roots may wait on an unrecorded pipeline send/recv from the stopped ranks. Neither is a likely
   culprit then; every likely culprit comes first among the suspects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any, Protocol

from robustctl.analysis import Finding, Verdict, sort_findings
from robustctl.analysis.flightrec.groups import (
    RankView,
    build_groups,
    class_label,
    comparable_groups,
    desc_kind,
    what,
)
from robustctl.analysis.flightrec.load import (
    MAX_DUMP_BYTES,
    MAX_ENTRIES,
    MAX_SIZES,
    FrDump,
    FrEntry,
    FrLoadError,
    claim,
    is_pickle,
    load_dump,
    rank_from_name,
)
from robustctl.analysis.flightrec.model import (
    MAX_CHAIN_HOPS,
    MAX_CHAINS,
    MAX_LISTED,
    FrAnalysis,
    FrChain,
    FrGroup,
    FrHop,
    FrMismatch,
    FrSuspect,
)
from robustctl.analysis.flightrec.votes import first_mismatches
from robustctl.analysis.flightrec.waits import (
    Skip,
    WaitGraph,
    chain_of,
    find_cycles,
    find_skips,
    path_to,
    reverse_bfs,
    short,
    waits_for,
)
from robustctl.inventory.hostrange import compact_ranges
from robustctl.inventory.topology import Topology
from robustctl.models import Status

if TYPE_CHECKING:
    from robustctl.config import ParallelLayout

__all__ = [
    "MAX_CHAIN_HOPS",
    "MAX_DUMP_BYTES",
    "MAX_ENTRIES",
    "MAX_SIZES",
    "FrAnalysis",
    "FrChain",
    "FrDump",
    "FrEntry",
    "FrGroup",
    "FrHop",
    "FrLoadError",
    "FrMismatch",
    "FrSuspect",
    "analyze_dumps",
    "analyze_members",
    "claim",
    "desc_kind",
    "evaluate_members",
    "is_pickle",
    "load_dump",
    "rank_from_name",
    "to_verdict",
]


# --- the analysis --------------------------------------------------------------------------------


class _Placer:
    """Host and machine of a rank, from the topology when ranks per host is known."""

    def __init__(self, topo: Topology | None) -> None:
        self.topo = topo

    def where(self, rank: int) -> tuple[str | None, int | None]:
        """The rank's host and machine index (``None, None`` when not known)."""
        if self.topo is None or self.topo.ranks_per_host is None or not 0 <= rank < self.topo.world_size:
            return None, None
        return self.topo.host_of(rank), self.topo.machine_of(rank)


def _pick_dumps(dumps: Sequence[FrDump]) -> tuple[dict[int, FrDump], list[str]]:
    """One dump per rank, chosen the same whatever the input order: the most entries, then the
    pickle (torch's own dump), then the name."""
    by_rank: dict[int, list[FrDump]] = {}
    notes: list[str] = []
    for d in dumps:
        if d.rank is None:
            notes.append(f"{d.name}: no rank in the dump or its file name; not used")
        else:
            by_rank.setdefault(d.rank, []).append(d)
    chosen: dict[int, FrDump] = {}
    doubled: list[int] = []
    for rank in sorted(by_rank):
        ds = sorted(by_rank[rank], key=lambda d: (-len(d.entries), d.format != "pickle", d.name))
        chosen[rank] = ds[0]
        if len(ds) > 1:
            doubled.append(rank)
    notes.sort()
    if doubled:
        notes.append(
            f"rank(s) {compact_ranges(doubled)}: more than one dump (e.g. pickle and JSON side by side); "
            "used the one with the most entries, the pickle on a tie"
        )
    return chosen, notes


def _root_suspects(
    graph: WaitGraph,
    views: Mapping[int, RankView],
    groups: Mapping[str, FrGroup],
    placer: _Placer,
) -> tuple[list[FrSuspect], list[FrChain], set[int]]:
    """The ends of the waits (roots and missing ranks) with their chains; and the ranks reaching one."""
    redges: dict[int, list[int]] = {}
    for a, bs in graph.edges.items():
        for b in bs:
            redges.setdefault(b, []).append(a)
    ends = sorted({b for bs in graph.edges.values() for b in bs if b not in graph.edges})
    found: list[tuple[int, FrSuspect, FrChain]] = []
    reached: set[int] = set()
    for end in ends:
        dist = reverse_bfs(end, redges)
        reached.update(dist)
        direct = sorted(redges.get(end, ()))
        first = views[direct[0]].blocked
        assert first is not None  # a direct waiter is blocked
        g = groups.get(first.pg_name)
        chain = chain_of(path_to(end, dist, graph.edges), views, groups)
        missing = end not in views
        waited = [
            {"rank": a, "waits_in": what(views[a].blocked, groups), "because": graph.why[(a, end)]}  # type: ignore[arg-type]
            for a in direct[:MAX_LISTED]
        ]
        end_hop = chain.hops[-1]
        state = "left no dump" if missing else "waits on nobody"
        reason = (
            f"root of the waits: {len(dist) - 1} rank(s) wait on it and it {state}; rank {direct[0]} waits "
            f"in {what(first, groups)}, {graph.why[(direct[0], end)]}; chain {short(chain)}"
        )
        host, machine = placer.where(end)
        suspect = FrSuspect(
            rank=end,
            host=host,
            machine=machine,
            process_group=first.pg_name,
            group_desc=g.desc if g is not None else first.pg_desc,
            kind="missing" if missing else "root",
            reason=reason,
            waiters=len(dist) - 1,
            direct=len(direct),
            evidence={"waited_on_by": waited, "chain": chain.text, "state": end_hop.what},
        )
        found.append((len(dist) - 1, suspect, chain))
    found.sort(key=lambda t: (-t[0], t[1].rank))
    return [s for _, s, _ in found], [c for _, _, c in found][:MAX_CHAINS], reached


_FIELD_WORD = {"op": "op type", "sizes": "size", "dtypes": "dtype"}


def _mismatch_reason(m: FrMismatch, rank: int, label: str) -> str:
    """One line: the group's own majority, or the comparable groups' (with the element counts)."""
    head = f"{_FIELD_WORD[m.field]} mismatch at collective #{m.seq} in {label}: it called {m.values[rank]}"
    if m.electorate is None:
        return f"{head} where {len(m.values) - len(m.odd_ranks)} rank(s) called {m.majority}"
    if m.field == "sizes" and rank in m.numel:
        head += f" (numel {m.numel[rank]})"
        used = f"used {m.majority} (numel {m.majority_numel})"
    else:
        used = f"called {m.majority}"
    own = "a tie" if len(m.odd_ranks) < len(m.values) else "unanimous"
    return f"{head} where {m.agreeing} of {m.voters} members of {m.electorate} {used} (its group's own vote: {own})"


def _electorate_evidence(m: FrMismatch, rank: int) -> dict[str, Any]:
    """The wider vote's numbers, for a mismatch the comparable groups decided."""
    if m.electorate is None:
        return {}
    out: dict[str, Any] = {"electorate": m.electorate, "voters": m.voters, "agreeing": m.agreeing}
    if rank in m.numel:
        out.update(numel=m.numel[rank], majority_numel=m.majority_numel)
    return out


def _mismatch_suspects(mismatches: Sequence[FrMismatch], placer: _Placer) -> list[FrSuspect]:
    out: list[FrSuspect] = []
    for m in mismatches:
        if not m.decided:
            continue
        label = f"{m.desc} {m.group}" if m.desc and m.desc != "undefined" else f"group {m.group}"
        for r in m.odd_ranks[:MAX_LISTED]:
            host, machine = placer.where(r)
            out.append(
                FrSuspect(
                    rank=r,
                    host=host,
                    machine=machine,
                    process_group=m.group,
                    group_desc=m.desc,
                    kind="mismatch",
                    reason=_mismatch_reason(m, r, label),
                    evidence={
                        "seq": m.seq,
                        "field": m.field,
                        "majority": m.majority,
                        "value": m.values[r],
                        "values": {str(k): v for k, v in list(m.values.items())[:MAX_LISTED]},
                        **_electorate_evidence(m, r),
                    },
                )
            )
    return out


def _skip_suspect(
    skip: Skip, cyc: Sequence[int], chain: FrChain, groups: Mapping[str, FrGroup], placer: _Placer
) -> FrSuspect:
    """The likely culprit of a cycle: the rank that moved on past a collective its peers wait in."""
    g = groups.get(skip.group)
    label = g.label if g is not None else f"group {skip.group}"
    host, machine = placer.where(skip.rank)
    reason = (
        f"skipped collective #{skip.seq} in {label}: its last there is #{skip.last}, and since then it "
        f"completed {skip.moved_on} collective(s) in other groups (last {what(skip.latest, groups)}), "
        f"more than the {skip.baseline} rank {skip.waiter} did between #{skip.last} and #{skip.seq} "
        f"before waiting in #{skip.seq}; the likely culprit of the deadlock of ranks {compact_ranges(cyc)} "
        f"({chain.text})"
    )
    return FrSuspect(
        rank=skip.rank,
        host=host,
        machine=machine,
        process_group=skip.group,
        group_desc=g.desc if g is not None else None,
        kind="skip",
        reason=reason,
        waiters=len(cyc) - 1,
        evidence={
            "seq": skip.seq,
            "last": skip.last,
            "moved_on": skip.moved_on,
            "baseline": skip.baseline,
            "waiter": skip.waiter,
            "went_on_to": what(skip.latest, groups),
            "cycle": list(cyc),
            "chain": chain.text,
        },
    )


def _cycle_results(
    cycles: Sequence[Sequence[int]],
    graph: WaitGraph,
    views: Mapping[int, RankView],
    groups: Mapping[str, FrGroup],
    placer: _Placer,
) -> tuple[list[FrSuspect], list[FrChain]]:
    suspects: list[FrSuspect] = []
    chains: list[FrChain] = []
    for cyc in cycles:
        chain = chain_of([*cyc, cyc[0]], views, groups)
        chains.append(chain)
        skips = find_skips(cyc, graph, views)
        for skip in skips:
            suspects.append(_skip_suspect(skip, cyc, chain, groups, placer))
        skippers = {s.rank for s in skips}
        for r in (r for r in cyc if r not in skippers):
            e = views[r].blocked
            host, machine = placer.where(r)
            suspects.append(
                FrSuspect(
                    rank=r,
                    host=host,
                    machine=machine,
                    process_group=e.pg_name if e is not None else None,
                    group_desc=e.pg_desc if e is not None else None,
                    kind="cycle",
                    reason=f"deadlock: ranks {compact_ranges(cyc)} wait only on each other ({chain.text})",
                    evidence={"cycle": list(cyc), "chain": chain.text},
                    likely_culprit=False,
                )
            )
    return suspects, chains


def analyze_dumps(
    dumps: Sequence[FrDump],
    layout: ParallelLayout | None = None,
    ranks_per_host: int | None = None,
) -> FrAnalysis:
    """Analyse one job's Flight Recorder dumps (see the module docstring): votes, missing ranks,
    the waits-for root across groups.

    The result does not depend on the order of ``dumps``. Pure; linear in the entries plus the
    members of the groups the blocked ranks wait in.

    Args:
        dumps: one or more dumps per rank (duplicates: one is used, see ``notes``).
        layout: the job's parallel layout, to rebuild empty ``pg_config`` (gloo) and to know the
            world size; ``None``: unknown.
        ranks_per_host: ranks per machine, to name each suspect's machine; ``None``: unknown.

    Returns:
        The analysis; status UNKNOWN when no dump carries a rank.

    Raises:
        UsageError: ``ranks_per_host`` below 1.
    """
    chosen, notes = _pick_dumps(dumps)
    if not chosen:
        return FrAnalysis(Status.UNKNOWN, "no Flight Recorder dump with a rank", notes=tuple(notes))
    topo = Topology(layout, ranks_per_host) if layout is not None else None
    world = topo.world_size if topo is not None else max(chosen) + 1
    outside = [r for r in chosen if r >= world]
    if outside:
        notes.append(f"rank(s) {compact_ranges(outside)} outside the layout's {world} ranks")
    groups, group_notes = build_groups(chosen, topo, max(world, max(chosen) + 1))
    notes.extend(group_notes)
    views = {r: RankView.of(d) for r, d in chosen.items()}
    expected = set(range(world)) if topo is not None else {r for g in groups.values() for r in g.ranks}
    missing = tuple(sorted(expected - set(chosen)))
    placer = _Placer(topo)
    graph = waits_for(views, groups)
    roots, chains, reached = _root_suspects(graph, views, groups, placer)
    cycles = find_cycles(graph, reached)
    cyc_suspects, cyc_chains = _cycle_results(cycles, graph, views, groups, placer)
    classes = comparable_groups(groups, topo)
    labels = {n: class_label(c, groups, topo) for n, c in classes.items()} if topo is not None else {}
    stuck = any(v.blocked is not None for v in views.values())
    mismatches = first_mismatches(views, groups, classes, labels, stuck)
    mismatch_suspects = _mismatch_suspects(mismatches, placer)
    p2p_recorded = any(e.is_p2p for d in chosen.values() for e in d.entries)
    desync = [s for s in [*mismatch_suspects, *cyc_suspects] if s.kind in ("mismatch", "skip")]
    roots, root_notes = _settle_roots(roots, views, groups, mismatches, desync, p2p_recorded)
    notes.extend(root_notes)
    found = [*roots, *mismatch_suspects, *cyc_suspects]
    suspects = sorted(found, key=lambda s: not s.likely_culprit)  # stable: each kind's order kept
    blocked = {r: what(v.blocked, groups) for r, v in views.items() if v.blocked is not None}
    undecided = _undecided(graph, blocked, suspects, mismatches)
    if graph.unplaced:
        notes.append(
            f"rank(s) {compact_ranges(graph.unplaced)}: blocked in a p2p operation whose peer is unknown"
        )
    status, summary = _judge(
        suspects, chains + cyc_chains, mismatches, blocked, missing, undecided, len(chosen), bool(root_notes)
    )
    return FrAnalysis(
        status=status,
        summary=summary,
        suspects=tuple(suspects),
        chains=tuple(chains + cyc_chains),
        mismatches=tuple(mismatches),
        groups=tuple(groups.values()),
        ranks=tuple(sorted(chosen)),
        missing_dumps=missing,
        blocked=blocked,
        undecided=undecided,
        notes=tuple(notes[:MAX_LISTED]),
    )


def _settle_roots(
    roots: Sequence[FrSuspect],
    views: Mapping[int, RankView],
    groups: Mapping[str, FrGroup],
    mismatches: Sequence[FrMismatch],
    desync: Sequence[FrSuspect],
    p2p_recorded: bool,
) -> tuple[list[FrSuspect], list[str]]:
    """Roots with what Flight Recorder can say of them: a root with nothing pending is *idle in Flight
    Recorder* (blocked outside any recorded collective); a root blocked in the very collective a
    decided mismatch names someone else in waits for that rank; and where a desync (a mismatch or a
    skipped collective) explains the hang and the backend recorded no send/recv, idle roots may wait
    on an unrecorded pipeline send/recv. The last two are not likely culprits.

    Args:
        roots: the roots, from ``_root_suspects``.
        views: each rank's entries.
        groups: the groups by name.
        mismatches: the groups' first mismatches.
        desync: the suspects of a mismatch or a skipped collective.
        p2p_recorded: some dump holds a send/recv entry.

    Returns:
        The roots, and notes for the analysis.
    """
    odd_at = {(m.group, m.seq): m for m in mismatches if m.decided}
    culprits = compact_ranges(sorted({s.rank for s in desync}))
    out: list[FrSuspect] = []
    idle: list[int] = []
    for s in roots:
        v = views.get(s.rank)
        if s.kind != "root" or v is None:
            out.append(s)
            continue
        e = v.blocked
        if e is not None:
            m = odd_at.get((e.pg_name, e.seq))
            if m is not None and s.rank not in m.odd_ranks:
                reason = (
                    f"{s.reason}; it waits in the mismatched collective #{m.seq} (rank(s) "
                    f"{compact_ranges(m.odd_ranks)} called it differently): a victim of that mismatch"
                )
                out.append(replace(s, reason=reason, likely_culprit=False))
            else:
                out.append(s)
            continue
        idle.append(s.rank)
        last = (
            f"last recorded: {what(v.latest, groups)}, complete"
            if v.latest is not None
            else "nothing recorded"
        )
        reason = (
            f"{s.reason}; idle in Flight Recorder: nothing pending ({last}): blocked outside any recorded "
            "collective (compute, data loader, or a p2p the backend does not record)"
        )
        evidence = {**s.evidence, "idle": True}
        if desync and not p2p_recorded:
            reason += (
                f"; the desync of rank(s) {culprits} explains the hang, and this backend records no send/recv: "
                "it may wait on a pipeline send/recv from the ranks that desync stopped"
            )
            out.append(replace(s, reason=reason, evidence=evidence, likely_culprit=False))
        else:
            out.append(replace(s, reason=reason, evidence=evidence))
    notes: list[str] = []
    if idle and len(idle) == sum(1 for s in roots if s.kind == "root") and not p2p_recorded:
        notes.append(
            f"every root (rank(s) {compact_ranges(idle)}) is idle in Flight Recorder and the backend recorded "
            "no send/recv at all: the roots may be waiting on an unrecorded pipeline send/recv"
        )
    return out, notes


def _undecided(
    graph: WaitGraph,
    blocked: Mapping[int, str],
    suspects: Sequence[FrSuspect],
    mismatches: Sequence[FrMismatch],
) -> str | None:
    if not blocked or suspects:
        return None
    tie = next((m for m in mismatches if not m.decided), None)
    if tie is not None:
        return (
            f"{tie.field} mismatch at collective #{tie.seq} in group {tie.group} without a majority "
            f"(ranks {compact_ranges(tie.odd_ranks)}): the dumps cannot say which side is wrong"
        )
    if graph.complete_calls:
        r = min(graph.complete_calls)
        return (
            f"every member entered the blocked collective (rank {r}: {graph.complete_calls[r]}): stuck inside "
            "the collective (network or communication library), not waiting on a rank"
        )
    return "the blocked ranks' peers are unknown: give --layout"


def _judge(
    suspects: Sequence[FrSuspect],
    chains: Sequence[FrChain],
    mismatches: Sequence[FrMismatch],
    blocked: Mapping[int, str],
    missing: Sequence[int],
    undecided: str | None,
    n_ranks: int,
    unrecorded_p2p: bool = False,
) -> tuple[Status, str]:
    head = f"Flight Recorder, {n_ranks} rank{'s' if n_ranks != 1 else ''}"
    if suspects:
        top = suspects[0]
        if top.kind in ("root", "missing"):
            state_word = "left no dump" if top.kind == "missing" else "waits on nobody"
            text = f"rank {top.rank} is the root: {top.waiters} rank(s) wait on it and it {state_word}"
            if chains and len(chains[0].hops) > 2:
                text += f" (chain {short(chains[0])})"
            if top.evidence.get("idle"):
                text += "; idle in Flight Recorder (nothing pending)"
                if unrecorded_p2p:
                    text += ": every root is, and the backend records no send/recv, so it may wait on a pipeline send/recv"
        elif top.kind in ("mismatch", "skip"):
            text = f"rank {top.rank}: {top.reason}"
        else:
            text = top.reason
        return Status.CRITICAL, f"{head}: {text}"
    if undecided is not None:
        return Status.WARNING, f"{head}: {len(blocked)} rank(s) blocked; {undecided}"
    if missing:
        return Status.WARNING, f"{head}: nothing blocked, but rank(s) {compact_ranges(missing)} left no dump"
    if mismatches:
        return Status.WARNING, f"{head}: mismatch without a majority in group {mismatches[0].group}"
    return Status.OK, f"{head}: no operation blocked, no mismatch"


# --- analyze's group kind --------------------------------------------------------------------------


class NamedBytes(Protocol):
    """A file handed to :func:`evaluate_members` (``analyze``'s ``GroupMember``)."""

    @property
    def name(self) -> str:
        """What reports call the file."""

    @property
    def base(self) -> str:
        """The file's own name."""

    @property
    def data(self) -> bytes:
        """Its bytes (decompressed)."""


def to_verdict(analysis: FrAnalysis, unloaded: Iterable[tuple[str, str]] = ()) -> Verdict:
    """The ``analyze`` verdict of an analysis: one finding per suspect (CRITICAL), per undecided
    mismatch or blocked state (WARNING), per missing dump (WARNING) and per file not loaded (UNKNOWN).

    Args:
        analysis: from :func:`analyze_dumps`.
        unloaded: ``(file, reason)`` of the files :func:`load_dump` refused.

    Returns:
        The verdict; its details hold the analysis as JSON-ready data.
    """
    findings: list[Finding] = []
    for s in analysis.suspects[:MAX_LISTED]:
        where = f" on {s.host}" if s.host else ""
        findings.append(Finding(Status.CRITICAL, f"rank {s.rank}{where}: {s.reason}", asdict(s), device=None))
    rest = analysis.suspects[MAX_LISTED:]
    if rest:
        ranks = compact_ranges(s.rank for s in rest)
        findings.append(
            Finding(Status.CRITICAL, f"{len(rest)} more suspect(s): rank(s) {ranks}", {"ranks": ranks})
        )
    for m in analysis.mismatches:
        if not m.decided:
            findings.append(
                Finding(
                    Status.WARNING,
                    f"{m.field} mismatch without a majority in group {m.group} #{m.seq}",
                    asdict(m),
                )
            )
    if analysis.undecided:
        findings.append(Finding(Status.WARNING, analysis.undecided, {"blocked": dict(analysis.blocked)}))
    if analysis.missing_dumps:
        ranks = compact_ranges(analysis.missing_dumps)
        findings.append(Finding(Status.WARNING, f"rank(s) {ranks} left no dump", {"ranks": ranks}))
    bad = list(unloaded)
    for name, reason in bad[:MAX_LISTED]:
        findings.append(Finding(Status.UNKNOWN, reason, {"file": name}))
    status = analysis.status
    if bad and status in (Status.OK, Status.WARNING):
        status = Status.worst([status, Status.UNKNOWN])
    summary = analysis.summary
    if bad:
        summary += f"; {len(bad)} file(s) not read"
    details = {
        "ranks": compact_ranges(analysis.ranks),
        "missing_dumps": compact_ranges(analysis.missing_dumps),
        "suspects": [asdict(s) for s in analysis.suspects],
        "chains": [asdict(c) for c in analysis.chains],
        "mismatches": [asdict(m) for m in analysis.mismatches],
        "groups": [{**asdict(g), "ranks": compact_ranges(g.ranks)} for g in analysis.groups],
        "blocked": {str(k): v for k, v in analysis.blocked.items()},
        "undecided": analysis.undecided,
        "notes": list(analysis.notes),
        "not_read": [{"file": n, "reason": r} for n, r in bad[:MAX_LISTED]],
    }
    return Verdict(status, summary, sort_findings(findings), _jsonable(details))


def _jsonable(value: Any) -> Any:
    """Tuples as lists and mapping keys as strings, for the ``--json`` document."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def evaluate_members(
    members: Sequence[NamedBytes], layout: ParallelLayout | None = None, ranks_per_host: int | None = None
) -> Verdict:
    """``analyze``'s group kind: load every claimed file and analyse them together. Never raises for a
    bad file (it is a finding).

    Args:
        members: the claimed files.
        layout: the job's layout (``--layout``), when given.
        ranks_per_host: ranks per machine (``-G``), when given.

    Returns:
        The verdict (:func:`to_verdict`).
    """
    dumps: list[FrDump] = []
    unloaded: list[tuple[str, str]] = []
    for m in members:
        try:
            dumps.append(load_dump(m.name, m.data, base=m.base))
        except FrLoadError as exc:
            unloaded.append((m.name, str(exc)))
    return to_verdict(analyze_dumps(dumps, layout, ranks_per_host), unloaded)


class GroupOptions(Protocol):
    """What :func:`analyze_members` reads from ``analyze``'s options."""

    @property
    def layout(self) -> ParallelLayout | None:
        """The job's layout (``--layout``), when given."""

    @property
    def ranks_per_host(self) -> int | None:
        """Ranks per machine (``-G``), when given."""


def analyze_members(members: Sequence[NamedBytes], options: GroupOptions) -> Verdict:
    """``analyze``'s group kind entry point: :func:`evaluate_members` with the layout and ranks per host
    of ``options``.

    Args:
        members: the claimed files.
        options: ``analyze``'s options (``AnalysisOptions``).

    Returns:
        The verdict.
    """
    return evaluate_members(members, options.layout, options.ranks_per_host)
