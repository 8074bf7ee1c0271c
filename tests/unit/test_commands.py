"""Every command two ways: in process through the library (``run_X(request)`` then ``result_json``) and
through the CLI with ``--json``; the two JSON documents are the same (timings aside)."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from robustctl.cli.main import main
from robustctl.commands.base import CommandResult, exit_code_of, result_json
from robustctl.models import SCHEMA_VERSION, CheckResult, HostReport, LevelSummary, Outcome, RunReport, Status

DATA = Path(__file__).resolve().parent.parent / "data"
TIMINGS = {"started_at", "finished_at", "elapsed_s", "since", "updated_at", "at"}


def untimed(doc: Any) -> Any:
    """``doc`` without its timing keys (they differ from one run to the next)."""
    if isinstance(doc, dict):
        return {k: untimed(v) for k, v in doc.items() if k not in TIMINGS}
    if isinstance(doc, list):
        return [untimed(v) for v in doc]
    return doc


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    for var in [v for v in os.environ if v.startswith("ROBUSTCTL_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("ROBUSTCTL_STATE", str(tmp_path / "default-state.db"))
    monkeypatch.setenv("NO_COLOR", "1")


def cli_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main([*argv, "--json"])
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return code, doc


def both_ways(
    result: CommandResult,
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    fix: Callable[[Any], Any] = untimed,
) -> dict[str, Any]:
    lib = result_json(result)
    code, doc = cli_json(argv, capsys)
    assert code == exit_code_of(result)
    assert lib["kind"] == doc["kind"] and lib["schema_version"] == doc["schema_version"] == SCHEMA_VERSION
    assert doc["exit_code"] == code
    assert fix(json.loads(json.dumps(lib))) == fix(doc)
    return doc


def inventory_file(tmp_path: Path) -> Path:
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        f"python: {{path: {sys.executable}}}\n"
        "diagnose: {concurrency: 4}\n"
        "hosts:\n"
        "  - {name: node01, address: local, transport: local}\n"
        "  - {name: node02, address: local, transport: local}\n"
        "  - {name: spare1, address: local, transport: local, state: standby}\n"
        "jobs:\n"
        "  j1:\n"
        "    hosts: node[01-02]\n"
        "    layout: {tp: 1, dp: 2}\n"
        "    ranks_per_host: 1\n"
        "    process: {match: 'no-such-process-[0-9]{12}'}\n"
    )
    return inv


def canned_report(*_: Any, **__: Any) -> RunReport:
    crit = CheckResult("host.xid", 0, Status.CRITICAL, "XID 79 on 0000:3b:00", {"xid": 79})
    ok = CheckResult("host.disk", 0, Status.OK, "disks ok")
    return RunReport(
        status=Status.CRITICAL,
        hosts=(
            HostReport("node01", "local", Status.CRITICAL, Outcome.OK, (crit, ok)),
            HostReport("node02", "local", Status.OK, Outcome.OK, (ok,)),
        ),
        levels=(LevelSummary(0, "quick", True, ("node01",), 0.1),),
        suspects=("node01",),
        unknown=(),
        started_at=1.0,
        finished_at=2.0,
    )


def test_diagnose_both_ways(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import robustctl.diagnose
    from robustctl.commands.diagnose import diagnose_request, run_diagnose

    monkeypatch.setattr(robustctl.diagnose, "run_levels", canned_report)
    inv = inventory_file(tmp_path)
    lib_db, cli_db = tmp_path / "lib.db", tmp_path / "cli.db"
    result = run_diagnose(diagnose_request(inventory=inv, level=0, state=lib_db))
    assert result.recorded is not None and result.recorded.marked == ("node01",)

    def fix(doc: Any) -> Any:
        doc = untimed(doc)
        doc["recorded"]["state"] = "<store>"
        return doc

    doc = both_ways(
        result, ["diagnose", "-i", str(inv), "-l", "0", "--state", str(cli_db), "-q"], capsys, fix
    )
    assert (
        doc["kind"] == "diagnose"
        and doc["suspects"] == ["node01"]
        and doc["recorded"]["marked"] == ["node01"]
    )
    # the document keeps the RunReport's shape: its fields at the top level, plus unreachable, recorded and
    # exit_code
    assert set(doc) == {*result_json(canned_report()).keys(), "unreachable", "recorded"}


def test_diagnose_plan_both_ways(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from robustctl.commands.diagnose import diagnose_request, plan_diagnose

    inv = inventory_file(tmp_path)
    plan = plan_diagnose(diagnose_request(inventory=inv, level=1, concurrency=2))
    doc = both_ways(plan, ["diagnose", "-i", str(inv), "-l", "1", "-c", "2", "--dry-run", "-q"], capsys)
    assert doc["kind"] == "diagnose-plan" and doc["concurrency"] == 2


def test_stacks_both_ways(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from robustctl.commands.stacks import run_stacks, stacks_request

    inv = inventory_file(tmp_path)
    request = stacks_request(job="j1", inventory=inv, samples=1, state=tmp_path / "s.db")
    result = run_stacks(request)
    argv = ["stacks", "-i", str(inv), "-j", "j1", "--samples", "1", "--state", str(tmp_path / "s.db"), "-q"]
    doc = both_ways(result, argv, capsys)
    assert doc["kind"] == "stacks" and "recorded" in doc and "collection" in doc

    assert request.settings.debug_server
    py_spy_only = stacks_request(job="j1", inventory=inv, samples=1, debug_server=False, record=False)
    assert not py_spy_only.settings.debug_server
    result = run_stacks(py_spy_only)
    argv = ["stacks", "-i", str(inv), "-j", "j1", "--samples", "1", "--no-debug-server", "--no-record", "-q"]
    assert both_ways(result, argv, capsys)["kind"] == "stacks"

    result = run_stacks(stacks_request(job="j1", inventory=inv, slow=True, rounds=1, interval_s=0))
    argv = ["stacks", "-i", str(inv), "-j", "j1", "--slow", "--rounds", "1", "--interval", "0", "-q"]
    doc = both_ways(result, argv, capsys)
    assert doc["kind"] == "stacks-failslow" and "recorded" not in doc


def test_analyze_both_ways(capsys: pytest.CaptureFixture[str]) -> None:
    from robustctl.commands.analyze import analyze_request, run_analyze

    files = [
        DATA / "nccl-tests" / "bitdeer-h100-8gpu-1node-allreduce.txt",
        DATA / "kernel-log" / "xid-lines.txt",
    ]
    result = run_analyze(analyze_request(files, expected_busbw_gbps=100.0))
    doc = both_ways(result, ["analyze", *map(str, files), "--expected-busbw", "100", "-q"], capsys)
    assert doc["kind"] == "analyze"
    dumps = sorted((DATA / "pyspy" / "captured-gloo-4ranks").glob("rank*.dump"))
    result = run_analyze(analyze_request(dumps))
    doc = both_ways(result, ["analyze", *map(str, dumps), "-q"], capsys)
    assert doc["kind"] == "stacks"


def test_inventory_both_ways(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from robustctl.commands.inventory import (
        InventoryShowRequest,
        InventoryValidateRequest,
        run_inventory_show,
        run_inventory_validate,
    )

    inv = inventory_file(tmp_path)
    doc = both_ways(
        run_inventory_validate(InventoryValidateRequest(inv)), ["inventory", "validate", str(inv)], capsys
    )
    assert doc["kind"] == "inventory-validate" and doc["hosts"] == {"active": 2, "standby": 1}
    result = run_inventory_show(InventoryShowRequest(inv, "node02,spare1"))
    doc = both_ways(result, ["inventory", "show", str(inv), "-H", "node02,spare1"], capsys)
    assert doc["kind"] == "inventory" and [h["host"] for h in doc["hosts"]] == ["node02", "spare1"]


def test_audit_and_hosts_both_ways(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from robustctl.commands.audit import audit_request, run_audit
    from robustctl.commands.hosts import HostsRequest, run_hosts
    from robustctl.commands.options import inventory
    from robustctl.store import MachineState, Store

    db = tmp_path / "s.db"
    with Store.open(db) as store:
        audit_id = store.audit_begin("evict", ["node02"], "XID 79")
        store.set_state("node02", MachineState.EVICTED, "evict: XID 79", audit_id=audit_id)
        store.audit_finish(audit_id, "applied", "done")
    doc = both_ways(
        run_audit(audit_request(state=db, since="1h")), ["audit", "--state", str(db), "--since", "1h"], capsys
    )
    assert doc["kind"] == "audit" and [r["action"] for r in doc["records"]] == ["evict"]

    inv = inventory_file(tmp_path)
    result = run_hosts(HostsRequest(inventory(inv), db))
    doc = both_ways(result, ["hosts", "-i", str(inv), "--state", str(db)], capsys)
    assert doc["kind"] == "hosts" and [(h["host"], h["state"]) for h in doc["hosts"]] == [
        ("node02", "evicted"),
        ("spare1", "standby"),
    ]


def test_models_depend_on_no_other_robustctl_module() -> None:
    """The result types sit at the bottom of the import graph (no cycle through suspects and the store)."""
    import ast

    import robustctl.models

    tree = ast.parse(Path(robustctl.models.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in imported if m.startswith("robustctl")} == {"robustctl.exit_codes"}


def test_result_json_needs_kind_and_schema_version() -> None:
    from dataclasses import dataclass

    from robustctl.exit_codes import ExitCode

    @dataclass(frozen=True)
    class NotAResult:
        value: int = 1

        @property
        def exit_code(self) -> ExitCode:
            return ExitCode.OK

    with pytest.raises(TypeError, match="needs kind and schema_version"):
        result_json(NotAResult())  # type: ignore[arg-type]


def test_stacks_maps_ranks_to_the_jobs_current_hosts_after_a_standby_swap(tmp_path: Path) -> None:
    """After a standby took node01's place, stacks dumps and names spare1, never the evicted node01."""
    from robustctl.actions.hosts import JobHostsSource, current_job
    from robustctl.commands.stacks import run_stacks, stacks_request
    from robustctl.errors import ConfigError, UsageError
    from robustctl.inventory import load_inventory
    from robustctl.store import Store

    inv = inventory_file(tmp_path)
    state = tmp_path / "s.db"
    loaded = load_inventory(inv)
    job, found = current_job(loaded, "j1", state=state)
    assert [h.name for h in job.hosts] == ["node01", "node02"]
    with Store.open(state) as s:
        s.set_job_hosts("j1", ["spare1", "node02"])
    job, found = current_job(loaded, "j1", state=state)
    assert [h.name for h in job.hosts] == ["spare1", "node02"]
    assert found.source in (JobHostsSource.SCHEDULER, JobHostsSource.STORE)

    hang = run_stacks(stacks_request(job="j1", inventory=inv, samples=1, state=state))
    doc = hang.to_json()
    asked = [(h["host"], h["expected_ranks"]) for c in doc["collection"] for h in c["hosts"]]
    assert asked == [("spare1", [0]), ("node02", [1])], asked
    assert "node01" not in json.dumps(doc), doc
    slow = run_stacks(stacks_request(job="j1", inventory=inv, slow=True, rounds=1, interval_s=0, state=state))
    assert "node01" not in json.dumps(slow.to_json())

    with pytest.raises(UsageError, match="none of node01 is a host of job j1 now"):
        run_stacks(stacks_request(job="j1", inventory=inv, hosts="node01", samples=1, state=state))
    with Store.open(state) as s:
        s.set_job_hosts("j1", ["spare1"])
    with pytest.raises(ConfigError, match="1 current host"):
        current_job(loaded, "j1", state=state)
    with Store.open(state) as s:
        s.set_job_hosts("j1", ["spare1", "gone99"])
    with pytest.raises(ConfigError, match="gone99"):
        current_job(loaded, "j1", state=state)


def test_diagnose_names_the_hosts_no_connection_reached_apart_from_its_suspects() -> None:
    """``unreachable`` (a subset of ``unknown``): what the job-failed playbook evicts as lost hosts."""
    from robustctl.commands.diagnose import DiagnoseResult

    base = canned_report()
    lost = HostReport("node03", "ssh", Status.UNKNOWN, Outcome.UNREACHABLE, (), error="connection refused")
    slow = HostReport("node04", "ssh", Status.UNKNOWN, Outcome.TIMED_OUT, (), error="deadline")
    report = dataclasses.replace(base, hosts=(*base.hosts, lost, slow), unknown=("node03", "node04"))
    res = DiagnoseResult(report)
    doc = res.to_json()
    assert res.unreachable == ("node03",) and doc["unreachable"] == ["node03"]
    assert doc["suspects"] == ["node01"] and doc["unknown"] == ["node03", "node04"]
    assert DiagnoseResult(base).to_json()["unreachable"] == []
