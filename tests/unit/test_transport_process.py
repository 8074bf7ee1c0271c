"""The one process-group runner (local transport, Slurm back end): the group dies on every failed exit."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from robustctl.schedulers.slurm import run_command
from robustctl.transport.process import run_argv


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie left for an init that does not reap counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _wait_for(cond: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def _parent_of_a_sleeper(pidfile: Path) -> list[str]:
    """argv of a command that starts a grandchild (sleeping 60 s), writes its pid, then sleeps too."""
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    return [sys.executable, "-c", code]


def test_output_status_and_stdin() -> None:
    done = run_argv(
        [sys.executable, "-c", "import sys; print(sys.stdin.read()[::-1]); sys.exit(3)"],
        stdin=b"abc",
        timeout_s=10,
    )
    assert (done.returncode, done.stdout.strip(), done.elapsed_s > 0) == (3, b"cba", True)
    # no stdin: /dev/null, so a reader sees end of file at once
    assert (
        run_argv([sys.executable, "-c", "import sys; print(len(sys.stdin.read()))"], timeout_s=10).stdout
        == b"0\n"
    )


def test_environment_is_the_one_given() -> None:
    done = run_argv(
        [sys.executable, "-c", "import os; print(os.environ.get('RCTL_X'))"],
        env={"RCTL_X": "1"},
        timeout_s=10,
    )
    assert done.stdout == b"1\n"


def test_timeout_kills_the_grandchild_too(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    with pytest.raises(subprocess.TimeoutExpired):
        run_argv(_parent_of_a_sleeper(pidfile), timeout_s=3)
    assert pidfile.exists()
    grandchild = int(pidfile.read_text())
    assert _wait_for(lambda: not _alive(grandchild))


@pytest.mark.parametrize("runner", ["run_argv", "slurm.run_command"])
def test_an_interrupted_wait_kills_the_group(
    runner: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C while waiting (a BaseException, not an Exception): the Slurm copy used to leave the group
    pidfile = tmp_path / "pid"
    real = subprocess.Popen.communicate
    calls = []

    def interrupted(self: subprocess.Popen[bytes], *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            assert _wait_for(lambda: pidfile.exists() and pidfile.read_text() != "")
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "communicate", interrupted)
    argv = _parent_of_a_sleeper(pidfile)
    with pytest.raises(KeyboardInterrupt):
        if runner == "run_argv":
            run_argv(argv, timeout_s=30)
        else:
            run_command(argv, {}, 30)
    grandchild = int(pidfile.read_text())
    assert _wait_for(lambda: not _alive(grandchild))


def test_missing_program_raises_oserror() -> None:
    with pytest.raises(OSError):
        run_argv(["/nonexistent/program"], timeout_s=5)


def test_slurm_runner_decodes_text() -> None:
    out = run_command([sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'ok\\xff\\n')"], {}, 10)
    assert (out.returncode, out.stdout, out.stderr) == (0, "ok\ufffd\n", "")
