"""nccl-tests parser and verdict on real samples (tests/data/nccl-tests/INDEX.md) and crafted edges."""

from __future__ import annotations

from pathlib import Path

import pytest

from robustctl.analysis.nccl_tests import (
    busbw_factor,
    evaluate,
    infer_rank_count,
    looks_like_nccl_tests,
    parse_nccl_tests,
)
from robustctl.models import Status

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-tests"


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_bitdeer_h100_allreduce_healthy() -> None:
    r = parse_nccl_tests(load("bitdeer-h100-8gpu-1node-allreduce.txt"))
    assert len(r.rows) == 4
    assert r.collective == "all_reduce"
    assert (r.rank_count, r.rank_count_source) == (8, "devices")
    assert r.hosts == ("host",)
    assert r.ranks[0].bus_id == "0x1b" and r.ranks[7].name == "NVIDIA H100 80GB HBM3"
    assert r.header["nGpus"] == "8" and r.header["minBytes"] == "268435456"
    assert r.error_column == "#wrong"
    assert r.avg_busbw_gbps == pytest.approx(448.212)
    assert (r.out_of_bounds, r.out_of_bounds_ok) == (0, True)
    assert not r.truncated
    v = evaluate(r)
    assert v.status is Status.OK
    assert v.details["peak_busbw_gbps"] == pytest.approx(470.73)
    assert v.details["peak_size_bytes"] == 2147483648
    assert "470.73" in v.summary and "448.212" in v.summary


def test_bitdeer_rows_both_halves() -> None:
    row = parse_nccl_tests(load("bitdeer-h100-8gpu-1node-allreduce.txt")).rows[0]
    assert (row.size_bytes, row.count, row.dtype, row.redop, row.root) == (
        268435456,
        67108864,
        "float",
        "sum",
        -1,
    )
    assert (row.out_of_place.time_us, row.out_of_place.algbw_gbps, row.out_of_place.busbw_gbps) == (
        1119.8,
        239.71,
        419.49,
    )
    assert row.in_place is not None and row.in_place.busbw_gbps == 420.42 and row.in_place.wrong == 0


def test_a40_degraded_only_with_expected_busbw() -> None:
    r = parse_nccl_tests(load("llminsights-a40-4gpu-sys-p2pdisabled-allreduce.txt"))
    assert len(r.rows) == 4
    assert r.collective == "all_reduce" and r.collective_source == "columns"
    assert (r.rank_count, r.rank_count_source) == (4, "busbw/algbw")  # 1.44 / 0.96 = 2*3/4
    assert r.avg_busbw_gbps == pytest.approx(1.40216)
    assert evaluate(r).status is Status.OK
    v = evaluate(r, expected_busbw_gbps=10.0)
    assert v.status is Status.CRITICAL
    assert v.details["peak_busbw_gbps"] == pytest.approx(1.44)
    assert "expected 10 GB/s" in v.findings[0].message
    assert evaluate(r, expected_busbw_gbps=1.6).status is Status.WARNING  # 90 %: degraded
    assert evaluate(r, expected_busbw_gbps=1.44).status is Status.OK


def test_nccltests37_oob_failed_old_error_column() -> None:
    r = parse_nccl_tests(load("issue-nccltests37-v100-8gpu-allgather-oob-failed.txt"))
    assert r.collective == "all_gather"
    assert r.error_column == "error"
    assert (r.rank_count, r.rank_count_source) == (8, "command")  # all_gather_perf -g 8
    assert (r.out_of_bounds, r.out_of_bounds_ok) == (2, False)
    (row,) = r.rows
    assert row.redop is None and row.root is None
    assert row.out_of_place.wrong == 1.0
    v = evaluate(r)
    assert v.status is Status.CRITICAL
    messages = " | ".join(f.message for f in v.findings)
    assert "Out of bounds values: 2 FAILED" in messages
    assert "max error 1" in messages
    assert v.details["peak_busbw_gbps"] == pytest.approx(129.05)
    assert r.avg_busbw_gbps == pytest.approx(128.942)


def test_nccltests287_single_rank_not_applicable() -> None:
    r = parse_nccl_tests(load("issue-nccltests287-rtx5090-1gpu-alltoall-avg0.txt"))
    assert r.collective == "alltoall"
    assert (r.rank_count, r.hosts) == (1, ("GENOA-01",))
    (row,) = r.rows
    assert row.in_place is not None and row.in_place.wrong is None  # N/A
    v = evaluate(r)
    assert v.status is Status.NOT_APPLICABLE
    assert v.status.exit_code == 0
    assert "not applicable" in v.summary
    # the unvalidated in-place 43046.10 GB/s algbw never counts; busbw 0 is the peak
    assert v.details["peak_busbw_gbps"] == 0.0
    assert evaluate(r, expected_busbw_gbps=100.0).status is Status.NOT_APPLICABLE


def test_taylor_alltoall_peak_not_average() -> None:
    r = parse_nccl_tests(load("taylor-h100-8gpu-1node-nvlink-alltoall.txt"))
    assert len(r.rows) == 31
    assert r.rows[0].size_bytes == 0
    assert r.avg_busbw_gbps == pytest.approx(50.6774)
    assert (r.rank_count, r.rank_count_source) == (8, "busbw/algbw")
    v = evaluate(r)
    assert v.status is Status.OK
    # 137.32 in-place at 1 GiB is not validated (#wrong N/A): the peak is the out-of-place 137.29
    assert v.details["peak_busbw_gbps"] == pytest.approx(137.29)
    assert v.details["peak_size_bytes"] == 268435456
    assert evaluate(r, expected_busbw_gbps=120).status is Status.OK  # the avg 50.7 would fail this
    assert evaluate(r, expected_busbw_gbps=150).status is Status.WARNING


def test_mpi_prefixed_two_nodes() -> None:
    r = parse_nccl_tests(load("crafted-mpi-prefixed-2node-allreduce.txt"))
    assert len(r.rows) == 31
    assert r.rows[0].size_bytes == 8
    assert r.collective == "all_reduce" and r.collective_source == "command"
    assert (r.rank_count, r.rank_count_source) == (16, "devices")
    assert r.hosts == ("node001", "node002")
    v = evaluate(r, expected_busbw_gbps=180)
    assert v.status is Status.OK
    assert v.details["peak_busbw_gbps"] == pytest.approx(186.50)
    assert r.avg_busbw_gbps is not None and r.avg_busbw_gbps < 80


def test_wrong_values_critical() -> None:
    r = parse_nccl_tests(load("crafted-wrong-values-allreduce.txt"))
    v = evaluate(r)
    assert v.status is Status.CRITICAL
    assert v.findings[0].message.startswith("wrong values: #wrong 12 at 128 MiB (in-place)")
    assert v.findings[0].evidence["rows"][0]["line"] == 8


def test_busbw_zero_on_eight_ranks_invalid() -> None:
    r = parse_nccl_tests(load("crafted-busbw-zero-8ranks.txt"))
    assert r.rank_count == 8
    v = evaluate(r)
    assert v.status is Status.CRITICAL
    assert "busbw is 0 at every size with 8 ranks" in v.summary


def test_truncated_middle_of_table() -> None:
    r = parse_nccl_tests(load("crafted-truncated-middle-allgather.txt"))
    assert len(r.rows) == 4 and r.truncated
    assert r.error_column == "#wrong" and r.header == {}
    assert (r.rank_count, r.rank_count_source) == (8, "busbw/algbw")  # (n-1)/n = 0.875
    v = evaluate(r)
    assert v.status is Status.OK and "[truncated]" in v.summary
    assert v.details["peak_busbw_gbps"] == pytest.approx(162.93)


def test_run_failure_without_rows() -> None:
    text = load("crafted-nccl-failure.txt")
    assert looks_like_nccl_tests(text)
    r = parse_nccl_tests(text)
    assert r.rows == () and len(r.failures) == 2 and r.rank_count == 2
    assert evaluate(r).status is Status.CRITICAL


def test_indented_and_bracket_prefixed_rows() -> None:
    rows = [
        "[0]     1048576        262144     float     sum      -1    20.00   52.43   91.75      0    20.00   52.43   91.75      0",
        "[1,3]<stdout>:   2097152   524288   float   sum   -1   30.00  69.91  122.34   3   30.00  69.91  122.34   0",
        "\t  4194304   1048576   float   sum   -1   50.00  83.89  146.80   0   50.00  83.89  146.80   0",
    ]
    r = parse_nccl_tests("\n".join(rows))
    assert [row.size_bytes for row in r.rows] == [1048576, 2097152, 4194304]
    assert r.collective == "all_reduce"  # busbw > algbw
    assert r.rank_count == 8  # 91.75 / 52.43 = 1.75 = 2*7/8
    assert evaluate(r).status is Status.CRITICAL  # #wrong 3


def test_out_of_place_only_rows_and_old_format_with_redop() -> None:
    text = "  1048576  262144  float  sum  20.0  52.43  91.75  0\n"
    (row,) = parse_nccl_tests(text).rows
    assert row.redop == "sum" and row.root is None and row.in_place is None


def test_old_error_column_within_tolerance_is_ok() -> None:
    header = (
        "       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error\n"
    )
    row = (
        "  4294967296     134217728   float    29122  129.05  129.05  2e-07    29169  128.84  128.84  2e-07\n"
    )
    r = parse_nccl_tests(header + row)
    assert r.error_column == "error"
    assert evaluate(r).status is Status.OK
    half = parse_nccl_tests(header + row.replace("float", " half").replace("2e-07", "1e-02"))
    assert evaluate(half).status is Status.OK
    assert evaluate(
        parse_nccl_tests(header + row.replace("float", "  int").replace("2e-07", "1e+00"))
    ).status is (Status.CRITICAL)


@pytest.mark.parametrize(
    ("collective", "n", "factor"),
    [("all_reduce", 8, 1.75), ("all_reduce", 2, 1.0), ("all_gather", 4, 0.75), ("alltoall", 1, 0.0)],
)
def test_busbw_factor(collective: str, n: int, factor: float) -> None:
    assert busbw_factor(collective, n) == pytest.approx(factor)


def test_busbw_factor_unknown() -> None:
    assert busbw_factor(None, 8) is None
    assert busbw_factor("broadcast", 8) == 1.0


def test_infer_rank_count_refuses_ambiguous_large_counts() -> None:
    # 2*(n-1)/n at n=512 vs 511 differ by 8e-6: rounding to 0.01 GB/s cannot tell them apart.
    text = "  1073741824  268435456  float  sum  -1  9000.0  119.30  238.13  0  9000.0  119.30  238.13  0\n"
    assert infer_rank_count(parse_nccl_tests(text).rows, "2(n-1)/n") is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "hello\nworld\n",
        "1 2 3 4 5 6 7 8",
        "# Avg bus bandwidth : nan",
        "\x00\x01\x02",
        "   8 2 float sum -1 x y z 0",
    ],
)
def test_garbage_never_raises(text: str) -> None:
    r = parse_nccl_tests(text)
    v = evaluate(r)
    assert v.status in (Status.UNKNOWN, Status.OK, Status.CRITICAL)
    if not r.rows:
        assert v.status is Status.UNKNOWN


def test_not_nccl_tests() -> None:
    assert not looks_like_nccl_tests(
        "Dec  2 11:38:47 worker4 kernel: [  219.470994] NVRM: Xid (PCI:0000:07:00): 48\n"
    )
    assert not looks_like_nccl_tests(
        "| GPU Memory                | Pass - All                                     |\n"
    )
