"""The watcher's state in the store (robustctl.watchstore, issue 22 items 1, 3, 4): decision events,
per-job state, incidents and waiting spans round trip; append-only and forward-only rules refuse
rewrites, also when the file is written outside robustctl; one open incident per job; one watcher per
job (a real second process is refused, naming the holder's pid)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from robustctl.config import WATCH_CLASSES
from robustctl.exit_codes import ExitCode
from robustctl.store import MAX_TEXT, Store, StoreError
from robustctl.watchstore import (
    EVENT_CLASSES,
    INCIDENT_CLASSES,
    MAX_STATE_BYTES,
    IncidentRefused,
    WatchAction,
    WatchBusy,
    WatchStoreInputError,
    current_incident,
    end_waiting,
    events,
    get_state,
    incidents,
    lock_path,
    open_incident,
    open_waiting,
    put_state,
    record_event,
    set_event_run,
    update_incident,
    waiting,
    watch_lock,
)

T0 = 1_700_000_000.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "s.db", clock=lambda: T0, who="ops@box") as s:
        yield s


def test_classes_are_the_configs() -> None:
    """One list of signal classes: the config's enum; the inventory's playbook keys, the store's
    incident and event classes and the ledger's all follow it."""
    from typing import get_args

    from robustctl.config import SignalClass, WatchClass

    assert INCIDENT_CLASSES == WATCH_CLASSES == get_args(WatchClass)
    assert EVENT_CLASSES == tuple(c.value for c in SignalClass) == (*WATCH_CLASSES, "unknown")


# --- events -------------------------------------------------------------------------------------


def test_events_round_trip_newest_limit_oldest_first(store: Store) -> None:
    ids = [
        record_event(
            store,
            "llama",
            at=T0 + i,
            signal_class="hang",
            rule="hang.stall",
            action=WatchAction.SKIP,
            reason=f"cool-down {i}",
            evidence={"age_s": 700.5 + i, "hosts": ["node01"]},
        )
        for i in range(5)
    ]
    other = record_event(
        store, "other", at=T0, signal_class="unknown", rule="progress.unreadable", action=WatchAction.ADVISE,
        reason="no progress file",
    )  # fmt: skip
    got = events(store, "llama")
    assert [e.id for e in got] == ids and other not in ids
    first = got[0]
    assert (first.job, first.at, first.signal_class, first.rule, first.action, first.reason) == (
        "llama", T0, "hang", "hang.stall", WatchAction.SKIP, "cool-down 0",
    )  # fmt: skip
    assert first.evidence == {"age_s": 700.5, "hosts": ["node01"]} and first.who == "ops@box"
    assert first.playbook is None and first.incident_id is None and first.playbook_run_id is None
    assert [e.id for e in events(store, "llama", limit=2)] == ids[-2:]
    assert [e.id for e in events(store, "llama", since=T0 + 3)] == ids[3:]
    assert events(store, "other")[0].signal_class == "unknown"


def test_event_run_id_is_set_once_and_events_never_change(store: Store) -> None:
    eid = record_event(
        store, "llama", at=T0, signal_class="crash", rule="crash.exit", action=WatchAction.RUN,
        playbook="job-failed", reason="rank 3 exited 1", incident_id=7,
    )  # fmt: skip
    set_event_run(store, eid, 12)
    set_event_run(store, eid, 12)  # the same again: no-op
    with pytest.raises(IncidentRefused, match="already names playbook run 12"):
        set_event_run(store, eid, 13)
    with pytest.raises(IncidentRefused, match="no watch event 99"):
        set_event_run(store, 99, 1)
    assert events(store, "llama")[0].playbook_run_id == 12
    conn = sqlite3.connect(store.path)
    for sql in (
        "DELETE FROM watch_events",
        "UPDATE watch_events SET reason='edited'",
        "UPDATE watch_events SET playbook_run_id=NULL",
    ):
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(sql)
    conn.close()


def test_event_input_errors_name_the_field(store: Store) -> None:
    def rec(**kw: object) -> int:
        args: dict[str, object] = {
            "at": T0, "signal_class": "hang", "rule": "r", "action": WatchAction.SKIP, "reason": "x",
        }  # fmt: skip
        args.update(kw)
        return record_event(store, "llama", **args)  # type: ignore[arg-type]

    for kw, needle in (
        ({"at": float("nan")}, "at is not a time"),
        ({"at": -1.0}, "at is not a time"),
        ({"signal_class": "gpu-lost"}, "signal class 'gpu-lost'"),
        ({"evidence": {"loss": float("inf")}}, "evidence is not strict JSON"),
        ({"evidence": ["x"]}, "evidence is not a JSON object"),
        ({"evidence": {"a": object()}}, "evidence is not strict JSON"),
        ({"incident_id": -1}, "incident_id is not an integer"),
    ):
        with pytest.raises(WatchStoreInputError, match=needle) as info:
            rec(**kw)
        assert info.value.exit_code == ExitCode.CONFIG and "\n" not in str(info.value)
    deep: dict[str, object] = {}
    for _ in range(200):
        deep = {"d": deep}
    with pytest.raises(WatchStoreInputError, match="nested deeper"):
        rec(evidence=deep)
    assert events(store, "llama") == []


def test_long_evidence_is_kept_in_part_and_says_so(store: Store) -> None:
    record_event(
        store, "llama", at=T0, signal_class="crash", rule="log.cuda", action=WatchAction.ADVISE,
        reason="r" * (MAX_TEXT + 5), evidence={"line": "x" * (3 * MAX_TEXT)},
    )  # fmt: skip
    (got,) = events(store, "llama")
    assert got.evidence["cut"] is True and got.evidence["chars"] > 3 * MAX_TEXT
    assert len(got.evidence["head"]) <= MAX_TEXT and got.reason.endswith("characters]")


def test_a_bad_event_row_is_one_line_naming_it(store: Store) -> None:
    record_event(store, "llama", at=T0, signal_class="hang", rule="r", action=WatchAction.SKIP, reason="x")
    conn = sqlite3.connect(store.path)
    conn.execute("DROP TRIGGER watch_events_facts_fixed")
    conn.execute("UPDATE watch_events SET evidence='{\"v\": NaN}'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match=r"table watch_events, row 1, column evidence: .*not finite") as info:
        events(store, "llama")
    assert "\n" not in str(info.value)


# --- state --------------------------------------------------------------------------------------


def test_state_round_trip_replace_and_bound(store: Store) -> None:
    assert get_state(store, "llama") is None
    doc = {"cooldown_until": T0 + 600, "recoveries": [T0 - 10, T0], "paused": None, "name": "é\udcff"}
    put_state(store, "llama", doc, at=T0)
    got = get_state(store, "llama")
    assert got == doc  # exactly, a lone surrogate included
    put_state(store, "llama", {"paused": "hourly limit"}, at=T0 + 1)
    assert get_state(store, "llama") == {"paused": "hourly limit"}
    assert get_state(store, "other") is None
    with pytest.raises(WatchStoreInputError, match=f"larger than {MAX_STATE_BYTES}"):
        put_state(store, "llama", {"w": "x" * MAX_STATE_BYTES}, at=T0 + 2)
    with pytest.raises(WatchStoreInputError, match="not strict JSON"):
        put_state(store, "llama", {"w": float("nan")}, at=T0 + 2)
    assert get_state(store, "llama") == {"paused": "hourly limit"}  # a refused put changes nothing
    conn = sqlite3.connect(store.path)
    conn.execute("UPDATE watch_state SET doc='[1, 2]'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="table watch_state, row 1, column doc: not a JSON object"):
        get_state(store, "llama")


# --- incidents ----------------------------------------------------------------------------------


def test_incident_round_trip_forward_only(store: Store) -> None:
    inc = open_incident(store, "llama", incident_class="hang", onset_at=T0, opened_at=T0 + 700, last_step=120)
    assert inc.is_open and current_incident(store, "llama") == inc and inc.machines_evicted == ()
    inc = update_incident(
        store, inc.id, decision_at=T0 + 700, playbook="hang", playbook_run_id=4, machines_evicted=["node02"]
    )
    inc = update_incident(store, inc.id, decision_at=T0 + 700, machines_evicted=["node03", "node02"])
    assert inc.decision_at == T0 + 700 and inc.playbook == "hang" and inc.playbook_run_id == 4
    assert inc.machines_evicted == ("node02", "node03")
    with pytest.raises(IncidentRefused, match="decision_at is already"):
        update_incident(store, inc.id, decision_at=T0 + 800)
    with pytest.raises(IncidentRefused, match="playbook is already"):
        update_incident(store, inc.id, playbook="job-failed")
    with pytest.raises(TypeError, match="onset_at"):
        update_incident(store, inc.id, onset_at=T0 + 1)
    with pytest.raises(WatchStoreInputError, match="checkpoint_step is not an integer"):
        update_incident(store, inc.id, checkpoint_step=-3)
    inc = update_incident(
        store, inc.id, restart_start_at=T0 + 760, first_new_step_at=T0 + 800, checkpoint_step=100,
        closed_at=T0 + 800, close_reason="first new step",
    )  # fmt: skip
    assert not inc.is_open and current_incident(store, "llama") is None
    with pytest.raises(IncidentRefused, match="is closed"):
        update_incident(store, inc.id, machines_evicted=["node09"])
    with pytest.raises(IncidentRefused, match="no incident 99"):
        update_incident(store, 99, decision_at=T0)
    (back,) = incidents(store, "llama")
    assert back == inc and (back.onset_at, back.last_step, back.checkpoint_step) == (T0, 120, 100)


def test_the_tables_refuse_rewrites_from_outside(store: Store) -> None:
    inc = open_incident(store, "llama", incident_class="crash", onset_at=T0, opened_at=T0)
    update_incident(store, inc.id, decision_at=T0 + 5, machines_evicted=["node01", "node02"])
    wid = open_waiting(store, "llama", start_at=T0, reason="hourly limit")
    end_waiting(store, wid, end_at=T0 + 60)
    conn = sqlite3.connect(store.path)
    for sql in (
        "DELETE FROM incidents",
        "UPDATE incidents SET onset_at=1",
        "UPDATE incidents SET class='hang'",
        "UPDATE incidents SET decision_at=NULL",
        "UPDATE incidents SET decision_at=9",
        "UPDATE incidents SET machines_evicted='[\"node01\"]'",
        "UPDATE incidents SET machines_evicted='{}'",
        "DELETE FROM watch_waiting",
        "UPDATE watch_waiting SET end_at=T0",
        "UPDATE watch_waiting SET reason='x'",
    ):
        with pytest.raises(sqlite3.Error):
            conn.execute(sql.replace("T0", str(T0 + 1)))
    conn.execute("UPDATE incidents SET eviction_end_at=? WHERE id=?", (T0 + 9, inc.id))  # unset: allowed
    conn.commit()
    conn.close()
    assert incidents(store, "llama")[0].eviction_end_at == T0 + 9


def test_one_open_incident_per_job(store: Store) -> None:
    first = open_incident(store, "llama", incident_class="hang", onset_at=T0, opened_at=T0)
    with pytest.raises(IncidentRefused, match=f"already has an open incident, incident {first.id} ") as info:
        open_incident(store, "llama", incident_class="crash", onset_at=T0 + 5, opened_at=T0 + 5)
    assert info.value.exit_code == ExitCode.CRITICAL and "\n" not in str(info.value)
    other = open_incident(
        store, "other", incident_class="crash", onset_at=T0, opened_at=T0
    )  # another job: fine
    conn = sqlite3.connect(store.path)
    with pytest.raises(sqlite3.IntegrityError):  # outside robustctl too
        conn.execute("INSERT INTO incidents(job, class, onset_at, opened_at) VALUES ('llama', 'hang', 1, 1)")
    conn.close()
    update_incident(store, first.id, closed_at=T0 + 60, close_reason="recovered")
    second = open_incident(store, "llama", incident_class="crash", onset_at=T0 + 100, opened_at=T0 + 100)
    assert [i.id for i in incidents(store, "llama")] == [first.id, second.id]
    assert [i.id for i in incidents(store, "llama", since=T0 + 90)] == [second.id]
    assert [i.id for i in incidents(store, "llama", since=T0 + 30)] == [first.id, second.id]
    assert current_incident(store, "other") == other


def test_waiting_spans(store: Store) -> None:
    a = open_waiting(store, "llama", start_at=T0, reason="hourly limit reached")
    end_waiting(store, a, end_at=T0 + 30)
    end_waiting(store, a, end_at=T0 + 30)
    with pytest.raises(IncidentRefused, match="already ended"):
        end_waiting(store, a, end_at=T0 + 40)
    b = open_waiting(store, "llama", start_at=T0 + 100, reason="paused", incident_id=3)
    got = waiting(store, "llama")
    assert [(w.id, w.end_at, w.incident_id) for w in got] == [(a, T0 + 30, None), (b, None, 3)]
    assert [w.id for w in waiting(store, "llama", since=T0 + 50)] == [b]


# --- the lock -----------------------------------------------------------------------------------

HOLDER = """\
import sys
from pathlib import Path
from robustctl.watchstore import watch_lock
with watch_lock(Path(sys.argv[1]), sys.argv[2]):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_second_watcher_of_a_job_is_refused_naming_the_pid(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    job = "llama/../x y"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state), job],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        with pytest.raises(
            WatchBusy, match=f"another watcher of job .* is running \\(pid {proc.pid}, "
        ) as info:
            with watch_lock(state, job):
                pass
        assert info.value.exit_code == ExitCode.UNKNOWN and "\n" not in str(info.value)
        with watch_lock(state, "other"):  # another job: its own lock
            pass
    finally:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.close()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    assert lock_path(state, job).parent == tmp_path  # the job name cannot move the lock file
    with watch_lock(state, job):  # the holder is gone: free again
        pass


def test_lock_file_names_stay_short_and_apart(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    long_a, long_b = "a" * 500, "a" * 499 + "b"
    assert lock_path(state, long_a) != lock_path(state, long_b)
    assert len(lock_path(state, long_a).name) < 255
    assert lock_path(state, "x/y") != lock_path(state, "x_y") and "/" not in lock_path(state, "x/y").name
    with pytest.raises(StoreError, match="cannot create the watch lock"):
        with watch_lock(tmp_path / "missing" / "s.db", "llama"):
            pass


def test_a_repeated_skip_is_recorded_once_until_something_else_happens(store: Store) -> None:
    def skip(at: float, reason: str = "cool-down until 12:00", incident: int | None = None) -> int:
        return record_event(
            store, "llama", at=at, signal_class="hang", rule="hang.stall", action=WatchAction.SKIP,
            reason=reason, incident_id=incident,
        )  # fmt: skip

    first = skip(T0)
    assert skip(T0 + 30) == first and skip(T0 + 60) == first
    changed = skip(T0 + 90, reason="cool-down until 12:10")
    assert changed != first
    other_incident = skip(T0 + 95, reason="cool-down until 12:10", incident=7)
    assert other_incident != changed
    advise = record_event(
        store, "llama", at=T0 + 100, signal_class="hang", rule="hang.stall", action=WatchAction.ADVISE,
        reason="would run hang",
    )  # fmt: skip
    again = record_event(
        store, "llama", at=T0 + 110, signal_class="hang", rule="hang.stall", action=WatchAction.ADVISE,
        reason="would run hang",
    )  # fmt: skip
    assert again != advise  # only skips fold: every other decision is its own line
    after = skip(T0 + 120, reason="cool-down until 12:10", incident=7)
    assert after not in (other_incident, again)
    got = events(store, "llama")
    assert [e.at for e in got] == [T0, T0 + 90, T0 + 95, T0 + 100, T0 + 110, T0 + 120]
