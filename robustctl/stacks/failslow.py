"""Fail-slow voting: which parallel group degrades a job that is slow but not hung.

ByteRobust (arXiv 2509.16293, §5): when MFU declines without an error, repeat the stack aggregation
every 10 s for 5 rounds; in each round flag the parallel group with the most outlier ranks; the group
flagged most often over the rounds is the degrader and is over-evicted. A rank slowed 3× spends most of
its time computing while its peers wait for it in collectives, so it lands in an outlier class in most
rounds, while healthy ranks caught mid-compute land there only by chance.

:func:`vote` is the pure half (the live command takes the samples; ``--rounds 5 --interval 10``):

* a round votes with its *busy* ranks, those not waiting on a peer (compute, data loading, I/O,
  checkpoint, unreadable), when they are fewer than half the ranks: a straggler is busy while its
  peers wait for it in collectives and p2p calls spread over many call sites, so "non-dominant" alone
  would sweep the waiting ranks in too. When most ranks are busy, the round votes with the ranks of
  the main role's non-dominant classes plus unreadable ranks (blame's localization is not applied:
  a slow round is often spread, and votes add up instead);
* a round flags the group of ``kind`` holding the most outlier ranks; a round with no dominant class,
  or with no outlier, **abstains** (flags nothing); when several groups tie for the most outliers,
  the tie goes to the group with the most outlier ranks summed over all rounds, and a round whose
  tie survives that **abstains** too (recorded as a tie: it cannot tell them apart);
* the degrader is the group with the most flags (a tie for the most flags goes, again, to the group
  with the most outlier ranks over all rounds); it needs at least ``min_votes`` flags (default: a
  third of the rounds that flagged something, and at least 2: a plurality, as ByteRobust's "flagged
  most often", guarded against a winner by chance); a tie that survives, or too few flags, gives no
  degrader and ``ambiguous`` with the reason.

``kind`` defaults to ``"pp"`` when the layout has PP > 1 (ByteRobust's usual over-eviction unit), else
``"machine"`` (the ranks of one host) when ranks per host are known, else ``"rank"``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from robustctl.inventory.hostrange import compact_ranges
from robustctl.inventory.topology import Topology
from robustctl.stacks.blame import WAITING
from robustctl.stacks.cluster import ClusterResult
from robustctl.stacks.model import ProcessRole

__all__ = ["FailSlowResult", "RoundVote", "default_kind", "round_outliers", "vote"]


@dataclass(frozen=True)
class RoundVote:
    """What one round saw and flagged.

    Attributes:
        round: 0-based round number. outliers: outlier ranks (compact ranges). n_outliers: how many.
        flagged: the group index flagged, ``None`` when the round abstained.
        count: outlier ranks in the flagged group (or in each tied group).
        abstained: why no group was flagged (``"no outlier"``, ``"no dominant class"``,
            ``"tie between groups 1,3"``, groups as compact ranges), else ``None``.
    """

    round: int
    outliers: str
    n_outliers: int
    flagged: int | None
    count: int
    abstained: str | None = None


@dataclass(frozen=True)
class FailSlowResult:
    """The vote over all rounds.

    Attributes:
        kind: group kind voted on (``"pp"``, ``"dp"``, ``"tp-pp"``, ``"machine"``, ``"rank"`` …).
        rounds: per-round votes. votes: ``(group index, flags)`` most flags first.
        degrader: the group flagged most often, or ``None``.
        degrader_ranks: its ranks (compact ranges). degrader_hosts: its machines' hosts (the
            over-eviction set). healthy_machines_taken: its machines holding no rank that was ever an
            outlier of a round.
        ambiguous: no single group won; reason: why.
    """

    kind: str
    rounds: tuple[RoundVote, ...]
    votes: tuple[tuple[int, int], ...]
    degrader: int | None
    degrader_ranks: str = ""
    degrader_hosts: tuple[str, ...] = ()
    healthy_machines_taken: int = 0
    ambiguous: bool = False
    reason: str | None = None


def default_kind(topology: Topology | None) -> str:
    """``"pp"`` when PP > 1, else ``"machine"`` when ranks per host are known, else ``"rank"``."""
    if topology is None:
        return "rank"
    if topology.sizes["pp"] > 1:
        return "pp"
    return "machine" if topology.ranks_per_host is not None else "rank"


def round_outliers(clusters: ClusterResult) -> tuple[int, ...] | None:
    """The ranks one round votes with; ``None`` when the main role has no dominant class.

    When fewer than half of the ranks are *busy* (in a class that is not waiting on a peer:
    compute, data loading, I/O, checkpoint, unknown or unreadable), the busy ranks are the ones the
    others wait for, and they vote. Otherwise (most ranks busy) the outliers of the dominant class
    vote: the main role's non-dominant classes plus unreadable ranks.
    """
    main = clusters.role(ProcessRole.MAIN)
    if main is None or main.dominant is None:
        return None
    ranks = {r for c in main.classes for r in c.ranks}
    busy = {r for c in main.classes if c.category not in WAITING for r in c.ranks}
    if busy and 2 * len(busy) < len(ranks):
        return tuple(sorted(busy))
    outliers = {r for c in main.classes if c.id != main.dominant for r in c.ranks}
    return tuple(sorted(outliers))


def _group_of(rank: int, kind: str, topology: Topology | None) -> int:
    if kind == "rank" or topology is None:
        return rank
    if kind == "machine":
        m = topology.machine_of(rank)
        return rank if m is None else m
    return topology.group_index(rank, kind)


def _group_ranks(index: int, kind: str, topology: Topology | None) -> tuple[int, ...]:
    if kind == "rank" or topology is None:
        return (index,)
    if kind == "machine":
        return tuple(topology.machine_ranks(index))
    return topology.group_ranks(kind, index)


def vote(
    rounds: Sequence[ClusterResult],
    topology: Topology | None = None,
    *,
    kind: str | None = None,
    min_votes: int | None = None,
) -> FailSlowResult:
    """Vote over rounds of stack clustering for the degrading group (see the module docstring).

    Args:
        rounds: one :class:`~robustctl.stacks.cluster.ClusterResult` per sample, in time order.
        topology: the job's layout (needed for group kinds other than ``"rank"``).
        kind: the group kind to vote on; default :func:`default_kind`.
        min_votes: flags the winner needs; default ``max(2, ceil(flagging rounds / 3))``.

    Returns:
        A :class:`FailSlowResult`.

    Raises:
        UsageError: a rank outside the layout, or an unknown kind.
    """
    k = kind or default_kind(topology)
    per_round = [round_outliers(cr) for cr in rounds]
    # Outlier ranks per group summed over every round: breaks a round's tie in favour of the group
    # that is outlying most often overall (a straggler's group keeps coming back; chance does not).
    totals: Counter[int] = Counter(_group_of(r, k, topology) for outl in per_round if outl for r in outl)
    votes = tuple(_round_vote(i, outl, k, topology, totals) for i, outl in enumerate(per_round))
    flags = Counter(v.flagged for v in votes if v.flagged is not None)
    ranked = tuple(sorted(flags.items(), key=lambda kv: (-kv[1], kv[0])))
    flagging = sum(1 for v in votes if v.flagged is not None)
    need = min_votes if min_votes is not None else max(2, -(-flagging // 3))
    if not ranked:
        return FailSlowResult(k, votes, (), None, reason="no round flagged a group")
    top_n = ranked[0][1]
    leaders = _break_tie([g for g, n in ranked if n == top_n], totals)
    if len(leaders) > 1:
        return FailSlowResult(
            k,
            votes,
            ranked,
            None,
            ambiguous=True,
            reason=f"{k} groups {compact_ranges(leaders)} tie with {top_n} flags each",
        )
    if top_n < need:
        return FailSlowResult(
            k,
            votes,
            ranked,
            None,
            ambiguous=True,
            reason=f"{k} group {leaders[0]} flagged in {top_n} of {len(votes)} rounds, fewer than the {need} needed",
        )
    ever = {r for outl in per_round if outl for r in outl}
    return _degrader(k, votes, ranked, leaders[0], topology, ever)


def _break_tie(groups: list[int], totals: Counter[int]) -> list[int]:
    """``groups`` (ascending) narrowed, when there are several, to those with the most outlier ranks
    over every round; still several when that ties too."""
    if len(groups) > 1:
        most = max(totals[g] for g in groups)
        groups = [g for g in groups if totals[g] == most]
    return groups


def _round_vote(
    i: int, outl: tuple[int, ...] | None, k: str, topology: Topology | None, totals: Counter[int]
) -> RoundVote:
    """Round ``i``'s vote: the group of kind ``k`` holding the most of its outlier ranks ``outl``
    (ties broken by :func:`_break_tie`), or an abstention saying why."""
    if outl is None:
        return RoundVote(i, "", 0, None, 0, "no dominant class")
    if not outl:
        return RoundVote(i, "", 0, None, 0, "no outlier")
    per = Counter(_group_of(r, k, topology) for r in outl)
    top = max(per.values())
    best = _break_tie(sorted(g for g, n in per.items() if n == top), totals)
    if len(best) > 1:
        return RoundVote(
            i, compact_ranges(outl), len(outl), None, top, f"tie between groups {compact_ranges(best)}"
        )
    return RoundVote(i, compact_ranges(outl), len(outl), best[0], top)


def _degrader(
    k: str,
    votes: tuple[RoundVote, ...],
    ranked: tuple[tuple[int, int], ...],
    g: int,
    topology: Topology | None,
    ever: set[int],
) -> FailSlowResult:
    """The result naming group ``g`` of kind ``k``: its ranks, its machines (the over-eviction set) and
    how many of them held no rank that was ever an outlier (``ever``)."""
    members = _group_ranks(g, k, topology)
    hosts: tuple[str, ...] = ()
    taken = 0
    if topology is not None and topology.ranks_per_host is not None:
        machines = topology.machines_of(members)
        hosts = tuple(topology.machine_name(m) for m in machines)
        taken = len(set(machines) - set(topology.machines_of(r for r in ever if r in set(members))))
    return FailSlowResult(
        k,
        votes,
        ranked,
        g,
        degrader_ranks=compact_ranges(members),
        degrader_hosts=hosts,
        healthy_machines_taken=taken,
    )
