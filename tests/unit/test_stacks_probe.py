"""The node-side ``stacks`` probe (``diagnostics/stacks.py``) against real processes and real py-spy.

Each test starts a small Python "rank" (``RANK``/``LOCAL_RANK`` in its environment, sleeping in a
known function, optionally with a forked child and a zombie child) or a non-Python process, runs the
probe as a subprocess the way robustctl does (``python -`` with the source on stdin), and checks its
one JSON document. Every process started here is killed by its session at the end of the test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "diagnostics" / "stacks.py"

RANK_SCRIPT = textwrap.dedent(
    """
    import os, sys, time, multiprocessing as mp

    def worker_waits_here():
        time.sleep(600)

    def rank_main_sleeps_here():
        print("ready", flush=True)  # printed from here: a dump taken after "ready" shows this frame
        time.sleep(600)

    if __name__ == "__main__":
        mode = sys.argv[2]
        if "child" in mode:
            mp.get_context("fork").Process(target=worker_waits_here, daemon=True).start()
        if "zombie" in mode:
            if os.fork() == 0:
                os._exit(0)
        rank_main_sleeps_here()
    """
)


def _pyspy() -> str | None:
    found = shutil.which("py-spy")
    beside = Path(sys.executable).parent / "py-spy"
    return found or (str(beside) if beside.is_file() else None)


needs_pyspy = pytest.mark.skipif(_pyspy() is None, reason="py-spy is not installed (pip install py-spy)")


class Procs:
    """Processes started by a test, each in its own session, all killed at the end."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.started: list[subprocess.Popen[bytes]] = []
        self.marker = f"rbtest-{uuid.uuid4().hex[:10]}"

    def rank(
        self, rank: int | None, mode: str = "", *, local_rank: int | None = None, extra: str = ""
    ) -> int:
        """A Python rank process (``mode``: "child", "zombie"); returns its pid once it is ready."""
        script = self.tmp / "fake_rank.py"
        script.write_text(RANK_SCRIPT)
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK")}
        if rank is not None:
            env["RANK"] = str(rank)
            env["LOCAL_RANK"] = str(rank % 4 if local_rank is None else local_rank)
        argv = [sys.executable, str(script), self.marker, mode or "plain"]
        if extra:
            argv.append(extra)
        p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, start_new_session=True)
        self.started.append(p)
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line.strip() == b"ready", line
        if "child" in mode:  # the forked child's own cmdline/environ are readable once it runs
            _wait_for(lambda: len(_children(p.pid)) >= 1)
        return p.pid

    def non_python(self, rank: int) -> int:
        """A process that matches the job's pattern but is not Python (py-spy cannot read it)."""
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank % 4))
        p = subprocess.Popen(
            ["bash", "-c", f'exec -a "fake_rank.py {self.marker} native" sleep 600'],
            env=env,
            start_new_session=True,
        )
        self.started.append(p)
        _wait_for(lambda: self.marker in Path(f"/proc/{p.pid}/cmdline").read_bytes().decode(errors="replace"))
        return p.pid

    def kill(self) -> None:
        for p in self.started:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=10)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def _wait_for(cond: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if cond():
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError("condition not reached")


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.kill()


def run_probe(args: Sequence[str], python: str = sys.executable) -> dict[str, Any]:
    """Run the probe like robustctl (source on stdin of ``python -``); return its document."""
    proc = subprocess.run(
        [python, "-", *args], input=PROBE.read_bytes(), capture_output=True, timeout=60, env=dict(os.environ)
    )
    assert proc.returncode == 0, proc.stderr.decode()
    lines = proc.stdout.decode().strip().splitlines()
    assert len(lines) == 1, proc.stdout
    doc = json.loads(lines[0])
    assert doc["probe"] == "stacks" and doc["version"] == 1
    return dict(doc)


def frames_of(entry: Mapping[str, Any]) -> list[str]:
    """Function names of the main thread, innermost first."""
    threads = entry["dump"]
    main = next((t for t in threads if t["thread_name"] == "MainThread"), threads[0])
    return [f["name"] for f in main["frames"]]


@needs_pyspy
def test_rank_and_child_found_and_dumped(procs: Procs) -> None:
    pid = procs.rank(5, "child", local_rank=1)
    doc = run_probe(["--match", procs.marker])
    data = doc["data"]
    assert data["error"] is None and doc["errors"] == []
    assert data["py_spy"]["path"] and data["py_spy"]["version"]
    by_pid = {e["pid"]: e for e in data["processes"]}
    child_pid = _children(pid)[0]
    assert set(by_pid) == {pid, child_pid}, "only the rank and its child (never the probe itself)"

    main = by_pid[pid]
    assert (main["rank"], main["local_rank"], main["role"], main["parent_pid"]) == (5, 1, "main", None)
    assert main["rank_source"] == "env" and main["environ_error"] is None
    assert main["state"] == "S" and main["error"] is None
    assert frames_of(main)[0] == "rank_main_sleeps_here"
    assert frames_of(main)[-1] == "<module>"
    assert 0 < main["elapsed_s"] < 10
    assert procs.marker in main["cmdline"]

    child = by_pid[child_pid]
    assert (child["rank"], child["role"], child["parent_pid"], child["ppid"]) == (5, "child", pid, pid)
    assert frames_of(child)[0] == "worker_waits_here"
    assert "BaseProcess._bootstrap" in frames_of(child)

    frame = main["dump"][0]["frames"][0]
    assert set(frame) == {"name", "filename", "module", "short_filename", "line"}, "locals stripped"
    assert set(main["dump"][0]) == {
        "thread_id",
        "thread_name",
        "os_thread_id",
        "active",
        "owns_gil",
        "frames",
    }
    assert data["processes"][0]["pid"] == pid, "sorted: main before its child"


@needs_pyspy
def test_ranks_filter_and_unmatched_ranks(procs: Procs) -> None:
    mine = procs.rank(4)
    procs.rank(9)  # another host's rank on the shared /proc
    doc = run_probe(["--match", procs.marker, "--ranks", "4-7"])
    data = doc["data"]
    assert [e["pid"] for e in data["processes"]] == [mine]
    assert data["requested_ranks"] == [4, 5, 6, 7]
    assert data["unmatched_ranks"] == [5, 6, 7]


@needs_pyspy
def test_rank_from_command_line_when_environment_has_none(procs: Procs) -> None:
    pid = procs.rank(None, extra="--node-rank=12")
    doc = run_probe(["--match", procs.marker, r"--rank-cmdline=--node-rank=(\d+)"])
    (entry,) = doc["data"]["processes"]
    assert (entry["pid"], entry["rank"], entry["rank_source"], entry["local_rank"]) == (
        pid,
        12,
        "cmdline",
        None,
    )


@needs_pyspy
def test_unreadable_process_is_reported_not_fatal(procs: Procs) -> None:
    """A matching process py-spy cannot read (not Python) is evidence: dump null, error one line."""
    good = procs.rank(2)
    bad = procs.non_python(3)
    doc = run_probe(["--match", procs.marker, "--ranks", "0-3"])
    by_pid = {e["pid"]: e for e in doc["data"]["processes"]}
    assert by_pid[good]["error"] is None and by_pid[good]["dump"]
    entry = by_pid[bad]
    assert entry["dump"] is None and entry["rank"] == 3 and entry["role"] == "main"
    assert entry["error"] and "\n" not in entry["error"] and "backtrace" not in entry["error"].lower()
    assert "python" in entry["error"].lower() or "executable" in entry["error"].lower(), entry["error"]
    assert doc["data"]["unmatched_ranks"] == [0, 1], "an unreadable main process still counts as found"


@needs_pyspy
def test_zombie_child_is_reported(procs: Procs) -> None:
    pid = procs.rank(1, "zombie")
    _wait_for(
        lambda: any(Path(f"/proc/{c}/stat").read_text().split(") ")[1][0] == "Z" for c in _children(pid))
    )
    doc = run_probe(["--match", procs.marker])
    zombies = [e for e in doc["data"]["processes"] if e["state"] == "Z"]
    assert len(zombies) == 1
    z = zombies[0]
    assert (z["role"], z["parent_pid"], z["rank"], z["dump"]) == ("child", pid, 1, None)
    assert "zombie" in z["error"] and "<defunct>" in z["cmdline"]


@needs_pyspy
def test_stopped_process_dumps_nonblocking(procs: Procs) -> None:
    """A SIGSTOPped rank (state T) is still read with --nonblocking: its stack is evidence too."""
    pid = procs.rank(0)
    os.kill(pid, signal.SIGSTOP)
    try:
        doc = run_probe(["--match", procs.marker, "--per-process-timeout", "5"])
    finally:
        os.kill(pid, signal.SIGCONT)
    (entry,) = doc["data"]["processes"]
    assert entry["state"] == "T"
    assert entry["error"] is None and frames_of(entry)[0] == "rank_main_sleeps_here"


def test_missing_pyspy_is_a_data_error_not_a_traceback(procs: Procs, tmp_path: Path) -> None:
    pid = procs.rank(3)
    doc = run_probe(["--match", procs.marker, "--py-spy", str(tmp_path / "no-such-py-spy")])
    data = doc["data"]
    assert data["py_spy"] is None
    assert "py-spy not found" in data["error"] and data["error"] in doc["errors"]
    (entry,) = data["processes"]
    assert entry["pid"] == pid and entry["rank"] == 3
    assert entry["dump"] is None and entry["error"].startswith("not dumped:")


def test_bad_regex_is_a_data_error() -> None:
    doc = run_probe(["--match", "tests(["])
    assert doc["data"]["processes"] == [] and "bad regular expression" in doc["data"]["error"]


def test_nothing_matching_is_an_empty_list() -> None:
    doc = run_probe(["--match", f"no-such-process-{uuid.uuid4().hex}", "--ranks", "0-1"])
    assert doc["data"]["processes"] == [] and doc["data"]["unmatched_ranks"] == [0, 1]
    assert doc["data"]["scanned"] > 0


def test_bad_arguments_exit_2() -> None:
    for args in (["--match", "x", "--ranks", "7-3"], ["--bogus"], []):
        proc = subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, timeout=30)
        assert proc.returncode == 2 and proc.stdout == b"", args


def test_common_probe_arguments_are_accepted() -> None:
    doc = run_probe(["--match", "zzz-no-such", "--root", "/nonexistent", "--nvml-injection", "/x.json"])
    assert doc["data"]["error"] is None


def test_probe_parses_as_python38() -> None:
    import ast

    ast.parse(PROBE.read_text(), filename=str(PROBE), feature_version=(3, 8))
    assert "import robustctl" not in PROBE.read_text() and "from robustctl" not in PROBE.read_text()


@needs_pyspy
def test_probe_runs_on_python38(procs: Procs) -> None:
    py38 = next(iter(sorted(Path("/root/.pyenv/versions").glob("3.8*/bin/python3.8"))), None)
    py38_path = str(py38) if py38 else shutil.which("python3.8")
    if not py38_path:
        pytest.skip("no Python 3.8 interpreter here")
    pid = procs.rank(6, "child")
    doc = run_probe(["--match", procs.marker, "--py-spy", str(_pyspy())], python=py38_path)
    assert next(e["pid"] for e in doc["data"]["processes"]) == pid
    assert all(e["error"] is None for e in doc["data"]["processes"])


@needs_pyspy
def test_other_stacks_probes_are_never_matched(procs: Procs) -> None:
    """On a shared /proc (the testbed) probes of other hosts run at once: a loose --match must not
    catch them (nor the probe itself)."""
    pid = procs.rank(2)
    pattern = f"{procs.marker}|match"  # matches the probes' own command lines too
    sibling = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", f"--match={pattern}"], start_new_session=True
    )
    procs.started.append(sibling)  # type: ignore[arg-type]
    doc = run_probe([f"--match={pattern}"])
    assert [e["pid"] for e in doc["data"]["processes"]] == [pid]
