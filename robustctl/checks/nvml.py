"""Level-0 GPU checks: pure evaluators of the ``nvml`` probe's ``data`` (``diagnostics/nvml.py``).

Common rules:

- NVML unavailable (``data.available`` false: no GPU driver/library, no pynvml) → every check but
  ``nvml.count`` is NOT_APPLICABLE ("not checked"); ``nvml.count`` decides whether that is a fault
  from the inventory's expected GPU count, which the engine passes as
  ``CheckContext.expected_gpus`` (0: no GPUs expected / unknown).
- A field that is ``null`` because the GPU does not support the query (e.g. retired pages on
  Ampere+, row remapping before Ampere, NVLink on PCIe cards) makes that GPU not applicable for the
  check; a field that is ``null`` because the query *failed* (named in the GPU's
  ``query_errors``) gives UNKNOWN for that GPU. Never OK for an unread value.
- Inaccessible GPUs (``accessible`` false, e.g. "GPU is lost") are reported by ``nvml.count``.
- One result per faulty GPU (``device="gpu<index>"``), or one OK/NOT_APPLICABLE summary.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from robustctl.checks.host import never_told, objects
from robustctl.checks.registry import NO_CONTEXT, CheckContext, ResultMaker, check
from robustctl.inventory.hostrange import compact_ranges
from robustctl.models import CheckResult, Status
from robustctl.thresholds import Thresholds, beyond_max, ladder, severity_status

__all__ = ["gpu_label"]

LEVEL = 0
GpuJudge = Callable[[Mapping[str, Any], Thresholds], list[tuple[Status, str]]]


def gpu_label(gpu: Mapping[str, Any]) -> str:
    """``"GPU 3 (00000000:3B:00.0)"`` or ``"GPU 3"``."""
    pci = gpu.get("pci_bus_id")
    return f"GPU {gpu.get('index')}" + (f" ({pci})" if pci else "")


_r = ResultMaker(LEVEL)


def _unavailable(name: str, data: Mapping[str, Any], ctx: CheckContext) -> list[CheckResult] | None:
    """The result when NVML gave no per-GPU data, else None."""
    if (lost := never_told(data)) is not None:
        return [_r(name, Status.UNKNOWN, f"not checked: {lost}")]
    if data.get("available") is not True:
        why = data.get("reason") or "NVML not available"
        return [
            _r(name, Status.NOT_APPLICABLE, f"not checked: {why}", {"reason_code": data.get("reason_code")})
        ]
    gpus = data.get("gpus")
    if not isinstance(gpus, list):
        return [_r(name, Status.UNKNOWN, "GPU list not read from NVML", {"count": data.get("count")})]
    if not gpus:
        return [_r(name, Status.NOT_APPLICABLE, "no GPU on this host")]
    return None


def _per_gpu(
    name: str,
    data: Mapping[str, Any],
    th: Thresholds,
    ctx: CheckContext,
    *,
    fields: Sequence[str],
    group: str,
    judge: GpuJudge,
    ok_summary: Callable[[list[Mapping[str, Any]]], str],
    what: str,
) -> list[CheckResult]:
    """Apply ``judge`` to every accessible GPU that reports ``fields`` (see module docstring)."""
    early = _unavailable(name, data, ctx)
    if early is not None:
        return early
    judged: list[Mapping[str, Any]] = []
    unsupported = 0
    gpus, out = objects(name, data["gpus"], "GPU")
    for gpu in gpus:
        if not gpu.get("accessible", True):
            continue
        ev = {"pci_bus_id": gpu.get("pci_bus_id"), "uuid": gpu.get("uuid"), **{f: gpu.get(f) for f in fields}}
        device = f"gpu{gpu.get('index')}"
        if all(gpu.get(f) is None for f in fields):
            errors = gpu.get("query_errors")
            failure = errors.get(group) if isinstance(errors, Mapping) else errors
            if failure:
                out.append(
                    _r(name, Status.UNKNOWN, f"{gpu_label(gpu)}: {what} not read: {failure}", ev, device)
                )
            else:
                unsupported += 1
            continue
        judged.append(gpu)
        for status, summary in judge(gpu, th):
            out.append(_r(name, status, f"{gpu_label(gpu)}: {summary}", ev, device))
    if out:
        out.sort(key=lambda r: -r.status.severity)
        return out
    if not judged:
        return [_r(name, Status.NOT_APPLICABLE, f"{what} not supported on this host's GPUs")]
    note = f" ({unsupported} GPU(s) without support)" if unsupported else ""
    return [_r(name, Status.OK, ok_summary(judged) + note, {"gpus": len(judged)})]


def _items(gpu: Mapping[str, Any], key: str) -> list[Any] | None:
    """``gpu[key]`` as a list (absent or null: empty); None when it is something else (not understood)."""
    v = gpu.get(key)
    if v is None:
        return []
    return v if isinstance(v, list) else None


def _num(gpu: Mapping[str, Any], key: str) -> int | None:
    """``gpu[key]`` as an int; None when absent, not a number, NaN or infinite (an unread value)."""
    v = gpu.get(key)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


# -------------------------------------------------------------------------------------- count
@check(
    "nvml.count",
    description="GPU count against the inventory, inaccessible GPUs",
    level=LEVEL,
    probe="nvml",
    needs_gpu=True,
    timeout_s=60.0,
)
def evaluate_count(
    data: Mapping[str, Any], th: Thresholds, ctx: CheckContext = NO_CONTEXT
) -> list[CheckResult]:
    """GPU count against the inventory's ``gpus_per_host``, and GPUs NVML cannot reach.

    Expected count ``E`` = ``ctx.expected_gpus`` (0: none expected or unknown). NVML unavailable: CRITICAL when ``E`` > 0 and the driver/library is missing or
    failed to initialise (the host cannot run its GPUs), UNKNOWN when ``E`` > 0 but only the probe's
    environment is at fault (pynvml not installed, bad injection file), NOT_APPLICABLE when ``E``
    is 0. Otherwise: fewer GPUs than ``E`` → CRITICAL ("missing GPU", AzNHC check_gpu_count); more →
    WARNING (inventory out of date); each inaccessible GPU (e.g. "GPU is lost") → CRITICAL.
    """
    name = "nvml.count"
    expected = max(0, ctx.expected_gpus)
    if (lost := never_told(data)) is not None:
        return [_r(name, Status.UNKNOWN, f"not counted: {lost}", {"expected": expected})]
    if data.get("available") is not True:
        why = data.get("reason") or "NVML not available"
        why_ev = {
            "expected": expected,
            "reason_code": data.get("reason_code"),
            "nvml_error": data.get("nvml_error"),
        }
        if not expected:
            return [_r(name, Status.NOT_APPLICABLE, f"GPUs not checked: {why}", why_ev)]
        if data.get("reason_code") in ("pynvml_missing", "injection_error"):
            return [_r(name, Status.UNKNOWN, f"cannot check the {expected} expected GPUs: {why}", why_ev)]
        return [_r(name, Status.CRITICAL, f"{expected} GPUs expected but NVML is unusable: {why}", why_ev)]
    count = data.get("count")
    gpus = data.get("gpus")
    if not isinstance(count, int) or not isinstance(gpus, list):
        return [_r(name, Status.UNKNOWN, "GPU count not read from NVML", {"expected": expected})]
    gpus, out = objects(name, gpus, "GPU")
    ev: dict[str, Any] = {"count": count, "expected": expected, "driver_version": data.get("driver_version")}
    if expected and count < expected:
        out.append(_r(name, Status.CRITICAL, f"{count} of {expected} expected GPUs visible", ev))
    elif expected and count > expected:
        out.append(_r(name, Status.WARNING, f"{count} GPUs visible, inventory expects {expected}", ev))
    for gpu in gpus:
        if not gpu.get("accessible", True):
            out.append(
                _r(
                    name,
                    Status.CRITICAL,
                    f"{gpu_label(gpu)} is inaccessible: {gpu.get('error')}",
                    {"error": gpu.get("error"), "error_code": gpu.get("error_code")},
                    f"gpu{gpu.get('index')}",
                )
            )
    if out:
        return out
    if count == 0:
        return [_r(name, Status.NOT_APPLICABLE, "no GPU on this host", ev)]
    names = sorted({str(g.get("name")) for g in gpus})
    suffix = " (as expected)" if expected else " (no expected count configured)"
    return [_r(name, Status.OK, f"{count} GPU(s): {', '.join(names)}{suffix}", ev)]


# ---------------------------------------------------------------------------------------- ECC
def _judge_ecc(g: Mapping[str, Any], th: Thresholds) -> list[tuple[Status, str]]:
    out: list[tuple[Status, str]] = []
    vu, au, vc = (
        _num(g, "ecc_volatile_uncorrected"),
        _num(g, "ecc_aggregate_uncorrected"),
        _num(g, "ecc_volatile_corrected"),
    )
    # A counter the GPU does not report (None) is left out: the other counters still judge it.
    for count, status, summary in (
        (vu, _past(vu, crit=th.ecc_uncorrected_volatile_max), "uncorrectable ECC errors since driver load"),
        (au, _past(au, warn=th.ecc_uncorrected_aggregate_max), "uncorrectable ECC errors over its lifetime"),
        (vc, _past(vc, warn=th.ecc_corrected_volatile_max), "correctable ECC errors since driver load"),
    ):
        if count is not None and status in (Status.WARNING, Status.CRITICAL):
            out.append((status, f"{count} {summary}"))
    return out


def _past(count: int | None, *, warn: int | None = None, crit: int | None = None) -> Status:
    """The ladder of a counter against ``*_max`` thresholds (the most a healthy GPU may count)."""
    return ladder(count, warn=beyond_max(warn), crit=beyond_max(crit))


@check(
    "nvml.ecc",
    description="GPU ECC error counters",
    level=LEVEL,
    probe="nvml",
    needs_gpu=True,
    timeout_s=60.0,
)
def evaluate_ecc(
    data: Mapping[str, Any], th: Thresholds, ctx: CheckContext = NO_CONTEXT
) -> list[CheckResult]:
    """ECC error counters: volatile uncorrectable above ``ecc_uncorrected_volatile_max`` → CRITICAL;
    aggregate uncorrectable above ``ecc_uncorrected_aggregate_max`` and volatile correctable above
    ``ecc_corrected_volatile_max`` → WARNING. ECC disabled/unsupported → NOT_APPLICABLE."""
    return _per_gpu(
        "nvml.ecc",
        data,
        th,
        ctx,
        fields=(
            "ecc_volatile_uncorrected",
            "ecc_aggregate_uncorrected",
            "ecc_volatile_corrected",
            "ecc_aggregate_corrected",
        ),
        group="ecc",
        judge=_judge_ecc,
        ok_summary=lambda gs: f"no uncorrectable ECC error on {len(gs)} GPU(s)",
        what="ECC counters",
    )


# -------------------------------------------------------------------------------- row remapping
def _judge_row_remap(g: Mapping[str, Any], th: Thresholds) -> list[tuple[Status, str]]:
    out: list[tuple[Status, str]] = []
    pending = severity_status(th.row_remap_pending)
    failure = severity_status(th.row_remap_failure)
    if g.get("remapped_rows_pending") and pending is not None:
        out.append((pending, "row remapping pending: reset the GPU to apply it"))
    if g.get("remapped_rows_failure") and failure is not None:
        out.append((failure, "row remapping failed: no spare rows left (replace the GPU)"))
    unc = _num(g, "remapped_rows_uncorrectable")
    if unc is not None and _past(unc, crit=th.row_remap_uncorrectable_max) is Status.CRITICAL:
        out.append(
            (
                Status.CRITICAL,
                f"{unc} rows remapped for uncorrectable errors (> {th.row_remap_uncorrectable_max})",
            )
        )
    return out


@check(
    "nvml.row_remap",
    description="GPU row remapping pending/failed",
    level=LEVEL,
    probe="nvml",
    needs_gpu=True,
    timeout_s=60.0,
)
def evaluate_row_remap(
    data: Mapping[str, Any], th: Thresholds, ctx: CheckContext = NO_CONTEXT
) -> list[CheckResult]:
    """Row remapping (Ampere+): pending → ``row_remap_pending`` (CRITICAL), failure →
    ``row_remap_failure`` (CRITICAL), uncorrectable rows above ``row_remap_uncorrectable_max`` →
    CRITICAL. Source: AzNHC azure_gpu_ecc.nhc; NVIDIA GPU Memory Error Management."""
    return _per_gpu(
        "nvml.row_remap",
        data,
        th,
        ctx,
        fields=(
            "remapped_rows_pending",
            "remapped_rows_failure",
            "remapped_rows_uncorrectable",
            "remapped_rows_correctable",
        ),
        group="remapped_rows",
        judge=_judge_row_remap,
        ok_summary=lambda gs: f"no pending or failed row remap on {len(gs)} GPU(s)",
        what="row remapping",
    )


# -------------------------------------------------------------------------------- retired pages
def _judge_retired(g: Mapping[str, Any], th: Thresholds) -> list[tuple[Status, str]]:
    out: list[tuple[Status, str]] = []
    pending = severity_status(th.retired_pages_pending)
    sbe, dbe = _num(g, "retired_pages_sbe") or 0, _num(g, "retired_pages_dbe") or 0
    if g.get("retired_pages_pending") and pending is not None:
        out.append((pending, "page retirement pending: reset the GPU to apply it"))
    if ladder(sbe + dbe, crit=th.retired_pages_total_crit) is Status.CRITICAL:
        out.append((Status.CRITICAL, f"{sbe + dbe} retired pages (>= {th.retired_pages_total_crit})"))
    elif ladder(dbe, warn=th.retired_pages_dbe_warn) is Status.WARNING:
        out.append(
            (Status.WARNING, f"{dbe} pages retired for double-bit errors (>= {th.retired_pages_dbe_warn})")
        )
    return out


@check(
    "nvml.retired_pages",
    description="GPU retired pages and pending retirement",
    level=LEVEL,
    probe="nvml",
    needs_gpu=True,
    timeout_s=60.0,
)
def evaluate_retired_pages(
    data: Mapping[str, Any], th: Thresholds, ctx: CheckContext = NO_CONTEXT
) -> list[CheckResult]:
    """Dynamic page retirement (pre-Ampere): pending → ``retired_pages_pending`` (CRITICAL);
    SBE+DBE pages at or above ``retired_pages_total_crit`` (DCGM: 63) → CRITICAL; DBE pages at or
    above ``retired_pages_dbe_warn`` (DCGM soft limit 15) → WARNING."""
    return _per_gpu(
        "nvml.retired_pages",
        data,
        th,
        ctx,
        fields=("retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending"),
        group="retired_pages",
        judge=_judge_retired,
        ok_summary=lambda gs: f"retired pages within limits on {len(gs)} GPU(s)",
        what="page retirement",
    )


# ---------------------------------------------------------------------------------- temperature
def _judge_temp(g: Mapping[str, Any], th: Thresholds) -> list[tuple[Status, str]]:
    t = _num(g, "temperature_c")
    if t is None:
        return []
    slowdown = _num(g, "temperature_slowdown_c")
    status = Status.worst(
        (ladder(t, warn=th.gpu_temp_warn_c, crit=th.gpu_temp_crit_c), ladder(t, crit=slowdown))
    )
    if status is Status.CRITICAL:
        limit = f"slowdown at {slowdown} °C" if slowdown is not None else f"limit {th.gpu_temp_crit_c:g} °C"
        return [(Status.CRITICAL, f"{t} °C ({limit})")]
    if status is Status.WARNING:
        return [(Status.WARNING, f"{t} °C (warning at {th.gpu_temp_warn_c:g} °C)")]
    return []


@check(
    "nvml.temperature",
    description="GPU temperature against limits and its slowdown threshold",
    level=LEVEL,
    probe="nvml",
    needs_gpu=True,
    timeout_s=60.0,
)
def evaluate_temperature(
    data: Mapping[str, Any], th: Thresholds, ctx: CheckContext = NO_CONTEXT
) -> list[CheckResult]:
    """GPU temperature: at or above ``gpu_temp_crit_c`` or the GPU's own NVML slowdown threshold →
    CRITICAL; at or above ``gpu_temp_warn_c`` → WARNING."""

    def ok(gs: list[Mapping[str, Any]]) -> str:
        temps = [t for t in (_num(g, "temperature_c") for g in gs) if t is not None]
        return f"max {max(temps)} °C over {len(temps)} GPU(s)" if temps else "temperatures not reported"

    return _per_gpu(
        "nvml.temperature",
        data,
        th,
        ctx,
        fields=("temperature_c",),
        group="temperature",
        judge=_judge_temp,
        ok_summary=ok,
        what="temperature",
    )


# ------------------------------------------------------------------------------------ throttle
def _judge_throttle(g: Mapping[str, Any], th: Thresholds) -> list[tuple[Status, str]]:
    reasons = _items(g, "clocks_event_reason_names")
    if reasons is None:
        return [(Status.UNKNOWN, "clock event reasons not understood")]
    names = [str(n) for n in reasons]
    crit = [n for n in names if n in th.throttle_critical_reasons]
    warn = [n for n in names if n in th.throttle_warning_reasons]
    if crit:
        return [(Status.CRITICAL, f"clocks held down by {', '.join(crit)}")]
    if warn:
        return [(Status.WARNING, f"clocks held down by {', '.join(warn)}")]
    return []


@check(
    "nvml.throttle",
    description="GPU clocks held down by hardware slowdown",
    level=LEVEL,
    probe="nvml",
    needs_gpu=True,
    timeout_s=60.0,
)
def evaluate_throttle(
    data: Mapping[str, Any], th: Thresholds, ctx: CheckContext = NO_CONTEXT
) -> list[CheckResult]:
    """Clock event (throttle) reasons: any of ``throttle_critical_reasons`` (HW slowdown, HW thermal,
    HW power brake) → CRITICAL; any of ``throttle_warning_reasons`` (SW thermal) → WARNING; idle,
    application clocks, SW power cap, sync boost and display clocks are normal."""
    return _per_gpu(
        "nvml.throttle",
        data,
        th,
        ctx,
        fields=("clocks_event_reasons",),
        group="clocks",
        judge=_judge_throttle,
        ok_summary=lambda gs: f"no hardware clock slowdown on {len(gs)} GPU(s)",
        what="clock event reasons",
    )


# ---------------------------------------------------------------------------------------- PCIe
def _judge_pcie(g: Mapping[str, Any], th: Thresholds) -> list[tuple[Status, str]]:
    out: list[tuple[Status, str]] = []
    cw, mw = _num(g, "pcie_current_width"), _num(g, "pcie_max_width")
    cg, mg = _num(g, "pcie_current_gen"), _num(g, "pcie_max_gen")
    width = severity_status(th.pcie_width_degraded)
    gen = severity_status(th.pcie_gen_degraded)
    if width is not None and cw is not None and mw is not None and cw < mw:
        out.append((width, f"PCIe link x{cw}, below its max x{mw}"))
    reasons = g.get("clocks_event_reason_names")
    busy = isinstance(reasons, list) and "gpu_idle" not in reasons
    if gen is not None and busy and cg is not None and mg is not None and cg < mg:
        out.append((gen, f"PCIe gen {cg} while busy, below its max gen {mg}"))
    return out


@check(
    "nvml.pcie",
    description="GPU PCIe link width/generation against its maximum",
    level=LEVEL,
    probe="nvml",
    needs_gpu=True,
    timeout_s=60.0,
)
def evaluate_pcie(
    data: Mapping[str, Any], th: Thresholds, ctx: CheckContext = NO_CONTEXT
) -> list[CheckResult]:
    """PCIe link vs its maximum: width below max → ``pcie_width_degraded`` (CRITICAL); generation
    below max while the GPU is not idle → ``pcie_gen_degraded`` (WARNING). An idle GPU (or one whose
    idle state is unknown) is not judged on generation: GPUs lower the link speed to save power."""
    return _per_gpu(
        "nvml.pcie",
        data,
        th,
        ctx,
        fields=("pcie_current_width", "pcie_max_width", "pcie_current_gen", "pcie_max_gen"),
        group="pcie",
        judge=_judge_pcie,
        ok_summary=lambda gs: f"PCIe links at full width on {len(gs)} GPU(s)",
        what="PCIe link",
    )


# -------------------------------------------------------------------------------------- NVLink
def _judge_nvlink(g: Mapping[str, Any], th: Thresholds) -> list[tuple[Status, str]]:
    out: list[tuple[Status, str]] = []
    items = _items(g, "nvlink")
    if items is None:
        return [(Status.UNKNOWN, "NVLink list not understood")]
    links = [lk for lk in items if isinstance(lk, Mapping)]
    inactive = [_num(lk, "link") for lk in links if lk.get("active") is False]
    sev = severity_status(th.nvlink_inactive)
    if inactive and sev is not None:
        named = compact_ranges(n for n in inactive if n is not None and n >= 0)
        out.append((sev, f"{len(inactive)} of {len(links)} NVLinks inactive (links {named or 'unnamed'})"))
    if th.nvlink_error_max is not None:
        bad = [
            f"link {lk.get('link')} {k.removesuffix('_errors')}={lk.get(k)}"
            for lk in links
            for k in ("replay_errors", "recovery_errors")
            if isinstance(lk.get(k), int) and _past(lk[k], warn=th.nvlink_error_max) is Status.WARNING
        ]
        if bad:
            out.append((Status.WARNING, f"NVLink errors above {th.nvlink_error_max}: {', '.join(bad[:6])}"))
    if th.nvlink_crc_error_max is not None:
        bad = [
            f"link {lk.get('link')} {k.removesuffix('_errors')}={lk.get(k)}"
            for lk in links
            for k in ("crc_flit_errors", "crc_data_errors")
            if isinstance(lk.get(k), int) and _past(lk[k], warn=th.nvlink_crc_error_max) is Status.WARNING
        ]
        if bad:
            out.append(
                (Status.WARNING, f"NVLink CRC errors above {th.nvlink_crc_error_max}: {', '.join(bad[:6])}")
            )
    return out


@check(
    "nvml.nvlink",
    description="NVLink state and error counters",
    level=LEVEL,
    probe="nvml",
    needs_gpu=True,
    timeout_s=60.0,
)
def evaluate_nvlink(
    data: Mapping[str, Any], th: Thresholds, ctx: CheckContext = NO_CONTEXT
) -> list[CheckResult]:
    """NVLink: any inactive link on a GPU with NVLinks → ``nvlink_inactive`` (CRITICAL; AzNHC
    azure_gpu_nvlink.nhc; set "ignore" for PCIe cards without bridges); replay/recovery counters
    above ``nvlink_error_max`` and CRC counters above ``nvlink_crc_error_max`` → WARNING. GPUs
    without NVLink → NOT_APPLICABLE."""

    def ok(gs: list[Mapping[str, Any]]) -> str:
        n = sum(len(g.get("nvlink") or []) for g in gs)
        return f"{n} NVLinks active on {len(gs)} GPU(s)"

    return _per_gpu(
        "nvml.nvlink",
        data,
        th,
        ctx,
        fields=("nvlink",),
        group="nvlink",
        judge=_judge_nvlink,
        ok_summary=ok,
        what="NVLink",
    )
