"""A minimegatron job that robustctl itself launches on four testbed hosts, with two warm standbys.

Shared by the end-to-end playbook and watch tests (``test_playbook_e2e.py``, ``test_watch_e2e.py``)
and the recovery and soak benchmarks (``bench/recovery.py``, ``bench/soak.py``). By default the job
(tp=1, pp=2, dp=2, one rank per host; rank = dp + 2·pp, so the PP groups are {0, 2} and {1, 3}, the DP
groups {0, 1} and {2, 3}) runs on node01-node04; node05 and node06 are standbys, recorded ``ready`` in
the state store as ``standby check`` would leave them. ``HangJob(tb, dir, dp=D, standbys=(...))``
makes it tp=1, pp=2, dp=D on the first 2·D hosts (rank = dp + D·pp) with those hosts as standbys.

The inventory's ``jobs.mini`` has everything a recovery needs:

* ``launch:`` one process per rank, ``--load {ckpt_iter}`` (``none`` on a cold start), checkpoints
  every :data:`CKPT_EVERY` steps, rank 0 logging every step;
* ``ckpt:`` the checkpoint directory, shared by every host (the testbed's hosts share this machine's
  disk, as a job's hosts share a parallel file system): a standby that takes a rank's place finds
  that rank's shard there;
* ``progress:`` the job's progress files (``wait-for-progress``);
* ``process:`` the job's unique marker (:class:`~tests.integration.jobrunner.MiniJob`), so ``stacks``
  and ``stop`` find this job's processes only.

Only loopback addresses: the hosts are 127.0.0.2-7.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import psutil

from robustctl.actions.session import always
from robustctl.commands.restart import RestartRequest, run_restart
from robustctl.store import MachineState, Readiness, Store

from .jobrunner import JOB_MODULE, REPO, MiniJob
from .testbed import Testbed, find_free_port

JOB = "mini"
JOB_HOSTS = range(4)
STANDBYS = (4, 5)
CKPT_EVERY = 3
"""Steps between two checkpoints: a few seconds of training always leave two complete iterations."""


class HangJob:
    """The job, its inventory (``inventory``), state store (``state``) and checkpoint root (``ckpt``).

    Use as a context manager: every process of the job is ended on exit (``MiniJob.stop``).
    """

    def __init__(
        self, testbed: Testbed, workdir: Path, *, dp: int = 2, standbys: tuple[int, ...] = STANDBYS
    ) -> None:
        world = 2 * dp
        if testbed.n_hosts < world + len(standbys) or any(s < world for s in standbys):
            raise ValueError(
                f"needs a testbed of {world} job hosts and standbys {standbys} after them, it has "
                f"{testbed.n_hosts} hosts"
            )
        self.tb = testbed
        self.workdir = workdir
        self.dp = dp
        self.world = world
        """Ranks (one per host; rank = dp + dp_size·pp, the PP groups {i, i + dp_size})."""
        self.job_range = range(world)
        self.standby_indices = standbys
        self.mini = MiniJob(testbed, workdir / "job", tp=1, pp=2, dp=dp, ranks_per_host=1, ckpt_every=0)
        self.ckpt = workdir / "ckpt"
        self.state = workdir / "state.db"
        self.inventory = workdir / "inventory.yaml"
        self.standbys = [testbed.name(i) for i in standbys]
        self._write()

    def __enter__(self) -> HangJob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.mini.stop()

    def _write(self) -> None:
        m = self.mini
        for d in (m.progress_dir, m.log_dir, self.ckpt):
            d.mkdir(parents=True, exist_ok=True)
        m.fault_file.write_text("")
        jobs = m.inventory_jobs()
        jobs[JOB]["launch"] = {
            "command": [
                self.tb.python, "-m", JOB_MODULE, "--tp", "1", "--pp", "2", "--dp", str(self.dp), "--steps", "0",
                "--progress-dir", str(m.progress_dir), "--fault-file", str(m.fault_file),
                "--ckpt-dir", str(self.ckpt), "--ckpt-every", str(CKPT_EVERY), "--load", "{ckpt_iter}",
                "--log-every", "1", "--max-runtime-s", "300", "--job-id", m.marker,
            ],
            "per": "rank",
            "env": {"PYTHONUNBUFFERED": "1"},
            "cwd": str(REPO),
            "log_dir": str(m.log_dir),
            "master_port": find_free_port([m.master_addr]),
            "stop_grace_s": 5,
            "start_timeout_s": 60,
        }  # fmt: skip
        jobs[JOB]["ckpt"] = {"dir": str(self.ckpt), "timeout_s": 20}
        jobs[JOB]["progress"] = {"files": f"{m.progress_dir}/rank*.json"}
        hosts = [
            *self.tb.host_entries(self.job_range),
            *self.tb.host_entries(self.standby_indices, state="standby"),
        ]
        policy = {"max_cluster_fraction": 1.0, "max_job_fraction": 1.0, "circuit_breaker_fraction": 1.0}
        self.tb.write_inventory(self.inventory, hosts, jobs=jobs, policy=policy)
        with Store.open(self.state) as s:
            for name in self.standbys:
                s.set_state(name, MachineState.STANDBY, "checked", readiness=Readiness.READY)

    # ---- the job --------------------------------------------------------------------------------

    def cold_start(self) -> Any:
        """``run_restart --from-checkpoint none``: robustctl launches the job from nothing."""
        res = run_restart(
            RestartRequest(
                job=JOB, inventory=self.inventory, state=self.state, from_checkpoint="none", reason="start"
            ),
            confirm=always,
        )
        assert res.outcome.value == "applied", res.applied
        return res

    def progress(self) -> dict[int, dict[str, Any]]:
        """Each rank's progress document (see minimegatron's docstring)."""
        return self.mini.progress()

    def wait(self, ok: Any, what: str, timeout: float = 90.0) -> dict[int, dict[str, Any]]:
        """Poll the progress files until ``ok(progress)``; AssertionError with the log tails otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            prog = self.progress()
            if len(prog) == self.world and ok(prog):
                return prog
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout:g} s: {prog}\n{self.log_tails()}")
            time.sleep(0.05)

    def wait_step(
        self, step: int, *, not_pids: frozenset[int] | set[int] = frozenset(), timeout: float = 90.0
    ) -> dict[int, dict[str, Any]]:
        """Every rank past ``step``, each in a process not in ``not_pids``."""
        return self.wait(
            lambda p: all(int(d["step"]) >= step and d["pid"] not in not_pids for d in p.values()),
            f"step {step}",
            timeout,
        )

    def complete_iterations(self) -> list[int]:
        """Iterations with every rank's shard on disk, newest first."""
        out = []
        for d in self.ckpt.glob("iter_*"):
            if all((d / f"rank_{r:05d}.pt").is_file() for r in range(self.world)):
                out.append(int(d.name.removeprefix("iter_")))
        return sorted(out, reverse=True)

    def log(self, rank: int) -> str:
        """Everything rank ``rank`` wrote to its log (appended across launches)."""
        try:
            return (self.mini.log_dir / f"{JOB}-rank{rank:05d}.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tails(self) -> str:
        """The last lines of every rank's log, for assertion messages."""
        return "\n".join(
            f"--- rank {r}:\n" + "\n".join(self.log(r).splitlines()[-6:]) for r in range(self.world)
        )

    def first_step_after_resume(self) -> tuple[int, int] | None:
        """``(iteration, first step)`` of rank 0's last resume in its log: the iteration it loaded and
        the first step it then logged; None until both are there."""
        text = self.log(0)
        at = text.rfind("resumed from iteration ")
        if at < 0:
            return None
        loaded = re.match(r"resumed from iteration (\d+)", text[at:])
        step = re.search(r"\[rank 0\] step (\d+) ", text[at:])
        if loaded is None or step is None:
            return None
        return int(loaded.group(1)), int(step.group(1))

    def host_of_pid(self, pid: int) -> str | None:
        """The testbed host a job process runs on: its sshd login's server address (``SSH_CONNECTION``)."""
        try:
            conn = psutil.Process(pid).environ().get("SSH_CONNECTION", "").split()
        except psutil.Error:
            return None
        if len(conn) != 4:
            return None
        for i in range(self.tb.n_hosts):
            if self.tb.address(i) == conn[2]:
                return self.tb.name(i)
        return None

    def job_hosts(self) -> list[str]:
        """The job's host list in the state store (rank order), or the inventory's when none is kept."""
        with Store.open(self.state) as s:
            kept = s.job_hosts(JOB)
        return list(kept) if kept else [self.tb.name(i) for i in self.job_range]

    def audits(self, action: str) -> list[Any]:
        """The store's audit records of ``action``, oldest first."""
        with Store.open(self.state) as s:
            return [a for a in s.audit() if a.action == action]


def step_details(doc: Any) -> dict[str, tuple[str, str]]:
    """``{plan step kind: (status, detail)}`` of an action's JSON document (a playbook step's result)."""
    steps = doc["plan"]["steps"]
    results = doc["results"]
    return {s["kind"]: (r["status"], r["detail"]) for s, r in zip(steps, results, strict=True)}


def dumps(doc: Any) -> str:
    """A document as JSON for an assertion message (bounded)."""
    return json.dumps(doc, default=str)[:4000]
