"""The state store: schema and migrations, states with history, append-only audit, the lock, errors,
fields checked as they are read (issue 21 item 6) and the audit check before an action (item 7)."""

from __future__ import annotations

import math
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest

from robustctl.exit_codes import ExitCode
from robustctl.store import (
    SCHEMA_VERSION,
    TIME_MAX,
    MachineState,
    Readiness,
    Store,
    StoreError,
    StoreLocked,
    default_path,
    time_problem,
)
from tests.support.oldstore import migration_version, store_before


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_default_path_precedence(tmp_path: Path) -> None:
    assert default_path({"ROBUSTCTL_STATE": str(tmp_path / "s.db")}) == tmp_path / "s.db"
    assert default_path({"XDG_STATE_HOME": str(tmp_path)}) == tmp_path / "robustctl" / "state.db"
    assert default_path({}).parts[-4:] == (".local", "state", "robustctl", "state.db")


def test_creates_wal_store_with_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "state.db"
    with Store.open(path) as s:
        assert s.schema_version == SCHEMA_VERSION
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT version FROM migrations").fetchall() == [
        (v,) for v in range(1, SCHEMA_VERSION + 1)
    ]
    with Store.open(path) as s:  # reopening does not migrate twice
        assert s.schema_version == SCHEMA_VERSION


def test_a_version_4_store_gains_the_watch_tables(tmp_path: Path) -> None:
    """A store written before the watcher's tables existed is migrated forward on open, its rows kept,
    and the new tables work (robustctl.watchstore)."""
    from robustctl.watchstore import current_incident, get_state, open_incident, put_state

    mine = migration_version("the watcher")
    path = tmp_path / "old.db"
    conn = store_before(path, mine)
    conn.execute("INSERT INTO machines VALUES ('node01', 'evicted', 'unchecked', 'old', 0)")
    conn.commit()
    conn.close()
    with Store.open(path) as s:
        assert s.schema_version == SCHEMA_VERSION >= mine and s.machine("node01") is not None
        inc = open_incident(s, "llama", incident_class="hang", onset_at=1e9, opened_at=1e9)
        assert current_incident(s, "llama") == inc
        put_state(s, "llama", {"cooldown_until": 1e9}, at=1e9)
        assert get_state(s, "llama") == {"cooldown_until": 1e9}


def test_a_version_5_store_gains_the_progress_samples(tmp_path: Path) -> None:
    """A store written before ``watch_progress`` existed is migrated forward on open: its incidents
    kept, the new table works (robustctl.watchstore.record_progress / progress_samples) and a sample
    once written is not rewritten (a trigger)."""
    from robustctl.watchstore import incidents, progress_samples, record_progress

    mine = migration_version("the watcher's progress")
    path = tmp_path / "v5.db"
    conn = store_before(path, mine)
    conn.execute("INSERT INTO incidents(job, class, onset_at, opened_at) VALUES ('llama', 'hang', 1e9, 1e9)")
    conn.commit()
    assert "watch_progress" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    with Store.open(path) as s:
        assert s.schema_version == SCHEMA_VERSION >= mine
        assert [i.onset_at for i in incidents(s, "llama")] == [1e9]
        assert record_progress(s, "llama", at=1e9 + 10, step=7)
        assert [(p.at, p.step) for p in progress_samples(s, "llama")] == [(1e9 + 10, 7)]
        with pytest.raises(StoreError, match="never changes"):
            with s.transaction() as c:
                c.execute("UPDATE watch_progress SET step=8")


def test_state_changes_keep_history_and_are_idempotent(tmp_path: Path) -> None:
    clock = Clock()
    with Store.open(tmp_path / "s.db", clock=clock, who="alice@ops") as s:
        assert s.machine("n1") is None
        assert s.set_state("n1", MachineState.EVICTED, "xid 79")
        assert not s.set_state("n1", MachineState.EVICTED, "again")
        clock.t += 10
        assert s.set_state("n1", MachineState.STANDBY, "repaired", readiness=Readiness.READY)
        rec = s.machine("n1")
        assert rec is not None and rec.state is MachineState.STANDBY and rec.readiness is Readiness.READY
        hist = s.history("n1")
        assert [(h.from_state, h.to_state, h.who) for h in hist] == [
            (None, "evicted", "alice@ops"),
            ("evicted", "standby", "alice@ops"),
        ]
        assert [h.host for h in s.evictions_since(clock.t - 10)] == ["n1"]
        assert s.evictions_since(clock.t - 5) == []
        assert s.first_record_at() == 1_000_000.0


def test_audit_records_plan_steps_and_is_append_only(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as s:
        aid = s.audit_begin("evict", ["n1", "n2"], "xid 79", plan={"steps": [1, 2]}, evidence="r.json")
        s.audit_step_start(aid, 0, "drain n1")
        s.audit_step_end(aid, 0, "done", "drained")
        s.audit_step_start(aid, 1, "drain n2")
        (rec,) = s.audit()
        assert rec.status == "started" and rec.plan == {"steps": [1, 2]} and rec.evidence == "r.json"
        assert [(st.index, st.status) for st in rec.steps] == [(0, "done"), (1, "running")]
        s.audit_finish(aid, "failed", "killed")
        assert s.audit(audit_id=aid)[0].status == "failed"
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            s._conn.execute("DELETE FROM audit")


def test_job_hosts_round_trip(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as s:
        assert s.job_hosts("j") is None
        s.set_job_hosts("j", ["b", "a"])
        assert s.job_hosts("j") == ["b", "a"]


def test_lock_excludes_a_second_holder_and_names_the_first(tmp_path: Path) -> None:
    a = Store.open(tmp_path / "s.db", who="alice@ops")
    b = Store.open(tmp_path / "s.db")
    a.lock("evict")
    with pytest.raises(StoreLocked, match=r"alice@ops, evict.*--lock-timeout") as exc:
        b.lock("evict", timeout_s=0.2)
    assert exc.value.exit_code == ExitCode.CRITICAL
    a.close()
    b.lock("evict", timeout_s=0.2)
    assert b.locked
    b.close()


@pytest.mark.parametrize("content", [b"[1, 2]", b"not json", b'{"since": 1e300, "pid": "x"}', b""])
def test_a_lock_file_holding_no_object_names_no_holder_and_does_not_crash(
    tmp_path: Path, content: bytes
) -> None:
    import fcntl
    import os

    s = Store.open(tmp_path / "s.db")
    fd = os.open(s.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another open file description: conflicts even in this process
        os.pwrite(fd, content, 0)
        with pytest.raises(StoreLocked, match=r"another robustctl is acting on .*\(.*\); waited 0 s"):
            s.lock("evict", timeout_s=0)
    finally:
        os.close(fd)
        s.close()


def test_the_playbook_lock_waits_then_names_its_holder(tmp_path: Path) -> None:
    from robustctl.playbooks import journal

    with Store.open(tmp_path / "s.db") as s, journal.job_lock(s, "j1"):
        with Store.open(tmp_path / "s.db") as other:
            with pytest.raises(
                StoreLocked, match=rf"playbook on job j1 \(pid {os.getpid()}, started \d+ s ago; lock "
            ):
                with journal.job_lock(other, "j1", timeout_s=0.2):
                    pass
            with journal.job_lock(other, "j2"):  # another job's lock is free
                pass


def test_read_only_store_is_a_clear_config_error(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    Store.open(path).close()
    path.chmod(stat.S_IRUSR | stat.S_IRGRP)
    with Store.open(path) as s:  # reading works
        assert s.machines() == []
        with pytest.raises(StoreError, match=r"s\.db: the state store is read-only") as exc:
            s.set_state("n1", MachineState.EVICTED, "x")
        assert exc.value.exit_code == ExitCode.CONFIG
        with pytest.raises(StoreError, match="read-only"):
            s.audit_begin("evict", ["n1"], "x")


def test_full_database_is_a_clear_error(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as s:
        pages = s._conn.execute("PRAGMA page_count").fetchone()[0]
        s._conn.execute(f"PRAGMA max_page_count={pages}")
        with pytest.raises(StoreError, match="full"):
            s.audit_begin("evict", ["n1"], "x" * 200_000)


def test_not_a_store_and_newer_schema_are_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="junk.db"):
        Store.open(junk)
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t(x)")
    with pytest.raises(StoreError, match="not a robustctl state store"):
        Store.open(other)
    newer = tmp_path / "newer.db"
    Store.open(newer).close()
    conn = sqlite3.connect(newer)
    conn.execute("INSERT INTO migrations VALUES (99, 0, 'future')")
    conn.commit()
    with pytest.raises(StoreError, match="newer than this robustctl"):
        Store.open(newer)


# --- what a hand-edited or damaged file may hold (issue 21, items 6 and 7) --------------------------


def set_field(path: Path, table: str, column: str, value: Any, where: str = "") -> None:
    """``UPDATE table SET column=value`` with a plain connection (what a user with the file can do)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute(f"UPDATE {table} SET {column}=? {where}", (value,))
        conn.commit()
    finally:
        conn.close()


def corrupt_page(path: Path, table: str, offset: int = 8, size: int = 64) -> None:
    """Overwrite ``size`` bytes at ``offset`` of the root page of ``table`` (offset 8 of a leaf page:
    its cell pointers, so SQLite reads the rows at wrong places). The store must be closed (no WAL)."""
    conn = sqlite3.connect(path)
    try:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name=?", (table,)).fetchone()
    finally:
        conn.close()
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    with open(path, "r+b") as f:
        f.seek((root - 1) * page_size + offset)
        f.write(b"\xa5" * size)


def filled(path: Path) -> Path:
    """A store with a machine, its history and a finished audit record with two steps."""
    with Store.open(path, clock=Clock(1_700_000_000.0)) as s:
        aid = s.audit_begin("evict", ["n1"], "xid 79", plan={"steps": [1, 2]})
        s.audit_step_start(aid, 0, "drain n1")
        s.audit_step_end(aid, 0, "done", "drained")
        s.audit_step_start(aid, 1, "mark n1")
        s.set_state("n1", MachineState.EVICTED, "xid 79", audit_id=aid)
        s.audit_step_end(aid, 1, "done", "now evicted")
        s.audit_finish(aid, "applied", "2 step(s) done")
    return path


@pytest.mark.parametrize("value", [0, 1_700_000_000, 1.5, TIME_MAX - 0.001, 253_402_300_799])
def test_times_in_range_are_times(value: float) -> None:
    assert time_problem(value) is None


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (-1, "out of range"), (-1e300, "out of range"), (1e300, "out of range"), (TIME_MAX, "out of range"),
        (2**62, "out of range"), (math.nan, "not a finite"), (math.inf, "not a finite"),
        (-math.inf, "not a finite"), ("1700000000", "not a number"), ("NaN", "not a number"),
        (b"\x00", "not a number"), (None, "missing"), (True, "not a number"),
    ],
)  # fmt: skip
def test_other_values_are_not_times(value: object, why: str) -> None:
    problem = time_problem(value)
    assert problem is not None and why in problem


@pytest.mark.parametrize(
    ("table", "column", "value", "why"),
    [
        ("machines", "updated_at", 1e300, "bad time: out of range"),
        ("machines", "updated_at", -1e300, "bad time: out of range"),
        ("machines", "updated_at", 253_402_300_800, "bad time: out of range"),  # 10000-01-01
        ("machines", "updated_at", math.inf, "bad time: not a finite number"),
        ("machines", "updated_at", "noon", "bad time: not a number"),
        ("machines", "state", "gone", "not one of active"),
        ("machine_history", "at", "NaN", "bad time: not a number"),
        ("machine_history", "audit_id", "x", "not an integer"),
        ("audit", "started_at", 1e300, "bad time"),
        ("audit", "finished_at", b"\x01", "bad time: not a number"),
        ("audit", "pid", 2**40, "out of range"),
        ("audit", "targets", "n1", "not JSON"),
        ("audit", "plan", "[1]", "not a JSON object"),
        ("audit_steps", "started_at", -5, "bad time: out of range"),
        ("audit_steps", "finished_at", "later", "bad time: not a number"),
    ],
)
def test_a_bad_field_is_a_store_error_naming_table_row_and_column(
    tmp_path: Path, table: str, column: str, value: object, why: str
) -> None:
    path = filled(tmp_path / "s.db")
    set_field(path, table, column, value)
    with Store.open(path) as s, pytest.raises(StoreError) as exc:
        s.machines()
        s.history()
        s.audit()
    msg = str(exc.value)
    assert f"table {table}, row 1, column {column}: {why}" in msg and str(path) in msg, msg
    assert "\n" not in msg and exc.value.exit_code == ExitCode.CONFIG


def test_nan_in_a_time_that_may_be_empty_reads_as_empty(tmp_path: Path) -> None:
    """SQLite stores a NaN as NULL: a NOT NULL time refuses it, an end time reads as not reached."""
    path = filled(tmp_path / "s.db")
    set_field(path, "audit", "finished_at", math.nan)
    with pytest.raises(sqlite3.IntegrityError):
        set_field(path, "audit", "started_at", math.nan)
    with Store.open(path) as s:
        (rec,) = s.audit()
        assert rec.finished_at is None and rec.started_at == 1_700_000_000.0


def test_the_earliest_record_is_checked(tmp_path: Path) -> None:
    path = filled(tmp_path / "s.db")
    set_field(path, "machine_history", "at", -1e300)
    with Store.open(path) as s, pytest.raises(StoreError, match="table machine_history, row 1, column at"):
        s.first_record_at()


def test_an_action_record_is_checked_before_anything_is_applied(tmp_path: Path) -> None:
    path = filled(tmp_path / "s.db")
    with Store.open(path) as s:
        s.check_audit(1)  # a sound store passes
        aid = s.audit_begin("evict", ["n2"], "r")
        assert s.audit(audit_id=aid)[0].status == "started"
    # a damaged audit_steps page: rows are written, but cannot be read back
    corrupt_page(path, "audit_steps")
    with Store.open(path) as s, pytest.raises(StoreError) as exc:
        s.audit_begin("evict", ["n3"], "r")
    assert "audit_steps" in str(exc.value) and "nothing was applied" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_an_unreadable_old_record_stops_the_next_action(tmp_path: Path) -> None:
    """Text that is not UTF-8 in an older record's plan (a damaged overflow page): ``audit`` cannot
    show the log, so no action writes into it; the new record is marked failed as far as possible."""
    path = filled(tmp_path / "s.db")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE audit SET plan=CAST(X'7BFF7D' AS TEXT)")
    conn.commit()
    conn.close()
    with Store.open(path) as s:
        with pytest.raises(StoreError, match="nothing was applied"):
            s.audit_begin("evict", ["n2"], "r")
        (status, message) = s.query("SELECT status, message FROM audit ORDER BY id DESC LIMIT 1")[0]
    assert status == "failed" and message.startswith("not applied: the state store failed its check")


def test_a_refusal_is_recorded_without_the_check(tmp_path: Path) -> None:
    path = filled(tmp_path / "s.db")
    set_field(path, "audit", "started_at", "x")
    with Store.open(path) as s:
        assert s.audit_begin("evict", ["n2"], "r", status="refused") == 2  # nothing applies after it
        with pytest.raises(StoreError, match="table audit, row 1, column started_at"):
            s.audit_begin("evict", ["n2"], "r")


def test_a_damaged_schema_is_one_line_however_its_text_reads(tmp_path: Path) -> None:
    """SQLite quotes the damaged schema's own bytes in its message: a newline there stays off the line."""
    path = tmp_path / "s.db"
    Store.open(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute("UPDATE sqlite_master SET name='swe\nep\rs', sql='CREATE TABLE (' WHERE name='sweeps'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError) as exc:
        Store.open(path)
    assert "malformed database schema (swe ep s)" in str(exc.value)
    assert "\n" not in str(exc.value) and "\r" not in str(exc.value)
