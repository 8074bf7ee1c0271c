"""The recovery ladder's code rollback end to end (ByteRobust §4.2, Fig. 5) on the SSH test bed.

The job's code is a git work tree on each of two loopback sshd hosts (``code.path`` with ``{host}``):
a small repository whose entry script ``train.py`` runs the real minimegatron job (tp=1, pp=2, dp=1,
one rank per host, gloo over loopback). robustctl launches it itself (``launch:`` runs the work
tree's ``train.py``; on real machines the tree sits at one path on every host, here the hosts share
one file system, so machine k reaches its own tree through ``by-node/k``, a symlink) and reads its
progress from minimegatron's ``--progress-dir`` files.

1. Commit 1 runs: ``restart`` records the version it starts, ``wait-for-progress`` sees the steps and
   marks it stable (``stable_after_steps: 2``).
2. ``update stage`` of commit 2, whose ``train.py`` raises TypeError at step 3; ``restart`` applies it
   (its ``apply_update`` step) and the job dies at step 3 on every rank.
3. ``playbook run job-failed --yes`` (the library call): diagnose names no machine → reattempt
   (restart) → the wait sees the ranks exit (``exited``, exit 2) → rollback to commit 1 on every host
   and restart → the job makes steps past step 3 on commit 1, and the change is ``rolled-back``.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from robustctl.actions.session import Outcome, always
from robustctl.commands.playbook import PlaybookRunRequest, run_playbook_run
from robustctl.commands.progress import WaitOutcome, WaitProgressRequest, run_wait_progress
from robustctl.commands.restart import RestartRequest, StopRequest, run_restart, run_stop
from robustctl.commands.update import UpdateListRequest, UpdateStageRequest, run_update_list, run_update_stage
from robustctl.jobcode.records import ChangeState
from robustctl.playbooks.engine import RunOutcome, StepEvent

from .conftest import require_testbed
from .jobrunner import REPO, MiniJob
from .testbed import Testbed, find_free_port

HOSTS = ("node01", "node02")
ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip

GOOD = f'''"""Entry point of the training job: minimegatron from the robustctl repository."""
import sys

sys.path.insert(0, {str(REPO)!r})
from tests.jobs import minimegatron  # noqa: E402

if __name__ == "__main__":
    sys.exit(minimegatron.main())
'''

BAD = GOOD.replace(
    'if __name__ == "__main__":',
    '''_train_step = minimegatron.Trainer.train_step


def train_step(self):
    """A learning-rate warm-up whose scale is not set from step 3 on: TypeError there."""
    scale = 1.0 if self.step < 3 else None
    self.args.lr = 0.05 * scale
    return _train_step(self)


minimegatron.Trainer.train_step = train_step

if __name__ == "__main__":''',
)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True,
                          env=ENV).stdout.strip()  # fmt: skip


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    require_testbed()
    with Testbed(tmp_path_factory.mktemp("rollback-bed"), 2) as tb:
        yield tb


@pytest.fixture
def mini(bed: Testbed, tmp_path: Path) -> Iterator[MiniJob]:
    """The job's bookkeeping (marker, progress and log directories, cleanup); robustctl launches it."""
    with MiniJob(bed, tmp_path / "job", tp=1, pp=2, dp=1, ranks_per_host=1, ckpt_every=0) as job:
        yield job
    assert job.processes() == [], "the job left processes behind"


def code_trees(tmp: Path) -> tuple[str, str]:
    """An origin repository with the good and the bad commit; a clone per host at the good one."""
    origin = tmp / "origin"
    origin.mkdir()
    git(origin, "init", "-q", "-b", "main")
    (origin / "train.py").write_text(GOOD)
    git(origin, "add", "train.py")
    git(origin, "commit", "-q", "-m", "train: minimegatron entry point")
    good = git(origin, "rev-parse", "HEAD")
    for k, h in enumerate(HOSTS):
        subprocess.run(["git", "clone", "-q", str(origin), str(tmp / h / "code")], check=True)
        (tmp / "by-node").mkdir(exist_ok=True)
        (tmp / "by-node" / str(k)).symlink_to(tmp / h)
    (origin / "train.py").write_text(BAD)
    git(origin, "commit", "-qam", "train: learning-rate warm-up")
    bad = git(origin, "rev-parse", "HEAD")
    for h in HOSTS:
        git(tmp / h / "code", "fetch", "-q", "origin")
    return good, bad


def write_inventory(job: MiniJob, tmp: Path) -> Path:
    job.progress_dir.mkdir(parents=True, exist_ok=True)
    tree = str(tmp / "by-node" / "{node_rank}" / "code")
    spec = job.inventory_jobs()[job.name]
    spec["process"]["match"] = r"train\.py\b.*--job-id " + job.marker
    spec["code"] = {"path": str(tmp / "{host}" / "code"), "stable_after_steps": 2}
    spec["progress"] = {"files": str(job.progress_dir / "rank*.json")}
    spec["launch"] = {
        "command": [
            job.tb.python, tree + "/train.py", "--tp", "1", "--pp", "2", "--dp", "1", "--steps", "0",
            "--progress-dir", str(job.progress_dir), "--idle-ms", "50", "--max-runtime-s", "300",
            "--job-id", job.marker,
        ],
        "per": "rank",
        "env": {"PYTHONUNBUFFERED": "1"},
        "cwd": tree,
        "log_dir": str(job.log_dir),
        "master_port": find_free_port([job.master_addr]),
        "stop_grace_s": 10,
        "start_timeout_s": 60,
    }  # fmt: skip
    return job.tb.write_inventory(tmp / "inv.yaml", jobs={job.name: spec})


def heads(tmp: Path) -> list[str]:
    return [git(tmp / h / "code", "rev-parse", "HEAD") for h in HOSTS]


def logs(job: MiniJob) -> str:
    return "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted(job.log_dir.glob("*.log")))


def wait_gone(job: MiniJob, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while job.processes():
        if time.monotonic() > deadline:
            raise AssertionError(f"the job still runs after {timeout}s:\n{logs(job)}")
        time.sleep(0.5)


def statuses(run: RunOutcome) -> dict[str, tuple[str, int | None]]:
    return {s.step: (s.status, s.exit_code) for s in run.steps}


def test_job_failed_reattempts_then_rolls_back_a_bad_commit(mini: MiniJob, tmp_path: Path) -> None:
    good, bad = code_trees(tmp_path)
    inv, state = write_inventory(mini, tmp_path), tmp_path / "state.db"
    where: dict[str, Any] = {"inventory": inv, "state": state}
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    first = run_restart(RestartRequest(job=mini.name, reason="first start", **where), confirm=always)
    assert first.outcome is Outcome.APPLIED, first.applied
    waited = run_wait_progress(
        WaitProgressRequest(job=mini.name, min_new_steps=3, timeout_s=90, poll_s=1, **where)
    )
    assert waited.outcome is WaitOutcome.PROGRESS, (waited, logs(mini))
    listed = run_update_list(UpdateListRequest(job=mini.name, read_progress=False, **where))
    assert [v.commit for v in listed.versions if v.stable_at is not None] == [good], listed.versions
    timings["commit 1: start → stable"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    staged = run_update_stage(
        UpdateStageRequest(job=mini.name, ref=bad, reason="learning-rate warm-up", **where)
    )
    assert staged.change is not None and staged.change.state is ChangeState.PENDING
    second = run_restart(RestartRequest(job=mini.name, reason="apply the warm-up", **where), confirm=always)
    assert second.outcome is Outcome.APPLIED, second.applied
    assert "apply_update" in [s.kind.value for s in second.plan.steps]
    assert heads(tmp_path) == [bad, bad]
    wait_gone(mini)
    assert "TypeError" in logs(mini), logs(mini)
    timings["commit 2: restart → dead at step 3"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    began: dict[str, float] = {}

    def progress(ev: StepEvent) -> None:
        if ev.event == "start":
            began[ev.step] = time.perf_counter()
        elif ev.step in began:
            timings[f"  step {ev.step}"] = time.perf_counter() - began[ev.step]

    run = run_playbook_run(
        PlaybookRunRequest(name="job-failed", params={"job": mini.name}, **where),
        confirm=always,
        progress=progress,
    )
    timings["playbook job-failed"] = time.perf_counter() - t2
    assert isinstance(run, RunOutcome)
    st = statuses(run)
    detail = {s.step: s.result for s in run.steps if s.step.startswith("check")}
    print("steps:", st, "\nchecks:", detail, "\nmessage:", run.message)
    assert run.status == "done" and run.exit_code == 0, (run.message, st, detail, logs(mini))
    assert st["diag"][0] == "done" and st["evict"][0] == "skipped" and st["restart"][0] == "skipped", st
    assert st["reattempt"] == ("done", 0) and st["check"] == ("failed", 2), st
    check = next(s for s in run.steps if s.step == "check")
    assert check.result is not None and check.result["outcome"] == WaitOutcome.EXITED.value, check.result
    assert st["rollback"] == ("done", 0) and st["check_rollback"] == ("done", 0), st
    assert "replay" not in st

    assert heads(tmp_path) == [good, good]
    listed = run_update_list(UpdateListRequest(job=mini.name, read_progress=False, **where))
    change = next(c for c in listed.changes if c.commit == bad)
    assert change.state is ChangeState.ROLLED_BACK, listed.changes
    live = mini.rank_pids()
    assert sorted(live) == [0, 1], live
    prog = mini.progress()
    deadline = time.monotonic() + 60
    while not all(int(prog[r]["pid"]) == live[r] and int(prog[r]["step"]) > 3 for r in (0, 1)):
        assert time.monotonic() < deadline, (prog, logs(mini))
        time.sleep(0.5)
        prog = mini.progress()

    stopped = run_stop(StopRequest(job=mini.name, **where), confirm=always)
    assert stopped.outcome is Outcome.APPLIED, stopped.applied
    assert mini.processes() == []
    print("\n" + "\n".join(f"{k}: {v:.1f} s" for k, v in timings.items()))
