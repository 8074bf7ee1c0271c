"""``analyze DIR`` on a job's whole evidence directory: py-spy dumps, faulthandler tracebacks and
exception texts clustered together, Flight Recorder dumps beside them analysed apart, one report
saying whether both name the same ranks. The Flight Recorder dumps are the real ones of
``tests/data/flight-recorder/`` (a 4-rank gloo job, layout tp=2,pp=2); the stack files are made here,
consistent with each case."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from robustctl.analysis import detect
from robustctl.commands.analyze import analyze_request, run_analyze
from robustctl.config import ParallelLayout
from robustctl.inventory.topology import parse_layout
from robustctl.models import Status, to_jsonable
from robustctl.stacks.result import StacksReport, compare_ranks

ROOT = Path(__file__).resolve().parents[2]
FR = ROOT / "tests" / "data" / "flight-recorder"
TORCH = "/opt/venv/lib/python3.11/site-packages/torch"
LAYOUT = "tp=2,pp=2"

JOB = [
    ("/job/train.py", 88, "train_step"),
    ("/job/train.py", 120, "main"),
    ("/job/train.py", 130, "<module>"),
]
ALL_REDUCE = [
    (f"{TORCH}/distributed/distributed_c10d.py", 2501, "all_reduce"),
    (f"{TORCH}/distributed/c10d_logger.py", 81, "wrapper"),
    *JOB,
]
COMPUTE = [(f"{TORCH}/nn/functional.py", 2000, "linear"), ("/job/model.py", 40, "forward"), *JOB]
STACKS = {"all_reduce": ALL_REDUCE, "compute": COMPUTE}


def faulthandler_text(frames: list[tuple[str, int, str]]) -> str:
    """faulthandler.dump_traceback(all_threads=True) of a rank: a helper thread, then the main one."""
    lines = [
        "Thread 0x00007f25f7e1d6c0 (most recent call first):",
        '  File "/usr/lib/python3.11/threading.py", line 324 in wait',
        '  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap',
        "",
        "Current thread 0x00007f25f88b7b80 (most recent call first):",
        *(f'  File "{f}", line {n} in {fn}' for f, n, fn in frames),
    ]
    return "\n".join(lines) + "\n"


def pyspy_text(frames: list[tuple[str, int, str]], pid: int) -> str:
    """The same stack as ``py-spy dump`` prints it."""
    body = "\n".join(f"    {fn} ({f}:{n})" for f, n, fn in frames)
    return f'Process {pid}: python /job/train.py\nPython v3.11.7 (/usr/bin/python3.11)\n\nThread {pid} (idle): "MainThread"\n{body}\n'


EXCEPTION = (
    "Traceback (most recent call last):\n"
    '  File "/job/train.py", line 130, in <module>\n'
    "    main()\n"
    '  File "/job/model.py", line 40, in forward\n'
    "    x = self.linear(x)\n"
    "RuntimeError: CUDA error: an illegal memory access was encountered\n"
)


def make_dir(tmp_path: Path, case: str | None, stacks: dict[int, str], *, fr_suffix: str = "") -> Path:
    """A directory as torch and a person leave it: the case's Flight Recorder dumps (pickle, or JSON
    with ``fr_suffix=".json"``) and one stack file per rank (``"all_reduce"``/``"compute"``: a
    faulthandler dump; ``"exception"``: an exception text)."""
    d = tmp_path / "job"
    d.mkdir()
    if case is not None:
        for p in sorted((FR / case).iterdir()):
            if p.name.endswith(".json") == (fr_suffix == ".json"):
                shutil.copy(p, d / p.name)
    for rank, what in stacks.items():
        text = EXCEPTION if what == "exception" else faulthandler_text(STACKS[what])
        (d / f"rank{rank}.txt").write_text(text)
    return d


def analyze(d: Path, layout: str | None = LAYOUT, ranks_per_host: int | None = 2) -> StacksReport:
    result = run_analyze(analyze_request([d], layout=layout, ranks_per_host=ranks_per_host))
    assert isinstance(result.report, StacksReport), result.report
    return result.report


SKIPPED = {0: "all_reduce", 1: "all_reduce", 2: "all_reduce", 3: "compute"}


@pytest.mark.parametrize("fr_suffix", ["", ".json"])
def test_stacks_and_flight_recorder_agree_on_the_rank_that_skipped_the_all_reduce(
    tmp_path: Path, fr_suffix: str
) -> None:
    report = analyze(make_dir(tmp_path, "skipped-allreduce", SKIPPED, fr_suffix=fr_suffix))
    assert report.suspect_ranks == (3,)
    fr = report.flight_recorder
    assert fr is not None and fr.status is Status.CRITICAL
    assert fr.suspect_ranks == (3,) and fr.suspects[0].kind == "root" and fr.suspects[0].host == "machine-1"
    assert len(fr.files) == 4 and not fr.not_read
    assert report.agreement is not None
    assert report.agreement.verdict == "agree" and report.agreement.agree == (3,)
    assert report.agreement.summary == "stacks and Flight Recorder agree on rank 3"
    assert report.status is Status.CRITICAL and int(report.exit_code) == 2
    assert report.summary.endswith("; stacks and Flight Recorder agree on rank 3")
    assert [f.path.rsplit("/", 1)[-1] for f in report.inputs] == [f"rank{r}.txt" for r in range(4)]


def test_they_disagree_when_the_stacks_point_elsewhere(tmp_path: Path) -> None:
    # cascade: Flight Recorder's root is rank 1; these stacks show rank 3 as the odd one
    report = analyze(make_dir(tmp_path, "cascade", SKIPPED))
    assert report.agreement is not None
    assert report.agreement.verdict == "disagree"
    assert (report.agreement.stacks_only, report.agreement.fr_only, report.agreement.agree) == (
        (3,),
        (1,),
        (),
    )
    assert report.agreement.summary == "disagree: stacks name 3, Flight Recorder names 1"


def test_only_one_source_names_a_rank(tmp_path: Path) -> None:
    healthy = dict.fromkeys(range(4), "all_reduce")
    report = analyze(make_dir(tmp_path, "skipped-allreduce", healthy))
    assert report.suspect_ranks == ()
    assert report.agreement is not None and report.agreement.verdict == "flight-recorder-only"
    assert report.agreement.summary == "only one source names a rank: Flight Recorder names 3"
    assert report.status is Status.CRITICAL  # the worse of OK (stacks) and CRITICAL (Flight Recorder)


def test_an_exception_text_is_the_crashed_ranks_evidence(tmp_path: Path) -> None:
    stacks = {0: "all_reduce", 1: "all_reduce", 2: "all_reduce", 3: "exception"}
    report = analyze(make_dir(tmp_path, "skipped-allreduce", stacks))
    (s,) = report.suspects
    assert s.rank == 3 and "RuntimeError: CUDA error: an illegal memory access was encountered" in s.reason
    unreadable = next(c for c in report.classes if c.unreadable)
    assert unreadable.ranks == "3"
    assert "exception: RuntimeError: CUDA error" in unreadable.reasons[0][0]
    assert report.agreement is not None and report.agreement.verdict == "agree"


def test_a_faulthandler_only_directory_is_clustered_and_blamed_like_pyspy_dumps(tmp_path: Path) -> None:
    fh_dir = make_dir(tmp_path, None, SKIPPED)
    py_dir = tmp_path / "pyspy"
    py_dir.mkdir()
    for rank, what in SKIPPED.items():
        (py_dir / f"rank{rank}.txt").write_text(pyspy_text(STACKS[what], 100 + rank))
    a, b = analyze(fh_dir), analyze(py_dir)
    assert a.flight_recorder is None and a.agreement is None
    assert (a.status, a.suspect_ranks, a.likely_culprits, a.group) == (
        b.status,
        b.suspect_ranks,
        b.likely_culprits,
        b.group,
    )
    assert [(c.ranks, c.category, c.dominant, c.healthy) for c in a.classes] == [
        (c.ranks, c.category, c.dominant, c.healthy) for c in b.classes
    ]
    # without a layout too: every file is stack evidence
    assert analyze(fh_dir, layout=None, ranks_per_host=None).suspect_ranks == (3,)


def test_stacks_only_documents_keep_their_keys(tmp_path: Path) -> None:
    py_dir = tmp_path / "pyspy"
    py_dir.mkdir()
    for rank, what in SKIPPED.items():
        (py_dir / f"rank{rank}.txt").write_text(pyspy_text(STACKS[what], 100 + rank))
    doc = to_jsonable(analyze(py_dir))
    assert doc["flight_recorder"] is None and doc["agreement"] is None
    assert (
        doc["summary"]
        == "1 outlier rank (rank 3 compute) in tp group 1 → over-evict 1 machine (0 healthy taken)"
    )


def test_flight_recorder_dumps_alone_are_the_group_kinds_entry_as_before(tmp_path: Path) -> None:
    d = make_dir(tmp_path, "skipped-allreduce", {})
    result = run_analyze(analyze_request([d], layout=LAYOUT, ranks_per_host=2))
    before = detect.analyze_inputs([d], layout=_layout(), ranks_per_host=2)
    assert result.kind == "analyze"
    assert to_jsonable(result.report) == to_jsonable(before)
    assert run_analyze(analyze_request([d])).kind == "analyze"


def _layout() -> ParallelLayout:
    return parse_layout(LAYOUT)


def test_a_damaged_flight_recorder_dump_is_said_and_the_rest_used(tmp_path: Path) -> None:
    d = make_dir(tmp_path, "skipped-allreduce", SKIPPED)
    (d / "nccl_trace_rank_9").write_bytes(b"\x80\x02 entries damaged")
    report = analyze(d)
    fr = report.flight_recorder
    assert fr is not None and fr.suspect_ranks == (3,)
    assert len(fr.not_read) == 1 and fr.not_read[0]["file"].endswith("nccl_trace_rank_9")
    assert fr.summary.endswith("; 1 file(s) not read")


def test_without_a_layout_another_kind_of_file_sends_every_file_to_its_own_analysis(tmp_path: Path) -> None:
    d = make_dir(tmp_path, "skipped-allreduce", SKIPPED)
    (d / "notes.txt").write_text("just words\n")
    result = run_analyze(analyze_request([d]))
    assert result.kind == "analyze"
    # with the layout it is an UNKNOWN input of the one report, the rest still read
    report = analyze(d)
    bad = [f for f in report.inputs if f.status is Status.UNKNOWN]
    assert [f.path.rsplit("/", 1)[-1] for f in bad] == ["notes.txt"]
    assert report.agreement is not None and report.agreement.verdict == "agree"


def test_without_a_layout_the_mixed_directory_is_still_one_report(tmp_path: Path) -> None:
    report = analyze(make_dir(tmp_path, "skipped-allreduce", SKIPPED), layout=None, ranks_per_host=None)
    assert report.flight_recorder is not None and report.agreement is not None
    assert report.agreement.agree == (3,)


@pytest.mark.parametrize(
    ("stacks", "fr", "verdict"),
    [
        ((3,), (3,), "agree"),
        ((3, 5), (3,), "overlap"),
        ((3,), (5,), "disagree"),
        ((3,), (), "stacks-only"),
        ((), (5,), "flight-recorder-only"),
        ((), (), "none"),
    ],
)
def test_compare_ranks(stacks: tuple[int, ...], fr: tuple[int, ...], verdict: str) -> None:
    a = compare_ranks(stacks, fr)
    assert a.verdict == verdict
    assert set(a.agree) | set(a.stacks_only) == set(stacks) and set(a.agree) | set(a.fr_only) == set(fr)


def test_cli_end_to_end(tmp_path: Path) -> None:
    d = make_dir(tmp_path, "skipped-allreduce", SKIPPED)
    cmd = [sys.executable, "-m", "robustctl", "analyze", str(d), "--layout", LAYOUT, "-G", "2"]
    proc = subprocess.run(
        [*cmd, "--json"], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )
    assert proc.returncode == 2, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "stacks" and doc["status"] == "critical" and doc["exit_code"] == 2
    assert doc["suspect_ranks"] == [3]
    assert doc["agreement"]["verdict"] == "agree" and doc["agreement"]["agree"] == [3]
    suspect = doc["flight_recorder"]["suspects"][0]
    # named the way stacks --json names its suspects
    assert {"rank", "host", "machine", "reason", "likely_culprit"} <= set(suspect) & set(doc["suspects"][0])
    assert (suspect["rank"], suspect["host"], suspect["kind"]) == (3, "machine-1", "root")
    assert doc["flight_recorder"]["chains"][0]["text"].endswith("complete)")
    assert "agreement: stacks and Flight Recorder agree on rank 3" in " ".join(proc.stderr.split())
    assert "Traceback" not in proc.stderr


def test_the_shipped_evidence_with_the_flight_recorder_fixture() -> None:
    paths = [ROOT / "tests" / "data" / "mixed" / "skipped-allreduce", FR / "skipped-allreduce"]
    result = run_analyze(analyze_request(paths, layout=LAYOUT, ranks_per_host=2))
    report = result.report
    assert isinstance(report, StacksReport)
    assert report.suspect_ranks == (3,) and report.agreement is not None
    assert report.agreement.summary == "stacks and Flight Recorder agree on rank 3"
    assert len(report.inputs) == 4 and report.flight_recorder is not None
    assert len(report.flight_recorder.files) == 8  # pickle and JSON side by side: one per rank used


WATCHDOG = (
    "[E1127 04:10:02.451803116 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for 600004 "
    "milliseconds before timing out.\n"
)
WATCHDOG_EXCEPTION = (
    WATCHDOG + "Traceback (most recent call last):\n"
    '  File "/job/train.py", line 88, in train_step\n'
    "    dist.all_reduce(grads)\n"
    "torch.distributed.DistBackendError: [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=2, OpType=ALLREDUCE)\n"
)


def test_a_watchdog_log_holding_a_ranks_traceback_is_that_ranks_error(tmp_path: Path) -> None:
    d = make_dir(tmp_path, "skipped-allreduce", {0: "all_reduce", 1: "all_reduce", 2: "all_reduce"})
    (d / "rank3.log").write_text(WATCHDOG_EXCEPTION)
    report = analyze(d)
    (s,) = report.suspects
    assert s.rank == 3 and "DistBackendError" in s.reason
    assert report.agreement is not None and report.agreement.verdict == "agree"


def test_a_watchdog_log_without_a_traceback_keeps_the_per_file_analysis(tmp_path: Path) -> None:
    d = make_dir(tmp_path, "skipped-allreduce", SKIPPED)
    (d / "rank3.log").write_text(WATCHDOG)
    for layout in (LAYOUT, None):
        result = run_analyze(analyze_request([d], layout=layout))
        assert result.kind == "analyze"
        assert {"flight-recorder", "nccl-watchdog"} <= {a.kind for a in result.report.artefacts}  # type: ignore[union-attr]


def test_watchdog_logs_alone_stay_the_watchdog_kinds_even_with_tracebacks(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    for r in range(4):
        (d / f"rank{r}.log").write_text(WATCHDOG_EXCEPTION.replace("Rank 3", f"Rank {r}"))
    for layout in (LAYOUT, None):
        result = run_analyze(analyze_request([d], layout=layout))
        assert result.kind == "analyze"
        assert [a.kind for a in result.report.artefacts] == ["nccl-watchdog"]  # type: ignore[union-attr]
