"""``robustctl ettr`` (issue 22, item 4): progress samples in the store, the ledger of a job read from
the store, the no-data result, the JSON document, the renderer and the CLI function."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import typer
import yaml
from rich.console import Console
from typer.testing import CliRunner

from robustctl import watchstore
from robustctl.cli import ettr as ettr_cmd
from robustctl.commands.base import result_json
from robustctl.commands.ettr import EttrRequest, EttrResult, run_ettr
from robustctl.errors import UsageError
from robustctl.exit_codes import ExitCode
from robustctl.inventory import load_inventory
from robustctl.report.console import dump_json
from robustctl.report.ettr import render_ettr
from robustctl.store import Store
from robustctl.watchstore import (
    PROGRESS_KEEPALIVE_S,
    end_waiting,
    open_incident,
    open_waiting,
    progress_samples,
    record_progress,
    update_incident,
)

T0 = 1_700_000_000.0


def seed(path: Path, job: str = "llama", playbook: str = "hang") -> None:
    """The worked example: 10 s steps; a hang at T0+200 (step 20) recovered from the checkpoint of
    step 15, first new step at T0+400; the job runs to T0+600, then nothing; the watcher waits
    T0+700..T0+800 (the hourly limit)."""
    with Store.open(path, clock=lambda: T0) as s:
        for at, step in ((0, 0), (100, 10), (200, 20), (400, 16), (600, 36)):
            assert record_progress(s, job, at=T0 + at, step=step)
        inc = open_incident(
            s, job, incident_class="hang", onset_at=T0 + 200, opened_at=T0 + 300, last_step=20
        )
        update_incident(
            s, inc.id, decision_at=T0 + 300, localization_start_at=T0 + 300, localization_end_at=T0 + 320,
            eviction_start_at=T0 + 330, eviction_end_at=T0 + 350, machines_evicted=["node02"],
            restart_start_at=T0 + 360, first_new_step_at=T0 + 400, checkpoint_step=15, playbook=playbook,
            closed_at=T0 + 400, close_reason="recovered",
        )  # fmt: skip
        w = open_waiting(s, job, start_at=T0 + 700, reason="hourly recovery limit reached")
        end_waiting(s, w, end_at=T0 + 800)


def test_the_ledger_read_from_the_store_has_the_numbers_worked_out_by_hand(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    seed(state)
    res = run_ettr(EttrRequest("llama", state=state, window_s=500), clock=lambda: T0 + 1000)
    assert res.exit_code is ExitCode.OK and res.has_data
    led = res.ledger
    assert led is not None and (led.start_s, led.end_s) == (T0, T0 + 1000)
    # productive: [0,200] and [440,600] (the 4 steps 16..19 redone at 10 s each are recomputation)
    by = {cause: seconds for cause, seconds, _ in res.breakdown()}
    assert by == pytest.approx({
        "productive": 360, "detection": 100, "localization": 20, "eviction": 30, "restart": 50,
        "recomputation": 40, "waiting": 100, "unaccounted": 300,
    })  # fmt: skip
    assert sum(by.values()) == pytest.approx(1000)
    assert {c: f for c, _, f in res.breakdown()}["productive"] == pytest.approx(0.36)
    assert led.cumulative_ettr == pytest.approx(0.36)
    assert led.sliding_ettr == pytest.approx(100 / 500)  # [500, 1000]: productive [500, 600] only
    assert led.step_time_s == pytest.approx(10) and led.step_time_source == "measured"
    (row,) = res.incidents
    assert (row.incident_class.value, row.playbook, row.onset_s) == ("hang", "hang", T0 + 200)
    assert row.mttr_s == pytest.approx(200) and row.machines_evicted == ("node02",)
    assert row.recomputed_steps == 4
    assert (res.samples, res.incidents_read, res.waiting_read) == (5, 1, 1)


def test_since_starts_the_window_there_and_counts_the_step_across_it(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    seed(state)
    res = run_ettr(EttrRequest("llama", state=state, since_s=950), clock=lambda: T0 + 1000)
    led = res.ledger
    assert led is not None and (led.start_s, led.end_s) == (T0 + 50, T0 + 1000)
    assert res.samples == 5  # the sample at T0 (before since) is read: [50, 100] is productive
    assert led.productive_s == pytest.approx(50 + 100 + 160)
    # a window after every record: the newest sample before it is all there is, and no step advances
    late = run_ettr(EttrRequest("llama", state=state, since_s=100), clock=lambda: T0 + 2000)
    assert late.ledger is not None and late.ledger.productive_s == 0 and late.ledger.cumulative_ettr == 0


def test_no_data_is_exit_3_never_ettr_1(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    missing = run_ettr(EttrRequest("llama", state=state), clock=lambda: T0)
    assert missing.exit_code is ExitCode.UNKNOWN and not missing.has_data
    assert "does not exist" in missing.message and not state.exists()  # nothing created
    seed(state, job="other")
    res = run_ettr(EttrRequest("llama", state=state), clock=lambda: T0 + 1000)
    assert res.exit_code is ExitCode.UNKNOWN and res.ledger is None
    assert "no ETTR data for job 'llama'" in res.message and "\n" not in res.message
    doc = result_json(res)
    assert doc["has_data"] is False and doc["cumulative_ettr"] is None and doc["exit_code"] == 3
    # records only after this clock's now (a clock behind the watcher's): no data, not a crash
    early = run_ettr(EttrRequest("other", state=state), clock=lambda: T0 - 10)
    assert early.exit_code is ExitCode.UNKNOWN and "after this clock" in early.message


def test_the_json_document_is_strict_and_carries_every_figure(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    seed(state)
    res = run_ettr(EttrRequest("llama", state=state, window_s=500), clock=lambda: T0 + 1000)
    text = dump_json(result_json(res))
    doc = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert (doc["kind"], doc["schema_version"], doc["exit_code"], doc["has_data"]) == ("ettr", 1, 0, True)
    assert doc["cumulative_ettr"] == pytest.approx(0.36) and doc["sliding_ettr"] == pytest.approx(0.2)
    assert doc["sliding_window_s"] == 500 and doc["window"]["total_s"] == 1000
    assert [b["cause"] for b in doc["breakdown"]][:2] == ["productive", "detection"]
    assert sum(b["fraction"] for b in doc["breakdown"]) == pytest.approx(1)
    (row,) = doc["incidents"]
    assert (row["class"], row["playbook"], row["mttr_s"], row["machines_evicted"]) == (
        "hang",
        "hang",
        200,
        ["node02"],
    )


def test_bad_requests_are_usage_errors(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    for bad in (0, -1, float("nan"), float("inf"), 3651 * 86_400.0):
        with pytest.raises(UsageError, match="--window"):
            run_ettr(EttrRequest("llama", state=state, window_s=bad))
        with pytest.raises(UsageError, match="--since"):
            run_ettr(EttrRequest("llama", state=state, since_s=bad))
    with pytest.raises(UsageError, match="--job"):
        run_ettr(EttrRequest("x" * 2000, state=state))
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        yaml.safe_dump({
            "hosts": [{"name": "node[1-2]", "address": "127.0.0.[2-3]"}],
            "jobs": {"llama": {"hosts": "node[1-2]", "layout": {"dp": 2}}},
        })
    )  # fmt: skip
    with pytest.raises(UsageError, match=r"--job 'mistral'.*its jobs: llama"):
        run_ettr(EttrRequest("mistral", inventory=load_inventory(inv), state=state))


def test_the_renderer_escapes_what_the_store_holds(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    evil = "[bold red]x[/]\x1b[2J"
    seed(state, job=evil, playbook=evil)
    res = run_ettr(EttrRequest(evil, state=state), clock=lambda: T0 + 1000)
    out = io.StringIO()
    render_ettr(res, Console(file=out, width=200, force_terminal=False))
    text = out.getvalue()
    assert "[bold red]x[/]" in text and "\x1b" not in text
    assert "36.0%" in text and "node02" in text and "3m20s" in text  # ETTR, machine, MTTR 200 s
    none = io.StringIO()
    render_ettr(run_ettr(EttrRequest("nobody", state=state), clock=lambda: T0), Console(file=none, width=200))
    assert "no ETTR data" in none.getvalue()


def test_record_progress_keeps_changes_and_a_sparse_keep_alive(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as s:
        assert record_progress(s, "j", at=T0, step=5)
        assert not record_progress(s, "j", at=T0, step=5)  # the same reading: idempotent
        assert not record_progress(s, "j", at=T0 + PROGRESS_KEEPALIVE_S - 1, step=5)  # unchanged, too soon
        assert record_progress(s, "j", at=T0 + PROGRESS_KEEPALIVE_S, step=5)  # the keep-alive
        assert record_progress(s, "j", at=T0 + PROGRESS_KEEPALIVE_S + 1, step=6)  # a change of step
        assert record_progress(s, "j", at=T0 - 50, step=4)  # an earlier reading of another step
        assert not record_progress(s, "j", at=T0 - 50, step=4)  # ... once
        assert record_progress(s, "other", at=T0, step=5)  # per job
        got = [(p.at - T0, p.step) for p in progress_samples(s, "j")]
        assert got == [(-50, 4), (0, 5), (PROGRESS_KEEPALIVE_S, 5), (PROGRESS_KEEPALIVE_S + 1, 6)]
        assert [p.step for p in progress_samples(s, "j", since=T0 + 1)] == [5, 5, 6]  # + the one before
        assert [p.step for p in progress_samples(s, "j", limit=2)] == [5, 6]  # the newest
        with pytest.raises(watchstore.WatchStoreInputError, match="step"):
            record_progress(s, "j", at=T0, step=-1)
        with pytest.raises(watchstore.WatchStoreInputError, match="at"):
            record_progress(s, "j", at=float("nan"), step=1)


def test_record_progress_drops_the_oldest_past_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watchstore, "MAX_PROGRESS_ROWS", 3)
    with Store.open(tmp_path / "s.db") as s:
        for step in range(6):
            record_progress(s, "j", at=T0 + step, step=step)
        record_progress(s, "other", at=T0, step=0)
        assert s.query("SELECT step FROM watch_progress WHERE job='j' ORDER BY at") == [(3,), (4,), (5,)]
        assert [p.step for p in progress_samples(s, "j", limit=3)] == [3, 4, 5]
        assert [p.step for p in progress_samples(s, "other", limit=3)] == [0]


def test_the_cli_function_prints_json_and_returns_the_exit_code(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    seed(state)
    app = typer.Typer()
    app.command("ettr", epilog=ettr_cmd.EXAMPLES)(ettr_cmd.ettr)
    app.command("other")(lambda: 0)  # two commands: the name is a subcommand, as in robustctl's app
    runner = CliRunner()
    args = ["ettr", "--job", "llama", "--state", str(state), "--window", "6h", "--since", "3650d", "--json"]
    res = runner.invoke(app, args, standalone_mode=False, env={"ROBUSTCTL_INVENTORY": ""})
    assert res.exception is None and res.return_value == 0
    doc = json.loads(res.stdout)
    assert doc["kind"] == "ettr" and doc["sliding_window_s"] == 6 * 3600 and len(doc["incidents"]) == 1
    res = runner.invoke(app, ["ettr", "--job", "nobody", "--state", str(state)], standalone_mode=False)
    assert res.return_value == 3
    res = runner.invoke(app, ["ettr", "--job", "llama", "--state", str(state), "--window", "0s"],
                        standalone_mode=False)  # fmt: skip
    assert isinstance(res.exception, UsageError) and "--window" in str(res.exception)
    assert res.exception.exit_code == ExitCode.USAGE


def test_result_kind_and_schema(tmp_path: Path) -> None:
    res = run_ettr(EttrRequest("llama", state=tmp_path / "none.db"), clock=lambda: T0)
    assert isinstance(res, EttrResult) and (res.kind, res.schema_version) == ("ettr", 1)
