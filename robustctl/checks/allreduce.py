"""Level-2 all-reduce check: pure evaluator of the ``allreduce`` probe's ``data``
(``diagnostics/allreduce.py``), intra-host mode (local GPUs over NCCL, or local CPU processes over
gloo) and nccl-tests mode (the raw ``all_reduce_perf`` output, parsed with
:mod:`robustctl.analysis.nccl_tests`).

busbw = algbw × 2(n−1)/n for all-reduce (nccl-tests ``doc/PERFORMANCE.md``), in GB/s (1e9 B/s).
The figure judged is the **peak** busbw over the message sizes whose result was verified correct:
small messages are latency-bound and say nothing about the links.

The fleet-wide peer rule (``allreduce_peer_ratio`` × the fleet median) and the level-3
neighbour-pair blame need every host's data; the diagnose engine applies them
(:func:`robustctl.checks.peer.peer_outliers`, :func:`peak_busbw`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from robustctl.analysis.nccl_tests import evaluate as evaluate_nccl_tests
from robustctl.analysis.nccl_tests import parse_nccl_tests
from robustctl.checks.host import never_told
from robustctl.checks.registry import NO_CONTEXT, CheckContext, ResultMaker, check
from robustctl.models import CheckResult, Status
from robustctl.thresholds import Thresholds, beyond_min, ladder

__all__ = ["peak_busbw"]

LEVEL = 2
NAME = "allreduce.busbw"


_r = ResultMaker(LEVEL)


def peak_busbw(data: Mapping[str, Any]) -> float | None:
    """Peak busbw (GB/s) of an ``allreduce`` document over correctly reduced sizes, else None.

    Works for the probe's own measurements (``results``) and for nccl-tests mode (``stdout``
    parsed by :func:`robustctl.analysis.nccl_tests.parse_nccl_tests`; rows with wrong values are
    excluded by nccl-tests' own check being judged separately).
    """
    if data.get("mode") == "nccl-tests":
        peak = parse_nccl_tests(str(data.get("stdout") or "")).peak()
        return peak[0] if peak else None
    vals = [
        float(r["busbw_gbps"])
        for r in data.get("results") or []
        if isinstance(r, Mapping)
        and isinstance(r.get("busbw_gbps"), (int, float))
        and r.get("correct") is True
    ]
    return max(vals) if vals else None


def _nccl_tests(data: Mapping[str, Any], th: Thresholds) -> list[CheckResult]:
    stdout = str(data.get("stdout") or "")
    error = data.get("error")
    ev: dict[str, Any] = {"binary": data.get("binary"), "returncode": data.get("returncode"), "error": error}
    if not stdout.strip():
        why = error or "all_reduce_perf printed nothing"
        return [_r(NAME, Status.UNKNOWN, f"nccl-tests gave no output: {why}", ev)]
    verdict = evaluate_nccl_tests(parse_nccl_tests(stdout), expected_busbw_gbps=th.allreduce_min_busbw_gbps)
    ev["peak_busbw_gbps"] = verdict.details.get("peak_busbw_gbps")
    out = [
        _r(NAME, f.status, f"nccl-tests: {f.message}", {**ev, **dict(f.evidence)})
        for f in verdict.findings
        if f.status is not Status.OK
    ]
    if error and verdict.status is Status.UNKNOWN:
        out.append(_r(NAME, Status.UNKNOWN, f"nccl-tests: {error}", ev))
    return out or [_r(NAME, verdict.status, f"nccl-tests: {verdict.summary}", ev)]


@check(
    NAME,
    description="Intra-host all-reduce correctness and peak busbw",
    level=LEVEL,
    probe="allreduce",
    destructive=True,
    timeout_s=180.0,
)
def evaluate_busbw(
    data: Mapping[str, Any], th: Thresholds, ctx: CheckContext = NO_CONTEXT
) -> list[CheckResult]:
    """Correctness and bandwidth of the intra-host all-reduce.

    Probe not runnable (no torch, nccl-tests asked for but not installed) → NOT_APPLICABLE; the run
    failed (rendezvous or collective timeout, crashed rank) → CRITICAL over NCCL (GPU or NVLink
    fault), UNKNOWN over gloo (CPU processes: not a hardware verdict); wrong reduced values →
    CRITICAL; one rank → NOT_APPLICABLE (busbw is 0 by definition); peak busbw below
    ``allreduce_min_busbw_gbps`` → CRITICAL; otherwise OK with the peak busbw.
    """
    if (lost := never_told(data)) is not None:
        return [_r(NAME, Status.UNKNOWN, f"not run: {lost}")]
    if data.get("available") is not True:
        return [_r(NAME, Status.NOT_APPLICABLE, f"not run: {data.get('reason') or 'all-reduce unavailable'}")]
    if data.get("mode") == "nccl-tests":
        return _nccl_tests(data, th)
    backend = data.get("backend")
    world = data.get("world_size")
    results = [r for r in data.get("results") or [] if isinstance(r, Mapping)]
    ev: dict[str, Any] = {"backend": backend, "world_size": world, "results": results}
    out: list[CheckResult] = []
    if data.get("error"):
        status = Status.CRITICAL if backend == "nccl" else Status.UNKNOWN
        out.append(_r(NAME, status, f"{backend} all-reduce over {world} ranks failed: {data['error']}", ev))
    wrong = [r for r in results if r.get("correct") is False]
    if wrong:
        sizes = ", ".join(f"{int(r.get('size_bytes', 0))} B ({r.get('wrong_elements')} wrong)" for r in wrong)
        out.append(_r(NAME, Status.CRITICAL, f"{backend} all-reduce returned wrong values: {sizes}", ev))
    if out:
        return out
    if isinstance(world, int) and world < 2:
        return [_r(NAME, Status.NOT_APPLICABLE, "one rank: busbw is 0 by definition", ev)]
    peak = peak_busbw(data)
    if peak is None:
        return [_r(NAME, Status.UNKNOWN, "no bandwidth measured", ev)]
    ev["peak_busbw_gbps"] = peak
    summary = f"peak busbw {peak:.3g} GB/s, {backend} over {world} ranks"
    floor = th.allreduce_min_busbw_gbps
    if floor is not None and ladder(peak, crit=beyond_min(floor), higher_is_worse=False) is Status.CRITICAL:
        return [_r(NAME, Status.CRITICAL, f"{summary}, below the floor {floor:g} GB/s", ev)]
    return [_r(NAME, Status.OK, summary, ev)]
