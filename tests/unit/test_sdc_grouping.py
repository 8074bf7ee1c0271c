"""robustctl.sdc.grouping: the dual-phase groups of ByteRobust §4.2 (Algorithm 1, Fig. 6)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.config import ParallelLayout
from robustctl.errors import UsageError
from robustctl.sdc.grouping import (
    choose_k,
    group_members,
    horizontal,
    plan_grouping,
    replica_unit,
    vertical,
)


def test_fig6_machine_13_is_h3_cap_v1() -> None:
    g = plan_grouping(24, ParallelLayout(tp=8, pp=2, dp=12), 8)
    assert (g.k, g.m, g.n, g.k_chosen_by) == (2, 4, 6, "default")
    h3 = g.group_of(1, 13)
    v1 = g.group_of(2, 13)
    assert (h3.name, h3.machines) == ("H3", (12, 13, 14, 15))
    assert (v1.name, v1.machines) == ("V1", (1, 7, 13, 19))
    assert set(h3.machines) & set(v1.machines) == {13}
    assert g.replay_dp == 2  # each group replays TP=8, PP=2 with DP=k=2: two whole pipelines


def test_m_greater_than_n_is_refused_naming_each_k() -> None:
    # 8 machines, PP=4: k=1 gives m=4 > n=2, k=2 gives m=8 > n=1.
    with pytest.raises(UsageError) as exc:
        plan_grouping(8, ParallelLayout(tp=1, pp=4, dp=2), 1)
    msg = str(exc.value)
    assert "\n" not in msg
    assert "k=1: m=4 machines per group > n=2 groups" in msg
    assert "k=2: m=8 machines per group > n=1 groups" in msg


def test_k_override_that_breaks_m_le_n_or_does_not_divide() -> None:
    lay = ParallelLayout(tp=1, pp=2, dp=12)
    assert plan_grouping(24, lay, 1, k=1).m == 2
    assert plan_grouping(24, lay, 1, k=1).k_chosen_by == "--k"
    with pytest.raises(UsageError, match=r"--k 3 .*k=3: m=6 machines per group > n=4 groups"):
        plan_grouping(24, lay, 1, k=3)
    with pytest.raises(UsageError, match=r"k=5: does not divide the 12 pipeline units"):
        plan_grouping(24, lay, 1, k=5)


def test_layout_not_matching_machines_is_refused() -> None:
    with pytest.raises(UsageError, match="24 ranks, but 25 machines"):
        plan_grouping(25, ParallelLayout(pp=2, dp=12), 1)


def test_units_for_tp_spanning_machines_and_several_stages_per_machine() -> None:
    # TP=16 on 8-GPU machines: a pipeline of PP=4 stages is 8 machines.
    assert replica_unit(ParallelLayout(tp=16, pp=4, dp=8), 8) == replica_unit(
        ParallelLayout(tp=16, pp=4, dp=2), 8
    )
    u = replica_unit(ParallelLayout(tp=16, pp=4, dp=8), 8)
    assert (u.machines, u.replicas) == (8, 1)
    # TP=2, PP=4 on 8-GPU machines: one machine is one whole pipeline.
    u = replica_unit(ParallelLayout(tp=2, pp=4, dp=16), 8)
    assert (u.machines, u.replicas) == (1, 1)
    # TP=2, PP=2: one machine holds two pipelines; groups of k machines replay DP=2k.
    g = plan_grouping(16, ParallelLayout(tp=2, pp=2, dp=32), 8)
    assert (g.unit.machines, g.unit.replicas, g.k, g.m, g.n, g.replay_dp) == (1, 2, 2, 2, 8, 4)
    # TP=4, PP=3 on 8-GPU machines: 3 machines hold 2 pipelines.
    u = replica_unit(ParallelLayout(tp=4, pp=3, dp=2), 8)
    assert (u.machines, u.replicas) == (3, 2)


def test_default_k_is_smallest_valid_k_of_two_or_more_else_one() -> None:
    u = replica_unit(ParallelLayout(tp=8, pp=2, dp=12), 8)
    assert choose_k(24, u) == (2, [])
    # 6 machines of PP=2: k=3 would give m=6 > n=1; k=1 is the only valid choice.
    u = replica_unit(ParallelLayout(tp=1, pp=2, dp=3), 1)
    assert choose_k(6, u) == (1, [])
    # 9 machines, PP=1: k=3 (m=3, n=3).
    u = replica_unit(ParallelLayout(dp=9), 1)
    assert choose_k(9, u) == (3, [])


@st.composite
def layouts(draw: st.DrawFn) -> tuple[int, ParallelLayout, int]:
    """A job of up to a few thousand machines: (M, layout, G)."""
    g = draw(st.sampled_from([1, 2, 4, 8]))
    tp = draw(st.sampled_from([1, 2, 4, 8, 16]))
    pp = draw(st.integers(1, 8))
    r = tp * pp
    d = math.lcm(r, g) // r  # replicas per unit
    units = draw(st.integers(1, 4096 // (math.lcm(r, g) // g)))
    dp = d * units
    machines = tp * pp * dp // g
    return machines, ParallelLayout(tp=tp, pp=pp, dp=dp), g


@given(layouts(), st.data())
def test_phases_partition_and_intersect_in_at_most_one_machine(
    job: tuple[int, ParallelLayout, int], data: st.DataObject
) -> None:
    machines, layout, g = job
    try:
        grouping = plan_grouping(machines, layout, g)
    except UsageError as exc:
        assert "\n" not in str(exc) and "no valid k" in str(exc)
        unit = replica_unit(layout, g)
        assert unit.machines**2 > machines  # even k=1 breaks m <= n
        return
    m, n = grouping.m, grouping.n
    assert m * n == machines and m <= n
    assert m % grouping.unit.machines == 0  # whole pipeline units
    assert grouping.replay_dp * grouping.unit.replica_ranks == m * g  # the group's ranks are whole replicas
    for phase in grouping.phases:
        assert len(phase.groups) == n
        seen = [x for grp in phase.groups for x in grp.machines]
        assert sorted(seen) == list(range(machines))  # a partition: every machine exactly once
        assert all(len(grp.machines) == m for grp in phase.groups)
    x = data.draw(st.integers(0, machines - 1))
    h = grouping.group_of(1, x)
    v = grouping.group_of(2, x)
    assert (h.index, v.index) == (horizontal(x, m), vertical(x, n))
    assert set(h.machines) & set(v.machines) == {x}
    other = data.draw(st.integers(0, n - 1))
    assert len(set(h.machines) & set(group_members(2, other, m, n))) <= 1


@given(st.integers(1, 4096), st.data())
def test_every_valid_split_of_m_up_to_4096_is_injective(machines: int, data: st.DataObject) -> None:
    """x -> (H(x), V(x)) is one-to-one for every m | M with m <= n: H cap V holds at most one machine."""
    splits = [m for m in range(1, math.isqrt(machines) + 1) if machines % m == 0]
    m = data.draw(st.sampled_from(splits))
    n = machines // m
    pairs = {(horizontal(x, m), vertical(x, n)) for x in range(machines)}
    assert len(pairs) == machines
    assert {h for h, _ in pairs} == set(range(n)) == {v for _, v in pairs}
