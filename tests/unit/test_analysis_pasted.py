"""What people really paste: launcher tags inside rows, rows split by other ranks' lines, busbw that
collapses, redacted XID lines (tests/data/nccl-tests/INDEX.md "Reconstructed", kernel-log/SOURCE.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from robustctl.analysis.detect import analyze_file, analyze_text
from robustctl.analysis.nccl_tests import (
    busbw_collapses,
    evaluate,
    looks_like_nccl_tests,
    parse_nccl_tests,
)
from robustctl.analysis.xid import CATALOG, DEVICE_REDACTED, DEVICE_UNKNOWN, XidCategory, parse_kernel_log
from robustctl.models import Status

DATA = Path(__file__).resolve().parents[1] / "data"
NCCL = DATA / "nccl-tests"
SHARED = Path("/work/shared/samples/nccl-tests")


def _rows(name: str) -> list[tuple[object, ...]]:
    r = parse_nccl_tests((NCCL / name).read_text())
    return [(x.size_bytes, x.count, x.dtype, x.redop, x.root, x.out_of_place, x.in_place) for x in r.rows]


@pytest.mark.parametrize(
    ("recon", "source"),
    [
        ("recon-prepend-rank-midrow-bitdeer-h100-allreduce.txt", "bitdeer-h100-8gpu-1node-allreduce.txt"),
        (
            "recon-tag-output-split-rows-taylor-h100-alltoall.txt",
            "taylor-h100-8gpu-1node-nvlink-alltoall.txt",
        ),
    ],
)
def test_interleaved_prefixes_give_the_source_rows(recon: str, source: str) -> None:
    assert _rows(recon) == _rows(source)
    assert len(_rows(recon)) in (4, 31)


def test_midrow_prefixes_keep_ranks_and_header() -> None:
    r = parse_nccl_tests((NCCL / "recon-prepend-rank-midrow-bitdeer-h100-allreduce.txt").read_text())
    src = parse_nccl_tests((NCCL / "bitdeer-h100-8gpu-1node-allreduce.txt").read_text())
    assert r.ranks == src.ranks and r.header == src.header and not r.truncated
    v = evaluate(r)
    assert v.status is Status.OK and v.details["peak_busbw_gbps"] == pytest.approx(470.73)


def test_split_rows_command_ranks() -> None:
    r = parse_nccl_tests((NCCL / "recon-tag-output-split-rows-taylor-h100-alltoall.txt").read_text())
    assert (r.collective, r.rank_count, r.rank_count_source) == ("alltoall", 8, "command")
    assert evaluate(r).details["peak_busbw_gbps"] == pytest.approx(137.29)


def test_bare_midrow_rows_are_recognised() -> None:
    # The brief's form, without any header: today "unrecognised artefact".
    text = (
        "[0]      1048576        262144     float     sum      -1[0]  1626.5    0.64    1.24      0[0]"
        "  2302.3    0.46    0.88      0\n"
        "[0]      2097152        524288     float     sum      -1[0]  1650.2    1.27    2.38      0[0]"
        "  1700.9    1.23    2.31      0\n"
    )
    assert looks_like_nccl_tests(text)
    a = analyze_text(text)
    assert a.kind == "nccl-tests" and a.details["peak_busbw_gbps"] == pytest.approx(2.38)
    ompi = text.replace("[0]", "[1,0]<stdout>:")
    assert [r.size_bytes for r in parse_nccl_tests(ompi).rows] == [1048576, 2097152]
    srun = "0:   1048576  262144  float  sum  -1 0:   1626.5  0.64  1.24  0 0:   2302.3  0.46  0.88  0\n"
    assert len(parse_nccl_tests(srun).rows) == 1


def test_split_row_piece_never_joins_unrelated_numbers() -> None:
    # A lone parameters piece followed by a comment line: dropped, not glued to later cells.
    text = "  1048576  262144  float  sum  -1\n# Out of bounds values : 0 OK\n  1.0  2.0  3.0  0\n"
    assert parse_nccl_tests(text).rows == ()


def test_collapse_reconstruction_warns() -> None:
    r = parse_nccl_tests((NCCL / "recon-busbw-collapse-taylor-h100-alltoall.txt").read_text())
    (c,) = busbw_collapses(r.rows)
    assert c.peak_size_bytes == 256 * 2**20 and c.peak_busbw_gbps == pytest.approx(137.29)
    assert c.sizes_bytes == tuple(2**k for k in range(29, 34))
    assert c.drop_ratio == pytest.approx(137.29 / 26.54)
    v = evaluate(r)
    assert v.status is Status.WARNING
    assert "busbw collapses past 256 MiB" in v.summary and "5 sizes" in v.summary
    # With an expected value that the peak meets, the collapse still warns.
    assert evaluate(r, expected_busbw_gbps=120).status is Status.WARNING


def _real_samples() -> list[Path]:
    files = [p for p in NCCL.glob("*.txt") if not p.name.startswith("recon-busbw-collapse")]
    if SHARED.is_dir():
        files += sorted(SHARED.glob("*.txt"))
    return sorted(files)


@pytest.mark.parametrize("path", _real_samples(), ids=lambda p: p.name)
def test_no_sample_trips_the_collapse_rule(path: Path) -> None:
    assert busbw_collapses(parse_nccl_tests(path.read_text()).rows) == []


def _row(size: int, bw: float) -> str:
    return f"{size:12d}  {size // 4:12d}  float  sum  -1  10.0  {bw / 1.75:.2f}  {bw:.2f}  0  10.0  {bw / 1.75:.2f}  {bw:.2f}  0"


@pytest.mark.parametrize(
    ("curve", "collapsed"),
    [
        ([10, 50, 100, 120, 118, 121], False),  # plateau
        ([10, 50, 100, 120, 90, 110], False),  # wobble past the plateau
        ([10, 50, 100, 120, 40], False),  # one low last size only
        ([10, 50, 120, 40, 70], False),  # one larger size at 58 % of the peak
        ([10, 50, 120, 40, 30], True),
        ([10, 120, 20, 20, 20, 20], True),
        ([0.1, 0.4, 0.9, 0.2, 0.1], False),  # peak below 1 GB/s: latency-bound noise
    ],
)
def test_collapse_rule(curve: list[float], collapsed: bool) -> None:
    text = "\n".join(_row(2**20 * 2**i, bw) for i, bw in enumerate(curve))
    assert bool(busbw_collapses(parse_nccl_tests(text).rows)) is collapsed


def test_collapse_is_per_sweep() -> None:
    # Two concatenated healthy sweeps: the second starting low is not a collapse of the first.
    one = [_row(2**20 * 2**i, bw) for i, bw in enumerate([10, 50, 120, 121])]
    assert busbw_collapses(parse_nccl_tests("\n".join(one + one)).rows) == []


def test_redacted_kernel_log_every_event_reported() -> None:
    events = parse_kernel_log((DATA / "kernel-log" / "redacted-forms.txt").read_text())
    assert [(e.pci, e.xid) for e in events] == [
        (DEVICE_REDACTED, 63),
        (DEVICE_REDACTED, 48),
        (DEVICE_REDACTED, 31),
        (DEVICE_REDACTED, 145),
        (DEVICE_REDACTED, 79),
        ("0000:01:00", 62),
        ("0000:01:00", 154),
        (DEVICE_REDACTED, 149),
        (DEVICE_REDACTED, 119),
        ("0000:b4:00", 173),
    ]
    first = events[0]
    assert first.redacted == ("device", "pid", "host") and first.host is None and first.pid is None
    assert first.device_text == "PCI:XXXX:XX:XX"
    assert first.message == "Row Remapper: New row marked for remapping, reset gpu to activate"
    assert events[3].redacted == ("device", "pid", "name") and events[3].message.startswith("RLW_REMAP")
    assert events[6].severity is Status.CRITICAL  # 154 -> GPU Reset Required
    assert events[9].category is XidCategory.UNKNOWN and events[9].process == "python3"


def test_redacted_kernel_log_file_verdict() -> None:
    a = analyze_file(DATA / "kernel-log" / "redacted-forms.txt")
    assert a.kind == "kernel-log" and a.status is Status.CRITICAL
    assert a.details["event_count"] == 10 and a.details["events_without_device"] == 7
    assert "on 2 GPUs (+ 7 events with the PCI id redacted or unknown)" in a.summary
    messages = [f.message for f in a.findings]
    assert any(
        m.startswith("XID 79 on a GPU with a redacted PCI id: GPU has fallen off the bus") for m in messages
    )
    assert any(m.startswith("XID 173 on 0000:b4:00: XID 173 (not in robustctl's catalog)") for m in messages)


@pytest.mark.parametrize(
    ("line", "pci"),
    [  # every line is XID 79 but the first (145)
        ("NVRM: Xid (PCI:...): 145, x", DEVICE_REDACTED),
        ("NVRM: Xid (PCI:XXXX:XX:XX): 79, x", DEVICE_REDACTED),
        ("NVRM: Xid (PCI:0000:xx:00.0): 79, x", DEVICE_REDACTED),
        ("NVRM: Xid (<redacted>): 79, x", DEVICE_REDACTED),
        ("NVRM: Xid (****): 79, x", DEVICE_REDACTED),
        ("NVRM: Xid (): 79, x", DEVICE_REDACTED),
        ("NVRM: Xid <redacted>: 79, x", DEVICE_REDACTED),
        ("NVRM: Xid: 79, x", DEVICE_UNKNOWN),
        ("NVRM: Xid (PCI:zzzz): 79, bad pci", DEVICE_UNKNOWN),
        ("NVRM: Xid (PCI:0000:3B:00.0 GPU-I:01): 79, x", "0000:3b:00.0"),
    ],
)
def test_tolerant_device_forms(line: str, pci: str) -> None:
    (e,) = parse_kernel_log(line)
    assert (e.pci, e.xid) == (
        pci,
        int(line.split("): ")[-1].split(":")[-1].split(",")[0]) if "(" in line else 79,
    )


@pytest.mark.parametrize(
    "code", [119, 120, 121, 136, 140, 143, 144, 145, 149, 150, 154, 155, 156, 158, 159, 167]
)
def test_current_codes_in_catalog(code: int) -> None:
    assert code in CATALOG and CATALOG[code].mnemonic


def test_catalog_follows_nvidia_buckets() -> None:
    assert CATALOG[121].severity is Status.WARNING  # corrected C2C errors: NVIDIA IGNORE
    assert CATALOG[147].severity is Status.WARNING and CATALOG[148].severity is Status.WARNING
    assert CATALOG[145].resolution == "WORKFLOW_NVLINK5_ERR" and CATALOG[145].severity is Status.CRITICAL
    assert CATALOG[162].severity is Status.OK
    assert CATALOG[40].category is XidCategory.APPLICATION and CATALOG[40].resolution == "RESTART_APP"
