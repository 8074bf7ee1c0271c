"""Rank ↔ coordinates ↔ machines and parallel groups, checked against Megatron-LM's documented examples."""

from __future__ import annotations

import itertools

import pytest

from robustctl.config import ParallelLayout
from robustctl.errors import UsageError
from robustctl.inventory.topology import MAX_REMEMBERED_SEARCHES, Topology, parse_layout, smallest_group


def test_megatron_docstring_example_16_gpus_tp2_pp4() -> None:
    # megatron/core/parallel_state.py, initialize_model_parallel docstring: 16 GPUs, TP=2, PP=4 (DP=2).
    topo = Topology(ParallelLayout(tp=2, pp=4, dp=2))
    assert topo.groups("dp") == [(0, 2), (1, 3), (4, 6), (5, 7), (8, 10), (9, 11), (12, 14), (13, 15)]
    assert topo.groups("tp") == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11), (12, 13), (14, 15)]
    assert topo.groups("pp") == [(0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15)]


def test_megatron_masked_groups_example_tp2_dp3_pp4() -> None:
    # generate_masked_orthogonal_rank_groups docstring: parallel_size [tp, dp, pp] = [2, 3, 4], dp groups.
    topo = Topology(ParallelLayout(tp=2, dp=3, pp=4))
    dp = topo.groups("dp")
    assert dp[0] == (0, 2, 4) and dp[1] == (1, 3, 5) and dp[7] == (19, 21, 23)
    # order tp-pp-dp, sizes 2-2-2: dp groups [[0, 4], [1, 5], [2, 6], [3, 7]]
    topo2 = Topology(ParallelLayout(tp=2, pp=2, dp=2, order="tp-pp-cp-ep-dp"))
    assert topo2.groups("dp") == [(0, 4), (1, 5), (2, 6), (3, 7)]


def test_coords_round_trip_and_groups_partition() -> None:
    topo = Topology(ParallelLayout(tp=2, cp=2, ep=1, dp=3, pp=2), ranks_per_host=4)
    assert topo.world_size == 24
    for r in range(24):
        assert topo.rank_of(topo.coords(r)) == r
    assert topo.coords(0) == {"tp": 0, "cp": 0, "ep": 0, "dp": 0, "pp": 0}
    assert topo.coords(23) == {"tp": 1, "cp": 1, "ep": 0, "dp": 2, "pp": 1}
    for kind in ("tp", "cp", "ep", "dp", "pp", "tp-pp", "dp-cp", "job"):
        groups = topo.groups(kind)
        flat = sorted(itertools.chain.from_iterable(groups))
        assert flat == list(range(24)), kind
        for i, g in enumerate(groups):
            for r in g:
                assert topo.group_index(r, kind) == i
                assert topo.group_of(r, kind) == g
    # ranks of a group differ only in that coordinate
    for g in topo.groups("pp"):
        cs = [topo.coords(r) for r in g]
        assert len({(c["tp"], c["cp"], c["dp"]) for c in cs}) == 1
    assert topo.group_count("tp-pp") == 6 and topo.group_size("tp-pp") == 4
    assert topo.kind_name(["pp", "tp"]) == "tp-pp"


def test_machines_and_hosts() -> None:
    topo = Topology(ParallelLayout(tp=2, pp=4, dp=2), ranks_per_host=4, hosts=[f"node{i}" for i in range(4)])
    assert topo.n_machines == 4
    assert topo.machine_of(13) == 3 and topo.host_of(13) == "node3"
    assert topo.machines_of(topo.group_of(0, "pp")) == (0, 1, 2, 3)
    assert topo.machines_of(topo.group_of(0, "tp")) == (0,)
    assert list(topo.machine_ranks(1)) == [4, 5, 6, 7]
    anon = Topology(ParallelLayout(tp=2, pp=4, dp=2))
    assert anon.machine_of(3) is None and anon.host_of(3) is None and anon.n_machines is None
    assert Topology(ParallelLayout(tp=2), ranks_per_host=1).host_of(1) == "machine-1"


def test_varying_dims_gives_the_smallest_group() -> None:
    topo = Topology(ParallelLayout(tp=2, pp=4, dp=2))
    assert topo.varying_dims([0, 4, 8, 12]) == ("pp",)
    assert topo.varying_dims([0, 1, 4, 5]) == ("tp", "pp")
    assert topo.varying_dims([7]) == ()


def test_out_of_range() -> None:
    topo = Topology(ParallelLayout(tp=2, pp=2))
    with pytest.raises(UsageError, match="outside"):
        topo.coords(4)
    with pytest.raises(UsageError, match="outside"):
        topo.group_ranks("tp", 2)
    with pytest.raises(UsageError, match="unknown group kind"):
        topo.groups("xp")
    with pytest.raises(UsageError, match="fewer"):
        Topology(ParallelLayout(tp=2, pp=4), ranks_per_host=2, hosts=["a", "b", "c"])


def test_parse_layout() -> None:
    lay = parse_layout("tp=2,pp=4,dp=4")
    assert (lay.tp, lay.pp, lay.dp, lay.cp, lay.ep, lay.world_size) == (2, 4, 4, 1, 1, 32)
    assert parse_layout("tp=2 pp=4", world_size=16).dp == 2
    assert parse_layout("TP=2,order=pp-dp-tp-cp-ep").order == "pp-dp-tp-cp-ep"
    assert parse_layout("tp=2,pp=4,dp=2", world_size=16).world_size == 16


@pytest.mark.parametrize(
    ("text", "world", "message"),
    [
        ("", None, "empty layout"),
        ("tp=2,xp=4", None, "unknown layout key 'xp'"),
        ("tp=2,tp=4", None, "given twice"),
        ("tp=0", None, "positive integer"),
        ("tp=two", None, "positive integer"),
        ("tp", None, "KEY=VALUE"),
        ("tp=2,order=tp-dp-pp", None, "each of tp, cp, ep, dp, pp once"),
        ("tp=2,pp=4,dp=4", 16, "multiplies to 32 ranks.*world size is 16"),
        ("tp=3,pp=2", 16, "not divisible"),
    ],
)
def test_parse_layout_errors(text: str, world: int | None, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_layout(text, world_size=world)


def test_group_finder_remembers_answers_within_its_bound() -> None:
    t = Topology(ParallelLayout(tp=2, pp=4, dp=2), 2)
    finder = t.finder
    assert t.finder is finder  # one per topology, shared by every caller
    first = smallest_group(t, [12, 13])
    assert first is not None and (first.kind, first.index) == ("tp", 6)
    assert finder.smallest({13, 12}) is first and len(finder) == 1  # remembered, any order
    assert finder.members("pp", 0) == (0, 4, 8, 12) and finder.group_of(8, "pp") is finder.members("pp", 0)
    singles = [(r,) for r in range(16)]
    pairs = list(itertools.combinations(range(16), 2))
    for ranks in (singles + pairs)[: MAX_REMEMBERED_SEARCHES + 10]:
        finder.smallest(ranks)
    assert 0 < len(finder) <= MAX_REMEMBERED_SEARCHES
    assert finder.smallest([12, 13]) == first  # forgotten or not, the same answer
    with pytest.raises(UsageError, match="rank 16 is outside"):
        finder.smallest([16])
