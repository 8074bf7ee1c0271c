"""robustctl.agent, the in-job half: heartbeats robustctl's own reader reads, the rate limit (an injected
clock), NaN events inside the rate-limit window, I/O trouble counted and never raised, import purity.

The parts that need a real process (SIGUSR1, the debug server, Flight Recorder over gloo) are in
tests/unit/test_agent_process.py.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import robustctl.agent
from robustctl.agent import HEARTBEAT_MAX_BYTES, MAX_NAN_EVENTS, Agent, jsonsafe
from robustctl.config import ProgressSpec
from robustctl.jobcode import progress
from robustctl.models import NON_FINITE_JSON
from robustctl.watch.signals import parse_progress_output

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 30.0
"""Longest wait for the background writer (it writes within 1.5 intervals)."""


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def strict(text: str) -> Any:
    def refuse(token: str) -> None:
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def beat(agent: Agent) -> dict[str, Any]:
    doc = strict(agent.heartbeat_path.read_text())
    assert isinstance(doc, dict)
    return doc


def make(tmp_path: Path, **kw: Any) -> tuple[Agent, Clock]:
    clock = Clock()
    kw.setdefault("flusher", False)
    agent = robustctl.agent.start(tmp_path / "run", rank=3, world_size=8, torch=False, clock=clock, **kw)
    return agent, clock


def test_the_agents_spellings_and_bounds_are_the_control_sides() -> None:
    assert jsonsafe.NON_FINITE_JSON == NON_FINITE_JSON
    assert HEARTBEAT_MAX_BYTES == progress.MAX_HEARTBEAT_BYTES


def test_the_heartbeat_is_read_by_robustctls_progress_reader(tmp_path: Path) -> None:
    """The file parse_heartbeat reads (rank, step, time), through the reader program the hosts run."""
    agent, _ = make(tmp_path)
    agent.step(7, loss=2.5, tokens=4096, lr=0.1)
    doc = beat(agent)
    assert (doc["rank"], doc["step"], doc["phase"], doc["loss"], doc["tokens"], doc["lr"]) == (
        3, 7, "train", 2.5, 4096, 0.1
    )  # fmt: skip
    assert doc["pid"] == os.getpid() and doc["world_size"] == 8 and doc["step_s"] is None
    spec = ProgressSpec(files=str(agent.run_dir / "rank*.json"))
    entry, why = progress.parse_heartbeat(
        "h1", str(agent.heartbeat_path), agent.heartbeat_path.read_text(), 0.0, spec
    )
    assert why is None and entry is not None
    assert (entry.rank, entry.step, entry.at) == (3, 7, doc["time"])

    out = subprocess.run(
        [
            sys.executable,
            "-c",
            progress.READER,
            "files",
            spec.files or "",
            "64",
            str(progress.MAX_HEARTBEAT_BYTES),
        ],
        capture_output=True,
        check=True,
        timeout=60,
    )
    files = list(progress.reader_files("h1", json.loads(out.stdout), spec, None))
    assert len(files) == 1 and not isinstance(files[0], str) and files[0].entry == entry
    agent.close()


def test_a_non_finite_loss_is_spelled_as_the_watch_reads_it(tmp_path: Path) -> None:
    """The watch's NaN rule reads the heartbeat's ``loss`` (and ``step_s``) through
    ``parse_progress_output``: the agent's NaN and infinities come out as such."""
    agent, clock = make(tmp_path)
    spec = ProgressSpec(files=str(agent.run_dir / "rank*.json"))
    for i, loss in enumerate([math.nan, math.inf, -math.inf, 2.5]):
        clock.now += 10
        agent.step(i + 1, loss=loss, step_s=0.25)
        assert beat(agent)["loss"] == (NON_FINITE_JSON[repr(loss)] if not math.isfinite(loss) else loss)
        out = subprocess.run(
            [sys.executable, "-c", progress.READER, "files", spec.files or "", "64", "65536"],
            capture_output=True,
            check=True,
            timeout=60,
        )
        (sample,) = parse_progress_output("h1", out.stdout, spec, None).samples
        assert sample.step == i + 1 and sample.step_time_s == 0.25
        assert sample.loss is not None and (
            sample.loss == loss or (math.isnan(sample.loss) and math.isnan(loss))
        )
    agent.close()


def test_the_rate_limit_writes_the_first_step_then_once_per_interval(tmp_path: Path) -> None:
    agent, clock = make(tmp_path, interval_s=1.0)
    agent.step(1, loss=1.0)
    assert beat(agent)["step"] == 1 and agent.writes == 1, "the first step is written at once"
    for s in range(2, 6):
        clock.now += 0.2
        agent.step(s, loss=1.0)
    assert beat(agent)["step"] == 1 and agent.writes == 1, "steps inside the interval are held back"
    clock.now += 0.2  # 1.0 s after the first write
    agent.step(6, loss=1.0)
    doc = beat(agent)
    assert doc["step"] == 6 and agent.writes == 2
    assert doc["step_s"] == pytest.approx(0.2), "step_s: the time between two calls"
    clock.now += 0.1
    agent.step(7, loss=1.0, phase="eval")
    assert beat(agent)["phase"] == "eval" and agent.writes == 3, "a new phase is written at once"
    clock.now += 0.1
    agent.step(8, loss=1.0, phase="eval", step_s=0.05)
    assert beat(agent)["step"] == 7
    agent.close()
    doc = beat(agent)
    assert (doc["step"], doc["step_s"], agent.writes) == (8, 0.05, 4), "close writes the held-back step"
    agent.close()
    agent.step(9)
    assert agent.writes == 4 and beat(agent)["step"] == 8, "close is idempotent; a step after it is ignored"


def test_a_nan_loss_writes_its_event_at_once_inside_the_rate_limit_window(tmp_path: Path) -> None:
    agent, clock = make(tmp_path, interval_s=60.0)
    agent.step(1, loss=1.0)
    clock.now += 0.01
    agent.step(2, loss=math.nan, tokens=10)
    events = agent.run_dir / "events"
    event = strict((events / "rank00003-2-nan.json").read_text())
    assert (event["kind"], event["rank"], event["step"], event["loss"], event["tokens"]) == (
        "nan",
        3,
        2,
        "NaN",
        10,
    )
    assert beat(agent)["loss"] == "NaN", "the heartbeat shows the NaN at once too"
    for s in range(3, 3 + 2 * MAX_NAN_EVENTS):
        clock.now += 0.01
        agent.step(s, loss=-math.inf)
    assert len(list(events.iterdir())) == MAX_NAN_EVENTS == agent.nan_events
    assert strict((events / "rank00003-3-nan.json").read_text())["loss"] == "-Infinity"
    agent.close()


def test_a_held_back_step_is_written_by_the_background_writer(tmp_path: Path) -> None:
    """The writer thread writes the first step, and a step held back by the rate limit, without
    another call: a rank that hangs right after it still shows that step."""
    agent = robustctl.agent.start(tmp_path / "run", rank=0, world_size=1, torch=False, interval_s=0.05)
    try:
        agent.step(1)
        agent.step(2)  # within 50 ms of step 1 on any machine that runs this test suite at all
        deadline = time.monotonic() + DEADLINE_S
        while not agent.heartbeat_path.exists() or beat(agent)["step"] != 2:
            assert time.monotonic() < deadline, "the held-back step was never written"
            time.sleep(0.01)
    finally:
        agent.close()


def test_extra_fields_are_bounded_and_cannot_overwrite_the_core_ones(tmp_path: Path) -> None:
    agent, clock = make(tmp_path)
    agent.step(1, rank="x", pid=0, timings={"a": 1.0}, big=10**5000, text="é" * 5000, bad=object())
    doc = beat(agent)
    assert doc["rank"] == 3 and doc["pid"] == os.getpid() and doc["timings"] == {"a": 1.0}
    assert doc["big"] == "<int of 16610 bits>" and len(doc["text"]) == jsonsafe.MAX_TEXT_CHARS
    assert doc["bad"].startswith("<object object")
    clock.now += 10
    agent.step(2, blob=["x" * 1000] * 60, more=["y" * 1000] * 60)
    doc = beat(agent)
    assert doc["step"] == 2 and doc["extra_dropped"] == 2 and "blob" not in doc, "a heartbeat stays readable"
    assert agent.heartbeat_path.stat().st_size <= HEARTBEAT_MAX_BYTES
    agent.close()


def test_a_value_whose_repr_and_float_raise_is_written_as_unprintable() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

        def __float__(self) -> float:
            raise RuntimeError("no float")

    assert jsonsafe.jsonable({"h": [Hostile()]}) == {"h": ["<unprintable>"]}
    assert jsonsafe.jsonable({1: 2, None: 3}) == {"1": 2, "None": 3}


def test_rank_and_world_size_come_from_torchruns_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "16")
    with robustctl.agent.start(tmp_path, torch=False, flusher=False) as agent:
        assert (agent.rank, agent.local_rank, agent.world_size) == (5, 1, 16)
        assert agent.heartbeat_path == tmp_path / "rank00005.json"
    monkeypatch.setenv("RANK", "five")
    with pytest.raises(ValueError, match=r"\$RANK='five' is not an integer"):
        robustctl.agent.start(tmp_path, torch=False)
    monkeypatch.setenv("RANK", "16")
    with pytest.raises(ValueError, match="rank 16 is not below the world size 16"):
        robustctl.agent.start(tmp_path, torch=False)


def test_a_run_dir_that_cannot_be_written_never_raises_into_the_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run_dir under a file (unwritable even for root), and one removed mid-run: counted, said once."""
    (tmp_path / "file").write_text("")
    agent, clock = make(tmp_path / "file", stacks_on_sigusr1=False)
    for s in range(1, 4):
        clock.now += 10
        agent.step(s, loss=math.nan)
    assert agent.dump_flight_recorder() is None
    agent.close()
    assert agent.errors >= 4 and agent.writes == 0
    err = capsys.readouterr().err
    assert err.count("further errors are counted") == 1 and "Not a directory" in err

    agent, clock = make(tmp_path / "ok")
    agent.step(1)
    shutil.rmtree(tmp_path / "ok")
    clock.now += 10
    agent.step(2, loss=math.inf)
    agent.close()
    assert agent.errors == 3 and agent.writes == 1, "heartbeat, event and the last heartbeat failed"
    assert capsys.readouterr().err.count("No such file or directory") == 1


def test_a_forked_child_leaves_its_parents_heartbeat_alone(tmp_path: Path) -> None:
    """A data-loader worker forked from the rank that steps, hits a NaN and closes (atexit) writes nothing."""
    agent, clock = make(tmp_path)
    agent.step(1, loss=1.0)
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        code = 1
        try:
            clock.now += 10
            agent.step(99, loss=math.nan)
            agent.close()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert beat(agent)["step"] == 1 and not (agent.run_dir / "events").exists()
    clock.now += 10
    agent.step(2)
    assert beat(agent)["step"] == 2, "the parent's agent still runs"
    agent.close()


@pytest.mark.parametrize(
    ("version", "names"),
    [
        ("2.13.0+cpu", {"TORCH_FR_BUFFER_SIZE"}),
        ("2.5.1", {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}),
        ("nonsense", {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}),
    ],
)
def test_flight_recorder_is_sized_by_the_names_the_installed_torch_reads(
    monkeypatch: pytest.MonkeyPatch, version: str, names: set[str]
) -> None:
    """2.6 and later warn that the old name is deprecated: only the new one is set for them."""
    import importlib.metadata
    import types

    from robustctl.agent import torchside

    for var in torchside.FR_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(__version__=version))
    monkeypatch.setattr(importlib.metadata, "version", lambda name: version)
    monkeypatch.setattr(torchside, "distributed_initialized", lambda: False)
    assert torchside.enable_flight_recorder(7) is None
    assert {v for v in torchside.FR_ENV_VARS if os.environ.get(v) == "7"} == names


def test_torch_is_left_alone_when_asked_and_the_features_that_need_it_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch=False: no debug server (said once); Flight Recorder is still sized through the
    environment (torch reads it when the script creates its process group), a dump is refused."""
    for var in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        monkeypatch.delenv(var, raising=False)
    agent, _ = make(tmp_path, flight_recorder=100, debug_server=True)
    assert os.environ["TORCH_FR_BUFFER_SIZE"] == "100"
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in os.environ  # torch 2.13 reads the new name only
    assert agent.debug_socket is None and agent.notes == [
        "torch is not in use (not imported, or torch=False): no debug server"
    ]
    assert agent.dump_flight_recorder() is None and "runs without torch" in agent.notes[1]
    assert capsys.readouterr().err.count("robustctl.agent: rank 3:") == 2
    agent.close()


def test_importing_the_agent_imports_the_standard_library_only() -> None:
    """A fresh interpreter imports robustctl.agent (and its client): no torch, no control-side library,
    no robustctl module outside the agent."""
    code = (
        "import json, sys; import robustctl.agent, robustctl.agent.client; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, check=True, cwd=REPO, env=env, timeout=60
    )
    mods = json.loads(out.stdout)
    heavy = {"torch", "numpy", "pydantic", "rich", "typer", "yaml", "paramiko", "hypothesis"}
    assert not [m for m in mods if m.split(".")[0] in heavy]
    ours = [m for m in mods if m.split(".")[0] == "robustctl"]
    assert ours and all(m == "robustctl" or m.startswith("robustctl.agent") for m in ours), ours
    stdlib = set(sys.stdlib_module_names) | {"robustctl"}
    assert all(m.split(".")[0] in stdlib or m.split(".")[0].startswith("_") for m in mods), [
        m for m in mods if m.split(".")[0] not in stdlib
    ]
