"""The waits-for graph: who waits on whom, its roots, cycles and chains."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from robustctl.analysis.flightrec.groups import RankView, peers, what
from robustctl.analysis.flightrec.load import FrEntry
from robustctl.analysis.flightrec.model import MAX_CHAIN_HOPS, FrChain, FrGroup, FrHop

# --- waits-for -----------------------------------------------------------------------------------


@dataclass
class WaitGraph:
    """Rank A → B when A waits on B (``edges``), with why (``why``); ranks blocked in an operation every
    peer entered (``complete_calls``) and blocked ranks whose peers are unknown (``unplaced``)."""

    edges: dict[int, list[int]] = field(default_factory=dict)
    why: dict[tuple[int, int], str] = field(default_factory=dict)
    complete_calls: dict[int, str] = field(default_factory=dict)  # rank -> blocked op every peer entered
    unplaced: list[int] = field(default_factory=list)  # blocked ranks whose peers are unknown


def waits_for(views: Mapping[int, RankView], groups: Mapping[str, FrGroup]) -> WaitGraph:
    """Rank A → B when A's oldest incomplete operation is one B never reached (or B left no dump)."""
    graph = WaitGraph()
    for rank in sorted(views):
        e = views[rank].blocked
        if e is None:
            continue
        group = groups.get(e.pg_name)
        needed = peers(e, group, rank)
        if needed is None:
            graph.unplaced.append(rank)
            continue
        out: list[int] = []
        for b in needed:
            bv = views.get(b)
            if bv is None:
                out.append(b)
                graph.why[(rank, b)] = f"rank {b} left no dump"
                continue
            last = bv.last.get((e.pg_name, e.is_p2p), 0)
            if last < e.seq:
                out.append(b)
                kind = "p2p operation" if e.is_p2p else "collective"
                graph.why[(rank, b)] = (
                    f"rank {b}'s last {kind} there is #{last}" if last else f"rank {b} recorded none there"
                )
        if out:
            graph.edges[rank] = out
        else:
            graph.complete_calls[rank] = what(e, groups)
    return graph


def reverse_bfs(end: int, redges: Mapping[int, Sequence[int]]) -> dict[int, int]:
    """Distance (in waits) to ``end`` of every rank that waits on it, directly or through others."""
    dist = {end: 0}
    queue = deque([end])
    while queue:
        b = queue.popleft()
        for a in redges.get(b, ()):
            if a not in dist:
                dist[a] = dist[b] + 1
                queue.append(a)
    return dist


def find_cycles(graph: WaitGraph, reached: set[int]) -> list[list[int]]:
    """Sets of waiting ranks that reach no end: walk the first edge until a rank repeats (each
    such rank waits on another of them, so every walk ends in a cycle); each cycle once."""
    cycles: list[list[int]] = []
    done: set[int] = set()
    for start in sorted(graph.edges):
        if start in reached or start in done:
            continue
        path: list[int] = []
        pos: dict[int, int] = {}
        node: int | None = start
        while node is not None and node not in pos and node not in done:
            pos[node] = len(path)
            path.append(node)
            nxt = [b for b in graph.edges.get(node, ()) if b not in reached]
            node = min(nxt) if nxt else None
        if node is not None and node in pos:
            cycles.append(path[pos[node] :])
        done.update(path)
    return cycles


def chain_of(path: Sequence[int], views: Mapping[int, RankView], groups: Mapping[str, FrGroup]) -> FrChain:
    """The hops of ``path`` (the last hop the end, or for a cycle the first rank again)."""
    truncated = max(0, len(path) - MAX_CHAIN_HOPS)
    hops: list[FrHop] = []
    for r in path[truncated:]:
        v = views.get(r)
        if v is None:
            hops.append(FrHop(r, "no dump", "no dump"))
        elif v.blocked is not None:
            hops.append(FrHop(r, "waiting", what(v.blocked, groups), v.blocked.frame))
        elif v.latest is not None:
            hops.append(
                FrHop(r, "not waiting", f"last recorded: {what(v.latest, groups)}, complete", v.latest.frame)
            )
        else:
            hops.append(FrHop(r, "not waiting", "no operation recorded"))
    parts = [
        f"rank {h.rank} [{h.what}]" if h.state == "waiting" else f"rank {h.rank} ({h.what})" for h in hops
    ]
    text = ("… → " if truncated else "") + " → ".join(parts)
    return FrChain(tuple(hops), truncated, text)


def short(chain: FrChain) -> str:
    """``"rank 2 → rank 3 → rank 1"``."""
    return ("… → " if chain.truncated else "") + " → ".join(f"rank {h.rank}" for h in chain.hops)


def path_to(end: int, dist: Mapping[int, int], edges: Mapping[int, Sequence[int]]) -> list[int]:
    """The longest chain of waits to ``end``: from the farthest waiter (lowest rank among them)."""
    far = max(dist.values())
    node = min(r for r, d in dist.items() if d == far)
    path = [node]
    while node != end:
        node = min(b for b in edges.get(node, ()) if dist.get(b) == dist[node] - 1)
        path.append(node)
    return path


# --- a desync inside a cycle -----------------------------------------------------------------------


@dataclass(frozen=True)
class Skip:
    """A rank that moved on past a collective its peers wait in: the likely culprit of a cycle.

    Attributes:
        rank: the rank. group: the group of the collective it skipped. seq: the sequence number its
            peers wait in there. last: its own last sequence number there (behind ``seq``).
        moved_on: collectives it completed in other groups after its last entry in ``group``.
        baseline: the most that a waiting peer completed in other groups between that same sequence
            number and entering ``seq`` (what the schedule has between the two).
        waiter: that peer. latest: its last completed entry elsewhere (where it went on to).
    """

    rank: int
    group: str
    seq: int
    last: int
    moved_on: int
    baseline: int
    waiter: int
    latest: FrEntry


def _index(entries: Sequence[FrEntry], group: str, seq: int) -> int | None:
    """Position of the last collective entry of ``group`` numbered ``seq`` (record order)."""
    for i in range(len(entries) - 1, -1, -1):
        e = entries[i]
        if e.pg_name == group and not e.is_p2p and e.seq == seq:
            return i
    return None


def _skip_of(b: int, bv: RankView, waiters: Sequence[int], views: Mapping[int, RankView]) -> Skip | None:
    """``b`` as a skipper of one of the collectives ``waiters`` wait in on it, or ``None``."""
    best: Skip | None = None
    for a in waiters:
        e = views[a].blocked
        if e is None or e.is_p2p:
            continue
        last = bv.last.get((e.pg_name, False), 0)
        ib = _index(bv.dump.entries, e.pg_name, last) if 0 < last < e.seq else None
        a_entries = views[a].dump.entries
        ia = _index(a_entries, e.pg_name, last) if ib is not None else None
        if ib is None or ia is None:
            continue  # the point where b stopped is not in both records: no baseline
        ia_s = next((i for i in range(ia + 1, len(a_entries)) if a_entries[i] is e), len(a_entries))
        baseline = sum(1 for x in a_entries[ia + 1 : ia_s] if x.pg_name != e.pg_name)
        after = [x for x in bv.dump.entries[ib + 1 :] if x.pg_name != e.pg_name and x.complete]
        if len(after) <= baseline:
            continue
        skip = Skip(b, e.pg_name, e.seq, last, len(after), baseline, a, after[-1])
        if best is None or (skip.moved_on - skip.baseline, -skip.waiter) > (
            best.moved_on - best.baseline,
            -best.waiter,
        ):
            best = skip
    return best


def find_skips(members: Sequence[int], graph: WaitGraph, views: Mapping[int, RankView]) -> list[Skip]:
    """The ranks of a waits-for cycle that skipped a collective: a member ``B`` of group ``G`` whose last
    sequence number in ``G`` is behind the one a peer ``A`` waits in, and that since its last ``G`` entry
    completed more collectives in other groups than ``A`` did between that same sequence number and
    entering the one it waits in. A rank that follows the schedule and is merely blocked elsewhere has
    done at most what its peer did; one that went past the collective (stopped calling it, or called
    it fewer times) has done more. Record order (``record_id``) orders each rank's own entries; no
    clock is compared across ranks.

    Args:
        members: the cycle's ranks.
        graph: the waits-for graph.
        views: each rank's entries.

    Returns:
        The skippers among ``members``, by rank; empty when none fits (the cycle is reported as it is).
    """
    out: list[Skip] = []
    for b in sorted(set(members)):
        bv = views.get(b)
        if bv is None:
            continue
        waiters = sorted(a for a, bs in graph.edges.items() if b in bs and a in views)
        skip = _skip_of(b, bv, waiters, views)
        if skip is not None:
            out.append(skip)
    return out
