"""Hot update, rollback and the progress signal, on real git repositories (one work tree per simulated
host, reached through the local transport) and real progress files.

Where a command restarts the job (``update stage --urgent``, ``rollback``), the restart step is
injected (the ``restart=`` argument of the library calls, or ``default_restart`` monkeypatched for the
CLI): it records what it was asked and returns an ActionResult-shaped object.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from robustctl.actions import open_context
from robustctl.cli.main import main
from robustctl.commands import update as update_mod
from robustctl.commands.progress import WaitOutcome, WaitProgressRequest, run_wait_progress, wait_for_progress
from robustctl.commands.update import (
    RollbackOutcome,
    RollbackRequest,
    UpdateListRequest,
    UpdateStageRequest,
    run_rollback,
    run_update_list,
    run_update_stage,
)
from robustctl.config import ProgressSpec
from robustctl.errors import ActionRefused, ConfigError, HostError, UsageError
from robustctl.exit_codes import ExitCode
from robustctl.inventory import load_inventory
from robustctl.jobcode import records
from robustctl.jobcode.git import check_ref, common_commit, inspect_hosts, switch_code
from robustctl.jobcode.progress import HostProgress, ProgressReading, RankProgress, read_progress
from robustctl.store import Store
from robustctl.transport.pool import TransportPool

HOSTS = ("node1", "node2", "node3")


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    out = subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True, env=env)
    return out.stdout.strip()


def commit(repo: Path, text: str) -> str:
    (repo / "train.py").write_text(text)
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", text)
    return git(repo, "rev-parse", "HEAD")


def head(tmp: Path, host: str) -> str:
    return git(tmp / "hosts" / host / "code", "rev-parse", "HEAD")


@dataclass
class Bed:
    tmp: Path
    inv: Path
    state: Path
    c1: str
    c2: str
    c3: str
    only12: str  # a commit fetched by node1 and node2 only

    def tree(self, host: str) -> Path:
        return self.tmp / "hosts" / host / "code"


@pytest.fixture
def bed(tmp_path: Path) -> Bed:
    origin = tmp_path / "origin"
    origin.mkdir()
    git(origin, "init", "-q", "-b", "main")
    c1 = commit(origin, "v1")
    git(origin, "tag", "v1")
    c2 = commit(origin, "v2")
    git(origin, "tag", "v2")
    c3 = commit(origin, "v3")
    for h in HOSTS:
        (tmp_path / "hosts" / h).mkdir(parents=True)
        subprocess.run(["git", "clone", "-q", str(origin), str(tmp_path / "hosts" / h / "code")], check=True)
    only12 = commit(origin, "v4")
    for h in HOSTS[:2]:
        git(tmp_path / "hosts" / h / "code", "fetch", "-q", "origin")
    (tmp_path / "progress").mkdir()
    inv = {
        "hosts": [{"name": h, "transport": "local"} for h in HOSTS],
        "jobs": {
            "j": {
                "hosts": "node[1-3]",
                "ranks_per_host": 1,
                "layout": {"dp": 3},
                "code": {"path": str(tmp_path / "hosts" / "{host}" / "code"), "stable_after_steps": 5},
                "progress": {"files": str(tmp_path / "progress" / "{host}" / "rank*.json")},
            }
        },
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(inv))
    return Bed(tmp_path, path, tmp_path / "state.db", c1, c2, c3, only12)


def heartbeat(bed: Bed, host: str, rank: int, step: int, at: float) -> None:
    d = bed.tmp / "progress" / host
    d.mkdir(exist_ok=True)
    (d / f"rank{rank:05d}.json").write_text(
        json.dumps({"rank": rank, "pid": 1, "step": step, "phase": "train", "time": at, "loss": 1.0})
    )


def job_hosts(bed: Bed) -> tuple[Any, Any]:
    inv = load_inventory(bed.inv, environ={})
    job = inv.job("j")
    return job, list(job.hosts)


# ---- refs, inspection ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ref", ["-n", "--upload-pack=x", "a b", "HEAD:train.py", "x\x00", "", "é", "a" * 300]
)
def test_bad_refs_are_refused_before_any_host(ref: str) -> None:
    with pytest.raises(UsageError):
        check_ref(ref)


@pytest.mark.parametrize("ref", ["v1", "main~1", "HEAD^", "3f2c1e0", "origin/main", "release/1.4"])
def test_good_refs_pass(ref: str) -> None:
    assert check_ref(ref) == ref


def test_ref_resolves_to_one_commit_on_every_host(bed: Bed) -> None:
    job, hosts = job_hosts(bed)
    codes = inspect_hosts(TransportPool(), hosts, job.code, "v1")
    assert common_commit(codes, "v1") == bed.c1
    assert {c.head for c in codes} == {bed.c3} and {c.branch for c in codes} == {"main"}


def test_ref_missing_on_one_host_names_it(bed: Bed) -> None:
    job, hosts = job_hosts(bed)
    codes = inspect_hosts(TransportPool(), hosts, job.code, bed.only12)
    with pytest.raises(UsageError, match=r"^node3: ref '[0-9a-f]{40}' does not name a commit"):
        common_commit(codes, bed.only12)


def test_path_that_is_not_a_work_tree_is_a_config_error_naming_the_host(bed: Bed) -> None:
    job, hosts = job_hosts(bed)
    subprocess.run(["rm", "-rf", str(bed.tree("node2") / ".git")], check=True)
    codes = inspect_hosts(TransportPool(), hosts, job.code, "v1")
    with pytest.raises(ConfigError, match=r"^node2: .*is not a git work tree"):
        common_commit(codes, "v1")


# ---- switch, all or none ------------------------------------------------------------------------


def test_a_work_tree_config_that_names_commands_runs_nothing(bed: Bed) -> None:
    """A host's work tree whose .git/config names an fsmonitor command and a hooks directory with a
    post-checkout hook: reading the tree (git status) and switching it (git checkout) run neither."""
    ran = bed.tmp / "ran"
    tree = bed.tree("node2")
    hooks = bed.tmp / "evil-hooks"
    hooks.mkdir()
    (hooks / "post-checkout").write_text(f"#!/bin/sh\necho hook >> {ran}\n")
    (hooks / "post-checkout").chmod(0o755)
    git(tree, "config", "core.fsmonitor", f"echo fsmonitor >> {ran}; false")
    git(tree, "config", "core.hooksPath", str(hooks))
    job, hosts = job_hosts(bed)
    assert all(h.ok for h in inspect_hosts(TransportPool(), hosts, job.code))
    with contextlib.closing(open_context(bed.inv, bed.state)) as ctx:
        assert switch_code(ctx, "j", None, bed.c1).ok
    assert head(bed.tmp, "node2") == bed.c1
    assert not ran.exists(), ran.read_text()
    git(tree, "status", "--porcelain")  # the same tree read by git itself does run them
    assert ran.exists()


def test_switch_checks_out_on_every_host_and_verifies(bed: Bed) -> None:
    with contextlib.closing(open_context(bed.inv, bed.state)) as ctx:
        res = switch_code(ctx, "j", None, bed.c1)
    assert res.ok, res.message
    assert [h.status for h in res.hosts] == ["switched"] * 3
    assert all(head(bed.tmp, h) == bed.c1 for h in HOSTS)
    with contextlib.closing(open_context(bed.inv, bed.state)) as ctx:  # rerun: nothing to do
        again = switch_code(ctx, "j", None, bed.c1)
    assert [h.status for h in again.hosts] == ["unchanged"] * 3


def test_a_checkout_that_fails_on_one_host_leaves_nothing_switched(bed: Bed) -> None:
    (bed.tree("node2") / ".git" / "index.lock").write_text("")  # git refuses to check out here
    with contextlib.closing(open_context(bed.inv, bed.state)) as ctx:
        res = switch_code(ctx, "j", None, bed.c1)
    assert not res.ok and res.message.startswith("nothing switched: node2: git checkout")
    statuses = {h.host: h.status for h in res.hosts}
    assert statuses == {"node1": "restored", "node2": "failed", "node3": "restored"}
    assert all(head(bed.tmp, h) == bed.c3 for h in HOSTS)
    assert git(bed.tree("node1"), "symbolic-ref", "--short", "HEAD") == "main"  # its branch, not detached
    assert res.half_applied == ()


def test_a_commit_missing_on_one_host_runs_nothing(bed: Bed) -> None:
    with contextlib.closing(open_context(bed.inv, bed.state)) as ctx:
        res = switch_code(ctx, "j", None, bed.only12)
    assert not res.ok and "node3" in res.message
    assert {h.status for h in res.hosts} == {"not-run"}
    assert all(head(bed.tmp, h) == bed.c3 for h in HOSTS)


def test_a_dirty_work_tree_refuses_the_switch(bed: Bed) -> None:
    (bed.tree("node3") / "train.py").write_text("local edit")
    with (
        contextlib.closing(open_context(bed.inv, bed.state)) as ctx,
        pytest.raises(ActionRefused, match="^node3: "),
    ):
        switch_code(ctx, "j", None, bed.c1)
    assert all(head(bed.tmp, h) == bed.c3 for h in HOSTS)


# ---- progress -----------------------------------------------------------------------------------


def test_progress_from_heartbeat_files(bed: Bed) -> None:
    job, hosts = job_hosts(bed)
    heartbeat(bed, "node1", 0, 12, 1000.0)
    heartbeat(bed, "node2", 1, 10, 1001.0)
    (bed.tmp / "progress" / "node3").mkdir()
    os.mkfifo(bed.tmp / "progress" / "node3" / "rank00002.json")  # never opened for a blocking read
    r = read_progress(TransportPool(), "j", hosts, job.progress)
    assert r.step == 10 and r.max_step == 12 and r.at == 1000.0 and r.complete
    assert [e.rank for e in r.entries] == [0, 1]
    assert "not a regular file" in r.hosts[2].problems[0]


def test_progress_reads_at_most_max_files(bed: Bed) -> None:
    job, hosts = job_hosts(bed)
    for rank in range(5):
        heartbeat(bed, "node1", rank, 100 + rank, 1000.0)
    spec = job.progress.model_copy(update={"max_files": 2})
    r = read_progress(TransportPool(), "j", hosts[:1], spec)
    assert r.hosts[0].matched == 5 and len(r.entries) == 2


def test_progress_from_a_log_tail(bed: Bed) -> None:
    _, hosts = job_hosts(bed)
    log = bed.tmp / "train.log"
    lines = [f" [2025-01-01] iteration {i:8d}/ 1000 | lm loss: 1.0E+00" for i in range(1, 3000)]
    log.write_text("\n".join(lines) + "\nsaving checkpoint\n")
    spec = ProgressSpec(log=str(log), pattern=r"iteration\s+(?P<step>\d+)/", tail_bytes=4096)
    r = read_progress(TransportPool(), "j", hosts[:1], spec)
    assert r.step == 2999 and r.entries[0].at == pytest.approx(log.stat().st_mtime)
    missing = ProgressSpec(log=str(bed.tmp / "none.log"), pattern=r"(?P<step>\d+)")
    r2 = read_progress(TransportPool(), "j", hosts[:1], missing)
    assert r2.step is None and r2.complete  # no log here: no signal, not an error


def test_an_unreachable_host_makes_the_reading_incomplete(bed: Bed) -> None:
    job, hosts = job_hosts(bed)
    heartbeat(bed, "node1", 0, 5, 1000.0)
    broken = [hosts[0], hosts[1].__class__(**{**hosts[1].__dict__, "python": hosts[1].python.model_copy(
        update={"path": str(bed.tmp / "no-python")})})]  # fmt: skip
    r = read_progress(TransportPool(), "j", broken, job.progress)
    assert not r.complete and r.errors[0].startswith("node2: ")


# ---- records, stability -------------------------------------------------------------------------


def test_pending_update_latest_wins_and_window_forces(tmp_path: Path) -> None:
    now = [1000.0]
    with Store.open(tmp_path / "s.db", clock=lambda: now[0]) as store:
        assert records.pending_update(store, "j", now[0]) == (None, (), False)
        a = records.record_change(
            store, "j", ref="v2", commit="b" * 40, from_ref="a" * 40, reason="x", window_s=60
        )
        now[0] = 1010.0
        b = records.record_change(
            store, "j", ref="v3", commit="c" * 40, from_ref="a" * 40, reason="y", window_s=60
        )
        assert records.pending_update(store, "j", 1030.0) == ("c" * 40, (a.id, b.id), False)
        assert records.pending_update(store, "j", 1060.0) == ("c" * 40, (a.id, b.id), True)
        records.mark_applied(store, "j", (a.id, b.id), forced=True)
        states = [c.state for c in records.changes(store, "j")]
        assert states == [records.ChangeState.SUPERSEDED, records.ChangeState.FORCED]
        assert records.pending_update(store, "j", 2000.0) == (None, (), False)
        with pytest.raises(Exception, match="keeps its job"):
            store._conn.execute("UPDATE code_changes SET reason='rewritten' WHERE id=?", (a.id,))
        with pytest.raises(Exception, match="append-only"):
            store._conn.execute("DELETE FROM code_changes")


def reading(step: int, at: float, complete: bool = True) -> ProgressReading:
    rows = (HostProgress("node1", (RankProgress("node1", "f", 0, step, at),)),)
    if not complete:
        rows = (*rows, HostProgress("node2", error="unreachable"))
    return ProgressReading("j", rows, at)


def test_a_version_becomes_stable_by_steps_after_its_restart(bed: Bed) -> None:
    job, _ = job_hosts(bed)
    spec = job.code  # stable_after_steps 5, stable_after_s 1800
    with Store.open(bed.state) as store:
        v = records.record_version_start(store, "j", bed.c2, started_at=1000.0)
        assert (
            records.evaluate_stability(store, "j", spec, reading(50, 900.0)).base_step is None
        )  # before start
        assert records.evaluate_stability(store, "j", spec, reading(100, 1010.0)).base_step == 100
        assert records.evaluate_stability(store, "j", spec, reading(104, 1020.0)).stable_at is None
        assert (
            records.evaluate_stability(store, "j", spec, reading(105, 1030.0, complete=False)).stable_at
            is None
        )
        v = records.evaluate_stability(store, "j", spec, reading(106, 1040.0))
        assert v is not None and v.stable_at == 1040.0 and v.steps_seen == 6
        assert records.last_stable_version(store, "j").commit == bed.c2
        records.record_version_start(store, "j", bed.c3, started_at=2000.0)
        v3 = records.evaluate_stability(store, "j", spec, reading(3, 3900.0))  # 1900 s after its start
        assert v3.stable_at == 3900.0  # by time: still making steps 1800 s after the restart


# ---- commands -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FakeRestart:
    exit_code: int = 0
    kind: str = "apply"
    schema_version: int = 1
    outcome: str = "applied"


def injected(calls: list[tuple[str, str]], rc: int = 0) -> Any:
    def restart(job: str, reason: str, req: Any, confirm: Any, show: Any) -> FakeRestart:
        calls.append((job, reason))
        return FakeRestart(exit_code=rc)

    return restart


def test_stage_records_a_lazy_change_and_urgent_restarts(bed: Bed) -> None:
    calls: list[tuple[str, str]] = []
    req = UpdateStageRequest(job="j", ref="v1", reason="fused rmsnorm", inventory=bed.inv, state=bed.state)
    res = run_update_stage(req, restart=injected(calls))
    assert res.commit == bed.c1 and res.from_commit == bed.c3 and res.change is not None
    assert res.change.state is records.ChangeState.PENDING and calls == []
    urgent = UpdateStageRequest(
        job="j", ref="v2", reason="loss spike", urgent=True, inventory=bed.inv, state=bed.state
    )
    res2 = run_update_stage(urgent, restart=injected(calls))
    assert calls == [("j", "urgent update v2: loss spike")] and res2.exit_code == 0
    lst = run_update_list(UpdateListRequest(job="j", inventory=bed.inv, state=bed.state))
    assert lst.pending_commit == bed.c2 and len(lst.pending_ids) == 2
    assert all(head(bed.tmp, h) == bed.c3 for h in HOSTS)  # staging never touches the work trees


def test_stage_with_a_ref_missing_on_one_host_records_nothing(bed: Bed) -> None:
    req = UpdateStageRequest(job="j", ref=bed.only12, reason="x", inventory=bed.inv, state=bed.state)
    with pytest.raises(UsageError, match="^node3: "):
        run_update_stage(req)
    with Store.open(bed.state) as store:
        assert records.changes(store, "j") == []


def test_rollback_without_a_stable_version_is_refused(bed: Bed) -> None:
    with pytest.raises(ActionRefused, match="no version of job j has run stably"):
        run_rollback(RollbackRequest(job="j", inventory=bed.inv, state=bed.state), confirm=lambda p: True)


def test_rollback_to_the_last_stable_version_switches_all_and_restarts(bed: Bed) -> None:
    with Store.open(bed.state) as store:
        records.record_version_start(store, "j", bed.c2, started_at=1000.0, base_step=0)
        records.evaluate_stability(
            store, "j", records.CodeSpec(path="/x", stable_after_steps=5), reading(9, 1100.0)
        )
        bad = records.record_change(store, "j", ref="v3", commit=bed.c3, from_ref=bed.c2, reason="new kernel")
        records.mark_applied(store, "j", (bad.id,), forced=False)
        pend = records.record_change(store, "j", ref="v1", commit=bed.c1, from_ref=bed.c3, reason="later")
        records.record_version_start(store, "j", bed.c3, started_at=store.clock())
    calls: list[tuple[str, str]] = []
    dry = run_rollback(RollbackRequest(job="j", dry_run=True, inventory=bed.inv, state=bed.state))
    assert dry.outcome is RollbackOutcome.DRY_RUN and dry.plan.commit == bed.c2
    assert dry.plan.rolled_back == (bad.id,) and dry.plan.pending == (pend.id,)
    res = run_rollback(
        RollbackRequest(job="j", reason="TypeError at step 3", inventory=bed.inv, state=bed.state),
        confirm=lambda p: True,
        restart=injected(calls),
    )
    assert res.outcome is RollbackOutcome.APPLIED and res.exit_code == 0, res.message
    assert all(head(bed.tmp, h) == bed.c2 for h in HOSTS) and calls == [("j", "TypeError at step 3")]
    with Store.open(bed.state) as store:
        by_id = {c.id: c for c in records.changes(store, "j")}
        assert by_id[bad.id].state is records.ChangeState.ROLLED_BACK
        assert by_id[pend.id].state is records.ChangeState.SUPERSEDED
        assert records.pending_update(store, "j", store.clock()) == (None, (), False)
        assert records.versions(store, "j")[-1].commit == bed.c2
        audit = store.audit()[-1]
        assert audit.action == "rollback" and audit.status == "applied"
        assert [s.status for s in audit.steps] == ["done", "done", "done"]


def test_rollback_passes_over_the_version_the_hosts_run_even_when_it_ran_stably(bed: Bed) -> None:
    """c3 (what the hosts run) ran 2 steps, enough to be stable, then failed: the rollback is to c2."""
    spec = records.CodeSpec(path="/x", stable_after_steps=2)
    with Store.open(bed.state) as store:
        records.record_version_start(store, "j", bed.c2, started_at=1000.0, base_step=0)
        records.evaluate_stability(store, "j", spec, reading(9, 1100.0))
        records.record_version_start(store, "j", bed.c3, started_at=2000.0, base_step=0)
        records.evaluate_stability(store, "j", spec, reading(2, 2010.0))
        assert records.last_stable_version(store, "j").commit == bed.c3
    dry = run_rollback(RollbackRequest(job="j", dry_run=True, inventory=bed.inv, state=bed.state))
    assert dry.outcome is RollbackOutcome.DRY_RUN and dry.plan.commit == bed.c2, dry.plan


def test_rollback_when_only_the_running_version_ran_stably_is_refused(bed: Bed) -> None:
    with Store.open(bed.state) as store:
        records.record_version_start(store, "j", bed.c3, started_at=2000.0, base_step=0)
        records.evaluate_stability(
            store, "j", records.CodeSpec(path="/x", stable_after_steps=2), reading(5, 2010.0)
        )
    calls: list[tuple[str, str]] = []
    with pytest.raises(ActionRefused, match=r"already runs .* the only version that has run stably"):
        run_rollback(
            RollbackRequest(job="j", inventory=bed.inv, state=bed.state),
            confirm=lambda p: True,
            restart=injected(calls),
        )
    assert calls == [] and all(head(bed.tmp, h) == bed.c3 for h in HOSTS)


def test_rollback_where_one_checkout_fails_leaves_nothing_switched(bed: Bed) -> None:
    (bed.tree("node3") / ".git" / "index.lock").write_text("")
    calls: list[tuple[str, str]] = []
    res = run_rollback(
        RollbackRequest(job="j", to="v1", inventory=bed.inv, state=bed.state),
        confirm=lambda p: True,
        restart=injected(calls),
    )
    assert res.outcome is RollbackOutcome.FAILED and res.exit_code == ExitCode.UNKNOWN
    assert calls == [] and all(head(bed.tmp, h) == bed.c3 for h in HOSTS)
    with Store.open(bed.state) as store:
        audit = store.audit()[-1]
        assert audit.status == "failed" and [s.status for s in audit.steps] == ["failed"]
        assert records.changes(store, "j") == []


def test_wait_for_progress_outcomes() -> None:
    clock = [0.0]

    def run(seq: list[ProgressReading], **kw: Any) -> Any:
        it = iter(seq)
        last = [seq[-1]]

        def reader() -> ProgressReading:
            last[0] = next(it, last[0])
            return last[0]

        def sleep(s: float) -> None:
            clock[0] += s

        return wait_for_progress(
            WaitProgressRequest(job="j", timeout_s=30, poll_s=10, **kw),
            reader,
            monotonic=lambda: clock[0],
            sleep=sleep,
        )

    ok = run([reading(10, 1.0), reading(10, 2.0), reading(12, 3.0)], min_new_steps=2)
    assert ok.outcome is WaitOutcome.PROGRESS and ok.new_steps == 2 and ok.exit_code == 0
    stuck = run([reading(10, 1.0)])
    assert stuck.outcome is WaitOutcome.NO_PROGRESS and stuck.exit_code == 2 and stuck.readings == 4
    gone = run([reading(10, 1.0, complete=False)], since_step=5)
    assert gone.outcome is WaitOutcome.UNREADABLE and gone.exit_code == 3
    assert run([reading(7, 1.0)], since_step=5, min_new_steps=2).exit_code == 0
    with pytest.raises(UsageError):
        run([reading(1, 1.0)], min_new_steps=0)


def test_a_job_whose_ranks_exited_ends_the_wait_even_after_steps() -> None:
    """Steps written just before the ranks died are not progress: the wait ends ``exited`` (exit 2)."""
    clock = [0.0]
    seq = iter([reading(0, 1.0), reading(2, 2.0)])
    scans: list[str | None] = [None, "node1: rank(s) 0 not running"]

    def gone() -> str | None:
        return scans.pop(0) if scans else "node1: rank(s) 0 not running"

    def sleep(s: float) -> None:
        clock[0] += s

    res = wait_for_progress(
        WaitProgressRequest(job="j", timeout_s=30, poll_s=10, min_new_steps=1),
        lambda: next(seq),
        gone=gone,
        monotonic=lambda: clock[0],
        sleep=sleep,
    )
    assert res.outcome is WaitOutcome.EXITED and res.exit_code == ExitCode.CRITICAL
    assert res.last_step == 2 and res.readings == 2 and "rank(s) 0 not running" in res.exited
    alive = wait_for_progress(
        WaitProgressRequest(job="j", timeout_s=30, poll_s=10),
        iter([reading(0, 1.0), reading(2, 2.0)]).__next__,
        gone=lambda: None,
        monotonic=lambda: clock[0],
        sleep=sleep,
    )
    assert alive.outcome is WaitOutcome.PROGRESS and alive.exited == ""


def test_run_wait_progress_reads_hosts_and_marks_stability(bed: Bed) -> None:
    with Store.open(bed.state) as store:
        records.record_version_start(store, "j", bed.c3, started_at=1000.0, base_step=0)
    for i, h in enumerate(HOSTS):
        heartbeat(bed, h, i, 7, 2000.0)
    res = run_wait_progress(
        WaitProgressRequest(
            job="j", since_step=0, min_new_steps=5, timeout_s=5, inventory=bed.inv, state=bed.state
        )
    )
    assert res.outcome is WaitOutcome.PROGRESS and res.last_step == 7
    with Store.open(bed.state) as store:
        assert records.last_stable_version(store, "j").commit == bed.c3


def audit_restart(
    store: Store, job: str, launch_at: float, status: str = "done", kind: str = "launch"
) -> None:
    """A ``restart`` audit record as apply_plan writes it: its start step (launch or requeue) at ``launch_at``."""
    now = [launch_at - 5.0]
    store.clock = lambda: now[0]
    steps = [{"kind": "stop_job", "host": "node1"}, {"kind": kind, "host": "node1"}]
    aid = store.audit_begin(
        "restart", ["node1"], "test", plan={"action": "restart", "job": job, "steps": steps}
    )
    store.audit_step_start(aid, 0, "stop")
    store.audit_step_end(aid, 0, "done", "")
    now[0] = launch_at
    store.audit_step_start(aid, 1, kind)
    store.audit_step_end(aid, 1, status, "")
    store.audit_finish(aid, "applied" if status == "done" else "failed", "")


def test_last_start_is_the_newest_done_launch_or_requeue_of_the_job(tmp_path: Path) -> None:
    from robustctl.actions.restart import last_start

    with Store.open(tmp_path / "s.db") as store:
        assert last_start(store, "j") is None
        audit_restart(store, "j", 1000.0)
        audit_restart(store, "other", 3000.0)  # another job's restart is not this one's
        assert last_start(store, "j") == 1000.0
        audit_restart(store, "j", 2000.0, kind="requeue")  # Slurm, Kubernetes
        assert last_start(store, "j") == 2000.0
        audit_restart(store, "j", 2500.0, status="failed")  # a launch that failed started nothing
        assert last_start(store, "j") == 2000.0


def test_the_wait_ignores_entries_of_the_run_stopped_before_the_last_start(
    bed: Bed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stopped run got to step 50; the restart at t=1000 resumed from checkpoint 40. Counted, the
    stale step 50 would be the baseline and the new run would have to pass step 53 to count."""
    from robustctl.commands import progress as progress_mod

    with Store.open(bed.state) as store:
        audit_restart(store, "j", 1000.0)
    for i, h in enumerate(HOSTS):
        heartbeat(bed, h, i, 50, 990.0)
    new_run = iter([(41, 1002.0), (44, 1005.0)])

    def read_then_step(*args: Any, **kwargs: Any) -> ProgressReading:
        """Each reading of the wait, then the new run's next step: the wait sees 50, 41, then 44."""
        reading = read_progress(*args, **kwargs)
        step = next(new_run, None)
        if step is not None:
            for i, h in enumerate(HOSTS):
                heartbeat(bed, h, i, *step)
        return reading

    monkeypatch.setattr(progress_mod, "read_progress", read_then_step)
    res = run_wait_progress(
        WaitProgressRequest(
            job="j", min_new_steps=3, timeout_s=30, poll_s=0.2, inventory=bed.inv, state=bed.state
        )
    )
    assert res.readings == 3, res
    assert res.counted_since == 1000.0
    assert res.outcome is WaitOutcome.PROGRESS and res.baseline_step == 41 and res.last_step == 44, res


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_cli_exit_codes(bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    i, s = ("-i", str(bed.inv)), ("--state", str(bed.state))
    code, out, _ = cli("update", "stage", "--job", "j", "--ref", "v2", "--reason", "r", *i, *s, "--json")
    assert code == 0 and json.loads(out)["commit"] == bed.c2
    code, _, err = cli("update", "stage", "--job", "j", "--ref", bed.only12, "--reason", "r", *i, *s)
    assert code == ExitCode.USAGE and "node3: ref" in err and err.count("\n") == 1
    assert cli("update", "stage", "--job", "j", "--ref", "-x", "--reason", "r", *i, *s)[0] == ExitCode.USAGE
    assert (
        cli("update", "stage", "--job", "nojob", "--ref", "v1", "--reason", "r", *i, *s)[0] == ExitCode.USAGE
    )
    code, out, _ = cli("update", "list", "--job", "j", *i, *s, "--json")
    assert code == 0 and json.loads(out)["kind"] == "update-list"
    code, _, err = cli("rollback", "--job", "j", *i, *s, "--yes")
    assert code == ExitCode.CRITICAL and "no version of job j has run stably" in err
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(update_mod, "default_restart", injected(calls))
    code, out, _ = cli("rollback", "--job", "j", "--to", "v1", *i, *s, "--yes", "--json", "-q")
    assert code == 0 and json.loads(out)["outcome"] == "applied" and len(calls) == 1
    assert all(head(bed.tmp, h) == bed.c1 for h in HOSTS)
    subprocess.run(["rm", "-rf", str(bed.tree("node1") / ".git")], check=True)
    code, _, err = cli("rollback", "--job", "j", "--to", "v1", *i, *s, "--yes")
    assert code == ExitCode.CONFIG and err.startswith("robustctl: error: node1: ")


def test_a_job_without_code_section_is_a_config_error(bed: Bed) -> None:
    data = yaml.safe_load(bed.inv.read_text())
    del data["jobs"]["j"]["code"]
    bed.inv.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="has no code: section"):
        run_update_stage(
            UpdateStageRequest(job="j", ref="v1", reason="x", inventory=bed.inv, state=bed.state)
        )


def test_unreachable_host_is_exit_3() -> None:
    from robustctl.jobcode.git import HostCode

    codes = (
        HostCode("node1", "/c", "a" * 40, target="a" * 40),
        HostCode("node2", "/c", error="refused", problem="unreachable"),
    )
    with pytest.raises(HostError, match="^node2: refused") as exc:
        common_commit(codes, "v1")
    assert exc.value.exit_code == ExitCode.UNKNOWN
