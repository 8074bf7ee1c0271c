"""Rollback as an action: planned as a Plan, run by the action session and apply_plan, audited like
every other action (begin, each step begun and ended, finish), with the session's Outcome.

Real git work trees, one per simulated host (local transport); the restart after the checkout is
injected (the ``restart=`` argument) and records what it saw.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from robustctl.actions.plan import StepKind
from robustctl.actions.rollback import RollbackPlan, RollbackResult
from robustctl.actions.session import Outcome, always
from robustctl.commands.evict import EvictRequest, run_evict
from robustctl.commands.update import RollbackRequest, run_rollback
from robustctl.errors import ConfigError
from robustctl.exit_codes import ExitCode
from robustctl.jobcode import records
from robustctl.store import Store, StoreLocked

HOSTS = ("node1", "node2", "node3")


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    out = subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True, env=env)
    return out.stdout.strip()


@dataclass
class Bed:
    tmp: Path
    inv: Path
    state: Path
    commits: dict[str, str]

    def head(self, host: str) -> str:
        return git(self.tmp / "hosts" / host / "code", "rev-parse", "HEAD")

    def request(self, **kw: Any) -> RollbackRequest:
        return RollbackRequest(job="j", to="v1", inventory=self.inv, state=self.state, **kw)


@pytest.fixture
def bed(tmp_path: Path) -> Bed:
    origin = tmp_path / "origin"
    origin.mkdir()
    git(origin, "init", "-q", "-b", "main")
    commits = {}
    for tag in ("v1", "v2"):
        (origin / "train.py").write_text(tag)
        git(origin, "add", "train.py")
        git(origin, "commit", "-q", "-m", tag)
        git(origin, "tag", tag)
        commits[tag] = git(origin, "rev-parse", "HEAD")
    for h in HOSTS:
        (tmp_path / "hosts" / h).mkdir(parents=True)
        git(tmp_path, "clone", "-q", str(origin), str(tmp_path / "hosts" / h / "code"))
    inv = {
        "hosts": [{"name": h, "transport": "local"} for h in HOSTS],
        "jobs": {
            "j": {
                "hosts": "node[1-3]",
                "ranks_per_host": 1,
                "layout": {"dp": 3},
                "code": {"path": str(tmp_path / "hosts" / "{host}" / "code")},
            }
        },
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(inv))
    return Bed(tmp_path, path, tmp_path / "state.db", commits)


@dataclass(frozen=True)
class Restarted:
    exit_code: int = 0
    kind: str = "apply"
    schema_version: int = 1
    outcome: str = "applied"


def restarter(bed: Bed, seen: list[str], rc: int = 0, error: Exception | None = None) -> Any:
    """A restart that checks the store's lock is free (it takes it itself), then exits ``rc``."""

    def restart(job: str, reason: str, req: Any, confirm: Any, show: Any) -> Restarted:
        with Store.open(bed.state) as store:
            store.lock("restart", timeout_s=0)  # StoreLocked if the rollback still held it
        seen.append(job)
        if error is not None:
            raise error
        return Restarted(exit_code=rc)

    return restart


def plan_keys(doc: dict[str, Any]) -> set[str]:
    return set(doc)


def test_the_rollback_audit_record_has_the_shape_of_an_evicts(bed: Bed) -> None:
    seen: list[str] = []
    res = run_rollback(bed.request(reason="bad kernel"), confirm=lambda p: True, restart=restarter(bed, seen))
    assert res.outcome is Outcome.APPLIED and res.exit_code == ExitCode.OK and seen == ["j"], res.message
    ev = run_evict(
        EvictRequest(hosts="node1", reason="xid 79", force=True, force_reason="test", inventory=bed.inv,
                     state=bed.state),
        confirm=always,
    )  # fmt: skip
    assert ev.outcome is Outcome.APPLIED, ev
    with Store.open(bed.state) as store:
        rb, evict = store.audit()
    assert (rb.action, evict.action) == ("rollback", "evict") and res.audit_id == rb.id
    assert rb.status == evict.status == "applied"
    assert plan_keys(rb.plan or {}) == plan_keys(evict.plan or {})  # both apply_plan's plan document
    assert (rb.plan or {})["kind"] == "plan" and rb.targets == HOSTS and rb.reason == "bad kernel"
    kinds = [s["kind"] for s in (rb.plan or {})["steps"]]
    assert kinds == [StepKind.CHECKOUT.value, StepKind.RECORD_CHANGE.value, StepKind.RESTART_JOB.value]
    for record in (rb, evict):  # every planned step begun and ended, described as the plan says
        planned = [s["description"] for s in (record.plan or {})["steps"]]
        assert [s.description for s in record.steps] == planned
        assert [s.index for s in record.steps] == list(range(len(planned)))
        assert all(s.status == "done" and s.finished_at is not None for s in record.steps)
        assert record.message == f"{len(planned)} step(s) done, 0 already done"
    assert all(bed.head(h) == bed.commits["v1"] for h in HOSTS)


def test_a_checkout_that_fails_on_one_host_switches_none_and_records_failed(bed: Bed) -> None:
    (bed.tmp / "hosts" / "node2" / "code" / ".git" / "index.lock").write_text("")
    seen: list[str] = []
    res = run_rollback(bed.request(), confirm=lambda p: True, restart=restarter(bed, seen))
    assert res.outcome is Outcome.FAILED and res.exit_code == ExitCode.UNKNOWN
    assert all(bed.head(h) == bed.commits["v2"] for h in HOSTS) and seen == []
    assert res.switch is not None and not res.switch.ok and res.message == res.switch.message
    assert {h.host: h.status for h in res.switch.hosts}["node2"] == "failed"
    assert res.restart is None and res.to_json()["outcome"] == "failed"
    with Store.open(bed.state) as store:
        (audit,) = store.audit()
        assert audit.id == res.audit_id and audit.action == "rollback" and audit.status == "failed"
        assert [(s.index, s.status) for s in audit.steps] == [(0, "failed")]
        assert "node2" in audit.steps[0].detail and "the rest skipped" in audit.message
        assert records.changes(store, "j") == [] and records.versions(store, "j") == []


def test_a_restart_that_fails_leaves_the_code_switched_and_says_restart_failed(bed: Bed) -> None:
    seen: list[str] = []
    res = run_rollback(bed.request(), confirm=lambda p: True, restart=restarter(bed, seen, rc=2))
    assert res.outcome is Outcome.RESTART_FAILED and res.exit_code == ExitCode.CRITICAL
    assert res.restart_exit == 2 and res.restart is not None and res.restart["exit_code"] == 2
    assert all(bed.head(h) == bed.commits["v1"] for h in HOSTS) and seen == ["j"]
    assert res.to_json()["outcome"] == "restart-failed" and res.to_json()["exit_code"] == 2
    with Store.open(bed.state) as store:
        (audit,) = store.audit()
        assert audit.status == "failed" and [s.status for s in audit.steps] == ["done", "done", "failed"]
        assert audit.steps[2].detail == "restart exited 2"
        assert [c.kind for c in records.changes(store, "j")] == ["rollback"]
        assert records.versions(store, "j") == []  # no version start without a restart that ran


def test_an_error_in_the_restart_is_raised_after_the_audit_record_says_failed(bed: Bed) -> None:
    seen: list[str] = []
    with pytest.raises(ConfigError, match="no launch"):
        run_rollback(
            bed.request(),
            confirm=lambda p: True,
            restart=restarter(bed, seen, error=ConfigError("no launch")),
        )
    with Store.open(bed.state) as store:
        (audit,) = store.audit()
        assert audit.status == "failed" and [s.status for s in audit.steps] == ["done", "done", "failed"]
        assert audit.steps[2].detail == "ConfigError: no launch"


def test_declined_and_dry_run_change_nothing_and_hold_no_lock_for_a_dry_run(bed: Bed) -> None:
    shown: list[RollbackPlan] = []
    asked: list[RollbackPlan] = []

    def no(plan: RollbackPlan) -> bool:
        asked.append(plan)
        return False

    declined = run_rollback(bed.request(), confirm=no, show=shown.append)
    assert declined.outcome is Outcome.DECLINED and declined.exit_code == ExitCode.OK
    assert declined.message == "declined: nothing changed" and declined.audit_id is None
    assert asked == shown == [declined.plan] and declined.plan.commit == bed.commits["v1"]
    with Store.open(bed.state) as holder:
        holder.lock("someone", timeout_s=0)
        dry = run_rollback(bed.request(dry_run=True, lock_timeout_s=0))
        assert dry.outcome is Outcome.DRY_RUN and dry.exit_code == ExitCode.OK
        with pytest.raises(StoreLocked):
            run_rollback(bed.request(lock_timeout_s=0), confirm=lambda p: True)
    with Store.open(bed.state) as store:
        assert store.audit() == []
    assert all(bed.head(h) == bed.commits["v2"] for h in HOSTS)


@pytest.mark.parametrize(
    ("outcome", "restart_exit", "code"),
    [
        (Outcome.DRY_RUN, 0, ExitCode.OK),
        (Outcome.DECLINED, 0, ExitCode.OK),
        (Outcome.APPLIED, 0, ExitCode.OK),
        (Outcome.FAILED, 0, ExitCode.UNKNOWN),
        (Outcome.RESTART_FAILED, 2, ExitCode.CRITICAL),
        (Outcome.RESTART_FAILED, 78, ExitCode.CONFIG),
        (Outcome.RESTART_FAILED, 0, ExitCode.UNKNOWN),  # failed without a code of its own: 3
    ],
)
def test_exit_code_per_outcome(outcome: Outcome, restart_exit: int, code: ExitCode) -> None:
    plan = RollbackPlan("j", "0" * 40, "v1", "--to", None, (("n1", None),), (), (), (), "r", ("a", "b", "c"))
    res = RollbackResult(outcome, plan, restart_exit=restart_exit)
    assert res.exit_code == code and res.to_json()["exit_code"] == int(code)
    assert res.to_json()["outcome"] == outcome.value
