"""``robustctl stacks`` through the in-job agent's debug server, on the real 16-rank job.

The job is the run's ``stacks_job`` (conftest.py: minimegatron, tp=2, pp=2, dp=4, 4 ranks on each of
node01-node04), whose ranks run the agent (:mod:`robustctl.agent`): each serves torch's
``_WorkerServer`` on ``PROGRESS/debug/rankRRRRR.sock``. Real sshd, real torch, real py-spy (on the
ranks' PATH: the debug server's ``pyspy_dump`` runs it inside the rank).

- the CLI names a rank hung in compute with its evidence from the debug server, while a rank whose
  socket is gone is read by py-spy in the same run (mixed sources, the fallback reason reported);
- with the controller's py-spy denied by the kernel (the real py-spy run as ``nobody`` against the
  root-owned ranks: EPERM), the agent path still names the hung rank, and py-spy alone names nobody.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from robustctl.inventory import Job, load_inventory
from robustctl.report.stacks import render_live_stacks
from robustctl.stacks.collect import DEBUG_SERVER, PY_SPY, CollectSettings
from robustctl.stacks.live import stacks_hang
from robustctl.transport.pool import TransportPool

from .jobrunner import MiniJob

UNPRIVILEGED = 65534
"""The uid and gid py-spy runs as in the ptrace-denied test (``nobody``): the job's processes belong
to root, so the kernel refuses py-spy's ptrace and /proc/PID/mem reads (EPERM), as on a host whose
controller may not trace the training user's processes."""


def _denied_py_spy(tmp_path: Path) -> Path:
    """A py-spy that runs the real one as :data:`UNPRIVILEGED` (``setpriv``, util-linux): every
    attach to a rank is denied by the kernel."""
    real = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    wrapper = tmp_path / "py-spy"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'exec setpriv --reuid={UNPRIVILEGED} --regid={UNPRIVILEGED} --clear-groups {shlex.quote(real)} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


@pytest.fixture(scope="module")
def inventory(stacks_job: MiniJob, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stacks_job.write_inventory(tmp_path_factory.mktemp("stacks-agent-inv") / "inventory.yaml")


@pytest.fixture(scope="module")
def inv_job(inventory: Path) -> Job:
    return load_inventory(inventory).job("mini")


@pytest.fixture(scope="module")
def pool() -> Iterator[TransportPool]:
    p = TransportPool()
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def hung(training_stacks_job: MiniJob) -> tuple[MiniJob, int]:
    """The job with rank 5 (tp=1, dp=2, pp=0, on node02) hung in compute, the rest waiting on it."""
    job = training_stacks_job
    rank = job.rank_at(tp=1, dp=2, pp=0)
    job.set_faults(f"hang:compute:rank={rank}")
    job.wait_stalled(2.0, timeout=60)
    return job, rank


def robustctl(*args: str, json_out: bool = True) -> tuple[int, Any, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "robustctl", *args, "--no-record", *(["--json"] if json_out else [])],
        capture_output=True,
        text=True,
        timeout=240,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": "/nonexistent", "COLUMNS": "200"},
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout) if json_out else proc.stdout, proc.stderr


def by_rank(sources: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {s["rank"]: s for s in sources if s["main"]}


def test_cli_names_the_hung_rank_from_the_debug_server_beside_a_rank_read_by_py_spy(
    hung: tuple[MiniJob, int], inventory: Path
) -> None:
    job, rank = hung
    plain = 6  # same host as the hung rank; its socket is moved aside: nothing listens at its path
    sock = job.progress_dir / "debug" / f"rank{plain:05d}.sock"
    aside = sock.with_name(sock.name + ".aside")
    assert stat.S_ISSOCK(sock.lstat().st_mode), "the ranks run the agent's debug server"
    os.rename(sock, aside)
    try:
        code, doc, err = robustctl("stacks", "-i", str(inventory), "--job", "mini", "--samples", "1")
    finally:
        os.rename(aside, sock)
    assert code == 2, err
    assert rank in doc["likely_culprits"]
    culprit = next(s for s in doc["suspects"] if s["rank"] == rank)
    assert culprit["category"] == "compute" and culprit["host"] == job.host_name(rank)
    sources = by_rank(doc["collection"][-1]["sources"])
    assert sorted(sources) == list(range(16))
    assert sources[rank]["source"] == DEBUG_SERVER and sources[rank]["stacks_from"] == "pyspy_dump"
    assert sources[rank]["debug_socket"].endswith(f"rank{rank:05d}.sock")
    assert (sources[plain]["source"], sources[plain]["fallback_reason"]) == (PY_SPY, "no socket")
    assert all(s["source"] == DEBUG_SERVER for r, s in sources.items() if r != plain)
    ev = doc["evidence"]
    assert (ev["debug_server"], ev["py_spy"], ev["fallback"]) == (15, 1, {"no socket": 1})
    assert ev["summary"] == "evidence: 15 ranks via the debug server, 1 via py-spy (no socket: 1)"
    assert ev["flight_recorder_traces"] == 15
    # rank 6 has no Flight Recorder trace: the others' are not joined (the analysis would name it missing)
    assert doc["flight_recorder"] is None and doc["agreement"] is None


def test_ptrace_denied_to_py_spy_the_agent_still_names_the_rank(
    hung: tuple[MiniJob, int], inv_job: Job, pool: TransportPool, tmp_path: Path
) -> None:
    _, rank = hung
    fake = _denied_py_spy(tmp_path)
    denied = CollectSettings(py_spy=str(fake))
    live = stacks_hang(inv_job, pool, settings=denied, samples=1)
    assert rank in live.report.likely_culprits, live.report.summary
    col = live.collections[-1]
    assert col.source_counts() == {DEBUG_SERVER: 16, PY_SPY: 0}
    children = [d for d in col.dumps if d.role.value != "main"]
    assert children and all(d.error and "Permission Denied" in d.error for d in children)
    out = io.StringIO()
    render_live_stacks(live.report, live.collections, Console(file=out, width=200, no_color=True))
    assert "evidence: 16 ranks via the debug server, 0 via py-spy" in out.getvalue()
    if live.report.flight_recorder is not None:  # the ranks' rings recorded the collectives
        assert live.report.agreement is not None and rank in live.report.agreement.agree

    # py-spy alone, denied: no rank can be read, nobody is named.
    alone = stacks_hang(
        inv_job, pool, settings=CollectSettings(py_spy=str(fake), debug_server=False), samples=1
    )
    assert alone.report.likely_culprits == () and alone.report.readable == 0
    assert all(m.error and "Permission Denied" in m.error for m in alone.collections[-1].mains)
