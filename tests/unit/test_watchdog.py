"""NCCL watchdog logs: line formats, the group kind's claim, and crafted per-rank logs of an 8-rank job
(tp=2, pp=2, dp=2) where one rank printed nothing, one rank is behind, sizes differ, two process
groups run apart, or the watchdog itself is stuck; and ``robustctl analyze DIR --json`` end to end."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from robustctl.analysis import detect, watchdog
from robustctl.analysis.detect import AnalysisOptions, GroupMember
from robustctl.analysis.watchdog import EventKind, WatchdogTally, claim, evaluate, parse_line, rank_from_name
from robustctl.inventory.topology import parse_layout
from robustctl.models import Status

LAYOUT = parse_layout("tp=2,pp=2,dp=2")
DEFAULT = "[PG ID 0 PG GUID 0(default_pg) Rank {r}]"
TIMEOUT = (
    "[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, "
    "NumelIn={n}, NumelOut={n}, Timeout(ms)=600000) ran for 600031 milliseconds before timing out."
)
STATUS = (
    "{prefix} Exception (either an error or timeout) detected by watchdog at work: {seq}, "
    "last enqueued NCCL work: {enq}, last completed NCCL work: {done}."
)


def glog(body: str, line: int = 632) -> str:
    return f"[E1127 05:00:00.000000000 ProcessGroupNCCL.cpp:{line}] {body}"


def rank_log(r: int, seq: int = 120, done: int = 119, *, op: str = "ALLREDUCE", n: int = 1024) -> list[str]:
    """A rank's timeout and status lines in the default group (the log has no launcher prefix)."""
    return [
        glog(TIMEOUT.format(r=r, seq=seq, op=op, n=n)),
        glog(STATUS.format(prefix=DEFAULT.format(r=r), seq=seq, enq=seq + 1, done=done), 1785),
        glog(
            f"[Rank {r}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA",
            621,
        ),
    ]


def write_ranks(d: Path, logs: dict[int, list[str]]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for r, lines in logs.items():
        (d / f"rank{r}.log").write_text("\n".join(lines) + "\n")
    return d


def judge(d: Path, layout: object = LAYOUT) -> detect.ArtefactAnalysis:
    report = detect.analyze_inputs([d], layout=layout, ranks_per_host=4)  # type: ignore[arg-type]
    (entry,) = [a for a in report.artefacts if a.kind == "nccl-watchdog"]
    return entry


# --- lines --------------------------------------------------------------------------------------


def test_each_prefix_format_parses_to_its_fields() -> None:
    old = parse_line(
        "[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 milliseconds before timing out."
    )
    assert old is not None and old.kind is EventKind.TIMEOUT
    assert (old.prefix, old.group_rank, old.pg_uid, old.seq, old.op, old.numel_in, old.timeout_ms, old.ran_ms) == (
        "rank", 1, None, 469508, "ALLREDUCE", None, 1800000, 1802212,
    )  # fmt: skip
    mid = parse_line(
        "[rank4]:[E1016 03:31:38.929234295 ProcessGroupNCCL.cpp:1709] [PG 3 Rank 4] Timeout at NCCL work: 9141, "
        "last enqueued NCCL work: 9141, last completed NCCL work: 9140."
    )
    assert mid is not None and mid.kind is EventKind.STATUS
    assert (mid.prefix, mid.launcher_rank, mid.pg_uid, mid.group_rank, mid.seq, mid.last_completed) == (
        "pg", 4, "3", 4, 9141, 9140,
    )  # fmt: skip
    desc = parse_line("[PG 0 (default_pg) Rank 1] Exception (either an error or timeout) detected by watchdog at "
                      "work: 6463, last enqueued NCCL work: 6463, last completed NCCL work: 6462.")  # fmt: skip
    assert desc is not None and (desc.pg_uid, desc.pg_desc, desc.group_rank) == ("0", "default_pg", 1)
    new = parse_line(
        " 2025-02-18 12:54 [rank13]:[E218 04:54:22.864535778 ProcessGroupNCCL.cpp:1795] [PG ID 11 PG GUID 119 Rank 1]"
        " Exception (either an error or timeout) detected by watchdog at work: 216, last enqueued NCCL work: 220, "
        "last completed NCCL work: 215."
    )
    assert new is not None
    assert (new.prefix, new.launcher_rank, new.pg_id, new.pg_uid, new.pg_desc, new.group_rank) == (
        "pg-guid", 13, 11, "119", None, 1,
    )  # fmt: skip
    assert (new.seq, new.last_enqueued, new.last_completed) == (216, 220, 215)


def test_pg_status_line_with_the_started_sequence_fields() -> None:
    ev = parse_line(
        "[rank0]:[E0101 00:00:00.000 ProcessGroupNCCL.cpp:2268] [PG ID 3 PG GUID 7(TP) Rank 0]  failure detected by "
        "watchdog at work sequence id: 18 PG status: last enqueued work: 39, last started work: 19 (_ALLGATHER_BASE), "
        "last completed work: 17"
    )
    assert ev is not None and ev.kind is EventKind.STATUS
    assert (ev.seq, ev.last_enqueued, ev.last_started, ev.last_started_op, ev.last_completed) == (
        18, 39, 19, "_ALLGATHER_BASE", 17,
    )  # fmt: skip
    assert ev.pg_desc == "TP"
    nothing = parse_line("[PG ID 0 PG GUID 0 Rank 6] Received a dump signal due to a collective timeout from this "
                         "local rank and we will try our best to dump the debug info. Last enqueued NCCL work: -1, "
                         "last completed NCCL work: -1.This is most likely caused by incorrect usages")  # fmt: skip
    assert nothing is not None and nothing.kind is EventKind.UPDATE
    assert (nothing.last_enqueued, nothing.last_completed) == (-1, -1)


def test_heartbeat_stuck_failed_and_desync_lines() -> None:
    hb = parse_line("[PG ID 0 PG GUID 0 Rank 3] Heartbeat monitor timed out! Process will be terminated after "
                    "dumping debug info. workMetaList_.size()=2")  # fmt: skip
    assert hb is not None and hb.kind is EventKind.HEARTBEAT
    stuck = parse_line("[Rank 2] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in "
                       "monitoring enqueued collectives.")  # fmt: skip
    assert stuck is not None and (stuck.kind, stuck.stuck_s) == (EventKind.STUCK, 480)
    failed = parse_line(
        "[Rank 4] Some NCCL operations have failed or timed out. Due to the asynchronous nature"
    )
    assert failed is not None and failed.kind is EventKind.FAILED
    missing = parse_line("\t - To our best knowledge, ranks [3, 5] are the lagging ranks that caused this timeout. "
                         "They never joined any collectives")  # fmt: skip
    assert missing is not None and (missing.desync, missing.desync_ranks) == ("never-joined", (3, 5))
    joined = parse_line("\t   - [0, 1] joined but didn't finish collective #12 (count from 1)")
    assert joined is not None and (joined.desync, joined.desync_ranks, joined.seq) == (
        "joined-not-finished",
        (0, 1),
        12,
    )
    at = parse_line("\t - [0] Timeout at collective: ALLREDUCE, #315")
    assert at is not None and (at.desync, at.op, at.seq, at.desync_ranks) == (
        "timeout-at",
        "ALLREDUCE",
        315,
        (0,),
    )


def test_lines_the_watchdog_did_not_print_are_none() -> None:
    for text in ("", "NCCL INFO Connected all rings", "Epoch 3: loss=2.1", "[Rank 3] started step 4",
                 "watchdog: BUG: soft lockup - CPU#3 stuck for 22s!", "x" * 100_000):  # fmt: skip
        assert parse_line(text) is None


def test_rank_from_file_names() -> None:
    assert rank_from_name("rank3.log") == 3
    assert rank_from_name("rank_12.txt.gz") == 12
    assert rank_from_name("train-rank-5.out") == 5
    assert rank_from_name("worker-3.log") == 3
    assert rank_from_name("node.7") == 7
    assert rank_from_name("train.log") is None
    assert rank_from_name("stderr") is None


def test_claim_takes_watchdog_logs_and_leaves_other_artefacts() -> None:
    assert claim(
        "x", b"[rank0]:[E321 02:07:08.408 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective"
    )
    assert claim("x", b"[I1127 05:00:00.123456 ProcessGroupNCCL.cpp:899] [PG ID 0 PG GUID 0 Rank 0] options")
    assert claim("x", b"[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout")
    py_spy_native = (
        b'Thread 0x7F (idle): "pt_nccl_watchdg"\n    watchdogHandler (ProcessGroupNCCL.cpp:1624)\n'
    )
    assert not claim("dump.txt", py_spy_native)
    assert not claim("x", b"# nThread 1 nGpus 8 minBytes 8 maxBytes 128M\n#  Rank  0 Group  0 Pid 1 on host")
    assert not claim("x", b"[  12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    assert not claim("x", b"\x80\x04\x95 Watchdog caught collective operation timeout \x00\x00")


def test_no_other_shipped_artefact_is_claimed() -> None:
    """nccl-tests output, kernel logs, dcgmi output, py-spy dumps, Flight Recorder dumps keep their kinds."""
    data = Path(__file__).resolve().parents[1] / "data"
    others = [p for p in data.rglob("*") if p.is_file() and "nccl-watchdog" not in p.parts]
    assert len(others) > 50
    for p in others:
        head = p.read_bytes()[: detect.HEAD_BYTES]
        if head[:2] == b"\x1f\x8b":
            try:
                head = gzip.decompress(p.read_bytes())[: detect.HEAD_BYTES]
            except (
                OSError,
                EOFError,
                zlib.error,
            ):  # a deliberately damaged archive: its raw bytes are offered
                pass
        assert not claim(p.name, head), p


# --- crafted 8-rank jobs ------------------------------------------------------------------------


def test_a_rank_that_printed_nothing_is_named_silent(tmp_path: Path) -> None:
    d = write_ranks(tmp_path / "job", {r: rank_log(r) for r in range(8) if r != 5})
    entry = judge(d)
    assert entry.status is Status.CRITICAL
    details = entry.details
    assert details["silent_ranks"] == "5"
    assert details["suspect_ranks"] == [5]
    (suspect,) = details["suspects"]
    assert (suspect["rank"], suspect["category"], suspect["likely_culprit"]) == (5, "silent", True)
    assert suspect["coords"] == {"tp": 1, "cp": 0, "ep": 0, "dp": 0, "pp": 1}
    assert suspect["machine"] == 1
    assert any(e.startswith("tp group 4-5: 4 reported") for e in suspect["evidence"])
    assert "suspect rank 5 (silent)" in entry.summary
    row = details["timeouts"][0]
    assert (row["seq"], list(row["ops"]), row["process_group"]) == (120, ["ALLREDUCE"], "PG 0 (default_pg)")
    assert len(row["reported_by"]) == 7


def test_without_a_layout_no_rank_is_called_silent(tmp_path: Path) -> None:
    d = write_ranks(tmp_path / "job", {r: rank_log(r) for r in range(8) if r != 5})
    entry = judge(d, layout=None)
    assert entry.status is Status.CRITICAL
    assert entry.details["suspect_ranks"] == []
    assert "no rank named" in entry.summary


def test_a_rank_behind_the_others_is_named_lagging(tmp_path: Path) -> None:
    logs = {r: rank_log(r) for r in range(8)}
    logs[6] = rank_log(6, seq=118, done=117)
    entry = judge(write_ranks(tmp_path / "job", logs))
    assert entry.status is Status.CRITICAL
    assert entry.details["suspect_ranks"] == [6]
    (suspect,) = entry.details["suspects"]
    assert suspect["category"] == "lagging"
    assert suspect["process_group"] == "PG 0 (default_pg)"
    assert "last completed work 117" in suspect["reason"] and "the others 119" in suspect["reason"]
    lag = next(f for f in entry.findings if "behind" in f.message)
    assert lag.evidence["behind"] == {"rank 6": 117}
    assert lag.evidence["group_last_completed"] == 119


def test_lagging_without_a_timeout_is_a_warning(tmp_path: Path) -> None:
    logs = {
        r: [
            glog(
                f"{DEFAULT.format(r=r)} NCCL Work update periodically: last enqueued NCCL work: 50, "
                f"last completed NCCL work: {45 if r == 2 else 50}.",
                1700,
            )
        ]
        for r in range(8)
    }
    entry = judge(write_ranks(tmp_path / "job", logs))
    assert entry.status is Status.WARNING
    assert entry.details["suspect_ranks"] == [2]


def test_sequence_numbers_of_two_groups_are_never_compared(tmp_path: Path) -> None:
    logs: dict[int, list[str]] = {}
    for r in range(8):
        tp_group, tp_rank = r // 2, r % 2
        tp_prefix = f"[PG ID 2 PG GUID {10 + tp_group}(TENSOR_MODEL_PARALLEL_GROUP) Rank {tp_rank}]"
        logs[r] = [
            glog(STATUS.format(prefix=DEFAULT.format(r=r), seq=500, enq=500, done=499), 1785),
            glog(
                STATUS.format(prefix=tp_prefix, seq=40 + tp_group, enq=40 + tp_group, done=39 + tp_group),
                1785,
            ),
        ]
    entry = judge(write_ranks(tmp_path / "job", logs))
    assert entry.status is Status.CRITICAL
    assert entry.details["suspect_ranks"] == []  # 39..42 are other groups' numbers, not behind 499
    assert not [f for f in entry.findings if "behind" in f.message]
    groups = {g["process_group"]: g for g in entry.details["process_groups"]}
    assert groups["PG 10 (TENSOR_MODEL_PARALLEL_GROUP)"]["last_completed"] == {"rank 0": 39, "rank 1": 39}
    assert groups["PG 13 (TENSOR_MODEL_PARALLEL_GROUP)"]["last_completed"] == {"rank 6": 42, "rank 7": 42}
    assert {(r["process_group"], r["seq"]) for r in entry.details["timeouts"]} == {
        ("PG 0 (default_pg)", 500), *((f"PG {10 + g} (TENSOR_MODEL_PARALLEL_GROUP)", 40 + g) for g in range(4)),
    }  # fmt: skip


def test_a_rank_whose_size_differs_is_named(tmp_path: Path) -> None:
    logs = {r: rank_log(r, n=2048 if r == 3 else 1024) for r in range(8)}
    entry = judge(write_ranks(tmp_path / "job", logs))
    assert entry.details["suspect_ranks"] == [3]
    (suspect,) = entry.details["suspects"]
    assert suspect["category"] == "size-mismatch"
    assert "NumelIn 2048" in suspect["reason"] and "the others have 1024" in suspect["reason"]
    assert any("NumelIn differs" in f.message for f in entry.findings)


def test_a_stuck_watchdog_names_its_host(tmp_path: Path) -> None:
    logs = {r: rank_log(r) for r in range(8)}
    logs[2] = [glog(f"{DEFAULT.format(r=2)} ProcessGroupNCCL's watchdog got stuck for 480 seconds without making "
                    "progress in monitoring enqueued collectives.", 1743)]  # fmt: skip
    entry = judge(write_ranks(tmp_path / "job", logs))
    assert entry.details["suspect_ranks"] == [2]
    (suspect,) = entry.details["suspects"]
    assert suspect["category"] == "watchdog-stuck"
    assert suspect["host"] == "machine-0"
    assert any("not a missing peer" in f.message for f in entry.findings)


def test_a_clean_log_is_ok(tmp_path: Path) -> None:
    logs = {r: [glog(f"{DEFAULT.format(r=r)} ProcessGroupNCCL initialization options: size: 8", 899),
                glog(f"[Rank {r}] NCCL watchdog thread started!", 1200)] for r in range(8)}  # fmt: skip
    entry = judge(write_ranks(tmp_path / "job", logs))
    assert entry.status is Status.OK
    assert entry.details["silent_ranks"] == ""
    assert entry.details["suspect_ranks"] == []


def test_one_log_with_launcher_prefixes_and_a_gzip_member(tmp_path: Path) -> None:
    lines = [f"[rank{r}]:{line}" for r in range(8) if r != 1 for line in rank_log(r)]
    d = tmp_path / "job"
    d.mkdir()
    (d / "train.log.gz").write_bytes(gzip.compress("\n".join(lines).encode()))
    entry = judge(d)
    assert entry.details["silent_ranks"] == "1"
    assert "launcher" in entry.details["formats"]


def test_bounded_members_are_counted_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watchdog, "MAX_MEMBERS", 3)
    tally = WatchdogTally()
    for r in range(10):
        tally.add_line(STATUS.format(prefix=f"[PG ID 1 PG GUID 1 Rank {r}]", seq=5, enq=5, done=4))
    assert tally.members == 3 and tally.members_dropped == 7
    assert evaluate(tally).details["dropped"]["members"] == 7


def test_analyze_members_reads_ranks_from_file_names() -> None:
    members = [
        GroupMember(f"d/rank{r}.log", f"rank{r}.log", "\n".join(rank_log(r)).encode()) for r in (0, 1, 3)
    ]
    verdict = watchdog.analyze_members(members, AnalysisOptions(layout=parse_layout("dp=4")))
    assert verdict.details["silent_ranks"] == "2"
    assert verdict.details["suspect_ranks"] == [2]


# --- the CLI end to end -------------------------------------------------------------------------


def _cli(*argv: str) -> tuple[int, dict[str, object]]:
    p = subprocess.run(
        [sys.executable, "-m", "robustctl", "analyze", *argv, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return p.returncode, json.loads(p.stdout)


def test_cli_names_the_silent_rank_and_exits_2(tmp_path: Path) -> None:
    d = write_ranks(tmp_path / "job", {r: rank_log(r) for r in range(8) if r != 5})
    rc, doc = _cli(str(d), "--layout", "tp=2,pp=2,dp=2", "-G", "4")
    assert rc == 2
    (entry,) = doc["artefacts"]  # type: ignore[misc]
    assert entry["kind"] == "nccl-watchdog"
    assert entry["details"]["suspect_ranks"] == [5]
    assert entry["details"]["suspects"][0]["host"] == "machine-1"


def test_cli_names_the_lagging_rank_without_a_layout(tmp_path: Path) -> None:
    logs = {r: rank_log(r) for r in range(8)}
    logs[6] = rank_log(6, seq=118, done=117)
    rc, doc = _cli(str(write_ranks(tmp_path / "job", logs)))
    assert rc == 2
    (entry,) = doc["artefacts"]  # type: ignore[misc]
    assert entry["details"]["suspect_ranks"] == [6]
    assert entry["details"]["likely_culprits"] == [6]


def test_a_desync_report_of_a_sub_group_names_group_ranks(tmp_path: Path) -> None:
    tp = "[PG ID 2 PG GUID 9(TP) Rank {g}]"
    logs = {
        4: [
            glog(STATUS.format(prefix=tp.format(g=0), seq=7, enq=7, done=6), 1785),
            glog("Rank 0", 1937),
            "\t - [0] Timeout at collective: ALLREDUCE, #7",
            "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:",
            "\t   - [0] joined but didn't finish collective #7 (count from 1)",
            "\t     [1] finished collective #6, but didn't join collective #7 (count from 1)",
        ],
        5: [
            glog(
                f"{tp.format(g=1)} NCCL Work update periodically: last enqueued NCCL work: 6, "
                "last completed NCCL work: 6.",
                1700,
            )
        ],
        6: [
            glog(STATUS.format(prefix="[PG ID 2 PG GUID 11(TP) Rank 0]", seq=7, enq=7, done=6), 1785),
            glog("Rank 0", 1937),
            "\t - To our best knowledge, ranks [1] are the lagging ranks that caused this "
            "timeout. They never joined any collectives",
        ],
    }
    entry = judge(write_ranks(tmp_path / "job", logs), layout=None)
    named = {
        (s["rank"], s["group_rank"], s["process_group"])
        for s in entry.details["suspects"]
        if s["category"] == "desync"
    }
    assert named == {(4, 0, "PG 9 (TP)"), (5, 1, "PG 9 (TP)"), (None, 1, "PG 11 (TP)")}
    assert 4 in entry.details["suspect_ranks"] and 5 in entry.details["suspect_ranks"]
    assert any("TORCH_NCCL_DESYNC_DEBUG" in f.message for f in entry.findings)


def test_a_heartbeat_monitor_timeout_names_its_rank(tmp_path: Path) -> None:
    logs = {r: rank_log(r) for r in range(8)}
    logs[3] = [glog(f"{DEFAULT.format(r=3)} Heartbeat monitor timed out! Process will be terminated after dumping "
                    "debug info. workMetaList_.size()=1", 1384)]  # fmt: skip
    entry = judge(write_ranks(tmp_path / "job", logs))
    assert entry.details["suspect_ranks"] == [3]
    assert entry.details["watchdog_stuck"][0]["process_group"] == "PG 0 (default_pg)"


def test_many_silent_ranks_are_all_counted_and_the_first_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watchdog, "MAX_SUSPECTS", 4)
    tally = WatchdogTally()
    for line in rank_log(0):
        tally.add_line(f"[rank0]:{line}")
    verdict = evaluate(tally, layout=parse_layout("tp=8,dp=8"), ranks_per_host=8)
    assert verdict.details["silent_ranks"] == "1-63"
    assert verdict.details["suspect_ranks"] == list(range(1, 64))
    assert [s["rank"] for s in verdict.details["suspects"]] == [1, 2, 3, 4]
    assert verdict.details["suspects_not_listed"] == 59


def test_an_nccl_error_without_a_timeout_is_a_failure(tmp_path: Path) -> None:
    error = parse_line("[E ProcessGroupNCCL.cpp:828] [Rank 2] NCCL watchdog thread terminated with exception: "
                       "NCCL error: remote process exited or there was a network error, NCCL version 2.14.3")  # fmt: skip
    assert error is not None and error.kind is EventKind.FAILED
    work = parse_line("[E ProcessGroupNCCL.cpp:542] [Rank 0] Collective WorkNCCL(SeqNum=89, OpType=ALLREDUCE, "
                      "NumelIn=67108864, Timeout(ms)=90000) raised the following async exception: NCCL error")  # fmt: skip
    assert work is not None and (work.kind, work.seq, work.op) == (EventKind.FAILED, 89, "ALLREDUCE")
    assert claim("x", work.raw.encode())
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "rank2.log").write_text(error.raw + "\n")
    entry = judge(tmp_path / "job", layout=None)
    assert entry.status is Status.CRITICAL
    assert "NCCL operations failed" in entry.summary
    assert any("on rank 2" in f.message or "on ranks 2" in f.message for f in entry.findings)


def test_with_a_layout_and_every_rank_printing_the_summary_says_so(tmp_path: Path) -> None:
    entry = judge(write_ranks(tmp_path / "job", {r: rank_log(r) for r in range(8)}))
    assert entry.status is Status.CRITICAL
    assert entry.details["suspect_ranks"] == []
    assert "every rank of the layout printed" in entry.summary
