"""Launcher line prefixes as a class (robustctl.analysis.nccl_tests): the Ray + mpirun reconstruction
of tests/data/nccl-tests/INDEX.md, stacks of tags in any order, and the nccl-tests and NCCL lines that
look like tags but are not (table rows, ``#`` lines, ``HOST:PID:TID [DEV]`` lines, ``HOST: Test NCCL
failure``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from robustctl.analysis.detect import analyze_text
from robustctl.analysis.nccl_tests import evaluate, parse_nccl_tests
from robustctl.models import Status

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-tests"
ROW = "  1048576  262144  float  sum  -1  20.00  52.43  91.75  0  20.00  52.43  91.75  0"


def test_ray_and_mpirun_prefixed_table_parses_as_its_source() -> None:
    text = (DATA / "recon-ray-mpirun-prefixed-bitdeer-h100-allreduce.txt").read_text()
    src = parse_nccl_tests((DATA / "bitdeer-h100-8gpu-1node-allreduce.txt").read_text())
    r = parse_nccl_tests(text)
    assert [(row.size_bytes, row.out_of_place, row.in_place) for row in r.rows] == [
        (row.size_bytes, row.out_of_place, row.in_place) for row in src.rows
    ]
    assert (r.rank_count, r.hosts, r.avg_busbw_gbps, r.header) == (
        src.rank_count,
        src.hosts,
        src.avg_busbw_gbps,
        src.header,
    )
    a = analyze_text(text)
    assert (a.kind, a.status) == ("nccl-tests", Status.OK)
    assert a.details["peak_busbw_gbps"] == pytest.approx(470.73)


@pytest.mark.parametrize(
    "prefix",
    [
        "(RayWorker pid=1234, ip=127.0.0.2) [1,0]<stdout>:",
        "(pid=1234, ip=127.0.0.2) [1,0]<stdout>: ",
        "[1,0]<stdout>:(pid=1234) ",
        "2024-05-01 12:00:00,123 ",
        "[2024-05-01T12:00:00Z] node-01.cluster.local: 3: ",
        "node-01.cluster.local: [0] ",
        "0: (WorkerDict pid=7) 2024-05-01T12:00:00.5+00:00 ",
    ],
)
def test_prefix_stacks_before_a_row(prefix: str) -> None:
    (row,) = parse_nccl_tests(prefix + ROW).rows
    assert (row.size_bytes, row.count, row.dtype, row.out_of_place.busbw_gbps) == (
        1048576,
        262144,
        "float",
        91.75,
    )
    assert row.in_place is not None and row.in_place.busbw_gbps == 91.75


def test_nccl_lines_keep_their_host_under_any_prefix() -> None:
    """``HOST:`` of ``HOST:PID:TID [DEV]`` is followed by the pid, not by white space: no label."""
    lines = [
        "kolyoz2:25146:25854 [0] ib_plugin.c:1105 NCCL WARN NET/IB : error",
        "(RayWorker pid=1, ip=127.0.0.2) kolyoz2:25146:25854 [0] ib_plugin.c:1105 NCCL WARN NET/IB : error",
        "[2025-05-10 23:09:41] kolyoz2:25146:25854 [0] ib_plugin.c:1105 NCCL WARN NET/IB : error",
        "kolyoz2: kolyoz2:25146:25854 [0] ib_plugin.c:1105 NCCL WARN NET/IB : error",
    ]
    for line in lines:
        (err,) = parse_nccl_tests(line).errors
        assert (err.host, err.pid, err.device, err.error_class) == ("kolyoz2", 25146, 0, "ib-transport"), line


def test_real_lines_are_not_tags() -> None:
    """A table row, ``#`` lines and nccl-tests' own ``HOST: Test NCCL failure`` survive intact."""
    text = "\n".join(
        [
            "# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20",
            "#  Rank  0 Group  0 Pid  51234 on   gpu-b03 device  0 [0x18] NVIDIA H100 80GB HBM3",
            ROW,
            "gpu-b03: Test NCCL failure common.cu:1005 'unhandled system error'",
            " .. gpu-b03 pid 51234: Test failure common.cu:891",
            "# Avg bus bandwidth    : 91.75",
        ]
    )
    r = parse_nccl_tests(text)
    assert r.header["nGpus"] == "8" and r.hosts == ("gpu-b03",) and len(r.rows) == 1
    assert r.failures[0] == "gpu-b03: Test NCCL failure common.cu:1005 'unhandled system error'"
    assert r.avg_busbw_gbps == 91.75
    assert evaluate(r).status is Status.CRITICAL


def test_inline_tags_inside_a_row_still_work_after_a_ray_tag() -> None:
    line = "(pid=9, ip=127.0.0.2) [0]   1048576   262144   float   sum   -1[0]  1626.5  0.64  1.24  0[0]  2302.3  0.46  0.88  0"
    (row,) = parse_nccl_tests(line).rows
    assert row.in_place is not None and row.in_place.busbw_gbps == 0.88
