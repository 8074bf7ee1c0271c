"""Level-1 burn evaluators (robustctl.checks.burn) on plain probe data."""

from __future__ import annotations

from typing import Any

from robustctl.checks.burn import evaluate_tflops, evaluate_verify, host_tflops
from robustctl.checks.registry import CheckContext, checks_for_probe
from robustctl.models import Status
from robustctl.thresholds import Thresholds

TH = Thresholds()
EIGHT = CheckContext(expected_gpus=8)  # the inventory expects 8 GPUs per host


def dev(index: int, tflops: float | None = 700.0, *, kind: str = "cuda", **kw: Any) -> dict[str, Any]:
    d = {
        "index": index,
        "name": "NVIDIA H100 80GB HBM3" if kind == "cuda" else "AMD EPYC",
        "kind": kind,
        "dtype": "bfloat16",
        "size": 4096,
        "iterations": 1000,
        "checked": 1001,
        "mismatches": 0,
        "mismatched_elements": 0,
        "non_finite": 0,
        "max_abs_error": 0.01,
        "max_rel_error": 0.0002,
        "tolerance": 0.9,
        "tflops": tflops,
        "error": None,
    }
    d.update(kw)
    return d


def burn_data(devices: list[dict[str, Any]], *, cuda: bool = True) -> dict[str, Any]:
    return {
        "available": True,
        "backend": "torch",
        "dtype": "bfloat16",
        "size": 4096,
        "cuda_available": cuda,
        "cuda_reason": None if cuda else "torch has no CUDA support",
        "devices": devices,
    }


def test_registered_at_level_1_as_destructive() -> None:
    specs = {s.name: s for s in checks_for_probe("burn")}
    assert set(specs) == {"burn.verify", "burn.tflops"}
    assert all(s.level == 1 and s.destructive for s in specs.values())


def test_healthy_gpus() -> None:
    data = burn_data([dev(i) for i in range(8)])
    (v,) = evaluate_verify(data, TH)
    assert v.status is Status.OK and "8008 matmul results correct" in v.summary
    (t,) = evaluate_tflops(data, TH)
    assert t.status is Status.OK and t.evidence["min_tflops"] == 700.0


def test_wrong_results_are_critical_silent_data_corruption() -> None:
    data = burn_data([dev(i) for i in range(7)] + [dev(7, mismatches=3, mismatched_elements=5)])
    out = evaluate_verify(data, TH)
    assert [(r.status, r.device) for r in out] == [(Status.CRITICAL, "cuda:7")]
    assert "3 of 1001" in out[0].summary and "silent data corruption" in out[0].summary
    assert [r.status for r in evaluate_verify(data, Thresholds(burn_max_mismatches=5))] == [Status.OK]
    nan = burn_data([dev(0, mismatches=1, max_rel_error=None, non_finite=4)])
    assert "NaN/inf" in evaluate_verify(nan, TH)[0].summary


def test_device_errors() -> None:
    cuda_err = burn_data(
        [dev(0), dev(1, tflops=None, error="RuntimeError: CUDA error: uncorrectable ECC error")]
    )
    out = evaluate_verify(cuda_err, TH)
    assert [(r.status, r.device) for r in out] == [(Status.CRITICAL, "cuda:1")]
    cpu_err = burn_data([dev(0, kind="cpu", tflops=None, error="MemoryError")], cuda=False)
    assert evaluate_verify(cpu_err, TH)[0].status is Status.UNKNOWN
    nothing = burn_data([dev(0, checked=0, iterations=0, tflops=None)])
    assert evaluate_verify(nothing, TH)[0].status is Status.UNKNOWN
    assert evaluate_tflops(nothing, TH)[0].status is Status.UNKNOWN


def test_not_available_and_cpu_instead_of_gpus() -> None:
    none = {
        "available": False,
        "reason": "no torch or numpy to run a matmul load",
        "reason_code": "no_backend",
    }
    for fn in (evaluate_verify, evaluate_tflops):
        (r,) = fn(none, TH)
        assert r.status is Status.NOT_APPLICABLE and "no torch" in r.summary
    cpu_on_gpu_host = burn_data([dev(0, 0.1, kind="cpu")], cuda=False)
    out = evaluate_verify(cpu_on_gpu_host, TH, EIGHT)
    assert [r.status for r in out] == [Status.UNKNOWN] and "8 GPUs expected" in out[0].summary
    relaxed = evaluate_verify(cpu_on_gpu_host, Thresholds(burn_require_gpu=False), EIGHT)
    assert [r.status for r in relaxed] == [Status.OK]
    cpu_host = burn_data([dev(0, 0.1, kind="cpu")], cuda=False)
    assert [r.status for r in evaluate_verify(cpu_host, TH, CheckContext(expected_gpus=0))] == [Status.OK]


def test_absolute_floor() -> None:
    data = burn_data([dev(0, 700.0), dev(1, 300.0)])
    assert [r.status for r in evaluate_tflops(data, TH)] == [Status.OK]  # floor off, 2 peers: no rule
    out = evaluate_tflops(data, Thresholds(burn_min_tflops=500))
    assert [(r.status, r.device) for r in out] == [(Status.CRITICAL, "cuda:1")]


def test_slow_gpu_among_its_siblings() -> None:
    data = burn_data([dev(i, 700.0 + i) for i in range(7)] + [dev(7, 560.0)])
    out = evaluate_tflops(data, TH)
    assert [(r.status, r.device) for r in out] == [(Status.CRITICAL, "cuda:7")]
    assert out[0].evidence["host_median"] > 700 and "0.9x" in out[0].summary
    assert [r.status for r in evaluate_tflops(data, Thresholds(burn_peer_ratio=0.75))] == [Status.OK]


def test_host_tflops_is_the_slowest_healthy_device() -> None:
    data = burn_data([dev(0, 700.0), dev(1, 650.0), dev(2, None, error="boom")])
    assert host_tflops(data) == 650.0
    assert host_tflops({"devices": []}) is None
