"""The watch's log scan reads only the newest launch's output of a log appended to across launches."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from robustctl.watch.logscan import LAUNCH_MARKER, scan_log

REPO = Path(__file__).resolve().parents[2]
CRASH = (
    "[rank1]: Traceback (most recent call last):\n"
    '[rank1]:   File "train.py", line 3, in <module>\n'
    "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
)


def test_a_crash_before_the_newest_launch_marker_is_history() -> None:
    text = f"{LAUNCH_MARKER}2026-01-01T00:00:00Z: x\n{CRASH}{LAUNCH_MARKER}2026-01-01T00:01:00Z: x\nstep 1\n"
    scan = scan_log(text)
    assert scan.verdict is None, scan


def test_a_crash_after_the_newest_launch_marker_is_seen() -> None:
    text = f"{LAUNCH_MARKER}2026-01-01T00:00:00Z: x\nstep 1\n{LAUNCH_MARKER}2026-01-01T00:01:00Z: x\n{CRASH}"
    scan = scan_log(text)
    assert scan.verdict is not None and scan.verdict.cause == "cuda-error", scan


def test_a_log_without_a_marker_is_scanned_whole() -> None:
    scan = scan_log(CRASH)
    assert scan.verdict is not None and scan.verdict.cause == "cuda-error", scan


def test_the_launch_probe_writes_the_marker_before_each_process_output(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "r0.log"
    spec = tmp_path / "spec.json"
    argv = [sys.executable, "-c", "print('hello')"]
    spec.write_text(json.dumps([{"argv": argv, "log": str(log)}]))
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, str(REPO / "diagnostics" / "launch.py"), "--spec", str(spec)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        deadline = time.monotonic() + 30
        while log.read_text().count("hello") < _ + 1:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
    lines = log.read_text().splitlines()
    assert [ln.startswith(LAUNCH_MARKER) for ln in lines] == [True, False, True, False], lines
    assert lines[1] == lines[3] == "hello"
