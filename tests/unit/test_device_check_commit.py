"""scripts/device-check.sh's env.txt names the commit the run was made from (issue 25).

The device machine gets a copy of the working tree whose git HEAD can be stale, so the caller's
commit (``DEVICE_CHECK_COMMIT``) wins; without it, HEAD is named with a warning that the tree may
differ.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "scripts" / "device-check.sh"


def env_txt(out: Path, **env: str) -> str:
    """Run the check without a GPU (nothing installed, no GPU step) and return its env.txt."""
    full = {
        **os.environ,
        "OUT": str(out),
        "PYTHON": sys.executable,
        "CUDA_VISIBLE_DEVICES": "",
        "DEVICE_CHECK_SKIP_INSTALL": "1",
        "DEVICE_CHECK_NO_GPU": "1",
        **env,
    }
    if "DEVICE_CHECK_COMMIT" not in env:
        full.pop("DEVICE_CHECK_COMMIT", None)
    proc = subprocess.run(["bash", str(CHECK)], capture_output=True, text=True, timeout=120, env=full)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return (out / "env.txt").read_text()


def commit_line(text: str) -> str:
    (line,) = [x for x in text.splitlines() if x.startswith("commit: ")]
    return line


def test_the_commit_passed_from_outside_is_the_one_named(tmp_path: Path) -> None:
    assert commit_line(env_txt(tmp_path / "a", DEVICE_CHECK_COMMIT="9077c59")) == "commit: 9077c59"


def test_without_it_head_is_named_with_the_changed_file_count(tmp_path: Path) -> None:
    line = commit_line(env_txt(tmp_path / "b"))
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert line.startswith(f"commit: {head} (tree may differ: ") and line.endswith(" changed files)")
