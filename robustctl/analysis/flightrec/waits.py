"""The waits-for graph: who waits on whom, its roots, cycles and chains."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from robustctl.analysis.flightrec.groups import RankView, peers, what
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
