"""minimegatron ``--load``: a job resumed from a checkpoint trains on exactly as if it had never stopped.

Two ranks (tp=1, pp=2, dp=1) run as local processes, torchrun-style. A run of 4 steps saving every 2
is the reference; a second run in a copy of its iteration 2 resumes with ``--load 2`` (and with
``--load latest``) and must write an iteration 4 whose parameters equal the reference's bit for bit
(same data, same updates). A missing shard ends the rank with exit 1 and a line naming the file.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.slow, pytest.mark.external]  # torch processes of the test job

REPO = Path(__file__).resolve().parents[2]
ARGS = ["--tp", "1", "--pp", "2", "--dp", "1", "--ckpt-every", "2", "--ckpt-mode", "sync"]
FAST = ["--idle-ms", "0", "--compute-ms", "0", "--num-workers", "0", "--pg-timeout-s", "60"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_job(ckpt: Path, *extra: str, world: int = 2) -> list[subprocess.CompletedProcess[str]]:
    """Every rank of one job, to the end (each at most 60 s)."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "PYTHONPATH": str(REPO),
        }
        env.pop("ROBUSTCTL_FAULT", None)
        argv = [sys.executable, "-m", "tests.jobs.minimegatron", "--ckpt-dir", str(ckpt), *extra]
        procs.append(
            subprocess.Popen(
                argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    out = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
                q.communicate()
            raise
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def params(path: Path) -> dict[str, object]:
    state = torch.load(path, map_location="cpu", weights_only=True)
    return dict(state["model"])


def test_resume_continues_bit_for_bit(tmp_path: Path) -> None:
    ref = tmp_path / "ref"
    done = run_job(ref, *ARGS, *FAST, "--steps", "4")
    assert [p.returncode for p in done] == [0, 0], [p.stderr[-500:] for p in done]
    assert (ref / "latest_checkpointed_iteration.txt").read_text().strip() == "4"

    for which in ("2", "latest"):
        resumed = tmp_path / f"resumed-{which}"
        shutil.copytree(ref / "iter_0000002", resumed / "iter_0000002")
        (resumed / "latest_checkpointed_iteration.txt").write_text("2\n")
        out = run_job(resumed, *ARGS, *FAST, "--steps", "4", "--load", which)
        assert [p.returncode for p in out] == [0, 0], [p.stderr[-500:] for p in out]
        assert "resumed from iteration 2" in out[0].stdout
        assert not (resumed / "iter_0000003").exists()
        assert (resumed / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
        for rank in (0, 1):
            a = params(ref / "iter_0000004" / f"rank_{rank:05d}.pt")
            b = params(resumed / "iter_0000004" / f"rank_{rank:05d}.pt")
            assert a.keys() == b.keys()
            assert all(torch.equal(a[k], b[k]) for k in a), f"rank {rank} diverged after resuming"
            start = params(ref / "iter_0000002" / f"rank_{rank:05d}.pt")
            assert not all(torch.equal(start[k], b[k]) for k in a), "the resumed run trained"


def test_missing_shard_is_exit_1_naming_it(tmp_path: Path) -> None:
    (tmp_path / "iter_0000002").mkdir()
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2\n")
    one = ["--tp", "1", "--pp", "1", "--dp", "1", *FAST, "--steps", "3", "--load", "latest"]
    (res,) = run_job(tmp_path, *one, world=1)
    assert res.returncode == 1
    assert f"no checkpoint shard {tmp_path}/iter_0000002/rank_00000.pt" in res.stderr
    assert "Traceback" not in res.stderr


def test_load_none_is_a_fresh_start() -> None:
    """``--load none`` (a launcher's ``{ckpt_iter}`` when restart picked no checkpoint) loads nothing."""
    from tests.jobs.minimegatron import parse_args

    assert parse_args(["--load", "none"]).load is None
    assert parse_args(["--load", "7", "--ckpt-dir", "/ckpt"]).load == "7"
    with pytest.raises(SystemExit):
        parse_args(["--load", "seven", "--ckpt-dir", "/ckpt"])
