"""The node-side ``stacks`` probe (``diagnostics/stacks.py``) against real processes and real py-spy.

Each test starts a small Python "rank" (``RANK``/``LOCAL_RANK`` in its environment, sleeping in a
known function, optionally with a forked child and a zombie child) or a non-Python process, runs the
probe as a subprocess the way robustctl does (``python -`` with the source on stdin), and checks its
one JSON document. Every process started here is killed by its session at the end of the test.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from robustctl.probes import load_probe, probe_script

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "diagnostics" / "stacks.py"

RANK_SCRIPT = textwrap.dedent(
    """
    import os, sys, time, multiprocessing as mp

    def worker_waits_here():
        time.sleep(600)

    def loader_waits_here():
        with open("/proc/self/comm", "w") as f:  # what torch's _worker_loop does with prctl(PR_SET_NAME)
            f.write("pt_data_worker")
        time.sleep(600)

    def rank_main_sleeps_here():
        print("ready", flush=True)  # printed from here: a dump taken after "ready" shows this frame
        time.sleep(600)

    if __name__ == "__main__":
        mode = sys.argv[2]
        if "child" in mode:
            mp.get_context("fork").Process(target=worker_waits_here, daemon=True).start()
        if "loader" in mode:
            mp.get_context("fork").Process(target=loader_waits_here, daemon=True).start()
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


_pyspy_present = pytest.mark.skipif(_pyspy() is None, reason="py-spy is not installed (pip install py-spy)")


def needs_pyspy(test: Any) -> Any:
    """Runs py-spy against real processes: an ``external`` test, skipped where py-spy is missing."""
    return pytest.mark.external(_pyspy_present(test))


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
        if (
            "child" in mode or "loader" in mode
        ):  # the forked child's cmdline/environ are readable once it runs
            _wait_for(lambda: len(_children(p.pid)) >= 1)
        if "loader" in mode:
            _wait_for(
                lambda: Path(f"/proc/{_children(p.pid)[0]}/comm").read_text().strip() == "pt_data_worker"
            )
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
            if p.stdout is not None:
                p.stdout.close()


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
        [python, "-", *args],
        input=probe_script("stacks"),
        capture_output=True,
        timeout=60,
        env=dict(os.environ),
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


@needs_pyspy
def test_data_loader_worker_is_named_by_its_comm_even_when_unreadable(procs: Procs, tmp_path: Path) -> None:
    """PyTorch names its workers ``pt_data_worker``: the probe reports ``comm``, and a worker whose
    dump failed (here: py-spy refuses every child) is still a DATALOADER, not an anonymous child."""
    from robustctl.stacks.collect import dumps_from_document
    from robustctl.stacks.model import ProcessRole

    pid = procs.rank(6, "loader")
    worker = _children(pid)[0]
    doc = run_probe(["--match", procs.marker])
    by_pid = {e["pid"]: e for e in doc["data"]["processes"]}
    assert by_pid[worker]["comm"] == "pt_data_worker" and by_pid[worker]["role"] == "child"
    assert by_pid[pid]["comm"] == Path(f"/proc/{pid}/comm").read_text().strip() != "pt_data_worker"
    roles = {d.pid: (d.role, d.comm, d.readable) for d in dumps_from_document("node01", doc["data"])[0]}
    assert roles == {
        pid: (ProcessRole.MAIN, by_pid[pid]["comm"], True),
        worker: (ProcessRole.DATALOADER, "pt_data_worker", True),  # no torch frame: the comm says it
    }

    refuse = tmp_path / "py-spy"
    refuse.write_text(
        f"#!/bin/sh\ncase \"$*\" in *'--pid {worker} '*) echo 'Error: Failed to get stack traces' >&2; exit 1;; esac\n"
        f'exec {_pyspy()} "$@"\n'
    )
    refuse.chmod(0o755)
    doc = run_probe(["--match", procs.marker, "--py-spy", str(refuse), "--retries", "0"])
    (w,) = [d for d in dumps_from_document("node01", doc["data"])[0] if d.pid == worker]
    assert (w.role, w.readable, w.error) == (ProcessRole.DATALOADER, False, "Failed to get stack traces")


@needs_pyspy
def test_transient_pyspy_failure_is_retried_with_backoff(procs: Procs, tmp_path: Path) -> None:
    """``--nonblocking`` dumps sometimes fail mid-update: a live process is dumped again (0.05 s, then
    twice as long each time), so a run of transient failures is not reported as evidence."""
    pid = procs.rank(2)
    calls = tmp_path / "calls"
    flaky = tmp_path / "py-spy"
    flaky.write_text(  # fails the first three dumps, then runs the real py-spy
        f'#!/bin/sh\ncase "$1" in dump) echo x >> {calls}; [ "$(wc -l < {calls})" -le 3 ] && '
        f"{{ echo 'Error: Failed to get stack traces' >&2; exit 1; }};; esac\nexec {_pyspy()} \"$@\"\n"
    )
    flaky.chmod(0o755)
    t0 = time.monotonic()
    doc = run_probe(["--match", procs.marker, "--py-spy", str(flaky), "--per-process-timeout", "20"])
    (entry,) = doc["data"]["processes"]
    assert entry["pid"] == pid and entry["error"] is None and entry["attempts"] == 4
    assert frames_of(entry)[0] == "rank_main_sleeps_here"
    assert time.monotonic() - t0 >= 0.05 + 0.1 + 0.2, "pauses between attempts grow"
    assert doc["data"]["options"]["retries"] == 4

    calls.unlink()
    doc = run_probe(["--match", procs.marker, "--py-spy", str(flaky), "--retries", "2"])
    (entry,) = doc["data"]["processes"]
    assert (entry["attempts"], entry["dump"], entry["error"]) == (3, None, "Failed to get stack traces")


CUT_SHORT = """#!{python}
import json, os, pathlib, subprocess, sys
calls = pathlib.Path({calls!r})
res = subprocess.run([{pyspy!r}, *sys.argv[1:]], capture_output=True)
if sys.argv[1:2] == ["dump"]:
    calls.write_text(calls.read_text() + "x" if calls.exists() else "x")
    if len(calls.read_text()) <= {cut}:  # a nonblocking read that stopped at the innermost frame
        threads = json.loads(res.stdout)
        for t in threads:
            if t["thread_name"] == "MainThread":
                t["frames"] = t["frames"][:1]
        res.stdout = json.dumps(threads).encode()
sys.stdout.buffer.write(res.stdout)
sys.stderr.buffer.write(res.stderr)
sys.exit(res.returncode)
"""


def _cut_short_pyspy(tmp_path: Path, cut: int) -> Path:
    """A py-spy that returns the main thread cut to its innermost frame for its first ``cut`` dumps."""
    calls = tmp_path / "calls"
    calls.unlink(missing_ok=True)
    exe = tmp_path / "py-spy"
    exe.write_text(CUT_SHORT.format(python=sys.executable, calls=str(calls), pyspy=_pyspy(), cut=cut))
    exe.chmod(0o755)
    return exe


@needs_pyspy
def test_cut_short_main_thread_is_dumped_again(procs: Procs, tmp_path: Path) -> None:
    """A nonblocking read can return only the innermost frames of the main thread (no ``<module>``):
    that process is dumped again; a stack that stays cut short is kept, marked ``complete: false``."""
    pid = procs.rank(4)
    doc = run_probe(["--match", procs.marker, "--py-spy", str(_cut_short_pyspy(tmp_path, 2))])
    (entry,) = doc["data"]["processes"]
    assert (entry["pid"], entry["attempts"], entry["complete"], entry["error"]) == (pid, 3, True, None)
    assert frames_of(entry)[0] == "rank_main_sleeps_here" and frames_of(entry)[-1] == "<module>"

    doc = run_probe(
        ["--match", procs.marker, "--py-spy", str(_cut_short_pyspy(tmp_path, 99)), "--retries", "2"]
    )
    (entry,) = doc["data"]["processes"]
    assert (entry["attempts"], entry["complete"], entry["error"]) == (3, False, None)
    assert frames_of(entry) == ["rank_main_sleeps_here"], "the last stack read is kept: evidence"

    doc = run_probe(["--match", procs.marker, "--py-spy", str(_cut_short_pyspy(tmp_path, 99)), "--blocking"])
    (entry,) = doc["data"]["processes"]
    assert (entry["attempts"], entry["complete"]) == (1, False), "a paused process is read whole: no retry"


def test_main_thread_complete() -> None:
    probe = load_probe("stacks")

    def thread(name: str, *fns: str) -> dict[str, Any]:
        return {"thread_name": name, "frames": [{"name": f} for f in fns]}

    assert probe.main_thread_complete([thread("MainThread", "step", "main", "<module>")])
    assert probe.main_thread_complete([thread("MainThread", "_run_code", "<module>", "_run_module_as_main")])
    assert not probe.main_thread_complete([thread("MainThread", "_device_compute")])
    assert not probe.main_thread_complete([thread("Thread-1", "<module>"), thread("MainThread")])
    assert probe.main_thread_complete([thread("Thread-1", "run", "_bootstrap")]), (
        "no main thread: nothing to check"
    )


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
    # matches the probes' own command lines too (each holds --match=PATTERN), and nothing of another
    # test running at the same time (the marker is this test's own)
    pattern = f"{procs.marker}|{procs.marker}"
    sibling = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", f"--match={pattern}"], start_new_session=True
    )
    procs.started.append(sibling)  # type: ignore[arg-type]
    doc = run_probe([f"--match={pattern}"])
    assert [e["pid"] for e in doc["data"]["processes"]] == [pid]


# --------------------------------------------------------------------------------------------------
# The control side: collect_stacks and dumps_from_document (local transport and FakeTransport)
# --------------------------------------------------------------------------------------------------


def _host(name: str, transport: str = "ssh") -> Any:
    from robustctl.config import PythonSettings, SshSettings
    from robustctl.inventory import Host

    return Host(
        name=name,
        address="local" if transport == "local" else "127.0.0.2",
        transport=transport,  # type: ignore[arg-type]
        ssh=SshSettings(),
        python=PythonSettings(path=sys.executable),
    )


def _job(hosts: Sequence[Any], g: int, match: str, **process: Any) -> Any:
    from robustctl.config import ParallelLayout, RankProcessSpec
    from robustctl.inventory import Job

    spec = RankProcessSpec(match=match, **process) if match else None
    return Job("toy", tuple(hosts), ParallelLayout(dp=len(hosts) * g), g, spec)


def _entry(pid: int, rank: int | None, role: str = "main", **kw: Any) -> dict[str, Any]:
    frames = kw.pop("frames", ["rank_main_sleeps_here", "<module>"])
    entry = {
        "pid": pid,
        "ppid": 1,
        "rank": rank,
        "local_rank": None,
        "role": role,
        "parent_pid": None,
        "cmdline": "python train.py",
        "state": "S",
        "dump": [
            {
                "thread_id": 1,
                "thread_name": "MainThread",
                "os_thread_id": pid,
                "active": False,
                "owns_gil": False,
                "frames": [{"name": f, "filename": fn, "line": 1} for f, fn in frames]
                if frames and isinstance(frames[0], tuple)
                else [{"name": f, "filename": "train.py", "line": 1} for f in frames],
            }
        ],
        "error": None,
        "elapsed_s": 0.01,
    }
    entry.update(kw)
    return entry


@needs_pyspy
def test_collect_stacks_local_end_to_end(procs: Procs) -> None:
    """Real probe, real py-spy, local transport: mains, children, and a missing rank."""
    from robustctl.models import Outcome, Status
    from robustctl.stacks.collect import collect_stacks
    from robustctl.stacks.model import ProcessRole
    from robustctl.transport.pool import TransportPool

    pids = {r: procs.rank(r, "child") for r in (0, 1, 2)}
    job = _job([_host("localhost", "local")], 4, procs.marker)
    pool = TransportPool()
    seen: list[Any] = []
    try:
        c = collect_stacks(job, pool, progress=seen.append)
    finally:
        pool.close()
    assert [h.host for h in seen] == ["localhost"]
    (h,) = c.hosts
    assert (h.outcome, h.status, h.expected_ranks, h.found_ranks) == (
        Outcome.OK,
        Status.UNKNOWN,
        (0, 1, 2, 3),
        (0, 1, 2),
    )
    assert h.error and "3 not found" in h.error and h.py_spy_version
    assert c.missing_ranks == (3,) and c.status is Status.UNKNOWN
    assert [(d.rank, d.pid, d.role) for d in c.mains] == [(r, pids[r], ProcessRole.MAIN) for r in (0, 1, 2)]
    for d in c.mains:
        assert (
            d.host == "localhost"
            and d.readable
            and d.threads[0].frames[0].function == "rank_main_sleeps_here"
        )
        (child,) = [x for x in c.dumps if x.parent_pid == d.pid]
        assert child.rank == d.rank and child.role is ProcessRole.OTHER and child.readable
    assert len(c.dumps) == 6 and h.processes == 6 and h.unreadable == 0


def test_collect_stacks_keeps_every_host_outcome() -> None:
    """Unreachable, timed-out, crashed and healthy hosts: one result each, never an exception."""
    from robustctl.errors import HostUnreachable
    from robustctl.models import Outcome, Status
    from robustctl.stacks.collect import CollectSettings, collect_stacks
    from robustctl.testing.fake_transport import FakeTransport
    from robustctl.transport.base import CommandResult
    from robustctl.transport.pool import TransportPool

    hosts = [_host(n) for n in ("n1", "n2", "n3", "n4")]
    fake = FakeTransport(
        answers={
            "n1": {"stacks": {"processes": [_entry(11, 0), _entry(12, 1)], "py_spy": {"version": "0.4.3"}}},
            "n2": {"stacks": HostUnreachable("n2", "connection refused")},
            "n4": {"stacks": CommandResult("n4", 1, b"", b"Traceback ...\nMemoryError\n", 0.1)},
        },
        delay_s={"n3": 5.0},
    )
    job = _job(hosts, 2, "train")
    seen: list[Any] = []
    c = collect_stacks(
        job,
        TransportPool(override=fake),
        settings=CollectSettings(retries=0, host_timeout_s=1.5, probe_timeout_s=1),
        progress=seen.append,
    )
    by = {h.host: h for h in c.hosts}
    assert sorted(h.host for h in seen) == ["n1", "n2", "n3", "n4"]
    assert (by["n1"].outcome, by["n1"].status, by["n1"].error) == (Outcome.OK, Status.OK, None)
    assert by["n1"].py_spy_version == "0.4.3"
    assert (by["n2"].outcome, by["n2"].status) == (Outcome.UNREACHABLE, Status.UNKNOWN)
    assert "connection refused" in (by["n2"].error or "")
    assert (by["n3"].outcome, by["n3"].status) == (Outcome.TIMED_OUT, Status.UNKNOWN)
    assert (by["n4"].outcome, by["n4"].status) == (Outcome.FAILED, Status.UNKNOWN)
    assert "MemoryError" in (by["n4"].error or "")
    assert c.missing_ranks == (2, 3, 4, 5, 6, 7) and by["n3"].missing_ranks == (4, 5)
    assert [d.rank for d in c.dumps] == [0, 1]
    argv = {h: a for h, _, a in fake.calls}
    assert "--ranks" in argv["n1"] and argv["n1"][argv["n1"].index("--ranks") + 1] == "0-1"
    assert argv["n2"][argv["n2"].index("--ranks") + 1] == "2-3"
    assert "--match=train" in argv["n1"] and "--rank-env=RANK" in argv["n1"]


def test_observer_failures_are_not_evidence() -> None:
    """py-spy missing or the probe out of time: no ProcessDump (no suspect), the ranks are missing."""
    from robustctl.models import Status
    from robustctl.stacks.collect import collect_stacks
    from robustctl.testing.fake_transport import FakeTransport
    from robustctl.transport.pool import TransportPool

    missing = {
        "processes": [_entry(11, 0, dump=None, error="not dumped: py-spy not found")],
        "py_spy": None,
        "error": "py-spy not found (looked in PATH): install py-spy",
    }
    late = {
        "processes": [
            _entry(21, 2),
            _entry(22, 3, dump=None, error="not dumped: the probe's --timeout ran out"),
        ]
    }
    fake = FakeTransport(answers={"a": {"stacks": missing}, "b": {"stacks": late}})
    c = collect_stacks(_job([_host("a"), _host("b")], 2, "train"), TransportPool(override=fake))
    by = {h.host: h for h in c.hosts}
    assert [d.pid for d in c.dumps] == [21]
    assert c.missing_ranks == (0, 1, 3)
    assert by["a"].status is Status.UNKNOWN and "py-spy not found" in (by["a"].error or "")
    assert by["b"].status is Status.UNKNOWN and "--timeout ran out" in (by["b"].error or "")


def test_dumps_from_document_roles_and_errors() -> None:
    from robustctl.stacks.collect import dumps_from_document
    from robustctl.stacks.model import ProcessRole

    loader = [("_worker_loop", "/usr/lib/python3/site-packages/torch/utils/data/_utils/worker.py")]
    writer = [
        ("_checkpoint_writer_main", "minimegatron.py"),
        ("_bootstrap", "/usr/lib/python3.11/multiprocessing/process.py"),
    ]
    data = {
        "processes": [
            _entry(10, 4),
            _entry(11, 4, "child", parent_pid=10, frames=loader),
            _entry(12, 4, "child", parent_pid=10, frames=writer),
            _entry(13, 4, "child", parent_pid=10, dump=None, error="Permission denied (os error 1)"),
            _entry(14, 5, dump=None, error="Failed to find python version from target process", state="D"),
            _entry(15, 6, dump={"not": "a list"}),
            {"rank": 7},
        ]
    }
    dumps, observer = dumps_from_document("node03", data)
    roles = {d.pid: d.role for d in dumps}
    assert roles == {
        10: ProcessRole.MAIN,
        11: ProcessRole.DATALOADER,
        12: ProcessRole.CHECKPOINT,
        13: ProcessRole.OTHER,  # an unreadable child is never taken for a rank's main process
        14: ProcessRole.MAIN,
        15: ProcessRole.MAIN,
    }
    by = {d.pid: d for d in dumps}
    assert by[14].error and by[14].state == "D" and by[14].threads == () and by[14].rank == 5
    assert by[15].error and "unreadable py-spy output" in by[15].error
    assert by[11].parent_pid == 10 and by[11].host == "node03" and by[11].source == "node03:11"
    assert observer == ["probe reported a malformed process entry"]
    assert dumps_from_document("h", {"processes": None}) == ([], ["probe reported no process list"])


def test_collect_stacks_refuses_a_job_it_cannot_search() -> None:
    from robustctl.errors import ConfigError, InventoryError
    from robustctl.stacks.collect import collect_stacks
    from robustctl.testing.fake_transport import FakeTransport
    from robustctl.transport.pool import TransportPool

    pool = TransportPool(override=FakeTransport())
    with pytest.raises(ConfigError, match="no 'process:' section"):
        collect_stacks(_job([_host("a")], 1, ""), pool)
    with pytest.raises(InventoryError, match="not one of job"):
        collect_stacks(_job([_host("a")], 1, "x"), pool, hosts=[_host("zz")])


def test_settings_reach_the_probe() -> None:
    from robustctl.stacks.collect import CollectSettings, collect_stacks
    from robustctl.testing.fake_transport import FakeTransport
    from robustctl.transport.pool import TransportPool

    fake = FakeTransport()
    job = _job([_host("a")], 2, "-weird", rank_cmdline=r"--rank (\d+)")
    collect_stacks(
        job,
        TransportPool(override=fake),
        settings=CollectSettings(
            nonblocking=False, py_spy="/opt/py-spy", parallel=3, per_process_timeout_s=2
        ),
    )
    argv = fake.calls[0][2]
    assert "--match=-weird" in argv and r"--rank-cmdline=--rank (\d+)" in argv
    assert "--blocking" in argv and "--py-spy=/opt/py-spy" in argv
    assert argv[argv.index("--parallel") + 1] == "3" and argv[argv.index("--per-process-timeout") + 1] == "2"
    collect_stacks(job, TransportPool(override=fake), settings=CollectSettings(native=True))
    assert "--native" in fake.calls[1][2] and "--blocking" not in fake.calls[1][2]


def test_settings_from_diagnose_and_host_json() -> None:
    from robustctl.config import DiagnoseSettings
    from robustctl.models import Outcome, Status
    from robustctl.stacks.collect import CollectSettings, HostStacks

    s = CollectSettings.from_diagnose(DiagnoseSettings(concurrency=7, retries=0), native=True)
    assert (s.concurrency, s.retries, s.native, s.nonblocking) == (7, 0, True, True)
    h = HostStacks("n1", Outcome.UNREACHABLE, Status.UNKNOWN, "refused", (0, 1), ())
    assert h.as_dict()["missing_ranks"] == [0, 1] and h.as_dict()["outcome"] == "unreachable"


@needs_pyspy
def test_local_transport_finds_the_py_spy_beside_robustctl(
    procs: Procs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 8 item 7: ``.venv/bin/robustctl stacks`` on this machine, the job under the system
    ``python3``, py-spy only in robustctl's ``.venv/bin`` (not on PATH): the local transport tells
    the probe where it is."""
    from robustctl.config import PythonSettings
    from robustctl.models import Status
    from robustctl.stacks.collect import collect_stacks
    from robustctl.testing.fake_transport import FakeTransport
    from robustctl.transport.pool import TransportPool

    system_python = "/usr/bin/python3"
    beside = Path(sys.executable).parent / "py-spy"
    if not Path(system_python).is_file() or not beside.is_file():
        pytest.skip("needs a system python3 and py-spy beside the test's interpreter")
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if not (Path(d) / "py-spy").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    host = dataclasses.replace(_host("localhost", "local"), python=PythonSettings(path=system_python))
    pid = procs.rank(0)
    pool = TransportPool()
    try:
        c = collect_stacks(_job([host], 1, procs.marker), pool)
    finally:
        pool.close()
    (h,) = c.hosts
    assert h.status is Status.OK and h.py_spy_version, h.error
    (d,) = c.mains
    assert d.pid == pid and d.threads[0].frames[0].function == "rank_main_sleeps_here"

    # not for a wrapped host (e.g. docker exec: another filesystem) nor when the inventory names one
    fake = FakeTransport()
    wrapped = dataclasses.replace(
        host, python=PythonSettings(path="python3", wrapper=["docker", "exec", "-i", "t"])
    )
    collect_stacks(_job([wrapped], 1, procs.marker), TransportPool(override=fake))
    collect_stacks(_job([host], 1, procs.marker), TransportPool(override=fake))
    assert not any(a.startswith("--py-spy") for a in fake.calls[0][2])
    assert f"--py-spy={beside}" in fake.calls[1][2]


# --------------------------------------------------------------------------------------------------
# Issue 21, item 11: a pattern that backtracks is stopped by the scan's budget instead of holding the
# probe at full CPU until the command's timeout. (a|aa)+$ has no nested repeat, so it loads; on a line
# of 60 a's and a "!" it would try some 10^12 ways to split them.
# --------------------------------------------------------------------------------------------------
BACKTRACKS = "(a|aa)+$"
HOSTILE_TAIL = "a" * 60 + "!"


def test_the_match_budget_interrupts_a_backtracking_search() -> None:
    """The interval timer's exception stops ``re.search`` in the middle; the runner's own SIGALRM
    handler and timer (pytest-timeout's, here one of the test's) are put back."""
    probe = load_probe("stacks")
    fired: list[int] = []

    def runners_handler(signum: int, frame: Any) -> None:
        fired.append(signum)

    old_handler = signal.signal(signal.SIGALRM, runners_handler)
    old_timer = signal.setitimer(signal.ITIMER_REAL, 100.0)
    try:
        budget = probe.MatchBudget(0.2)
        found = budget.search(re.compile(r"rank=(\d+)"), "train.py rank=7", "--match", 1)
        assert found is not None and found.group(1) == "7"
        with pytest.raises(
            probe.MatchTimeout, match=r"^--match: .* 0\.2 s budget \(at the command line of pid 42\)"
        ):
            budget.search(re.compile(BACKTRACKS), HOSTILE_TAIL, "--match", 42)
        assert budget.left == 0.0
        with pytest.raises(probe.MatchTimeout, match="^--rank-cmdline: "):  # spent: refused at once
            budget.search(re.compile("x"), "x", "--rank-cmdline", 43)
        assert signal.getsignal(signal.SIGALRM) is runners_handler
        assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 100.0, "the runner's timer is running again"
    finally:
        signal.setitimer(signal.ITIMER_REAL, *old_timer)
        signal.signal(signal.SIGALRM, old_handler)
    assert fired == []


def test_the_match_budget_searches_off_the_main_thread_and_only_the_line_start() -> None:
    """No handler can be installed off the main thread: the search still runs (checked between
    searches). A command line is searched in its first MATCH_CMDLINE_CHARS characters only."""
    probe = load_probe("stacks")
    found: list[Any] = []
    t = threading.Thread(
        target=lambda: found.append(probe.MatchBudget(5.0).search(re.compile("b"), "abc", "-", 1))
    )
    t.start()
    t.join(30)
    assert found and found[0] is not None and found[0].group(0) == "b"
    needle = re.compile("NEEDLE")
    line = "x" * probe.MATCH_CMDLINE_CHARS + "NEEDLE"
    assert probe.MatchBudget(5.0).search(needle, line, "--match", 1) is None
    assert probe.MatchBudget(5.0).search(needle, line[len("NEEDLE") :], "--match", 1) is not None


def _interpreters() -> list[str]:
    """This Python and the oldest and newest others installed (a host may run any of 3.8 to 3.13)."""
    found = [sys.executable]
    for version in ("3.8", "3.13"):
        exe = next(iter(sorted(Path("/root/.pyenv/versions").glob(f"{version}*/bin/python{version}"))), None)
        found += [str(exe)] if exe else []
    return found


def _hostile(procs: Procs) -> int:
    """A process whose command line makes BACKTRACKS (after the marker) backtrack exponentially."""
    p = subprocess.Popen(
        ["bash", "-c", f'exec -a "{procs.marker} {HOSTILE_TAIL}" sleep 600'], start_new_session=True
    )
    procs.started.append(p)
    _wait_for(lambda: procs.marker in Path(f"/proc/{p.pid}/cmdline").read_bytes().decode(errors="replace"))
    return p.pid


def _fast_budget(source: bytes | str) -> Any:
    """The probe's source with MATCH_BUDGET_S cut to 0.5 s (the test waits half a second, not five)."""
    old, new = "MATCH_BUDGET_S = 5.0", "MATCH_BUDGET_S = 0.5"
    if isinstance(source, bytes):
        assert source.count(old.encode()) == 1
        return source.replace(old.encode(), new.encode())
    assert source.count(old) == 1
    return source.replace(old, new)


@pytest.mark.parametrize("python", _interpreters(), ids=lambda p: Path(p).name)
def test_a_backtracking_match_is_reported_not_spun(procs: Procs, python: str) -> None:
    pid = _hostile(procs)
    proc = subprocess.run(
        [python, "-", f"--match={procs.marker} {BACKTRACKS}", "--timeout", "60"],
        input=_fast_budget(probe_script("stacks")),
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    doc = json.loads(proc.stdout)
    assert doc["timed_out"] is False and doc["data"]["processes"] == []
    error = doc["data"]["error"]
    assert (
        error.startswith("--match: the pattern's searches ran past their 0.5 s budget")
        and error in doc["errors"]
    )
    assert f"pid {pid}" in error


def test_jobprocs_signals_nothing_when_its_scan_runs_out_of_budget(procs: Procs) -> None:
    from robustctl.probes import probe_source, streamed_script

    pid = _hostile(procs)
    stacks = _fast_budget(probe_source("stacks").decode("utf-8"))
    proc = subprocess.run(
        [
            sys.executable,
            "-",
            f"--match={procs.marker} {BACKTRACKS}",
            "--stop",
            "--grace",
            "1",
            "--kill-wait",
            "1",
        ],
        input=streamed_script("jobprocs", stacks),
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    data = json.loads(proc.stdout)["data"]
    assert data["stop"] is None and data["processes"] == []
    assert data["error"].startswith("--match: the pattern's searches ran past their 0.5 s budget")
    assert Path(f"/proc/{pid}").exists() and procs.started[-1].poll() is None, "nothing was signalled"


def test_jobprocs_stop_still_kills_when_a_later_scan_runs_out_of_budget(procs: Procs) -> None:
    """A process that appears after the first scan may make the pattern backtrack: the processes found
    first still get their SIGKILL, and the failed scan is the probe's error."""
    import argparse

    jobprocs, stacks = load_probe("jobprocs"), load_probe("stacks")
    scans: list[int] = []
    real_scan = stacks.scan

    def scan(*args: Any) -> Any:  # the first scan finds the victim; later ones run out of budget
        scans.append(1)
        if len(scans) > 1:
            raise stacks.MatchTimeout("--match: the pattern's searches ran past their 5 s budget (at pid 1)")
        return real_scan(*args)

    stacks.scan = scan
    jobprocs._SCAN = stacks
    victim = subprocess.Popen(  # ignores SIGTERM: only the SIGKILL ends it
        ["bash", "-c", f'trap "" TERM; exec -a "{procs.marker} victim" sleep 600'], start_new_session=True
    )
    procs.started.append(victim)
    _wait_for(
        lambda: procs.marker in Path(f"/proc/{victim.pid}/cmdline").read_bytes().decode(errors="replace")
    )
    args = argparse.Namespace(
        match=procs.marker, rank_env="RANK", local_rank_env="LOCAL_RANK", rank_cmdline=None, ranks=None,
        stop=True, grace=0.3, kill_wait=10.0,
    )  # fmt: skip
    doc = sys.modules["_prelude"].Document("jobprocs")
    jobprocs.collect(args, doc)
    stop = doc.data["stop"]
    assert victim.pid in stop["killed"] and victim.pid not in stop["remaining"]
    assert stop["error"].startswith("scan after SIGTERM: --match: the pattern's searches ran past")
    assert doc.data["error"] == stop["error"] and doc.errors == [stop["error"]]
    assert victim.wait(timeout=30) == -signal.SIGKILL
