"""The minimegatron training job on the SSH testbed: it trains, checkpoints, and every injected fault
has its effect (a hung rank stops progress, a slow rank slows the step, a crash ends the rank).

One 8-rank job (tp=2, pp=2, dp=2, 4 ranks per host on node01–node02) is shared by the reversible
faults; the irreversible ones (a P2P recv hang, a crash) start their own job with the fault in
``ROBUSTCTL_FAULT``. Every job is stopped at the end, whatever happens, and no process may survive.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.needs import needed

from .conftest import require_testbed
from .jobrunner import REPO, MiniJob
from .testbed import Testbed

TP, PP, DP, G = 2, 2, 2, 4
DEVICE_S_PER_STEP = 2 * 2 * (0.010 + 0.020)
"""Emulated device time of one rank in one step, slept: 2 layers x 2 micro-batches x (10 ms forward + 20 ms
backward), the job's defaults (``--layers 2 --micro-batches 2 --compute-ms 10``)."""


@pytest.fixture(scope="module")
def job(testbed_session: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniJob]:
    require_testbed()
    if testbed_session.n_hosts < 2:
        needed("needs a testbed of at least 2 hosts (ROBUSTCTL_TESTBED_HOSTS)")
    workdir = tmp_path_factory.mktemp("train-job")
    with MiniJob(testbed_session, workdir, tp=TP, pp=PP, dp=DP, ranks_per_host=G, ckpt_every=2) as j:
        j.start(timeout=120)
        yield j
    assert j.processes() == [], "stop() left processes behind"


@pytest.fixture
def clean_job(job: MiniJob) -> Iterator[MiniJob]:
    """The shared job, training, without faults; faults are removed after the test and training resumes."""
    job.clear_faults()
    job.wait_step(max(job.steps_done().values()) + 1, timeout=60)
    try:
        yield job
    finally:
        job.clear_faults()
        job.wait_step(max(job.steps_done().values()) + 1, timeout=60)


def test_healthy_job_trains_and_checkpoints(clean_job: MiniJob, testbed_session: Testbed) -> None:
    job = clean_job
    prog = job.progress()
    print(
        f"\n8-rank startup: {job.startup_s:.1f}s to step 1 "
        f"(slowest rank init {max(p['init_s'] for p in prog.values()):.1f}s)"
    )
    start = max(job.steps_done().values())
    job.wait_step(start + 5, timeout=60)
    prog = job.progress()
    assert sorted(prog) == list(range(8)) and all(p["phase"] == "train" for p in prog.values())
    losses = [p["loss"] for p in prog.values() if p["loss"] is not None]
    assert len(losses) == TP * DP and all(0 < x < 10 for x in losses), "last stage reports the DP-mean loss"
    assert len({round(x, 6) for x in losses}) == 1, "every last-stage rank sees the same DP-averaged loss"

    # checkpoints: every rank's shard of completed iterations, and Megatron's tracker file
    latest = int((job.ckpt_dir / "latest_checkpointed_iteration.txt").read_text())
    assert latest >= 2 and latest % 2 == 0
    shards = sorted(p.name for p in (job.ckpt_dir / f"iter_{latest:07d}").glob("rank_*.pt"))
    assert shards == [f"rank_{r:05d}.pt" for r in range(8)]

    # every rank: its own environment, launched through its host's sshd, gloo bound to its host address
    pids = job.rank_pids()
    assert sorted(pids) == list(range(8))
    for rank, pid in pids.items():
        p = psutil.Process(pid)
        env = p.environ()
        assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == (str(rank), str(rank % G), "8")
        assert env["MASTER_ADDR"] == testbed_session.address(0)
        assert env["ROBUSTCTL_PROBE_ROOT"] == str(testbed_session.host_root(job.host_of(rank))), "sshd SetEnv"
        sshd = testbed_session.host(job.host_of(rank)).pid
        assert sshd in [a.pid for a in p.parents()], f"rank {rank} does not descend from its host's sshd"
        listening = {c.laddr.ip for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
        assert testbed_session.address(job.host_of(rank)) in listening, (rank, listening)
        kids = p.children()
        assert len(kids) == 2, f"rank {rank}: a data-loader worker and a checkpoint writer, got {kids}"
        for k in kids:
            assert k.environ()["RANK"] == str(rank)


@pytest.mark.parametrize("place", ["compute", "dataloader", "checkpoint"])
def test_hung_rank_stops_progress_until_released(clean_job: MiniJob, place: str) -> None:
    job = clean_job
    rank = {"compute": 5, "dataloader": 2, "checkpoint": 6}[place]
    job.set_faults(f"hang:{place}:rank={rank}")
    stalled = job.wait_stalled(3.0, timeout=30)  # no rank finished a step for 3 s on end
    assert job.steps_done() == stalled, "no rank finishes a step while one is hung"
    assert psutil.Process(job.rank_pids()[rank]).status() != psutil.STATUS_ZOMBIE
    job.clear_faults()
    job.wait_step(max(stalled.values()) + 2, timeout=30)


def next_steps(job: MiniJob, rank: int, n: int, *, timeout: float = 60.0) -> list[dict[str, Any]]:
    """The progress documents of ``rank``'s next ``n`` steps (a step that passes between two reads is
    not counted)."""
    out: list[dict[str, Any]] = []
    last = job.steps_done().get(rank, 0)
    deadline = time.monotonic() + timeout
    while len(out) < n:
        assert time.monotonic() < deadline, f"rank {rank}: {len(out)} of {n} steps\n{job.log_tails([rank])}"
        p = job.progress().get(rank)
        if p is not None and int(p["step"]) > last and p.get("step_s") is not None:
            last = int(p["step"])
            out.append(p)
        time.sleep(0.02)
    return out


def first_step(job: MiniJob, rank: int, ok: Any, *, timeout: float = 30.0) -> dict[str, Any]:
    """The progress document of ``rank``'s first step from now on that satisfies ``ok``."""
    deadline = time.monotonic() + timeout
    while True:
        (p,) = next_steps(job, rank, 1, timeout=timeout)
        if ok(p):
            return p
        assert time.monotonic() < deadline, f"rank {rank}: no such step in {timeout}s, last {p}"


def test_slow_rank_slows_the_step(clean_job: MiniJob) -> None:
    """The fault is seen in what rank 6 reports (``straggle_s``), and its cost in rank 0's steps against
    a floor made of sleeps the fault imposes: a sleep never ends early, so no bound depends on the load."""
    job = clean_job
    factor = 4
    job.set_faults(f"slow:rank=6:factor={factor}")
    first_step(job, 6, lambda p: p["straggle_s"] > 0)  # the fault file is re-read within ~0.5 s
    # Rank 6 sleeps (factor - 1) x its measured compute, itself at least the emulated device time.
    injected = (factor - 1) * DEVICE_S_PER_STEP
    slowed = next_steps(job, 6, 3)
    assert all(p["straggle_s"] >= injected for p in slowed), (injected, slowed)
    # Rank 0 waits for rank 6 in every step (its DP all-reduce peer, rank 2, takes rank 6's gradients):
    # its step spans rank 6's sleeps, 4 x DEVICE_S_PER_STEP = 480 ms, plus rank 2's own 60 ms around
    # them, less how much later rank 0 started the step than rank 2 (both leave the same all-reduce and
    # then do the same work). The floor asserted is 360 ms: 180 ms for that skew, in 3 of 5 steps.
    slow = statistics.median(float(p["step_s"]) for p in next_steps(job, 0, 5))
    print(f"\nrank 0's step with rank 6 slowed {factor}x: {slow:.3f}s (floor {injected:.3f}s)")
    assert slow >= injected, (slow, injected)
    job.clear_faults()
    first_step(job, 6, lambda p: p["straggle_s"] == 0)
    assert [p["straggle_s"] for p in next_steps(job, 6, 3)] == [0, 0, 0]


def test_p2p_recv_hang_in_last_stage(testbed: Testbed, tmp_path: Path) -> None:
    """ByteRobust Fig. 7's cause: a last-stage rank stuck in a P2P recv; the whole job stops."""
    hung = 7  # tp=1, dp=1, pp=1: the last stage
    with MiniJob(
        testbed,
        tmp_path,
        tp=TP,
        pp=PP,
        dp=DP,
        ranks_per_host=G,
        ckpt_every=0,
        env_faults=f"hang:p2p_recv:rank={hung}:step=3",
    ) as j:
        j.start(timeout=120)
        stalled = j.wait_stalled(2.0, timeout=30)
        assert max(stalled.values()) == 2, stalled  # step 3 never completes anywhere
        assert j.exit_status(hung) is None and psutil.Process(j.rank_pids()[hung]).is_running()
    assert j.processes() == []


def test_crash_ends_the_rank(testbed: Testbed, tmp_path: Path) -> None:
    with MiniJob(
        testbed,
        tmp_path,
        tp=TP,
        pp=PP,
        dp=DP,
        ranks_per_host=G,
        ckpt_every=0,
        env_faults="crash:rank=3:step=3",
    ) as j:
        j.launch()
        assert j.wait_exit(3, timeout=90) == 1
        assert "injected crash" in j.log(3) and "RuntimeError" in j.log(3)
        assert max(j.steps_done().values()) == 2
    assert j.processes() == []


def test_crash_by_signal_through_the_fault_file(testbed: Testbed, tmp_path: Path) -> None:
    """A rank killed outright (SIGKILL: no traceback, like a hardware death) ends with status -9."""
    with MiniJob(testbed, tmp_path, tp=2, pp=1, dp=1, ranks_per_host=2, ckpt_every=0) as j:
        j.start(timeout=60)
        j.set_faults("crash:rank=1:signal=KILL")
        status = j.wait_exit(1, timeout=30)
        assert status == -1, status  # sshd reports a death by signal as exit-signal: paramiko gives -1
        assert "injected crash" in j.log(1) and "Traceback" not in j.log(1)
    assert j.processes() == []


def test_ranks_exit_when_the_launcher_goes_away(testbed: Testbed, tmp_path: Path) -> None:
    """The SSH channels close (the test process died): ranks see EOF on stdin and exit, workers follow."""
    j = MiniJob(testbed, tmp_path, tp=2, pp=1, dp=1, ranks_per_host=2, ckpt_every=2)
    try:
        j.start(timeout=60)
        procs = j.processes()
        assert len(procs) == 6  # 2 ranks, each with a data-loader worker and a checkpoint writer
        j.drop_connections()
        _, alive = psutil.wait_procs(procs, timeout=15)
        assert alive == [], [p.cmdline()[:3] for p in alive]
        assert "launcher gone" in j.log(0)
    finally:
        j.stop()
    assert j.processes() == []


def _job_module() -> Any:
    """``tests/jobs/minimegatron.py`` imported by path (``tests`` is not a package on sys.path here)."""
    name = "_minimegatron_under_test"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "jobs" / "minimegatron.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_fault_specs() -> None:
    mod = _job_module()
    Fault, parse_faults = mod.Fault, mod.parse_faults

    assert parse_faults("hang:compute:rank=5") == [Fault("hang", "compute", frozenset({5}))]
    assert parse_faults("slow:rank=1")[0].factor == 3.0
    assert parse_faults("# comment\nslow:ranks=1,2:factor=2.5;crash:rank=3:step=4:signal=KILL") == [
        Fault("slow", None, frozenset({1, 2}), factor=2.5),
        Fault("crash", None, frozenset({3}), step=4, signal="KILL"),
    ]
    f = parse_faults("hang:dataloader:step=3")[0]
    assert f.applies(0, 3) and f.applies(7, None) and not f.applies(0, 2)
    for bad in ("hang", "hang:gpu", "slow:factor=0.5", "explode", "crash:signal=NOPE", "hang:compute:when=1"):
        with pytest.raises(ValueError):
            parse_faults(bad)
