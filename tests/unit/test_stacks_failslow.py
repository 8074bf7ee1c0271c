"""Fail-slow voting over rounds (ByteRobust §5: every 10 s × 5 rounds; most-flagged group degrades)."""

from __future__ import annotations

from robustctl.config import ParallelLayout
from robustctl.inventory.topology import Topology
from robustctl.stacks.cluster import ClusterResult, cluster
from robustctl.stacks.failslow import default_kind, round_outliers, vote
from robustctl.stacks.model import Frame, ProcessDump, ThreadStack

WAIT = [
    ("<module>", "train.py"),
    ("step", "train.py"),
    ("all_reduce", "torch/distributed/distributed_c10d.py"),
]
COMPUTE = [("<module>", "train.py"), ("step", "train.py"), ("forward", "model.py")]
TOPO = Topology(ParallelLayout(tp=2, pp=4, dp=2), 2)


def mk(rank: int, path: list[tuple[str, str]]) -> ProcessDump:
    frames = tuple(Frame(fn, f) for fn, f in reversed(path))
    return ProcessDump((ThreadStack("1", "MainThread", frames),), rank=rank)


def rnd(computing: set[int], n: int = 16) -> ClusterResult:
    return cluster([mk(r, COMPUTE if r in computing else WAIT) for r in range(n)])


def test_slow_rank_wins_the_vote() -> None:
    # rank 13 is slow: it computes in 4 of 5 rounds; healthy ranks are caught computing by chance
    rounds = [rnd({13}), rnd({13, 2}), rnd({6}), rnd({13}), rnd({13, 9})]
    res = vote(rounds, TOPO)
    assert res.kind == "pp" and not res.ambiguous
    assert res.degrader == TOPO.group_index(13, "pp") == 1
    assert res.degrader_ranks == "1,5,9,13"
    assert res.degrader_hosts == ("machine-0", "machine-2", "machine-4", "machine-6")
    # round 1 ties groups 1 and 2 (ranks 13 and 2); group 1 outlies in more rounds overall
    assert [v.flagged for v in res.rounds] == [1, 1, 2, 1, 1]
    assert res.votes == ((1, 4), (2, 1))
    # machines 0 and 2 (ranks 1, 5) held no outlier in any round; 4 and 6 did (ranks 9, 13)
    assert res.healthy_machines_taken == 2


def test_quiet_and_ambiguous_rounds_abstain() -> None:
    every_differs = cluster([mk(r, [*WAIT[:2], (f"f{r}", "x.py")]) for r in range(16)])
    rounds = [rnd(set()), every_differs, rnd({3})]
    res = vote(rounds, TOPO)
    assert [v.abstained for v in res.rounds] == ["no outlier", "no dominant class", None]
    assert res.degrader is None and res.ambiguous  # one flag < the 2 needed
    assert res.reason is not None and "fewer than the 2 needed" in res.reason


def test_tie_between_groups_is_ambiguous() -> None:
    res = vote([rnd({1}), rnd({2}), rnd({1}), rnd({2})], TOPO)
    assert res.degrader is None and res.ambiguous and res.reason is not None and "tie" in res.reason


def test_nothing_flagged() -> None:
    res = vote([rnd(set()), rnd(set())], TOPO)
    assert res.degrader is None and not res.ambiguous and res.reason == "no round flagged a group"


def test_kinds() -> None:
    assert default_kind(TOPO) == "pp"
    assert default_kind(Topology(ParallelLayout(dp=16), 8)) == "machine"
    assert default_kind(Topology(ParallelLayout(dp=16))) == "rank"
    assert default_kind(None) == "rank"
    rounds = [rnd({5}), rnd({5}), rnd({4})]
    by_machine = vote(rounds, Topology(ParallelLayout(dp=16), 4))
    assert by_machine.kind == "machine" and by_machine.degrader == 1 and by_machine.degrader_ranks == "4-7"
    by_rank = vote(rounds, None)
    assert by_rank.kind == "rank" and by_rank.degrader == 5 and by_rank.degrader_hosts == ()
    dp = vote(rounds, TOPO, kind="dp")
    assert dp.kind == "dp" and dp.degrader == TOPO.group_index(5, "dp")


def test_round_outliers() -> None:
    assert round_outliers(rnd({3, 4})) == (3, 4)
    assert round_outliers(rnd(set())) == ()
    assert round_outliers(cluster([])) is None


P2P = [("<module>", "train.py"), ("step", "train.py"), ("recv", "torch/distributed/distributed_c10d.py")]
TP_WAIT = [
    ("<module>", "train.py"),
    ("forward", "model.py"),
    ("all_reduce", "torch/distributed/distributed_c10d.py"),
]


def test_busy_ranks_vote_when_waiting_ranks_spread_over_call_sites() -> None:
    # A straggler computes while its peers wait at several call sites (DP all-reduce, TP all-reduce,
    # PP recv): the non-dominant classes hold waiting ranks too, but only the busy rank votes.
    paths = {r: WAIT for r in range(16)}
    for r in (0, 1, 4, 5):
        paths[r] = P2P
    for r in (8, 9):
        paths[r] = TP_WAIT
    paths[13] = COMPUTE
    one = cluster([mk(r, p) for r, p in paths.items()])
    assert round_outliers(one) == (13,)
    res = vote([one, one, rnd({13, 2})], TOPO)
    assert res.degrader == TOPO.group_index(13, "pp")


def test_most_ranks_busy_falls_back_to_non_dominant_classes() -> None:
    busy = cluster([mk(r, WAIT if r in (3, 7) else COMPUTE) for r in range(16)])
    assert round_outliers(busy) == (3, 7)


def test_tie_that_totals_cannot_break_abstains() -> None:
    res = vote([rnd({1, 2})], TOPO)
    assert res.rounds[0].abstained == "tie between groups 1-2" and res.degrader is None
