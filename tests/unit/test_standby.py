"""Warm standbys: the pool's size (ByteRobust Table 5), add, self-check, activate."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from robustctl.actions import ActionContext, open_context
from robustctl.actions.evict import EvictSpec, plan_evict
from robustctl.actions.plan import apply_plan
from robustctl.actions.standby import (
    binomial_cdf,
    check_standbys,
    list_standbys,
    observed_daily_rate,
    plan_activate,
    plan_add,
    pool_size,
)
from robustctl.cli.main import main
from robustctl.errors import ActionRefused, HostUnreachable, UsageError
from robustctl.schedulers.base import NodeState
from robustctl.store import MachineState, Readiness
from robustctl.testing.fake_transport import FakeTransport
from robustctl.transport.pool import TransportPool

REPO = Path(__file__).resolve().parents[2]

INVENTORY = """\
gpus_per_host: 2
hosts:
  - name: node[01-04]
    address: 127.0.0.[2-5]
  - name: spare[1-3]
    address: 127.0.0.[10-12]
    state: standby
    gpus_per_host: 0     # CPU-only here, so that a CPU burn is a pass
  - name: idle1
    address: 127.0.0.20
jobs:
  small:
    hosts: node[01-04]
    layout: {tp: 2, pp: 2, dp: 2}
policy: {max_cluster_fraction: 1.0, max_job_fraction: 1.0, circuit_breaker_fraction: 0.5}
"""


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[ActionContext]:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    c = open_context(inv, tmp_path / "state.db")
    yield c
    c.close()


# --- sizing ------------------------------------------------------------------------------------------


def test_binomial_cdf_matches_the_direct_sum() -> None:
    for n, p in [(10, 0.3), (128, 0.0012), (1000, 0.01), (7, 0.0), (7, 1.0)]:
        for k in range(-1, 6):
            direct = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(max(k + 1, 0)))
            assert binomial_cdf(k, n, p) == pytest.approx(min(direct, 1.0), abs=1e-12)
    assert binomial_cdf(3, 200_000, 1e-5) == pytest.approx(0.857, abs=1e-3)  # Poisson(2) at 3


def test_pool_size_reproduces_byterobust_table_5() -> None:
    # ByteRobust (arXiv 2509.16293), Table 5: spares for 128, 256, 512, 1024 machines, ~0.12%/day.
    assert [pool_size(n, 0.0012) for n in (128, 256, 512, 1024)] == [2, 2, 3, 4]
    # The convention is "smallest k with CDF(k) >= 0.99": at 128 machines CDF(1) = 0.9892 < 0.99.
    assert binomial_cdf(1, 128, 0.0012) < 0.99 <= binomial_cdf(2, 128, 0.0012)
    assert pool_size(1024, 0.0012, window_days=2) == 7
    assert pool_size(0, 0.01) == 0
    with pytest.raises(UsageError):
        pool_size(10, 0.6, window_days=2)


def test_cli_size_prints_4_for_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["standby", "size", "--machines", "1024", "--daily-failure-rate", "0.0012"]) == 0
    assert capsys.readouterr().out == "4\n"
    assert main(["standby", "size", "--machines", "512", "--daily-failure-rate", "0.0012", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["standbys"] == 3 and doc["kind"] == "standby-size"
    assert main(["standby", "size", "--machines", "512"]) == 64


def test_size_from_the_stores_eviction_history(ctx: ActionContext) -> None:
    now = ctx.clock()
    clock = [now - 10 * 86400.0]
    ctx.store.clock = lambda: clock[0]
    for i in range(12):  # 12 evictions over 10 days on 1000 machines: 0.0012 per machine-day
        clock[0] = now - 10 * 86400.0 + i * 3600.0 * 20
        ctx.store.set_state(f"h{i}", MachineState.EVICTED, "x")
    ctx.store.clock = lambda: now
    ctx.clock = lambda: now
    rate, n, span = observed_daily_rate(ctx, 1000, 10)
    assert n == 12 and span == pytest.approx(10.0) and rate == pytest.approx(0.0012)
    assert pool_size(1000, rate) == 4


# --- add / check / activate --------------------------------------------------------------------------


def test_add_holds_hosts_as_unchecked_standbys_and_refuses_job_hosts(ctx: ActionContext) -> None:
    plan = plan_add("idle1", "pool", ctx)
    assert not plan.refused
    apply_plan(plan, ctx.scheduler, ctx.store)
    assert ctx.scheduler.state(["idle1"])["idle1"] is NodeState.STANDBY
    info = {s.host: s for s in list_standbys(ctx)}
    assert set(info) == {"spare1", "spare2", "spare3", "idle1"}
    assert info["idle1"].readiness is Readiness.UNCHECKED
    busy = plan_add("node02", "pool", ctx)
    assert [r.rule for r in busy.failed_rails] == ["not-in-a-job"]
    with pytest.raises(ActionRefused, match="rule not-in-a-job: runs a job: node02 \\(job small\\)"):
        apply_plan(busy, ctx.scheduler, ctx.store)


def _with_clock(data: dict[str, Any]) -> Any:
    import time

    def answer(argv: Any) -> dict[str, Any]:
        d = json.loads(json.dumps(data))
        d["clock"]["time"] = time.time()
        return d

    return answer


NO_GPU = {
    "available": False,
    "reason": "nvmlInit: NVML Shared Library Not Found",
    "reason_code": "library_not_found",
}


def _burn(mismatches: int = 0) -> dict[str, Any]:
    dev = {"index": 0, "name": "cpu", "kind": "cpu", "iterations": 10, "checked": 10, "mismatches": mismatches,
           "tflops": 1.0, "max_rel_error": 0.0, "tolerance": 1e-3, "error": None}  # fmt: skip
    return {"available": True, "backend": "torch", "devices": [dev]}


def test_check_marks_ready_and_bad_then_activate_swaps_a_ready_one_in(
    ctx: ActionContext, healthy_host_data: dict[str, Any]
) -> None:
    healthy = {"host": _with_clock(healthy_host_data), "nvml": NO_GPU, "burn": _burn()}
    fake = FakeTransport(
        {
            "spare1": {**healthy, "burn": _burn(mismatches=3)},  # silent corruption under load: bad
            "spare2": healthy,
            "spare3": {"host": HostUnreachable("spare3", "connection refused")},  # not checked: bad
        }
    )
    result = check_standbys(ctx, TransportPool(override=fake))
    assert {h: r for h, r, _ in result.results} == {
        "spare1": Readiness.BAD,
        "spare2": Readiness.READY,
        "spare3": Readiness.BAD,
    }
    assert {p for _, p, _ in fake.calls} == {"host", "nvml", "burn"}  # L0-L1 only
    assert ctx.store.audit()[-1].action == "standby-check"

    # Activation needs the replaced host out first (not overridable).
    early = plan_activate(ctx, for_host="node03", job="small", force=True, force_reason="x")
    assert [r.rule for r in early.failed_rails] == ["replaced-host-out"] and early.refused
    apply_plan(plan_evict(EvictSpec(hosts="node03", reason="xid 79"), ctx), ctx.scheduler, ctx.store)

    plan = plan_activate(ctx, for_host="node03", job="small", reason="replace node03")
    assert plan.targets == ("node03", "spare2") and not plan.refused  # the ready one, not spare1
    result2 = apply_plan(plan, ctx.scheduler, ctx.store)
    assert result2.status == "applied"
    hosts = ctx.scheduler.job_hosts("small")
    assert hosts == ["node01", "node02", "spare2", "node04"] and "node03" not in hosts
    assert ctx.store.job_hosts("small") == hosts
    assert ctx.scheduler.state(["spare2"])["spare2"] is NodeState.ACTIVE
    rec = ctx.store.machine("spare2")
    assert rec is not None and rec.state is MachineState.ACTIVE
    assert "spare2" not in {s.host for s in list_standbys(ctx)}

    # No ready standby left: refused, not guessed.
    apply_plan(plan_evict(EvictSpec(hosts="node04", reason="x"), ctx), ctx.scheduler, ctx.store)
    none_ready = plan_activate(ctx, for_host="node04", job="small")
    assert [r.rule for r in none_ready.failed_rails] == ["ready-standby"]
    chosen_bad = plan_activate(ctx, for_host="node04", job="small", standby="spare1")
    assert [r.rule for r in chosen_bad.failed_rails] == ["ready-standby"]
    forced = plan_activate(
        ctx, for_host="node04", job="small", standby="spare1", force=True, force_reason="only one"
    )
    assert apply_plan(forced, ctx.scheduler, ctx.store).status == "applied"
    assert ctx.scheduler.job_hosts("small") == ["node01", "node02", "spare2", "spare1"]


def test_check_and_activate_bad_input(ctx: ActionContext) -> None:
    with pytest.raises(UsageError, match="node01 is not a standby"):
        check_standbys(ctx, TransportPool(override=FakeTransport({})), hosts="node01")
    with pytest.raises(UsageError, match="idle1 is not in job small"):
        plan_activate(ctx, for_host="idle1", job="small")
    with pytest.raises(UsageError, match="unknown job"):
        plan_activate(ctx, for_host="node01", job="nope")


@pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("torch") is None, reason="the L1 burn needs torch"
)
def test_cli_check_runs_real_l0_l1_on_this_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = tmp_path / "local.yaml"
    inv.write_text(
        "hosts:\n  - name: localhost\n    transport: local\n    state: standby\n"
        f"    python: {{path: {sys.executable}}}\n"
        "diagnose: {burn: {seconds: 0.5}}\n"
        # this machine's own load average says nothing of a standby's health (and other work sets it)
        "thresholds: {load_warn_per_cpu: 1000}\n"
    )
    state = tmp_path / "s.db"
    assert main(["standby", "check", "-i", str(inv), "--state", str(state), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["results"] == [{"host": "localhost", "readiness": "ready", "summary": "passed L0-L1"}]
    assert [lv["ran"] for lv in doc["report"]["levels"]][:2] == [True, True]
    assert main(["standby", "list", "-i", str(inv), "--state", str(state), "--json"]) == 0
    (sb,) = json.loads(capsys.readouterr().out)["standbys"]
    assert sb["host"] == "localhost" and sb["readiness"] == "ready"
