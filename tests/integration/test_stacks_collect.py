"""``collect_stacks`` on a real running job: 16 minimegatron ranks (tp=2, pp=2, dp=4) on 4 testbed hosts.

The job is the run's ``stacks_job`` (conftest.py; started once, ~15–25 s on 2 cores), shared with
``test_stacks_cli.py``. Each test gets it training with no fault (``training_stacks_job``); faults a
test injects are removed after it.
Real sshd, real py-spy, real torch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from robustctl.inventory import Job, load_inventory
from robustctl.models import Outcome, Status
from robustctl.stacks.collect import CollectSettings, StackCollection, collect_stacks
from robustctl.stacks.model import ProcessDump, ProcessRole
from robustctl.transport.pool import TransportPool
from tests.support.needs import needed

from .jobrunner import MiniJob
from .testbed import Testbed

TP, PP, DP, G = 2, 2, 4, 4
COMM = ("all_reduce", "recv", "send", "barrier", "broadcast")


@pytest.fixture
def job(training_stacks_job: MiniJob, testbed_session: Testbed) -> MiniJob:
    """The run's 16-rank job (``stacks_job``, conftest.py), training, on a testbed with a fifth host."""
    if testbed_session.n_hosts < 5:
        needed("needs a testbed of at least 5 hosts (ROBUSTCTL_TESTBED_HOSTS)")
    return training_stacks_job


@pytest.fixture(scope="module")
def inv_job(stacks_job: MiniJob, tmp_path_factory: pytest.TempPathFactory) -> Job:
    path = stacks_job.write_inventory(tmp_path_factory.mktemp("stacks-inv") / "inventory.yaml")
    return load_inventory(path).job("mini")


@pytest.fixture(scope="module")
def pool() -> Iterator[TransportPool]:
    p = TransportPool()
    try:
        yield p
    finally:
        p.close()


def functions(d: ProcessDump) -> list[str]:
    """Function names of the main thread, innermost first (qualified names cut to the last part)."""
    t = d.main_thread
    assert t is not None, f"rank {d.rank} pid {d.pid}: no thread ({d.error})"
    return [f.function.rsplit(".", 1)[-1] for f in t.frames]


def mains_by_rank(c: StackCollection) -> dict[int, ProcessDump]:
    out: dict[int, ProcessDump] = {}
    for d in c.mains:
        assert d.rank is not None
        assert d.rank not in out, f"two main processes for rank {d.rank}"
        out[d.rank] = d
    return out


def in_comm(fns: Sequence[str]) -> bool:
    return any(f in COMM for f in fns[:3])


def test_one_main_dump_per_rank_with_children(job: MiniJob, inv_job: Job, pool: TransportPool) -> None:
    seen: list[str] = []
    c = collect_stacks(inv_job, pool, progress=lambda h: seen.append(h.host))
    assert sorted(seen) == [f"node0{i}" for i in range(1, 5)]
    assert c.status is Status.OK and c.missing_ranks == () and c.expected_ranks == tuple(range(16))
    assert [(h.host, h.outcome, h.status, h.error) for h in c.hosts] == [
        (f"node0{i}", Outcome.OK, Status.OK, None) for i in range(1, 5)
    ]
    mains = mains_by_rank(c)
    pids = job.rank_pids()
    assert sorted(mains) == list(range(16))
    for rank, d in mains.items():
        assert d.host == job.host_name(rank), rank
        assert d.pid == pids[rank] and d.readable and d.state in ("R", "S", "D"), (rank, d.error)
        assert d.source == f"{d.host}:{d.pid}" and d.cmdline and job.marker in d.cmdline
        assert "main" in functions(d) and "<module>" in functions(d)
    children = [d for d in c.dumps if d.role is not ProcessRole.MAIN]
    for rank, main in mains.items():
        mine = [d for d in children if d.parent_pid == main.pid]
        roles = sorted(d.role.value for d in mine)
        assert roles == ["checkpoint", "dataloader"], (rank, roles)
        for d in mine:
            assert (d.rank, d.host, d.readable) == (rank, main.host, True)
        loader = next(d for d in mine if d.role is ProcessRole.DATALOADER)
        assert "_worker_loop" in functions(loader) and loader.comm == "pt_data_worker"
    assert len(c.dumps) == 48
    assert all(h.py_spy_version for h in c.hosts)
    print(f"\ncollect_stacks: 16 ranks + 32 children on 4 hosts in {c.elapsed_s:.2f}s")


def test_hung_in_compute_rank_shows_compute_frame(job: MiniJob, inv_job: Job, pool: TransportPool) -> None:
    hung = job.rank_at(tp=1, dp=2, pp=0)  # rank 5, on node02
    job.set_faults(f"hang:compute:rank={hung}")
    job.wait_stalled(2.0, timeout=30)
    c = collect_stacks(inv_job, pool)
    mains = mains_by_rank(c)
    assert sorted(mains) == list(range(16))
    fns = functions(mains[hung])
    assert "_compute_hang" in fns and "forward" in fns and not in_comm(fns), fns
    assert mains[hung].host == "node02"
    for rank, d in mains.items():
        if rank != hung:
            assert in_comm(functions(d)), (rank, functions(d)[:6])
            assert "_compute_hang" not in functions(d)
    # Its TP peer waits in the TP all-reduce of the same layer; its PP peer downstream in the recv.
    tp_peer = job.rank_at(tp=0, dp=2, pp=0)
    assert "_ReduceFromTP" in [f.function.split(".")[0] for f in mains[tp_peer].main_thread.frames]  # type: ignore[union-attr]
    assert functions(mains[job.rank_at(tp=1, dp=2, pp=1)])[0] == "recv"


def test_dataloader_worker_hang_seen_through_the_child(
    job: MiniJob, inv_job: Job, pool: TransportPool
) -> None:
    rank = 10
    job.set_faults(f"hang:dataloader:rank={rank}")
    job.wait_stalled(2.0, timeout=30)
    c = collect_stacks(inv_job, pool, hosts=[inv_job.hosts[rank // G]])
    assert c.expected_ranks == (8, 9, 10, 11) and c.missing_ranks == ()
    main = mains_by_rank(c)[rank]
    assert "_next_data" in functions(main), functions(main)
    (worker,) = [d for d in c.dumps if d.parent_pid == main.pid and d.role is ProcessRole.DATALOADER]
    assert "_dataloader_hang" in functions(worker) and "__getitem__" in functions(worker)
    others = [d for d in c.dumps if d.role is ProcessRole.DATALOADER and d.rank != rank]
    assert others and all("_dataloader_hang" not in functions(d) for d in others)


def test_unreadable_process_is_reported(job: MiniJob, inv_job: Job, pool: TransportPool) -> None:
    """A process that matches the job's pattern with a rank's environment but is not Python: py-spy
    cannot read it, and it comes back as a ProcessDump with ``error`` (evidence), not a failure."""
    env = dict(os.environ, RANK="3", LOCAL_RANK="3")
    argv0 = f"python -m tests.jobs.minimegatron --job-id {job.marker}"
    fake = subprocess.Popen(
        ["bash", "-c", f'exec -a "{argv0}" sleep 300'],
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10  # until bash has exec'd the sleep under the job's command line
        while Path(f"/proc/{fake.pid}/cmdline").read_bytes().split(b"\0")[0] != argv0.encode():
            assert time.monotonic() < deadline, Path(f"/proc/{fake.pid}/cmdline").read_bytes()
            time.sleep(0.02)
        c = collect_stacks(inv_job, pool, hosts=[inv_job.hosts[0]])
        bad = [d for d in c.dumps if d.pid == fake.pid]
        assert len(bad) == 1, [(d.pid, d.rank, d.error) for d in c.dumps]
        d = bad[0]
        assert (d.rank, d.host, d.role, d.threads, d.readable) == (3, "node01", ProcessRole.MAIN, (), False)
        assert d.error and "\n" not in d.error
        assert c.hosts[0].status is Status.OK and c.hosts[0].unreadable == 1
        assert c.missing_ranks == ()
        real = [x for x in c.mains if x.rank == 3 and x.pid != fake.pid]
        assert len(real) == 1 and real[0].readable
    finally:
        os.killpg(fake.pid, signal.SIGKILL)
        fake.wait(timeout=10)


def test_unreachable_host_is_unknown_not_a_traceback(job: MiniJob, inv_job: Job, testbed: Testbed) -> None:
    testbed.freeze_host(1)  # sshd SIGSTOPped: TCP connects, no banner; the running ranks are untouched
    t0 = time.monotonic()
    fresh = TransportPool()  # the module's pool holds a live connection to node02
    try:
        c = collect_stacks(inv_job, fresh, settings=CollectSettings(retries=0, host_timeout_s=20))
    finally:
        fresh.close()
    assert time.monotonic() - t0 < 25
    by_host = {h.host: h for h in c.hosts}
    bad = by_host["node02"]
    assert bad.outcome in (Outcome.UNREACHABLE, Outcome.TIMED_OUT) and bad.status is Status.UNKNOWN
    assert bad.error and bad.missing_ranks == (4, 5, 6, 7)
    assert c.missing_ranks == (4, 5, 6, 7) and c.status is Status.UNKNOWN
    assert all(by_host[h].status is Status.OK for h in ("node01", "node03", "node04"))
    assert sorted(d.rank for d in c.mains if d.rank is not None) == [
        r for r in range(16) if r not in (4, 5, 6, 7)
    ]


def test_ranks_not_found_on_a_host_are_unknown(
    job: MiniJob, pool: TransportPool, testbed: Testbed, tmp_path: Path
) -> None:
    """The inventory says 5 hosts (dp=5) but only 4 run ranks: the fifth is UNKNOWN, its ranks missing."""
    jobs = job.inventory_jobs()
    entry = dict(jobs["mini"], hosts=testbed.hostlist(range(5)), layout={"tp": TP, "pp": PP, "dp": 5})
    inv = load_inventory(job.write_inventory(tmp_path / "inv.yaml", jobs={"wide": entry})).job("wide")
    c = collect_stacks(inv, pool)
    by_host = {h.host: h for h in c.hosts}
    assert by_host["node05"].status is Status.UNKNOWN and by_host["node05"].outcome is Outcome.OK
    assert "16-19 not found" in (by_host["node05"].error or "")
    assert c.missing_ranks == (16, 17, 18, 19)
    assert sorted({d.rank for d in c.mains}) == list(range(16))


def test_blocking_and_timeouts_are_passed_through(job: MiniJob, inv_job: Job, pool: TransportPool) -> None:
    """--blocking dumps work on the live job too (py-spy pauses each process briefly)."""
    c = collect_stacks(
        inv_job,
        pool,
        hosts=[inv_job.hosts[3]],
        settings=CollectSettings(nonblocking=False, per_process_timeout_s=5, probe_timeout_s=20),
    )
    assert c.missing_ranks == () and all(d.readable for d in c.dumps), [d.error for d in c.dumps]
