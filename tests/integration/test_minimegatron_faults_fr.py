"""minimegatron's desync hangs, seen through the in-job agent: ``hang:skip_collective`` and
``hang:wrong_size`` do what the job's docstring says, and ``--flight-recorder N`` records them.

Two ranks on this machine (``--dp 2``: the DP group is both ranks; each is its own pipeline's last
stage, so each step has a gradient all-reduce and a 1-element loss all-reduce in the DP group), run as
``tests/unit/test_minimegatron_faults.py`` runs them (real processes, gloo on 127.0.0.1). Progress is
read from the heartbeats, the blocked collectives from each rank's Flight Recorder ring and Python
stacks fetched through its debug server (``robustctl.agent.client.fetch``), polled with a deadline.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from robustctl.agent.client import FetchError, fetch
from tests.unit.test_minimegatron_faults import Job, start_job

pytestmark = pytest.mark.external  # minimegatron needs torch

DEADLINE_S = 20.0
"""Longest wait for the job to reach the state a test asks for (a few seconds on an idle machine; the
brief for these checks is about 20 s each)."""
FR_ENTRIES = 64
"""Flight Recorder ring asked for: more than the collectives of the steps these tests run up to the
fault (2 DP all-reduces a step), so the entries around it are all there."""
GRAD_NUMEL = 8192
"""Elements of the flat gradient buffer of one stage at the job's defaults (2 layers of
``hidden x ffn + ffn x hidden`` = 2 x 2 x 32 x 64)."""


def _fr(job: Job, rank: int) -> list[dict[str, Any]]:
    """``rank``'s Flight Recorder entries of all-reduces, fetched through its debug server."""
    beat = job.heartbeat(rank)
    if beat is None or not beat.get("debug_socket"):  # not started yet: the poll asks again
        raise FetchError(f"rank {rank} names no debug server yet: {beat}")
    doc = json.loads(fetch(beat["debug_socket"], "fr_trace_json", 10.0))
    return [e for e in doc["entries"] if e.get("profiling_name", "").endswith("all_reduce")]


def _poll(what: str, job: Job, check: Callable[[], Any]) -> Any:
    """``check()``'s first truthy answer within :data:`DEADLINE_S` (a FetchError counts as not yet)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            got = check()
        except FetchError:
            got = None
        if got:
            return got
        dead = [r for r, p in enumerate(job.procs) if p.poll() is not None]
        assert not dead, f"{what}: rank(s) {dead} exited: {job.log(dead[0])[-1500:]}"
        assert time.monotonic() < deadline, f"{what}: not within {DEADLINE_S} s"
        time.sleep(0.1)


def _seqs(job: Job, rank: int) -> list[tuple[int, Any]]:
    """``(sequence number, input sizes)`` of ``rank``'s pending all-reduces."""
    return [(e["collective_seq_id"], e["input_sizes"]) for e in _pending(_fr(job, rank))]


def _pending(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if not e.get("retired")]


def test_skip_collective_leaves_the_peer_in_the_skipped_all_reduce(tmp_path: Path) -> None:
    """Rank 1 stops calling its DP collectives at step 3: rank 0 stays in step 3's gradient all-reduce
    (heartbeat at step 2, its stack in ``reduce_gradients``, Flight Recorder: that all-reduce pending)
    while rank 1 trains on alone, its ring ending with step 2's loss all-reduce."""
    pytest.importorskip("torch")
    flag = ["--dp", "2", "--flight-recorder", str(FR_ENTRIES)]
    job = start_job(tmp_path, *flag, world=2, env_fault="hang:skip_collective:rank=1:step=3")
    try:
        _poll("rank 1 trains past step 6", job, lambda: (job.heartbeat(1) or {}).get("step", 0) >= 6)
        beat0 = job.heartbeat(0)
        assert beat0 is not None and beat0["step"] == 2, "rank 0 finished no step after the skip"
        waiting = _poll("rank 0's pending all-reduce", job, lambda: _pending(_fr(job, 0)))
        assert [(e["collective_seq_id"], e["input_sizes"]) for e in waiting] == [(5, [[GRAD_NUMEL]])]
        ring1 = _fr(job, 1)
        assert not _pending(ring1) and ring1[-1]["collective_seq_id"] == 4, "rank 1 left its DP group"
        assert ring1[-1]["input_sizes"] == [[1]], "its last DP collective is step 2's loss average"
        stack0 = fetch(str(beat0["debug_socket"]), "dump_traceback", 10.0).decode()
        assert "in reduce_gradients" in stack0 and "in all_reduce" in stack0, stack0[-1500:]
        assert (job.heartbeat(0) or {}).get("step") == 2
    finally:
        job.kill()


def test_wrong_size_all_reduce_hangs_both_ranks(tmp_path: Path) -> None:
    """Rank 1 calls step 3's gradient all-reduce with 0 elements: gloo returns at once on rank 1, which
    then waits in its loss average (sequence 6) while rank 0 waits in the gradient all-reduce
    (sequence 5) rank 1 recorded with 0 elements: both stop, rank 1 one collective ahead."""
    pytest.importorskip("torch")
    flag = ["--dp", "2", "--flight-recorder", str(FR_ENTRIES)]
    job = start_job(tmp_path, *flag, world=2, env_fault="hang:wrong_size:rank=1:step=3")
    try:
        for rank, blocked_in in ((1, [(6, [[1]])]), (0, [(5, [[GRAD_NUMEL]])])):
            # an all-reduce in flight before the fault is pending for a moment too: wait for this one
            _poll(
                f"rank {rank} blocked in {blocked_in}",
                job,
                lambda r=rank, want=blocked_in: _seqs(job, r) == want,
            )
        sizes1 = {e["collective_seq_id"]: e["input_sizes"] for e in _fr(job, 1)}
        assert sizes1[5] == [[0]], "rank 1's gradient all-reduce of step 3 had 0 elements"
        steps = {r: (job.heartbeat(r) or {}).get("step") for r in (0, 1)}
        assert steps == {0: 2, 1: 2}, "neither rank finished step 3"
        assert not _pending(_fr(job, 0))[1:] and len(_pending(_fr(job, 1))) == 1, "still blocked, nothing new"
    finally:
        job.kill()
