"""Level-2 all-reduce evaluator (robustctl.checks.allreduce) on plain probe data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from robustctl.checks.allreduce import evaluate_busbw, peak_busbw
from robustctl.checks.registry import CheckContext, checks_for_probe
from robustctl.models import Status
from robustctl.thresholds import Thresholds

TH = Thresholds()
DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-tests"


def row(size: int, busbw: float, correct: bool = True) -> dict[str, Any]:
    return {
        "size_bytes": size,
        "count": size // 4,
        "time_s": 0.01,
        "algbw_gbps": busbw,
        "busbw_gbps": busbw,
        "correct": correct,
        "wrong_elements": 0 if correct else 17,
    }


def data(
    results: list[dict[str, Any]], *, backend: str = "gloo", world: int = 2, error: str | None = None
) -> dict[str, Any]:
    return {
        "available": True,
        "mode": "intra",
        "backend": backend,
        "world_size": world,
        "results": results,
        "correct": all(r["correct"] for r in results) if results else None,
        "error": error,
    }


def test_only_the_intra_host_check_is_registered() -> None:
    """Level 3 (neighbour pairs) is judged by the engine across hosts, not per document."""
    specs = checks_for_probe("allreduce")
    assert [(s.name, s.level) for s in specs] == [("allreduce.busbw", 2)]


def test_ok_reports_peak_busbw_of_correct_sizes() -> None:
    d = data([row(1 << 20, 0.3), row(16 << 20, 1.1)])
    (r,) = evaluate_busbw(d, TH)
    assert r.status is Status.OK and r.evidence["peak_busbw_gbps"] == 1.1
    assert peak_busbw(d) == 1.1
    assert peak_busbw(data([row(1 << 20, 0.3), row(16 << 20, 9.9, correct=False)])) == 0.3


def test_wrong_values_are_critical() -> None:
    (r,) = evaluate_busbw(data([row(1 << 20, 0.3), row(16 << 20, 1.1, correct=False)]), TH)
    assert (
        r.status is Status.CRITICAL and "wrong values" in r.summary and "16777216 B (17 wrong)" in r.summary
    )


def test_failure_is_critical_over_nccl_unknown_over_gloo() -> None:
    (nccl,) = evaluate_busbw(
        data([], backend="nccl", world=8, error="rank 3: NCCL error: unhandled system error"), TH
    )
    assert nccl.status is Status.CRITICAL and "rank 3" in nccl.summary
    (gloo,) = evaluate_busbw(data([], error="rendezvous with 127.0.0.2:29500 failed: timeout"), TH)
    assert gloo.status is Status.UNKNOWN


def test_one_rank_no_measurement_and_unavailable() -> None:
    assert evaluate_busbw(data([row(1 << 20, 0.0)], world=1), TH)[0].status is Status.NOT_APPLICABLE
    assert evaluate_busbw(data([]), TH)[0].status is Status.UNKNOWN
    off = {
        "available": False,
        "mode": "intra",
        "reason": "torch is not installed",
        "reason_code": "torch_missing",
    }
    (r,) = evaluate_busbw(off, TH)
    assert r.status is Status.NOT_APPLICABLE and "torch is not installed" in r.summary


def test_absolute_floor() -> None:
    d = data([row(1 << 30, 380.0)], backend="nccl", world=8)
    assert evaluate_busbw(d, TH)[0].status is Status.OK
    (r,) = evaluate_busbw(d, Thresholds(allreduce_min_busbw_gbps=460))
    assert r.status is Status.CRITICAL and "below the floor 460" in r.summary


def nccl_tests(name: str, **kw: Any) -> dict[str, Any]:
    doc = {
        "available": True,
        "mode": "nccl-tests",
        "binary": "/usr/local/bin/all_reduce_perf",
        "returncode": 0,
        "stdout": (DATA / name).read_text(),
        "stderr_tail": "",
        "error": None,
    }
    doc.update(kw)
    return doc


def test_nccl_tests_mode_uses_the_nccl_tests_parser() -> None:
    good = nccl_tests("bitdeer-h100-8gpu-1node-allreduce.txt")
    (r,) = evaluate_busbw(good, TH)
    assert r.status is Status.OK and r.evidence["peak_busbw_gbps"] == 470.73
    wrong = evaluate_busbw(nccl_tests("crafted-wrong-values-allreduce.txt", returncode=1), TH)
    assert Status.CRITICAL in {x.status for x in wrong}
    failed = evaluate_busbw(nccl_tests("crafted-nccl-failure.txt", returncode=1), TH)
    assert Status.CRITICAL in {x.status for x in failed}
    empty = evaluate_busbw(
        nccl_tests("bitdeer-h100-8gpu-1node-allreduce.txt", stdout="", error="timed out"), TH
    )
    assert [x.status for x in empty] == [Status.UNKNOWN]


def test_a_probe_that_never_said_whether_it_could_run_is_unknown_not_not_applicable() -> None:
    """A probe out of time before it knew (e.g. importing torch) sends no ``available``: UNKNOWN with
    its error, for every check that would otherwise say "not run" (NOT_APPLICABLE)."""
    from robustctl.checks.burn import evaluate_tflops, evaluate_verify
    from robustctl.checks.nvml import evaluate_count, evaluate_ecc

    timeout = "timeout: probe ran past its 5.0 s budget; partial data"
    ctx = CheckContext(probe_errors=(timeout,), expected_gpus=8)
    for fn in (evaluate_busbw, evaluate_verify, evaluate_tflops, evaluate_count, evaluate_ecc):
        (r,) = fn({"error": timeout}, TH, ctx)
        assert r.status is Status.UNKNOWN and timeout in r.summary, (fn.__name__, r)
    (r,) = evaluate_busbw({"error": timeout}, TH)
    assert r.status is Status.UNKNOWN and r.summary == f"not run: {timeout}"
    (r,) = evaluate_busbw({"available": False, "reason": "torch is not installed"}, TH)
    assert r.status is Status.NOT_APPLICABLE
