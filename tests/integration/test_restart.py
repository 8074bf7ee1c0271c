"""``restart`` on the SSH testbed: robustctl launches the real minimegatron job itself, twice.

The job (tp=1, pp=2, dp=1: one rank on each of node01 and node02, gloo over loopback) is described in
the inventory's ``jobs.mini.launch`` section and started by :func:`robustctl.commands.restart.run_restart`
through sshd, detached from the SSH session (its own session, stdin ``/dev/null``, a log per rank). The
test sees every rank running and its steps progressing (the job's progress files), restarts it again
(the old process trees verified gone, new ones trained), then stops it with ``run_stop``. Nothing of the
job may survive: :class:`~tests.integration.jobrunner.MiniJob` kills whatever is left at the end.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from robustctl.actions.session import Outcome, always
from robustctl.commands.restart import RestartRequest, StopRequest, run_restart, run_stop
from tests.support.needs import needed

from .jobrunner import JOB_MODULE, REPO, MiniJob
from .testbed import Testbed, find_free_port


@pytest.fixture
def mini(testbed: Testbed, tmp_path: Path) -> Iterator[MiniJob]:
    if testbed.n_hosts < 2:
        needed("needs a testbed of at least 2 hosts (ROBUSTCTL_TESTBED_HOSTS)")
    with MiniJob(testbed, tmp_path / "job", tp=1, pp=2, dp=1, ranks_per_host=1, ckpt_every=0) as job:
        yield job
    assert job.processes() == [], "the job left processes behind"


def write_inventory(job: MiniJob, path: Path) -> Path:
    """The testbed inventory with ``jobs.mini``: MiniJob's hosts, layout and process spec, plus ``launch:``."""
    jobs = job.inventory_jobs()
    job.progress_dir.mkdir(parents=True, exist_ok=True)
    job.fault_file.parent.mkdir(parents=True, exist_ok=True)
    job.fault_file.write_text("")
    jobs[job.name]["launch"] = {
        "command": [
            job.tb.python, "-m", JOB_MODULE, "--tp", "1", "--pp", "2", "--dp", "1", "--steps", "0",
            "--progress-dir", str(job.progress_dir), "--fault-file", str(job.fault_file),
            "--max-runtime-s", "300", "--job-id", job.marker,
        ],
        "per": "rank",
        "env": {"PYTHONUNBUFFERED": "1"},
        "cwd": str(REPO),
        "log_dir": str(job.log_dir),
        "master_port": find_free_port([job.master_addr]),
        "stop_grace_s": 10,
        "start_timeout_s": 60,
    }  # fmt: skip
    return job.tb.write_inventory(path, jobs=jobs)


def wait_steps(
    job: MiniJob, step: int, *, not_pids: set[int], timeout: float = 60.0
) -> dict[int, dict[str, Any]]:
    """Progress of every rank once each has finished ``step`` in a process not in ``not_pids``."""
    deadline = time.monotonic() + timeout
    while True:
        prog = job.progress()
        if all(
            r in prog and prog[r]["pid"] not in not_pids and int(prog[r]["step"]) >= step for r in range(2)
        ):
            return prog
        if time.monotonic() > deadline:
            tails = {r: job.log(r)[-500:] for r in range(2)}
            raise AssertionError(f"step {step} not reached in {timeout}s: {prog}\n{tails}")
        time.sleep(0.2)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def details(result: Any) -> dict[str, tuple[str, str]]:
    return {
        s.kind.value: (r.status, r.detail)
        for s, r in zip(result.plan.steps, result.applied.results, strict=True)
    }


def test_restart_launches_the_job_over_ssh_and_restarts_it(mini: MiniJob, tmp_path: Path) -> None:
    inv = write_inventory(mini, tmp_path / "inv.yaml")
    state = tmp_path / "state.db"
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    first = run_restart(
        RestartRequest(job="mini", inventory=inv, state=state, reason="first start"), confirm=always
    )
    timings["restart 1 (launch + running)"] = time.perf_counter() - t0
    assert first.outcome is Outcome.APPLIED, first.applied
    steps = details(first)
    assert steps["stop_job"][0] == "noop" and "nothing of the job running" in steps["stop_job"][1]
    assert steps["launch"][0] == "done" and "node01: started 1 process(es)" in steps["launch"][1]
    assert "all 2 rank(s) running" in steps["wait_running"][1]
    prog = wait_steps(mini, 3, not_pids=set())
    timings["restart 1 → step 3"] = time.perf_counter() - t0
    old_pids = {int(p["pid"]) for p in prog.values()}
    old_tree = {c.pid for pid in old_pids for c in psutil.Process(pid).children(recursive=True)} | old_pids

    t1 = time.perf_counter()
    second = run_restart(
        RestartRequest(job="mini", inventory=inv, state=state, reason="again"), confirm=always
    )
    timings["restart 2 (stop + launch + running)"] = time.perf_counter() - t1
    assert second.outcome is Outcome.APPLIED, second.applied
    stop_status, stop_detail = details(second)["stop_job"]
    assert stop_status == "done" and "ended by SIGTERM" in stop_detail and "STILL RUNNING" not in stop_detail
    assert not [pid for pid in old_tree if alive(pid)], "the old process trees survived the restart"
    wait_steps(mini, 3, not_pids=old_pids)
    timings["restart 2 → step 3"] = time.perf_counter() - t1

    stopped = run_stop(StopRequest(job="mini", inventory=inv, state=state), confirm=always)
    assert stopped.outcome is Outcome.APPLIED, stopped.applied
    assert mini.processes() == []
    print("\n" + "\n".join(f"{k}: {v:.1f} s" for k, v in timings.items()))
    assert sum(timings[k] for k in ("restart 1 → step 3", "restart 2 → step 3")) < 180
