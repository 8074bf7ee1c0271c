"""The watch's signal readers (issue 22, item 2): one job's signals read into a JobReading.

Real processes where it is cheap: the heartbeat test-bed job (``tests/jobs/heartbeat.py``) started by
``restart`` on two inventory hosts on the local transport (the helpers of ``test_restart.py``), with
its NaN loss and CUDA-error faults, and stopped with SIGSTOP for a hang. The error paths (a host
unreachable, timed out, printing garbage, a reader that fails) run on FakeTransport; Slurm on a fake
runner answering with captured Slurm 22.05 output (``tests/data/slurm``); Kubernetes on a fake API.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from robustctl.config import KubernetesSettings, ProgressSpec
from robustctl.errors import CommandTimeout, HostUnreachable
from robustctl.inventory import Host, Job, load_inventory
from robustctl.jobcode.progress import read_progress
from robustctl.models import Status
from robustctl.schedulers.base import SchedulerError
from robustctl.schedulers.kubernetes import ApiStatus, Kubernetes
from robustctl.schedulers.slurm import CommandOutput, Slurm
from robustctl.store import Store
from robustctl.sweep.history import HOST_CHECK, Observation, record
from robustctl.testing.fake_transport import FakeTransport
from robustctl.transport.base import MAX_STDOUT_BYTES, CommandResult
from robustctl.transport.pool import TransportPool
from robustctl.watch.logscan import MAX_LINE_CHARS, MAX_TAIL_BYTES
from robustctl.watch.rules import SignalClass, judge_hang, judge_losses
from robustctl.watch.signals import (
    LOG_READ_TIMEOUT_S,
    MAX_HOST_LOG_BYTES,
    POD_LOG_LIMIT_BYTES,
    POD_LOG_TAIL_LINES,
    TAIL_READER,
    JobReading,
    Liveness,
    StepSample,
    merge_samples,
    parse_progress_output,
    parse_slurm_exit_code,
    parse_tail_output,
    parse_training_line,
    pod_liveness,
    read_findings,
    read_job,
    slurm_job_liveness,
)
from tests.unit.test_restart import Job as BedJob

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
MEGATRON_LINE = (
    " [2025-03-01 10:00:00] iteration      120/   50000 | consumed samples:        61440 | elapsed time per "
    "iteration (ms): 1234.5/1200.0 | learning rate: 2.999E-04 | global batch size:   512 | lm loss: "
    "2.345678E+00 | loss scale: 1.0 | grad norm: 0.812 | number of skipped iterations:   0 | number of nan "
    "iterations:   0 |"
)
"""Megatron-LM's training_log line (megatron/training/training.py) with the newer ``X/mean`` step time."""
POLL_S = 0.1
"""Pause between two looks at a job's state while waiting for it (polls with a deadline, no fixed sleep)."""


# ------------------------------------------------------------------------------------- the test bed
@pytest.fixture
def bed(tmp_path: Path) -> Iterator[BedJob]:
    j = BedJob(tmp_path)
    yield j
    j.kill_all()


def start(bed: BedJob, *args: str) -> Job:
    """Start the 4-rank heartbeat job (2 hosts, 2 ranks each) with ``args``; its inventory job."""
    bed.write(args=("--log-every", "1", *args), progress={"files": str(bed.beats / "rank*.json")})
    result = bed.restart()
    assert result.exit_code == 0, result
    return load_inventory(bed.inventory).job("hb")


def read(job: Job, **kw: Any) -> JobReading:
    return read_job(job, TransportPool(), **kw)


def wait_reading(job: Job, done: Any, timeout: float = 20.0, **kw: Any) -> JobReading:
    """Read until ``done(reading)`` or ``timeout`` passes; the last reading."""
    deadline = time.monotonic() + timeout
    while True:
        r = read(job, **kw)
        if done(r) or time.monotonic() > deadline:
            return r
        time.sleep(POLL_S)


def test_a_healthy_job_reads_alive_with_steps_losses_logs_and_no_verdict(bed: BedJob, tmp_path: Path) -> None:
    job = start(bed)
    r = wait_reading(job, lambda r: (r.progress.step or 0) >= 3)
    assert r.liveness.state is Liveness.ALIVE and r.liveness.ranks_running == 4 and r.ranks_alive is True
    assert r.progress.step is not None and r.progress.step >= 3 and r.progress.unknown is None
    assert r.newest_step_time is not None and abs(r.read_at - r.newest_step_time) < 10
    # heartbeat losses (numbers) and the ranks' log lines both give samples: the base loss of each step
    by_step = {s.step: s.loss for s in r.progress.samples}
    assert by_step[2] == pytest.approx(2.0 + 8.0 / 1.2, rel=1e-6)
    assert [t.ranks for t in r.logs.tails] == [(0,), (1,), (2,), (3,)]
    assert all(t.error is None and t.scan is not None and t.read_bytes > 0 for t in r.logs.tails)
    assert r.log_verdicts == () and r.errors == () and r.logs.unknown is None
    assert judge_hang(r.newest_step_time, r.read_at, r.ranks_alive, r.step_times) is None
    losses, first = r.losses_after(None)
    assert first == 0 and judge_losses(losses, start=first) is None
    # no store: findings unknown with the reason, never "no finding"
    assert ("findings", "no state store: host findings not read") in r.unknown
    # the ranks stopped (SIGSTOP): alive, no new step: with a 1 s bound the hang rule fires
    for p in bed.processes():
        os.kill(p.pid, signal.SIGSTOP)
    try:
        hung = wait_reading(
            job,
            lambda r: judge_hang(r.newest_step_time, r.read_at, r.ranks_alive, stall_after_s=1.0) is not None,
        )
        verdict = judge_hang(hung.newest_step_time, hung.read_at, hung.ranks_alive, stall_after_s=1.0)
        assert verdict is not None and verdict.signal is SignalClass.HANG
        assert hung.liveness.state is Liveness.ALIVE
    finally:
        for p in bed.processes():
            os.kill(p.pid, signal.SIGCONT)


def test_nan_loss_then_cuda_error_on_one_rank_reads_dead_with_the_cause_and_the_nan(bed: BedJob) -> None:
    job = start(bed, "--nan-from-step", "3", "--cuda-error-at-step", "50", "--fault-ranks", "1")
    r = wait_reading(job, lambda r: r.liveness.state is Liveness.DEAD, timeout=30)
    assert r.liveness.state is Liveness.DEAD and r.ranks_alive is False
    assert [(e.where, e.ranks) for e in r.liveness.exits] == [("n1", (1,))]
    assert r.liveness.ranks_running == 3
    (tail, verdict), *others = r.log_verdicts
    assert others == [] and tail.ranks == (1,) and tail.host == "n1"
    assert verdict.signal is SignalClass.CRASH and verdict.cause == "cuda-error"
    assert "illegal memory access" in verdict.evidence
    losses, first = r.losses_after(None)
    nan = judge_losses(losses, start=first)
    assert nan is not None and nan.rule == "loss.nonfinite"
    # the NaN is the worst loss of its step whichever rank or source reported it; the source says where
    worst = next(s for s in r.progress.samples if s.step == 3)
    assert worst.loss is not None and math.isnan(worst.loss) and worst.source.startswith("n1 ")
    # the next evaluation judges only the new losses: none after the newest step
    newest = r.progress.samples[-1].step
    _, start_new = r.losses_after(newest)
    assert start_new == len(losses)


def test_a_log_that_is_missing_or_not_a_regular_file_is_an_error_of_that_log(
    bed: BedJob, tmp_path: Path
) -> None:
    bed.write(progress={"files": str(bed.beats / "rank*.json")})
    job = load_inventory(bed.inventory).job("hb")
    bed.logs.mkdir()
    os.mkfifo(bed.logs / "hb-rank00000.log")  # a FIFO is never opened for a blocking read
    (bed.logs / "hb-rank00001.log").write_bytes(b"x" * 10 + b"\nRuntimeError: boom\n")
    r = read(job)
    errors = {t.ranks: t.error for t in r.logs.tails}
    assert errors[(0,)] == "not a regular file"
    assert errors[(1,)] is None
    assert errors[(2,)] is not None and "No such file" in errors[(2,)]
    # nothing runs: every rank is dead; no heartbeat: the progress signal is unknown, with the reason
    assert r.liveness.state is Liveness.DEAD and r.liveness.ranks_running == 0
    assert r.progress.unknown is not None and "no progress entry" in r.progress.unknown
    assert r.newest_step_time is None


def test_a_long_log_is_read_to_its_bound_from_its_end(bed: BedJob) -> None:
    bed.write()
    job = load_inventory(bed.inventory).job("hb")
    bed.logs.mkdir()
    body = b"".join(b"iteration %8d/ 0 | lm loss: 1.000000E+00 |\n" % i for i in range(1, 20_000))
    (bed.logs / "hb-rank00000.log").write_bytes(body + b"RuntimeError: CUDA error: out of memory\n")
    r = read(job)
    tail = r.logs.tails[0]
    assert tail.size == len(body) + 40 and tail.read_bytes <= min(MAX_TAIL_BYTES, MAX_HOST_LOG_BYTES // 2)
    assert tail.verdict is not None and tail.verdict.cause == "oom"
    assert r.progress.samples[-1].step == 19_999 and r.progress.samples[0].step > 1  # only the tail


# --------------------------------------------------------------------------------- error paths (fake)
def two_hosts(tmp_path: Path, **job: Any) -> Job:
    """An inventory job of two local hosts (n1, n2), heartbeat progress and per-rank logs."""
    bed = BedJob(tmp_path)
    bed.write(progress={"files": str(tmp_path / "beats" / "rank*.json"), "timeout_s": 5}, **job)
    return load_inventory(bed.inventory).job("hb")


def answer(
    progress: Mapping[str, Any] | CommandResult | BaseException | None = None,
    tails: Mapping[str, Any] | CommandResult | BaseException | None = None,
    ranks: Sequence[int] = (),
) -> dict[str, Any]:
    """FakeTransport answers of one host: the progress reader, the tail reader and the jobprocs probe."""

    def run(argv: Sequence[str]) -> Any:
        what = tails if TAIL_READER in argv else progress
        if isinstance(what, (BaseException, CommandResult)):
            return what
        return CommandResult("h", 0, json.dumps(what or {"files": [], "matched": 0}).encode(), b"", 0.01)

    procs = [{"role": "main", "rank": r, "pid": 100 + r} for r in ranks]
    return {"?": run, "jobprocs": {"processes": procs}}


def fake_read(job: Job, answers: Mapping[str, Any], **kw: Any) -> JobReading:
    fake = FakeTransport(answers=dict(answers))
    return read_job(job, TransportPool(override=fake), **kw)


def beat(path: str, step: int, at: float, loss: Any = 1.0, **more: Any) -> dict[str, Any]:
    doc = {"step": step, "time": at, "loss": loss, **more}
    return {"path": path, "mtime": at, "size": 50, "cut": False, "text": json.dumps(doc)}


def test_an_unreachable_host_is_an_error_of_that_host_in_every_signal(tmp_path: Path) -> None:
    job = two_hosts(tmp_path)
    ok = answer({"now": 1000.0, "matched": 1, "files": [beat("/b/rank0.json", 7, 995.0)]}, ranks=(0, 1))
    down = {"?": HostUnreachable("n2", "connection refused"), "jobprocs": HostUnreachable("n2", "refused")}
    r = fake_read(job, {"n1": ok, "n2": down}, clock=lambda: 5000.0)
    assert {(e.signal, e.host) for e in r.errors} == {("progress", "n2"), ("liveness", "n2"), ("logs", "n2")}
    assert all("refused" in e.reason for e in r.errors)
    # n1 is alive and n2 cannot be asked: not known, never "alive"
    assert r.liveness.state is Liveness.UNKNOWN and r.ranks_alive is None
    assert r.liveness.unknown is not None and "n2" in r.liveness.unknown
    # the step time was 5 s old on n1's own clock: the control clock (5000) does not matter
    assert r.progress.step == 7 and r.progress.age_s == pytest.approx(5.0)
    assert r.newest_step_time == pytest.approx(4995.0)
    verdict = judge_hang(r.newest_step_time, r.read_at, r.ranks_alive, stall_after_s=1.0)
    assert verdict is not None and verdict.signal is SignalClass.UNKNOWN  # stalled, liveness not known


def test_garbage_a_failed_reader_and_a_timeout_are_one_line_errors_of_their_host(tmp_path: Path) -> None:
    job = two_hosts(tmp_path)
    garbage = CommandResult("n1", 0, b"\x00\xffnot json", b"", 0.01)
    failed = CommandResult("n2", 1, b"", b"Traceback ...\nPermissionError: denied\n", 0.01)
    answers = {
        "n1": answer(garbage, garbage, ranks=(0, 1)),
        "n2": answer(failed, CommandTimeout("n2", "command timed out after 5s"), ranks=(2, 3)),
    }
    r = fake_read(job, answers)
    by = {(e.signal, e.host): e.reason for e in r.errors}
    assert by[("progress", "n1")] == "the progress reader printed no JSON document"
    assert by[("logs", "n1")] == "the log-tail reader printed no JSON document"
    assert by[("progress", "n2")].startswith("progress reader exited 1: PermissionError: denied")
    assert "timed out" in by[("logs", "n2")]
    assert all("\n" not in why for why in by.values())
    assert r.progress.unknown is not None and r.progress.unknown.startswith("no host could be read")
    assert r.liveness.state is Liveness.ALIVE  # the process scan answered on both
    assert [t.error is not None for t in r.logs.tails] == [True] * 4


def test_a_job_without_progress_launch_or_process_is_unknown_with_the_reasons(tmp_path: Path) -> None:
    bed = BedJob(tmp_path)
    bed.write()
    job = load_inventory(bed.inventory).job("plain")
    r = fake_read(job, {"n1": answer(), "n2": answer()})
    unknown = dict(r.unknown)
    assert "no progress: section" in unknown["progress"]
    assert "no process: section" in unknown["liveness"]
    assert "no launch: section" in unknown["logs"]
    assert r.liveness.state is Liveness.UNKNOWN and r.logs.tails == ()


def test_heartbeat_losses_in_every_spelling_and_step_times_are_read() -> None:
    spec = ProgressSpec(files="/b/rank*.json")
    files = [
        beat("/b/rank0.json", 5, 100.0, "NaN"),
        beat("/b/rank1.json", 5, 100.5, 2.5, step_s=0.25),
        beat("/b/rank2.json", 6, 101.0, "Infinity"),
        beat("/b/rank3.json", 7, 101.0, "-Infinity"),
        beat("/b/rank4.json", 8, 101.0, "bogus", step_s="fast"),
        beat("/b/rank5.json", 9, 101.0, True),
    ]
    out = json.dumps({"now": 102.0, "matched": 6, "files": files}).encode()
    host = parse_progress_output("n1", out, spec, None)
    assert [s.loss for s in host.samples][1:] == [2.5, math.inf, -math.inf, None, None]
    merged = merge_samples(host.samples, [])  # one sample per step: the NaN is the worst loss of step 5
    assert [s.step for s in merged] == [5, 6, 7, 8, 9]
    assert math.isnan(merged[0].loss or 0.0) and merged[0].step_time_s == 0.25 and merged[0].at == 100.5
    assert "rank0.json" in merged[0].source
    assert host.now == 102.0 and [e.step for e in host.progress.entries] == [5, 5, 6, 7, 8, 9]
    # a bare NaN token (not strict JSON, which Python reads) is a NaN too
    bare = '{"step": 3, "time": 1.0, "loss": NaN}'
    raw = {"now": 2.0, "files": [{"path": "/b/r.json", "mtime": 1.0, "text": bare}]}
    got = parse_progress_output("n1", json.dumps(raw).encode(), spec, None).samples
    assert math.isnan(got[0].loss or 0.0)


def test_a_progress_log_tail_gives_steps_losses_step_times_and_is_scanned() -> None:
    spec = ProgressSpec(log="/var/log/train.log", pattern=r"iteration\s+(?P<step>\d+)/")
    text = "\n".join(
        [
            MEGATRON_LINE,
            MEGATRON_LINE.replace("120/", "121/").replace("2.345678E+00", "nan"),
            "Traceback (most recent call last):",
            '  File "train.py", line 1, in <module>',
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ]
    )
    f = {"path": "/var/log/train.log", "mtime": 50.0, "size": 9000, "cut": True, "text": "partial\n" + text}
    doc = json.dumps({"now": 60.0, "matched": 1, "files": [f]}).encode()
    host = parse_progress_output("n1", doc, spec, re.compile(spec.pattern or ""))
    assert [e.step for e in host.progress.entries] == [121]
    assert [(s.step, s.step_time_s) for s in host.samples] == [(120, 1.2345), (121, 1.2345)]
    assert math.isnan(host.samples[1].loss or 0.0)
    (tail,) = host.tails
    assert tail.verdict is not None and tail.verdict.cause == "oom" and tail.size == 9000


def test_training_lines_of_megatron_and_the_test_bed_jobs() -> None:
    s = parse_training_line(MEGATRON_LINE, "x")
    assert s == StepSample(120, None, 1.2345, 2.345678, "x")
    hb = "iteration        7/       0 | lm loss: nan | number of nan iterations:   1 |"
    got = parse_training_line(hb)
    assert got is not None and got.step == 7 and math.isnan(got.loss or 0.0)
    mm = "[rank 3] [2025-01-01 00:00:00] iteration       12/     100 | elapsed time per iteration (ms): 5.0 |"
    assert parse_training_line(mm) == StepSample(12, None, 0.005, None, "")
    for junk in ("iteration 5 of 10", "lm loss: 1.0", "iteration 3/ | lm loss: 1_000", "iteration x/1"):
        assert parse_training_line(junk) is None


def test_the_tail_reader_output_is_checked_per_file() -> None:
    import base64

    paths = ["/a.log", "/b.log", "/c.log", "/d.log"]
    doc = {
        "now": 10.0,
        "files": [
            {"path": "/a.log", "size": 3, "start": 0, "data": base64.b64encode(b"abc").decode()},
            {"path": "/b.log", "size": 9, "start": 0, "data": base64.b64encode(b"x" * 9).decode()},
            {"path": "/WRONG", "size": 1, "start": 0, "data": ""},
        ],
    }
    files, now = parse_tail_output("n1", json.dumps(doc).encode(), paths, 4)
    assert now == 10.0 and [f.path for f in files] == paths
    assert files[0].data == b"abc" and files[0].error is None
    assert files[1].data is None and "at most 4 bytes" in (files[1].error or "")
    assert files[2].error == files[3].error == "the reader printed nothing for this file"


# ----------------------------------------------------------------------------------------- series
def test_merge_samples_keeps_the_worst_loss_and_derives_step_times_between_readings() -> None:
    old = [StepSample(10, 100.0, None, 2.0, "a"), StepSample(11, None, None, 1.9, "a")]
    new = [
        StepSample(11, None, 0.5, math.nan, "b"),
        StepSample(14, 106.0, None, 1.8, "b"),
        StepSample(15, None, None, None, "b"),
    ]
    got = merge_samples(old, new)
    assert [s.step for s in got] == [10, 11, 14, 15]
    assert math.isnan(got[1].loss or 0.0) and got[1].source == "b" and got[1].step_time_s == 0.5
    assert got[2].step_time_s is None  # step 11 has no time: nothing to derive from
    both = merge_samples([StepSample(10, 100.0)], [StepSample(14, 106.0)])
    assert both[1].step_time_s == pytest.approx(1.5)
    assert len(merge_samples([StepSample(i) for i in range(50)], [], limit=8)) == 8


# ------------------------------------------------------------------------------------------- Slurm
def slurm_runner(outputs: Mapping[str, CommandOutput | str], calls: list[list[str]]) -> Any:
    def run(argv: Sequence[str], env: Mapping[str, str], timeout_s: float) -> CommandOutput:
        calls.append(list(argv))
        out = outputs.get(Path(argv[0]).name, "")
        return out if isinstance(out, CommandOutput) else CommandOutput(0, out, "")

    return run


def slurm_job(tmp_path: Path) -> tuple[Job, list[Host]]:
    job = two_hosts(tmp_path)
    hosts = [dataclasses.replace(h, name=n) for h, n in zip(job.hosts, ("sn1", "sn2"), strict=True)]
    return dataclasses.replace(job, name="train", hosts=tuple(hosts)), hosts


def test_slurm_running_job_is_alive_and_its_output_file_is_scanned(tmp_path: Path) -> None:
    job, hosts = slurm_job(tmp_path)
    out = tmp_path / "job-1.out"
    out.write_text("iteration        3/       0 | lm loss: 2.0 |\n")
    scontrol = (DATA / "scontrol-show-job-running.out").read_text()
    scontrol = scontrol.replace("/tmp/slurmbed/job-1.out", str(out))
    calls: list[list[str]] = []
    runner = slurm_runner({"squeue": (DATA / "squeue.json").read_text(), "scontrol": scontrol}, calls)
    r = read_job(job, TransportPool(), hosts=hosts, scheduler=Slurm(runner=runner))
    assert r.backend == "slurm" and r.liveness.state is Liveness.ALIVE and r.liveness.ranks_running == 4
    assert [c[1:] for c in calls if Path(c[0]).name == "scontrol"] == [["show", "job", "-o", "1"]]
    (tail,) = r.logs.tails
    assert tail.host == "sn1" and tail.path == str(out) and tail.error is None and tail.verdict is None
    assert r.logs.unknown is None and {s.step for s in r.progress.samples} >= {3}


def test_a_failed_slurm_job_is_dead_with_its_exit_code_and_its_log_cause(tmp_path: Path) -> None:
    job, hosts = slurm_job(tmp_path)
    out = tmp_path / "job-7.out"
    out.write_text("[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    squeue = json.dumps({"jobs": [{"job_id": 7, "name": "train", "job_state": "FAILED"}]})
    scontrol = (
        f"JobId=7 JobName=train JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0 NodeList=sn[1-2] "
        f"BatchHost=sn2 StdErr={out} StdIn=/dev/null StdOut={out}\n"
    )
    runner = slurm_runner({"squeue": squeue, "scontrol": scontrol}, [])
    r = read_job(job, TransportPool(), hosts=hosts, scheduler=Slurm(runner=runner))
    assert r.liveness.state is Liveness.DEAD and r.ranks_alive is False
    (ex,) = r.liveness.exits
    assert (ex.where, ex.exit_code, ex.signal) == ("slurm job 7", 1, None) and "NonZeroExitCode" in ex.reason
    (tail,) = r.logs.tails
    assert tail.host == "sn2" and tail.verdict is not None and tail.verdict.cause == "cuda-error"


def test_a_job_slurm_no_longer_holds_is_read_from_sacct_and_a_failing_scheduler_is_unknown(
    tmp_path: Path,
) -> None:
    job, hosts = slurm_job(tmp_path)
    calls: list[list[str]] = []
    sacct = "8|train|COMPLETED|0:0\n9|train|CANCELLED by 0|0:15\n"
    runner = slurm_runner({"squeue": json.dumps({"jobs": []}), "sacct": sacct}, calls)
    r = read_job(job, TransportPool(), hosts=hosts, scheduler=Slurm(runner=runner))
    assert r.liveness.state is Liveness.DEAD and r.liveness.exits[0].signal == 15
    assert ["--name", "train", "-S", "now-7days"] == calls[-1][-4:]
    assert r.logs.unknown is not None and "output file" in r.logs.unknown
    broken = slurm_runner(
        {"squeue": CommandOutput(1, "", "slurm_load_jobs error: Unable to contact slurm controller")}, []
    )
    r2 = read_job(job, TransportPool(), hosts=hosts, scheduler=Slurm(runner=broken))
    assert r2.liveness.state is Liveness.UNKNOWN and "Unable to contact" in (r2.liveness.unknown or "")
    assert [e.host for e in r2.errors if e.signal == "liveness"] == ["slurm"]


@pytest.mark.parametrize(
    ("state", "code", "want"),
    [
        ("RUNNING", "0:0", Liveness.ALIVE),
        ("PENDING", "0:0", Liveness.WAITING),
        ("SUSPENDED", "0:0", Liveness.WAITING),
        ("COMPLETED", "0:0", Liveness.ENDED),
        ("COMPLETING", "0:0", Liveness.WAITING),
        ("COMPLETING", "0:9", Liveness.DEAD),
        ("NODE_FAIL", "0:0", Liveness.DEAD),
        ("TIMEOUT", "0:1", Liveness.DEAD),
        ("OUT_OF_MEMORY", "0:125", Liveness.DEAD),
        ("WEIRD", "0:0", Liveness.UNKNOWN),
    ],
)
def test_slurm_states_map_to_liveness(state: str, code: str, want: Liveness) -> None:
    assert slurm_job_liveness("5", state, code, 8).state is want


def test_slurm_exit_codes() -> None:
    assert parse_slurm_exit_code("1:0") == (1, 0) and parse_slurm_exit_code("0:9") == (0, 9)
    for bad in ("", "1", "256:0", "a:b", "1:0:0", "-1:0"):
        assert parse_slurm_exit_code(bad) == (None, None)


# -------------------------------------------------------------------------------------- Kubernetes
def pod(index: int, phase: str = "Running", **container: Any) -> dict[str, Any]:
    state = container or {"running": {"startedAt": "2025-01-01T00:00:00Z"}}
    return {
        "metadata": {
            "name": f"train-{index}",
            "labels": {"batch.kubernetes.io/job-completion-index": str(index)},
        },
        "spec": {"nodeName": f"node{index}", "containers": [{"name": "trainer", "image": "pytorch"}]},
        "status": {"phase": phase, "containerStatuses": [{"name": "trainer", "state": state}]},
    }


def test_pods_running_failed_crash_looping_pending_and_succeeded() -> None:
    alive, _ = pod_liveness([pod(0), pod(1)], machines=2, ranks_per_host=4)
    assert alive.state is Liveness.ALIVE and alive.ranks_running == 8
    crashed = pod(
        1,
        "Failed",
        terminated={
            "exitCode": 1,
            "reason": "Error",
            "finishedAt": "2025-01-01T00:10:00Z",
            "message": "RuntimeError: CUDA error: an illegal memory access was encountered\n",
        },
    )
    dead, tails = pod_liveness([pod(0), crashed], machines=2, ranks_per_host=4)
    assert dead.state is Liveness.DEAD and dead.ranks_running == 4
    (ex,) = dead.exits
    assert (ex.where, ex.ranks, ex.exit_code, ex.at) == ("pod train-1", (4, 5, 6, 7), 1, 1735690200.0)
    assert (
        tails[0].host == "node1" and tails[0].verdict is not None and tails[0].verdict.cause == "cuda-error"
    )
    looping = pod(0)
    looping["status"]["containerStatuses"][0].update(
        state={"waiting": {"reason": "CrashLoopBackOff"}},
        lastState={"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
    )
    oom, _ = pod_liveness([looping, pod(1)], machines=2, ranks_per_host=4)
    assert oom.state is Liveness.DEAD and oom.exits[0].exit_code == 137 and "OOMKilled" in oom.exits[0].reason
    pending, _ = pod_liveness(
        [pod(0), pod(1, "Pending", waiting={"reason": "ContainerCreating"})], machines=2, ranks_per_host=4
    )
    assert pending.state is Liveness.WAITING and pending.ranks_alive is None
    done = [pod(i, "Succeeded", terminated={"exitCode": 0, "reason": "Completed"}) for i in range(2)]
    assert pod_liveness(done, machines=2, ranks_per_host=4)[0].state is Liveness.ENDED
    assert pod_liveness([], machines=2, ranks_per_host=4)[0].state is Liveness.UNKNOWN


class FakeKubeApi:
    """The part of KubeApi the reader uses: list_pods, and read_pod_log applying ``tail_lines`` then
    ``limit_bytes`` as the API server does; ``fail[pod]`` is raised for that pod's log."""

    def __init__(
        self,
        pods: list[dict[str, Any]],
        logs: Mapping[str, str | bytes] | None = None,
        fail: Mapping[str, BaseException] | None = None,
    ) -> None:
        self.pods = pods
        self.logs = {k: v.encode() if isinstance(v, str) else v for k, v in (logs or {}).items()}
        self.fail = dict(fail or {})
        self.selectors: list[str] = []
        self.log_calls: list[tuple[str, str, str | None, int, int]] = []

    def list_pods(
        self, namespace: str | None, *, label_selector: str = "", field_selector: str = ""
    ) -> list[dict[str, Any]]:
        self.selectors.append(label_selector)
        return self.pods

    def read_pod_log(
        self, namespace: str, name: str, *, container: str | None, limit_bytes: int, tail_lines: int
    ) -> str:
        self.log_calls.append((namespace, name, container, limit_bytes, tail_lines))
        if name in self.fail:
            raise self.fail[name]
        lines = [line for line in re.split(rb"(?<=\n)", self.logs.get(name, b"")) if line]
        data = b"".join(lines[max(0, len(lines) - tail_lines) :])[:limit_bytes]
        return data.decode("utf-8", "replace")


def k8s_read(tmp_path: Path, api: FakeKubeApi) -> JobReading:
    """One reading of the two-host job (2 ranks per host) through a Kubernetes back end over ``api``."""
    job = two_hosts(tmp_path)
    sched = Kubernetes(api=api, settings=KubernetesSettings())
    return fake_read(job, {"n1": answer(), "n2": answer()}, scheduler=sched)


def test_kubernetes_pods_are_read_through_the_api_and_their_logs_scanned(tmp_path: Path) -> None:
    api = FakeKubeApi([pod(0), pod(1)], logs={"train-0": "step 1\n", "train-1": "step 1\n"})
    r = k8s_read(tmp_path, api)
    assert api.selectors == ["robustctl.io/job=hb"]
    assert r.liveness.state is Liveness.ALIVE and r.liveness.ranks_running == 4
    assert r.logs.unknown is None and r.logs.errors == () and r.log_verdicts == ()
    assert [(t.host, t.path, t.ranks) for t in r.logs.tails] == [
        ("node0", "pod default/train-0 container trainer log", (0, 1)),
        ("node1", "pod default/train-1 container trainer log", (2, 3)),
    ]
    assert sorted(api.log_calls) == [
        ("default", f"train-{i}", "trainer", POD_LOG_LIMIT_BYTES, POD_LOG_TAIL_LINES) for i in (0, 1)
    ]


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        (
            "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
            "600042 milliseconds before timing out.",
            "nccl-timeout",
        ),
        (
            "[  12.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid=7, name=python3, GPU has fallen off the bus.",
            "xid",
        ),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda-error"),
    ],
)
def test_an_error_in_a_running_pods_log_is_a_crash_of_its_ranks(
    tmp_path: Path, line: str, cause: str
) -> None:
    api = FakeKubeApi([pod(0), pod(1)], logs={"train-0": "ok\n" * 10, "train-1": "ok\n" * 10 + line + "\n"})
    r = k8s_read(tmp_path, api)
    assert r.liveness.state is Liveness.ALIVE  # the pods still run: only their logs say it
    ((tail, verdict),) = r.log_verdicts
    assert verdict.signal is SignalClass.CRASH and verdict.cause == cause
    assert (tail.host, tail.ranks) == ("node1", (2, 3)) and "train-1" in tail.path
    assert r.logs.unknown is None


@pytest.mark.parametrize(
    "failure",
    [
        ApiStatus("GET namespaces/default/pods/train-0/log", 404, {"message": 'pods "train-0" not found'}),
        ApiStatus(
            "GET namespaces/default/pods/train-0/log", 500, {"message": "etcdserver: request timed out"}
        ),
        SchedulerError("kubernetes", "GET namespaces/default/pods/train-0/log", "timed out after 5 s"),
    ],
)
def test_a_pod_log_not_read_is_unknown_naming_the_pod_and_the_others_are_still_scanned(
    tmp_path: Path, failure: SchedulerError
) -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total)\n"
    api = FakeKubeApi([pod(0), pod(1)], logs={"train-1": oom}, fail={"train-0": failure})
    r = k8s_read(tmp_path, api)
    assert r.logs.unknown is not None and "train-0" in r.logs.unknown and failure.reason in r.logs.unknown
    assert "train-1" not in r.logs.unknown and "\n" not in r.logs.unknown
    assert ("logs", "pod train-0") in {(e.signal, e.host) for e in r.errors}
    failed = next(t for t in r.logs.tails if "train-0" in t.path)
    assert failed.scan is None and failed.error is not None and failed.verdict is None
    ((tail, verdict),) = r.log_verdicts  # the other pod's error is still found
    assert verdict.cause == "oom" and tail.ranks == (2, 3)
    assert dict(r.unknown)["logs"].startswith(
        "pod logs: 1 of 2 container log(s) not read whole: pod train-0 container trainer: "
    )


def test_a_pod_log_over_the_bound_is_cut_to_its_newest_tail(tmp_path: Path) -> None:
    # 600 KiB in 2000 lines: asked whole (2048 lines fit 1 MiB), only the newest 256 KiB scanned: the
    # XID at the start is out of the tail, the CUDA error at the end is the verdict
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=7, name=python3, GPU has fallen off the bus.\n"
    filler = "".join(f"iteration {i:6d} {'x' * 290}\n" for i in range(2000))
    err = "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    api = FakeKubeApi([pod(0)], logs={"train-0": xid + filler + err})
    job = two_hosts(tmp_path)
    r = fake_read(
        job, {"n1": answer(), "n2": answer()}, scheduler=Kubernetes(api=api, settings=KubernetesSettings())
    )
    ((tail, verdict),) = r.log_verdicts
    assert verdict.cause == "cuda-error" and tail.scan is not None and tail.scan.cut
    assert 0 < tail.read_bytes <= MAX_TAIL_BYTES and len(api.log_calls) == 1


def test_a_pod_log_whose_newest_lines_overflow_the_limit_is_asked_again_with_fewer_lines(
    tmp_path: Path,
) -> None:
    # the newest 2048 lines hold 2 MiB: the server sends their first 1 MiB, the end (the error) not;
    # asked again with the lines that fit, the error is found
    filler = "".join(f"iteration {i:6d} {'x' * 1000}\n" for i in range(3000))
    err = "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    api = FakeKubeApi(
        [pod(0), pod(1)], logs={"train-0": filler + err, "train-1": "x" * (2 * POD_LOG_LIMIT_BYTES)}
    )
    r = k8s_read(tmp_path, api)
    first = [c[4] for c in api.log_calls if c[1] == "train-0"]
    assert first[0] == POD_LOG_TAIL_LINES and len(first) == 2 and 1 <= first[1] < POD_LOG_TAIL_LINES
    ((tail, verdict),) = r.log_verdicts
    assert verdict.cause == "cuda-error" and "train-0" in tail.path
    # a single newest line of 2 MiB never fits: its pod is named, never healthy
    assert [c[4] for c in api.log_calls if c[1] == "train-1"] == [POD_LOG_TAIL_LINES, 1]
    assert r.logs.unknown is not None and "train-1" in r.logs.unknown and "train-0" not in r.logs.unknown
    assert "newest were not read" in r.logs.unknown and MAX_LINE_CHARS < POD_LOG_LIMIT_BYTES


def test_only_running_pods_logs_are_read_each_container_named(tmp_path: Path) -> None:
    two = pod(1)
    two["spec"]["containers"] = [{"name": "trainer"}, {"name": "sidecar"}]
    pending = pod(0, "Pending", waiting={"reason": "ContainerCreating"})
    api = FakeKubeApi([pending, two])
    r = k8s_read(tmp_path, api)
    assert [(c[1], c[2]) for c in api.log_calls] == [("train-1", "trainer"), ("train-1", "sidecar")]
    assert r.logs.unknown is None and len(r.logs.tails) == 2


# ---------------------------------------------------------------------------------------- findings
def test_host_findings_name_the_critical_host_its_checks_and_the_unseen(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db", clock=lambda: 1000.0) as store:
        obs = [
            Observation("n1", HOST_CHECK, Status.CRITICAL, "nvml.count: 7 of 8 GPUs"),
            Observation("n1", "nvml.count", Status.CRITICAL, "7 of 8 GPUs"),
            Observation("n1", "host.xid", Status.CRITICAL, "Xid 79 on GPU 3"),
            Observation("n1", "host.disk", Status.OK, "ok"),
            Observation("n2", HOST_CHECK, Status.WARNING, "host.nic: eth1 down (pending)"),
            Observation("n2", "host.nic", Status.CRITICAL, "eth1 down"),
        ]
        record(store, obs, source="diagnose", sweep=False)
        f = read_findings(store, ["n1", "n2", "n3"])
        assert f.unknown is None and f.unseen == ("n3",)
        (bad,) = f.critical
        assert bad.host == "n1" and [(c.check, c.kind) for c in bad.checks] == [
            ("host.xid", "xid"),
            ("nvml.count", "gpu-lost"),
        ]
        pending = f.hosts[1]
        assert not pending.critical and [c.kind for c in pending.checks] == ["nic-down"]
        with store.transaction() as c:
            c.execute("UPDATE check_state SET since='yesterday' WHERE host='n1'")
        damaged = read_findings(store, ["n1"])
        assert (
            damaged.unknown is not None and "check_state" in damaged.unknown and "\n" not in damaged.unknown
        )
        assert damaged.critical == ()


def test_read_job_reads_findings_from_the_store(tmp_path: Path) -> None:
    job = two_hosts(tmp_path)
    with Store.open(tmp_path / "s.db") as store:
        record(store, [Observation("n2", HOST_CHECK, Status.CRITICAL, "xid")], source="diagnose", sweep=False)
        r = fake_read(job, {"n1": answer(ranks=(0, 1)), "n2": answer(ranks=(2, 3))}, store=store)
    assert [h.host for h in r.findings.critical] == ["n2"] and r.findings.unseen == ("n1",)


def test_a_host_budget_of_log_tails_fits_the_transport_output_bound() -> None:
    # base64 (4/3) of the whole budget plus the JSON of 64 paths of 4 KiB stays under the stdout bound,
    # and a host of 64 ranks still gets 64 KiB of each log
    assert MAX_HOST_LOG_BYTES * 4 // 3 + 64 * 8192 < MAX_STDOUT_BYTES
    assert MAX_HOST_LOG_BYTES // 64 >= 64 * 1024 and LOG_READ_TIMEOUT_S <= 60


def test_a_time_past_a_doubles_range_is_a_bad_file_not_an_internal_error(tmp_path: Path) -> None:
    """Regression: read_progress failed the host with "internal error: OverflowError" for an integer
    mtime of 400 digits; both readers now say the file is unreadable and read the host."""
    job = two_hosts(tmp_path)
    doc = {"now": 5.0, "matched": 1, "files": [{"path": "/b/rank0.json", "mtime": 10**400, "text": "{}"}]}
    answers = {"n1": answer(doc, ranks=(0, 1)), "n2": answer(ranks=(2, 3))}
    pool = TransportPool(override=FakeTransport(answers=answers))
    assert job.progress is not None
    reading = fake_read(job, answers).progress.reading
    assert reading is not None
    for hosts in (read_progress(pool, "hb", job.hosts, job.progress).hosts, reading.hosts):
        assert hosts[0].error is None and hosts[0].problems == ("/b/rank0.json: unreadable",)


def test_a_former_runs_heartbeat_is_left_out_of_the_age_since_the_restart(tmp_path: Path) -> None:
    job = two_hosts(tmp_path)
    doc = {
        "now": 1000.0,
        "matched": 2,
        "files": [beat("/b/rank0.json", 40, 998.0), beat("/b/rank1.json", 90, 700.0, "NaN")],  # rank1: stale
    }
    r = fake_read(job, {"n1": answer(doc, ranks=(0, 1)), "n2": answer(ranks=(2, 3))})
    assert r.progress.age_s == pytest.approx(300.0) and r.progress.step == 40
    fresh = r.progress.since(900.0)
    assert fresh.age_s == pytest.approx(2.0) and fresh.step == 40
    assert [s.step for s in fresh.samples if s.at is not None] == [40]


def test_a_job_read_on_no_host_is_unknown_not_alive(tmp_path: Path) -> None:
    job = two_hosts(tmp_path)
    r = fake_read(job, {}, hosts=[])
    assert r.liveness.state is Liveness.UNKNOWN and r.ranks_alive is None and r.hosts == ()
    assert r.progress.unknown is not None and r.newest_step_time is None
