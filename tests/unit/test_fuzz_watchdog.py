"""Property-based tests for the NCCL watchdog log parser (robustctl.analysis.watchdog).

Contract: no exception on any text (parse, tally, verdict); state bounded on an endless log of ever
new ranks, groups and sequence numbers; every well-formed generated line of each format (≤ 2.1
``[Rank N]``, 2.2–2.4 ``[PG n Rank r]``, 2.5+ ``[PG ID n PG GUID g(desc) Rank r]``, with or without a
launcher ``[rankN]:`` prefix) parses back to its fields. Seeded and bounded by the ``ci`` profile
(tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.analysis import watchdog
from robustctl.analysis.watchdog import EventKind, WatchdogTally, evaluate, parse_line
from robustctl.inventory.topology import parse_layout
from robustctl.models import Status

pytestmark = pytest.mark.fuzz

WORDS = st.sampled_from(
    ["[Rank 3]", "[PG 2 Rank 1]", "[PG ID 1 PG GUID 7(x) Rank 0]", "[rank5]:", "WorkNCCL(SeqNum=", "OpType=",
     "Watchdog caught collective operation timeout: ", "last enqueued NCCL work: ", "last completed work: -1",
     "detected by watchdog at work: ", "Timeout at NCCL work: 9", "] joined but didn't finish collective #",
     "watchdog got stuck for 480 seconds", "Heartbeat monitor timed out", "Some NCCL operations have failed",
     "ProcessGroupNCCL.cpp:1", "(", ")", ",", " ", "=", "#", "[", "]", "99999999999999999999999"]
)  # fmt: skip
NOISY_LINE = st.lists(WORDS | st.text(max_size=12), max_size=12).map("".join)
OP = st.sampled_from(
    ["ALLREDUCE", "_ALLGATHER_BASE", "_REDUCE_SCATTER_BASE", "BROADCAST", "ALLTOALL_BASE", "SEND"]
)
UID = st.from_regex(r"[0-9a-f]{1,12}", fullmatch=True)
DESC = st.none() | st.sampled_from(["default_pg", "EXPERT_MODEL_PARALLEL_GROUP", "TP", "dp_cp"])
NUM = st.integers(0, 2**62)
PREFIX = st.sampled_from(
    ["", "[E ProcessGroupNCCL.cpp:737] ", "[E1127 05:00:00.123456789 ProcessGroupNCCL.cpp:632] "]
)


@given(st.lists(NOISY_LINE, max_size=30))
def test_any_text_parses_tallies_and_judges_without_raising(lines: list[str]) -> None:
    tally = WatchdogTally()
    for line in lines:
        parse_line(line)
        tally.add_line(line, source="x", file_rank=None)
    verdict = evaluate(tally, layout=parse_layout("tp=2,dp=2"), ranks_per_host=2)
    assert verdict.status in (Status.OK, Status.WARNING, Status.CRITICAL)
    assert verdict.summary


@given(st.binary(max_size=200))
def test_any_bytes_are_claimed_or_not_without_raising(data: bytes) -> None:
    assert watchdog.claim("f", data) in (True, False)


def _endless(n: int) -> Iterator[str]:
    for i in range(n):
        yield (
            f"[rank{i}]:[E1127 05:00:00.1 ProcessGroupNCCL.cpp:1785] [PG ID {i % 7} PG GUID {i}(g{i}) Rank {i % 3}] "
            f"Exception (either an error or timeout) detected by watchdog at work: {i}, last enqueued NCCL work: {i}, "
            f"last completed NCCL work: {i - 1}."
        )
        yield (
            f"[rank{i}]:[E1127 05:00:00.1 ProcessGroupNCCL.cpp:632] [Rank {i % 3}] Watchdog caught collective "
            + (
                f"operation timeout: WorkNCCL(SeqNum={i + 1}, OpType=ALLREDUCE, NumelIn={i}, NumelOut={i}, "
                "Timeout(ms)=600000) ran for 600001 milliseconds before timing out."
            )
        )
        yield f"[rank{i}]: ProcessGroupNCCL's watchdog got stuck for {i} seconds without making progress"
        yield f"\t - ranks [{i}, {i + 1}] are the lagging ranks that caused this timeout. They never joined"


def test_state_stays_bounded_on_an_endless_log(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("MAX_GROUPS", 50), ("MAX_MEMBERS", 60), ("MAX_PENDING_TIMEOUTS", 40),
                        ("MAX_HOST_HANGS", 30), ("MAX_DESYNC_LINES", 20), ("MAX_RANKS_SEEN", 100)):  # fmt: skip
        monkeypatch.setattr(watchdog, name, value)
    tally = WatchdogTally()
    tally.add_text(_endless(5_000), source="endless.log")
    assert len(tally.groups) <= 50 and tally.groups_dropped > 0
    assert tally.members <= 60
    assert len(tally.pending) <= 40 and tally.pending_dropped > 0
    assert len(tally.hangs) <= 30 and tally.hangs_dropped > 0
    assert len(tally.desync_lines) <= 20
    assert len(tally.ranks_seen) <= 100
    verdict = evaluate(tally)
    assert verdict.status is Status.CRITICAL
    assert len(verdict.details["timeouts"]) <= watchdog.MAX_TIMEOUT_ROWS
    assert len(verdict.details["suspects"]) <= watchdog.MAX_SUSPECTS


def _prefix(fmt: str, uid: str, desc: str | None, pg_id: int, rank: int) -> str:
    if fmt == "rank":
        return f"[Rank {rank}]"
    if fmt == "pg":
        return f"[PG {uid}" + (f" ({desc})" if desc else "") + f" Rank {rank}]"
    return f"[PG ID {pg_id} PG GUID {uid}" + (f"({desc})" if desc else "") + f" Rank {rank}]"


LINE = st.fixed_dictionaries(
    {
        "fmt": st.sampled_from(["rank", "pg", "pg-guid"]),
        "launcher": st.none() | st.integers(0, 99_999),
        "glog": PREFIX,
        "uid": UID,
        "desc": DESC,
        "pg_id": st.integers(0, 999),
        "rank": st.integers(0, 99_999),
        "seq": NUM,
        "op": OP,
        "numel_in": NUM,
        "numel_out": NUM,
        "timeout": st.integers(1, 10**9),
        "ran": st.integers(0, 10**12),
        "enq": NUM,
        "done": st.integers(-1, 2**62),
        "started": st.none() | st.integers(-1, 2**62),
        "kind": st.sampled_from(["timeout", "exception", "timeout-at", "failure"]),
    }
)


@given(LINE)
def test_well_formed_lines_of_each_format_parse_back(f: dict[str, Any]) -> None:
    prefix = _prefix(f["fmt"], f["uid"], f["desc"], f["pg_id"], f["rank"])
    if f["kind"] == "timeout":
        body = (
            f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={f['seq']}, OpType={f['op']}, "
            f"NumelIn={f['numel_in']}, NumelOut={f['numel_out']}, Timeout(ms)={f['timeout']}) ran for {f['ran']} "
            "milliseconds before timing out."
        )
    elif f["kind"] == "failure":
        started = f", last started work: {f['started']} ({f['op']})" if f["started"] is not None else ""
        body = (
            f" failure detected by watchdog at work sequence id: {f['seq']} PG status: last enqueued work: "
            f"{f['enq']}{started}, last completed work: {f['done']}"
        )
    else:
        what = ("Exception (either an error or timeout) detected by watchdog at work" if f["kind"] == "exception"
                else "Timeout at NCCL work")  # fmt: skip
        body = (
            f"{what}: {f['seq']}, last enqueued NCCL work: {f['enq']}, last completed NCCL work: {f['done']}."
        )
    launcher = f"[rank{f['launcher']}]:" if f["launcher"] is not None else ""
    ev = parse_line(f"{launcher}{f['glog']}{prefix} {body}")
    assert ev is not None
    assert (ev.prefix, ev.group_rank, ev.launcher_rank, ev.seq) == (
        f["fmt"],
        f["rank"],
        f["launcher"],
        f["seq"],
    )
    if f["fmt"] != "rank":
        assert (ev.pg_uid, ev.pg_desc) == (f["uid"], f["desc"])
    if f["fmt"] == "pg-guid":
        assert ev.pg_id == f["pg_id"]
    if f["kind"] == "timeout":
        assert ev.kind is EventKind.TIMEOUT
        assert (ev.op, ev.numel_in, ev.numel_out, ev.timeout_ms, ev.ran_ms) == (
            f["op"], f["numel_in"], f["numel_out"], f["timeout"], f["ran"],
        )  # fmt: skip
    else:
        assert ev.kind is EventKind.STATUS
        assert (ev.last_enqueued, ev.last_completed) == (f["enq"], f["done"])
        if f["kind"] == "failure" and f["started"] is not None:
            assert (ev.last_started, ev.last_started_op) == (f["started"], f["op"])
