"""diagnostics/nvml.py run as the control side runs it: a subprocess printing one JSON document."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from robustctl.checks.nvml import evaluate_count, evaluate_row_remap
from robustctl.checks.registry import CheckContext
from robustctl.models import Status
from robustctl.probes import probe_script
from robustctl.testing.fake_nvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    FakeGpu,
    RemappedRows,
    healthy_gpus,
    write_injection,
)
from robustctl.thresholds import Thresholds

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "diagnostics" / "nvml.py"
PROBES = [
    REPO / "diagnostics" / f"{n}.py" for n in ("_prelude", "host", "nvml", "burn", "allreduce", "bundle")
]


def run_probe(*args: str, stdin: bool = False, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run the probe (streamed as robustctl does, ``python - ARGS``, when ``stdin``); return its document."""
    argv = [sys.executable, "-", *args] if stdin else [sys.executable, str(PROBE), *args]
    proc = subprocess.run(
        argv,
        input=probe_script("nvml") if stdin else None,
        capture_output=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr.decode()
    lines = proc.stdout.decode().strip().splitlines()
    assert len(lines) == 1, lines
    doc = json.loads(lines[0])
    assert doc["probe"] == "nvml" and doc["version"] == 1
    assert set(doc) == {"probe", "version", "hostname", "time", "elapsed_s", "data", "errors", "timed_out"}
    assert doc["timed_out"] is False
    return doc


def test_injected_state_reaches_the_document(tmp_path: Path) -> None:
    gpus = list(healthy_gpus(8))
    gpus[5] = dataclasses.replace(gpus[5], remapped_rows=RemappedRows(uncorrectable=1, pending=True))
    path = write_injection(tmp_path / "nvml.json", gpus)
    doc = run_probe("--nvml-injection", str(path), stdin=True)
    data = doc["data"]
    assert data["available"] is True and data["source"] == "injection" and data["count"] == 8
    assert [g["remapped_rows_pending"] for g in data["gpus"]] == [False] * 5 + [True] + [False] * 2
    assert data["gpus"][5]["pci_bus_id"] == "00000000:68:00.0"
    assert data["gpus"][0]["retired_pages_sbe"] is None  # not supported on H100: null, never 0
    assert doc["errors"] == []
    # and the control side judges it
    judged = evaluate_row_remap(data, Thresholds(), CheckContext(expected_gpus=8))
    assert [(r.status, r.device) for r in judged] == [(Status.CRITICAL, "gpu5")]


def test_injection_file_from_the_environment(tmp_path: Path) -> None:
    path = write_injection(tmp_path / "nvml.json", [FakeGpu()], init_error=NVML_ERROR_DRIVER_NOT_LOADED)
    doc = run_probe(env={"ROBUSTCTL_NVML_INJECTION": str(path)})
    assert doc["data"] == {
        "available": False,
        "reason": "nvmlInit: Driver Not Loaded",
        "reason_code": "driver_not_loaded",
        "nvml_error": NVML_ERROR_DRIVER_NOT_LOADED,
    }
    judged = evaluate_count(doc["data"], Thresholds(), CheckContext(expected_gpus=8))
    assert judged[0].status is Status.CRITICAL


def test_bad_injection_file_is_reported_not_healthy(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    doc = run_probe("--nvml-injection", str(bad))
    assert doc["data"]["available"] is False and doc["data"]["reason_code"] == "injection_error"
    assert doc["errors"] and "injection" in doc["errors"][0]
    judged = evaluate_count(doc["data"], Thresholds(), CheckContext(expected_gpus=4))
    assert judged[0].status is Status.UNKNOWN


@pytest.mark.parametrize("kind", ["fifo", "directory", "huge"])
def test_an_injection_file_that_is_no_bounded_regular_file_is_an_error_not_a_hang(
    tmp_path: Path, kind: str
) -> None:
    """A FIFO with no writer would block a plain open() until the probe's timeout: refused at once."""
    path = tmp_path / "nvml.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(b" " * (4 * 1024 * 1024 + 1))
    doc = run_probe("--nvml-injection", str(path))
    assert doc["data"]["available"] is False and doc["data"]["reason_code"] == "injection_error"
    assert doc["errors"] and str(path) in doc["errors"][0]


def test_without_injection_and_without_a_driver_gpu_checks_are_not_applicable() -> None:
    doc = run_probe(env={"ROBUSTCTL_NVML_INJECTION": ""})
    if doc["data"].get("available"):
        pytest.skip("this machine has a working NVML")
    assert doc["data"]["reason_code"] in ("library_not_found", "driver_not_loaded", "pynvml_missing")
    judged = evaluate_count(doc["data"], Thresholds(), CheckContext(expected_gpus=0))
    assert judged[0].status is Status.NOT_APPLICABLE
    assert "not" in judged[0].summary


def test_unknown_argument_is_an_error() -> None:
    proc = subprocess.run([sys.executable, str(PROBE), "--bogus"], capture_output=True, timeout=30)
    assert proc.returncode == 2 and proc.stdout == b""
    assert b"unrecognized arguments: --bogus" in proc.stderr


def _python38() -> str | None:
    """A working Python 3.8 interpreter, if this machine has one (pyenv shims may not be enabled)."""
    candidates = [str(p) for p in sorted(Path("/root/.pyenv/versions").glob("3.8*/bin/python3.8"))]
    candidates.append(shutil.which("python3.8") or "")
    for c in candidates:
        if c and subprocess.run([c, "-c", "pass"], capture_output=True, timeout=30).returncode == 0:
            return c
    return None


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.name)
def test_probes_are_python38_syntax(probe: Path) -> None:
    """Probes run on hosts' own Pythons (>= 3.8): compile them as 3.8 would."""
    import ast

    ast.parse(probe.read_text(), filename=str(probe), feature_version=(3, 8))
    py38 = _python38()
    if py38 is None:
        return
    proc = subprocess.run(
        [str(py38), "-c", "import sys; compile(open(sys.argv[1]).read(), sys.argv[1], 'exec')", str(probe)],
        capture_output=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr.decode()


def test_stdlib_probes_run_on_python38(tmp_path: Path) -> None:
    """host.py and nvml.py (with an injection file) need nothing but a Python 3.8 stdlib."""
    py38 = _python38()
    if py38 is None:
        pytest.skip("no Python 3.8 interpreter here")
    path = write_injection(tmp_path / "nvml.json", healthy_gpus(2))
    docs = {}
    for probe, args in (("nvml", ["--nvml-injection", str(path)]), ("host", ["--root", str(tmp_path)])):
        source = probe_script(probe)
        proc = subprocess.run([py38, "-", *args], input=source, capture_output=True, timeout=60)
        assert proc.returncode == 0, proc.stderr.decode()
        docs[probe] = json.loads(proc.stdout)
    assert docs["nvml"]["data"]["count"] == 2 and docs["nvml"]["errors"] == []
    assert docs["host"]["data"]["infiniband"] == [] and docs["host"]["data"]["memory"] is None


def test_probes_never_import_robustctl() -> None:
    for probe in PROBES:
        text = probe.read_text()
        assert "import robustctl" not in text and "from robustctl" not in text, probe.name
