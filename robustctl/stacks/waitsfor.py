"""Waits-for analysis: who each rank of a hung job waits for, and the ranks at the end of the chains.

With pipeline parallelism the healthy ranks of a hung job legitimately wait in different places: the
stages before a stuck rank block in ``send_forward``/``recv_backward``, the stages after it in
``recv_forward``, the other replicas in the data-parallel gradient all-reduce. Stack classes of similar
size are then normal and "the dominant class is healthy" (:mod:`.blame`) names nobody or a whole
group. Following the waits instead finds the rank the others wait on, the way a deadlock detector reads
an MPI waits-for graph (Hilbrich et al., "MPI Runtime Error Detection with MUST: A Scalable and
Crash-Safe Approach", ICPP 2014 workshops; ByteRobust, arXiv 2509.16293 §5, localizes the same hang to
the stuck stage's PP group):

1. **What each rank waits in**, from its main thread's innermost distributed call (frames innermost
   first, :func:`describe_wait`):

   * a *collective* (``all_reduce``, ``all_gather*``, ``reduce_scatter*``, ``broadcast``, ``barrier``,
     ``all_to_all*`` … in a distributed module): the group comes from the caller frames (Megatron's
     ``tensor_parallel/mappings.py`` or a name with ``tp``/``tensor`` → TP; ``embedding`` → the
     embedding group, first and last PP stage; ``grad``, ``data_parallel``, ``dp`` → DP; ``pipeline``,
     ``pp`` → PP; ``context``/``cp`` → CP; ``expert``/``moe``/``ep`` → EP). Without such a frame the
     layout decides (:func:`analyze_waits`): a kind is ruled out when the group of some rank of the
     call sits entirely in that same call (the collective would have completed); what remains is
     the group, or, when several kinds remain, the rank waits for all of them (said as lower
     confidence).
   * a *point-to-point* call (``send``/``recv``/``isend``/``irecv``/``batch_isend_irecv``, Megatron's
     ``p2p_communication`` ``_communicate``): the peer stage from the nearest caller named
     ``send_forward``/``recv_forward``/``send_backward``/``recv_backward`` or a combination
     (``send_forward_recv_backward``): recv_forward and send_backward wait for the previous stage of
     the rank's pipeline, recv_backward and send_forward for the next one (the first stage's previous
     stage is the last one, as with Megatron's interleaved schedule). Without such a caller, both
     neighbouring stages.
   * nothing of the above: the rank is *not waiting* (compute, data loader, I/O, checkpoint, plain
     Python). A rank py-spy could not read, or with no dump, is not known to wait either.

2. **The graph**: each waiting rank points at the ranks it waits for. A collective member waits
   for the members of its group that are *not in the same call* (not in its stack class).
3. **Suspects**: the ranks not waiting that some waiting rank waits for (through any chain): readable
   ones first; ranks py-spy could not read and ranks with no dump are suspects when no readable rank
   is (every readable rank waits: the one that cannot be read is the evidence). When no chain ends
   in such a rank, a set of ranks that only wait for each other (a cycle, a *deadlock*: mismatched
   p2p calls, a collective on the wrong group) is the suspect set.
4. **Undecided** (said, with what would decide it): nothing waits; or the waits end nowhere but in
   collectives whose every member is present (stuck inside the collective: the network or the
   communication library, not a rank); or the suspects are many.

Without a layout peers cannot be placed: when every readable rank but a few waits in a
communication call, those few are named with *low* confidence; else undecided ("give --layout").

Everything here is a pure function of the clustering and the topology; the work is linear in the
ranks plus the members of the groups the waiting ranks wait on.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from robustctl.inventory.hostrange import compact_ranges
from robustctl.inventory.topology import DIMS, Topology
from robustctl.stacks.cluster import (
    TORCH_COLLECTIVES,
    Category,
    ClusterResult,
    frame_category,
    normalize_function,
    normalize_path,
)
from robustctl.stacks.model import Frame, ProcessDump, ProcessRole

__all__ = [
    "ChainHop",
    "ClassWait",
    "RankWait",
    "WaitChain",
    "WaitSuspect",
    "WaitsFor",
    "analyze_waits",
    "describe_wait",
    "pyspy_error_reason",
]

MAX_CHAINS = 20
"""Chains kept in a result (one per suspect, the longest first)."""
MAX_CHAIN_HOPS = 12
"""Hops shown per chain; a longer chain keeps its last hops (the end is the evidence)."""

EMBEDDING = "embedding"
"""Pseudo group kind: Megatron's embedding group (first and last stage of a pipeline)."""

_DIRECTION_RE = re.compile(r"(send|recv)_(forward|backward)")
_TOKEN_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_COLLECTIVES = TORCH_COLLECTIVES
_P2P = frozenset(
    {"send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list"}
)


# --- one rank's wait --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassWait:
    """What the processes of one main stack class wait in (from a representative's frames).

    Attributes:
        kind: ``"collective"``, ``"p2p"`` or ``"none"`` (not in a communication call).
        call: the distributed call (``"all_reduce"``, ``"recv"``), or for ``none`` the innermost
            frame's function (``"forward_step"``); ``None`` without a frame.
        caller: the nearest caller that names the wait (``"recv_forward"``, ``"reduce_gradients"``),
            when there is one.
        group: for a collective, the group kind its frames name (``"tp"``, ``"dp"``, ``"pp"``,
            ``"cp"``, ``"ep"``, ``"embedding"``), ``None`` when the frames do not say.
        directions: for p2p, the peer stages waited on: ``("prev",)``, ``("next",)`` or both.
        category: the class's category value (``compute``, ``dataloader`` …).
    """

    kind: str
    call: str | None
    caller: str | None = None
    group: str | None = None
    directions: tuple[str, ...] = ()
    category: str = "unknown"


def _tokens(raw: str) -> set[str]:
    return {t.lower() for t in _TOKEN_RE.findall(raw)}


def _group_hint(raw: str, path: str) -> str | None:
    """A group kind named by one caller frame (raw qualified function name, normalized path)."""
    low = raw.lower()
    toks = _tokens(raw)
    if "embedding" in low:
        return EMBEDDING
    if "tensor_parallel/" in path or path.endswith("mappings.py") or "tensor_model_parallel" in low:
        return "tp"
    if "tp" in toks or "tensor" in toks:
        return "tp"
    if "context_parallel" in low or "cp" in toks:
        return "cp"
    if "expert" in toks or "moe" in toks or "ep" in toks or "/moe/" in path:
        return "ep"
    if (
        "data_parallel" in low
        or "data_parallel" in path
        or "dp" in toks
        or toks & {"grad", "grads", "gradient", "gradients"}
    ):
        return "dp"
    if "pipeline" in toks or "pp" in toks:
        return "pp"
    return None


def describe_wait(frames: Sequence[Frame], category: Category | None = None) -> ClassWait:
    """What a thread waits in, from its frames (innermost first); see the module docstring, step 1.

    Args:
        frames: the main thread's frames, innermost first.
        category: the thread's :class:`~robustctl.stacks.cluster.Category` when already known.

    Returns:
        The wait: a p2p call (with the directions its caller names, both when none), a collective
        (with the group kind its callers name, when one does), or kind ``"none"`` with the
        dataloader, checkpoint or I/O frame it is in, else its innermost function.
    """
    parts = [(f.function, normalize_path(f.short_file or f.file)) for f in frames]
    cat = category.value if category is not None else "unknown"
    for i, (raw, path) in enumerate(parts):
        fn = normalize_function(raw)
        fc = frame_category(raw, path)
        if fc is Category.P2P or (fc is Category.COLLECTIVE and fn in _P2P):
            dirs: set[str] = set()
            caller = None
            for raw2, _ in parts[i:]:
                found = _DIRECTION_RE.findall(raw2)
                if found:
                    caller = _qualified(raw2)
                    for op, way in found:
                        dirs.add(
                            "prev" if (op, way) in (("recv", "forward"), ("send", "backward")) else "next"
                        )
                    break
            return ClassWait(
                "p2p",
                fn,
                caller=caller,
                directions=tuple(d for d in ("prev", "next") if d in dirs) or ("prev", "next"),
                category=Category.P2P.value,
            )
        if fc is Category.COLLECTIVE or (fn in _COLLECTIVES and fc is not None and fc is not Category.IO):
            group = None
            caller = None
            for raw2, path2 in parts[i + 1 : i + 9]:
                group = _group_hint(raw2, path2)
                if group is not None:
                    caller = _qualified(raw2)
                    break
            if caller is None:
                caller = next(
                    (_qualified(r) for r, p in parts[i + 1 :] if not p.endswith("c10d_logger.py")),
                    None,
                )
            return ClassWait("collective", fn, caller=caller, group=group, category=Category.COLLECTIVE.value)
    call = None
    if category in (Category.DATALOADER, Category.CHECKPOINT, Category.IO):
        call = next((_qualified(r) for r, p in parts if frame_category(r, p) is category), None)
    if call is None and parts:
        call = _qualified(parts[0][0])
    return ClassWait("none", call, category=cat)


def _qualified(raw: str) -> str:
    """A function name for display: py-spy's qualified name without ``<locals>`` parts."""
    return raw.replace(".<locals>", "")


def pyspy_error_reason(rank: int | None, error: str | None, state: str | None = None) -> str:
    """One line on why a rank's stacks are missing, for a suspect's reason.

    ``"py-spy could not suspend rank 5: EPERM (uninterruptible sleep?)"`` for py-spy's "Failed to suspend
    process" with EPERM (a process in ``D`` state, typically blocked on a frozen or hung filesystem, cannot
    be stopped by ptrace; an already traced process gives the same error), ``"rank 5 is gone: …"`` when the
    process no longer exists, ``"py-spy timed out on rank 5"``, else ``"py-spy could not read rank 5: …"``.
    """
    who = f"rank {rank}" if rank is not None else "the process"
    err = (error or "unreadable").strip()
    low = err.lower()
    d_state = state == "D"
    if "suspend" in low:
        if "eperm" in low or "operation not permitted" in low:
            return f"py-spy could not suspend {who}: EPERM (uninterruptible sleep?{' state D' if d_state else ''})"
        if "esrch" in low or "no such process" in low:
            return f"{who} is gone: py-spy could not suspend it (ESRCH: no such process)"
        return f"py-spy could not suspend {who}: {err}"
    if low.startswith("empty dump"):
        return f"{err} for {who}"
    if "timed out" in low or "timeout" in low:
        return f"py-spy timed out on {who}" + (" (state D: uninterruptible sleep)" if d_state else "")
    if "process gone" in low or "no such process" in low or "executable name" in low:
        return f"{who} is gone or exited: {err}"
    if "permission denied" in low:
        return f"py-spy was denied access to {who}: {err}"
    if "python version" in low:
        return f"{who} does not look like a Python process to py-spy: {err}"
    return f"py-spy could not read {who}: {err}" + (" (state D: uninterruptible sleep)" if d_state else "")


# --- the result ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainHop:
    """One rank of a waits-for chain.

    Attributes:
        rank: the rank. state: ``collective``/``p2p`` (waiting), else the suspect's state (``compute``,
            ``dataloader``, ``checkpoint``, ``io``, ``unknown``, ``unreadable``, ``missing``).
        what: one line: ``"all_reduce (dp group)"``, ``"recv_forward from the previous stage"``,
            ``"forward_step"``, py-spy's error.
    """

    rank: int
    state: str
    what: str


@dataclass(frozen=True)
class WaitChain:
    """A chain of waits ending at a suspect (or going round a cycle).

    Attributes:
        hops: first the waiting rank farthest from the end, last the suspect (for a cycle, the
            first rank again). truncated: hops left out at the start (chain longer than
            :data:`MAX_CHAIN_HOPS`). text: ``"rank 0 → rank 1 → rank 3 → rank 5 (compute: forward)"``.
    """

    hops: tuple[ChainHop, ...]
    truncated: int
    text: str


@dataclass(frozen=True)
class WaitSuspect:
    """A rank at the end of waits.

    Attributes:
        rank: the rank. state: see :class:`ChainHop`. reason: one line.
        waiters: ranks waiting on it, directly or through others. direct: those waiting on it directly.
        cycle: part of a set of ranks waiting only for each other (deadlock).
    """

    rank: int
    state: str
    reason: str
    waiters: int
    direct: int
    cycle: bool = False


@dataclass(frozen=True)
class RankWait:
    """How the ranks of one main stack class wait (the per-class evidence).

    Attributes:
        class_id: the main class. ranks: its ranks (compact ranges). kind: ``collective``, ``p2p``,
            ``none``. call, caller: see :class:`ClassWait`. group: the group kind(s) waited on
            (``"dp"``, ``"dp|pp"`` when the layout left two possible), ``None`` otherwise.
        inferred: how the group or peer was found: ``"frames"`` (named by a caller), ``"layout"``
            (the only kind the layout allows), ``"layout, ambiguous"``, ``"complete"`` (every member
            of the group is in this call), ``"unplaced"`` (no layout).
    """

    class_id: int
    ranks: str
    kind: str
    call: str | None
    caller: str | None
    group: str | None
    inferred: str


@dataclass(frozen=True)
class WaitsFor:
    """The waits-for analysis of one sample.

    Attributes:
        decided: suspects were found (``suspects`` non-empty).
        confidence: ``"high"`` (layout, every group named by frames or the only one possible),
            ``"medium"`` (some group inferred among several), ``"low"`` (no layout).
        suspects: the ranks at the end of the chains, most waited-on first.
        chains: one chain per suspect (at most :data:`MAX_CHAINS`), longest first.
        classes: how each main class waits.
        waiting: ranks in a communication call. not_waiting: readable ranks outside one.
        undecided: when not decided, why and what would decide it.
        notes: other observations (waits on ranks with no dump when a readable suspect exists …).
    """

    decided: bool
    confidence: str
    suspects: tuple[WaitSuspect, ...] = ()
    chains: tuple[WaitChain, ...] = ()
    classes: tuple[RankWait, ...] = ()
    waiting: int = 0
    not_waiting: int = 0
    undecided: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def suspect_ranks(self) -> tuple[int, ...]:
        """The suspects' ranks, ascending."""
        return tuple(sorted(s.rank for s in self.suspects))


# --- the analysis -------------------------------------------------------------------------------------


@dataclass
class _Rank:
    rank: int
    cls: int  # main class id; -1 unreadable, -2 missing
    wait: ClassWait | None  # None: unreadable or missing
    error: str | None = None
    state: str | None = None


def _describe_classes(clusters: ClusterResult) -> dict[int, ClassWait]:
    main = clusters.role(ProcessRole.MAIN)
    out: dict[int, ClassWait] = {}
    if main is None:
        return out
    for c in main.classes:
        if c.unreadable or not c.members:
            continue
        d = clusters.dumps[c.members[0]]
        t = d.main_thread
        out[c.id] = describe_wait(t.frames if t is not None else (), c.category)
    return out


def _ranks(clusters: ClusterResult, waits: Mapping[int, ClassWait]) -> dict[int, _Rank]:
    main = clusters.role(ProcessRole.MAIN)
    out: dict[int, _Rank] = {}
    if main is None:
        return out
    dumps = clusters.dumps
    for c in main.classes:
        for i in c.members:
            d: ProcessDump = dumps[i]
            if d.rank is None or d.rank in out:
                continue
            if c.unreadable:
                out[d.rank] = _Rank(d.rank, -1, None, d.error, d.state)
            else:
                out[d.rank] = _Rank(d.rank, c.id, waits.get(c.id))
    return out


def _hop_what(r: _Rank, group: Mapping[int, str], world: int | None) -> str:
    if r.cls == -2:
        return f"no dump for rank {r.rank}" + (f" of {world}" if world else "")
    if r.wait is None:
        return pyspy_error_reason(r.rank, r.error, r.state)
    w = r.wait
    if w.kind == "collective":
        g = group.get(r.cls)
        on = f" on the {g.replace('|', ' or ')} group" if g else ""
        via = f" in {w.caller}" if w.caller else ""
        return f"{w.call}{on}{via}"
    if w.kind == "p2p":
        to = {"prev": "the previous stage", "next": "the next stage"}
        dirs = " and ".join(to[d] for d in w.directions)
        return f"{w.caller or w.call} with {dirs}"
    return w.call or "no Python frame"


def _state(r: _Rank) -> str:
    if r.cls == -2:
        return "missing"
    if r.wait is None:
        return "unreadable"
    return r.wait.category if r.wait.kind == "none" else r.wait.kind


def analyze_waits(
    clusters: ClusterResult,
    topology: Topology | None = None,
    *,
    expected_ranks: Iterable[int] | None = None,
    max_suspects: int = 4,
) -> WaitsFor:
    """Build the waits-for graph of the main rank processes and name the ranks at its ends.

    Args:
        clusters: the clustering of one sample (:func:`robustctl.stacks.cluster.cluster`); only MAIN
            processes with a rank take part (the first dump of a rank when there are several).
        topology: the job's layout; without it peers cannot be placed (see the module docstring).
        expected_ranks: ranks that were asked for (default every rank of the layout); those with no
            main-process dump are "missing" nodes.
        max_suspects: more suspects than this is undecided (a pattern, not a rank); without a layout
            the suspects must also be at most a quarter of the ranks.

    Returns:
        A :class:`WaitsFor`; never raises on any clustering (ranks outside the layout are ignored).
    """
    waits = _describe_classes(clusters)
    ranks = _ranks(clusters, waits)
    if topology is not None:
        ranks = {r: v for r, v in ranks.items() if 0 <= r < topology.world_size}
        wanted = set(expected_ranks) if expected_ranks is not None else set(range(topology.world_size))
        for r in sorted(wanted - ranks.keys()):
            if 0 <= r < topology.world_size:
                ranks[r] = _Rank(r, -2, None)
    waiting = [r for r in ranks.values() if r.wait is not None and r.wait.kind != "none"]
    readable_idle = [r for r in ranks.values() if r.wait is not None and r.wait.kind == "none"]
    if not waiting:
        return WaitsFor(
            decided=False,
            confidence="low" if topology is None else "high",
            waiting=0,
            not_waiting=len(readable_idle),
            undecided="no rank waits in a communication call: nothing to follow",
        )
    if topology is None:
        return _without_layout(ranks, waits, waiting, readable_idle, max_suspects)
    return _with_layout(ranks, waits, waiting, readable_idle, topology, max_suspects)


def _without_layout(
    ranks: Mapping[int, _Rank],
    waits: Mapping[int, ClassWait],
    waiting: Sequence[_Rank],
    idle: Sequence[_Rank],
    max_suspects: int,
) -> WaitsFor:
    classes = tuple(
        RankWait(
            cid,
            compact_ranges(sorted(r.rank for r in ranks.values() if r.cls == cid)),
            w.kind,
            w.call,
            w.caller,
            w.group,
            "unplaced",
        )
        for cid, w in sorted(waits.items())
    )
    unread = [r for r in ranks.values() if r.wait is None]
    ends = list(idle) or unread
    if not ends or len(ends) > max_suspects or len(ends) * 4 > len(ranks):
        return WaitsFor(
            decided=False,
            confidence="low",
            classes=classes,
            waiting=len(waiting),
            not_waiting=len(idle),
            undecided=(
                f"{len(waiting)} ranks wait in communication calls and {len(idle)} do not; without the layout "
                "the waits cannot be traced to a rank: give --layout (and -G)"
            ),
        )
    group: dict[int, str] = {cid: w.group for cid, w in waits.items() if w.group}
    suspects = tuple(
        WaitSuspect(
            r.rank,
            _state(r),
            f"rank {r.rank} is outside any communication call ({_hop_what(r, group, None)}) while "
            f"{len(waiting)} ranks wait in one; without the layout the waits cannot be traced to it",
            waiters=len(waiting),
            direct=0,
        )
        for r in sorted(ends, key=lambda x: x.rank)
    )
    return WaitsFor(
        decided=True,
        confidence="low",
        suspects=suspects,
        classes=classes,
        waiting=len(waiting),
        not_waiting=len(idle),
        notes=("waits-for without a layout: the suspects are the only ranks outside a communication call",),
    )


def _with_layout(
    ranks: dict[int, _Rank],
    waits: Mapping[int, ClassWait],
    waiting: Sequence[_Rank],
    idle: Sequence[_Rank],
    topo: Topology,
    max_suspects: int,
) -> WaitsFor:
    """Steps 2-4 of the module docstring with a layout: build the graph, walk it to its ends, explain them.

    Args:
        ranks: every rank taking part (readable, unreadable ``cls == -1``, missing ``cls == -2``).
        waits: what each main class waits in.
        waiting: the ranks in a communication call.
        idle: the readable ranks outside one.
        topo: the job's topology.
        max_suspects: more ends than this is undecided.

    Returns:
        The :class:`WaitsFor`: decided with suspects and chains, or undecided with why.
    """
    graph = _build_graph(ranks, waits, waiting, topo)
    ends = _walk(graph, ranks, max_suspects)
    if ends.undecided is not None:
        return WaitsFor(
            decided=False,
            confidence=graph.confidence,
            classes=graph.classes,
            waiting=len(waiting),
            not_waiting=len(idle),
            undecided=ends.undecided,
            notes=ends.notes,
        )
    suspects, chains = _explain(graph, ends, ranks, topo.world_size)
    return WaitsFor(
        decided=True,
        confidence=graph.confidence,
        suspects=suspects,
        chains=chains,
        classes=graph.classes,
        waiting=len(waiting),
        not_waiting=len(idle),
        notes=ends.notes,
    )


# --- building the graph (step 2) ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Graph:
    """The waits-for graph of one sample with a layout.

    Attributes:
        edges: waiting rank → the ranks it waits for (ascending, only ranks taking part, never itself).
        rev: rank → the ranks waiting on it directly (in the order of ``edges``).
        inferred: main class → how its collective's group was found (see :class:`RankWait`).
        group_label: main class → the group kind(s) it waits on (``"dp"``, ``"dp|pp"``), when any.
        classes: the per-class evidence. confidence: ``"medium"`` when some group was one of several
            the layout allows, else ``"high"``.
    """

    edges: dict[int, list[int]]
    rev: dict[int, list[int]]
    inferred: dict[int, str]
    group_label: dict[int, str]
    classes: tuple[RankWait, ...]
    confidence: str


def _build_graph(
    ranks: Mapping[int, _Rank], waits: Mapping[int, ClassWait], waiting: Sequence[_Rank], topo: Topology
) -> _Graph:
    """Point each waiting rank at the ranks it waits for (step 2 of the module docstring).

    A p2p wait points at the neighbouring stage(s) of the rank's pipeline; a collective at the members
    of its group(s) that are not in the same call (not in its stack class). Group members come from
    the topology's :class:`~robustctl.inventory.topology.GroupFinder`, and a class's ranks outside a
    group are listed once per (class, group): per rank that would be O(group size), quadratic in the
    world size for a DP group.

    Args:
        ranks: every rank taking part.
        waits: what each main class waits in.
        waiting: the ranks in a communication call (the graph's sources, in this order).
        topo: the job's topology.

    Returns:
        The :class:`_Graph`.
    """
    in_class: dict[int, set[int]] = {}
    for r in ranks.values():
        in_class.setdefault(r.cls, set()).add(r.rank)
    group_of_class, inferred = _class_groups(waits, in_class, topo)
    outside: dict[tuple[int, str, int], tuple[int, ...]] = {}

    def collective_peers(r: _Rank) -> list[int]:
        mine = in_class.get(r.cls, set())
        out: list[int] = []
        for k in group_of_class.get(r.cls, ()):
            key = (r.cls, *_group_key(topo, r.rank, k))
            others = outside.get(key)
            if others is None:
                others = outside[key] = tuple(m for m in _members(topo, r.rank, k) if m not in mine)
            out.extend(others)
        return out

    edges: dict[int, list[int]] = {}
    for r in waiting:
        assert r.wait is not None  # a waiting rank is readable
        peers = _stage_peers(topo, r.rank, r.wait) if r.wait.kind == "p2p" else collective_peers(r)
        edges[r.rank] = sorted({p for p in peers if p != r.rank and p in ranks})
    rev: dict[int, list[int]] = {}
    for a, bs in edges.items():
        for b in bs:
            rev.setdefault(b, []).append(a)
    group_label = {cid: "|".join(v) for cid, v in group_of_class.items() if v}
    classes = tuple(
        RankWait(
            cid,
            compact_ranges(sorted(in_class[cid])),
            w.kind,
            w.call,
            w.caller,
            group_label.get(cid) if w.kind == "collective" else None,
            inferred.get(
                cid, "frames" if w.kind == "p2p" and w.caller else ("layout" if w.kind == "p2p" else "")
            ),
        )
        for cid, w in sorted(waits.items())
        if cid in in_class
    )
    confidence = "medium" if any(v == "layout, ambiguous" for v in inferred.values()) else "high"
    return _Graph(edges, rev, inferred, group_label, classes, confidence)


def _class_groups(
    waits: Mapping[int, ClassWait], in_class: Mapping[int, set[int]], topo: Topology
) -> tuple[dict[int, tuple[str, ...]], dict[int, str]]:
    """The group kind(s) each collective class waits on, and how that was found (step 1, layout part).

    A kind named by the frames is kept unless every group of it among the class's ranks sits entirely
    in the call (``"complete"``: the collective would have completed). Without a name, a kind is ruled
    out when some group of it sits entirely in the call; what remains is the group (``"layout"``),
    several groups (``"layout, ambiguous"``) or none (``"complete"``).

    Args:
        waits: what each main class waits in.
        in_class: each class's ranks.
        topo: the topology.

    Returns:
        ``(class → kinds, class → how found)`` for the collective classes that have ranks.
    """
    kinds = [d for d in DIMS if topo.sizes[d] > 1]
    group_of_class: dict[int, tuple[str, ...]] = {}
    inferred: dict[int, str] = {}
    for cid, w in waits.items():
        if w.kind != "collective" or cid not in in_class:
            continue
        mine = in_class[cid]
        if w.group is not None and ((w.group == EMBEDDING and topo.sizes["pp"] > 1) or w.group in kinds):
            every = all(_groups_within(topo, mine, w.group))
            group_of_class[cid] = () if every else (w.group,)
            inferred[cid] = "complete" if every else "frames"
            continue
        possible = tuple(k for k in kinds if not any(_groups_within(topo, mine, k)))
        group_of_class[cid] = possible
        if not possible:
            inferred[cid] = "complete"
        elif len(possible) == 1:
            inferred[cid] = "layout"
        else:
            inferred[cid] = "layout, ambiguous"
    return group_of_class, inferred


def _groups_within(topo: Topology, ranks: set[int], kind: str) -> Iterator[bool]:
    """For each distinct group of ``kind`` holding some of ``ranks`` (first seen first): whether every
    member of the group is among ``ranks``. Lazy, so ``any``/``all`` stop at the first answer."""
    seen: set[tuple[str, int]] = set()
    for r in ranks:
        key = _group_key(topo, r, kind)
        if key in seen:
            continue
        seen.add(key)
        yield set(_members(topo, r, kind)) <= ranks


def _stage_peers(topo: Topology, rank: int, wait: ClassWait) -> list[int]:
    """The ranks a p2p wait of ``rank`` waits for: its previous and/or next pipeline stage (the first
    stage's previous stage is the last one); none without pipeline parallelism."""
    n = topo.sizes["pp"]
    if n < 2:
        return []
    c = topo.coords(rank)
    return [topo.rank_of({**c, "pp": (c["pp"] + (-1 if d == "prev" else 1)) % n}) for d in wait.directions]


def _group_key(topo: Topology, rank: int, kind: str) -> tuple[str, int]:
    """Which group of ``kind`` holds ``rank``: ``(kind, group index)`` (:data:`EMBEDDING`: its PP group's)."""
    return kind, topo.group_index(rank, "pp" if kind == EMBEDDING else kind)


def _members(topo: Topology, rank: int, kind: str) -> tuple[int, ...]:
    """The ranks of ``rank``'s group of ``kind`` (:data:`EMBEDDING`: the first and last stage of its pipeline)."""
    if kind == EMBEDDING:
        pp = topo.finder.group_of(rank, "pp")
        return (pp[0], pp[-1]) if len(pp) > 1 else pp
    return topo.finder.group_of(rank, kind)


# --- walking the graph (step 3) -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Ends:
    """Where the waits end.

    Attributes:
        ranks: the suspects to explain (empty when undecided). cycle: the ranks of a deadlock, when
            the suspects are one. notes: observations (ranks with no dump waited on too).
        undecided: why no suspect is named, ``None`` when decided.
    """

    ranks: tuple[_Rank, ...]
    cycle: frozenset[int]
    notes: tuple[str, ...]
    undecided: str | None = None


def _walk(graph: _Graph, ranks: Mapping[int, _Rank], max_suspects: int) -> _Ends:
    """Find the ends of the waits (steps 3-4 of the module docstring).

    The ends are the ranks not waiting (readable first; unreadable or missing ones only when no
    readable rank is an end) that some rank waits for; else the bottom cycles of the graph (a
    deadlock). Undecided: no end and no cycle (with why: complete collectives, or nothing to follow),
    or more ends than ``max_suspects``.

    Args:
        graph: from :func:`_build_graph`.
        ranks: every rank taking part.
        max_suspects: the most ends named.

    Returns:
        The :class:`_Ends`.
    """
    rev = graph.rev
    terminals = [r for r in ranks.values() if (r.wait is None or r.wait.kind == "none") and rev.get(r.rank)]
    readable_ends = [r for r in terminals if r.wait is not None]
    other_ends = [r for r in terminals if r.wait is None]
    notes: list[str] = []
    if readable_ends:
        ends = readable_ends + [r for r in other_ends if r.cls == -1]
        missing = [r.rank for r in other_ends if r.cls == -2]
        if missing:
            notes.append(
                f"rank{'s' if len(missing) > 1 else ''} {compact_ranges(missing)} with no dump "
                f"{'are' if len(missing) > 1 else 'is'} waited on too; not blamed while a readable rank is"
            )
    else:
        ends = other_ends
    cycle: set[int] = set()
    if not ends:
        cycle = _bottom_cycle(graph.edges, ranks)
        if not cycle:
            full = [cid for cid, v in graph.inferred.items() if v == "complete"]
            why = (
                "every rank waits, but in collectives whose members are all in the same call (class "
                f"{', '.join(map(str, full))}): stuck inside the collective (network, communication "
                "library), not on a rank; run the diagnose ladder (network, NCCL) on these machines"
                if full
                else "the waits end at no rank: a second sample, or dumps of the ranks not collected, would decide"
            )
            return _Ends((), frozenset(), tuple(notes), why)
        ends = [ranks[r] for r in sorted(cycle)]
    if len(ends) > max_suspects:
        why = (
            f"the waits end at {len(ends)} ranks ({compact_ranges(sorted(r.rank for r in ends))}): a pattern "
            "with a shared cause rather than one rank; a second sample would tell a slow job from a hang"
        )
        return _Ends((), frozenset(), tuple(notes), why)
    return _Ends(tuple(ends), frozenset(cycle), tuple(notes))


# --- explaining the ends ------------------------------------------------------------------------------


def _explain(
    graph: _Graph, ends: _Ends, ranks: Mapping[int, _Rank], world: int
) -> tuple[tuple[WaitSuspect, ...], tuple[WaitChain, ...]]:
    """Say why each end is a suspect and show the longest chain of waits leading to it.

    Suspects come most waited-on first (then by rank), chains in the same order (at most
    :data:`MAX_CHAINS`); a deadlock gets one chain that goes round the cycle.

    Args:
        graph: from :func:`_build_graph`.
        ends: from :func:`_walk` (decided).
        ranks: every rank taking part.
        world: the world size (for "no dump for rank 5 of 16").

    Returns:
        ``(suspects, chains)``.
    """
    cycle = set(ends.cycle)
    label = graph.group_label
    suspects: list[WaitSuspect] = []
    chains: list[WaitChain] = []
    for end in ends.ranks:
        dist, nxt = _reverse_bfs(end.rank, graph.rev, graph.edges)
        if cycle:
            reason = (
                f"deadlock: ranks {compact_ranges(sorted(cycle))} wait only for each other "
                f"(rank {end.rank}: {_hop_what(end, label, world)}); mismatched send/recv or collectives"
            )
        elif end.wait is None:
            reason = _hop_what(end, label, world)
        else:
            reason = f"{_state(end)} in {_hop_what(end, label, world)}, outside any communication call"
        direct = len(graph.rev.get(end.rank, ()))
        suspects.append(
            WaitSuspect(
                end.rank, _state(end), reason, waiters=len(dist) - 1, direct=direct, cycle=bool(cycle)
            )
        )
        path = _longest_path(end.rank, dist, nxt, graph.edges, cycle)
        chains.append(_chain(path, ranks, label, world, cycle))
    suspects.sort(key=lambda s: (-s.waiters, s.rank))
    order = {s.rank: i for i, s in enumerate(suspects)}
    chains.sort(key=lambda c: order.get(c.hops[-1].rank, 0) if not cycle else 0)
    if cycle:
        chains = chains[:1]
    return tuple(suspects), tuple(chains[:MAX_CHAINS])


def _longest_path(
    end: int,
    dist: Mapping[int, int],
    nxt: Mapping[int, int],
    edges: Mapping[int, Sequence[int]],
    cycle: set[int],
) -> list[int]:
    """The chain to ``end`` from the rank farthest from it (lowest rank among the farthest); for a
    deadlock, continued round the cycle back to a rank already on the path."""
    far = max(dist, key=lambda r: (dist[r], -r))
    path = [far]
    while path[-1] != end and len(path) <= len(dist):
        path.append(nxt[path[-1]])
    if cycle:
        seen = set(path)
        while len(path) <= len(dist) + len(cycle):
            step = next((b for b in edges.get(path[-1], ()) if b in cycle), None)
            if step is None:
                break
            path.append(step)
            if step in seen:
                break
            seen.add(step)
    return path


def _reverse_bfs(
    start: int, rev: Mapping[int, Sequence[int]], edges: Mapping[int, Sequence[int]]
) -> tuple[dict[int, int], dict[int, int]]:
    """Distances of the ranks that wait on ``start`` (transitively) and each one's next hop toward it."""
    dist = {start: 0}
    nxt: dict[int, int] = {}
    q = deque([start])
    while q:
        x = q.popleft()
        for w in rev.get(x, ()):
            if w not in dist:
                dist[w] = dist[x] + 1
                nxt[w] = x
                q.append(w)
    return dist, nxt


def _bottom_cycle(edges: Mapping[int, Sequence[int]], ranks: Mapping[int, _Rank]) -> set[int]:
    """The ranks of the bottom strongly connected components with more than one rank (waits that lead
    nowhere but back), found with an iterative Tarjan over the waiting ranks."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on: set[int] = set()
    stack: list[int] = []
    comp: dict[int, int] = {}
    comps: list[list[int]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[int, int]] = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on.add(v)
            succ = edges.get(v, ())
            if i < len(succ):
                work.append((v, i + 1))
                w = succ[i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                members = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp[w] = len(comps)
                    members.append(w)
                    if w == v:
                        break
                comps.append(members)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    out: set[int] = set()
    for k, members in enumerate(comps):
        if len(members) < 2:
            continue
        if all(comp.get(w) == k for v in members for w in edges.get(v, ())):
            out.update(members)
    return out


def _chain(
    path: Sequence[int],
    ranks: Mapping[int, _Rank],
    group: Mapping[int, str],
    world: int,
    cycle: set[int] | None = None,
) -> WaitChain:
    hops = tuple(ChainHop(r, _state(ranks[r]), _hop_what(ranks[r], group, world)) for r in path)
    cut = max(0, len(hops) - MAX_CHAIN_HOPS)
    shown = hops[cut:]
    end = shown[-1]
    head = " → ".join(f"rank {h.rank}" for h in shown)
    if cut:
        head = f"… {cut} more → " + head
    if cycle:
        inside = "; ".join(f"rank {r}: {_hop_what(ranks[r], group, world)}" for r in sorted(cycle)[:4])
        text = f"{head} (deadlock: {inside})"
    else:
        text = f"{head} ({end.state}: {end.what})"
    return WaitChain(hops=shown, truncated=cut, text=text)
