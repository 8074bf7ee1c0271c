"""Interrupts: SIGINT/SIGTERM stop every child (local groups, streamed probes), one line, exit 130."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from robustctl import interrupts
from robustctl.probes import PRELUDE, STREAM_BOOT, framed, probe_source

ROOT = Path(__file__).resolve().parents[2]


def _wait_for(cond: Callable[[], bool], timeout_s: float = 15.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def _loads_its_backend(pid: int) -> bool:
    """The burn probe ``pid`` has its matrix library (torch, else numpy) in its memory map: it has read
    its program, holds its lifeline and is in its load (the import is its first step there)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False
    return "/torch/" in maps or "/numpy/" in maps


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _sleeper_probe(pidfile: Path) -> bytes:
    """A streamed script (prelude + a probe) whose probe starts a grandchild and waits forever."""
    source = textwrap.dedent(
        f"""
        import subprocess, sys, time
        def main(argv):
            p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
            with open({str(pidfile)!r}, "w") as fh:
                fh.write(f"{{p.pid}} {{__import__('os').getpid()}}")
            time.sleep(120)
            return 0
        """
    )
    return probe_source(PRELUDE) + f"\nrun_streamed('sleeper', {source!r})\n".encode()


def test_a_probe_stops_its_group_when_its_controller_dies(tmp_path: Path) -> None:
    # The controller (a robustctl process) is SIGKILLed: no clean-up runs there, yet the probe's
    # lifeline (its standard input) closes and the probe kills its own group, grandchild included.
    pidfile = tmp_path / "pids"
    script = tmp_path / "script"
    script.write_bytes(framed(_sleeper_probe(pidfile)))
    controller = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from robustctl.process import run_argv; "
            "run_argv([sys.executable, '-c', sys.argv[1]], stdin=Path(sys.argv[2]).read_bytes(), "
            "keep_stdin_open=True, timeout_s=120)",
            STREAM_BOOT,
            str(script),
        ],
        cwd=ROOT,
    )
    try:
        assert _wait_for(lambda: pidfile.exists() and len(pidfile.read_text().split()) == 2)
        grandchild, probe = map(int, pidfile.read_text().split())
        assert not _gone(probe) and not _gone(grandchild)
        controller.kill()
        controller.wait(timeout=10)
        assert _wait_for(lambda: _gone(probe) and _gone(grandchild))
    finally:
        controller.kill()
        controller.wait(timeout=10)


def test_a_probe_run_by_hand_holds_no_lifeline(tmp_path: Path) -> None:
    # Read from `python3 -` (stdin ends at once), the same script must not kill itself.
    script = (
        probe_source(PRELUDE)
        + b"\nrun_streamed('p', 'def main(argv):\\n    print(\"alive\")\\n    return 0\\n')\n"
    )
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, b"alive\n")


def test_sigterm_raises_interrupted_in_the_main_thread() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(interrupts.Interrupted) as info, interrupts.handle_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert info.value.signame == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) == before


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_diagnose_interrupted_during_the_burn_stops_it_and_exits_130(tmp_path: Path, sig: int) -> None:
    inv = tmp_path / "cluster.yaml"
    inv.write_text(
        f"python: {{path: {sys.executable}}}\n"
        "hosts:\n  - {name: node01, address: local, transport: local}\n"
        "diagnose: {burn: {seconds: 120, size: 64}, host_timeout_s: 300}\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "robustctl",
            "diagnose",
            "-i",
            str(inv),
            "-l",
            "1",
            "--all-levels",
            "--no-record",
            "--state",
            str(tmp_path / "state.db"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "NO_COLOR": "1"},
    )

    def burn() -> list[psutil.Process]:
        try:
            kids = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        found = []
        for k in kids:
            try:
                if "--seconds" in k.cmdline():
                    found.append(k)
            except psutil.Error:
                pass
        return found

    try:
        assert _wait_for(lambda: bool(burn()), timeout_s=60), "the burn probe never started"
        pids = [p.pid for p in burn()]
        assert _wait_for(lambda: any(_loads_its_backend(p) for p in pids), timeout_s=60), "no load started"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = [ln for ln in err.decode().splitlines() if "interrupted" in ln]
    name = signal.Signals(sig).name
    assert proc.returncode == 130, err.decode()[-2000:]
    assert lines == [
        f"robustctl: diagnose interrupted by {name}; stopped what was running on 1 host(s): node01"
    ]
    assert "Traceback" not in err.decode() and out == b""
    assert _wait_for(lambda: all(_gone(p) for p in pids), timeout_s=5)
