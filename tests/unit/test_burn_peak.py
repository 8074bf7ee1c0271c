"""The burn against the card's published peak, and the checks over what a real H100 returned.

The real documents are in ``tests/data/device/`` (see its SOURCE): ``robustctl diagnose
--all-levels --json`` and the NVML probe's own document, both from one H100 SXM run of
``scripts/device-check.sh``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from robustctl.checks.burn import PUBLISHED_PEAKS, evaluate_tflops, evaluate_verify, published_peak
from robustctl.checks.registry import NO_CONTEXT, checks_for_probe
from robustctl.models import Status
from robustctl.testing.fake_nvml import healthy_gpus, write_injection
from robustctl.thresholds import Thresholds

REPO = Path(__file__).resolve().parents[2]
DEVICE = REPO / "tests" / "data" / "device"
TH = Thresholds()


def load(name: str) -> dict[str, Any]:
    doc = json.loads((DEVICE / name).read_text())
    assert isinstance(doc, dict)
    return doc


def recorded_checks() -> dict[str, dict[str, Any]]:
    """The real diagnose document's results by check name (one host, no per-device results)."""
    (host,) = load("h100-diagnose.json")["hosts"]
    return {c["name"]: c for c in host["checks"]}


def real_gpu() -> dict[str, Any]:
    (gpu,) = load("h100-nvml-probe.json")["data"]["gpus"]
    assert isinstance(gpu, dict)
    return gpu


def burn_doc(name: str, tflops: float, *, size: int = 4096, checked: int = 4974) -> dict[str, Any]:
    """A one-GPU burn document with the figures the real run reported."""
    dev = {
        "index": 0,
        "name": name,
        "kind": "cuda",
        "dtype": "bfloat16",
        "size": size,
        "iterations": checked - 1,
        "checked": checked,
        "mismatches": 0,
        "mismatched_elements": 0,
        "non_finite": 0,
        "max_abs_error": 0.01,
        "max_rel_error": 0.0002,
        "tolerance": 0.9,
        "tflops": tflops,
        "error": None,
    }
    return {
        "available": True,
        "backend": "torch",
        "dtype": "bfloat16",
        "size": size,
        "cuda_available": True,
        "cuda_reason": None,
        "devices": [dev],
    }


# --------------------------------------------------------------------------- the peak table
@pytest.mark.parametrize(
    ("name", "dtype", "card", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", "bfloat16", "H100 SXM", 989.4),
        ("NVIDIA H100 80GB HBM3", "float32", "H100 SXM", 66.9),
        ("NVIDIA H100 PCIe", "float16", "H100 PCIe", 756.0),
        ("NVIDIA H100 PCIe", "tf32", "H100 PCIe", 378.0),
        ("NVIDIA H200", "bfloat16", "H200 SXM", 989.4),
        ("NVIDIA A100-SXM4-80GB", "bfloat16", "A100", 312.0),
        ("NVIDIA A100 80GB PCIe", "tf32", "A100", 156.0),
        ("A100-PCIE-40GB", "float32", "A100", 19.5),  # older drivers: no "NVIDIA " prefix
        ("nvidia  a100-sxm4-40gb", "bfloat16", "A100", 312.0),  # case and blanks
    ],
)
def test_known_cards_and_dtypes_have_their_published_peak(
    name: str, dtype: str, card: str, peak: float
) -> None:
    found = published_peak(name, dtype)
    assert found is not None and found[0].card == card and found[1] == peak


@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("NVIDIA H200 NVL", "bfloat16"),  # a different card: no substring match on "NVIDIA H200"
        ("NVIDIA H100 NVL", "bfloat16"),  # not confirmed: left out
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "bfloat16"),  # a slice of a card
        ("NVIDIA H100", "bfloat16"),  # not a name a driver reports for a known card
        ("AMD EPYC 9654", "float32"),  # the CPU burn
        ("NVIDIA H100 80GB HBM3", "float64"),  # a dtype without a figure
        (None, "bfloat16"),
        ("NVIDIA H100 80GB HBM3", None),
    ],
)
def test_unknown_card_or_dtype_has_no_peak(name: Any, dtype: Any) -> None:
    assert published_peak(name, dtype) is None


def test_every_table_entry_is_dense_and_sourced() -> None:
    """Dense figures only: a tensor dtype's peak is at most the H100 SXM's dense bf16 peak, never
    its sparse 1,979; each card names its datasheet and reports names that are not shared."""
    seen: set[str] = set()
    for card in PUBLISHED_PEAKS:
        assert "datasheet" in card.source
        assert all(0 < v <= 989.4 for v in card.tflops.values()), card
        assert card.tflops["float32"] < card.tflops["tf32"] < card.tflops["bfloat16"]
        assert not seen & set(card.names)
        seen |= set(card.names)


# --------------------------------------------------------------------------- burn.tflops with the peak
def test_the_real_h100_run_is_78_percent_of_its_published_peak() -> None:
    """The recorded burn: 772 TFLOP/s bf16 on "NVIDIA H100 80GB HBM3" (the name real NVML gave)."""
    checks = recorded_checks()
    recorded = checks["burn.tflops"]
    assert recorded["status"] == "ok" and recorded["evidence"]["dtype"] == "bfloat16"
    tflops = recorded["evidence"]["min_tflops"]
    name = real_gpu()["name"]
    assert name == "NVIDIA H100 80GB HBM3"
    (r,) = evaluate_tflops(burn_doc(name, tflops), TH)
    assert r.status is Status.OK
    # the recorded summary is still the prefix: whatever reads it keeps working
    assert r.summary == recorded["summary"] + ", 78% of the H100 SXM's published 989 dense"
    assert r.evidence["peak_tflops"] == 989.4 and r.evidence["peak_fraction"] == 0.7805
    for key in ("min_tflops", "max_tflops", "dtype"):
        assert r.evidence[key] == recorded["evidence"][key]
    (v,) = evaluate_verify(burn_doc(name, tflops), TH)
    assert (v.status.value, v.summary) == (
        checks["burn.verify"]["status"],
        checks["burn.verify"]["summary"],
    )


def test_an_unknown_card_keeps_the_old_summary_and_says_none() -> None:
    (r,) = evaluate_tflops(burn_doc("NVIDIA H100 NVL", 772.197218), TH)
    assert r.summary == "1 device(s), min 772 TFLOP/s (bfloat16, N=4096)"
    assert r.evidence["peak_tflops"] is None and r.evidence["peak_fraction"] is None


def test_the_fraction_changes_no_verdict() -> None:
    """A card at 10% of its peak is still OK: only the floor and the peer rule judge."""
    (r,) = evaluate_tflops(burn_doc("NVIDIA H100 80GB HBM3", 98.94), TH)
    assert r.status is Status.OK and r.evidence["peak_fraction"] == 0.1 and "10% of the H100 SXM" in r.summary


def test_each_critical_result_carries_its_devices_peak() -> None:
    doc = burn_doc("NVIDIA A100-SXM4-80GB", 156.0)
    (floor,) = evaluate_tflops(doc, Thresholds(burn_min_tflops=200))
    assert floor.status is Status.CRITICAL and floor.device == "cuda:0"
    assert floor.evidence["peak_tflops"] == 312.0 and floor.evidence["peak_fraction"] == 0.5
    base = doc["devices"][0]
    doc["devices"] = [{**base, "index": i, "tflops": 300.0} for i in range(7)] + [{**base, "index": 7}]
    (peer,) = evaluate_tflops(doc, TH)
    assert peer.status is Status.CRITICAL and peer.device == "cuda:7" and "host_median" in peer.evidence
    assert peer.evidence["peak_fraction"] == 0.5


# --------------------------------------------------------------------------- real NVML
def test_the_nvml_checks_over_the_real_probe_document_give_the_recorded_verdicts() -> None:
    """Every NVML check judges what real NVML returned on the H100 as that run's diagnose did; none
    is UNKNOWN (a field it could not read would make it so)."""
    doc = load("h100-nvml-probe.json")
    assert doc["errors"] == [] and real_gpu()["query_errors"] == {}
    recorded = recorded_checks()
    got = {}
    for spec in checks_for_probe("nvml"):
        results = spec.evaluate(doc["data"], TH, NO_CONTEXT)
        assert all(r.status is not Status.UNKNOWN for r in results), results
        (r,) = results
        got[spec.name] = r.status.value
    assert got == {name: recorded[name]["status"] for name in got}
    assert got["nvml.nvlink"] == got["nvml.retired_pages"] == "not_applicable"


def test_real_nvml_fields_are_the_ones_the_probe_documents(tmp_path: Path) -> None:
    """The field set real NVML gave is exactly the one the injection reader gives (what every other
    test of the NVML checks reads), with the same value types, nulls for what the card does not
    support."""
    path = write_injection(tmp_path / "nvml.json", healthy_gpus(1))
    real = real_gpu()
    proc = subprocess.run(
        [sys.executable, str(REPO / "diagnostics" / "nvml.py"), "--nvml-injection", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    (fake,) = json.loads(proc.stdout)["data"]["gpus"]
    assert set(real) == set(fake)
    for key, value in real.items():
        if value is not None and fake[key] is not None:
            assert type(value) is type(fake[key]), key
    assert sorted(k for k, v in real.items() if v is None) == [
        "error",
        "error_code",
        "nvlink",
        "retired_pages_dbe",
        "retired_pages_pending",
        "retired_pages_sbe",
    ]
