"""Each line method of the nccl-tests parser on its own: what one line of each kind does to its fields."""

from __future__ import annotations

import pytest

from robustctl.analysis import nccl_tests
from robustctl.analysis.nccl_tests import _NcclTestsParser

ROW_BOTH = "     8388608       2097152     float     sum      -1    95.30   88.02  154.04      0    94.90   88.39  154.69      0"
ROW_OOP = "     1048576        262144     float    none      -1    25.20   41.61   36.41      0"
ROW_WRONG = "     8388608       2097152     float     sum      -1    95.30   88.02  154.04      3    94.90   88.39  154.69      0"
ROW_OLD = "  4294967296     134217728   float    29122  129.05  129.05  1e+00    29169  128.84  128.84  1e+00"
HEADER = (
    "# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
    "agg iters: 1 validation: 1 graph: 0"
)


def test_data_row_both_placements_is_kept() -> None:
    p = _NcclTestsParser()
    assert p.data_row(ROW_BOTH.strip(), 7)
    (row,) = p.rows
    assert (row.size_bytes, row.count, row.dtype, row.redop, row.root, row.line) == (
        8388608,
        2097152,
        "float",
        "sum",
        -1,
        7,
    )
    assert row.out_of_place == nccl_tests.NcclMeasurement(95.30, 88.02, 154.04, 0.0)
    assert row.in_place == nccl_tests.NcclMeasurement(94.90, 88.39, 154.69, 0.0)
    assert p.peak_busbw_gbps == 154.69
    assert p.pending == []


def test_data_row_out_of_place_only_waits_for_the_in_place_piece() -> None:
    p = _NcclTestsParser()
    assert p.data_row(ROW_OOP.strip(), 3)
    assert p.rows == []  # not kept yet: the in-place half of a split row may follow
    assert (p.pending_line, p.pending_gap, p.pending_cells) == (3, 0, 4)
    assert p.pending == ROW_OOP.split()
    p.flush()
    (row,) = p.rows
    assert row.in_place is None and row.out_of_place.busbw_gbps == 36.41 and row.line == 3


def test_data_row_completed_by_a_piece_after_other_lines() -> None:
    p = _NcclTestsParser()
    p.feed(ROW_OOP, 10)
    p.feed("test-nccl-efa-worker-1:21:26 [0] NCCL INFO Connected all rings", 11)
    assert p.pending_gap == 1
    assert p.row_piece("24.90   42.11   36.85    N/A", 12)
    (row,) = p.rows
    assert row.line == 10 and row.in_place == nccl_tests.NcclMeasurement(24.90, 42.11, 36.85, None)
    assert p.pending == []


def test_data_row_old_error_column() -> None:
    p = _NcclTestsParser()
    assert p.data_row(ROW_OLD.strip(), 5)
    (row,) = p.rows
    assert row.redop is None and row.root is None and row.out_of_place.wrong == 1.0


@pytest.mark.parametrize(
    "line",
    [
        # 6 and 10 cells: neither one measurement (4) nor two (8)
        "8388608 2097152 float sum -1 95.30 88.02 154.04 0 94.90 88.39",
        "8388608 2097152 float sum -1 95.30 88.02 154.04 0 94.90 88.39 154.69 0 7 7",
        "8388608 2097152 float sum -1 95.30 x 154.04 0 94.90 88.39 154.69 0",
        "gpu-b03: Test NCCL failure common.cu:1005 'unhandled system error'",
        "8 Test NCCL failure common.cu:1005 2 float sum -1 1 1 1 0 1 1 1 0",
    ],
)
def test_data_row_refuses_a_line_with_the_wrong_cell_count_or_no_row(line: str) -> None:
    p = _NcclTestsParser()
    assert not p.data_row(line, 1)
    assert p.rows == [] and p.pending == []


def test_wrong_count_row_past_the_cap_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl_tests, "MAX_ROWS", 1)
    p = _NcclTestsParser()
    p.feed(ROW_BOTH, 1)
    p.feed(ROW_BOTH, 2)  # past the cap, no new peak, no wrong value
    assert (len(p.rows), p.rows_dropped, p.extra_rows) == (1, 1, 0)
    p.feed(ROW_WRONG, 3)
    assert (len(p.rows), p.rows_dropped, p.extra_rows) == (2, 1, 1)
    assert p.rows[-1].out_of_place.wrong == 3.0 and p.rows[-1].line == 3


def test_row_pieces_of_a_split_row() -> None:
    p = _NcclTestsParser()
    assert p.row_piece("1048576 262144 float none -1", 4)
    assert p.rows == [] and p.pending == "1048576 262144 float none -1".split() and p.pending_line == 4
    assert p.row_piece("25.20 41.61 36.41 0", 6)
    assert p.rows == [] and p.pending[-4:] == ["25.20", "41.61", "36.41", "0"] and p.pending_gap == 0
    assert not p.row_piece("25.20 41.61 36.41", 7)  # 3 cells: not a measurement
    assert p.row_piece("24.90 42.11 36.85 N/A", 8)
    (row,) = p.rows
    assert row.line == 4 and row.in_place is not None and row.in_place.wrong is None


def test_a_comment_ends_a_pending_row() -> None:
    p = _NcclTestsParser()
    p.feed("1048576 262144 float none -1 25.20 41.61 36.41 0", 1)
    p.feed("# Out of bounds values : 0 OK", 2)
    assert p.pending == [] and len(p.rows) == 1 and p.rows[0].in_place is None


def test_failure_line_kept_then_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl_tests, "MAX_FAILURES", 1)
    p = _NcclTestsParser()
    first = "gpu-b03: Test NCCL failure common.cu:1005 'unhandled system error'"
    assert p.failure_line(first)
    assert p.failure_line("Test CUDA failure common.cu:12 'out of memory'")
    assert not p.failure_line("NCCL INFO Connected all rings")
    assert p.failures == [first] and p.failures_dropped == 1


@pytest.mark.parametrize(
    ("body", "count", "ok"),
    [
        ("Out of bounds values : 0 OK", 0, True),
        ("Out of bounds values : 2 FAILED", 2, False),
        ("out of bounds values: 7", 7, None),
    ],
)
def test_out_of_bounds_trailer(body: str, count: int, ok: bool | None) -> None:
    p = _NcclTestsParser()
    assert p.out_of_bounds_line(body)
    assert (p.out_of_bounds, p.out_of_bounds_ok) == (count, ok)
    assert not p.out_of_bounds_line("Avg bus bandwidth : 1")


def test_avg_busbw_trailer() -> None:
    p = _NcclTestsParser()
    assert p.avg_busbw_line("Avg bus bandwidth    : 448.212")
    assert p.avg_busbw_gbps == 448.212
    assert not p.avg_busbw_line("Avg bus bandwidth : N/A")
    assert p.avg_busbw_gbps == 448.212


def test_trailers_through_feed_end_truncation() -> None:
    p = _NcclTestsParser()
    p.feed("#       size   count   type   redop   root   time   algbw   busbw #wrong", 1)
    p.feed(ROW_BOTH, 2)
    assert p.result().truncated  # no Avg line yet
    p.feed("[0] # Out of bounds values : 0 OK", 3)
    p.feed("[0] # Avg bus bandwidth    : 154.3", 4)
    result = p.result()
    assert (result.out_of_bounds, result.out_of_bounds_ok, result.avg_busbw_gbps) == (0, True, 154.3)
    assert not result.truncated


def test_config_line_keeps_the_header_values() -> None:
    p = _NcclTestsParser()
    assert p.config_line(HEADER.lstrip("# "))
    assert p.header == {
        "nThread": "1",
        "nGpus": "8",
        "minBytes": "8",
        "maxBytes": "8589934592",
        "step": "2(factor)",
        "warmup iters": "5",
        "iters": "20",
        "agg iters": "1",
        "validation": "1",
        "graph": "0",
    }
    assert not p.config_line("Using devices")


def test_config_line_bounds_distinct_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl_tests, "_MAX_HEADER_KEYS", 2)
    p = _NcclTestsParser()
    p.config_line("nThread 1 nGpus 8 minBytes 8")
    p.config_line("nThread 4")  # a known key is still updated
    assert p.header == {"nThread": "4", "nGpus": "8"}


@pytest.mark.parametrize(
    ("body", "column"),
    [
        ("size count type redop root time algbw busbw #wrong time algbw busbw #wrong", "#wrong"),
        ("size count type time algbw busbw error time algbw busbw error", "error"),
        ("size count type time algbw busbw", None),
    ],
)
def test_column_header_line(body: str, column: str | None) -> None:
    p = _NcclTestsParser()
    assert p.column_header_line(body)
    assert p.saw_column_header and p.error_column == column
    assert not p.column_header_line("(B) (elements) (us) (GB/s) (GB/s)")


def test_rank_line_needs_the_comment_and_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl_tests, "MAX_RANKS", 1)
    p = _NcclTestsParser()
    line = "#  Rank  0 Group  0 Pid 1623025 on    host device  0 [0x1b] NVIDIA H100 80GB HBM3"
    body = line.lstrip("#").strip()
    assert not p.rank_line(body, body)  # without the leading "#" it is no rank line
    assert p.rank_line(line, body)
    assert p.ranks == {0: nccl_tests.NcclRank(0, 1623025, "host", 0, "0x1b", "NVIDIA H100 80GB HBM3")}
    other = "#  Rank  1 on hostb device 1 [0x43] X"
    assert p.rank_line(other, other.lstrip("#").strip())  # read, but past the cap: not kept
    again = "#  Rank  0 on hostc device 2 [0x52] Y"
    assert p.rank_line(again, again.lstrip("#").strip())  # a rank seen again replaces its line
    assert list(p.ranks) == [0] and p.ranks[0].host == "hostc" and p.ranks[0].pid is None


def test_command_line_sets_the_collective_once() -> None:
    p = _NcclTestsParser()
    p.command_line("$ mpirun -np 2 ./build/alltoall_perf -b 0 -e 8G -f 2 -g 4")
    assert (p.collective, p.collective_source, p.command_ranks) == ("alltoall", "command", 8)
    p.command_line("./build/all_reduce_perf -g 8")
    assert (p.collective, p.command_ranks) == ("alltoall", 8)


def test_result_infers_what_the_lines_left_out() -> None:
    p = _NcclTestsParser()
    p.feed(ROW_BOTH, 1)  # no command line, no column header, no rank lines
    result = p.result()
    assert (result.collective, result.collective_source) == ("all_reduce", "columns")
    assert result.error_column == "#wrong"  # a root column: the current format
    assert (result.rank_count, result.rank_count_source) == (8, "busbw/algbw")
    old = _NcclTestsParser()
    old.feed(ROW_OLD.replace("1e+00", "2e-07"), 1)
    assert old.result().error_column == "error"  # a fractional max error and no root column
    whole = _NcclTestsParser()
    whole.feed(ROW_OLD, 1)
    assert whole.result().error_column is None  # 1e+00 could be either column


def test_parse_feeds_every_line_to_the_parser() -> None:
    text = "\n".join(
        [
            "$ ./build/all_reduce_perf -g 8",
            HEADER,
            "#  Rank  0 Group  0 Pid 1 on node001 device  0 [0x1b] NVIDIA H100",
            "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong",
            ROW_BOTH,
            "# Out of bounds values : 0 OK",
            "# Avg bus bandwidth    : 154.3",
        ]
    )
    p = _NcclTestsParser()
    for n, line in enumerate(text.splitlines(), start=1):
        p.feed(line, n)
    assert nccl_tests.parse_nccl_tests(text) == p.result()
