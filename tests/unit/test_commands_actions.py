"""The action commands as library calls: each one run both ways (in process, and through the CLI with
``--json``) gives the same document; the action session; a job's hosts and its one fallback order;
the no-op audit status; the circuit breaker's wording; escaping in the plan table."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from robustctl.actions import ActionContext, open_context
from robustctl.actions.evict import EvictSpec, plan_evict
from robustctl.actions.hosts import JobHostsSource, job_hosts, resolve_hosts
from robustctl.actions.plan import Plan, apply_plan, plan_json
from robustctl.actions.rails import evaluate_rails
from robustctl.actions.session import NO_CONFIRMATION, ActionSession, Outcome, always
from robustctl.actions.standby import plan_activate, plan_add
from robustctl.cli.main import main
from robustctl.commands.base import CommandResult, exit_code_of, result_json
from robustctl.commands.evict import EvictRequest, ReturnRequest, run_evict, run_return
from robustctl.commands.standby import (
    StandbyActivateRequest,
    StandbyAddRequest,
    StandbyCheckRequest,
    StandbyListRequest,
    StandbySizeRequest,
    run_standby_activate,
    run_standby_add,
    run_standby_check,
    run_standby_list,
    run_standby_size,
)
from robustctl.config import PolicySettings
from robustctl.errors import UsageError
from robustctl.report.actions import render_plan, render_result
from robustctl.report.console import dump_json
from robustctl.schedulers.base import NodeState, OpResult, SchedulerError
from robustctl.store import AuditStatus, Store

# spare1 is a standby nobody can reach (port 9 on loopback refuses at once): its self-check is "bad".
INVENTORY = """\
gpus_per_host: 2
hosts:
  - name: node[01-04]
    address: 127.0.0.[2-5]
  - name: spare1
    address: 127.0.0.1
    state: standby
    ssh: {port: 9, connect_timeout_s: 2}
  - name: idle1
    address: 127.0.0.20
jobs:
  small:
    hosts: node[01-04]
    layout: {tp: 2, pp: 2, dp: 2}
policy: {max_cluster_fraction: 1.0, max_job_fraction: 1.0, circuit_breaker_fraction: 0.5}
diagnose: {retries: 0}
"""

# Values that legitimately differ between two runs against two fresh stores.
VOLATILE = {"audit_id", "started_at", "finished_at", "elapsed_s", "updated_at"}


def normalized(doc: Any) -> Any:
    """``doc`` without the volatile keys (ids, clocks, durations), at any depth."""
    if isinstance(doc, dict):
        return {k: normalized(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [normalized(v) for v in doc]
    return doc


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    return path


@pytest.fixture
def ctx(inv: Path, tmp_path: Path) -> Iterator[ActionContext]:
    c = open_context(inv, tmp_path / "ctx.db")
    yield c
    c.close()


# --- both ways --------------------------------------------------------------------------------------


def test_each_action_command_gives_the_same_json_in_process_and_through_the_cli(
    inv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    lib_state, cli_state = tmp_path / "lib.db", tmp_path / "cli.db"
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"kind": "diagnose", "schema_version": 1, "suspects": []}))
    where = {"inventory": inv, "state": lib_state}
    act = ["-i", str(inv), "--state", str(cli_state), "--json"]
    yes = [*act, "--yes"]
    steps: list[tuple[list[str], Callable[[], CommandResult]]] = [
        (
            ["standby", "size", "--machines", "1024", "--daily-failure-rate", "0.0012", "--json"],
            lambda: run_standby_size(StandbySizeRequest(machines=1024, daily_failure_rate=0.0012)),
        ),
        (
            ["standby", "size", "--from-history", *act],
            lambda: run_standby_size(StandbySizeRequest(from_history=True, **where)),
        ),
        (["standby", "list", *act], lambda: run_standby_list(StandbyListRequest(**where))),
        (
            ["standby", "add", "idle1", "--dry-run", *act],
            lambda: run_standby_add(StandbyAddRequest(hosts="idle1", dry_run=True, **where)),
        ),
        (
            ["standby", "add", "idle1", *yes],
            lambda: run_standby_add(StandbyAddRequest(hosts="idle1", **where), confirm=always),
        ),
        (  # a refused plan: its document with the failing rail, exit 2
            ["standby", "add", "node02", *yes],
            lambda: run_standby_add(StandbyAddRequest(hosts="node02", **where), confirm=always),
        ),
        (
            ["standby", "check", "spare1", *act],
            lambda: run_standby_check(StandbyCheckRequest("spare1", **where)),
        ),
        (  # again: spare1 is still bad, nothing changes
            ["standby", "check", "spare1", *act],
            lambda: run_standby_check(StandbyCheckRequest("spare1", **where)),
        ),
        (["standby", "list", *act], lambda: run_standby_list(StandbyListRequest(**where))),
        (
            [
                "evict",
                "node03",
                "--job",
                "small",
                "--over-evict",
                "TP",
                "--reason",
                "xid 79",
                "--dry-run",
                *act,
            ],
            lambda: run_evict(
                EvictRequest(
                    hosts="node03", job="small", over_evict="TP", reason="xid 79", dry_run=True, **where
                )
            ),
        ),
        (
            ["evict", "node03", "--job", "small", "--over-evict", "tp", "--reason", "xid 79", *yes],
            lambda: run_evict(
                EvictRequest(hosts="node03", job="small", over_evict="tp", reason="xid 79", **where),
                confirm=always,
            ),
        ),
        (  # again: nothing to do
            ["evict", "node03", *yes],
            lambda: run_evict(EvictRequest(hosts="node03", **where), confirm=always),
        ),
        (
            ["evict", "--from-report", str(empty), *yes],
            lambda: run_evict(EvictRequest(report=empty, **where), confirm=always),
        ),
        (
            [
                "standby",
                "activate",
                "--for",
                "node03",
                "--job",
                "small",
                "--standby",
                "idle1",
                "--force",
                "--force-reason",
                "not self-checked",
                *yes,
            ],
            lambda: run_standby_activate(
                StandbyActivateRequest(
                    for_host="node03",
                    job="small",
                    standby="idle1",
                    force=True,
                    force_reason="not self-checked",
                    **where,
                ),
                confirm=always,
            ),
        ),
        (
            ["return", "node03", "--reason", "GPU replaced", *yes],
            lambda: run_return(ReturnRequest(hosts="node03", reason="GPU replaced", **where), confirm=always),
        ),
    ]
    for argv, call in steps:
        result = call()
        library = json.loads(dump_json(result_json(result)))
        code = main(argv)
        cli = json.loads(capsys.readouterr().out)
        assert code == exit_code_of(result), argv
        assert normalized(cli) == normalized(library), argv
    with Store.open(lib_state) as a, Store.open(cli_state) as b:
        assert (
            [r.status for r in a.audit()]
            == [r.status for r in b.audit()]
            == [
                "applied",  # standby add idle1
                "refused",  # standby add node02
                "applied",  # standby check: spare1 unchecked → bad
                "nothing-to-do",  # standby check again: still bad
                "applied",  # evict
                "nothing-to-do",  # evict again
                "refused",  # empty report
                "applied",  # activate
                "applied",  # return
            ]
        )


def test_the_cli_declines_without_a_terminal_with_64_after_showing_the_plan(
    inv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "s.db"
    assert main(["standby", "add", "idle1", "-i", str(inv), "--state", str(state)]) == 64
    err = capsys.readouterr().err
    assert "hold standby idle1 via inventory" in err and "pass --yes" in err
    with Store.open(state) as s:
        assert s.audit() == [] and s.machines() == []


# --- the session ------------------------------------------------------------------------------------


def _session(ctx: ActionContext, **kw: Any) -> ActionSession:
    """A session over ``ctx`` that, on exit, releases the lock but leaves the store open to inspect."""

    def opener(_inventory: object, _state: object) -> ActionContext:
        keep = dataclasses.replace(ctx)
        keep.close = ctx.store.unlock  # type: ignore[method-assign]
        return keep

    return ActionSession("evict", opener=opener, **kw)


def test_the_session_takes_the_lock_unless_dry_run(ctx: ActionContext) -> None:
    with _session(ctx) as s:
        assert s.ctx.store.locked
    assert not ctx.store.locked  # released on exit
    with _session(ctx, dry_run=True) as s:
        assert not s.ctx.store.locked
    with _session(ctx, lock=False) as s:
        assert not s.ctx.store.locked


def test_a_declined_plan_applies_and_audits_nothing(ctx: ActionContext) -> None:
    shown: list[Plan] = []
    asked: list[Plan] = []

    def no(plan: Plan) -> bool:
        asked.append(plan)
        return False

    with _session(ctx, confirm=no, show=shown.append) as s:
        result = s.run(lambda c: plan_evict(EvictSpec(hosts="node02", reason="x"), c))
    assert result.outcome is Outcome.DECLINED and result.exit_code == 0 and result.applied is None
    assert shown == asked == [result.plan]  # shown before it was asked
    assert ctx.store.audit() == [] and ctx.store.machines() == []


def test_nobody_to_confirm_is_a_usage_error_after_the_plan_was_shown(ctx: ActionContext) -> None:
    shown: list[Plan] = []
    with pytest.raises(UsageError, match="pass --yes"), _session(ctx, show=shown.append) as s:
        s.run(lambda c: plan_evict(EvictSpec(hosts="node02", reason="x"), c))
    assert len(shown) == 1 and ctx.store.audit() == []
    assert "pass --yes" in NO_CONFIRMATION


def test_confirm_is_not_asked_for_a_dry_run_a_refusal_or_nothing_to_do(ctx: ActionContext) -> None:
    def never(plan: Plan) -> bool:
        raise AssertionError("asked")

    with _session(ctx, dry_run=True, confirm=never) as s:
        dry = s.run(lambda c: plan_evict(EvictSpec(hosts="node02", reason="x"), c))
    assert dry.outcome is Outcome.DRY_RUN and dry.to_json() == plan_json(dry.plan)
    with _session(ctx, confirm=always) as s:
        applied = s.run(lambda c: plan_evict(EvictSpec(hosts="node02", reason="x"), c))
    assert applied.outcome is Outcome.APPLIED and applied.kind == "apply"
    assert ctx.store.audit()[0].plan == plan_json(dry.plan)  # the dry run's plan is the one applied
    with _session(ctx, confirm=never) as s:
        again = s.run(lambda c: plan_evict(EvictSpec(hosts="node02", reason="x"), c))
    assert again.outcome is Outcome.NOTHING_TO_DO and again.exit_code == 0


def test_a_refusal_is_audited_and_exits_2_a_dry_run_refusal_writes_nothing(ctx: ActionContext) -> None:
    ctx.policy = PolicySettings(max_cluster_fraction=0.1, max_job_fraction=1.0, circuit_breaker_fraction=0.5)
    spec = EvictSpec(hosts="node01,node02", reason="x")
    with _session(ctx, dry_run=True, confirm=always) as s:
        dry = s.run(lambda c: plan_evict(spec, c))
    assert dry.outcome is Outcome.REFUSED and dry.exit_code == 2 and dry.audit_id is None
    assert ctx.store.audit() == []
    with _session(ctx, confirm=always) as s:
        refused = s.run(lambda c: plan_evict(spec, c))
    assert refused.outcome is Outcome.REFUSED and refused.exit_code == 2
    assert refused.refusal is not None and "rule max-cluster-fraction" in refused.refusal
    assert str(refused.refused_error()) == refused.refusal
    doc = result_json(refused)
    assert doc["kind"] == "plan" and [r["rule"] for r in doc["rails"] if not r["passed"]] == [
        "max-cluster-fraction"
    ]
    (rec,) = ctx.store.audit()
    assert rec.id == refused.audit_id and rec.status == "refused" and rec.steps == ()
    assert ctx.store.machines() == []


# --- no-op status, rails wording, escaping -----------------------------------------------------------


def test_an_action_that_changed_nothing_is_audited_nothing_to_do(ctx: ActionContext) -> None:
    for _ in range(2):
        apply_plan(plan_evict(EvictSpec(hosts="node01", reason="x"), ctx), ctx.scheduler, ctx.store)
    assert [r.status for r in ctx.store.audit()] == ["applied", "nothing-to-do"]
    assert ctx.store.audit()[1].message == "every step was already done"


def test_the_circuit_breaker_names_an_observer_fault_only_when_it_refuses(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as store:

        def breaker(suspects: Sequence[str]) -> Any:
            checks = evaluate_rails(
                new_evictions=list(suspects),
                suspects=suspects,
                cluster_hosts=list("abcdefghij"),
                jobs={},
                store=store,
                policy=PolicySettings(max_cluster_fraction=1.0, circuit_breaker_fraction=0.3),
                now=store.clock(),
            )
            return next(c for c in checks if c.rule == "circuit-breaker")

        ok = breaker(["a"])
        assert ok.passed and "observer" not in ok.detail and ok.detail.startswith("1 of 10 hosts")
        tripped = breaker(list("abcd"))
        assert not tripped.passed and "more likely an observer fault" in tripped.detail


def test_the_plan_table_prints_user_text_as_written(ctx: ActionContext) -> None:
    plan = plan_evict(EvictSpec(hosts="node01", reason="[/] broken [bold]x[/bold]"), ctx)
    out = io.StringIO()
    console = Console(file=out, width=200, no_color=True)
    render_plan(plan, console)
    assert "reason: [/] broken [bold]x[/bold]" in out.getvalue()
    result = apply_plan(plan, ctx.scheduler, ctx.store)
    render_result(result, console)
    assert "evict: applied" in out.getvalue()


# --- host resolution and a job's hosts ---------------------------------------------------------------


class Forgetful:
    """The inventory back end, except that it knows no job (a finished Slurm job, a job without pods)."""

    name = "forgetful"

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def job_hosts(self, job: str) -> list[str]:
        raise SchedulerError(self.name, f"job_hosts {job}", f"unknown job {job}")

    def state(self, hosts: Sequence[str]) -> Mapping[str, NodeState]:
        return self.inner.state(hosts)  # type: ignore[no-any-return]

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)


def test_resolve_hosts_names_a_bad_pattern_as_a_usage_error(ctx: ActionContext) -> None:
    assert resolve_hosts(ctx.inventory, "node[01-02],idle1") == ["node01", "node02", "idle1"]
    assert ctx.resolve_hosts("node03") == ["node03"]
    with pytest.raises(UsageError, match="unknown host 'node99'"):
        ctx.resolve_hosts("node99")
    with pytest.raises(UsageError):
        ctx.resolve_hosts("node[01")


def test_a_jobs_hosts_come_from_the_scheduler_then_the_store_then_the_inventory(ctx: ActionContext) -> None:
    nodes = ("node01", "node02", "node03", "node04")
    first = ctx.job_hosts("small")
    assert first.hosts == nodes and first.source is JobHostsSource.SCHEDULER and first.note() is None
    with pytest.raises(UsageError, match="unknown job 'nope'"):
        ctx.job_hosts("nope")
    ctx.scheduler = Forgetful(ctx.scheduler)
    fallback = ctx.job_hosts("small")
    assert fallback.hosts == nodes and fallback.source is JobHostsSource.INVENTORY
    assert "hosts from the inventory" in str(fallback.note()) and "unknown job small" in str(fallback.note())
    with pytest.raises(SchedulerError, match="unknown job small"):
        fallback.require_scheduler()
    moved = ["node01", "node02", "idle1", "node04"]
    ctx.store.set_job_hosts("small", moved)
    stored = ctx.job_hosts("small")
    assert list(stored.hosts) == moved and stored.source is JobHostsSource.STORE
    # Without an inventory (the plan engine) the order stops after the store.
    with pytest.raises(SchedulerError):
        job_hosts("other", scheduler=ctx.scheduler, store=ctx.store)


def test_callers_of_the_fallback(ctx: ActionContext) -> None:
    ctx.scheduler = Forgetful(ctx.scheduler)
    # Over-eviction takes the fallback, and the plan says where the hosts came from.
    plan = plan_evict(EvictSpec(hosts="node03", job="small", over_evict="pp", reason="x"), ctx)
    assert plan.targets == ("node01", "node03") and any("hosts from the inventory" in n for n in plan.notes)
    # standby add: a job the scheduler does not run holds no host.
    assert not plan_add("node02", "pool", ctx).refused
    # standby activate changes the scheduler's job: it needs the scheduler's view.
    with pytest.raises(SchedulerError, match="unknown job small"):
        plan_activate(ctx, for_host="node03", job="small")


class Pinning:
    """The inventory back end, except that replace_host pins the list in the scheduler (like Slurm's
    ReqNodeList) and never writes the store."""

    name = "pinning"

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.pinned: list[str] | None = None

    def job_hosts(self, job: str) -> list[str]:
        return list(self.pinned) if self.pinned is not None else [f"node0{i}" for i in range(1, 5)]

    def replace_host(self, job: str, old: str, new: str) -> OpResult:
        self.pinned = [new if h == old else h for h in self.job_hosts(job)]
        return OpResult(new, "replace_host", True, "pinned")

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)


def test_an_activation_records_the_jobs_hosts_in_the_store_for_every_back_end(ctx: ActionContext) -> None:
    apply_plan(plan_evict(EvictSpec(hosts="node03", reason="x"), ctx), ctx.scheduler, ctx.store)
    sched = Pinning(ctx.scheduler)
    ctx.scheduler = sched
    plan = plan_activate(ctx, for_host="node03", job="small", standby="spare1", force=True, force_reason="t")
    result = apply_plan(plan, sched, ctx.store)
    assert result.status == "applied", result.message
    assert ctx.store.job_hosts("small") == ["node01", "node02", "spare1", "node04"]
    assert result.results[1].status == "done"
    again = apply_plan(plan, sched, ctx.store)
    assert again.results[1].status == "noop"


def test_audit_statuses_are_text_and_a_record_of_any_status_reads_back(tmp_path: Path) -> None:
    assert [s.value for s in AuditStatus] == ["started", "applied", "nothing-to-do", "failed", "refused"]
    with Store.open(tmp_path / "s.db") as store:
        old = store.audit_begin("evict", ["node01"], "x")
        store.audit_finish(old, "applied", "0 step(s) done, 2 already done")  # as older releases wrote it
        store.audit_finish(store.audit_begin("evict", ["node01"], "x"), "some-future-status", "")
        assert [r.status for r in store.audit()] == ["applied", "some-future-status"]
