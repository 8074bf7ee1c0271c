"""robustctl.sdc.verdict: faulty groups by majority digest and NaN, and the verdict of both rounds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from robustctl.exit_codes import ExitCode
from robustctl.sdc.grouping import group_members, horizontal, vertical
from robustctl.sdc.verdict import GroupRun, GroupState, Verdict, judge, judge_phase, loss_is_finite

GOOD = ("0x1.0p+0", "0x1.8p-1")


def phase(p: int, m: int, n: int, bad: set[int] = frozenset(), failed: set[int] = frozenset(),
          nan: set[int] = frozenset(), intermittent_hidden: set[int] = frozenset()) -> list[GroupRun]:  # fmt: skip
    """The n groups of phase ``p``: a group holding a machine of ``bad`` gets another digest."""
    out = []
    for i in range(n):
        ms = group_members(p, i, m, n)
        name = f"{'HV'[p - 1]}{i}"
        if set(ms) & failed:
            out.append(GroupRun(p, name, ms, ran=False, error=f"host{min(set(ms) & failed)}: unreachable"))
            continue
        hit = set(ms) & (bad - intermittent_hidden)
        loss = ("nan", "nan") if set(ms) & nan else GOOD
        out.append(GroupRun(p, name, ms, ran=True, loss=loss, digest="bad" if hit else "good"))
    return out


def test_fig6_isolates_machine_13() -> None:
    v = judge(24, phase(1, 4, 6, {13}), phase(2, 4, 6, {13}))
    assert v.verdict is Verdict.ISOLATED and v.machines == (13,) and v.over_evict == (13,)
    assert [g.run.name for g in v.phases[0].groups if g.state is GroupState.FAULTY] == ["H3"]
    assert [g.run.name for g in v.phases[1].groups if g.state is GroupState.FAULTY] == ["V1"]
    assert v.verdict.exit_code is ExitCode.CRITICAL


def test_no_fault_is_not_reproduced_exit_1() -> None:
    v = judge(24, phase(1, 4, 6), phase(2, 4, 6))
    assert (
        v.verdict is Verdict.NOT_REPRODUCED and v.machines == () and v.verdict.exit_code is ExitCode.WARNING
    )


def test_two_faulty_machines_are_candidates_with_both() -> None:
    v = judge(24, phase(1, 4, 6, {2, 13}), phase(2, 4, 6, {2, 13}))
    assert v.verdict is Verdict.CANDIDATES and {2, 13} <= set(v.machines)
    assert set(v.intersections) == {2, 13, 1, 14} & set(v.machines)  # H0∩V1 = 1, H3∩V2 = 14: ghosts


def test_nan_loss_is_faulty_even_with_the_majority_digest() -> None:
    v = judge(24, phase(1, 4, 6, nan={13}), phase(2, 4, 6, nan={13}))
    assert v.verdict is Verdict.ISOLATED and v.machines == (13,)
    assert "loss is nan at step 0" in next(g.reason for g in v.phases[0].groups if g.run.name == "H3")


def test_intermittent_fault_is_candidates_and_says_so() -> None:
    v = judge(24, phase(1, 4, 6, {13}), phase(2, 4, 6))
    assert v.verdict is Verdict.CANDIDATES and v.machines == (12, 13, 14, 15)
    assert any("intermittent" in n for n in v.notes)


def test_failed_group_is_never_faulty_and_nothing_is_blamed() -> None:
    v = judge(24, phase(1, 4, 6, failed={5}), phase(2, 4, 6, failed={5}))
    assert v.verdict is Verdict.FAILED_TO_RUN and v.machines == () and v.over_evict == ()
    assert v.untested == (5,) and v.verdict.exit_code is ExitCode.UNKNOWN
    assert any("H1 did not run: host5: unreachable" in n for n in v.notes)


def test_fault_whose_other_group_failed_narrows_to_the_untested_machine() -> None:
    v = judge(24, phase(1, 4, 6, {13}), phase(2, 4, 6, {13}, failed={7}))  # V1 holds 13 and 7
    assert v.verdict is Verdict.CANDIDATES and v.machines == (13,)


def test_no_majority_is_undecided_not_faulty() -> None:
    runs = [GroupRun(1, "H0", (0,), True, GOOD, "a"), GroupRun(1, "H1", (1,), True, GOOD, "b")]
    pj = judge_phase(1, runs)
    assert pj.majority_digest is None and {g.state for g in pj.groups} == {GroupState.UNDECIDED}


def test_diverging_replay_is_not_blamed_on_anyone() -> None:
    v = judge(4, phase(1, 2, 2, nan={0, 1, 2, 3}), phase(2, 2, 2, nan={0, 1, 2, 3}))
    assert v.verdict is Verdict.FAILED_TO_RUN and v.machines == ()


def test_inconsistent_group_is_faulty() -> None:
    runs = phase(1, 2, 3)
    runs[1] = GroupRun(1, "H1", runs[1].machines, True, GOOD, "good", consistent=False)
    assert judge_phase(1, runs).groups[1].state is GroupState.FAULTY


def test_loss_is_finite() -> None:
    assert loss_is_finite("0x1.8p-1") and loss_is_finite("0.5")
    assert not loss_is_finite("nan") and not loss_is_finite("-inf") and not loss_is_finite("garbage")


@given(st.data())
def test_any_single_persistent_fault_is_isolated(data: st.DataObject) -> None:
    m = data.draw(st.integers(1, 8))
    n = data.draw(st.integers(m, 12))
    x = data.draw(st.integers(0, m * n - 1))
    if n < 3:  # a strict majority needs at least 3 groups when one differs
        return
    v = judge(m * n, phase(1, m, n, {x}), phase(2, m, n, {x}))
    assert v.verdict is Verdict.ISOLATED and v.machines == (x,)
    assert (horizontal(x, m), vertical(x, n)) == (
        int(v.phases[0].groups[horizontal(x, m)].run.name[1:]),
        int(v.phases[1].groups[vertical(x, n)].run.name[1:]),
    )
