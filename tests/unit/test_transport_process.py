"""The one process-group runner (local transport, Slurm back end): the group dies on every failed exit."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from robustctl import interrupts, process
from robustctl.process import MAX_STDERR_BYTES, OutputLimitExceeded, run_argv
from robustctl.schedulers.slurm import run_command


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
    real = process._pump

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        assert _wait_for(lambda: pidfile.exists() and pidfile.read_text() != "")
        raise KeyboardInterrupt

    monkeypatch.setattr(process, "_pump", interrupted)
    argv = _parent_of_a_sleeper(pidfile)
    with pytest.raises(KeyboardInterrupt):
        if runner == "run_argv":
            run_argv(argv, timeout_s=30)
        else:
            run_command(argv, {}, 30)
    grandchild = int(pidfile.read_text())
    assert _wait_for(lambda: not _alive(grandchild))
    assert real is not interrupted and interrupts.live_commands() == ()


def test_stdout_past_its_bound_stops_the_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    code = (
        "import subprocess, sys; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pidfile)!r}, 'w').write(str(p.pid)); "
        "w = sys.stdout.buffer\nwhile True: w.write(b'x' * 65536)"
    )
    with pytest.raises(OutputLimitExceeded, match="more than 1048576 bytes"):
        run_argv([sys.executable, "-c", code], timeout_s=30, max_stdout=1 << 20)
    assert _wait_for(lambda: pidfile.exists() and not _alive(int(pidfile.read_text())))


def test_slurm_output_past_its_bound_is_a_scheduler_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from robustctl.schedulers import slurm
    from robustctl.schedulers.base import SchedulerError

    monkeypatch.setattr(slurm, "SLURM_MAX_OUTPUT_BYTES", 1000)
    cli = slurm.Slurm(bin_dir=str(Path(sys.executable).parent))
    with pytest.raises(SchedulerError, match="printed more than 1000 bytes"):
        cli.run([Path(sys.executable).name, "-c", "print('x' * 5000)"])


def test_only_the_tail_of_stderr_is_kept() -> None:
    code = "import sys; sys.stderr.write('e' * (3 << 20)); sys.stderr.write('LAST')"
    done = run_argv([sys.executable, "-c", code], timeout_s=30)
    assert len(done.stderr) == MAX_STDERR_BYTES and done.stderr.endswith(b"eLAST")


def test_stdin_kept_open_until_the_command_ends() -> None:
    # keep_stdin_open: the payload arrives, then no end of file while the command runs
    code = (
        "import sys, select; d = sys.stdin.buffer.read1(100); "
        "r, _, _ = select.select([sys.stdin], [], [], 1.0); print(d.decode(), bool(r))"
    )
    open_ = run_argv([sys.executable, "-c", code], stdin=b"hi", keep_stdin_open=True, timeout_s=30)
    closed = run_argv([sys.executable, "-c", code], stdin=b"hi", timeout_s=30)
    assert (open_.stdout, closed.stdout) == (b"hi False\n", b"hi True\n")


def test_stop_all_kills_a_group_another_thread_waits_on(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    got: list[Any] = []
    t = threading.Thread(
        target=lambda: got.append(run_argv(_parent_of_a_sleeper(pidfile), timeout_s=60, label="node7"))
    )
    t.start()
    assert _wait_for(lambda: pidfile.exists() and pidfile.read_text() != "")
    assert interrupts.live_commands() == ("node7",)
    stopped = interrupts.stop_all()
    t.join(timeout=10)
    assert (stopped.commands, stopped.groups) == (("node7",), 1)
    assert got and got[0].returncode == -signal.SIGKILL
    assert _wait_for(lambda: not _alive(int(pidfile.read_text())))
    assert interrupts.live_commands() == ()


def test_missing_program_raises_oserror() -> None:
    with pytest.raises(OSError):
        run_argv(["/nonexistent/program"], timeout_s=5)


def test_slurm_runner_decodes_text() -> None:
    out = run_command([sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'ok\\xff\\n')"], {}, 10)
    assert (out.returncode, out.stdout, out.stderr) == (0, "ok\ufffd\n", "")
