"""Property-based tests of what reaches the state store from outside: ``--reason`` and
``--force-reason`` text, host and job names, ``--state`` paths, and the finding text a host sends
(suspect recording). The real CLI runs in process against a store in a temporary directory.

Contracts checked: the exit code is in the table and no catch-all fires; nothing is written outside
the store's directory; the store stays readable (``audit --json`` and ``hosts --json`` parse) and
holds the text literally (lone surrogates as their ``\\udcXX`` escape, the one change SQLite's UTF-8
forces); tables escape it (no raw control character reaches the terminal); a reason past
:data:`~robustctl.commands.actions.MAX_REASON_BYTES` or with a NUL is a usage error (64) and stores
nothing; every stored field is cut at :data:`~robustctl.store.MAX_TEXT`.
Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robustctl.cli.main import main
from robustctl.commands.actions import MAX_REASON_BYTES
from robustctl.models import Status
from robustctl.store import MAX_TEXT, MachineState, Store
from robustctl.suspects import record_suspects
from robustctl.sweep import history
from robustctl.sweep.history import HOST_CHECK, Observation
from tests.unit.test_fuzz_hostrange import INNER_CATCH_ALLS
from tests.unit.test_store_readers import CODE_INVENTORY, FACT_GUARDS, PLAYBOOK, fill

pytestmark = pytest.mark.fuzz

INVENTORY = """\
gpus_per_host: 2
hosts:
  - name: node[01-08]
    address: 127.0.0.[2-9]
  - name: spare[1-4]
    address: 127.0.0.[10-13]
jobs:
  llama:
    hosts: node[01-08]
    layout: {tp: 2, pp: 4, dp: 2}
policy: {max_cluster_fraction: 1.0, max_job_fraction: 1.0, circuit_breaker_fraction: 1.0,
         max_evictions_per_hour: 100000}
"""

HOSTILE = (
    "[/]", "[bold red]x[/]", "[link=file:///etc/passwd]x[/link]", "\x1b[2J\x1b]0;owned\x07", "\x9b31m",
    "\r\n", "\x00", "\udcff", "\ud800", "\udc80abc", "'; DROP TABLE audit; --", "\" OR 1=1 --",
    "%s%n%x", "{0}{}", "\u202e\u200b", "é漢字🙂", "\\", "x" * 5000, "y" * (MAX_REASON_BYTES - 1),
)  # fmt: skip
# Any code point, surrogates (what undecodable argv bytes become) included.
ANY_CHAR = st.characters(exclude_categories=())
TEXT = (
    st.text(ANY_CHAR, max_size=40)
    | st.sampled_from(HOSTILE)
    | st.lists(st.sampled_from(HOSTILE) | st.text(ANY_CHAR, max_size=4), max_size=5).map("".join)
)


def stored(text: str) -> str:
    """``text`` as the store keeps it: each lone surrogate as its ``\\uXXXX`` escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def acceptable(text: str) -> bool:
    return "\x00" not in text and len(text.encode("utf-8", "surrogatepass")) <= MAX_REASON_BYTES


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``box/inv.yaml`` and ``box/state/`` (the store's directory); the tests run with ``box`` as cwd."""
    d = tmp_path_factory.mktemp("fuzz-store")
    (d / "inv.yaml").write_text(INVENTORY)
    (d / "state").mkdir()
    return d


def snapshot(root: Path, prune: str = "state") -> dict[str, tuple[int, int]]:
    """Size and mtime of every path under ``root``, not looking inside ``root/prune``."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d != root / prune]
        for name in dirnames + filenames:
            p = here / name
            st_ = p.lstat()
            out[str(p.relative_to(root))] = (st_.st_size, st_.st_mtime_ns)
    return out


def fresh_store(box: Path) -> Path:
    """A new store file for one example (the tables render every record: one store would grow)."""
    for old in (box / "state").glob("ex-*"):
        old.unlink()
    return box / "state" / f"ex-{os.urandom(4).hex()}.db"


def cli(box: Path, argv: list[str], state: Path | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    inv = [] if argv[0] == "audit" else ["-i", str(box / "inv.yaml")]
    full = [*argv, *inv, "--state", str(state or box / "state" / "s.db")]
    old = Path.cwd()
    os.chdir(box)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(full)
    finally:
        os.chdir(old)
    e = err.getvalue()
    for text in INNER_CATCH_ALLS:
        assert text not in e, e[-2000:]
    return code, out.getvalue(), e


def read_back(box: Path, state: Path | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    code, out, err = cli(box, ["audit", "--json"], state)
    assert code == 0, err
    records = json.loads(out)["records"]
    code, out, err = cli(box, ["hosts", "--all", "--json"], state)
    assert code == 0, err
    return records, json.loads(out)["hosts"]


def outside_store(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    return sorted(
        k for k in set(before) | set(after) if not k.startswith("state") and before.get(k) != after.get(k)
    )


@given(TEXT, st.sampled_from(("evict", "return", "standby add", "evict --force")), st.integers(1, 8))
def test_reason_text_reaches_the_store_literally(box: Path, reason: str, action: str, n: int) -> None:
    before = snapshot(box)
    state = fresh_store(box)
    host = f"node0{n}" if action != "standby add" else f"spare{1 + n % 4}"
    if action == "evict --force":
        argv = ["evict", host, "--reason", "fuzz", "--force", "--force-reason", reason, "--yes", "-q"]
    else:
        argv = [*action.split(), host, "--reason", reason, "--yes", "-q"]
    code, _, err = cli(box, argv, state)
    assert outside_store(before, snapshot(box)) == []
    if not acceptable(reason) or (action == "evict --force" and not reason.strip()):
        assert code == 64 and "reason" in err and len(err.strip().splitlines()) == 1, err
        return
    assert code in (0, 2), err  # applied, nothing to do, or refused by a rail (standby add of a spare)
    records, hosts = read_back(box, state)
    last = records[-1]
    if action == "evict --force":
        assert last["plan"]["force_reason"] == reason  # the plan is JSON: kept exactly, surrogates too
    elif reason:
        assert last["reason"] == stored(reason)
    if last["status"] == "applied" and action in ("evict", "standby add") and reason:
        assert any(h["host"] == host and h["reason"] == stored(reason) for h in hosts)
    # the tables render the same text escaped: no raw control character reaches the terminal
    for argv in (["audit"], ["hosts", "--all"]):
        c, _, table = cli(box, argv, state)
        assert c == 0
        assert not any(ch in table for ch in "\x00\x07\x1b\x9b"), repr(table[-500:])


@given(TEXT)
def test_hostile_names_are_usage_errors(box: Path, name: str) -> None:
    before = snapshot(box)
    state = box / "state" / "names.db"
    for argv in (
        ["evict", name, "--reason", "r", "--yes", "-q"],
        ["evict", "node01", "--job", name, "--over-evict", "pp", "--reason", "r", "--dry-run", "-q"],
        ["return", name, "--reason", "r", "--yes", "-q"],
        ["standby", "add", name, "--yes", "-q"],
        ["standby", "activate", "--for", name, "--job", name, "--yes", "-q"],
        ["standby", "activate", "--for", "node01", "--job", "llama", "--standby", name, "--dry-run", "-q"],
    ):
        code, _, err = cli(box, argv, state)
        assert code in (0, 2, 64, 78), f"{argv}: exit {code}: {err[-1000:]}"
    assert outside_store(before, snapshot(box)) == []
    read_back(box, state)


STATE_NAMES = st.lists(
    st.sampled_from(("%2e%2e", "..", "a#b", "c?mode=memory", "%00", "x%2Fy", "é", "\udcff", " ", "-", "s.db"))
    | st.text(st.characters(exclude_categories=(), exclude_characters="/\x00"), min_size=1, max_size=8),
    min_size=1,
    max_size=3,
)


@given(STATE_NAMES)
def test_state_paths_stay_in_their_directory(box: Path, parts: list[str]) -> None:
    state = box / "state" / "paths"
    state.mkdir(exist_ok=True)
    path = state.joinpath(*parts)
    if not path.resolve().is_relative_to(state.resolve()):
        return  # a literal ".." leaves the directory by the user's own choice
    before = snapshot(box, prune="state/paths")
    code, _, err = cli(box, ["evict", "node01", "--reason", "r", "--yes", "-q"], state=path)
    assert code in (0, 78), err  # written, or a file SQLite cannot open (a name too long)
    changed = sorted(k for k, v in snapshot(box, prune="state/paths").items() if before.get(k) != v)
    assert changed == [], changed  # nothing changed outside the store's own directory
    if code == 0:
        assert path.is_file()  # the store is the file named, not one a URI parameter picked
        with Store.open(path) as s:
            assert s.machine("node01") is not None


@given(st.dictionaries(st.sampled_from([f"node0{i}" for i in range(1, 9)]) | TEXT, TEXT, max_size=4))
def test_finding_text_from_hosts(box: Path, named: dict[str, str]) -> None:
    """Suspect recording takes host names and findings from reports: whatever they hold is stored."""
    path = fresh_store(box)
    with Store.open(path) as store:
        result = record_suspects(store, named, source="diagnose")
        for host in result.marked:
            rec = store.machine(host.encode("utf-8", "backslashreplace").decode())
            assert rec is not None and rec.state is MachineState.SUSPECT
            assert len(rec.reason) <= 200
    _, hosts = read_back(box, path)  # the CLI reads it
    assert sorted(h["host"] for h in hosts if h["source"] == "store") == sorted(map(stored, result.marked))


def test_every_stored_field_is_bounded(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as s:
        aid = s.audit_begin("evict", ["node01"], "r" * (MAX_TEXT + 10), message="m" * (3 * MAX_TEXT))
        s.audit_step_start(aid, 0, "d" * (MAX_TEXT * 2))
        s.audit_step_end(aid, 0, "done", "\ud800" * (MAX_TEXT + 1))
        s.set_state("node01", MachineState.EVICTED, "x" * (MAX_TEXT * 4))
        rec = s.audit()[0]
        assert len(rec.reason) < MAX_TEXT + 40 and rec.reason.endswith(f"[cut: {MAX_TEXT + 10} characters]")
        assert len(rec.message) < MAX_TEXT + 40 and len(rec.steps[0].description) < MAX_TEXT + 40
        assert rec.steps[0].detail.startswith("\\ud800\\ud800")
        machine = s.machine("node01")
        assert machine is not None and len(machine.reason) < MAX_TEXT + 40


def test_reason_limits_are_usage_errors(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "inv.yaml").write_text(INVENTORY)
    for reason in ("a\x00b", "x" * (MAX_REASON_BYTES + 1), "é" * (MAX_REASON_BYTES // 2 + 1)):
        code, _, err = cli(tmp_path, ["evict", "node01", "--reason", reason, "--yes"])
        assert code == 64 and "--reason" in err, err
    code, _, err = cli(tmp_path, ["evict", "node01", "--reason", "x" * MAX_REASON_BYTES, "--yes", "-q"])
    assert code == 0, err
    with Store.open(tmp_path / "state" / "s.db") as s:
        assert [r.reason for r in s.audit()] == ["x" * MAX_REASON_BYTES]  # the refused ones wrote nothing


# --- any value in a time column (issue 21, item 6) -------------------------------------------------

TIME_COLUMNS = (
    ("machines", "updated_at"), ("machine_history", "at"), ("sched_nodes", "updated_at"),
    ("audit", "started_at"), ("audit", "finished_at"), ("audit_steps", "started_at"),
    ("audit_steps", "finished_at"), ("code_changes", "staged_at"), ("code_changes", "applied_at"),
    ("job_versions", "started_at"), ("job_versions", "stable_at"), ("playbook_runs", "started_at"),
    ("playbook_steps", "finished_at"), ("check_state", "since"), ("check_state", "last_seen"),
    ("check_state", "recent_bad"), ("check_changes", "at"), ("host_counters", "first_seen"),
    ("host_counters", "last_seen"), ("sweeps", "started_at"), ("sweeps", "finished_at"),
    ("sweeps", "clock_skew_s"), ("migrations", "applied_at"),
)  # fmt: skip
"""Every column of the schema that holds a time (``recent_bad``: a JSON list of times; ``clock_skew_s``
a duration in seconds)."""

ANY_VALUE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(min_value=2**63).map(str),  # past SQLite's INTEGER: only text holds it
    st.sampled_from([
        1e300, -1e300, 253_402_300_800, 253_402_300_799.999, -1, 0, "NaN", "Infinity", "1e999", "-0",
        "[NaN]", "[1e300]", "[-1]", "[]", "{}", '["x"]',
    ]),
    st.text(max_size=12),
    st.binary(max_size=12),
    st.none(),
)  # fmt: skip
"""What a user with the file can put in a time column: any float (NaN is stored as NULL), any 64-bit
integer, a larger one as text, text that reads as a number or a JSON list, any text, a blob, NULL."""

READERS = (
    (["hosts", "--all"], True), (["audit"], False), (["audit", "--json"], False),
    (["history", "node02", "--since", "3650d"], False), (["history", "node02", "--json"], False),
    (["lemons", "--since", "3650d"], True),
)  # fmt: skip
"""The commands that read the store, each with whether it takes ``-i``; ``sweep --html`` runs too. The
tables render every time; ``--json`` of ``audit`` and ``history`` (the JSON of ``hosts`` is read back
by the properties above)."""


READER_EXAMPLES = max(1, settings.default.max_examples // 3)
"""Examples of :func:`test_any_value_in_a_time_column_is_read_or_one_line`: a third of the profile's
(20 in ``ci``), since each runs seven commands, a sweep of twelve hosts included (about 0.1 s)."""


def run(argv: list[str], *, cwd: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    old = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        os.chdir(old)
    e = err.getvalue()
    for text in INNER_CATCH_ALLS:
        assert text not in e, f"{argv}: {e[-2000:]}"
    return code, out.getvalue(), e


@pytest.fixture(scope="module")
def history_store(box: Path) -> Path:
    """A store with every kind of row the readers show: suspects, evictions and a return (lemons),
    audit records with steps, a sweep history of node01-04 with node02 named three times (a lemon)."""
    path = box / "history.db"
    now = [time.time() - 7200]

    def clock() -> float:
        now[0] += 60
        return now[0]

    with Store.open(path, clock=clock) as store:
        for host in ("node01", "node02", "node03"):
            store.audit_begin("evict", [host], "r", plan={"steps": []})
        for _ in range(3):
            for status in (Status.CRITICAL, Status.OK):
                history.record(store, [Observation(h, c, status if h == "node02" else Status.OK, "d")
                                       for h in ("node01", "node02", "node03", "node04")
                                       for c in (HOST_CHECK, "host.xid")], source="sweep")  # fmt: skip
        record_suspects(store, {"node01": "diagnose L0: XID 79"}, source="diagnose")
        store.set_state("node02", MachineState.EVICTED, "xid")
        store.set_state("node02", MachineState.RETURNED, "repaired")
        store.set_state("node03", MachineState.STANDBY, "spare")
        aid = store.audit_begin("evict", ["node02"], "r", plan={"steps": [1]})
        store.audit_step_start(aid, 0, "drain node02")
        store.audit_step_end(aid, 0, "done", "drained")
        store.audit_finish(aid, "applied", "1 step(s) done")
    return path


@contextlib.contextmanager
def fake_pool(data: dict[str, Any]) -> Iterator[None]:
    """Every transport a sweep opens answers from ``data`` (a healthy host) instead of SSH."""
    from robustctl.testing.fake_transport import FakeTransport
    from robustctl.transport import pool

    names = [f"node0{i}" for i in range(1, 9)] + [f"spare{i}" for i in range(1, 5)]
    fake = FakeTransport({n: {"host": data, "nvml": {"available": False, "reason": "no GPU"}} for n in names})
    real = pool.TransportPool
    with mock.patch.object(pool, "TransportPool", lambda **_kw: real(override=fake)):
        yield


@settings(max_examples=READER_EXAMPLES)
@given(st.sampled_from(TIME_COLUMNS), ANY_VALUE, st.booleans())
def test_any_value_in_a_time_column_is_read_or_one_line(
    box: Path, history_store: Path, _healthy_host_probe: dict[str, Any], column: tuple[str, str],
    value: Any, last_row_only: bool,
) -> None:  # fmt: skip
    """Whatever a time column holds, every reading command exits with a code of the table (never 3,
    the catch-all) and either shows the store or says in one line which row is bad."""
    table, col = column
    state = fresh_store(box)
    state.write_bytes(history_store.read_bytes())
    conn = sqlite3.connect(state)
    try:
        where = f" WHERE rowid=(SELECT MAX(rowid) FROM {table})" if last_row_only else ""
        conn.execute(f"UPDATE {table} SET {col}=?{where}", (value,))
        conn.commit()
    except sqlite3.Error:
        pass  # NOT NULL (a NaN is stored as NULL), a trigger keeping a code change's facts: unchanged
    finally:
        conn.close()
    inv = ["-i", str(box / "inv.yaml")]
    page = box / "state" / "page.html"
    page.unlink(missing_ok=True)
    data = {**_healthy_host_probe, "clock": {**_healthy_host_probe["clock"], "time": time.time()}}
    with fake_pool(data):
        sweep = run(["sweep", "--html", str(page), "-q", *inv, "--state", str(state)], cwd=box)
    for argv, takes_inventory in READERS:
        code, out, err = run([*argv, *(inv if takes_inventory else []), "--state", str(state)], cwd=box)
        check_reader(argv, code, out, err)
    code, out, err = sweep
    assert code in (0, 1, 2, 78), err[-2000:]
    if code == 78:
        assert len(err.strip().splitlines()) == 1 and not page.exists(), err
    else:
        assert page.read_text().rstrip().endswith("</html>")


def check_reader(argv: list[str], code: int, out: str, err: str) -> None:
    """Exit 0 with its output (JSON that parses, or a table), or 78 and one line naming the row."""
    assert code in (0, 78), f"{argv}: exit {code}: {err[-2000:]}"
    if code == 78:
        lines = err.strip().splitlines()
        assert out == "" and len(lines) == 1 and "table " in lines[0] and ", column " in lines[0], lines
    elif "--json" in argv:
        json.loads(out)
    else:
        assert err.strip(), argv


# --- any value in a code-record or journal column (issue 21, item 6) -----------------------------

CODE_JOURNAL_COLUMNS = (
    ("code_changes", "id"), ("code_changes", "urgent"), ("code_changes", "staged_at"),
    ("code_changes", "due_at"), ("code_changes", "applied_at"), ("job_versions", "id"),
    ("job_versions", "started_at"), ("job_versions", "base_step"), ("job_versions", "last_step"),
    ("job_versions", "last_progress_at"), ("job_versions", "stable_at"), ("job_versions", "change_id"),
    ("playbook_runs", "id"), ("playbook_runs", "params"), ("playbook_runs", "started_at"),
    ("playbook_runs", "finished_at"), ("playbook_runs", "pid"), ("playbook_steps", "run_id"),
    ("playbook_steps", "seq"), ("playbook_steps", "attempt"), ("playbook_steps", "started_at"),
    ("playbook_steps", "finished_at"), ("playbook_steps", "pid"), ("playbook_steps", "audit_after"),
    ("playbook_steps", "exit_code"), ("playbook_steps", "result"),
)  # fmt: skip
"""Every time, number and JSON column of the code records (``update list`` reads them) and of the
playbook journal (``playbook run`` and ``resume``)."""

CODE_JOURNAL_VALUE = ANY_VALUE | st.sampled_from([
    '{"job": "small"}', '{"job": "other"}', '{"job": 1}', '{"job": null}', '{"job": ["small"]}',
    '{"kind": "notify", "exit_code": 0}', '{"kind": "notify", "exit_code": NaN}', '{"x": [-Infinity]}',
    '{"exit_code": 1e999}', '{"a": ' * 900 + "1" + "}" * 900, "[" * 100_000, '"text"', "null",
])  # fmt: skip
""":data:`ANY_VALUE`, and JSON documents the two JSON columns (a run's parameters, a step's result)
may hold: of the wrong shape, with non-finite numbers, nested deeply, cut short."""

CODE_JOURNAL_READERS = (
    (["update", "list", "--job", "small", "--no-progress"], (0,)),
    (["update", "list", "--job", "small", "--no-progress", "--json"], (0,)),
    (["playbook", "run", "pb.yaml", "--job", "small", "--yes", "-q"], (2,)),
    (["playbook", "resume", "2", "--yes", "-q"], (64,)),
    (["playbook", "resume", "1", "--yes", "-q", "--json"], (0, 64)),
)  # fmt: skip
"""The commands that read those tables, with their exit codes on a good store: ``playbook run`` is
refused (run 1 of the job is unfinished), ``resume 2`` finds the run done, ``resume 1`` goes on from
the journal (64: no run 1 once its id was changed). Otherwise the only other code is 78, in one line."""


@pytest.fixture(scope="module")
def code_journal_store(box: Path) -> Path:
    """:func:`tests.unit.test_store_readers.fill`: code changes, job versions, a running and a done
    playbook run; ``box/code-inv.yaml`` (the job with a ``code:`` section) and ``box/pb.yaml``."""
    (box / "code-inv.yaml").write_text(CODE_INVENTORY)
    (box / "pb.yaml").write_text(PLAYBOOK)
    path = box / "code-journal.db"
    fill(path)
    return path


@given(st.sampled_from(CODE_JOURNAL_COLUMNS), CODE_JOURNAL_VALUE, st.booleans())
def test_any_value_in_a_code_or_journal_column_is_read_or_one_line(
    box: Path, code_journal_store: Path, column: tuple[str, str], value: Any, last_row_only: bool
) -> None:
    """Whatever a time, number or JSON column of the code records or the playbook journal holds,
    ``update list`` and ``playbook run``/``resume`` end as on a good store, or exit 78 with one line
    naming the row and column changed; never 3 (the catch-all). Printed JSON is strict."""
    table, col = column
    state = fresh_store(box)
    state.write_bytes(code_journal_store.read_bytes())
    conn = sqlite3.connect(state)
    try:
        for trigger in FACT_GUARDS:  # whoever edits the file can drop them
            conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        where = f" WHERE rowid=(SELECT MAX(rowid) FROM {table})" if last_row_only else ""
        conn.execute(f"UPDATE {table} SET {col}=?{where}", (value,))
        conn.commit()
    except sqlite3.Error:
        pass  # NOT NULL, a key taken twice, a rowid that is not an integer: unchanged
    finally:
        conn.close()
    for argv, codes in CODE_JOURNAL_READERS:
        code, out, err = run([*argv, "-i", str(box / "code-inv.yaml"), "--state", str(state)], cwd=box)
        assert code in (*codes, 78), f"{argv}: exit {code}: {err[-2000:]}"
        if code == 78:
            lines = err.strip().splitlines()
            assert out == "" and len(lines) == 1 and f"table {table}, row " in lines[0], lines
            assert f", column {col}: " in lines[0], lines
        elif "--json" in argv and code == 0:
            json.loads(out, parse_constant=lambda c: pytest.fail(f"{argv}: not strict JSON: {c}"))


# --- a store damaged at a random page (issue 21, item 7) -------------------------------------------

ACTIONS = (
    ("evict", "node05", ["evict", "node05"]), ("return", "node03", ["return", "node03"]),
    ("standby-add", "spare2", ["standby", "add", "spare2"]),
)  # fmt: skip
"""(audit action, target, argv) of the destructive commands that run on the inventory back end."""


@pytest.fixture(scope="module")
def acted_store(box: Path) -> Path:
    """A store after a few actions through the CLI (evictions, a return, a standby): audit records
    with steps and plans, machine states and history, the inventory scheduler's nodes."""
    path = box / "acted.db"
    for argv in (
        ["evict", "node02"],
        ["evict", "node03"],
        ["return", "node02"],
        ["standby", "add", "spare1"],
    ):
        code, _, err = cli(box, [*argv, "--reason", "setup", "--yes", "-q"], path)
        assert code == 0, err
    return path


def host_rows(state: Path, host: str) -> object:
    """The host's rows in ``machines`` and ``sched_nodes`` (what an action changes), or why they
    cannot be read."""
    try:
        conn = sqlite3.connect(f"file:{state}?mode=ro", uri=True)
        try:
            return [
                conn.execute(f"SELECT * FROM {t} WHERE host=? ORDER BY rowid", (host,)).fetchall()
                for t in ("machines", "sched_nodes")
            ]
        finally:
            conn.close()
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        return f"unreadable: {exc}"


@given(
    st.sampled_from(ACTIONS),
    st.integers(0, 10_000),
    st.integers(0, 4095),
    st.binary(min_size=1, max_size=128) | st.integers(0, 255).map(lambda b: bytes([b]) * 64),
)
def test_an_action_on_a_damaged_store_is_audited_or_applies_nothing(
    box: Path, acted_store: Path, action: tuple[str, str, list[str]], page: int, offset: int, junk: bytes
) -> None:
    """Whatever page is damaged, an action either applies and its audit record reads back (``audit
    --json``), or changes nothing: exit 78 (the store failed its check) or another code of the table."""
    name, host, argv = action
    state = fresh_store(box)
    data = bytearray(acted_store.read_bytes())
    at = (page % (len(data) // 4096)) * 4096 + offset
    data[at : at + len(junk)] = junk
    state.write_bytes(bytes(data))
    before = host_rows(state, host)
    code, _, err = cli(box, [*argv, "--reason", "fuzz", "--yes", "-q"], state)
    assert code in (0, 2, 3, 78), f"exit {code}: {err[-2000:]}"
    if code == 78:
        assert len(err.strip().splitlines()) == 1, err
    after = host_rows(state, host)
    if after == before and code != 0:
        return  # nothing applied
    c, out, e = cli(box, ["audit", "--json"], state)
    assert c == 0, f"{argv} exit {code} changed {host} ({before} → {after}), and audit exits {c}: {e[-1000:]}"
    last = json.loads(out)["records"][-1]
    assert last["action"] == name and last["targets"] == [host], last
    assert last["status"] in ("applied", "nothing-to-do", "failed") and last["steps"], last
