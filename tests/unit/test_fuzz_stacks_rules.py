"""Property-based tests of stacks blame's rules and the remembered group search they share.

Contracts checked: a topology's :class:`~robustctl.inventory.topology.GroupFinder` answers what a
fresh search answers, asked once or twice, and the group holds every rank; on any picture of
waiting, computing and unreadable ranks, :func:`~robustctl.stacks.blame.blame` (classes only) is the
answer of the first rule of ``CLASS_RULES`` that fires, an ambiguous verdict names nobody, and a
named rank is a rank with a dump, evicted through machines of the job. Seeded and bounded by the
``ci`` profile (tests/conftest.py); pictures are at most 32 ranks, so each example is milliseconds.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.config import ParallelLayout
from robustctl.inventory.topology import Topology
from robustctl.stacks.blame import CLASS_RULES, BlameOptions, blame, gather_evidence
from robustctl.stacks.cluster import cluster
from robustctl.stacks.model import ProcessDump
from tests.unit.test_stacks_blame import COMPUTE, DATA_WAIT, DP_ALLREDUCE, EMB_ALLREDUCE, PP_RECV, bad, mk

pytestmark = pytest.mark.fuzz

SHAPES = [(1, 4, 2), (2, 2, 2), (2, 4, 2), (1, 2, 4), (2, 4, 4), (1, 1, 8)]
"""(tp, pp, dp): 8 to 32 ranks."""
STATES = [DP_ALLREDUCE, EMB_ALLREDUCE, PP_RECV, COMPUTE, DATA_WAIT, "unreadable", "missing"]


@st.composite
def topologies(draw: st.DrawFn) -> Topology:
    tp, pp, dp = draw(st.sampled_from(SHAPES))
    rph = draw(st.sampled_from([1, 2, 4, None]))
    return Topology(ParallelLayout(tp=tp, pp=pp, dp=dp), rph)


@given(topologies(), st.data())
def test_remembered_search_answers_what_a_fresh_one_does(t: Topology, data: st.DataObject) -> None:
    ranks = data.draw(st.sets(st.integers(0, t.world_size - 1), min_size=1, max_size=6))
    first = t.finder.smallest(ranks)
    again = t.finder.smallest(sorted(ranks, reverse=True))  # any order, same set
    fresh = Topology(t.layout, t.ranks_per_host).finder.smallest(ranks)
    assert first == again == fresh and first is not None
    if first.kind == "job":
        held = set(range(t.world_size))
    elif first.kind == "rank":
        held = {first.index}
    else:
        held = set(t.finder.members(first.kind, first.index))
        assert held == set(t.group_ranks(first.kind, first.index))
    assert ranks <= held


@given(topologies(), st.data())
def test_blame_is_the_first_rule_that_fires(t: Topology, data: st.DataObject) -> None:
    picks = data.draw(st.lists(st.sampled_from(STATES), min_size=t.world_size, max_size=t.world_size))
    dumps: list[ProcessDump] = []
    for r, state in enumerate(picks):
        if state == "unreadable":
            dumps.append(bad(r))
        elif state != "missing":
            assert not isinstance(state, str)
            dumps.append(mk(r, state))
    if not dumps:
        return
    clusters = cluster(dumps)
    layout = data.draw(st.sampled_from([t, None]))
    opts = BlameOptions(waits_for=False, promote_waiting=data.draw(st.booleans()))
    ev = gather_evidence(clusters, layout, opts)
    verdict = next(v for rule in CLASS_RULES if (v := rule(ev)) is not None)
    assert verdict.result == blame(clusters, layout, opts)
    assert verdict.reason
    if verdict.ambiguous:
        assert verdict.ranks == () and verdict.machines == () and verdict.result.suspects == ()
    dumped = {d.rank for d in dumps}
    assert set(verdict.ranks) <= dumped
    if layout is not None and layout.ranks_per_host is not None:
        names = {layout.machine_name(m) for m in range(layout.n_machines or 0)}
        assert set(verdict.machines) <= names
