"""Blame's rules one by one: each rule of robustctl.stacks.blame alone, on a picture where it fires
and one where it does not (the pictures of test_stacks_blame.py: Megatron's 16-GPU example, tp=2,
pp=4, dp=2, two ranks per machine; PP groups [0,4,8,12] …, TP groups [0,1] …, DP groups [0,2] …)."""

from __future__ import annotations

from robustctl.config import ParallelLayout
from robustctl.inventory.topology import Topology
from robustctl.stacks.blame import (
    CLASS_RULES,
    BlameEvidence,
    BlameOptions,
    WaitsEvidence,
    blame,
    gather_evidence,
    rule_dominant_group,
    rule_no_dominant_main,
    rule_not_a_minority,
    rule_nothing_readable,
    rule_outlier_classes,
    rule_own_machines,
    rule_promoted_group,
    rule_unlocalized,
    rule_waits_for,
)
from robustctl.stacks.cluster import cluster
from robustctl.stacks.model import ProcessDump
from robustctl.stacks.waitsfor import analyze_waits
from tests.unit.test_stacks_blame import (
    COMPUTE,
    DP_ALLREDUCE,
    EMB_ALLREDUCE,
    PP_RECV,
    bad,
    mk,
    topo,
)


def evidence(
    dumps: list[ProcessDump], t: Topology | None = None, opts: BlameOptions | None = None
) -> BlameEvidence:
    return gather_evidence(cluster(dumps), t, opts)


def one_stuck(rank: int = 6, n: int = 16) -> list[ProcessDump]:
    return [mk(r, COMPUTE if r == rank else DP_ALLREDUCE) for r in range(n)]


def fig7() -> list[ProcessDump]:
    """ByteRobust's Fig. 7: rank 12 (last stage) computes, its stage-mates wait in recv."""
    return [mk(r, COMPUTE if r == 12 else PP_RECV if r in (0, 4, 8) else DP_ALLREDUCE) for r in range(16)]


def test_rules_are_tried_in_the_documented_order() -> None:
    names = [r.__name__ for r in CLASS_RULES]
    assert names[:8] == [
        "rule_nothing_readable",
        "rule_no_dominant_main",
        "rule_dominant_group",
        "rule_promoted_group",
        "rule_own_machines",
        "rule_unlocalized",
        "rule_not_a_minority",
        "rule_outlier_classes",
    ]


def test_nothing_readable() -> None:
    v = rule_nothing_readable(evidence([bad(r) for r in range(16)], topo()))
    assert v is not None and not v.ambiguous and v.ranks == ()
    assert v.reason == "no process could be read: nothing to compare"
    assert v.result.notes[-1] == v.reason
    assert rule_nothing_readable(evidence(one_stuck(), topo())) is None


def test_no_dominant_main() -> None:
    halves = [mk(r, COMPUTE if r < 8 else DP_ALLREDUCE) for r in range(16)]
    v = rule_no_dominant_main(evidence(halves, topo()))
    assert v is not None and v.ambiguous and v.ranks == () and v.machines == ()
    assert "no dominant main class" in v.reason and v.result.ambiguity == v.reason
    assert rule_no_dominant_main(evidence(one_stuck(), topo())) is None


def test_dominant_group_names_the_tp_group_of_one_stuck_rank() -> None:
    v = rule_dominant_group(evidence(one_stuck(6), topo()))
    assert v is not None and not v.ambiguous
    assert v.ranks == (6,) and v.machines == ("node03",)
    assert v.result.group is not None and (v.result.group.kind, v.result.group.index) == ("tp", 3)
    assert "tp group 3" in v.reason


def test_dominant_group_over_evicts_the_pp_group_of_fig7() -> None:
    v = rule_dominant_group(evidence(fig7(), topo()))
    assert v is not None and v.ranks == (0, 4, 8, 12)
    assert v.machines == ("node00", "node02", "node04", "node06")


def test_dominant_group_does_not_fire_without_a_layout_or_a_small_group() -> None:
    assert rule_dominant_group(evidence(one_stuck(6))) is None
    # 4 ranks per host: Fig. 7's PP group spans all 4 machines, more than half
    assert rule_dominant_group(evidence(fig7(), topo(rph=4, hosts=None))) is None


def test_promoted_group_treats_a_large_waiting_class_as_healthy() -> None:
    t = Topology(ParallelLayout(pp=4, dp=8), 4)
    stage0 = set(t.group_of(0, "dp"))
    dumps = [mk(r, COMPUTE if r == 30 else EMB_ALLREDUCE if r in stage0 else DP_ALLREDUCE) for r in range(32)]
    ev = evidence(dumps, t)
    assert rule_dominant_group(ev) is None  # stage 0 and rank 30 share no small group
    v = rule_promoted_group(ev)
    assert v is not None and v.ranks == (30,) and v.machines == ("machine-7",)
    assert any("treated as healthy" in n for n in v.result.notes)
    assert rule_promoted_group(evidence(dumps, t, BlameOptions(promote_waiting=False))) is None


def test_promoted_group_never_promotes_a_computing_class() -> None:
    t = Topology(ParallelLayout(pp=4, dp=8), 4)
    stage0 = set(t.group_of(0, "dp"))
    dumps = [mk(r, COMPUTE if r in stage0 or r == 30 else DP_ALLREDUCE) for r in range(32)]
    assert rule_promoted_group(evidence(dumps, t)) is None


def test_own_machines_names_few_outliers_in_no_common_group() -> None:
    t = Topology(ParallelLayout(dp=16), 2)
    v = rule_own_machines(evidence([mk(r, COMPUTE if r in (3, 12) else DP_ALLREDUCE) for r in range(16)], t))
    assert v is not None and v.ranks == (3, 12) and v.machines == ("machine-1", "machine-6")
    assert v.result.group is None and any("only the outliers' own machines" in n for n in v.result.notes)


def test_own_machines_does_not_fire_on_many_machines_or_a_proper_group() -> None:
    t = Topology(ParallelLayout(dp=16), 2)
    spread = {0, 3, 6, 9, 12}  # five machines: more than max_spread_machines
    assert (
        rule_own_machines(evidence([mk(r, COMPUTE if r in spread else DP_ALLREDUCE) for r in range(16)], t))
        is None
    )
    assert rule_own_machines(evidence(one_stuck(6), topo())) is None  # its TP group holds it


def test_unlocalized_says_where_the_outliers_sit() -> None:
    t = Topology(ParallelLayout(tp=2, pp=4, dp=4), 2)
    spread = {0, 9, 18, 27, 31}
    v = rule_unlocalized(evidence([mk(r, COMPUTE if r in spread else DP_ALLREDUCE) for r in range(32)], t))
    assert v is not None and v.ambiguous and v.ranks == ()
    assert "share no parallel group smaller than the whole job" in v.reason
    v = rule_unlocalized(evidence(fig7(), topo(rph=4, hosts=None)))
    assert v is not None and v.ambiguous and "pp group 0, spans 4 of 4 machines" in v.reason


def test_unlocalized_does_not_fire_without_a_layout_or_outliers() -> None:
    assert rule_unlocalized(evidence(one_stuck(6))) is None
    assert rule_unlocalized(evidence([mk(r, DP_ALLREDUCE) for r in range(16)], topo())) is None


def test_not_a_minority_without_a_layout() -> None:
    many = [mk(r, DP_ALLREDUCE) for r in range(4)] + [mk(r, COMPUTE) for r in range(4, 7)]
    many += [mk(r, PP_RECV) for r in range(7, 9)]
    v = rule_not_a_minority(evidence(many))
    assert v is not None and v.ambiguous and v.reason == "outliers are 5 of 9 main processes: not a minority"
    assert rule_not_a_minority(evidence(one_stuck(2, 8))) is None
    assert rule_not_a_minority(evidence(many, topo())) is None  # with a layout the group rules decide


def test_outlier_classes_without_a_layout_names_by_dump_host() -> None:
    dumps = [mk(r, COMPUTE if r == 2 else DP_ALLREDUCE, host=f"h{r // 2}") for r in range(8)]
    v = rule_outlier_classes(evidence(dumps))
    assert v is not None and v.ranks == (2,) and v.machines == ("h1",) and v.result.group is None
    assert rule_outlier_classes(evidence(dumps[:8], Topology(ParallelLayout(dp=8), 2))) is None


def test_waits_for_names_the_end_of_the_chains_where_the_classes_are_ambiguous() -> None:
    t = topo(rph=4, hosts=None)
    clusters = cluster(fig7())
    ev = gather_evidence(clusters, t)
    answer = blame(clusters, t, BlameOptions(waits_for=False))
    assert answer.ambiguous
    v = rule_waits_for(WaitsEvidence(ev, answer, analyze_waits(clusters, t)))
    assert v is not None and v.rule == "waits-for" and not v.ambiguous
    assert v.ranks == (12,) and v.machines == ("machine-3",)
    assert v.result.decided_by == "waits-for"


def test_waits_for_leaves_a_class_answer_that_holds_the_ends() -> None:
    t = topo()
    clusters = cluster(fig7())
    answer = blame(clusters, t, BlameOptions(waits_for=False))
    assert answer.suspect_ranks == (0, 4, 8, 12)
    assert (
        rule_waits_for(WaitsEvidence(gather_evidence(clusters, t), answer, analyze_waits(clusters, t)))
        is None
    )


def test_waits_for_does_not_fire_when_the_chains_decide_nothing() -> None:
    t = topo()
    clusters = cluster([mk(r, DP_ALLREDUCE) for r in range(16)])  # a complete collective: stuck inside it
    wf = analyze_waits(clusters, t)
    assert not wf.decided
    answer = blame(clusters, t, BlameOptions(waits_for=False))
    assert rule_waits_for(WaitsEvidence(gather_evidence(clusters, t), answer, wf)) is None
