"""Artefact-kind detection by content and ``analyze_paths`` over files (good, bad and unreadable)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from robustctl.analysis import Verdict
from robustctl.analysis.detect import (
    UNKNOWN_KIND,
    AnalysisOptions,
    AnalysisReport,
    ArtefactKind,
    analyze_paths,
    analyze_text,
    detect_kind,
    kinds,
    register_kind,
)
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION, Status, to_jsonable

DATA = Path(__file__).resolve().parents[1] / "data"

EXPECTED = {
    "nccl-tests/bitdeer-h100-8gpu-1node-allreduce.txt": ("nccl-tests", Status.OK),
    "nccl-tests/taylor-h100-8gpu-1node-nvlink-alltoall.txt": ("nccl-tests", Status.OK),
    "nccl-tests/llminsights-a40-4gpu-sys-p2pdisabled-allreduce.txt": ("nccl-tests", Status.OK),
    "nccl-tests/issue-nccltests37-v100-8gpu-allgather-oob-failed.txt": ("nccl-tests", Status.CRITICAL),
    "nccl-tests/issue-nccltests287-rtx5090-1gpu-alltoall-avg0.txt": ("nccl-tests", Status.NOT_APPLICABLE),
    "nccl-tests/crafted-mpi-prefixed-2node-allreduce.txt": ("nccl-tests", Status.OK),
    "nccl-tests/crafted-wrong-values-allreduce.txt": ("nccl-tests", Status.CRITICAL),
    "nccl-tests/crafted-busbw-zero-8ranks.txt": ("nccl-tests", Status.CRITICAL),
    "nccl-tests/crafted-truncated-middle-allgather.txt": ("nccl-tests", Status.OK),
    "nccl-tests/crafted-nccl-failure.txt": ("nccl-tests", Status.CRITICAL),
    "nccl-tests/recon-prepend-rank-midrow-bitdeer-h100-allreduce.txt": ("nccl-tests", Status.OK),
    "nccl-tests/recon-tag-output-split-rows-taylor-h100-alltoall.txt": ("nccl-tests", Status.OK),
    "nccl-tests/recon-busbw-collapse-taylor-h100-alltoall.txt": ("nccl-tests", Status.WARNING),
    "nccl-tests/recon-ray-mpirun-prefixed-bitdeer-h100-allreduce.txt": ("nccl-tests", Status.OK),
    "nccl-tests/issue-nccltests264-h100-8gpu-cuda-system-not-initialized.txt": (
        "nccl-tests",
        Status.CRITICAL,
    ),
    "nccl-tests/issue-nccltests252-h100-2node-ib-completion-error.txt": ("nccl-tests", Status.CRITICAL),
    "nccl-tests/issue-nccltests14-docker-8gpu-socket-no-interface.txt": ("nccl-tests", Status.CRITICAL),
    "nccl-tests/issue-nccltests5-p100-8gpu-nccl1-unhandled-cuda.txt": ("nccl-tests", Status.CRITICAL),
    "nccl-tests/issue-nccl1705-h100-nvls-invalid-argument.txt": (UNKNOWN_KIND, Status.UNKNOWN),
    "kernel-log/xid-lines.txt": ("kernel-log", Status.CRITICAL),
    "kernel-log/redacted-forms.txt": ("kernel-log", Status.CRITICAL),
    "kernel-log/crafted-forms.txt": ("kernel-log", Status.CRITICAL),
    "kernel-log/sxid-a100-gsp-crash-ogkm446.txt": ("kernel-log", Status.CRITICAL),
    "kernel-log/sxid-gpud-pr338-12028-data.txt": ("kernel-log", Status.CRITICAL),
    "kernel-log/sxid-menthos-ltssm-fault.txt": ("kernel-log", Status.CRITICAL),
    "kernel-log/sxid-nvsentinel-e2e-fatal.txt": ("kernel-log", Status.CRITICAL),
    "kernel-log/sxid-nvsentinel-e2e-nonfatal.txt": ("kernel-log", Status.WARNING),
    "dcgm/mlengineering-r2-faulty-node-gpu0-memory-fail-FRAGMENT.txt": ("dcgm-diag", Status.CRITICAL),
    "dcgm/mlengineering-xid64-row-remap-pending-FRAGMENT.txt": ("dcgm-diag", Status.CRITICAL),
    "dcgm/dcgm4.2.3-issue253-pcie-internal-error-fail.txt": ("dcgm-diag", Status.UNKNOWN),
    "dcgm/dcgm4.4.2-issue124-r2-pass.txt": ("dcgm-diag", Status.OK),
    "dcgm/crafted-dcgm4-gpu2-memory-fail-skip.txt": ("dcgm-diag", Status.CRITICAL),
    "dcgm/crafted-dcgm4-all-gpu-tests-skipped.txt": ("dcgm-diag", Status.UNKNOWN),
    "dcgm/crafted-dcgm3-skip-all-fail-all.txt": ("dcgm-diag", Status.CRITICAL),
    # torchfrtrace's own report of a recorded bench run: not an artefact analyze explains
    "evidence/wrong_size/torchfrtrace.txt": (UNKNOWN_KIND, Status.UNKNOWN),
    "evidence/wrong_size/torchfrtrace-layout.txt": (UNKNOWN_KIND, Status.UNKNOWN),
}


def test_every_data_file_is_listed() -> None:
    on_disk = {str(p.relative_to(DATA)) for p in DATA.rglob("*.txt")}
    assert on_disk == set(EXPECTED)


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_kind_and_verdict_of_every_sample(rel: str) -> None:
    report = analyze_paths([DATA / rel])
    (a,) = report.artefacts
    assert (a.kind, a.status) == EXPECTED[rel], a.summary
    assert a.summary
    json.dumps(to_jsonable(report), allow_nan=False)


def test_kind_is_decided_by_content_not_name(tmp_path: Path) -> None:
    misnamed = tmp_path / "dmesg.log"
    shutil.copy(DATA / "nccl-tests/bitdeer-h100-8gpu-1node-allreduce.txt", misnamed)
    (a,) = analyze_paths([misnamed]).artefacts
    assert a.kind == "nccl-tests"


def test_report_shape_and_exit_code() -> None:
    paths = [DATA / "nccl-tests/bitdeer-h100-8gpu-1node-allreduce.txt", DATA / "kernel-log/xid-lines.txt"]
    report = analyze_paths(paths)
    assert isinstance(report, AnalysisReport)
    assert report.kind == "analyze" and report.schema_version == SCHEMA_VERSION
    assert report.status is Status.CRITICAL and report.exit_code is ExitCode.CRITICAL
    doc = to_jsonable(report)
    assert doc["exit_code"] == 2 and doc["status"] == "critical"
    assert [a["path"] for a in doc["artefacts"]] == [str(p) for p in paths]
    assert doc["artefacts"][0]["details"]["peak_busbw_gbps"] == 470.73


def test_expected_busbw_flows_to_nccl_verdict() -> None:
    path = DATA / "nccl-tests/llminsights-a40-4gpu-sys-p2pdisabled-allreduce.txt"
    assert analyze_paths([path]).status is Status.OK
    report = analyze_paths([path], expected_busbw_gbps=10.0)
    assert report.status is Status.CRITICAL and report.expected_busbw_gbps == 10.0
    assert analyze_paths([path], expected_busbw_gbps=1.5).status is Status.WARNING


def test_single_rank_exits_ok() -> None:
    report = analyze_paths([DATA / "nccl-tests/issue-nccltests287-rtx5090-1gpu-alltoall-avg0.txt"])
    assert report.status is Status.NOT_APPLICABLE and report.exit_code is ExitCode.OK


def test_xid_findings_grouped_with_evidence() -> None:
    (a,) = analyze_paths([DATA / "kernel-log/xid-lines.txt"]).artefacts
    assert a.details["event_count"] == 6
    assert [e["xid"] for e in a.details["events"]] == [63, 64, 48, 64, 31, 31]
    mmu = [f for f in a.findings if f.evidence["xid"] == 31]
    assert len(mmu) == 1 and mmu[0].evidence["count"] == 2 and mmu[0].status is Status.WARNING
    dbe = next(f for f in a.findings if f.evidence["xid"] == 48)
    assert dbe.device == "0000:07:00" and dbe.evidence["category"] == "hardware"
    assert dbe.evidence["action"] == "evict"
    assert a.findings[-1].status is Status.WARNING  # most severe first


def test_clean_kernel_log_is_ok(tmp_path: Path) -> None:
    log = tmp_path / "dmesg.txt"
    log.write_text(
        "[    0.000000] Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075)\n"
        "[    1.234567] nvidia: loading out-of-tree module taints kernel.\n"
        "[    2.345678] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07\n"
        "[    3.456789] EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode.\n"
    )
    (a,) = analyze_paths([log]).artefacts
    assert (a.kind, a.status) == ("kernel-log", Status.OK)
    assert "no NVIDIA XID events" in a.summary


def test_bad_paths_are_unknown_and_others_still_analysed(tmp_path: Path) -> None:
    binary = tmp_path / "core.bin"
    binary.write_bytes(b"\x7fELF\x00\x00\x01\x02" * 100)
    unrecognised = tmp_path / "notes.txt"
    unrecognised.write_text("just some notes\nnothing to see here\n")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    good = DATA / "dcgm/dcgm4.4.2-issue124-r2-pass.txt"
    missing = tmp_path / "missing.txt"
    report = analyze_paths([tmp_path, missing, binary, unrecognised, empty, good])
    kinds_status = [(a.kind, a.status) for a in report.artefacts]
    assert kinds_status[:5] == [(UNKNOWN_KIND, Status.UNKNOWN)] * 5
    assert kinds_status[5] == ("dcgm-diag", Status.OK)
    reasons = [a.summary for a in report.artefacts[:5]]
    assert "is a directory" in reasons[0]
    assert "no such file" in reasons[1]
    assert "binary" in reasons[2]
    assert "unrecognised artefact" in reasons[3] and "unrecognised artefact" in reasons[4]
    assert all("\n" not in r and "Traceback" not in r for r in reasons)
    assert report.status is Status.UNKNOWN and report.exit_code is ExitCode.UNKNOWN


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files regardless of permissions")
def test_unreadable_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("# Avg bus bandwidth : 1\n")
    secret.chmod(0)
    try:
        (a,) = analyze_paths([secret]).artefacts
    finally:
        secret.chmod(0o600)
    assert (a.kind, a.status) == (UNKNOWN_KIND, Status.UNKNOWN)
    assert "permission denied" in a.summary


def test_gzip_kernel_log(tmp_path: Path) -> None:
    gz = tmp_path / "kern.log.1.gz"
    gz.write_bytes(gzip.compress((DATA / "kernel-log/xid-lines.txt").read_bytes()))
    (a,) = analyze_paths([gz]).artefacts
    assert (a.kind, a.status) == ("kernel-log", Status.CRITICAL)


def test_corrupt_gzip(tmp_path: Path) -> None:
    gz = tmp_path / "bad.gz"
    gz.write_bytes(b"\x1f\x8b\x08\x00garbage")
    (a,) = analyze_paths([gz]).artefacts
    assert a.status is Status.UNKNOWN and "gzip" in a.summary


def test_non_utf8_text_is_decoded_with_replacement(tmp_path: Path) -> None:
    p = tmp_path / "latin1.log"
    p.write_bytes(
        b"Dec  2 11:38:47 w\xe9rker kernel: NVRM: Xid (PCI:0000:07:00): 79, GPU has fallen off the bus.\n"
    )
    (a,) = analyze_paths([p]).artefacts
    assert (a.kind, a.status) == ("kernel-log", Status.CRITICAL)


def test_registry_rejects_duplicates_and_is_extensible() -> None:
    names = [k.name for k in kinds()]
    # The built-in kinds, in priority order; other modules (py-spy dumps) may have registered more.
    assert [n for n in names if n in ("dcgm-diag", "nccl-tests", "kernel-log")] == [
        "dcgm-diag",
        "nccl-tests",
        "kernel-log",
    ]
    with pytest.raises(ValueError, match="already registered"):
        register_kind(ArtefactKind("nccl-tests", "dup", lambda t: False, lambda t, o: Verdict(Status.OK, "")))
    with pytest.raises(ValueError):
        register_kind(
            ArtefactKind(UNKNOWN_KIND, "reserved", lambda t: False, lambda t, o: Verdict(Status.OK, ""))
        )


def test_failing_sniffer_or_analyser_does_not_break_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    from robustctl.analysis import detect

    def boom_sniff(text: str) -> bool:
        raise RuntimeError("sniffer bug")

    def boom_analyze(text: str, options: AnalysisOptions) -> Verdict:
        raise RuntimeError("analyser bug")

    registry = dict(detect._REGISTRY)
    registry["a-broken"] = ArtefactKind("a-broken", "x", boom_sniff, boom_analyze, priority=0)
    registry["b-greedy"] = ArtefactKind("b-greedy", "x", lambda t: "GREEDY" in t, boom_analyze, priority=1)
    monkeypatch.setattr(detect, "_REGISTRY", registry)
    assert detect_kind((DATA / "kernel-log/xid-lines.txt").read_text()).name == "kernel-log"  # type: ignore[union-attr]
    a = analyze_text("GREEDY", path="x")
    assert (a.kind, a.status) == ("b-greedy", Status.UNKNOWN)
    assert "analysis failed" in a.summary


def test_no_paths() -> None:
    report = analyze_paths([])
    assert report.artefacts == () and report.status is Status.SKIPPED
