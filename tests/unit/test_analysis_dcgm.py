"""``dcgmi diag`` parser and verdict on real samples (tests/data/dcgm/INDEX.md) and crafted layouts."""

from __future__ import annotations

from pathlib import Path

import pytest

from robustctl.analysis.dcgm import DcgmResult, evaluate, looks_like_dcgm_diag, parse_dcgm_diag
from robustctl.models import Status

DATA = Path(__file__).resolve().parents[1] / "data" / "dcgm"


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_mlengineering_r2_fragment_gpu0_memory_fail() -> None:
    d = parse_dcgm_diag(load("mlengineering-r2-faulty-node-gpu0-memory-fail-FRAGMENT.txt"))
    assert not d.has_header
    (t,) = d.tests
    assert t.name == "GPU Memory" and t.result is DcgmResult.FAIL
    assert {g.gpu: g.result for g in t.gpu_results} == {
        0: DcgmResult.FAIL,
        **{i: DcgmResult.PASS for i in range(1, 8)},
    }
    assert t.failed_gpus == (0,)
    # the wrapped warning is rejoined mid-word: "second" + "s started", "GP" + "U 0"
    (w,) = t.warnings
    assert w.startswith("GPU 0 Thermal violations totaling 13.3 seconds started at 9.7 seconds")
    assert "for GPU 0 Verify that the cooling" in w
    assert w.endswith("thermal material interface, fans, and any other components.")
    v = evaluate(d)
    assert v.status is Status.CRITICAL
    assert v.findings[0].device == "GPU 0"
    assert "GPU Memory: failed on GPU 0" in v.summary


def test_mlengineering_xid64_fragment_gpu3_error() -> None:
    d = parse_dcgm_diag(load("mlengineering-xid64-row-remap-pending-FRAGMENT.txt"))
    assert d.has_header
    (t,) = d.tests
    assert t.section == "Deployment"
    assert t.result is DcgmResult.ERROR
    assert t.errors == ("GPU 3 has uncorrectable memory errors and row remappings are pending",)
    assert t.gpus_named == (3,)
    v = evaluate(d)
    assert v.status is Status.CRITICAL
    assert v.findings[0].device == "GPU 3"
    assert "row remappings are pending" in v.findings[0].message


def test_dcgm4_issue253_internal_error_is_unknown_not_a_gpu_fault() -> None:
    d = parse_dcgm_diag(load("dcgm4.2.3-issue253-pcie-internal-error-fail.txt"))
    assert d.layout == "4.x"
    assert d.metadata["DCGM Version"] == "4.2.3"
    assert [(t.section, t.name, t.result) for t in d.tests] == [
        ("Deployment", "software", DcgmResult.PASS),
        ("Hardware", "memory", DcgmResult.PASS),
        ("Integration", "pcie", DcgmResult.FAIL),
    ]
    pcie = d.tests[2]
    assert len(pcie.warnings) == 4
    assert pcie.warnings[0] == (
        "There was an internal error during the test: 'A child process (152) exited with non-zero status 1' "
        "Check DCGM and system logs for errors. Reset GPU. Restart DCGM. Rerun diagnostics."
    )
    assert (
        "couldn't be parsed: '* Line 1, Column 1 Syntax error: value, object or array expected."
        in (pcie.warnings[2])
    )
    assert [g.result for g in pcie.gpu_results] == [DcgmResult.PASS] * 4
    v = evaluate(d)
    assert v.status is Status.UNKNOWN
    assert v.findings[0].device is None
    assert "internal error" in v.findings[0].message


def test_dcgm4_issue124_all_pass() -> None:
    d = parse_dcgm_diag(load("dcgm4.4.2-issue124-r2-pass.txt"))
    assert d.layout == "4.x" and d.has_header
    assert [t.name for t in d.tests] == ["software", "memory", "pcie"]
    assert all(t.result is DcgmResult.PASS for t in d.tests)
    assert all(t.gpu_results == (t.gpu_results[0],) and t.gpu_results[0].gpu == 0 for t in d.tests)
    v = evaluate(d)
    assert v.status is Status.OK
    assert v.summary == "dcgmi diag (DCGM 4.4.2): 3 pass"


def test_crafted_dcgm4_fail_warn_skip() -> None:
    d = parse_dcgm_diag(load("crafted-dcgm4-gpu2-memory-fail-skip.txt"))
    by_name = {t.name: t for t in d.tests}
    assert by_name["memory"].failed_gpus == (2,)
    assert by_name["memory"].errors == (
        "GPU 2 Detected 3 uncorrectable DRAM errors, see dmesg for Xid 48. Drain and reset the GPU.",
    )
    assert by_name["diagnostic"].result is DcgmResult.SKIP
    assert by_name["pcie"].result is DcgmResult.WARN
    v = evaluate(d)
    assert v.status is Status.CRITICAL
    statuses = {f.evidence.get("test", "skipped"): f.status for f in v.findings}
    assert statuses["memory"] is Status.CRITICAL
    assert statuses["pcie"] is Status.WARNING
    skipped = [f for f in v.findings if f.status is Status.SKIPPED]
    assert skipped and "diagnostic" in skipped[0].message  # Skip is never Pass
    assert [f.device for f in v.findings if f.status is Status.CRITICAL] == ["GPU 2"]


def test_crafted_dcgm4_all_gpu_tests_skipped_is_unknown() -> None:
    v = evaluate(parse_dcgm_diag(load("crafted-dcgm4-all-gpu-tests-skipped.txt")))
    assert v.status is Status.UNKNOWN
    assert "no GPU test ran" in v.summary


def test_crafted_dcgm3_all_forms() -> None:
    d = parse_dcgm_diag(load("crafted-dcgm3-skip-all-fail-all.txt"))
    assert d.layout == "3.x"
    by_name = {t.name: t for t in d.tests}
    assert by_name["PCIe"].result is DcgmResult.FAIL and by_name["PCIe"].all_gpus is DcgmResult.FAIL
    assert by_name["PCIe"].warnings == (
        "GPU 0 GPU to Host bandwidth 2.1 GB/s is below the minimum 18.0 GB/s. Check the PCIe link width and "
        "generation.",
    )
    assert by_name["PCIe"].info == ("GPU 1 GPU to Host bandwidth: 24.26 GB/s",)
    assert by_name["GPU Memory"].all_gpus is DcgmResult.PASS
    assert by_name["Targeted Stress"].result is DcgmResult.SKIP
    v = evaluate(d)
    assert v.status is Status.CRITICAL
    assert v.findings[0].device == "GPU 0"
    assert any(f.status is Status.SKIPPED and "Targeted Power" in f.message for f in v.findings)


def test_warning_row_under_passing_test_is_warning() -> None:
    text = (
        "| Persistence Mode          | Pass                                           |\n"
        "| Warning                   | Persistence mode for GPU 1 is disabled.        |\n"
        "| GPU Memory                | Pass - All                                     |\n"
    )
    d = parse_dcgm_diag(text)
    assert d.tests[0].result is DcgmResult.WARN
    v = evaluate(d)
    assert v.status is Status.WARNING
    assert v.findings[0].device == "GPU 1"


@pytest.mark.parametrize(
    "text",
    ["", "garbage\n", "|||\n", "| a |\n", "+----+\n", "|-----  Hardware  ----+----|\n", "\x00|\x00|"],
)
def test_garbage_never_raises(text: str) -> None:
    v = evaluate(parse_dcgm_diag(text))
    assert v.status in (Status.UNKNOWN, Status.OK, Status.WARNING, Status.CRITICAL)


def test_empty_is_unknown() -> None:
    assert evaluate(parse_dcgm_diag("")).status is Status.UNKNOWN


def test_sniff() -> None:
    for name in DATA.glob("*.txt"):
        assert looks_like_dcgm_diag(name.read_text()), name
    assert not looks_like_dcgm_diag("# Avg bus bandwidth    : 448.212\n")
    assert not looks_like_dcgm_diag(
        "| NVIDIA-SMI 550.90.07   Driver Version: 550.90.07   CUDA Version: 12.4 |\n"
    )


@pytest.mark.parametrize(
    ("version", "layout"), [("4rc.2", "4.x"), ("3-beta", "3.x"), ("9" * 5000, "4.x"), ("10.1", "4.x")]
)
def test_a_garbled_dcgm_version_names_a_layout_instead_of_raising(version: str, layout: str) -> None:
    text = load("dcgm4.4.2-issue124-r2-pass.txt").replace("| 4.4.2  ", f"| {version}  ", 1)
    d = parse_dcgm_diag(text)
    assert d.metadata["DCGM Version"].startswith(version[:100]) and d.layout == layout
    assert evaluate(d).status is Status.OK
