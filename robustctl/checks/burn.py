"""Level-1 burn checks: pure evaluators of the ``burn`` probe's ``data`` (``diagnostics/burn.py``).

- ``burn.verify``: every matmul product was checked against a float64 reference; a device with
  more wrong products than ``Thresholds.burn_max_mismatches`` computes wrong answers (silent data
  corruption) and is CRITICAL, as is a GPU whose load raised an error (CUDA errors during a burn
  are hardware symptoms: ECC, XID 79, ...).
- ``burn.tflops``: the absolute floor ``burn_min_tflops`` (off by default) and, within one host,
  the peer-relative rule across its devices of the same name (a GPU below
  ``burn_peer_ratio`` × the median of its siblings; needs ``peer_min_peers`` devices). Its
  evidence also gives the measured rate as a fraction of the card's published dense peak
  (:data:`PUBLISHED_PEAKS`, looked up by :func:`published_peak`) where the card and dtype are
  known; the fraction is information, not a verdict.

The fleet-wide peer rule (one host's devices against the same devices on other hosts) needs every
host's data, so the diagnose engine applies it with :func:`robustctl.checks.peer.peer_outliers`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from robustctl.checks.host import never_told
from robustctl.checks.peer import peer_outliers
from robustctl.checks.registry import NO_CONTEXT, CheckContext, ResultMaker, check
from robustctl.models import CheckResult, Status
from robustctl.thresholds import Thresholds, beyond_max, beyond_min, ladder

LEVEL = 1


_r = ResultMaker(LEVEL)


@dataclass(frozen=True)
class CardPeak:
    """One card's published dense (no 2:4 sparsity) matmul peaks.

    Attributes:
        card: the short name used in summaries, e.g. ``"H100 SXM"``.
        names: the device names as NVML (``nvmlDeviceGetName``) and torch
            (``torch.cuda.get_device_name``) report them for this card.
        tflops: TFLOP/s per burn dtype (``"bfloat16"``, ``"float16"``, ``"float32"`` for FP32
            on the CUDA cores, ``"tf32"`` for a float32 matmul on the tensor cores).
        source: the NVIDIA document the figures come from.
    """

    card: str
    names: tuple[str, ...]
    tflops: Mapping[str, float]
    source: str


PUBLISHED_PEAKS: tuple[CardPeak, ...] = (
    CardPeak(
        "H100 SXM",
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),
        {"bfloat16": 989.4, "float16": 989.4, "tf32": 494.7, "float32": 66.9},
        "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column (sparse figures halved)",
    ),
    CardPeak(
        "H100 PCIe",
        ("NVIDIA H100 PCIe",),
        {"bfloat16": 756.0, "float16": 756.0, "tf32": 378.0, "float32": 51.2},
        "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column (sparse figures halved)",
    ),
    CardPeak(
        "H200 SXM",
        ("NVIDIA H200",),
        {"bfloat16": 989.4, "float16": 989.4, "tf32": 494.7, "float32": 66.9},
        "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column (sparse figures halved)",
    ),
    CardPeak(
        "A100",
        (
            "NVIDIA A100-SXM4-80GB",
            "NVIDIA A100-SXM4-40GB",
            "NVIDIA A100-PCIE-40GB",
            "NVIDIA A100 80GB PCIe",
        ),
        {"bfloat16": 312.0, "float16": 312.0, "tf32": 156.0, "float32": 19.5},
        "NVIDIA A100 Tensor Core GPU datasheet (SXM and PCIe alike; sparse figures halved)",
    ),
)
"""Published dense tensor-core peaks (TFLOP/s) of the cards robustctl is run on.

The figures are NVIDIA's datasheets' (H100, H200, A100), whose tensor-core entries are quoted
"with sparsity": the dense peak, the one a plain matmul can reach, is half of that (e.g. H100 SXM
BF16: 1,979 sparse → 989.4 dense). ``float32`` is the CUDA-core FP32 rate: the burn turns TF32 off
(``allow_tf32 = False``), so its float32 matmul never uses the tensor cores. Cards whose figures
could not be confirmed (H100 NVL, H200 NVL, MIG slices) are left out: their peak is None, never a
guess. A healthy H100 SXM reaches about 75-80% of its peak in the burn's N=4096 bf16 matmul
(772 TFLOP/s measured, ``tests/data/device/``).
"""


def _normal_name(name: str) -> str:
    """``name`` case-folded, runs of blanks made one, and a leading ``"NVIDIA "`` dropped."""
    words = name.split()
    if words and words[0].casefold() == "nvidia":
        words = words[1:]
    return " ".join(words).casefold()


_BY_NAME: dict[str, CardPeak] = {_normal_name(n): c for c in PUBLISHED_PEAKS for n in c.names}


def published_peak(device_name: object, dtype: object) -> tuple[CardPeak, float] | None:
    """The card and its published dense peak (TFLOP/s) for a device name and a burn dtype.

    Matching rule: the whole name must equal one of a card's :attr:`CardPeak.names`, ignoring case,
    repeated blanks and a leading ``"NVIDIA "`` (older drivers report ``"A100-SXM4-40GB"``). There is
    no substring match: ``"NVIDIA H200 NVL"`` is a different card with a lower peak than
    ``"NVIDIA H200"``, and ``"NVIDIA A100-SXM4-40GB MIG 1g.5gb"`` is a slice of one.

    Args:
        device_name: the device's name as the burn probe reports it (torch's device name).
        dtype: the burn's dtype name (``"bfloat16"``, ``"float16"``, ``"float32"``, ...).

    Returns:
        (the card, its peak) or None when the card or the dtype is not in :data:`PUBLISHED_PEAKS`.
    """
    if not isinstance(device_name, str) or not isinstance(dtype, str):
        return None
    card = _BY_NAME.get(_normal_name(device_name))
    if card is None or dtype not in card.tflops:
        return None
    return card, card.tflops[dtype]


def peak_evidence(dev: Mapping[str, Any], tflops: float) -> dict[str, float | None]:
    """``peak_tflops`` and ``peak_fraction`` (measured / peak, 4 decimals) of one burn device.

    Args:
        dev: one entry of the burn document's ``devices`` (its ``name`` and ``dtype`` are read).
        tflops: the device's measured TFLOP/s.

    Returns:
        ``{"peak_tflops": ..., "peak_fraction": ...}``, both None when the peak is not known.
    """
    found = published_peak(dev.get("name"), dev.get("dtype"))
    if found is None:
        return {"peak_tflops": None, "peak_fraction": None}
    peak = found[1]
    return {"peak_tflops": peak, "peak_fraction": round(tflops / peak, 4)}


def _peak_phrase(dev: Mapping[str, Any], tflops: float) -> str:
    """``", 78% of the H100 SXM's published 989 dense"``, or "" when the peak is not known."""
    found = published_peak(dev.get("name"), dev.get("dtype"))
    if found is None:
        return ""
    card, peak = found
    return f", {tflops / peak:.0%} of the {card.card}'s published {peak:.0f} dense"


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
    → CRITICAL. Devices without a measurement are left to ``burn.verify``.

    Each result's evidence carries ``peak_tflops`` and ``peak_fraction`` (:func:`peak_evidence`) of
    its device (the OK result: of the slowest device), None when the card or dtype has no published
    peak in :data:`PUBLISHED_PEAKS`; the OK summary then adds e.g. ``", 78% of the H100 SXM's
    published 989 dense"``. The fraction changes no verdict."""
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
                        {
                            "tflops": tf,
                            "floor": th.burn_min_tflops,
                            "dtype": dev.get("dtype"),
                            **peak_evidence(dev, tf),
                        },
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
            dev = measured[label][0]
            out.append(
                _r(
                    name,
                    Status.CRITICAL,
                    f"{label}: {tf:.3g} TFLOP/s, below {th.burn_peer_ratio:g}x the median {median:.3g} "
                    "of this host's devices",
                    {
                        "tflops": tf,
                        "host_median": median,
                        "ratio": th.burn_peer_ratio,
                        **peak_evidence(dev, tf),
                    },
                    label,
                )
            )
    if out:
        return out
    slowest, low = min(measured.values(), key=lambda dt: dt[1])
    high = max(tf for _, tf in measured.values())
    return [
        _r(
            name,
            Status.OK,
            f"{len(measured)} device(s), min {low:.3g} TFLOP/s ({data.get('dtype')}, N={data.get('size')})"
            + _peak_phrase(slowest, low),
            {
                "min_tflops": low,
                "max_tflops": high,
                "dtype": data.get("dtype"),
                **peak_evidence(slowest, low),
            },
        )
    ]
