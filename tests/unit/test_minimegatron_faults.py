"""The faults the test-bed jobs can be given for the watcher (issue 22 section 5): a NaN loss from step N
on one rank, a loss spike, an exit with a CUDA error's text, and what a rank does when a peer is lost.

minimegatron runs as real torchrun-style processes on gloo (world size 1 or 2, as in
``test_minimegatron_resume.py``); each fault must show at the step asked both in the rank's heartbeat
(``--progress-dir``, strict JSON) and in its log (Megatron's ``iteration N/ M | ... | lm loss: X |``
line). A fault file spec ``hang:compute:...:step=K`` holds a rank inside step K, so the heartbeat of
step K-1 can be read before the job goes on. ``tests/jobs/heartbeat.py`` (stdlib only) carries the same
loss faults and CUDA exit as flags.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from robustctl.models import NON_FINITE_JSON

REPO = Path(__file__).resolve().parents[2]
FAST = ["--idle-ms", "0", "--compute-ms", "0", "--num-workers", "0", "--pg-timeout-s", "60"]
LOG_LINE = re.compile(
    r"iteration\s+(\d+)/\s*\d+ \|.*? lm loss: (\S+) \|.*? number of nan iterations:\s+(\d+) \|"
)
CUDA_TEXT = (
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace"
    " below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
)
DEADLINE_S = 60.0
"""Longest wait for a job to reach a step or to end (it takes a few seconds on an idle machine)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def strict_json(text: str) -> Any:
    """``text`` parsed as RFC 8259 JSON: a ``NaN``/``Infinity`` token is an error."""

    def refuse(token: str) -> None:
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


@dataclass
class Job:
    """The rank processes of one minimegatron job, each logging stdout and stderr to one file."""

    dir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def heartbeat(self, rank: int) -> dict[str, Any] | None:
        try:
            text = (self.dir / "progress" / f"rank{rank:05d}.json").read_text()
        except FileNotFoundError:
            return None
        doc = strict_json(text)
        assert isinstance(doc, dict)
        return doc

    def wait_heartbeat(self, rank: int, ok: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Poll ``rank``'s heartbeat until ``ok`` holds (fails when a rank exits or the deadline passes)."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            doc = self.heartbeat(rank)
            if doc is not None and ok(doc):
                return doc
            dead = [r for r, p in enumerate(self.procs) if p.poll() is not None]
            assert not dead, f"rank(s) {dead} exited: {self.log(dead[0])[-2000:]}"
            assert time.monotonic() < deadline, f"rank {rank} heartbeat stayed {doc}"
            time.sleep(0.05)

    def wait(self) -> list[int]:
        """Every rank's exit status (each ends within the deadline, or the job is killed and fails)."""
        try:
            return [p.wait(timeout=DEADLINE_S) for p in self.procs]
        finally:
            self.kill()

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    def log(self, rank: int) -> str:
        return (self.dir / f"rank{rank}.log").read_text(errors="replace")

    def losses(self, rank: int) -> dict[int, str]:
        """``{step: lm loss as printed}`` of ``rank``'s training-log lines."""
        return {int(m[1]): m[2] for m in LOG_LINE.finditer(self.log(rank))}

    def set_faults(self, *specs: str) -> None:
        tmp = self.dir / ".faults.tmp"
        tmp.write_text("".join(f"{s}\n" for s in specs))
        os.replace(tmp, self.dir / "faults")


def start_job(workdir: Path, *argv: str, world: int, env_fault: str = "", file_faults: str = "") -> Job:
    """Start every rank of a minimegatron job in ``workdir`` (``--log-every 1``, progress, fault file)."""
    (workdir / "progress").mkdir(parents=True)
    (workdir / "faults").write_text(file_faults)
    job = Job(workdir)
    port = free_port()
    for rank in range(world):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "PYTHONPATH": str(REPO),
            "ROBUSTCTL_FAULT": env_fault,
        }
        cmd = [sys.executable, "-m", "tests.jobs.minimegatron", *FAST, "--log-every", "1"]
        cmd += ["--progress-dir", str(workdir / "progress"), "--fault-file", str(workdir / "faults"), *argv]
        with open(workdir / f"rank{rank}.log", "wb") as log:
            job.procs.append(subprocess.Popen(cmd, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT))
    return job


# --------------------------------------------------------------------------------------------------
# minimegatron
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.external
def test_fault_specs_of_the_new_kinds() -> None:
    """The spec grammar of the new faults: defaults, step windows, and one-line errors."""
    pytest.importorskip("torch")
    from tests.jobs import heartbeat, minimegatron
    from tests.jobs.minimegatron import Fault, parse_faults

    spike, nan, nan_loss, cuda = parse_faults(
        "spike:rank=3:step=20; nan:rank=1:step=5\nnan:loss:ranks=0,1; crash:cuda:rank=2:error=ecc"
    )
    assert spike == Fault("spike", None, frozenset({3}), 20, factor=10.0, steps=3)
    assert [spike.applies(3, s) for s in (19, 20, 22, 23)] == [False, True, True, False]
    assert not spike.applies(2, 20)
    assert nan == Fault("nan", "activation", frozenset({1}), 5) and nan.applies(1, 10**6)
    assert nan_loss.where == "loss" and nan_loss.applies(0, 1) and not nan_loss.applies(2, 1)
    assert cuda == Fault("crash", "cuda", frozenset({2}), error="ecc")
    assert parse_faults("crash:cuda")[0].error == "illegal-address"
    (window,) = parse_faults("slow:rank=1:step=4:steps=2:factor=2")
    assert [window.applies(1, s) for s in (3, 4, 5, 6)] == [False, True, True, False]
    assert parse_faults("crash:rank=3:step=4:signal=KILL") == [
        Fault("crash", None, frozenset({3}), step=4, signal="KILL")
    ]  # the kinds that were there parse as before
    for bad, says in (
        ("spike:rank=1", "needs step=N"),
        ("spike:step=3:factor=0", "factor must be > 0"),
        ("spike:step=3:factor=nan", "finite"),
        ("slow:factor=inf", "finite"),
        ("nan:grad", "nan's place"),
        ("nan:step=2:steps=0", "K >= 1"),
        ("nan:steps=2", "step=N to count from"),
        ("crash:gpu", "cuda or none"),
        ("crash:cuda:error=oops", "illegal-address, launch-failure, ecc, assert"),
        ("crash:cuda:signal=KILL", "no signal"),
        ("crash:error=ecc", "crash:cuda only"),
        ("spike:compute:step=1", "takes no place"),
        ("explode", "hang, slow, crash, nan, spike"),
    ):
        with pytest.raises(ValueError, match=re.escape(says)) as err:
            parse_faults(bad)
        assert repr(bad) in str(err.value) and "\n" not in str(err.value)
    # the heartbeat's spelling of a loss that is not finite is robustctl's, in both jobs
    assert minimegatron.NON_FINITE_JSON == heartbeat.NON_FINITE_JSON == NON_FINITE_JSON
    text = "CUDA error: " + minimegatron.CUDA_ERRORS["illegal-address"] + minimegatron.CUDA_ERROR_SUFFIX
    assert text == heartbeat.CUDA_ILLEGAL_ADDRESS
    assert [minimegatron.loss_json(x) for x in (1.5, math.nan, math.inf, -math.inf, None)] == [
        1.5, "NaN", "Infinity", "-Infinity", None,
    ]  # fmt: skip
    assert [minimegatron.format_loss(x) for x in (1.5, math.nan, -math.inf)] == [
        "1.500000E+00",
        "nan",
        "-inf",
    ]


@pytest.mark.slow
@pytest.mark.external
def test_a_bad_fault_option_is_exit_2_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``--fault`` spec that does not parse ends the rank before any training, in one line."""
    pytest.importorskip("torch")
    from tests.jobs.minimegatron import main

    for var, value in (
        ("RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "1"),
    ):
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("ROBUSTCTL_FAULT", "slow:rank=0")
    assert main(["--fault", "crash:cuda:rank=0", "--fault", "spike:rank=0"]) == 2
    says = "minimegatron: --fault: fault 'spike:rank=0': a spike needs step=N (the step it starts at)"
    assert capsys.readouterr().err == says + "\n"


@pytest.mark.slow
@pytest.mark.external
def test_fault_specs_of_the_desync_hangs() -> None:
    """``hang:skip_collective`` and ``hang:wrong_size``: the grammar of the other hangs, step windows
    included, and one-line errors naming the spec (the place list names both)."""
    pytest.importorskip("torch")
    from tests.jobs.minimegatron import HANG_PLACES, Fault, parse_faults

    skip, wrong = parse_faults("hang:skip_collective:rank=0:step=5\nhang:wrong_size:rank=3")
    assert skip == Fault("hang", "skip_collective", frozenset({0}), 5)
    assert [skip.applies(0, s) for s in (4, 5, 50)] == [False, True, True] and not skip.applies(1, 5)
    assert wrong == Fault("hang", "wrong_size", frozenset({3})) and wrong.applies(3, 1)
    (once,) = parse_faults("hang:skip_collective:ranks=2,6:step=3:steps=1")
    assert [once.applies(6, s) for s in (2, 3, 4)] == [False, True, False] and once.ranks == {2, 6}
    assert {"skip_collective", "wrong_size"} <= set(HANG_PLACES)
    for bad, says in (
        ("hang:skip_collectives:rank=1", "hang needs a place, one of compute, p2p_recv, dataloader, "
         "checkpoint, skip_collective, wrong_size"),
        ("hang:wrong_size:rank=x", "invalid literal for int()"),
        ("hang:wrong_size:step=2:steps=0", "K >= 1"),
        ("hang:skip_collective:steps=2", "step=N to count from"),
        ("hang:skip_collective:rank=1:numel=3", "unknown key 'numel'"),
        ("hang:skip_collective:wrong_size", "unexpected 'wrong_size'"),
        ("hang:wrong_size:mode=spin", "mode must be sleep or busy"),
    ):  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(says)) as err:
            parse_faults(bad)
        assert repr(bad) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
@pytest.mark.external
def test_a_bad_desync_hang_option_is_exit_2_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad ``skip_collective``/``wrong_size`` spec in ``--fault`` or ``ROBUSTCTL_FAULT`` ends the rank
    before any training with exit status 2 and one line naming it; so does ``--flight-recorder``
    without ``--progress-dir`` (the agent turns it on) or below 0."""
    pytest.importorskip("torch")
    from tests.jobs.minimegatron import main

    for var, value in (
        ("RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "1"),
    ):
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("ROBUSTCTL_FAULT", "hang:skip_collective:rank=0:step=2")
    assert main(["--fault", "hang:wrong_size:rank=0:step=x"]) == 2
    says = "minimegatron: --fault: fault 'hang:wrong_size:rank=0:step=x': invalid literal for int() with base 10: 'x'"
    assert capsys.readouterr().err == says + "\n"
    monkeypatch.setenv("ROBUSTCTL_FAULT", "hang:skip_collective:ranks=0,")
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("minimegatron: ROBUSTCTL_FAULT: fault 'hang:skip_collective:ranks=0,': ")
    assert err.count("\n") == 1
    monkeypatch.delenv("ROBUSTCTL_FAULT")
    for argv, says in (
        (["--flight-recorder", "64"], "--flight-recorder needs --progress-dir"),
        (["--flight-recorder", "-1", "--progress-dir", "/nonexistent"], "--flight-recorder must be >= 0"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        assert f"error: {says}" in capsys.readouterr().err.splitlines()[-1]


@pytest.mark.slow
@pytest.mark.external
def test_spike_then_nan_loss_at_the_steps_asked(tmp_path: Path) -> None:
    """World size 1: a x100 spike at steps 2-3 (environment), a NaN loss from step 5 (``--fault``).

    A run without faults beside it gives the reference losses: the spiked steps print 100 x the
    reference, the spike leaves training as it was (step 4 equals the reference), and step 5 on is
    ``nan`` in the log and ``"NaN"`` in the heartbeat, which stays strict JSON.
    """
    pytest.importorskip("torch")
    steps = ["--steps", "5"]
    ref = start_job(tmp_path / "ref", *steps, world=1)
    job = start_job(
        tmp_path / "faulty",
        *steps,
        "--fault",
        "nan:loss:rank=0:step=5",
        world=1,
        env_fault="spike:rank=0:step=2:factor=100:steps=2",
        file_faults="hang:compute:rank=0:step=3\n",  # hold the job in step 3: read step 2's heartbeat
    )
    try:
        at2 = job.wait_heartbeat(0, lambda d: d["step"] >= 2)
        assert at2["step"] == 2 and at2["phase"] == "train"
        job.set_faults()
        assert ref.wait() == [0] and job.wait() == [0], job.log(0)[-2000:]
    finally:
        ref.kill()
        job.kill()

    printed = ref.losses(0)
    want = {s: float(v) for s, v in printed.items()}
    got = job.losses(0)
    assert sorted(want) == sorted(got) == [1, 2, 3, 4, 5] and all(math.isfinite(v) for v in want.values())
    assert got[1] == printed[1]
    for s in (2, 3):  # 7 printed digits each, and a float32 product: a unit of the last digit apart at most
        assert float(got[s]) == pytest.approx(100 * want[s], rel=3e-6), f"step {s} spiked x100"
    assert got[4] == printed[4], "the spike ends after 2 steps, and training went on as without it"
    assert got[5] == "nan" and " | lm loss: nan | " in job.log(0)
    assert at2["loss"] == pytest.approx(100 * want[2], rel=1e-5), "the heartbeat of step 2 holds the spike"
    end = job.heartbeat(0)
    assert end is not None and (end["step"], end["phase"], end["loss"]) == (5, "done", "NaN")
    assert math.isnan(float(end["loss"]))
    nan_counts = [int(m[3]) for m in LOG_LINE.finditer(job.log(0))]
    assert nan_counts == [0, 0, 0, 0, 1]


@pytest.mark.slow
@pytest.mark.external
def test_nan_from_one_rank_poisons_the_job_then_a_cuda_error_ends_it(tmp_path: Path) -> None:
    """World size 2 (pp=2): rank 0, the first stage, writes NaN activations at step 3 only.

    The loss (on rank 1, the last stage) is NaN from step 3 on, in the heartbeat and the log, and
    stays NaN after the one-step fault: the NaN went into the weights. At step 5 rank 0 raises a CUDA
    error: its log ends with the traceback and PyTorch's text, exit 1; rank 1, whose peer is gone (what
    a host loss does to it), exits 1 naming the closed connection.
    """
    pytest.importorskip("torch")
    job = start_job(
        tmp_path / "job",
        "--pp",
        "2",
        "--steps",
        "6",
        "--fault",
        "nan:rank=0:step=3:steps=1",
        "--fault",
        "crash:cuda:rank=0:step=5",
        world=2,
        file_faults="hang:compute:rank=0:step=4\n",  # rank 0 waits in step 4: rank 1 stops after 3
    )
    try:
        at3 = job.wait_heartbeat(1, lambda d: d["step"] >= 3)
        first = job.heartbeat(0)
        assert first is not None and first["loss"] is None, "a stage before the last has no loss"
        job.set_faults()
        codes = job.wait()
    finally:
        job.kill()

    assert at3["step"] == 3 and at3["loss"] == "NaN", "the NaN of rank 0's step 3 is in step 3's loss"
    losses = job.losses(1)
    assert math.isfinite(float(losses[1])) and math.isfinite(float(losses[2]))
    assert losses[3] == losses[4] == "nan", "NaN from step 3 on, after the fault's one step"
    assert job.losses(0) == {}, "only the last stage logs the loss"

    assert codes[0] == 1
    log0 = job.log(0)
    assert "Traceback (most recent call last):" in log0
    at = [log0.find(line) for line in CUDA_TEXT]
    assert -1 not in at and at == sorted(at), log0[-2000:]
    beat0 = job.heartbeat(0)
    assert beat0 is not None and beat0["step"] == 4, "rank 0 died in step 5"
    assert codes[1] != 0 and re.search(r"Connection (closed|reset) by peer", job.log(1)), job.log(1)[-2000:]


# --------------------------------------------------------------------------------------------------
# heartbeat (stdlib only)
# --------------------------------------------------------------------------------------------------


def test_heartbeat_loss_faults_and_cuda_exit(tmp_path: Path) -> None:
    """``tests/jobs/heartbeat.py`` on the rank ``--fault-ranks`` names: a x10 spike at steps 3-4, NaN
    from step 6, a CUDA error at step 8 (exit 1, its child killed with it); another rank beats clean."""
    from tests.jobs.heartbeat import base_loss

    beats = tmp_path / "beats"
    faults = [
        "--spike-at-step",
        "3",
        "--spike-steps",
        "2",
        "--nan-from-step",
        "6",
        "--cuda-error-at-step",
        "8",
    ]
    argv = [sys.executable, "-m", "tests.jobs.heartbeat", "--dir", str(beats), "--every-s", "0.01"]
    argv += [*faults, "--fault-ranks", "1", "--log-every", "1"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    clean = subprocess.Popen(argv, env={**env, "RANK": "0"}, cwd=REPO, stdout=subprocess.DEVNULL)
    try:
        res = subprocess.run(
            [*argv, "--children", "1"],
            env={**env, "RANK": "1"},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
        deadline = time.monotonic() + DEADLINE_S
        while True:  # rank 0 is not named by --fault-ranks: it beats on past step 8
            doc = strict_json((beats / "rank0.json").read_text()) if (beats / "rank0.json").exists() else None
            if doc is not None and doc["step"] >= 9:
                break
            assert clean.poll() is None and time.monotonic() < deadline, doc
            time.sleep(0.02)
    finally:
        clean.kill()
        clean.wait()
    assert doc["loss"] == pytest.approx(base_loss(doc["step"])) and doc["time"] > 0

    assert res.returncode == 1
    at = [res.stderr.find(line) for line in ("Traceback (most recent call last):", *CUDA_TEXT)]
    assert -1 not in at and at == sorted(at), res.stderr
    printed = {int(m[1]): m[2] for m in LOG_LINE.finditer(res.stdout)}
    assert sorted(printed) == list(range(1, 8)), res.stdout
    for step in (1, 2, 5):
        assert float(printed[step]) == pytest.approx(base_loss(step), rel=2e-6)
    for step in (3, 4):
        assert float(printed[step]) == pytest.approx(10 * base_loss(step), rel=2e-6)
    assert printed[6] == printed[7] == "nan"
    last = strict_json((beats / "rank1.json").read_text())
    assert (last["step"], last["loss"]) == (7, "NaN")
    child = beats / "rank1-child0.json"  # written unless the child was not scheduled before the crash
    assert not child.exists() or strict_json(child.read_text())["loss"] is None
    assert not [p for p in psutil.process_iter() if str(beats) in " ".join(_cmdline(p))], "the child lives on"


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []
