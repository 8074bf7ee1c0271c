"""The store's API is the one way to the state file: :meth:`Store.transaction` (a :class:`Transaction`
that binds text through :func:`clean_text` and refuses transaction control, pragmas and schema changes),
:meth:`Store.query` / :meth:`Store.rows`, and :data:`SCHEMA` creating every table for its owner module.

Checked here: what a transaction refuses and what it keeps when the block fails; text with lone
surrogates written by the modules that keep their own tables (it crashed the sweep history and the
code records with ``UnicodeEncodeError`` before the store bound text for them); that no module but
the store opens a connection, sets a pragma, commits or creates a table; and that each module's SQL
names only the tables :data:`SCHEMA` registers for it.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import robustctl
from robustctl import store as store_module
from robustctl.jobcode import records
from robustctl.models import Status
from robustctl.playbooks import journal
from robustctl.store import (
    NOT_IN_A_TRANSACTION,
    SCHEMA,
    SCHEMA_VERSION,
    MachineState,
    Store,
    StoreError,
    clean_text,
    journal_query,
    schema_tables,
)
from robustctl.sweep import history

PACKAGE = Path(robustctl.__file__).parent

OWNERS = (
    "robustctl.store",
    "robustctl.jobcode.records",
    "robustctl.playbooks.journal",
    "robustctl.sweep.history",
    "robustctl.watchstore",
)
"""The modules that keep tables in the state file."""


def test_schema_steps_are_numbered_and_owned() -> None:
    assert [m.version for m in SCHEMA] == list(range(1, SCHEMA_VERSION + 1))
    assert {m.owner for m in SCHEMA} == set(OWNERS)
    tables = [t for m in SCHEMA for t in m.tables]
    assert len(tables) == len(set(tables)), "a table created twice"
    assert schema_tables("robustctl.watchstore") == {
        "watch_events", "watch_state", "incidents", "watch_waiting", "watch_progress",
    }  # fmt: skip
    for owner in OWNERS:
        module = importlib.import_module(owner)
        assert "SCHEMA" in (module.__doc__ or ""), (
            f"{owner}'s docstring does not say where its tables are made"
        )


@pytest.mark.parametrize(
    "sql", ["COMMIT", "  begin immediate", "PRAGMA journal_mode=DELETE", "CREATE TABLE x(a)", "drop table audit",
            "ATTACH DATABASE '/tmp/x.db' AS x", "ROLLBACK", "VACUUM", ""],
)  # fmt: skip
def test_a_transaction_refuses_control_pragmas_and_schema(tmp_path: Path, sql: str) -> None:
    with Store.open(tmp_path / "s.db") as s:
        with pytest.raises(ValueError, match="not a statement for a store transaction"), s.transaction() as c:
            c.execute("INSERT INTO sched_nodes(host, state, updated_at) VALUES ('n1', 'drained', 1)")
            c.execute(sql)
        assert s.sched_state("n1") is None  # the block's earlier write rolled back
        assert s.query("PRAGMA journal_mode") == [("wal",)]  # a read
    assert {w.split()[0] for w in NOT_IN_A_TRANSACTION} == NOT_IN_A_TRANSACTION


def test_a_refused_write_is_a_store_error_and_keeps_nothing(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as s:
        with pytest.raises(StoreError, match=r"s\.db: .*append-only"), s.transaction() as c:
            c.execute("INSERT INTO sched_nodes(host, state, updated_at) VALUES ('n1', 'drained', 1)")
            c.execute(
                "INSERT INTO watch_events(job, at, signal_class, rule, action, who) VALUES ('j', 1, 'hang', 'r', 'run', 'w')"
            )
            c.execute("DELETE FROM watch_events")
        assert s.sched_state("n1") is None
        assert s.query("SELECT COUNT(*) FROM watch_events") == [(0,)]


def test_text_with_lone_surrogates_reaches_every_modules_tables(tmp_path: Path) -> None:
    """Regression: a detail, host or ref with bytes that are not UTF-8 (a host's output, a command
    line) made ``history.record`` and ``records.record_change`` fail with UnicodeEncodeError."""
    host, detail, ref = "n\udcff1", "gpu0: \udcfe bad", "v\udc801"
    with Store.open(tmp_path / "s.db") as s:
        rec = history.record(
            s, [history.Observation(host, history.HOST_CHECK, Status.CRITICAL, detail)], source="sweep"
        )
        assert [c.host for c in rec.changes] == [host]  # as given, in what record returns
        states = history.check_states(s)
        assert states[(clean_text(host), history.HOST_CHECK)].detail == "gpu0: \\udcfe bad"
        assert history.check_states(s, [host]) == states  # the raw name finds the row
        change = records.record_change(s, "j\udcff", ref=ref, commit="a" * 40, from_ref=None, reason="r")
        assert (change.job, change.ref) == ("j\\udcff", "v\\udc801")
        assert records.changes(s, "j\udcff") == [change]
        s.set_job_hosts("j\udcff", [host])
        assert s.job_hosts("j\udcff") == ["n\\udcff1"]


def test_audit_ids_for_the_journal(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as s:
        assert s.last_audit_id() == 0
        first = s.audit_begin("evict", ["n1"], "r", status="refused")
        second = s.audit_begin("return", ["n1"], "r", status="refused")
        assert s.last_audit_id() == second
        assert s.audit_ids(after=0, pid=s.audit()[0].pid) == [first, second]
        assert s.audit_ids(after=first, pid=s.audit()[0].pid) == [second]
        assert s.audit_ids(after=0, pid=1) == []
        run = journal.begin_run(s, "p", "p.yaml", "steps: []", "j", {})
        seq = journal.step_start(s, run, "a", "evict", 1)
        step = journal.run_record(s, run)
        assert step is not None and step.steps[seq].audit_after == second
        assert journal_query(s, "SELECT MAX(id) FROM audit") == s.query("SELECT MAX(id) FROM audit")
        assert s.set_state("n1", MachineState.SUSPECT, "x")


def _modules() -> list[tuple[str, ast.Module]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = "robustctl." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        out.append((name.removesuffix(".__init__"), ast.parse(path.read_text())))
    return out


STATEMENT = re.compile(r"^\s*(PRAGMA|BEGIN|COMMIT|ROLLBACK|CREATE\s+(TABLE|INDEX|TRIGGER|UNIQUE)|ATTACH)\b")
"""SQL only the store runs (statements are upper case here, as in every module)."""


def test_only_the_store_opens_connections_sets_pragmas_or_commits() -> None:
    found = []
    for name, tree in _modules():
        if name == "robustctl.store":
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                found += [f"{name}: imports {n}" for n in names if n.split(".")[0] == "sqlite3"]
            elif isinstance(node, ast.Attribute) and node.attr in ("_conn", "_tx"):
                found.append(f"{name}:{node.lineno}: .{node.attr}")
            elif (
                isinstance(node, ast.Constant) and isinstance(node.value, str) and STATEMENT.match(node.value)
            ):
                found.append(f"{name}:{node.lineno}: {node.value[:30]!r}")
    assert found == []


TABLE_REF = re.compile(r"\b(?:INTO|(?<!DO )UPDATE|FROM|JOIN)\s+([a-z_]+)\b")
"""A table a statement names (not ``ON CONFLICT ... DO UPDATE SET``)."""


@pytest.mark.parametrize("owner", [o for o in OWNERS if o != "robustctl.store"])
def test_each_module_names_only_its_own_tables(owner: str) -> None:
    mine = schema_tables(owner)
    tree = ast.parse(Path(importlib.import_module(owner).__file__ or "").read_text())
    named: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and re.match(r"\s*(SELECT|INSERT|UPDATE|DELETE)\b", node.value)
        ):
            named |= {t for t in TABLE_REF.findall(node.value)}
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "rows":
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                named.add(first.value)
    assert named, f"{owner}: no statement found (the check reads nothing)"
    assert named <= mine, f"{owner} names tables it does not own: {sorted(named - mine)}"


def test_the_store_module_keeps_no_other_helpers() -> None:
    assert not hasattr(store_module, "journal_connection")
    assert not hasattr(store_module, "journal_text")


@pytest.mark.parametrize(
    "sql", ["DELETE FROM sched_nodes", "INSERT INTO sched_nodes(host, state, updated_at) VALUES ('n9', 'x', 1)",
            "PRAGMA foreign_keys=OFF", "WITH x AS (SELECT 1) DELETE FROM sched_nodes", "COMMIT", "CREATE TABLE y(a)", ""],
)  # fmt: skip
def test_a_query_only_reads(tmp_path: Path, sql: str) -> None:
    """Outside a transaction the connection autocommits: a write run as a query would commit alone."""
    with Store.open(tmp_path / "s.db") as s:
        s.set_sched_state("n1", "drained", "r")
        with pytest.raises(ValueError, match="not a read for Store.query"):
            s.query(sql)
        assert s.query("SELECT host FROM sched_nodes") == [("n1",)]
        assert s.query("PRAGMA foreign_keys") == [(1,)]
        assert s.query("WITH x AS (SELECT state FROM sched_nodes WHERE state='update') SELECT * FROM x") == []
