"""Property-based tests of ``robustctl ettr`` over a store a person edited: any value planted in any
column of ``watch_progress`` (an existing row changed, or a new row of any values added), with the
table's trigger dropped first.

Contract checked: :func:`robustctl.commands.ettr.run_ettr` returns a result (a ledger whose figures
are in range, or no data with exit 3) or raises a one-line :class:`~robustctl.store.StoreError` or
:class:`~robustctl.watch.ledger.LedgerInputError` (both exit 78), never another exception; its JSON
document is strict. Seeded and bounded by the ``ci`` profile (tests/conftest.py).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.commands.base import result_json
from robustctl.commands.ettr import EttrRequest, run_ettr
from robustctl.exit_codes import ExitCode
from robustctl.report.console import dump_json
from robustctl.store import TIME_MAX, Store, StoreError
from robustctl.watch.ledger import LedgerInputError
from robustctl.watchstore import open_incident, record_progress, update_incident

pytestmark = pytest.mark.fuzz

T0 = 1_700_000_000.0
NOW = T0 + 1000

COLUMNS = ("id", "job", "at", "step")
"""Every column of ``watch_progress``."""

VALUE = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(min_value=2**63).map(str),  # past SQLite's INTEGER: only text holds it
    st.binary(max_size=8),
    st.text(max_size=12),
    st.sampled_from([
        1e300, -1e300, TIME_MAX, TIME_MAX - 0.001, -1, 0, T0 - 1, T0 + 500, NOW + 1, 2**63 - 1, "NaN",
        "Infinity", "1e999", "llama", "other", "12", "1.5",
    ]),
)  # fmt: skip
"""What a planted field may hold: NULL, any number (times before, inside and after the window, out of
the store's range, non-finite), integers past 64 bits, text, blobs."""


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Progress of job llama (10 s steps, a crash at T0+200 recovered at T0+400) and of job other."""
    path = tmp_path_factory.mktemp("fuzz-ettr") / "filled.db"
    with Store.open(path, clock=lambda: T0) as s:
        for at, step in ((0, 0), (100, 10), (200, 20), (400, 16), (600, 36)):
            record_progress(s, "llama", at=T0 + at, step=step)
        record_progress(s, "other", at=T0, step=3)
        inc = open_incident(s, "llama", incident_class="crash", onset_at=T0 + 200, opened_at=T0 + 250)
        update_incident(s, inc.id, decision_at=T0 + 250, first_new_step_at=T0 + 400, checkpoint_step=15)
    return path


def plant(path: Path, column: str, value: Any, mode: str) -> None:
    """Set ``column`` to ``value`` in every row, in the last row, or in a new row (its other columns
    those of the last row), with a plain connection and the trigger dropped; a value SQLite refuses
    leaves the table as it was."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("DROP TRIGGER IF EXISTS watch_progress_fixed")
        if mode == "insert":
            row = dict(zip(COLUMNS, conn.execute("SELECT id, job, at, step FROM watch_progress ORDER BY id DESC"
                                                 " LIMIT 1").fetchone(), strict=True))  # fmt: skip
            row["id"] = None
            row[column] = value
            conn.execute(
                "INSERT INTO watch_progress(id, job, at, step) VALUES (?, ?, ?, ?)", tuple(row.values())
            )
        else:
            where = " WHERE rowid=(SELECT MAX(rowid) FROM watch_progress)" if mode == "last" else ""
            conn.execute(f"UPDATE watch_progress SET {column}=?{where}", (value,))
        conn.commit()
    except (sqlite3.Error, UnicodeEncodeError, OverflowError):
        pass
    finally:
        conn.close()


@given(st.sampled_from(COLUMNS), VALUE, st.sampled_from(["all", "last", "insert"]), st.booleans())
def test_any_value_in_watch_progress_is_a_ledger_or_one_line_78(
    filled: Path, column: str, value: Any, mode: str, since: bool
) -> None:
    path = filled.with_name(f"ex-{os.urandom(4).hex()}.db")
    try:
        path.write_bytes(filled.read_bytes())
        plant(path, column, value, mode)
        for job in ("llama", "other"):
            request = EttrRequest(job, state=path, window_s=300, since_s=600 if since else None)
            try:
                res = run_ettr(request, clock=lambda: NOW)
            except (StoreError, LedgerInputError) as exc:
                text = str(exc)
                assert "\n" not in text and text.strip(), text
                assert exc.exit_code == ExitCode.CONFIG
                if isinstance(exc, StoreError) and "table " in text:
                    assert "table watch_progress, row " in text and f", column {column}: " in text, text
                continue
            doc = json.loads(dump_json(result_json(res)))
            assert doc["kind"] == "ettr" and doc["exit_code"] == int(res.exit_code) in (0, 3)
            led = res.ledger
            if led is None:
                assert res.exit_code is ExitCode.UNKNOWN and doc["cumulative_ettr"] is None
                continue
            assert 0 <= led.cumulative_ettr <= 1 and 0 <= led.sliding_ettr <= 1
            assert led.start_s < led.end_s == NOW
            assert math.isclose(led.productive_s + led.unproductive_s, led.total_s, rel_tol=1e-9)
    finally:
        path.unlink(missing_ok=True)
        for extra in ("-wal", "-shm"):
            Path(str(path) + extra).unlink(missing_ok=True)
