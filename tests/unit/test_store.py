"""The state store: schema and migrations, states with history, append-only audit, the lock, errors."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

import pytest

from robustctl.exit_codes import ExitCode
from robustctl.store import (
    SCHEMA_VERSION,
    MachineState,
    Readiness,
    Store,
    StoreError,
    StoreLocked,
    default_path,
)


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
