"""``robustctl diagnose`` records its suspects in the state store: real robustctl processes on this
machine's local transport, a GPU fault injected through the fake NVML injection file."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from robustctl.store import MachineState, Store
from robustctl.testing.fake_nvml import RemappedRows, healthy_gpus, write_injection


@pytest.fixture
def sick_gpu(tmp_path: Path) -> Path:
    """An NVML injection file: two GPUs, the second with a pending row remap (critical at L0)."""
    gpus = list(healthy_gpus(2))
    gpus[1] = dataclasses.replace(gpus[1], remapped_rows=RemappedRows(uncorrectable=1, pending=True))
    return write_injection(tmp_path / "nvml.json", gpus)


def robustctl(*args: str, **env: str) -> tuple[int, dict[str, Any], str]:
    """Run the CLI; return (exit code, the --json document when asked, stderr)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("ROBUSTCTL_")}
    proc = subprocess.run(
        [sys.executable, "-m", "robustctl", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, "NO_COLOR": "1", "COLUMNS": "250", **env},
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout) if "--json" in args else {}
    return proc.returncode, doc, proc.stderr


def test_faulty_host_becomes_suspect_and_a_healthy_rerun_clears_it(tmp_path: Path, sick_gpu: Path) -> None:
    db = tmp_path / "state.db"
    code, doc, err = robustctl("diagnose", "--level", "0", "--json", "--no-record", ROBUSTCTL_STATE=str(db),
                               ROBUSTCTL_NVML_INJECTION=str(sick_gpu))  # fmt: skip
    assert code == 2, err
    assert doc["suspects"] == ["localhost"] and doc["recorded"] is None
    assert not db.exists() and "recorded" not in err  # --no-record writes nothing
    code, _, err = robustctl("diagnose", "--level", "0", "--dry-run", "--state", str(db),
                             ROBUSTCTL_NVML_INJECTION=str(sick_gpu))  # fmt: skip
    assert code == 0 and not db.exists(), err  # nor does a dry run

    code, doc, err = robustctl("diagnose", "--level", "0", "--json", ROBUSTCTL_STATE=str(db),
                               ROBUSTCTL_NVML_INJECTION=str(sick_gpu))  # fmt: skip
    assert code == 2, err
    assert doc["kind"] == "diagnose" and doc["suspects"] == ["localhost"]
    assert doc["recorded"] == {
        "state": str(db),
        "source": "diagnose",
        "marked": ["localhost"],
        "unchanged": [],
        "cleared": [],
        "skipped": [],
        "error": None,
    }
    assert f"recorded 1 suspect (localhost) in {db}" in err.splitlines()
    with Store.open(db) as s:
        rec = s.machine("localhost")
        assert rec is not None and rec.state is MachineState.SUSPECT
        assert rec.reason.startswith("diagnose L0: GPU 1") and "row remapping" in rec.reason
        assert [(h.from_state, h.to_state) for h in s.history("localhost")] == [(None, "suspect")]

    # Healthy now (no injected fault) and checked at every requested level: back to active.
    code, doc, err = robustctl("diagnose", "--level", "0", "--json", "--state", str(db))
    assert code == 0, err
    assert doc["recorded"]["cleared"] == ["localhost"]
    assert f"recorded 0 suspects in {db}; cleared 1 (localhost)" in err.splitlines()
    with Store.open(db) as s:
        last = s.history("localhost")[-1]
        assert (last.from_state, last.to_state, last.reason) == (
            "suspect",
            "active",
            "diagnose: healthy at level L0",
        )


def test_read_only_store_warns_and_keeps_the_diagnosis(tmp_path: Path, sick_gpu: Path) -> None:
    db = tmp_path / "state.db"
    Store.open(db).close()
    db.chmod(0o444)
    code, doc, err = robustctl("diagnose", "--level", "0", "--json", "-q", "--state", str(db),
                               ROBUSTCTL_NVML_INJECTION=str(sick_gpu))  # fmt: skip
    assert code == 2, err  # the diagnosis' exit code, not the store's 78
    assert doc["suspects"] == ["localhost"] and doc["status"] == "critical"
    (line,) = err.splitlines()  # -q: the warning is the only line
    assert line.startswith("robustctl: warning: suspects not recorded:")
    assert str(db) in line and "read-only" in line
    assert doc["recorded"]["error"] and doc["recorded"]["state"] == str(db)
    db.chmod(0o644)
    with Store.open(db) as s:
        assert s.machines() == []


def test_recorded_suspects_trip_the_evict_circuit_breaker(tmp_path: Path, sick_gpu: Path) -> None:
    py = sys.executable
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        f"python: {{path: {py}}}\n"
        "policy: {circuit_breaker_fraction: 0.25}\n"
        "hosts:\n"
        "  - {name: node01, address: local, transport: local}\n"
        "  - name: node02\n"
        "    address: local\n"
        "    transport: local\n"
        f"    python: {{path: {py}, wrapper: [env, 'ROBUSTCTL_NVML_INJECTION={sick_gpu}']}}\n"
        "  - {name: node03, address: local, transport: local}\n"
        "  - {name: node04, address: local, transport: local}\n"
    )
    db = tmp_path / "state.db"
    evict = ("evict", "node03", "-i", str(inv), "--state", str(db), "--reason", "t", "--dry-run", "--json")

    def breaker(doc: dict[str, Any]) -> dict[str, Any]:
        rails: list[dict[str, Any]] = [r for r in doc["rails"] if r["rule"] == "circuit-breaker"]
        assert len(rails) == 1
        return rails[0]

    code, doc, err = robustctl(*evict)
    assert code == 0, err
    assert breaker(doc)["passed"] and breaker(doc)["detail"].startswith("1 of 4 hosts look bad")

    code, doc, err = robustctl("diagnose", "-i", str(inv), "--level", "0", "--state", str(db), "--json")
    assert code == 2, err
    assert doc["suspects"] == ["node02"] and doc["recorded"]["marked"] == ["node02"]

    code, doc, err = robustctl(*evict)
    assert code == 2, err  # refused by the breaker: node02 (suspect in the store) + node03
    rail = breaker(doc)
    assert not rail["passed"] and rail["detail"].startswith("2 of 4 hosts look bad")
    assert "rule circuit-breaker" in err
