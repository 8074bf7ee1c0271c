"""Level-1 burn checks: pure evaluators of the ``burn`` probe's ``data`` (``diagnostics/burn.py``).

- ``burn.verify``: every matmul product was checked against a float64 reference; a device with
  more wrong products than ``Thresholds.burn_max_mismatches`` computes wrong answers (silent data
  corruption) and is CRITICAL, as is a GPU whose load raised an error (CUDA errors during a burn
  are hardware symptoms: ECC, XID 79, ...).
- ``burn.tflops``: the absolute floor ``burn_min_tflops`` (off by default) and, within one host,
  the peer-relative rule across its devices of the same name (a GPU below
  ``burn_peer_ratio`` × the median of its siblings; needs ``peer_min_peers`` devices).

The fleet-wide peer rule (one host's devices against the same devices on other hosts) needs every
host's data, so the diagnose engine applies it with :func:`robustctl.checks.peer.peer_outliers`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from robustctl.checks.host import never_told
from robustctl.checks.peer import peer_outliers
from robustctl.checks.registry import NO_CONTEXT, CheckContext, ResultMaker, check
from robustctl.models import CheckResult, Status
from robustctl.thresholds import Thresholds, beyond_max, beyond_min, ladder

LEVEL = 1


_r = ResultMaker(LEVEL)


def _label(dev: Mapping[str, Any]) -> str:
    kind = dev.get("kind", "?")
    return f"{kind}:{dev.get('index', 0)}" if kind == "cuda" else str(kind)


def _devices(
    name: str, data: Mapping[str, Any], ctx: CheckContext
) -> tuple[list[Mapping[str, Any]], CheckResult | None]:
    """(the device list, None), or ([], the one result explaining why there is none)."""
    if (lost := never_told(data)) is not None:
        return [], _r(name, Status.UNKNOWN, f"not run: {lost}")
    if data.get("available") is not True:
        why = data.get("reason") or "no matmul backend"
        return [], _r(name, Status.NOT_APPLICABLE, f"not run: {why}")
    devices = [d for d in data.get("devices") or [] if isinstance(d, Mapping)]
    if not devices:
        return [], _r(name, Status.UNKNOWN, "the burn reported no device")
    return devices, None


def _cpu_instead_of_gpus(
    name: str, data: Mapping[str, Any], th: Thresholds, ctx: CheckContext
) -> CheckResult | None:
    expected = ctx.expected_gpus
    if not th.burn_require_gpu:
        return None
    if isinstance(expected, int) and expected > 0 and not data.get("cuda_available"):
        why = data.get("cuda_reason") or "no CUDA device"
        return _r(
            name,
            Status.UNKNOWN,
            f"{expected} GPUs expected but the burn ran on the CPU ({why})",
            {"expected_gpus": expected, "cuda_reason": why},
        )
    return None


@check(
    "burn.verify",
    description="Every matmul result of the burn verified against a reference",
    level=LEVEL,
    probe="burn",
    destructive=True,
    timeout_s=120.0,
)
def evaluate_verify(
    data: Mapping[str, Any], th: Thresholds, ctx: CheckContext = NO_CONTEXT
) -> list[CheckResult]:
    """Correctness of every product of the burn, per device.

    Wrong products above ``burn_max_mismatches`` → CRITICAL; a CUDA device whose load failed →
    CRITICAL (a CPU device → UNKNOWN); a device that ran no product → UNKNOWN. GPUs expected but
    the burn ran on the CPU → UNKNOWN (the GPUs were not checked) unless ``burn_require_gpu`` is
    false. No torch/numpy → NOT_APPLICABLE.
    """
    name = "burn.verify"
    devices, early = _devices(name, data, ctx)
    if early is not None:
        return [early]
    out: list[CheckResult] = []
    cpu = _cpu_instead_of_gpus(name, data, th, ctx)
    if cpu is not None:
        out.append(cpu)
    checked = 0
    for dev in devices:
        label = _label(dev)
        ev = {
            k: dev.get(k)
            for k in (
                "name",
                "dtype",
                "size",
                "checked",
                "mismatches",
                "mismatched_elements",
                "non_finite",
                "max_abs_error",
                "max_rel_error",
                "tolerance",
                "error",
            )
        }
        if dev.get("error"):
            status = Status.CRITICAL if dev.get("kind") == "cuda" else Status.UNKNOWN
            out.append(
                _r(name, status, f"{label} ({dev.get('name')}): burn failed: {dev['error']}", ev, label)
            )
            continue
        n_checked = int(dev.get("checked") or 0)
        if n_checked <= 0:
            out.append(_r(name, Status.UNKNOWN, f"{label}: no product was computed", ev, label))
            continue
        checked += n_checked
        bad = int(dev.get("mismatches") or 0)
        if ladder(bad, crit=beyond_max(th.burn_max_mismatches)) is Status.CRITICAL:
            err = dev.get("max_rel_error")
            how = (
                f"max relative error {err:.3g}" if isinstance(err, (int, float)) else "NaN/inf in the output"
            )
            out.append(
                _r(
                    name,
                    Status.CRITICAL,
                    f"{label} ({dev.get('name')}): {bad} of {n_checked} matmul results wrong ({how}): "
                    "silent data corruption",
                    ev,
                    label,
                )
            )
    if out:
        out.sort(key=lambda r: -r.status.severity)
        return out
    return [
        _r(
            name,
            Status.OK,
            f"{checked} matmul results correct on {len(devices)} device(s)",
            {"checked": checked, "dtype": data.get("dtype"), "size": data.get("size")},
        )
    ]


def host_tflops(data: Mapping[str, Any]) -> float | None:
    """The slowest healthy device's TFLOP/s of a burn document (None when none was measured).

    A host is as fast as its slowest GPU in a synchronous training step, so this is the value to
    compare across hosts with :func:`robustctl.checks.peer.peer_outliers`.
    """
    vals = [
        float(d["tflops"])
        for d in data.get("devices") or []
        if isinstance(d, Mapping) and isinstance(d.get("tflops"), (int, float)) and not d.get("error")
    ]
    return min(vals) if vals else None


@check(
    "burn.tflops",
    description="Matmul throughput per device: floor and intra-host peers",
    level=LEVEL,
    probe="burn",
    destructive=True,
    timeout_s=120.0,
)
def evaluate_tflops(
    data: Mapping[str, Any], th: Thresholds, ctx: CheckContext = NO_CONTEXT
) -> list[CheckResult]:
    """Throughput per device: below ``burn_min_tflops`` → CRITICAL; within the host, a device below
    ``burn_peer_ratio`` × the median of its same-name siblings (at least ``peer_min_peers`` of them)
    → CRITICAL. Devices without a measurement are left to ``burn.verify``."""
    name = "burn.tflops"
    devices, early = _devices(name, data, ctx)
    if early is not None:
        return [early]
    measured: dict[str, tuple[Mapping[str, Any], float]] = {}
    for dev in devices:
        tf = dev.get("tflops")
        if isinstance(tf, (int, float)) and not dev.get("error"):
            measured[_label(dev)] = (dev, float(tf))
    if not measured:
        return [_r(name, Status.UNKNOWN, "no device throughput measured")]
    out: list[CheckResult] = []
    flagged: set[str] = set()
    if th.burn_min_tflops is not None:
        floor = beyond_min(th.burn_min_tflops)
        for label, (dev, tf) in measured.items():
            if ladder(tf, crit=floor, higher_is_worse=False) is Status.CRITICAL:
                flagged.add(label)
                out.append(
                    _r(
                        name,
                        Status.CRITICAL,
                        f"{label} ({dev.get('name')}): {tf:.3g} TFLOP/s, below the floor {th.burn_min_tflops:g}",
                        {"tflops": tf, "floor": th.burn_min_tflops, "dtype": dev.get("dtype")},
                        label,
                    )
                )
    by_name: dict[str, dict[str, float]] = {}
    for label, (dev, tf) in measured.items():
        by_name.setdefault(str(dev.get("name")), {})[label] = tf
    for group in by_name.values():
        for label, (tf, median) in peer_outliers(group, th.burn_peer_ratio, th.peer_min_peers).items():
            if label in flagged:
                continue
            out.append(
                _r(
                    name,
                    Status.CRITICAL,
                    f"{label}: {tf:.3g} TFLOP/s, below {th.burn_peer_ratio:g}x the median {median:.3g} "
                    "of this host's devices",
                    {"tflops": tf, "host_median": median, "ratio": th.burn_peer_ratio},
                    label,
                )
            )
    if out:
        return out
    values = [tf for _, tf in measured.values()]
    return [
        _r(
            name,
            Status.OK,
            f"{len(values)} device(s), min {min(values):.3g} TFLOP/s ({data.get('dtype')}, N={data.get('size')})",
            {"min_tflops": min(values), "max_tflops": max(values), "dtype": data.get("dtype")},
        )
    ]
