"""``robustctl hosts``: the hosts that are suspect, evicted or standby, with their last finding."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest

from robustctl.cli.main import main
from robustctl.commands.hosts import HostsRequest, run_hosts
from robustctl.commands.options import inventory
from robustctl.store import MachineState, Readiness, Store
from robustctl.suspects import record_suspects
from tests.unit.test_store import set_field


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    p = tmp_path / "inv.yaml"
    p.write_text(
        "hosts:\n"
        "  - {name: 'node[01-04]', address: '127.0.0.[2-5]'}\n"
        "  - {name: spare1, address: 127.0.0.6, state: standby}\n"
        "  - {name: spare2, address: 127.0.0.7, state: standby}\n"
        "  - {name: old1, address: 127.0.0.8, state: evicted}\n"
    )
    return p


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    t = iter(range(1000, 2000, 10))
    with Store.open(path, clock=lambda: float(next(t))) as store:
        record_suspects(
            store,
            {"node01": "diagnose L0: XID 79 on 0000:3b:00", "node02": "stacks: rank 5 hung"},
            source="x",
        )
        store.set_state("node02", MachineState.EVICTED, "evict: hung in allreduce")
        store.set_state("spare2", MachineState.ACTIVE, "standby activate: replaces node02")
        store.set_state("node03", MachineState.STANDBY, "standby add", readiness=Readiness.READY)
    return path


def test_lists_suspect_evicted_standby_with_last_finding(inv: Path, db: Path) -> None:
    res = run_hosts(HostsRequest(inventory(inv, {}), db))
    rows = [(h.host, h.state, h.source) for h in res.hosts]
    assert rows == [
        ("node01", "suspect", "store"),
        ("node02", "evicted", "store"),
        ("old1", "evicted", "inventory"),
        ("node03", "standby", "store"),
        ("spare1", "standby", "inventory"),
    ]  # spare2 was activated (store: active): the store's state wins over the inventory's standby
    by = {h.host: h for h in res.hosts}
    assert by["node01"].reason == by["node01"].finding == "diagnose L0: XID 79 on 0000:3b:00"
    assert by["node02"].reason == "evict: hung in allreduce" and by["node02"].finding == "stacks: rank 5 hung"
    assert by["node02"].since is not None and by["old1"].since is None
    assert by["node03"].readiness == "ready" and by["spare1"].readiness == "unchecked"
    assert res.kind == "hosts" and res.exit_code == 0


def test_all_includes_active_hosts(inv: Path, db: Path) -> None:
    res = run_hosts(HostsRequest(inventory(inv, {}), db, include_active=True))
    assert {h.host: h.state for h in res.hosts if h.state == "active"} == {
        "spare2": "active",
        "node04": "active",
    }


def test_store_only_and_missing_store(tmp_path: Path, db: Path) -> None:
    res = run_hosts(HostsRequest(None, db))
    assert [h.host for h in res.hosts] == ["node01", "node02", "node03"] and res.inventory is None
    missing = tmp_path / "none" / "state.db"
    assert run_hosts(HostsRequest(None, missing)).hosts == ()
    assert not missing.exists()  # listing never creates the store


def test_cli_table_and_json(
    inv: Path, db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["hosts", "-i", str(inv), "--state", str(db)]) == 0
    err = capsys.readouterr().err
    assert "XID 79 on 0000:3b:00" in err and "stacks: rank 5 hung" in err and "spare1" in err
    assert "…" not in err  # a pipe gets whole rows
    assert main(["hosts", "-i", str(inv), "--state", str(db), "--json", "--all"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "hosts" and doc["schema_version"] == 1 and len(doc["hosts"]) == 7


def test_markup_in_reasons_is_text(
    inv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # the reason whole in its cell, whatever runs the test
    db = tmp_path / "m.db"
    with Store.open(db) as store:
        store.set_state("node04", MachineState.EVICTED, "evict: [/] [bold]x[/bold]")
    assert main(["hosts", "-i", str(inv), "--state", str(db)]) == 0
    assert "[/] [bold]x[/bold]" in capsys.readouterr().err


def test_without_an_inventory_the_store_alone(
    db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ROBUSTCTL_INVENTORY", raising=False)
    assert main(["hosts", "--state", str(db), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inventory"] is None and all(h["in_inventory"] for h in doc["hosts"])
    assert [h["host"] for h in doc["hosts"]] == ["node01", "node02", "node03"]


# --- times in the store (issue 21, item 6) ----------------------------------------------------------

BAD_TIMES = [1e300, -1e300, math.inf, 253_402_300_800, "NaN", "yesterday", b"\x00"]
"""1e300, -1e300, Infinity, the year 10000, text (a NaN written as text: SQLite keeps a bound NaN only
as NULL, which the NOT NULL times refuse) and a blob: each used to end ``hosts`` with exit 3."""


@pytest.mark.parametrize("value", BAD_TIMES)
@pytest.mark.parametrize(("table", "column"), [("machines", "updated_at"), ("machine_history", "at")])
@pytest.mark.parametrize("json_out", [False, True])
def test_a_bad_time_in_the_store_is_one_line_naming_the_row(
    inv: Path,
    db: Path,
    capsys: pytest.CaptureFixture[str],
    table: str,
    column: str,
    value: object,
    json_out: bool,
) -> None:
    set_field(db, table, column, value, "WHERE host='node02'")
    conn = sqlite3.connect(db)
    (row,) = conn.execute(f"SELECT MIN(rowid) FROM {table} WHERE host='node02'").fetchone()
    conn.close()
    code = main(["hosts", "-i", str(inv), "--state", str(db), *(["--json"] if json_out else [])])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 78 and out == "" and len(lines) == 1, err
    assert f"table {table}, row {row}, column {column}: bad time" in lines[0] and str(db) in lines[0]


def test_the_last_second_of_the_year_9999_is_shown(
    inv: Path, db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    set_field(db, "machines", "updated_at", 253_402_300_799, "WHERE host='node02'")
    assert main(["hosts", "-i", str(inv), "--state", str(db)]) == 0
    assert "9999-12-31 23:59:59" in capsys.readouterr().err
