"""Regression cases of issue 21 item 6 for the last two store readers: the job code records
(``code_changes``, ``job_versions``: ``update list``) and the playbook journal (``playbook_runs``,
``playbook_steps``: ``playbook resume``, ``playbook run``). A bad time, count, pid, exit code or JSON
document in one of their rows is a store error (exit 78) whose one line names the table, row and column,
never an internal error (exit 3); the rows robustctl writes read back unchanged.

:func:`fill` builds the store (also used by tests/unit/test_fuzz_store.py); :func:`plant` changes one
field of a copy with sqlite3, as a person with the file can.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import sqlite3
import sys
from pathlib import Path

import pytest

from robustctl.cli.main import main
from robustctl.config import CodeSpec
from robustctl.errors import ActionRefused
from robustctl.exit_codes import ExitCode
from robustctl.jobcode import records
from robustctl.jobcode.progress import HostProgress, ProgressReading, RankProgress
from robustctl.playbooks import journal
from robustctl.store import COUNT_MAX, TIME_MAX, Store, StoreError

CODE_INVENTORY = """\
gpus_per_host: 2
hosts:
  - name: node[01-04]
    address: 127.0.0.[2-5]
jobs:
  small:
    hosts: node[01-04]
    layout: {tp: 2, pp: 2, dp: 2}
    code: {path: /srv/train/code, stable_after_steps: 5}
"""
"""A job with a ``code:`` section (``update list --no-progress`` contacts no host)."""

PLAYBOOK = f"""\
name: note
params:
  job: {{required: true}}
steps:
  - id: note
    kind: notify
    args: {{command: [{json.dumps(sys.executable)}, "-c", "pass"]}}
"""
"""One harmless step: the journal records it done, so ``resume`` takes it from there and runs nothing."""

FACT_GUARDS = ("code_changes_facts_fixed", "job_versions_facts_fixed")
"""Triggers that refuse an UPDATE of a change's or version's facts: dropped first by :func:`plant`
(whoever edits the file can drop them too)."""

RUNNING, DONE = 1, 2
"""The journal's runs: run 1 (job ``small``) is still ``running`` (its one step done: the process died
before finishing the run), run 2 (no job) is ``done``."""


def fill(path: Path) -> None:
    """A store with every kind of row the two readers take: two code changes (one pending, one applied),
    two job versions (the first stable), a running playbook run and a finished one, each with a done
    step whose result is a JSON document."""
    now = [1_700_000_000.0]

    def clock() -> float:
        now[0] += 60
        return now[0]

    with Store.open(path, clock=clock) as s:
        spec = CodeSpec(path="/srv/train/code", stable_after_steps=5)
        old = records.record_change(s, "small", ref="v1", commit="a" * 40, from_ref=None, reason="first")
        records.mark_applied(s, "small", [old.id], forced=False)
        first = records.record_version_start(
            s, "small", "a" * 40, started_at=clock(), base_step=10, change_id=1
        )
        for step in (10, 20):
            at = clock()
            host = HostProgress("node01", (RankProgress("node01", "f", 0, step, at),))
            records.evaluate_stability(s, "small", spec, ProgressReading("small", (host,), at))
        assert records.versions(s, "small")[0].stable_at is not None, first
        records.record_change(s, "small", ref="v2", commit="b" * 40, from_ref="a" * 40, reason="faster")
        records.record_version_start(s, "small", "c" * 40, started_at=clock(), base_step=3)
        for job in ("small", None):  # one unfinished run per job: the done one has none
            run_id = journal.begin_run(s, "note", "note.yaml", PLAYBOOK, job, {"job": "small"})
            seq = journal.step_start(s, run_id, "note", "notify", 1)
            journal.step_end(s, run_id, seq, "done", exit_code=0, result={"kind": "notify", "exit_code": 0})
        journal.finish_run(s, DONE, journal.RunStatus.DONE, "reached the end")


def plant(path: Path, table: str, column: str, value: object, *, rowid: int = 1) -> None:
    """Set ``column`` of row ``rowid`` of ``table`` to ``value`` with sqlite3, past the fact guards."""
    conn = sqlite3.connect(path)
    try:
        for trigger in FACT_GUARDS:
            conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        conn.execute(f"UPDATE {table} SET {column}=? WHERE rowid=?", (value, rowid))
        conn.commit()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("readers")
    fill(d / "filled.db")
    return d / "filled.db"


@pytest.fixture
def box(tmp_path: Path, filled: Path) -> Path:
    """``inv.yaml`` and ``s.db`` (a copy of the filled store)."""
    (tmp_path / "inv.yaml").write_text(CODE_INVENTORY)
    (tmp_path / "s.db").write_bytes(filled.read_bytes())
    return tmp_path


def cli(box: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    full = [*argv, "-i", str(box / "inv.yaml"), "--state", str(box / "s.db")]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(full)
    return code, out.getvalue(), err.getvalue()


def update_list(box: Path, *extra: str) -> tuple[int, str, str]:
    return cli(box, "update", "list", "--job", "small", "--no-progress", *extra)


def resume(box: Path, run_id: int, *extra: str) -> tuple[int, str, str]:
    return cli(box, "playbook", "resume", str(run_id), "--yes", "-q", *extra)


def assert_names_the_row(
    code: int, out: str, err: str, table: str, column: str, why: str, row: int = 1
) -> None:
    """Exit 78, nothing on stdout, one line on stderr naming the file, table, row and column."""
    lines = err.strip().splitlines()
    assert code == ExitCode.CONFIG and out == "" and len(lines) == 1, (code, err)
    assert f"s.db: table {table}, row {row}, column {column}: {why}" in lines[0], lines[0]
    assert "internal error" not in err


# --- as written, the rows read back ----------------------------------------------------------------


def test_the_rows_robustctl_writes_read_back(box: Path) -> None:
    code, out, err = update_list(box, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert [c["state"] for c in doc["changes"]] == ["applied", "pending"], doc["changes"]
    assert [v["commit"] for v in doc["versions"]] == ["a" * 40, "c" * 40]
    assert doc["versions"][0]["stable_at"] is not None and doc["versions"][1]["base_step"] == 3
    code, _, err = update_list(box)
    assert code == 0 and "UTC" in err, err
    code, _, err = resume(box, DONE)
    assert code == ExitCode.USAGE and "is done: nothing to resume" in err, err
    code, out, err = resume(box, RUNNING, "--json")
    assert code == 0, err
    assert [(s["step"], s["resumed"]) for s in json.loads(out)["steps"]] == [("note", "journal")]


def test_the_last_time_a_report_prints_is_read(box: Path) -> None:
    plant(box / "s.db", "job_versions", "stable_at", TIME_MAX - 1)
    plant(box / "s.db", "playbook_steps", "finished_at", TIME_MAX - 1)
    code, _, err = update_list(box)
    assert code == 0 and "9999-12-31" in err, err
    code, _, err = resume(box, RUNNING)
    assert code == 0, err


# --- update list: code_changes and job_versions ----------------------------------------------------

BAD_CODE_FIELDS = [
    ("code_changes", "staged_at", 1e300, "bad time: out of range"),
    ("code_changes", "due_at", -1, "bad time: out of range"),
    ("code_changes", "due_at", "Infinity", "bad time: not a number"),
    ("code_changes", "applied_at", 253_402_300_800, "bad time: out of range"),  # 10000-01-01
    ("code_changes", "applied_at", b"\x00\x01", "bad time: not a number"),
    ("code_changes", "urgent", "yes", "not an integer"),
    ("code_changes", "urgent", -1, "out of range"),
    ("code_changes", "state", "gone", "not one of pending"),
    ("job_versions", "started_at", math.inf, "bad time: not a finite number"),
    ("job_versions", "started_at", "noon", "bad time: not a number"),
    ("job_versions", "base_step", "x", "not an integer"),
    ("job_versions", "last_step", 1.5, "not an integer"),
    ("job_versions", "last_step", -3, "out of range"),
    ("job_versions", "last_progress_at", -1e300, "bad time: out of range"),
    ("job_versions", "stable_at", 253_402_300_800, "bad time: out of range"),
    ("job_versions", "stable_at", "[1]", "bad time: not a number"),
    ("job_versions", "change_id", b"\x01", "not an integer"),
]


@pytest.mark.parametrize(("table", "column", "value", "why"), BAD_CODE_FIELDS)
@pytest.mark.parametrize("json_out", [False, True], ids=["table", "json"])
def test_update_list_names_a_bad_code_row(
    box: Path, table: str, column: str, value: object, why: str, json_out: bool
) -> None:
    plant(box / "s.db", table, column, value)
    code, out, err = update_list(box, *(["--json"] if json_out else []))
    assert_names_the_row(code, out, err, table, column, why)


def test_the_readers_raise_store_errors(box: Path) -> None:
    plant(box / "s.db", "job_versions", "stable_at", 1e300)
    plant(box / "s.db", "code_changes", "due_at", "later", rowid=2)
    with Store.open(box / "s.db") as s:
        for read in (
            lambda: records.versions(s, "small"),
            lambda: records.last_stable_version(s, "small"),
            lambda: records.evaluate_stability(s, "small", CodeSpec(path="/c", stable_after_steps=5), None),
        ):
            with pytest.raises(StoreError, match="table job_versions, row 1, column stable_at: bad time"):
                read()
        for read in (
            lambda: records.changes(s, "small"),
            lambda: records.changes(s, "small", states=(records.ChangeState.APPLIED,)),  # all are checked
            lambda: records.pending_update(s, "small", 2e9),
        ):
            with pytest.raises(StoreError, match="table code_changes, row 2, column due_at: bad time"):
                read()
        assert records.versions(s, "other") == [] and records.changes(s, "other") == []  # another job's rows


# --- playbook resume and run: playbook_runs and playbook_steps -------------------------------------

BAD_JOURNAL_FIELDS = [
    ("playbook_runs", "started_at", "x", "bad time: not a number"),
    ("playbook_runs", "started_at", 1e300, "bad time: out of range"),
    ("playbook_runs", "finished_at", -1, "bad time: out of range"),
    ("playbook_runs", "finished_at", math.inf, "bad time: not a finite number"),
    ("playbook_runs", "pid", b"\x00", "not an integer"),
    ("playbook_runs", "pid", 2**40, "out of range"),
    ("playbook_runs", "params", "not json", "not JSON"),
    ("playbook_runs", "params", "[1]", "not a JSON object of parameter values"),
    ("playbook_runs", "params", '{"job": null}', "not a JSON object of parameter values"),
    ("playbook_runs", "params", b"{}", "not JSON text"),
    ("playbook_steps", "started_at", -1, "bad time: out of range"),
    ("playbook_steps", "finished_at", 253_402_300_800, "bad time: out of range"),
    ("playbook_steps", "finished_at", "NaN", "bad time: not a number"),
    ("playbook_steps", "seq", "x", "not an integer"),
    ("playbook_steps", "attempt", 2.5, "not an integer"),
    ("playbook_steps", "pid", -1, "out of range"),
    ("playbook_steps", "audit_after", "0x", "not an integer"),
    ("playbook_steps", "exit_code", 256, "out of range (0 to 255)"),
    ("playbook_steps", "exit_code", "zero", "not an integer"),
    ("playbook_steps", "result", "[]", "not a JSON object"),
    ("playbook_steps", "result", "{", "not JSON"),
    ("playbook_steps", "result", 7, "not a JSON object"),  # a TEXT column keeps 7 as '7'
    ("playbook_steps", "result", b"{}", "not JSON text"),
]


@pytest.mark.parametrize(("table", "column", "value", "why"), BAD_JOURNAL_FIELDS)
@pytest.mark.parametrize("run_id", [RUNNING, DONE], ids=["running", "done"])
def test_playbook_resume_names_a_bad_journal_row(
    box: Path, table: str, column: str, value: object, why: str, run_id: int
) -> None:
    plant(box / "s.db", table, column, value, rowid=run_id)  # run N's row, and its one step's
    code, out, err = resume(box, run_id)
    assert_names_the_row(code, out, err, table, column, why, row=run_id)
    with Store.open(box / "s.db") as s:  # resume stopped before it claimed or finished the run
        (status,) = s.query("SELECT status FROM playbook_runs WHERE id=?", [run_id])[0]
    assert status == ("running" if run_id == RUNNING else "done")


def test_a_result_read_back_is_strict_json(box: Path) -> None:
    plant(
        box / "s.db", "playbook_steps", "result", '{"kind": "notify", "x": [NaN, -Infinity], "exit_code": 0}'
    )
    with Store.open(box / "s.db") as s:
        rec = journal.run_record(s, RUNNING)
    assert rec is not None and rec.steps[0].result == {
        "kind": "notify",
        "x": ["NaN", "-Infinity"],
        "exit_code": 0,
    }
    code, out, err = resume(box, RUNNING, "--json")
    assert code == 0, err
    json.loads(out, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))


def nested(levels: int) -> str:
    """A JSON object nesting ``levels`` levels (lists inside its one member)."""
    return '{"kind": ' + "[" * (levels - 1) + "1" + "]" * (levels - 1) + "}"


def test_a_result_nested_past_the_bound_is_a_store_error(box: Path) -> None:
    """A result nested deeper than MAX_RESULT_DEPTH (one a Python recursion would fail on, too) is
    refused in one line; one at the bound is read and printed."""
    for levels in (journal.MAX_RESULT_DEPTH + 1, 900, 5000):
        plant(box / "s.db", "playbook_steps", "result", nested(levels))
        code, out, err = resume(box, RUNNING, "--json")
        why = f"nested deeper than {journal.MAX_RESULT_DEPTH} levels" if levels < 1000 else "not JSON"
        assert_names_the_row(code, out, err, "playbook_steps", "result", why)
    plant(box / "s.db", "playbook_steps", "result", nested(journal.MAX_RESULT_DEPTH))
    code, out, err = resume(box, RUNNING, "--json")
    assert code == 0 and json.loads(out)["steps"][0]["result"]["kind"], err


def test_a_result_nested_past_the_bound_is_kept_as_its_summary() -> None:
    """What the journal writes reads back: a deeper document is cut to its summary, as a larger one."""
    deep = json.loads(nested(journal.MAX_RESULT_DEPTH + 1))
    kept = journal.cap_result({**deep, "exit_code": 0, "targets": ["node01"]})
    assert kept["truncated"] is True and kept["exit_code"] == 0 and kept["targets"] == ["node01"], kept
    assert kept["kind_count"] == 1 and not journal.deeper_than(kept, 2)
    whole = json.loads(nested(journal.MAX_RESULT_DEPTH))
    assert journal.cap_result(whole) == whole


@pytest.mark.parametrize(
    ("doc", "levels"), [(1, 0), ("x", 0), ({}, 1), ([], 1), ({"a": [1, {"b": []}]}, 4), ([[[]], []], 3)]
)
def test_deeper_than_counts_objects_and_lists(doc: object, levels: int) -> None:
    assert not journal.deeper_than(doc, levels) and (levels == 0 or journal.deeper_than(doc, levels - 1))


def test_a_step_without_an_exit_code_is_printed_as_null(box: Path) -> None:
    """A skipped step has no exit code (NULL): ``--json`` of the run and of its resume print null."""
    plant(box / "s.db", "playbook_steps", "exit_code", None)
    code, out, err = resume(box, RUNNING, "--json")
    assert code == 0 and json.loads(out)["steps"][0]["exit_code"] is None, err
    skip = PLAYBOOK.replace("params:\n  job: {required: true}\n", "").replace(
        "kind: notify", "kind: notify\n    when: 1 == 2"
    )
    (box / "skip.yaml").write_text(skip)
    code, out, err = cli(box, "playbook", "run", str(box / "skip.yaml"), "--yes", "-q", "--json")
    assert code == 0, err
    assert [(s["status"], s["exit_code"]) for s in json.loads(out)["steps"]] == [("skipped", None)]


def test_an_empty_result_reads_as_none(box: Path) -> None:
    plant(box / "s.db", "playbook_steps", "result", "")
    with Store.open(box / "s.db") as s:
        rec = journal.run_record(s, RUNNING)
    assert rec is not None and rec.steps[0].result is None


def test_the_journal_readers_raise_store_errors(box: Path) -> None:
    plant(box / "s.db", "playbook_runs", "started_at", "x", rowid=DONE)
    with Store.open(box / "s.db") as s:
        with pytest.raises(StoreError, match=f"table playbook_runs, row {DONE}, column started_at"):
            journal.runs(s)
        assert journal.runs(s, job="other") == []  # no row read, none refused
        rec = journal.run_record(s, RUNNING)
        assert rec is not None and rec.params == {"job": "small"} and rec.steps[0].exit_code == 0


def test_the_next_seq_is_read_checked(box: Path) -> None:
    """A hand-edited seq in a run's steps: its next attempt is refused in one line, and a seq that
    leaves no next one (the largest integer) too, rather than an overflow."""
    for value, why in (("x", "not an integer"), (COUNT_MAX, "out of range"), (b"\xff", "not an integer")):
        plant(box / "s.db", "playbook_steps", "seq", value, rowid=RUNNING)
        with Store.open(box / "s.db") as s, pytest.raises(StoreError, match=f"column seq: {why}"):
            journal.step_start(s, RUNNING, "note", "notify", 2)
    plant(box / "s.db", "playbook_steps", "seq", 41, rowid=RUNNING)
    with Store.open(box / "s.db") as s:
        assert journal.step_start(s, RUNNING, "note", "notify", 2) == 42


def test_playbook_run_reads_the_unfinished_run_checked(box: Path) -> None:
    """``playbook run`` on a job with an unfinished run names it; a bad name there is a store error."""
    with Store.open(box / "s.db") as s:
        with pytest.raises(ActionRefused, match=f"unfinished playbook run {RUNNING} \\(note\\)"):
            journal.begin_run(s, "note", "note.yaml", PLAYBOOK, "small", {"job": "small"})
    plant(box / "s.db", "playbook_runs", "playbook", b"\x00", rowid=RUNNING)
    (box / "pb.yaml").write_text(PLAYBOOK)
    code, out, err = cli(box, "playbook", "run", str(box / "pb.yaml"), "--job", "small", "--yes", "-q")
    assert_names_the_row(code, out, err, "playbook_runs", "playbook", "not text", row=RUNNING)


def test_an_audit_plan_nested_past_the_bound_is_one_line(tmp_path: Path) -> None:
    """A hand-edited audit plan nested 900 deep made ``audit --json`` exit 3 (RecursionError while
    printing): every JSON document read from the store is bounded in depth."""
    import contextlib
    import io
    import sqlite3

    from robustctl.cli.main import main
    from robustctl.store import MAX_JSON_DEPTH, Store

    state = tmp_path / "s.db"
    with Store.open(state) as store:
        store.audit_finish(store.audit_begin("evict", ["node1"], "r", plan={"hosts": ["node1"]}), "ok", "")
    with sqlite3.connect(state) as c:
        c.execute("UPDATE audit SET plan=?", ["[" * 900 + "]" * 900])
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["audit", "--state", str(state), "--json"])
    assert code == 78, err.getvalue()
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and "column plan" in lines[0] and f"deeper than {MAX_JSON_DEPTH}" in lines[0], (
        lines
    )
