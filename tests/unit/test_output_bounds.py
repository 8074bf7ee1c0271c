"""What a host sends back is bounded: a flood on stdout stops the command and the host is UNKNOWN."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from robustctl.config import PythonSettings, SshSettings
from robustctl.errors import OutputTooLarge
from robustctl.inventory import Host
from robustctl.probes import run_probe
from robustctl.transport.base import MAX_STDOUT_BYTES
from robustctl.transport.local import LocalTransport

ROOT = Path(__file__).resolve().parents[2]


def _flooder(tmp_path: Path) -> Path:
    """A host "python" that prints forever whatever it is asked, like a broken or hostile host."""
    exe = tmp_path / "python3"
    exe.write_text(
        f"#!{sys.executable}\nimport sys\nwhile True:\n    sys.stdout.buffer.write(b'x' * 65536)\n"
    )
    exe.chmod(0o755)
    return exe


def test_a_probe_that_floods_stdout_is_stopped_at_the_bound(tmp_path: Path) -> None:
    host = Host("node01", "local", "local", SshSettings(), PythonSettings(path=str(_flooder(tmp_path))))
    with pytest.raises(OutputTooLarge, match=r"node01: printed more than 1048576 bytes on stdout; stopped"):
        run_probe(LocalTransport(max_stdout=1 << 20), host, "host", deadline=time.monotonic() + 60)


def test_diagnose_reports_a_flooding_host_unknown(tmp_path: Path) -> None:
    inv = tmp_path / "cluster.yaml"
    inv.write_text(
        f"python: {{path: {_flooder(tmp_path)}}}\n"
        "hosts:\n  - {name: node01, address: local, transport: local}\n"
        f"  - {{name: node02, address: local, transport: local, python: {{path: {sys.executable}}}}}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "robustctl", "diagnose", "-i", str(inv), "-l", "0", "--json", "--no-record"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode in (2, 3), done.stderr
    doc = json.loads(done.stdout)
    hosts = {h["host"]: h for h in doc["hosts"]}
    flood = hosts["node01"]
    assert flood["status"] == "unknown" and "node01" in doc["unknown"]
    assert f"printed more than {MAX_STDOUT_BYTES} bytes on stdout; stopped" in json.dumps(flood)
    # the other host was checked as usual
    assert hosts["node02"]["status"] != "unknown"
    assert "Traceback" not in done.stderr
