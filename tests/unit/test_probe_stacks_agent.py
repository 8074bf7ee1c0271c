"""The ``stacks`` probe's debug-server path: socket discovery through ``/proc``, the fallback reasons,
the client copy kept equal to ``robustctl/agent/client.py``, and the controller's reading of it.

Sockets and servers here are real (AF_UNIX in the test's temporary directory); the one torch rank is a
real process running the agent.
"""

from __future__ import annotations

import ast
import http.server
import json
import os
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from robustctl.probes import load_probe, probe_script
from robustctl.stacks.collect import (
    DEBUG_SERVER,
    PY_SPY,
    StackCollection,
    debug_threads,
    dumps_from_document,
    sources_from_document,
)

REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / "robustctl" / "agent" / "client.py"
PROBE = REPO / "diagnostics" / "stacks.py"
COPIED = (
    "MAX_RESPONSE_BYTES",
    "MAX_ERROR_CHARS",
    "_HANDLER",
    "FetchError",
    "_UnixConnection",
    "_one_line",
    "fetch",
)

FAULTHANDLER = """\
Current thread 0x00007f25a78266c0 (most recent call first):
  <no Python frame>

Thread 0x00007f25a88286c0 (most recent call first):
  File "/job/threading.py", line 331 in wait

Thread 0x00007f25cb011b80 (most recent call first):
  File "/job/train.py", line 12 in all_reduce
  File "/job/train.py", line 40 in step
  File "/job/train.py", line 90 in <module>
"""
PYSPY_TEXT = """\
Process 42: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 42 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2800)
    Trainer.step (train.py:40)
    <module> (train.py:90)
"""


def probe() -> Any:
    return load_probe("stacks")


def _nodes(path: Path) -> dict[str, str]:
    """``{name: ast.dump}`` of the top-level definitions and assignments of a module."""
    out: dict[str, str] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[node.name] = ast.dump(node)
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = ast.dump(node)
    return out


def test_the_probes_client_is_the_agents_client() -> None:
    """One logic, two copies: the probe streams alone, so it carries the agent client's code, and
    every copied definition must stay equal to the original."""
    client, copy = _nodes(CLIENT), _nodes(PROBE)
    for name in COPIED:
        assert name in copy, f"{name} missing from the probe's copy"
        assert copy[name] == client[name], (
            f"{name} differs between robustctl/agent/client.py and diagnostics/stacks.py"
        )


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path (a unix socket path is at most 107 bytes)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="sdbg", dir="/tmp"))
    try:
        yield d
    finally:
        for p in d.glob("**/*"):
            if not p.is_dir():
                p.unlink()
        for p in sorted(d.glob("**/*"), reverse=True):
            p.rmdir()
        d.rmdir()


def test_a_listening_socket_of_the_process_is_found_through_proc(short_dir: Path) -> None:
    p = probe()
    path = str(short_dir / "rank00007.sock")
    other = str(short_dir / "rank00009.sock")
    idle = str(short_dir / "idle.sock")
    listener, second, bound = (socket.socket(socket.AF_UNIX) for _ in range(3))
    try:
        listener.bind(path)
        listener.listen(1)
        second.bind(other)
        second.listen(1)
        bound.bind(idle)  # bound, never listening: not a server
        inodes = p.socket_inodes("/proc", os.getpid())
        assert os.fstat(listener.fileno()).st_ino in inodes
        found = p.unix_listeners("/proc", os.getpid(), inodes)
        assert path in found and other in found and idle not in found
        assert p.pick_agent_socket(found, 7) == path
        assert p.pick_agent_socket(found, 9) == other
        assert p.pick_agent_socket(found, None) is None, "two agent sockets and no rank: no guess"
        entry = {"pid": os.getpid(), "rank": 7}
        assert p.find_agent_socket("/proc", entry, ({}, {})) == (path, "process")
    finally:
        for s in (listener, second, bound):
            s.close()


def test_a_socket_from_the_heartbeat_when_the_process_shows_none(short_dir: Path) -> None:
    p = probe()
    sock = str(short_dir / "rank00003.sock")
    (short_dir / "rank00003.json").write_text(json.dumps({"rank": 3, "pid": 999999, "debug_socket": sock}))
    (short_dir / "rank00004.json").write_text("{not json")
    args = SimpleNamespace(heartbeats=[], run_dir=[str(short_dir)])
    beats = p.read_heartbeats(p.heartbeat_patterns(args))
    assert beats == ({999999: sock}, {3: sock})
    assert p.find_agent_socket("/proc", {"pid": 999999, "rank": 3}, beats) == (sock, "heartbeat")
    assert p.find_agent_socket("/proc", {"pid": 999998, "rank": 3}, beats) == (sock, "heartbeat")
    assert p.find_agent_socket("/proc", {"pid": 999998, "rank": 5}, beats) == (None, None)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def serve(path: str, answer: Any) -> _Server:
    """A debug server on ``path``: ``answer(handler) -> (status, body)``, or None to never answer."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got = answer(self.path.split("/handler/", 1)[-1].split("?")[0])
            if got is None:
                time.sleep(5)
                return
            status, body = got
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: Any) -> None:
            pass

        def address_string(self) -> str:
            return "unix"

    srv = _Server(path, Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def _args(**kw: Any) -> SimpleNamespace:
    base = {"debug_timeout": 2.0, "native": False, "nonblocking": True}
    base.update(kw)
    return SimpleNamespace(**base)


def test_debug_one_reads_every_handler(short_dir: Path) -> None:
    p = probe()
    path = str(short_dir / "rank00001.sock")
    texts = {"dump_traceback": FAULTHANDLER, "pyspy_dump": PYSPY_TEXT, "fr_trace_json": '{"entries": []}'}
    srv = serve(path, lambda h: (200, texts[h].encode()))
    try:
        entry: dict[str, Any] = {}
        assert p.debug_one(entry, path, _args(), time.monotonic() + 10, p.FrBudget(1 << 20))
    finally:
        srv.shutdown()
        srv.server_close()
    assert entry["source"] == DEBUG_SERVER and entry["debug_socket"] == path
    assert entry["debug"] == {
        "traceback": FAULTHANDLER,
        "pyspy": PYSPY_TEXT,
        "fr_trace": '{"entries": []}',
        "errors": [],
    }


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (lambda h: (500, b"Failed to start py-spy, not installed?"), "server error"),
        (lambda h: None, "timed out"),
        (lambda h: (404, b"no such handler"), "server error"),
    ],
)
def test_fallback_reasons(short_dir: Path, answer: Any, reason: str) -> None:
    p = probe()
    path = str(short_dir / "rank00002.sock")
    srv = serve(path, answer)
    try:
        entry: dict[str, Any] = {}
        ok = p.debug_one(entry, path, _args(debug_timeout=0.3), time.monotonic() + 10, p.FrBudget(1 << 20))
    finally:
        srv.shutdown()
        srv.server_close()
    assert not ok and entry["fallback_reason"] == reason, entry
    assert path in entry["fallback_detail"] and "source" not in entry


def test_no_socket_at_the_path_is_no_socket(short_dir: Path) -> None:
    p = probe()
    entry: dict[str, Any] = {}
    gone = str(short_dir / "rank00005.sock")
    assert not p.debug_one(entry, gone, _args(), time.monotonic() + 5, p.FrBudget(1 << 20))
    assert entry["fallback_reason"] == "no socket"
    assert [
        p.fallback_reason(x) for x in ("x: Connection refused", "x: did not answer within 3 s", "x: 500")
    ] == [
        "no socket",
        "timed out",
        "server error",
    ]


def test_a_trace_past_the_probes_budget_is_left_out(short_dir: Path) -> None:
    p = probe()
    path = str(short_dir / "rank00006.sock")
    texts = {"dump_traceback": FAULTHANDLER, "pyspy_dump": PYSPY_TEXT, "fr_trace_json": "x" * 1000}
    srv = serve(path, lambda h: (200, texts[h].encode()))
    try:
        entry: dict[str, Any] = {}
        assert p.debug_one(entry, path, _args(), time.monotonic() + 10, p.FrBudget(999))
    finally:
        srv.shutdown()
        srv.server_close()
    assert entry["debug"]["fr_trace"] is None and "budget" in entry["debug"]["errors"][0]


def _doc_entry(**kw: Any) -> dict[str, Any]:
    e = {
        "pid": 42,
        "ppid": 1,
        "rank": 3,
        "role": "main",
        "cmdline": "python train.py",
        "state": "S",
        "dump": None,
    }
    e.update(kw)
    return e


def test_the_controller_reads_the_debug_servers_texts() -> None:
    whole = {"traceback": FAULTHANDLER, "pyspy": PYSPY_TEXT, "fr_trace": '{"entries": []}', "errors": []}
    threads, error, used = debug_threads(whole)
    assert error is None and used == "pyspy_dump"
    assert [f.function for f in threads[0].frames] == ["all_reduce", "Trainer.step", "<module>"]
    cut = dict(whole, pyspy=PYSPY_TEXT.replace("    <module> (train.py:90)\n", ""))
    threads, error, used = debug_threads(cut)
    assert used == "dump_traceback", "a cut-short py-spy text gives way to faulthandler's whole one"
    main = next(t for t in threads if t.is_main)
    assert [f.function for f in main.frames] == ["all_reduce", "step", "<module>"]
    assert debug_threads({"traceback": "garbage", "pyspy": None})[1].startswith(
        "unreadable debug-server answer"
    )

    data = {
        "processes": [
            _doc_entry(source="debug-server", debug=whole, debug_socket="/r/debug/rank00003.sock"),
            _doc_entry(
                pid=43,
                rank=4,
                source="py-spy",
                fallback_reason="no socket",
                fallback_detail="no debug-server socket",
                dump=[
                    {
                        "thread_name": "MainThread",
                        "frames": [{"name": "<module>", "filename": "t.py", "line": 1}],
                    }
                ],
            ),
        ]
    }
    dumps, observer = dumps_from_document("node01", data)
    assert observer == [] and [d.error for d in dumps] == [None, None]
    assert dumps[0].main_thread is not None and dumps[0].main_thread.frames[0].function == "all_reduce"
    sources, traces = sources_from_document("node01", data)
    assert [(s.rank, s.source, s.fallback_reason, s.stacks_from) for s in sources] == [
        (3, DEBUG_SERVER, None, "pyspy_dump"),
        (4, PY_SPY, "no socket", None),
    ]
    assert [(t.rank, t.data) for t in traces] == [(3, b'{"entries": []}')]
    col = StackCollection("j", tuple(dumps), (), (3, 4), (), 0.0, 0.0, sources=tuple(sources))
    assert col.evidence_line() == "evidence: 1 rank via the debug server, 1 via py-spy (no socket: 1)"


AGENT_RANK = """
import os, sys, time
import torch
import robustctl.agent
agent = robustctl.agent.start(sys.argv[1], rank=2, world_size=4, torch=True, socket_dir=sys.argv[2])
print(agent.debug_socket, flush=True)
def rank_waits_here():
    time.sleep(300)
rank_waits_here()
"""


@pytest.mark.external
def test_probe_reads_a_real_agent_rank_and_py_spy_only_when_told(short_dir: Path, tmp_path: Path) -> None:
    """A real rank process running the agent (torch's _WorkerServer): the probe reads it through the
    socket it finds in /proc; with --no-debug-server, py-spy reads it as before."""
    pytest.importorskip("torch")
    script = tmp_path / "agent_rank.py"
    marker = f"sdbg-{os.getpid()}"
    script.write_text(AGENT_RANK)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "run"), str(short_dir), marker],
        stdout=subprocess.PIPE,
        env={**env, "RANK": "2"},
        cwd=REPO,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        sock = proc.stdout.readline().decode().strip()
        assert sock.endswith("rank00002.sock"), sock
        docs = {}
        for extra in ([], ["--no-debug-server"]):
            out = subprocess.run(
                [sys.executable, "-", "--match", marker, *extra],
                input=probe_script("stacks"),
                capture_output=True,
                timeout=60,
                env=env,
            )
            assert out.returncode == 0, out.stderr.decode()
            docs[bool(extra)] = json.loads(out.stdout)["data"]
        (main,) = [e for e in docs[False]["processes"] if e["role"] == "main"]
        assert (main["pid"], main["source"], main["debug_socket"]) == (proc.pid, "debug-server", sock)
        assert main["debug_socket_from"] == "process" and main["fallback_reason"] is None
        assert main["error"] is None and main["dump"] is None
        assert "rank_waits_here" in main["debug"]["traceback"] and "rank_waits_here" in main["debug"]["pyspy"]
        assert json.loads(main["debug"]["fr_trace"])["version"]
        (plain,) = [e for e in docs[True]["processes"] if e["role"] == "main"]
        assert plain["source"] == "py-spy" and plain["debug"] is None and plain["fallback_reason"] is None
        assert plain["dump"] and docs[True]["options"]["debug_server"] is False
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def _collection(ranks: range, traced: range, *, stack: str = "all_reduce") -> StackCollection:
    from robustctl.stacks.collect import FrTrace, ProcessSource
    from robustctl.stacks.model import Frame, ProcessDump, ThreadStack

    fr = REPO / "tests" / "data" / "flight-recorder" / "cascade"
    dumps = tuple(
        ProcessDump(
            (ThreadStack("1", "MainThread", (Frame(stack, "t.py"), Frame("<module>", "t.py"))),),
            rank=r,
            host="node01",
            pid=100 + r,
        )
        for r in ranks
    )
    sources = tuple(
        ProcessSource("node01", 100 + r, r, True, DEBUG_SERVER if r in traced else PY_SPY) for r in ranks
    )
    traces = tuple(
        FrTrace("node01", 100 + r, r, (fr / f"nccl_trace_rank_{r}.json").read_bytes()) for r in traced
    )
    return StackCollection("j", dumps, (), tuple(ranks), (), 0.0, 0.0, sources=sources, fr_traces=traces)


def test_flight_recorder_traces_join_the_verdict_only_when_every_rank_has_one_and_the_job_is_not_running() -> (
    None
):
    from robustctl.inventory.topology import ParallelLayout
    from robustctl.stacks.live import with_traces
    from robustctl.stacks.result import analyze_stacks

    job = SimpleNamespace(layout=ParallelLayout(tp=2, pp=2), ranks_per_host=4)
    col = _collection(range(4), range(4))
    still = analyze_stacks(col.dumps, previous=col.dumps)  # two identical samples: not running
    joined = with_traces(still, col, job)  # type: ignore[arg-type]
    assert joined.flight_recorder is not None and joined.flight_recorder.likely_culprits == (1,)
    assert joined.agreement is not None and joined.agreement.verdict == "flight-recorder-only"
    assert joined.status.value == "critical", "the cascade's root is named though the stacks look alike"

    partial = _collection(range(4), range(3))
    left = with_traces(still, partial, job)  # type: ignore[arg-type]
    assert left.flight_recorder is None and "rank 3 has none (read by py-spy)" in left.notes[-1]

    moved = _collection(range(4), range(4), stack="recv")
    running = analyze_stacks(moved.dumps, previous=col.dumps)
    out = with_traces(running, moved, job)  # type: ignore[arg-type]
    assert out.flight_recorder is None and "the job is running" in out.notes[-1]

    one = analyze_stacks(col.dumps)  # one sample, no outlier
    out = with_traces(one, col, job)  # type: ignore[arg-type]
    assert out.flight_recorder is None and out.status == one.status and "one sample" in out.notes[-1]


def test_debug_server_settings_and_the_jobs_heartbeats_reach_the_probe() -> None:
    from robustctl.config import ParallelLayout, ProgressSpec, PythonSettings, RankProcessSpec, SshSettings
    from robustctl.inventory import Host, Job
    from robustctl.stacks.collect import CollectSettings, collect_stacks
    from robustctl.testing.fake_transport import FakeTransport
    from robustctl.transport.pool import TransportPool

    host = Host(
        name="n1",
        address="127.0.0.2",
        transport="ssh",
        ssh=SshSettings(),
        python=PythonSettings(path=sys.executable),
    )
    job = Job(
        "toy",
        (host,),
        ParallelLayout(dp=2),
        2,
        RankProcessSpec(match="train"),
        progress=ProgressSpec(files="/run/{host}/progress/rank*.json"),
    )
    fake = FakeTransport()
    collect_stacks(job, TransportPool(override=fake), settings=CollectSettings(debug_timeout_s=1.5))
    argv = fake.calls[0][2]
    assert "--heartbeats=/run/n1/progress/rank*.json" in argv
    assert argv[argv.index("--debug-timeout") + 1] == "1.5" and "--no-debug-server" not in argv
    collect_stacks(job, TransportPool(override=fake), settings=CollectSettings(debug_server=False))
    argv = fake.calls[1][2]
    assert "--no-debug-server" in argv and not any(a.startswith("--heartbeats") for a in argv)
