"""robustctl.agent in real processes: the SIGUSR1 stack dump, the per-rank debug server asked through
robustctl.agent.client, and a Flight Recorder dump of a 2-rank gloo job; the client's bounds against
hand-made servers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from robustctl.agent import torchside
from robustctl.agent.client import FetchError, fetch

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 60.0
"""Longest wait for a child process to get ready or answer (torch's import takes seconds on a busy box)."""

STACKS_JOB = """
import os, signal, sys, time
from pathlib import Path
import robustctl.agent
run, chain = Path(sys.argv[1]), sys.argv[2] == "chain"
if chain:
    signal.signal(signal.SIGUSR1, lambda *a: (run / "chained").write_text("yes"))
agent = robustctl.agent.start(run, rank=2, world_size=4, torch=False)
def waiting_in_a_known_function():
    (run / "ready").write_text(str(os.getpid()))  # from inside: a signal on "ready" finds it here
    while not (run / "stop").exists():
        time.sleep(0.01)
waiting_in_a_known_function()
agent.close()
"""

SERVER_JOB = """
import sys, time
from pathlib import Path
import torch
import robustctl.agent
run = Path(sys.argv[1])
agent = robustctl.agent.start(run, rank=1, world_size=2)
agent.step(0, phase="ready")
def blocked_in_a_known_function():
    while not (run / "stop").exists():
        time.sleep(0.01)
blocked_in_a_known_function()
agent.close()
"""

GLOO_JOB = """
import sys
import torch
import robustctl.agent
from robustctl.agent import torchside
run, rank, port = sys.argv[1], int(sys.argv[2]), sys.argv[3]
agent = robustctl.agent.start(run, rank=rank, world_size=2, flight_recorder=64, debug_server=False)
import torch.distributed as dist
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
t = torch.ones(8)
dist.all_reduce(t)
dist.broadcast(t, 0)
dist.all_gather([torch.zeros(8), torch.zeros(8)], t)
dist.barrier()
print("late:", torchside.enable_flight_recorder(64), flush=True)
print("dumped:", agent.dump_flight_recorder(), flush=True)
dist.destroy_process_group()
agent.close()
"""


def child(code: str, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def end(proc: subprocess.Popen[bytes]) -> None:
    """Kill ``proc`` if it still runs, reap it and close its pipe."""
    proc.kill()
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def poll(what: str, ok: Callable[[], Any], proc: subprocess.Popen[bytes]) -> Any:
    """``ok()``'s first truthy value, polled until the deadline (fails early when ``proc`` exits)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        got = ok()
        if got:
            return got
        if proc.poll() is not None:
            out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
            pytest.fail(f"{what}: the child exited {proc.returncode}: {out[-2000:]}")
        assert time.monotonic() < deadline, f"{what}: not within {DEADLINE_S}s"
        time.sleep(0.02)


def text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A run directory with a short path (a unix socket path has at most 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="ag", dir="/tmp") as d:
        yield Path(d)


@pytest.mark.parametrize("chain", ["chain", "alone"])
def test_sigusr1_writes_every_threads_stack_and_keeps_the_handler_before_it(
    tmp_path: Path, chain: str
) -> None:
    proc = child(STACKS_JOB, str(tmp_path), chain)
    try:
        pid = int(poll("ready", lambda: text(tmp_path / "ready"), proc))
        os.kill(pid, signal.SIGUSR1)
        stacks = tmp_path / "stacks" / "rank00002.txt"
        dump = poll("stack dump", lambda: "in <module>" in text(stacks) and text(stacks), proc)
        assert "waiting_in_a_known_function" in dump and "Thread 0x" in dump
        if chain == "chain":
            poll("the earlier handler ran", lambda: text(tmp_path / "chained") == "yes", proc)
        (tmp_path / "stop").write_text("")
        assert proc.wait(timeout=DEADLINE_S) == 0, "SIGUSR1 no longer ends the process"
    finally:
        end(proc)
    assert not (tmp_path / "chained").exists() or chain == "chain"


@pytest.mark.slow
@pytest.mark.external
def test_the_debug_server_answers_over_the_unix_socket_in_the_heartbeat(short_dir: Path) -> None:
    """The socket path is in the heartbeat; ``dump_traceback`` shows where the main thread waits."""
    pytest.importorskip("torch")
    proc = child(SERVER_JOB, str(short_dir))
    beat = short_dir / "rank00001.json"
    try:
        doc = json.loads(poll("heartbeat", lambda: text(beat), proc))
        sock = doc["debug_socket"]
        assert sock == str(short_dir / "debug" / "rank00001.sock")
        assert fetch(sock, "ping", 10.0) == b"pong"
        trace = fetch(sock, "dump_traceback", 10.0).decode()
        assert "blocked_in_a_known_function" in trace, trace
        with pytest.raises(FetchError, match=r"no_such_handler answered 404"):
            fetch(sock, "no_such_handler", 10.0)
        (short_dir / "stop").write_text("")
        assert proc.wait(timeout=DEADLINE_S) == 0
    finally:
        end(proc)
    assert not Path(sock).exists(), "close removes the socket"
    assert "debug_socket" not in json.loads(beat.read_text()), "the last heartbeat names no dead socket"
    with pytest.raises(FetchError, match=rf"debug server {sock}: ping: No such file"):
        fetch(sock, "ping", 1.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.external
def test_flight_recorder_dump_of_a_two_rank_gloo_job_holds_its_collectives(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    port = str(free_port())
    procs = [child(GLOO_JOB, str(tmp_path), str(r), port) for r in (0, 1)]
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=DEADLINE_S * 2)
            outs.append(out.decode(errors="replace"))
            assert p.returncode == 0, outs[-1][-2000:]
    finally:
        for p in procs:
            end(p)
    for rank, out in enumerate(outs):
        path = tmp_path / "fr" / f"rank{rank:05d}.json"
        assert f"dumped: {path}" in out
        assert "late: Flight Recorder asked for after init_process_group" in out
        doc = json.loads(path.read_text())
        ops = [e["profiling_name"] for e in doc["entries"]]
        assert ops == ["gloo:all_reduce", "gloo:broadcast", "gloo:all_gather", "gloo:barrier"], ops
        assert [e["collective_seq_id"] for e in doc["entries"]] == [1, 2, 3, 4]
        assert doc["entries"][0]["input_sizes"] == [[8]]


def test_a_socket_path_too_long_is_refused_before_torch_is_asked() -> None:
    server, why = torchside.start_worker_server("/tmp/" + "d" * 100 + "/rank00000.sock")
    assert server is None and why is not None and "is 120 bytes, over the 107" in why


def serve_once(path: str, answer: bytes | None) -> threading.Thread:
    """A unix-socket server that reads one request and sends ``answer`` (None: never answers)."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)

    def run() -> None:
        conn, _ = srv.accept()
        with conn, srv:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(4096)
            if answer is None:
                conn.recv(1)  # blocks until the client gives up
            else:
                conn.sendall(answer)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_the_client_bounds_time_and_size(short_dir: Path) -> None:
    sock = str(short_dir / "s.sock")
    t = serve_once(sock, None)
    with pytest.raises(FetchError, match="dump_traceback did not answer within 0.3 s"):
        fetch(sock, "dump_traceback", 0.3)
    t.join(DEADLINE_S)
    os.unlink(sock)

    big = b"x" * 5000
    t = serve_once(sock, b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + big)
    with pytest.raises(FetchError, match="answers more than 4096 bytes"):
        fetch(sock, "fr_trace_json", 10.0, max_bytes=4096)
    t.join(DEADLINE_S)
    os.unlink(sock)

    t = serve_once(sock, b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\nConnection: close\r\n\r\n" + big)
    with pytest.raises(FetchError, match="answers 5000 bytes, over the 4096 bound"):
        fetch(sock, "fr_trace_json", 10.0, max_bytes=4096)
    t.join(DEADLINE_S)
    os.unlink(sock)

    t = serve_once(
        sock, b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 26\r\n\r\nsh: 1: py-spy: not found\n\n"
    )
    with pytest.raises(
        FetchError, match="pyspy_dump answered 500 Internal Server Error: sh: 1: py-spy: not found"
    ):
        fetch(sock, "pyspy_dump", 10.0, params={"native": "1"})
    t.join(DEADLINE_S)

    with pytest.raises(ValueError, match="not a debug-server handler name"):
        fetch(sock, "../x", 1.0)
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        fetch(sock, "ping", 0)


def test_the_client_runs_as_a_streamed_program_on_a_host(short_dir: Path) -> None:
    """The client's source fed to ``python3 -`` (as the control side streams a probe): the answer on
    stdout, exit 0; no server: one line on stderr, exit 3; bad arguments: exit 64."""
    source = (REPO / "robustctl" / "agent" / "client.py").read_bytes()
    sock = str(short_dir / "c.sock")
    t = serve_once(sock, b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\npong")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}  # no PYTHONPATH: robustctl is not importable
    run = subprocess.run(
        [sys.executable, "-I", "-", sock, "ping", "10"],
        input=source,
        capture_output=True,
        env=env,
        timeout=60,
    )
    t.join(DEADLINE_S)
    assert (run.returncode, run.stdout) == (0, b"pong"), run.stderr
    os.unlink(sock)
    run = subprocess.run(
        [sys.executable, "-I", "-", sock, "ping", "1"], input=source, capture_output=True, env=env, timeout=60
    )
    assert run.returncode == 3 and run.stdout == b""
    assert run.stderr.decode().strip().startswith(f"robustctl.agent.client: debug server {sock}: ping:")
    run = subprocess.run(
        [sys.executable, "-I", "-", sock], input=source, capture_output=True, env=env, timeout=60
    )
    assert run.returncode == 64 and b"usage: SOCKET HANDLER" in run.stderr
