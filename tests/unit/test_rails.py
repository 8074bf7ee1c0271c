"""Safety rails: each refusal names its rule and its override; --force overrides what it may."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from robustctl.actions import ActionContext, open_context
from robustctl.actions.evict import EvictSpec, plan_evict
from robustctl.actions.plan import apply_plan
from robustctl.actions.rails import evaluate_rails, limit
from robustctl.config import PolicySettings
from robustctl.errors import ActionRefused
from robustctl.exit_codes import ExitCode
from robustctl.store import MachineState, Store

# 20 hosts, one job on 16 (tp=2, pp=4, dp=4, 2 ranks per host): PP groups span 4 machines.
INVENTORY = """\
gpus_per_host: 2
hosts:
  - name: node[01-20]
    address: 127.0.0.[2-21]
jobs:
  big:
    hosts: node[01-16]
    layout: {tp: 2, pp: 4, dp: 4}
"""


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[ActionContext]:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    c = open_context(inv, tmp_path / "state.db")
    yield c
    c.close()


def failed(plan: object) -> list[str]:
    return [r.rule for r in plan.failed_rails]  # type: ignore[attr-defined]


def test_limit_allows_at_least_one_machine() -> None:
    assert limit(0.1, 5) == 1 and limit(0.1, 20) == 2 and limit(0.5, 16) == 8 and limit(0.3, 10) == 3


def test_defaults_refuse_an_over_large_plan_naming_rule_and_override(ctx: ActionContext) -> None:
    # The PP group of node01 is 4 machines: over the default 10% of 20 hosts (2 machines).
    plan = plan_evict(EvictSpec(hosts="node01", job="big", over_evict="pp", reason="xid"), ctx)
    assert len(plan.targets) == 4 and failed(plan) == ["max-cluster-fraction"] and plan.refused
    with pytest.raises(ActionRefused) as exc:
        apply_plan(plan, ctx.scheduler, ctx.store)
    msg = str(exc.value)
    assert "rule max-cluster-fraction: 4 of 20 hosts" in msg and "limit 2 (10%)" in msg
    assert "policy.max_cluster_fraction" in msg and "--force --force-reason" in msg
    assert exc.value.exit_code == ExitCode.CRITICAL
    assert ctx.store.machines() == []  # nothing applied
    assert ctx.store.audit()[0].status == "refused"


def test_force_with_a_reason_overrides_and_is_audited(ctx: ActionContext) -> None:
    req = EvictSpec(
        hosts="node01", job="big", over_evict="pp", reason="xid", force=True, force_reason="INC-42"
    )
    plan = plan_evict(req, ctx)
    assert failed(plan) == ["max-cluster-fraction"] and not plan.refused
    result = apply_plan(plan, ctx.scheduler, ctx.store)
    assert result.status == "applied"
    (rec,) = ctx.store.audit()
    assert rec.forced and rec.plan is not None and rec.plan["force_reason"] == "INC-42"


def test_the_window_counts_earlier_evictions(ctx: ActionContext) -> None:
    apply_plan(plan_evict(EvictSpec(hosts="node01,node02", reason="a"), ctx), ctx.scheduler, ctx.store)
    plan = plan_evict(EvictSpec(hosts="node03", reason="b"), ctx)
    assert failed(plan) == ["max-cluster-fraction"]
    assert "3 of 20 hosts" in plan.refusal().args[0]


def test_evictions_per_hour_and_job_fraction(tmp_path: Path) -> None:
    policy = PolicySettings(max_evictions_per_hour=3, max_job_fraction=0.25, max_cluster_fraction=1.0)
    with Store.open(tmp_path / "s.db") as store:
        for h in ("a", "b"):
            store.set_state(h, MachineState.EVICTED, "earlier")
        now = store.clock()
        checks = evaluate_rails(
            new_evictions=["c", "d"],
            suspects=["c"],
            cluster_hosts=list("abcdefghij"),
            jobs={"j": list("abcdefgh"), "other": ["i", "j"]},
            store=store,
            policy=policy,
            now=now,
        )
        by_rule = {c.rule: c for c in checks}
        assert not by_rule["max-evictions-per-hour"].passed
        assert (
            "4 machine(s) evicted in the last hour with this plan (2 before it), limit 3"
            in by_rule["max-evictions-per-hour"].detail
        )
        assert (
            not by_rule["max-job-fraction"].passed
            and "job j: 4 of its 8" in by_rule["max-job-fraction"].detail
        )
        assert [c.rule for c in checks].count("max-job-fraction") == 1  # job "other" loses nothing
        # An hour later, the rate limit and the window forget a and b.
        later = evaluate_rails(
            new_evictions=["c"],
            suspects=["c"],
            cluster_hosts=list("abcdefghij"),
            jobs={"j": list("abcdefgh")},
            store=store,
            policy=policy,
            now=now + 3601,
        )
        assert {c.rule: c.passed for c in later}["max-evictions-per-hour"]


def test_circuit_breaker_fires_when_too_many_hosts_look_bad(ctx: ActionContext) -> None:
    for h in ("node05", "node06", "node07", "node08", "node09"):
        ctx.store.set_state(h, MachineState.SUSPECT, "monitoring says so")
    plan = plan_evict(EvictSpec(hosts="node10,node11", reason="x", force=False), ctx)
    assert "circuit-breaker" in failed(plan)
    with pytest.raises(ActionRefused, match=r"rule circuit-breaker: 7 of 20 hosts look bad.*observer fault"):
        apply_plan(plan, ctx.scheduler, ctx.store)
    forced = plan_evict(
        EvictSpec(hosts="node10,node11", reason="x", force=True, force_reason="verified"), ctx
    )
    assert apply_plan(forced, ctx.scheduler, ctx.store).status == "applied"


def test_over_evicted_healthy_machines_do_not_trip_the_breaker(ctx: ActionContext) -> None:
    ctx.policy = PolicySettings(max_cluster_fraction=1.0, max_job_fraction=1.0, circuit_breaker_fraction=0.1)
    plan = plan_evict(EvictSpec(hosts="node01", job="big", over_evict="pp", reason="x"), ctx)
    assert len(plan.targets) == 4 and failed(plan) == []
