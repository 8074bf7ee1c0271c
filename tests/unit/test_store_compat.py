"""A state file written before the store's API change opens and reads the same with the new API.

The file is built here with the SQL as the store had it before: the CREATE statements of every schema
step copied as they were (:data:`OLD_MIGRATIONS`, verbatim from ``robustctl/store.py`` before
``SCHEMA``), the ``migrations`` rows they recorded, and rows inserted as the old writers' statements
inserted them. It is then opened with :meth:`Store.open` and read through every module's readers
(the store's own, :mod:`robustctl.jobcode.records`, :mod:`robustctl.playbooks.journal`,
:mod:`robustctl.sweep.history`, :mod:`robustctl.watchstore`). Also: a file created by today's code
has exactly the schema of the old statements (the on-disk schema did not change), and an old file of
version 1 migrates forward to it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from robustctl import watchstore
from robustctl.jobcode import records
from robustctl.models import Status
from robustctl.playbooks import journal
from robustctl.store import SCHEMA, SCHEMA_VERSION, MachineState, Readiness, Store
from robustctl.sweep import history

OLD_MIGRATIONS: dict[int, tuple[str, str]] = {
    1: (
        "machines, history, scheduler nodes, job hosts, audit log",
        """
        CREATE TABLE machines(
            host TEXT PRIMARY KEY, state TEXT NOT NULL, readiness TEXT NOT NULL DEFAULT 'unchecked',
            reason TEXT NOT NULL DEFAULT '', updated_at REAL NOT NULL);
        CREATE TABLE machine_history(
            id INTEGER PRIMARY KEY AUTOINCREMENT, host TEXT NOT NULL, at REAL NOT NULL, from_state TEXT,
            to_state TEXT NOT NULL, readiness TEXT, reason TEXT NOT NULL DEFAULT '', who TEXT NOT NULL,
            audit_id INTEGER);
        CREATE INDEX machine_history_state_at ON machine_history(to_state, at);
        CREATE TABLE sched_nodes(
            host TEXT PRIMARY KEY, state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', updated_at REAL NOT NULL);
        CREATE TABLE job_hosts(job TEXT NOT NULL, idx INTEGER NOT NULL, host TEXT NOT NULL,
            PRIMARY KEY(job, idx));
        CREATE TABLE audit(
            id INTEGER PRIMARY KEY AUTOINCREMENT, started_at REAL NOT NULL, finished_at REAL,
            who TEXT NOT NULL, pid INTEGER NOT NULL, action TEXT NOT NULL, targets TEXT NOT NULL,
            reason TEXT NOT NULL, evidence TEXT, plan TEXT, status TEXT NOT NULL,
            message TEXT NOT NULL DEFAULT '', forced INTEGER NOT NULL DEFAULT 0);
        CREATE INDEX audit_started ON audit(started_at);
        CREATE TABLE audit_steps(
            audit_id INTEGER NOT NULL REFERENCES audit(id), idx INTEGER NOT NULL, description TEXT NOT NULL,
            status TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '', started_at REAL NOT NULL,
            finished_at REAL, PRIMARY KEY(audit_id, idx));
        CREATE TRIGGER audit_append_only BEFORE DELETE ON audit
            BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
        CREATE TRIGGER audit_steps_append_only BEFORE DELETE ON audit_steps
            BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
        """,
    ),
    2: (
        "job code changes (hot update, rollback) and job versions",
        """
        CREATE TABLE code_changes(
            id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, kind TEXT NOT NULL, ref TEXT NOT NULL,
            commit_id TEXT NOT NULL, from_ref TEXT, reason TEXT NOT NULL, urgent INTEGER NOT NULL,
            who TEXT NOT NULL, staged_at REAL NOT NULL, due_at REAL NOT NULL, state TEXT NOT NULL,
            applied_at REAL, note TEXT NOT NULL DEFAULT '');
        CREATE INDEX code_changes_job ON code_changes(job, state);
        CREATE TABLE job_versions(
            id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, commit_id TEXT NOT NULL, ref TEXT,
            started_at REAL NOT NULL, base_step INTEGER, last_step INTEGER, last_progress_at REAL,
            stable_at REAL, change_id INTEGER);
        CREATE INDEX job_versions_job ON job_versions(job, started_at);
        CREATE TRIGGER code_changes_append_only BEFORE DELETE ON code_changes
            BEGIN SELECT RAISE(ABORT, 'code changes are append-only'); END;
        CREATE TRIGGER code_changes_facts_fixed BEFORE UPDATE OF job, kind, ref, commit_id, from_ref, reason,
            urgent, who, staged_at, due_at ON code_changes
            BEGIN SELECT RAISE(ABORT, 'a recorded code change keeps its job, refs, reason, who and when'); END;
        CREATE TRIGGER job_versions_append_only BEFORE DELETE ON job_versions
            BEGIN SELECT RAISE(ABORT, 'job versions are append-only'); END;
        CREATE TRIGGER job_versions_facts_fixed BEFORE UPDATE OF job, commit_id, ref, started_at ON job_versions
            BEGIN SELECT RAISE(ABORT, 'a recorded job version keeps its job, commit and start'); END;
        """,
    ),
    3: (
        "playbook runs and their steps (the journal resume reads)",
        """
        CREATE TABLE playbook_runs(
            id INTEGER PRIMARY KEY AUTOINCREMENT, playbook TEXT NOT NULL, source TEXT NOT NULL,
            definition TEXT NOT NULL, job TEXT, params TEXT NOT NULL, started_at REAL NOT NULL,
            finished_at REAL, who TEXT NOT NULL, pid INTEGER NOT NULL, status TEXT NOT NULL,
            message TEXT NOT NULL DEFAULT '');
        CREATE INDEX playbook_runs_job ON playbook_runs(job, status);
        CREATE TABLE playbook_steps(
            run_id INTEGER NOT NULL REFERENCES playbook_runs(id), seq INTEGER NOT NULL, step TEXT NOT NULL,
            kind TEXT NOT NULL, attempt INTEGER NOT NULL, status TEXT NOT NULL, started_at REAL NOT NULL,
            finished_at REAL, pid INTEGER NOT NULL, audit_after INTEGER NOT NULL DEFAULT 0,
            exit_code INTEGER, result TEXT, error TEXT NOT NULL DEFAULT '', PRIMARY KEY(run_id, seq))
        """,
    ),
    4: (
        "sweep history: check states, check changes, host counters, sweeps",
        """
        CREATE TABLE check_state(
            host TEXT NOT NULL, check_name TEXT NOT NULL, status TEXT NOT NULL, since REAL NOT NULL,
            last_seen REAL NOT NULL, streak INTEGER NOT NULL DEFAULT 1, detail TEXT NOT NULL DEFAULT '',
            recent_bad TEXT NOT NULL DEFAULT '[]', PRIMARY KEY(host, check_name));
        CREATE TABLE check_changes(
            id INTEGER PRIMARY KEY AUTOINCREMENT, host TEXT NOT NULL, check_name TEXT NOT NULL,
            at REAL NOT NULL, from_status TEXT, to_status TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '',
            source TEXT NOT NULL);
        CREATE INDEX check_changes_host_at ON check_changes(host, at);
        CREATE INDEX check_changes_at ON check_changes(at);
        CREATE TABLE host_counters(
            host TEXT PRIMARY KEY, seen INTEGER NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0,
            unknowns INTEGER NOT NULL DEFAULT 0, first_seen REAL NOT NULL, last_seen REAL NOT NULL,
            last_status TEXT NOT NULL);
        CREATE TABLE sweeps(
            id INTEGER PRIMARY KEY AUTOINCREMENT, started_at REAL NOT NULL, finished_at REAL NOT NULL,
            source TEXT NOT NULL, hosts INTEGER NOT NULL, status TEXT NOT NULL,
            clock_skew_s REAL NOT NULL DEFAULT 0);
        CREATE INDEX sweeps_started ON sweeps(started_at)
        """,
    ),
    5: (
        "the watcher: decision events, per-job state, incidents and waiting spans (the ETTR ledger's input)",
        """
        CREATE TABLE watch_events(
            id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, at REAL NOT NULL,
            signal_class TEXT NOT NULL, rule TEXT NOT NULL, action TEXT NOT NULL, playbook TEXT,
            reason TEXT NOT NULL DEFAULT '', evidence TEXT NOT NULL DEFAULT '{}', incident_id INTEGER,
            playbook_run_id INTEGER, who TEXT NOT NULL);
        CREATE INDEX watch_events_job_at ON watch_events(job, at);
        CREATE TRIGGER watch_events_append_only BEFORE DELETE ON watch_events
            BEGIN SELECT RAISE(ABORT, 'watch events are append-only'); END;
        CREATE TRIGGER watch_events_facts_fixed BEFORE UPDATE ON watch_events
            WHEN NEW.id IS NOT OLD.id OR NEW.job IS NOT OLD.job OR NEW.at IS NOT OLD.at
                OR NEW.signal_class IS NOT OLD.signal_class OR NEW.rule IS NOT OLD.rule
                OR NEW.action IS NOT OLD.action OR NEW.playbook IS NOT OLD.playbook
                OR NEW.reason IS NOT OLD.reason OR NEW.evidence IS NOT OLD.evidence
                OR NEW.incident_id IS NOT OLD.incident_id OR NEW.who IS NOT OLD.who
                OR (OLD.playbook_run_id IS NOT NULL AND NEW.playbook_run_id IS NOT OLD.playbook_run_id)
            BEGIN SELECT RAISE(ABORT, 'a recorded watch event never changes (its playbook run id is set once)'); END;
        CREATE TABLE watch_state(job TEXT PRIMARY KEY, doc TEXT NOT NULL, updated_at REAL NOT NULL);
        CREATE TABLE incidents(
            id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, class TEXT NOT NULL,
            onset_at REAL NOT NULL, opened_at REAL NOT NULL, decision_at REAL, localization_start_at REAL,
            localization_end_at REAL, eviction_start_at REAL, eviction_end_at REAL,
            machines_evicted TEXT NOT NULL DEFAULT '[]', restart_start_at REAL, first_new_step_at REAL,
            checkpoint_step INTEGER, last_step INTEGER, playbook TEXT, playbook_run_id INTEGER,
            closed_at REAL, close_reason TEXT);
        CREATE UNIQUE INDEX incidents_one_open ON incidents(job) WHERE closed_at IS NULL;
        CREATE INDEX incidents_job_onset ON incidents(job, onset_at);
        CREATE TRIGGER incidents_append_only BEFORE DELETE ON incidents
            BEGIN SELECT RAISE(ABORT, 'incidents are append-only'); END;
        CREATE TRIGGER incidents_facts_fixed BEFORE UPDATE OF id, job, class, onset_at, opened_at ON incidents
            WHEN NEW.id IS NOT OLD.id OR NEW.job IS NOT OLD.job OR NEW.class IS NOT OLD.class
                OR NEW.onset_at IS NOT OLD.onset_at OR NEW.opened_at IS NOT OLD.opened_at
            BEGIN SELECT RAISE(ABORT, 'a recorded incident keeps its job, class and onset'); END;
        CREATE TRIGGER incidents_forward_only BEFORE UPDATE ON incidents
            WHEN (OLD.decision_at IS NOT NULL AND NEW.decision_at IS NOT OLD.decision_at)
                OR (OLD.localization_start_at IS NOT NULL AND NEW.localization_start_at IS NOT OLD.localization_start_at)
                OR (OLD.localization_end_at IS NOT NULL AND NEW.localization_end_at IS NOT OLD.localization_end_at)
                OR (OLD.eviction_start_at IS NOT NULL AND NEW.eviction_start_at IS NOT OLD.eviction_start_at)
                OR (OLD.eviction_end_at IS NOT NULL AND NEW.eviction_end_at IS NOT OLD.eviction_end_at)
                OR (OLD.restart_start_at IS NOT NULL AND NEW.restart_start_at IS NOT OLD.restart_start_at)
                OR (OLD.first_new_step_at IS NOT NULL AND NEW.first_new_step_at IS NOT OLD.first_new_step_at)
                OR (OLD.checkpoint_step IS NOT NULL AND NEW.checkpoint_step IS NOT OLD.checkpoint_step)
                OR (OLD.last_step IS NOT NULL AND NEW.last_step IS NOT OLD.last_step)
                OR (OLD.playbook IS NOT NULL AND NEW.playbook IS NOT OLD.playbook)
                OR (OLD.playbook_run_id IS NOT NULL AND NEW.playbook_run_id IS NOT OLD.playbook_run_id)
                OR (OLD.closed_at IS NOT NULL AND NEW.closed_at IS NOT OLD.closed_at)
                OR (OLD.close_reason IS NOT NULL AND NEW.close_reason IS NOT OLD.close_reason)
            BEGIN SELECT RAISE(ABORT, 'an incident field once set is not rewritten (forward only)'); END;
        CREATE TRIGGER incidents_evicted_grow BEFORE UPDATE OF machines_evicted ON incidents
            WHEN NOT json_valid(NEW.machines_evicted) OR json_type(NEW.machines_evicted) IS NOT 'array'
                OR (json_valid(OLD.machines_evicted) AND json_type(OLD.machines_evicted) = 'array'
                    AND EXISTS (SELECT value FROM json_each(OLD.machines_evicted)
                                EXCEPT SELECT value FROM json_each(NEW.machines_evicted)))
            BEGIN SELECT RAISE(ABORT, 'machines once recorded as evicted stay recorded'); END;
        CREATE TABLE watch_waiting(
            id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, start_at REAL NOT NULL, end_at REAL,
            reason TEXT NOT NULL DEFAULT '', incident_id INTEGER);
        CREATE INDEX watch_waiting_job_start ON watch_waiting(job, start_at);
        CREATE TRIGGER watch_waiting_append_only BEFORE DELETE ON watch_waiting
            BEGIN SELECT RAISE(ABORT, 'waiting spans are append-only'); END;
        CREATE TRIGGER watch_waiting_forward_only BEFORE UPDATE ON watch_waiting
            WHEN NEW.id IS NOT OLD.id OR NEW.job IS NOT OLD.job OR NEW.start_at IS NOT OLD.start_at
                OR NEW.reason IS NOT OLD.reason OR NEW.incident_id IS NOT OLD.incident_id
                OR (OLD.end_at IS NOT NULL AND NEW.end_at IS NOT OLD.end_at)
            BEGIN SELECT RAISE(ABORT, 'a waiting span keeps its start and reason; its end is set once'); END
        """,
    ),
    6: (
        "the watcher's progress samples (when a job's step advanced: the ETTR ledger's productive time)",
        """
        CREATE TABLE watch_progress(
            id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, at REAL NOT NULL, step INTEGER NOT NULL);
        CREATE INDEX watch_progress_job_at ON watch_progress(job, at);
        CREATE TRIGGER watch_progress_fixed BEFORE UPDATE ON watch_progress
            BEGIN SELECT RAISE(ABORT, 'a progress sample never changes'); END
        """,
    ),
}
"""The schema steps as ``robustctl/store.py`` held them before :data:`robustctl.store.SCHEMA`: version →
(the description recorded in ``migrations``, the statements)."""

T0 = 1_790_000_000.0
"""A fixed time (UNIX s, September 2026) the rows are dated from."""


def old_schema(path: Path, upto: int) -> sqlite3.Connection:
    """``path`` created as the old code created a store, with the steps up to ``upto``; the open
    connection (autocommit off: the caller commits)."""
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS migrations("
        "version INTEGER PRIMARY KEY, applied_at REAL NOT NULL, description TEXT NOT NULL)"
    )
    for v in range(1, upto + 1):
        desc, sql = OLD_MIGRATIONS[v]
        for stmt in sql.split(";\n"):
            if stmt.strip():
                conn.execute(stmt)
        conn.execute(
            "INSERT INTO migrations(version, applied_at, description) VALUES (?, ?, ?)", (v, T0, desc)
        )
    return conn


def old_rows(conn: sqlite3.Connection) -> None:
    """One or two rows in every table, as the old writers' statements inserted them."""
    x = conn.execute
    x(
        "INSERT INTO machines(host, state, readiness, reason, updated_at) VALUES ('n1', 'evicted', 'unchecked', 'xid 79', ?)",
        (T0 + 2,),
    )
    x(
        "INSERT INTO machines(host, state, readiness, reason, updated_at) VALUES ('n2', 'standby', 'ready', 'spare', ?)",
        (T0 + 1,),
    )
    x(
        "INSERT INTO machine_history(host, at, from_state, to_state, readiness, reason, who, audit_id) "
        "VALUES ('n2', ?, NULL, 'standby', 'ready', 'spare', 'op@box', NULL)",
        (T0 + 1,),
    )
    x(
        "INSERT INTO machine_history(host, at, from_state, to_state, readiness, reason, who, audit_id) "
        "VALUES ('n1', ?, NULL, 'evicted', 'unchecked', 'xid 79', 'op@box', 1)",
        (T0 + 2,),
    )
    x(
        "INSERT INTO sched_nodes(host, state, reason, updated_at) VALUES ('n1', 'drained', 'xid 79', ?)",
        (T0 + 2,),
    )
    x("INSERT INTO job_hosts(job, idx, host) VALUES ('j', 0, 'n3'), ('j', 1, 'n2')")
    x(
        "INSERT INTO audit(started_at, who, pid, action, targets, reason, evidence, plan, status, message, forced) "
        "VALUES (?, 'op@box', 4242, 'evict', '[\"n1\"]', 'xid 79', NULL, '{\"job\": \"j\"}', 'applied', 'evicted 1', 0)",
        (T0,),
    )
    x(
        "INSERT INTO audit_steps(audit_id, idx, description, status, started_at, detail, finished_at) "
        "VALUES (1, 0, 'drain n1 via inventory', 'done', ?, 'drained', ?)",
        (T0 + 1, T0 + 2),
    )
    x("UPDATE audit SET finished_at=? WHERE id=1", (T0 + 3,))
    x(
        "INSERT INTO code_changes(job, kind, ref, commit_id, from_ref, reason, urgent, who, staged_at, due_at, state, "
        "applied_at, note) VALUES ('j', 'update', 'v1', ?, NULL, 'fix', 0, 'op@box', ?, ?, 'pending', NULL, '')",
        ("a" * 40, T0, T0 + 86_400),
    )
    x(
        "INSERT INTO job_versions(job, commit_id, ref, started_at, base_step, change_id) VALUES ('j', ?, 'v1', ?, 10, 1)",
        ("a" * 40, T0 + 5),
    )
    x(
        "INSERT INTO playbook_runs(playbook, source, definition, job, params, started_at, who, pid, status) "
        "VALUES ('recover', 'pb.yaml', 'steps: []', 'j', '{\"a\": \"b\"}', ?, 'op@box', 4242, 'running')",
        (T0 + 6,),
    )
    x(
        "INSERT INTO playbook_steps(run_id, seq, step, kind, attempt, status, started_at, pid, audit_after) "
        "VALUES (1, 0, 'diag', 'diagnose', 1, 'running', ?, 4242, 0)",
        (T0 + 7,),
    )
    x(
        "UPDATE playbook_steps SET status='done', exit_code=0, result='{\"kind\": \"x\"}', error='', finished_at=? "
        "WHERE run_id=1 AND seq=0",
        (T0 + 8,),
    )
    x(
        "INSERT INTO check_state(host, check_name, status, since, last_seen, streak, detail, recent_bad) "
        "VALUES ('n1', '(host)', 'critical', ?, ?, 1, 'gpu0: xid', ?)",
        (T0 + 9, T0 + 9, json.dumps([T0 + 9])),
    )
    x(
        "INSERT INTO check_changes(host, check_name, at, from_status, to_status, detail, source) "
        "VALUES ('n1', '(host)', ?, NULL, 'critical', 'gpu0: xid', 'sweep')",
        (T0 + 9,),
    )
    x(
        "INSERT INTO host_counters(host, seen, failures, unknowns, first_seen, last_seen, last_status) "
        "VALUES ('n1', 1, 1, 0, ?, ?, 'critical')",
        (T0 + 9, T0 + 9),
    )
    x(
        "INSERT INTO sweeps(started_at, finished_at, source, hosts, status, clock_skew_s) "
        "VALUES (?, ?, 'sweep', 1, 'critical', 0.0)",
        (T0 + 8, T0 + 9),
    )
    x(
        "INSERT INTO incidents(job, class, onset_at, opened_at, last_step) VALUES ('j', 'hang', ?, ?, 41)",
        (T0 + 10, T0 + 11),
    )
    x(
        "INSERT INTO watch_events(job, at, signal_class, rule, action, playbook, reason, evidence, incident_id, "
        "playbook_run_id, who) VALUES ('j', ?, 'hang', 'stall', 'run', 'recover', 'no step', '{\"s\": 1}', 1, 1, "
        "'op@box')",
        (T0 + 12,),
    )
    x("INSERT INTO watch_state(job, doc, updated_at) VALUES ('j', '{\"x\": 1}', ?)", (T0 + 13,))
    x(
        "INSERT INTO watch_waiting(job, start_at, reason, incident_id) VALUES ('j', ?, 'hourly limit', 1)",
        (T0 + 14,),
    )
    x("INSERT INTO watch_progress(job, at, step) VALUES ('j', ?, 41)", (T0 + 15,))


def schema_of(path: Path) -> list[tuple[str, str, str | None]]:
    """Every table, index and trigger of the file: (type, name, its SQL)."""
    conn = sqlite3.connect(path)
    try:
        return sorted(
            conn.execute("SELECT type, name, sql FROM sqlite_master WHERE name != 'sqlite_sequence'")
        )
    finally:
        conn.close()


def test_an_old_state_file_reads_the_same(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = old_schema(path, 6)
    old_rows(conn)
    conn.commit()
    conn.close()
    before = schema_of(path)
    with Store.open(path) as s:
        assert s.schema_version == SCHEMA_VERSION == 6
        assert s.query("SELECT version, applied_at, description FROM migrations ORDER BY version") == [
            (v, T0, OLD_MIGRATIONS[v][0]) for v in range(1, 7)
        ]  # nothing migrated again
        # the store's own tables
        assert [(m.host, m.state, m.readiness, m.reason, m.updated_at) for m in s.machines()] == [
            ("n1", MachineState.EVICTED, Readiness.UNCHECKED, "xid 79", T0 + 2),
            ("n2", MachineState.STANDBY, Readiness.READY, "spare", T0 + 1),
        ]
        assert [(h.host, h.to_state, h.audit_id) for h in s.history()] == [
            ("n2", "standby", None),
            ("n1", "evicted", 1),
        ]
        assert [h.host for h in s.evictions_since(T0)] == ["n1"]
        assert s.sched_state("n1") == "drained" and s.job_hosts("j") == ["n3", "n2"]
        (rec,) = s.audit()
        assert (rec.id, rec.pid, rec.targets, rec.plan, rec.status, rec.finished_at) == (
            1,
            4242,
            ("n1",),
            {"job": "j"},
            "applied",
            T0 + 3,
        )
        assert [(st.index, st.status, st.detail) for st in rec.steps] == [(0, "done", "drained")]
        assert s.last_audit_id() == 1 and s.audit_ids(after=0, pid=4242) == [1]
        # robustctl.jobcode.records
        (change,) = records.changes(s, "j")
        assert (change.commit, change.state, change.due_at) == (
            "a" * 40,
            records.ChangeState.PENDING,
            T0 + 86_400,
        )
        assert records.pending_update(s, "j", T0) == ("a" * 40, (1,), False)
        (version,) = records.versions(s, "j")
        assert (version.ref, version.started_at, version.base_step, version.stable_at) == (
            "v1",
            T0 + 5,
            10,
            None,
        )
        # robustctl.playbooks.journal
        run = journal.run_record(s, 1)
        assert run is not None and (run.playbook, run.job, run.params, run.status) == (
            "recover",
            "j",
            {"a": "b"},
            "running",
        )
        assert [(st.step, st.status, st.exit_code, st.result) for st in run.steps] == [
            ("diag", "done", 0, {"kind": "x"})
        ]
        # robustctl.sweep.history
        hh = history.host_history(s, "n1")
        assert hh.counters is not None and (hh.counters.seen, hh.counters.failures) == (1, 1)
        assert [(c.check, c.status, c.recent_bad) for c in hh.checks] == [("(host)", "critical", (T0 + 9,))]
        assert [(c.to_status, c.source) for c in hh.changes] == [("critical", "sweep")]
        assert [(w.id, w.hosts, w.status) for w in history.last_sweeps(s)] == [(1, 1, "critical")]
        assert list(history.failures_since(s, T0)) == ["n1"]
        # robustctl.watchstore
        inc = watchstore.current_incident(s, "j")
        assert inc is not None and (inc.id, inc.incident_class, inc.onset_at, inc.last_step) == (
            1,
            "hang",
            T0 + 10,
            41,
        )
        (ev,) = watchstore.events(s, "j")
        assert (ev.rule, ev.evidence, ev.incident_id, ev.playbook_run_id) == ("stall", {"s": 1}, 1, 1)
        assert watchstore.get_state(s, "j") == {"x": 1}
        assert [(w.reason, w.end_at) for w in watchstore.waiting(s, "j")] == [("hourly limit", None)]
        assert [(p.at, p.step) for p in watchstore.progress_samples(s, "j")] == [(T0 + 15, 41)]
        # and it goes on being written by the new code, rows after the old ones
        history.record(s, [history.Observation("n1", history.HOST_CHECK, Status.OK, "fine")], source="sweep")
        assert history.counters(s, ["n1"])["n1"].seen == 2
    assert schema_of(path) == before


def test_a_new_state_file_has_the_old_schema(tmp_path: Path) -> None:
    """The on-disk schema did not change: today's store file holds exactly the old statements'
    tables, indexes and triggers, and records the same migrations."""
    old = tmp_path / "old.db"
    conn = old_schema(old, 6)
    conn.commit()
    conn.close()
    with Store.open(tmp_path / "new.db") as s:
        recorded = s.query("SELECT version, description FROM migrations ORDER BY version")
    assert recorded == [(v, OLD_MIGRATIONS[v][0]) for v in range(1, 7)]
    assert schema_of(tmp_path / "new.db") == schema_of(old)
    assert [(m.version, m.description, m.sql) for m in SCHEMA] == [
        (v, d, q) for v, (d, q) in OLD_MIGRATIONS.items()
    ]


def test_an_old_file_of_version_one_migrates_to_the_same_schema(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    conn = old_schema(path, 1)
    old_rows_v1 = "INSERT INTO machines(host, state, readiness, reason, updated_at) VALUES ('n1', 'suspect', 'unchecked', 'x', ?)"
    conn.execute(old_rows_v1, (T0,))
    conn.commit()
    conn.close()
    with Store.open(path) as s:
        assert s.schema_version == SCHEMA_VERSION
        assert [m.state for m in s.machines()] == [MachineState.SUSPECT]
    full = tmp_path / "full.db"
    conn = old_schema(full, 6)
    conn.commit()
    conn.close()
    assert schema_of(path) == schema_of(full)
