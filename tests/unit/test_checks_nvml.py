"""Level-0 GPU evaluators (robustctl.checks.nvml) on data the nvml probe collects from FakeNvml."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from robustctl.checks.nvml import (
    evaluate_count,
    evaluate_ecc,
    evaluate_nvlink,
    evaluate_pcie,
    evaluate_retired_pages,
    evaluate_row_remap,
    evaluate_temperature,
    evaluate_throttle,
)
from robustctl.checks.registry import CheckContext, checks_for_probe
from robustctl.models import CheckResult, Status
from robustctl.probes import load_probe
from robustctl.testing.fake_nvml import (
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    Ecc,
    EccCounts,
    FakeGpu,
    FakeNvml,
    NvLink,
    Pcie,
    RemappedRows,
    RetiredPages,
    healthy_gpus,
)
from robustctl.thresholds import Thresholds

REPO = Path(__file__).resolve().parents[2]
nvml_probe = load_probe("nvml")

TH = Thresholds()
ALL = (
    evaluate_count,
    evaluate_ecc,
    evaluate_row_remap,
    evaluate_retired_pages,
    evaluate_temperature,
    evaluate_throttle,
    evaluate_pcie,
    evaluate_nvlink,
)


EIGHT = CheckContext(expected_gpus=8)  # the inventory expects 8 GPUs per host


def observe(gpus: Sequence[FakeGpu], *, init_error: int | None = None) -> dict[str, Any]:
    """What the probe reports for these GPUs."""
    doc = nvml_probe.Document("nvml")
    # the probe's own control flow, with FakeNvml standing in for the pynvml module
    nvml_probe.run_library(FakeNvml(gpus, init_error=init_error), "nvml", doc)
    return dict(doc.data)


def with_gpu(index: int, **changes: Any) -> list[FakeGpu]:
    gpus = list(healthy_gpus(8))
    gpus[index] = dataclasses.replace(gpus[index], **changes)
    return gpus


def only(results: list[CheckResult]) -> tuple[Status, str | None]:
    assert len(results) == 1, results
    return results[0].status, results[0].device


def test_every_nvml_check_is_registered_at_level_0() -> None:
    specs = checks_for_probe("nvml")
    assert {s.name for s in specs} == {
        "nvml.count",
        "nvml.ecc",
        "nvml.row_remap",
        "nvml.retired_pages",
        "nvml.temperature",
        "nvml.throttle",
        "nvml.pcie",
        "nvml.nvlink",
    }
    assert all(s.level == 0 and s.needs_gpu for s in specs)


def test_healthy_host_is_ok_or_not_applicable() -> None:
    data = observe(healthy_gpus(8))
    got = {fn.__name__: only(fn(data, TH, EIGHT))[0] for fn in ALL}
    assert got.pop("evaluate_retired_pages") is Status.NOT_APPLICABLE  # H100: row remapping instead
    assert set(got.values()) == {Status.OK}


def test_no_gpu_and_no_driver_is_not_checked_never_ok() -> None:
    data = observe([], init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
    assert data["available"] is False and data["reason_code"] == "library_not_found"
    for fn in ALL:
        status, _ = only(fn(data, TH, CheckContext(expected_gpus=0)))
        assert status is Status.NOT_APPLICABLE, fn.__name__


def test_missing_driver_on_a_gpu_host_is_critical() -> None:
    data = observe([], init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
    out = evaluate_count(data, TH, EIGHT)
    assert only(out) == (Status.CRITICAL, None) and "8 GPUs expected" in out[0].summary


def test_count_missing_extra_and_lost_gpus() -> None:
    assert only(evaluate_count(observe(healthy_gpus(7)), TH, EIGHT))[0] is Status.CRITICAL
    assert only(evaluate_count(observe(healthy_gpus(9)), TH, EIGHT))[0] is Status.WARNING
    assert only(evaluate_count(observe(healthy_gpus(2)), TH))[0] is Status.OK  # nothing expected
    lost = evaluate_count(observe(with_gpu(3, lost=True)), TH, EIGHT)
    assert only(lost) == (Status.CRITICAL, "gpu3") and "GPU is lost" in lost[0].summary


def test_pending_row_remap_is_critical() -> None:
    data = observe(with_gpu(5, remapped_rows=RemappedRows(uncorrectable=1, pending=True)))
    out = evaluate_row_remap(data, TH)
    assert only(out) == (Status.CRITICAL, "gpu5")
    assert "pending" in out[0].summary and out[0].evidence["remapped_rows_pending"] is True
    assert only(evaluate_row_remap(data, Thresholds(row_remap_pending="ignore")))[0] is Status.OK


def test_row_remap_failure_and_too_many_rows() -> None:
    data = observe(with_gpu(0, remapped_rows=RemappedRows(uncorrectable=600, failure=True)))
    out = evaluate_row_remap(data, TH)
    assert [r.status for r in out] == [Status.CRITICAL, Status.CRITICAL]


def test_ecc_rules() -> None:
    data = observe(with_gpu(1, ecc=Ecc(EccCounts(corrected=20000, uncorrected=2), EccCounts(uncorrected=9))))
    out = evaluate_ecc(data, TH)
    assert [(r.status, r.device) for r in out] == [(Status.CRITICAL, "gpu1"), (Status.WARNING, "gpu1")]
    out = evaluate_ecc(data, Thresholds(ecc_uncorrected_aggregate_max=5, ecc_corrected_volatile_max=None))
    assert [r.status for r in out] == [Status.CRITICAL, Status.WARNING]
    assert "lifetime" in out[1].summary
    assert only(evaluate_ecc(observe(healthy_gpus(8, ecc=None)), TH))[0] is Status.NOT_APPLICABLE


def test_retired_pages_rules() -> None:
    v100 = healthy_gpus(8, remapped_rows=None, retired_pages=RetiredPages())
    assert only(evaluate_retired_pages(observe(v100), TH))[0] is Status.OK
    assert only(evaluate_row_remap(observe(v100), TH))[0] is Status.NOT_APPLICABLE
    pending = list(v100)
    pending[2] = dataclasses.replace(pending[2], retired_pages=RetiredPages(double_bit=(1,), pending=True))
    assert only(evaluate_retired_pages(observe(pending), TH)) == (Status.CRITICAL, "gpu2")
    many = list(v100)
    many[4] = dataclasses.replace(many[4], retired_pages=RetiredPages(tuple(range(50)), tuple(range(13))))
    assert only(evaluate_retired_pages(observe(many), TH)) == (Status.CRITICAL, "gpu4")
    dbe = list(v100)
    dbe[4] = dataclasses.replace(dbe[4], retired_pages=RetiredPages((), tuple(range(15))))
    assert only(evaluate_retired_pages(observe(dbe), TH)) == (Status.WARNING, "gpu4")


@pytest.mark.parametrize(
    ("temp", "slowdown", "expected"),
    [(40, 87, Status.OK), (86, 95, Status.WARNING), (91, None, Status.CRITICAL), (84, 84, Status.CRITICAL)],
)
def test_temperature(temp: int, slowdown: int | None, expected: Status) -> None:
    data = observe(with_gpu(6, temperature_c=temp, temperature_slowdown_c=slowdown))
    status, device = only(evaluate_temperature(data, TH))
    assert status is expected and device == (None if expected is Status.OK else "gpu6")


def test_query_failure_is_unknown_not_ok() -> None:
    data = observe(with_gpu(2, errors={"nvmlDeviceGetTemperature": NVML_ERROR_NO_PERMISSION}))
    out = evaluate_temperature(data, TH)
    assert only(out) == (Status.UNKNOWN, "gpu2") and "Insufficient Permissions" in out[0].summary


def test_throttle_reasons() -> None:
    idle_sw_cap = observe(with_gpu(0, clocks_event_reasons=0x1 | 0x4))
    assert only(evaluate_throttle(idle_sw_cap, TH))[0] is Status.OK
    hw = observe(with_gpu(7, clocks_event_reasons=0x80))
    out = evaluate_throttle(hw, TH)
    assert only(out) == (Status.CRITICAL, "gpu7") and "hw_power_brake_slowdown" in out[0].summary
    assert only(evaluate_throttle(observe(with_gpu(7, clocks_event_reasons=0x20)), TH))[0] is Status.WARNING


def test_pcie_width_always_gen_only_when_busy() -> None:
    narrow = observe(with_gpu(3, pcie=Pcie(current_width=8)))
    assert only(evaluate_pcie(narrow, TH)) == (Status.CRITICAL, "gpu3")
    idle_slow = observe(with_gpu(3, pcie=Pcie(current_gen=1), clocks_event_reasons=0x1))
    assert only(evaluate_pcie(idle_slow, TH))[0] is Status.OK
    busy_slow = observe(with_gpu(3, pcie=Pcie(current_gen=3), clocks_event_reasons=0x0))
    assert only(evaluate_pcie(busy_slow, TH)) == (Status.WARNING, "gpu3")


def test_nvlink_inactive_and_errors() -> None:
    links = tuple(NvLink(active=i not in (4, 5, 6)) for i in range(18))
    out = evaluate_nvlink(observe(with_gpu(1, nvlink=links)), TH)
    assert only(out) == (Status.CRITICAL, "gpu1") and "3 of 18" in out[0].summary and "4-6" in out[0].summary
    noisy = tuple(NvLink(replay=3 if i == 0 else 0, crc_flit=10**6) for i in range(18))
    out = evaluate_nvlink(observe(with_gpu(1, nvlink=noisy)), TH)
    assert only(out) == (Status.WARNING, "gpu1")  # replay counted; CRC off by default
    out = evaluate_nvlink(observe(with_gpu(1, nvlink=noisy)), Thresholds(nvlink_crc_error_max=100))
    assert [r.status for r in out] == [Status.WARNING, Status.WARNING]
    pcie_cards = observe(healthy_gpus(8, nvlink=None))
    assert only(evaluate_nvlink(pcie_cards, TH))[0] is Status.NOT_APPLICABLE
