"""Eviction planning and applying with the inventory back end and a temporary store."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from robustctl.actions import ActionContext, open_context
from robustctl.actions.evict import (
    MAX_REPORT_BYTES,
    EvictSpec,
    expand_over_eviction,
    load_report,
    plan_evict,
    plan_return,
)
from robustctl.actions.plan import StepKind, apply_plan, plan_json
from robustctl.cli.main import main
from robustctl.errors import ActionRefused, ConfigError, UsageError
from robustctl.exit_codes import ExitCode
from robustctl.schedulers.base import NodeState, OpResult, SchedulerError
from robustctl.store import MachineState
from tests.unit.test_store import corrupt_page

# 8 machines of 2 ranks, tp=2 pp=4 dp=2 (Megatron's documented 16-GPU example): PP groups are
# ranks [0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15] → machines {0,2,4,6} and {1,3,5,7}.
INVENTORY = """\
gpus_per_host: 2
hosts:
  - name: node[01-08]
    address: 127.0.0.[2-9]
  - name: spare[1-2]
    address: 127.0.0.[10-11]
    state: standby
jobs:
  llama:
    hosts: node[01-08]
    layout: {tp: 2, pp: 4, dp: 2}
policy: {max_cluster_fraction: 1.0, max_job_fraction: 1.0, circuit_breaker_fraction: 0.5}
"""


def write_inventory(tmp_path: Path, text: str = INVENTORY) -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    return path


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[ActionContext]:
    c = open_context(write_inventory(tmp_path), tmp_path / "state.db")
    yield c
    c.close()


def evict(ctx: ActionContext, **kw: object) -> list[str]:
    plan = plan_evict(EvictSpec(reason="test", **kw), ctx)  # type: ignore[arg-type]
    apply_plan(plan, ctx.scheduler, ctx.store)
    return [h for h in plan.targets]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("pp", ("node01", "node03", "node05", "node07")),
        ("tp", ("node03",)),
        ("dp", ("node03", "node04")),
        ("auto", ("node03",)),
    ],
)
def test_over_eviction_picks_exactly_the_groups_machines(
    ctx: ActionContext, mode: str, expected: tuple[str, ...]
) -> None:
    plan = plan_evict(EvictSpec(hosts="node03", job="llama", over_evict=mode, reason="xid 79"), ctx)
    assert plan.targets == expected
    assert plan.suspects == ("node03",)
    assert [s.host for s in plan.steps if s.kind is StepKind.DRAIN] == list(expected)
    result = apply_plan(plan, ctx.scheduler, ctx.store)
    assert result.status == "applied"
    drained = {
        h
        for h, s in ctx.scheduler.state([f"node0{i}" for i in range(1, 9)]).items()
        if s is NodeState.DRAINED
    }
    assert drained == set(expected)
    assert {m.host for m in ctx.store.machines([MachineState.EVICTED])} == set(expected)


def test_auto_over_eviction_of_suspects_on_two_pp_stages_is_their_pp_group(ctx: ActionContext) -> None:
    # node01 (ranks 0,1) and node03 (ranks 4,5) vary only in pp: the PP groups 0 and 1 are all on
    # machines {0,2,4,6}; the smallest single group holding ranks 0,1,4,5 is the tp-pp group 0.
    machines, group = expand_over_eviction(ctx, "llama", ["node01", "node03"], "auto")
    assert machines == ("node01", "node03", "node05", "node07")
    assert group.startswith("tp-pp group 0")
    # several groups of one kind read as ranges ("pp groups 0-3"), not as a comma list
    machines, group = expand_over_eviction(ctx, "llama", ["node01", "node02"], "pp")
    assert group == "pp groups 0-3 of job llama"


def test_over_eviction_follows_the_jobs_current_host_list(ctx: ActionContext) -> None:
    ctx.store.set_job_hosts("llama", ["spare1", *[f"node0{i}" for i in range(2, 9)]])
    plan = plan_evict(EvictSpec(hosts="node03", job="llama", over_evict="pp", reason="x"), ctx)
    assert plan.targets == ("spare1", "node03", "node05", "node07")  # machine order


def test_dry_run_plan_is_the_plan_apply_records_and_apply_is_idempotent(ctx: ActionContext) -> None:
    req = EvictSpec(hosts="node03", job="llama", over_evict="pp", reason="xid 79")
    plan = plan_evict(req, ctx)
    dry = json.loads(json.dumps(plan_json(plan)))
    assert plan_evict(req, ctx) == plan  # deterministic: no clock in the plan
    result = apply_plan(plan, ctx.scheduler, ctx.store)
    (record,) = ctx.store.audit()
    assert record.plan == dry and record.status == "applied" and record.reason == "xid 79"
    assert [s.status for s in record.steps] == ["done"] * 8
    again = plan_evict(req, ctx)
    assert again.nothing_to_do
    second = apply_plan(again, ctx.scheduler, ctx.store)
    assert second.status == "nothing-to-do" and {r.status for r in second.results} == {"noop"}
    assert result.exit_code == second.exit_code == 0
    assert len(ctx.store.evictions_since(0)) == 4  # nothing applied twice


def test_targets_from_a_diagnose_report(ctx: ActionContext, tmp_path: Path) -> None:
    report = tmp_path / "diag.json"
    report.write_text(json.dumps({"kind": "diagnose", "schema_version": 1, "suspects": ["node02", "node06"]}))
    plan = plan_evict(EvictSpec(report=report, reason="diag"), ctx)
    assert plan.targets == ("node02", "node06") and plan.source == str(report)
    plan = plan_evict(EvictSpec(report=report, job="llama", over_evict="pp", reason="diag"), ctx)
    assert plan.targets == ("node02", "node04", "node06", "node08")


def test_stacks_report_auto_without_job_uses_the_reports_group(ctx: ActionContext, tmp_path: Path) -> None:
    report = tmp_path / "stacks.json"
    report.write_text(
        json.dumps(
            {
                "kind": "stacks",
                "suspect_hosts": ["node05"],
                "over_eviction": ["node01", "node03", "node05", "node07"],
                "group": {"kind": "pp", "index": 0, "ranks": "0,4,8,12", "n_ranks": 4, "machines": []},
            }
        )
    )
    assert load_report(report).suspects == ("node05",)
    plan = plan_evict(EvictSpec(report=report, over_evict="auto", reason="hang"), ctx)
    assert plan.targets == ("node01", "node03", "node05", "node07")
    assert plan.group is not None and plan.group.startswith("pp group 0")


def test_empty_report_is_refused_not_guessed(ctx: ActionContext, tmp_path: Path) -> None:
    report = tmp_path / "empty.json"
    report.write_text(json.dumps({"kind": "diagnose", "suspects": []}))
    plan = plan_evict(EvictSpec(report=report, reason="x", force=True, force_reason="try"), ctx)
    assert plan.targets == () and plan.refused
    with pytest.raises(ActionRefused, match="rule non-empty-targets.*cannot be overridden"):
        apply_plan(plan, ctx.scheduler, ctx.store)
    (rec,) = ctx.store.audit()
    assert rec.status == "refused" and rec.steps == ()
    assert ctx.store.machines() == []


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"hosts": "node99"}, "unknown host 'node99'"),
        ({"hosts": "node[01"}, "node\\[01"),
        ({"hosts": "spare1", "job": "llama", "over_evict": "pp"}, "not in job llama"),
        ({"hosts": "node01", "over_evict": "pp"}, "needs --job"),
        ({"hosts": "node01", "job": "nope", "over_evict": "pp"}, "unknown job 'nope'"),
        ({"hosts": "node01", "job": "llama", "over_evict": "xx"}, "expected one of"),
        ({"hosts": "node01", "force": True}, "--force-reason"),
        ({}, "name the hosts"),
    ],
)
def test_bad_input_is_a_usage_error(ctx: ActionContext, kw: dict[str, object], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        plan_evict(EvictSpec(reason="x", **kw), ctx)  # type: ignore[arg-type]


def test_report_errors_name_the_file(ctx: ActionContext, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="bad.json: not a JSON report"):
        plan_evict(EvictSpec(report=bad, reason="x"), ctx)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"kind": "analysis"}))
    with pytest.raises(ConfigError, match="not a diagnose or stacks report"):
        plan_evict(EvictSpec(report=other, reason="x"), ctx)
    ghost = tmp_path / "ghost.json"
    ghost.write_text(json.dumps({"kind": "diagnose", "suspects": ["node42"]}))
    with pytest.raises(UsageError, match="node42.*unresolved"):
        plan_evict(EvictSpec(report=ghost, reason="x"), ctx)


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        (
            {"kind": "diagnose", "schema_version": 99, "suspects": ["node02"]},
            r"schema_version '99' is not one",
        ),
        ({"kind": "diagnose", "schema_version": "1", "suspects": []}, r"schema_version '1' is not one"),
        ({"kind": "diagnose", "schema_version": True, "suspects": []}, r"schema_version 'True' is not one"),
        ({"kind": "diagnose", "schema_version": [1]}, r"schema_version '\[1\]' is not one"),
        ({"kind": "stacks", "schema_version": 2, "suspect_hosts": []}, r"schema_version '2' is not one"),
        ({"kind": "diagnose", "suspects": "node02"}, r"'suspects' is not a list of host names"),
        ([1, 2], r"expected a JSON object"),
    ],
)
def test_report_content_errors_are_config_errors(tmp_path: Path, doc: object, match: str) -> None:
    report = tmp_path / "r.json"
    report.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=rf"^{report}: {match}") as info:
        load_report(report)
    assert info.value.exit_code == ExitCode.CONFIG and "\n" not in str(info.value)


def test_report_special_and_oversize_files_are_refused(tmp_path: Path) -> None:
    if Path("/dev/zero").exists():  # issue 9: MemoryError
        with pytest.raises(ConfigError, match=r"^/dev/zero: is a character device, not a regular file"):
            load_report(Path("/dev/zero"))
    fifo = tmp_path / "r.fifo"
    os.mkfifo(fifo)  # no writer: a blocking open would hang here
    with pytest.raises(ConfigError, match="is a FIFO, not a regular file"):
        load_report(fifo)
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate(MAX_REPORT_BYTES + 1)
    with pytest.raises(ConfigError, match=rf"big.json: .*larger than the {MAX_REPORT_BYTES}-byte limit"):
        load_report(big)
    with pytest.raises(ConfigError, match="nope.json: no such file"):
        load_report(tmp_path / "nope.json")


def test_return_resumes_and_records_returned_then_active(ctx: ActionContext) -> None:
    evict(ctx, hosts="node02")
    plan = plan_return("node02", "GPU replaced", ctx)
    result = apply_plan(plan, ctx.scheduler, ctx.store)
    assert result.status == "applied"
    assert ctx.scheduler.state(["node02"])["node02"] is NodeState.ACTIVE
    assert [h.to_state for h in ctx.store.history("node02")] == ["evicted", "returned", "active"]
    again = apply_plan(plan_return("node02", "GPU replaced", ctx), ctx.scheduler, ctx.store)
    assert again.status == "nothing-to-do"


class FailingScheduler:
    """The inventory back end, except that draining ``bad`` fails like a hung command."""

    name = "flaky"

    def __init__(self, inner: object, bad: str) -> None:
        self.inner = inner
        self.bad = bad

    def drain(self, hosts: Sequence[str], reason: str) -> list[OpResult]:
        if self.bad in hosts:
            raise SchedulerError(self.name, f"drain {self.bad}", "timed out after 30 s")
        return self.inner.drain(hosts, reason)  # type: ignore[attr-defined, no-any-return]

    def state(self, hosts: Sequence[str]) -> Mapping[str, NodeState]:
        return self.inner.state(hosts)  # type: ignore[attr-defined, no-any-return]

    def job_hosts(self, job: str) -> list[str]:
        return self.inner.job_hosts(job)  # type: ignore[attr-defined, no-any-return]


def test_a_failing_step_stops_the_plan_and_the_audit_says_which_ran(ctx: ActionContext) -> None:
    sched = FailingScheduler(ctx.scheduler, "node05")
    ctx.scheduler = sched  # type: ignore[assignment]
    plan = plan_evict(EvictSpec(hosts="node03", job="llama", over_evict="pp", reason="x"), ctx)
    result = apply_plan(plan, sched, ctx.store)  # type: ignore[arg-type]
    assert result.status == "failed" and result.exit_code == 3
    assert "drain node05" in result.message and "timed out" in result.message
    assert [r.status for r in result.results] == ["done"] * 4 + ["failed"] + ["skipped"] * 3
    (rec,) = ctx.store.audit()
    assert rec.status == "failed"
    assert [(s.index, s.status) for s in rec.steps] == [
        (0, "done"),
        (1, "done"),
        (2, "done"),
        (3, "done"),
        (4, "failed"),
    ]
    assert {m.host for m in ctx.store.machines([MachineState.EVICTED])} == {"node01", "node03"}


def test_scheduler_factory_picks_the_back_end_and_names_a_missing_one(
    ctx: ActionContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from robustctl.config import SchedulerSettings
    from robustctl.errors import ConfigError
    from robustctl.schedulers import make_scheduler

    sched = make_scheduler(SchedulerSettings(), inventory=ctx.inventory, store=ctx.store)
    assert sched.name == "inventory"
    with pytest.raises(ConfigError, match="scheduler.kind 'nosuch' is not available"):
        make_scheduler(
            SchedulerSettings.model_construct(kind="nosuch"), inventory=ctx.inventory, store=ctx.store
        )
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    with pytest.raises(
        ConfigError, match="scheduler.kubernetes: kubeconfig .*missing-kubeconfig does not exist"
    ):
        make_scheduler(SchedulerSettings(kind="kubernetes"), inventory=ctx.inventory, store=ctx.store)


def test_a_job_host_list_that_no_longer_matches_the_layout_is_refused(ctx: ActionContext) -> None:
    ctx.store.set_job_hosts("llama", [f"node0{i}" for i in range(1, 8)])  # 7 hosts for 16 ranks
    with pytest.raises(UsageError, match="layout of 16 ranks does not match its 7 hosts"):
        plan_evict(EvictSpec(hosts="node03", job="llama", over_evict="pp", reason="x"), ctx)


def test_a_real_stacks_report_feeds_over_eviction(ctx: ActionContext, tmp_path: Path) -> None:
    """The contract with ``robustctl stacks --json``: its document, as dumped, drives evict."""
    from robustctl.config import ParallelLayout
    from robustctl.report.console import dump_json
    from robustctl.stacks.model import Frame, ProcessDump, ThreadStack
    from robustctl.stacks.result import analyze_stacks

    root = [("<module>", "train.py"), ("main", "train.py"), ("step", "train.py")]
    wait = [*root, ("all_reduce", "torch/distributed/distributed_c10d.py")]
    recv = [*root, ("recv", "torch/distributed/distributed_c10d.py")]
    compute = [*root, ("_call_impl", "torch/nn/modules/module.py"), ("forward", "model.py")]

    def mk(rank: int, path: list[tuple[str, str]]) -> ProcessDump:
        frames = tuple(Frame(fn, f, 1) for fn, f in reversed(path))
        return ProcessDump((ThreadStack("1", "MainThread", frames),), rank=rank, pid=100 + rank, host=None)

    dumps = [mk(r, compute if r == 12 else recv if r in (0, 4, 8) else wait) for r in range(16)]
    hosts = [f"node0{i}" for i in range(1, 9)]
    rep = analyze_stacks(dumps, layout=ParallelLayout(tp=2, pp=4, dp=2), ranks_per_host=2, hosts=hosts)
    path = tmp_path / "stacks.json"
    path.write_text(dump_json(rep))
    expected = ("node01", "node03", "node05", "node07")
    assert rep.over_eviction == expected
    from_report = plan_evict(EvictSpec(report=path, over_evict="auto", reason="hang"), ctx)
    assert from_report.targets == expected and from_report.suspects == expected
    assert from_report.group is not None and from_report.group.startswith("pp group 0")
    with_job = plan_evict(EvictSpec(report=path, job="llama", over_evict="auto", reason="hang"), ctx)
    assert with_job.targets == expected
    only_suspects = plan_evict(EvictSpec(report=path, reason="hang"), ctx)
    assert only_suspects.targets == expected  # every suspect machine; no expansion asked


# --- a damaged store (issue 21, item 7) ------------------------------------------------------------


def _host_rows(state: Path, host: str) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """The host's rows in ``machines`` and the inventory scheduler's ``sched_nodes``, read raw."""
    conn = sqlite3.connect(state)
    try:
        return (
            conn.execute("SELECT state FROM machines WHERE host=?", (host,)).fetchall(),
            conn.execute("SELECT state FROM sched_nodes WHERE host=?", (host,)).fetchall(),
        )
    finally:
        conn.close()


def _damage(state: Path, kind: str) -> None:
    if kind == "plan not UTF-8":  # what a damaged overflow page of an older record reads as
        conn = sqlite3.connect(state)
        conn.execute("UPDATE audit SET plan=CAST(X'7BFF7D' AS TEXT) WHERE id=1")
        conn.commit()
        conn.close()
    else:
        corrupt_page(state, kind)


@pytest.mark.parametrize("kind", ["audit_steps", "audit_started", "machine_history", "plan not UTF-8"])
@pytest.mark.parametrize("action", ["evict", "return"])
def test_an_action_on_a_damaged_store_applies_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, action: str
) -> None:
    """Before: ``evict --yes`` on a store with one damaged page changed the host and exited 0, and
    ``audit`` then refused the store. Now the record is checked first: exit 78, nothing applied."""
    inv, state = write_inventory(tmp_path), tmp_path / "s.db"
    common = ["--reason", "r", "--yes", "-q", "-i", str(inv), "--state", str(state)]
    assert main(["evict", "node02", *common]) == 0
    if action == "return":
        assert main(["evict", "node04", *common]) == 0
    before = _host_rows(state, "node04")
    capsys.readouterr()
    _damage(state, kind)
    code = main([action, "node04", *common])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == ExitCode.CONFIG and len(err) == 1, err
    assert str(state) in err[0] and "nothing was applied" in err[0], err
    assert _host_rows(state, "node04") == before
