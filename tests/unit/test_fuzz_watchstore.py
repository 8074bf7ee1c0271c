"""Property-based tests of the watcher's tables in the store (robustctl.watchstore): any value planted
in any column of ``watch_events``, ``watch_state``, ``incidents`` or ``watch_waiting`` (what anyone who
can write the file can do, the tables' triggers dropped first).

Contracts checked: every reader (:func:`events`, :func:`get_state`, :func:`incidents`,
:func:`current_incident`, :func:`waiting`) returns its records or raises a one-line
:class:`~robustctl.store.StoreError` naming the table, the row and the column planted; the writers that
read a row first (:func:`update_incident`, :func:`end_waiting`, :func:`set_event_run`,
:func:`open_incident`) end in one of the module's errors, one line, never another exception. Records
read back hold checked values (times finite and in range, JSON strict).
Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.store import TIME_MAX, Store, StoreError
from robustctl.watchstore import (
    IncidentRefused,
    WatchAction,
    WatchStoreInputError,
    current_incident,
    end_waiting,
    events,
    get_state,
    incidents,
    open_incident,
    open_waiting,
    put_state,
    record_event,
    set_event_run,
    update_incident,
    waiting,
)

pytestmark = pytest.mark.fuzz

T0 = 1_700_000_000.0

COLUMNS = (
    *(("watch_events", c) for c in (
        "id", "job", "at", "signal_class", "rule", "action", "playbook", "reason", "evidence", "incident_id",
        "playbook_run_id", "who",
    )),
    *(("watch_state", c) for c in ("job", "doc", "updated_at")),
    *(("incidents", c) for c in (
        "id", "job", "class", "onset_at", "opened_at", "decision_at", "localization_start_at",
        "localization_end_at", "eviction_start_at", "eviction_end_at", "machines_evicted", "restart_start_at",
        "first_new_step_at", "checkpoint_step", "last_step", "playbook", "playbook_run_id", "closed_at",
        "close_reason",
    )),
    *(("watch_waiting", c) for c in ("id", "job", "start_at", "end_at", "reason", "incident_id")),
)  # fmt: skip
"""Every column of the watcher's tables."""

VALUE = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(min_value=2**63).map(str),  # past SQLite's INTEGER: only text holds it
    st.binary(max_size=8),
    st.text(max_size=12),
    st.sampled_from([
        1e300, -1e300, TIME_MAX, TIME_MAX - 0.001, -1, 0, "NaN", "Infinity", "1e999", "llama", "other",
        "hang", "crash", "unknown", "gpu-lost", "run", "skip", "Run", "[]", "{}", "null", '"text"', "[1, 2]",
        '["node01", 3]', '["node01"]', '{"v": NaN}', '{"v": 1e999}', '{"v": [-Infinity]}', "[" * 100_000,
        '{"a": ' * 900 + "1" + "}" * 900, '{"x": "' + "y" * 70_000 + '"}', '{"cut": true}',
    ]),
)  # fmt: skip
"""What a planted field may hold: NULL, any number, text, blobs, and JSON documents of the wrong
shape, with non-finite numbers, nested deeply, cut short, larger than the state bound."""

ERRORS = (StoreError, IncidentRefused, WatchStoreInputError)
"""What the module may raise on a store a person edited: all one-line errors of the exit-code table."""


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with rows in every watcher table: events of two jobs (one with a playbook run), a state
    document, a closed and an open incident (machines evicted, every phase of the closed one), and a
    closed and an open waiting span."""
    path = tmp_path_factory.mktemp("fuzz-watchstore") / "filled.db"
    with Store.open(path, clock=lambda: T0) as s:
        for i, job in enumerate(("llama", "llama", "other")):
            eid = record_event(
                s, job, at=T0 + i, signal_class="hang", rule="hang.stall", action=WatchAction.RUN,
                playbook="hang", reason="stalled", evidence={"age_s": 700.0, "hosts": ["node01"]},
            )  # fmt: skip
        set_event_run(s, eid, 3)
        put_state(s, "llama", {"cooldown_until": T0 + 600, "recoveries": [T0]}, at=T0)
        first = open_incident(s, "llama", incident_class="crash", onset_at=T0, opened_at=T0 + 1, last_step=10)
        update_incident(
            s, first.id, decision_at=T0 + 2, localization_start_at=T0 + 3, localization_end_at=T0 + 4,
            eviction_start_at=T0 + 5, eviction_end_at=T0 + 6, machines_evicted=["node01"],
            restart_start_at=T0 + 7, first_new_step_at=T0 + 8, checkpoint_step=8, playbook="job-failed",
            playbook_run_id=3, closed_at=T0 + 8, close_reason="recovered",
        )  # fmt: skip
        open_incident(s, "llama", incident_class="hang", onset_at=T0 + 100, opened_at=T0 + 700)
        w = open_waiting(s, "llama", start_at=T0 + 20, reason="hourly limit")
        end_waiting(s, w, end_at=T0 + 30)
        open_waiting(s, "llama", start_at=T0 + 40, reason="paused", incident_id=2)
    return path


def plant(path: Path, table: str, column: str, value: Any, last_row_only: bool) -> None:
    """``UPDATE table SET column=value`` with a plain connection, every trigger dropped first; a value
    SQLite refuses (NOT NULL, a key taken twice, text in a rowid, a lone surrogate) leaves it as it was."""
    conn = sqlite3.connect(path)
    try:
        triggers = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")]
        for name in triggers:
            conn.execute(f"DROP TRIGGER {name}")
        where = f" WHERE rowid=(SELECT MAX(rowid) FROM {table})" if last_row_only else ""
        conn.execute(f"UPDATE {table} SET {column}=?{where}", (value,))
        conn.commit()
    except (sqlite3.Error, UnicodeEncodeError, OverflowError):
        pass
    finally:
        conn.close()


def one_line(exc: BaseException, table: str, column: str) -> None:
    """A reader's error: one line; a StoreError names the table and the column planted."""
    text = str(exc)
    assert "\n" not in text and text.strip(), text
    if isinstance(exc, StoreError) and "table " in text:
        assert f"table {table}, row " in text and f", column {column}: " in text, text


def strict(doc: object) -> None:
    json.dumps(doc, allow_nan=False)


def read_all(store: Store, table: str, column: str) -> None:
    """Every reader, each on its own: records of checked values, or one line naming the row."""
    for job in ("llama", "other"):
        for read in (
            lambda: events(store, job),
            lambda: get_state(store, job),
            lambda: incidents(store, job),
            lambda: incidents(store, job, since=T0 + 50),
            lambda: current_incident(store, job),
            lambda: waiting(store, job),
        ):
            try:
                got = read()
            except StoreError as exc:
                one_line(exc, table, column)
                assert f"table {table}, row " in str(exc) and f", column {column}: " in str(exc), str(exc)
                continue
            for rec in got if isinstance(got, list) else [got]:
                if rec is None:
                    continue
                if isinstance(rec, dict):
                    strict(rec)
                    continue
                for f in dataclasses.fields(rec):
                    name, field = f.name, getattr(rec, f.name)
                    if name.endswith("_at") or name == "at":
                        assert field is None or (math.isfinite(field) and 0 <= field < TIME_MAX), (
                            name,
                            field,
                        )
                    if name == "evidence":
                        strict(field)


@given(st.sampled_from(COLUMNS), VALUE, st.booleans())
def test_any_value_in_any_watch_column_is_read_or_one_line(
    filled: Path, column: tuple[str, str], value: Any, last_row_only: bool
) -> None:
    table, col = column
    path = filled.with_name(f"ex-{os.urandom(4).hex()}.db")
    try:
        path.write_bytes(filled.read_bytes())
        plant(path, table, col, value, last_row_only)
        with Store.open(path, clock=lambda: T0 + 1000) as store:
            read_all(store, table, col)
            for write in (
                lambda: update_incident(store, 2, decision_at=T0 + 701, machines_evicted=["node02"]),
                lambda: update_incident(store, 1, closed_at=T0 + 8),
                lambda: end_waiting(store, 2, end_at=T0 + 900),
                lambda: set_event_run(store, 1, 5),
                lambda: open_incident(store, "llama", incident_class="nan-loss", onset_at=T0, opened_at=T0),
                lambda: put_state(store, "llama", {"paused": None}, at=T0 + 1000),
            ):
                try:
                    write()
                except ERRORS as exc:
                    one_line(exc, table, col)
    finally:
        path.unlink(missing_ok=True)
        for side in ("-wal", "-shm"):
            Path(str(path) + side).unlink(missing_ok=True)
