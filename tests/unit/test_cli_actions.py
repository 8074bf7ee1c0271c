"""The action commands end to end: real robustctl processes against one state file.

Two processes evicting at once (one waits or refuses; nothing is applied twice), a process killed with
SIGKILL mid-apply (its audit record says which steps ran), no --yes without a terminal, a read-only
store, dry-run JSON equal to the applied plan.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from robustctl.cli.main import main
from robustctl.store import Store

INVENTORY = """\
gpus_per_host: 2
hosts:
  - name: node[01-08]
    address: 127.0.0.[2-9]
jobs:
  llama:
    hosts: node[01-08]
    layout: {tp: 2, pp: 4, dp: 2}
policy: {max_cluster_fraction: 1.0, max_job_fraction: 1.0, circuit_breaker_fraction: 0.9}
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    e = dict(os.environ)
    e.update(
        {
            "ROBUSTCTL_INVENTORY": str(inv),
            "ROBUSTCTL_STATE": str(tmp_path / "state.db"),
            "NO_COLOR": "1",
            "COLUMNS": "250",
        }
    )
    e.pop("ROBUSTCTL_TEST_STEP_SLEEP_S", None)
    return e


def spawn(args: list[str], env: dict[str, str], **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "robustctl", *args],
        env={**env, **extra},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run(args: list[str], env: dict[str, str], **extra: str) -> subprocess.CompletedProcess[str]:
    p = spawn(args, env, **extra)
    out, err = p.communicate(timeout=60)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def wait_for(pred: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def steps_of(db: str) -> list[tuple[int, str]]:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return [
                (int(i), str(s)) for i, s in conn.execute("SELECT idx, status FROM audit_steps ORDER BY idx")
            ]
        finally:
            conn.close()
    except sqlite3.Error:
        return []


def test_no_yes_without_a_terminal_is_64_and_applies_nothing(env: dict[str, str]) -> None:
    r = run(["evict", "node01", "--reason", "xid 79"], env)
    assert r.returncode == 64, r.stderr
    assert "pass --yes" in r.stderr and "drain node01 via inventory" in r.stderr
    with Store.open(Path(env["ROBUSTCTL_STATE"])) as s:
        assert s.machines() == [] and s.audit() == []


def test_dry_run_json_is_the_plan_apply_records(env: dict[str, str]) -> None:
    args = ["evict", "node03", "--job", "llama", "--over-evict", "pp", "--reason", "xid 79"]
    dry = run([*args, "--dry-run", "--json"], env)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["kind"] == "plan" and plan["targets"] == ["node01", "node03", "node05", "node07"]
    applied = run([*args, "--yes", "--json"], env)
    assert applied.returncode == 0, applied.stderr
    doc = json.loads(applied.stdout)
    assert doc["status"] == "applied" and doc["plan"] == plan
    audit = run(["audit", "--json", "--since", "1h"], env)
    (rec,) = json.loads(audit.stdout)["records"]
    assert rec["plan"] == plan and rec["status"] == "applied" and rec["action"] == "evict"
    again = run([*args, "--yes"], env)  # idempotent: nothing to do, exit 0
    assert again.returncode == 0 and "nothing-to-do" in again.stderr
    back = run(["return", "node01", "--reason", "GPU replaced", "--yes"], env)
    assert back.returncode == 0, back.stderr
    table = run(["audit"], env).stderr
    assert table.count("applied") == 2 and table.count("nothing-to-do") == 1  # the rerun changed nothing
    statuses = [r["status"] for r in json.loads(run(["audit", "--json"], env).stdout)["records"]]
    assert statuses == ["applied", "nothing-to-do", "applied"]


def test_two_processes_evicting_at_once_one_waits_or_refuses_nothing_twice(env: dict[str, str]) -> None:
    db = env["ROBUSTCTL_STATE"]
    first = spawn(["evict", "node[01-04]", "--reason", "a", "--yes"], env, ROBUSTCTL_TEST_STEP_SLEEP_S="0.4")
    wait_for(lambda: len(steps_of(db)) >= 1)  # the first holds the lock and is applying
    refused = run(["evict", "node[03-06]", "--reason", "b", "--yes", "--lock-timeout", "0.3"], env)
    assert refused.returncode == 2, refused.stderr
    assert "another robustctl is acting on" in refused.stderr and "--lock-timeout" in refused.stderr
    waiter = spawn(["evict", "node[03-06]", "--reason", "b", "--yes", "--json", "--lock-timeout", "60"], env)
    _out1, err1 = first.communicate(timeout=60)
    out2, err2 = waiter.communicate(timeout=60)
    assert first.returncode == 0, err1
    assert waiter.returncode == 0, err2
    steps = {r["description"]: r["status"] for r in json.loads(out2)["results"]}
    assert steps["drain node03 via inventory"] == "noop" and steps["drain node05 via inventory"] == "done"
    with Store.open(Path(db)) as s:
        evictions = [h.host for h in s.evictions_since(0)]
        assert sorted(evictions) == [f"node0{i}" for i in range(1, 7)]  # each host evicted exactly once
        assert [r.status for r in s.audit()] == ["applied", "applied"]


def test_killed_mid_apply_leaves_an_audit_record_of_what_ran(env: dict[str, str]) -> None:
    db = env["ROBUSTCTL_STATE"]
    proc = spawn(
        ["evict", "node01,node02", "--reason", "xid", "--yes"], env, ROBUSTCTL_TEST_STEP_SLEEP_S="1.0"
    )
    wait_for(lambda: (2, "running") in steps_of(db))
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=10)  # reaps it and closes its pipes (no ResourceWarning)
    assert proc.returncode == -signal.SIGKILL
    audit = run(["audit", "--json"], env)
    (rec,) = json.loads(audit.stdout)["records"]
    assert rec["status"] == "started" and rec["finished_at"] is None and rec["pid"] == proc.pid
    assert [(s["index"], s["description"], s["status"]) for s in rec["steps"]] == [
        (0, "drain node01 via inventory", "done"),
        (1, "mark node01 evicted in the store", "done"),
        (2, "drain node02 via inventory", "running"),
    ]
    assert len(rec["plan"]["steps"]) == 4
    table = run(["audit"], env).stderr
    assert "step 2 was running" in table and "incomplete" in table
    # The kernel released the dead process's lock: the rerun completes the plan idempotently.
    rerun = run(["evict", "node01,node02", "--reason", "xid", "--yes", "--json", "--lock-timeout", "1"], env)
    assert rerun.returncode == 0, rerun.stderr
    statuses = [r["status"] for r in json.loads(rerun.stdout)["results"]]
    assert statuses[:2] == ["noop", "noop"] and statuses[3] == "done"


def test_read_only_store_is_78_naming_the_file_and_applies_nothing(
    env: dict[str, str], tmp_path: Path
) -> None:
    db = Path(env["ROBUSTCTL_STATE"])
    Store.open(db).close()
    db.chmod(0o444)
    r = run(["evict", "node01", "--reason", "x", "--yes"], env)
    assert r.returncode == 78, r.stderr
    assert str(db) in r.stderr and "read-only" in r.stderr and "Traceback" not in r.stderr
    db.chmod(0o644)
    with Store.open(db) as s:
        assert s.machines() == [] and s.audit() == [] and s.sched_state("node01") is None


def test_refusals_exit_2_with_the_rule(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"kind": "diagnose", "suspects": []}))
    os.environ["ROBUSTCTL_STATE"] = env["ROBUSTCTL_STATE"]
    try:
        assert main(["evict", "--from-report", str(empty), "--yes", "-i", env["ROBUSTCTL_INVENTORY"]]) == 2
        assert "rule non-empty-targets" in capsys.readouterr().err
        assert main(["evict", "--from-report", str(empty), "--yes", "--json"]) == 2
        rails = json.loads(capsys.readouterr().out)["rails"]
        assert rails[0]["rule"] == "non-empty-targets" and not rails[0]["passed"]
        assert main(["evict", "node01", "--from-report", str(empty), "--yes"]) == 64
        assert main(["evict", "node99", "--yes", "-i", env["ROBUSTCTL_INVENTORY"]]) == 64
        assert "unknown host 'node99'" in capsys.readouterr().err
        assert main(["audit", "--since", "soon"]) == 64
    finally:
        del os.environ["ROBUSTCTL_STATE"]


@pytest.mark.parametrize(("answer", "applied"), [("y", True), ("n", False)])
def test_on_a_terminal_the_plan_is_confirmed_interactively(
    env: dict[str, str], answer: str, applied: bool
) -> None:
    import pty

    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "robustctl", "evict", "node02", "--reason", "xid"],
            env=env,
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.write(master, f"{answer}\n".encode())
        _out, err = proc.communicate(timeout=60)
    finally:
        os.close(master)
        os.close(slave)
    assert proc.returncode == 0, err
    assert "Apply this evict plan?" in err
    with Store.open(Path(env["ROBUSTCTL_STATE"])) as s:
        assert (s.sched_state("node02") == "drained") is applied
        assert len(s.audit()) == int(applied)
