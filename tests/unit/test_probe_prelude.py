"""The shared probe prelude (diagnostics/_prelude.py): every probe runs by hand and streamed, reports
its own timeout the same way, and the bundle keeps the host's common arguments (``--root``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from robustctl.checks.host import evaluate_disk, evaluate_memory, evaluate_nic, never_told
from robustctl.checks.nvml import evaluate_count
from robustctl.config import PythonSettings, SshSettings
from robustctl.models import Status
from robustctl.probes import PROBES, ProbeDocument, bundle_script, probe_script, run_probe, run_probes
from robustctl.testing.fake_nvml import healthy_gpus, write_injection
from robustctl.thresholds import Thresholds
from robustctl.transport.local import LocalTransport

REPO = Path(__file__).resolve().parents[2]
TH = Thresholds()


def local_host(probe_root: str | None = None) -> Any:
    from robustctl.inventory import Host

    return Host(
        "localhost",
        "local",
        "local",
        SshSettings(),
        PythonSettings(path=sys.executable),
        probe_root=probe_root,
    )


def streamed(name: str, *args: str, timeout: float = 60) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-", *args], input=probe_script(name), capture_output=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr.decode()
    (line,) = proc.stdout.decode().strip().splitlines()
    doc: dict[str, Any] = json.loads(line)
    return doc


@pytest.mark.parametrize("name", PROBES)
def test_every_probe_runs_by_hand(name: str) -> None:
    """``python3 diagnostics/<probe>.py --help``: the probe finds the prelude beside itself."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "diagnostics" / f"{name}.py"), "--help"], capture_output=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr.decode()
    help_text = (proc.stdout + proc.stderr).decode()
    assert "usage:" in help_text
    if name != "bundle":
        assert "--root" in help_text and "--timeout" in help_text and "--nvml-injection" in help_text


def test_probes_hold_no_scaffolding_of_their_own() -> None:
    for name in PROBES:
        text = (REPO / "diagnostics" / f"{name}.py").read_text()
        assert "from _prelude import" in text, name
        assert "class Document" not in text and "threading.Timer" not in text, name
        assert '"--root"' not in text and '"--timeout"' not in text, name


def test_a_streamed_script_is_the_prelude_then_one_call() -> None:
    prelude = (REPO / "diagnostics" / "_prelude.py").read_bytes()
    script = probe_script("host")
    assert script.startswith(prelude)
    (call,) = script[len(prelude) :].decode().strip().splitlines()
    assert call.startswith("run_streamed('host', ")
    assert bundle_script([("host", []), ("nvml", ["--timeout", "5"])]).startswith(prelude)


def test_host_probe_timeout_is_reported_by_the_probe(tmp_path: Path) -> None:
    """A kernel log that never answers (a FIFO): the watchdog prints the partial document, marked."""
    fifo = tmp_path / "kern.log"
    os.mkfifo(fifo)
    doc = streamed("host", "--kernel-log", str(fifo), "--timeout", "1")
    data = doc["data"]
    assert doc["timed_out"] is True
    assert data["error"] == "timeout: probe ran past its 1.0 s budget; partial data"
    assert data["error"] in doc["errors"]
    assert isinstance(data["memory"], dict) and "nics" not in data  # collected before / not reached
    assert evaluate_memory(data, TH)[0].status is Status.OK
    (nic,) = evaluate_nic(data, TH)
    assert nic.status is Status.UNKNOWN and "timeout: probe ran past" in nic.summary


def test_nvml_probe_timeout_is_unknown_not_not_applicable(tmp_path: Path) -> None:
    """A wedged driver: nvmlInit blocks past the probe's budget."""
    path = write_injection(tmp_path / "nvml.json", list(healthy_gpus(1)), init_stall_s=30)
    doc = streamed("nvml", "--nvml-injection", str(path), "--timeout", "1")
    assert doc["timed_out"] is True and "available" not in doc["data"]
    assert never_told(doc["data"]) == doc["data"]["error"]
    (r,) = evaluate_count(doc["data"], TH)
    assert r.status is Status.UNKNOWN and "timeout: probe ran past its 1.0 s budget" in r.summary


def test_a_probe_in_time_says_so() -> None:
    doc = streamed("host", "--timeout", "30")
    assert doc["timed_out"] is False and "error" not in doc["data"]


def test_run_probe_reads_timed_out(tmp_path: Path) -> None:
    fifo = tmp_path / "kern.log"
    os.mkfifo(fifo)
    import time

    doc = run_probe(
        LocalTransport(),
        local_host(),
        "host",
        ["--kernel-log", str(fifo), "--timeout", "1"],
        deadline=time.monotonic() + 30,
    )
    assert doc.timed_out and doc.data["error"].startswith("timeout:")


def test_bundle_keeps_probe_root(tmp_path: Path) -> None:
    """Issue 9 item 3: with ``probe_root: /nonexistent/dir`` the bundled L0 run read the real
    machine (the bundle replaced each probe's arguments and dropped ``--root``)."""
    import time

    host = local_host(probe_root=str(tmp_path / "nonexistent" / "dir"))
    docs = run_probes(LocalTransport(), host, [("host", []), ("nvml", [])], deadline=time.monotonic() + 60)
    host_doc = docs[0]
    assert isinstance(host_doc, ProbeDocument)
    assert host_doc.data["disks"] is None and host_doc.data["memory"] is None
    assert any("nonexistent/dir/proc/meminfo" in e for e in host_doc.errors)
    assert (
        evaluate_disk({**host_doc.data, "_context": {"probe_errors": list(host_doc.errors)}}, TH)[0].status
        is Status.UNKNOWN
    )
    alone = run_probe(LocalTransport(), host, "host", deadline=time.monotonic() + 60)
    assert alone.errors == host_doc.errors  # bundled or not, the same observation


def test_diagnose_level0_with_a_missing_probe_root_is_not_ok(tmp_path: Path) -> None:
    """The same through the CLI: ``diagnose -l 0`` must not pass on the real machine's values."""
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        f"python: {{path: {sys.executable}}}\n"
        "hosts:\n"
        f"  - {{name: node01, address: local, transport: local, probe_root: {tmp_path}/nonexistent/dir}}\n"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("ROBUSTCTL_")}
    proc = subprocess.run(
        [sys.executable, "-m", "robustctl", "diagnose", "-l", "0", "-i", str(inv), "--no-record", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, "NO_COLOR": "1", "ROBUSTCTL_STATE": str(tmp_path / "state.db")},
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 3, proc.stderr
    assert "nonexistent/dir" in proc.stdout


def test_a_probe_timing_out_in_the_bundle_keeps_its_document(tmp_path: Path) -> None:
    """The watchdog ends the bundle's process: the bundle still prints what it has."""
    import time

    fifo = tmp_path / "kern.log"
    os.mkfifo(fifo)
    script = bundle_script([("host", ["--kernel-log", str(fifo), "--timeout", "1"]), ("nvml", [])])
    proc = subprocess.run([sys.executable, "-"], input=script, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    (line,) = proc.stdout.decode().strip().splitlines()
    (entry,) = json.loads(line)["results"]
    assert entry["name"] == "host" and json.loads(entry["stdout"])["timed_out"] is True

    docs = run_probes(
        LocalTransport(),
        local_host(),
        [("host", ["--kernel-log", str(fifo), "--timeout", "1"]), ("nvml", [])],
        deadline=time.monotonic() + 60,
    )
    host_doc, nvml_doc = docs
    assert isinstance(host_doc, ProbeDocument) and host_doc.timed_out
    assert not isinstance(nvml_doc, ProbeDocument) and "ran out of time" in str(nvml_doc)
