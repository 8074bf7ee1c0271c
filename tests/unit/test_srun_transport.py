"""The srun transport without Slurm: the step-output parser against a captured real step, the node-side
wrapper run here, the node-state filter and the launch-failure retry over a scripted ``srun``.

Property-based tests (Hypothesis, ``fuzz`` marker): any bytes parse without a traceback; frames of many
tasks interleaved in any order are all recovered; a frame cut anywhere loses that node only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.config import PythonSettings, SshSettings
from robustctl.errors import CommandTimeout, HostUnreachable
from robustctl.inventory import Host
from robustctl.schedulers.slurm import CommandOutput, Slurm
from robustctl.transport.base import CommandResult
from robustctl.transport.srun import (
    FRAME,
    NODE_MAX_BYTES,
    SRUN_WRAP,
    SrunTransport,
    launch_failures,
    parse_step_output,
    srun_argv,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


def wrap(node: str, argv: Sequence[str], *, timeout_s: float = 20, stdin: bytes = b"") -> bytes:
    """What one task prints: SRUN_WRAP run here as slurmd would, with SLURMD_NODENAME set."""
    env = {**os.environ, "SLURMD_NODENAME": node}
    done = subprocess.run(
        [sys.executable, "-c", SRUN_WRAP, str(timeout_s), *argv],
        input=stdin,
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def label(task: int, text: bytes) -> list[bytes]:
    return [f"{task}: ".encode() + ln for ln in text.splitlines()]


def host(name: str) -> Host:
    return Host(name, name, "srun", SshSettings(), PythonSettings(path=sys.executable))


# ---- the parser ----------------------------------------------------------------------------------


def test_captured_step_of_three_nodes_with_interleaved_lines() -> None:
    raw = (DATA / "srun-step.out").read_bytes()
    tasks = {ln.split(b":")[0] for ln in raw.splitlines()}
    assert tasks == {b"0", b"1", b"2"}  # srun's --label, lines of the tasks interleaved
    frames = parse_step_output(raw)
    assert sorted(frames) == ["sn1", "sn2", "sn3"]
    for name, f in frames.items():
        assert f.exit_status == 0 and not f.timed_out and not f.too_large
        assert f.stdout == f"hello {name}\n".encode() + b"x" * 3000 + b"\n"
        assert f.stderr == b"warn\n"


def test_captured_launch_failure_names_the_node() -> None:
    err = (DATA / "srun-launch-failed.err").read_bytes()
    assert launch_failures(err) == {"sn3": "Communication connection failure"}
    assert launch_failures(b"srun: error: sn1: task 0: Killed\n") == {}


def test_wrapper_here_frames_output_exit_status_timeout_and_too_much_output() -> None:
    out = wrap("n1", [sys.executable, "-c", "import sys;print(sys.stdin.read());sys.exit(3)"], stdin=b"hi")
    f = parse_step_output(b"\n".join(label(0, out)))["n1"]
    assert (f.exit_status, f.stdout, f.timed_out) == (3, b"hi\n", False)
    slow = parse_step_output(b"\n".join(label(0, wrap("n2", ["sleep", "30"], timeout_s=1))))["n2"]
    assert slow.timed_out and slow.exit_status == -9
    big = [sys.executable, "-c", f"import sys;sys.stdout.write('y'*{NODE_MAX_BYTES + 1})"]
    large = parse_step_output(b"\n".join(label(0, wrap("n3", big))))["n3"]
    assert large.too_large == NODE_MAX_BYTES + 1 and large.stdout == b""
    missing = parse_step_output(b"\n".join(label(0, wrap("n4", ["/nonexistent/python3"]))))["n4"]
    assert missing.exit_status == 127 and b"No such file" in missing.stderr


def test_srun_argv_is_one_step_of_one_task_per_node() -> None:
    argv = srun_argv(
        ["sn1", "sn2", "sn3"], ["python3", "-c", "x"], python="python3", node_timeout_s=20, immediate_s=5
    )
    assert argv[0] == "srun"
    for opt in ("--nodelist=sn[1-3]", "--nodes=3", "--ntasks=3", "--ntasks-per-node=1", "--kill-on-bad-exit=0",
                "--label", "--immediate=5"):  # fmt: skip
        assert opt in argv
    assert any(a.startswith("--time=") for a in argv)
    i = argv.index("-c")
    assert argv[i + 1] == SRUN_WRAP and argv[i + 2 :] == ["20", "python3", "-c", "x"]


ONE = b"\n".join(label(0, b"@rbsrun1 begin 5\n@rbsrun1 {}\n@rbsrun1 end"))


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        ONE,  # not a node document
        b"0: @rbsrun1 begin 99999999999999999999\n0: @rbsrun1 x\n0: @rbsrun1 end",
        b"0: @rbsrun1 begin 2\n0: @rbsrun1 abc\n0: @rbsrun1 end",  # longer than announced
        b'0: @rbsrun1 begin 30\n0: @rbsrun1 {"node": "a", "rc": true, "out": ""}\n0: @rbsrun1 end',
        b'@rbsrun1 begin 10\n@rbsrun1 {"node": 1}\n@rbsrun1 end',  # no label
    ],
)
def test_malformed_frames_are_ignored(raw: bytes) -> None:
    assert parse_step_output(raw) == {}


# ---- properties ---------------------------------------------------------------------------------

NAMES = st.lists(st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True), min_size=1, max_size=6, unique=True)


def frame_lines(node: str, rc: int, out: bytes) -> list[str]:
    import base64

    doc = json.dumps({"node": node, "rc": rc, "out": base64.b64encode(out).decode(), "err": ""})
    return [
        f"{FRAME} begin {len(doc)}",
        *(f"{FRAME} {doc[i : i + 76]}" for i in range(0, len(doc), 76)),
        f"{FRAME} end",
    ]


@pytest.mark.fuzz
@given(raw=st.binary(max_size=2000))
def test_any_bytes_parse_without_a_traceback(raw: bytes) -> None:
    frames = parse_step_output(raw)
    assert all(isinstance(k, str) and k for k in frames)


@pytest.mark.fuzz
@given(names=NAMES, payload=st.binary(max_size=400), data=st.data())
def test_interleaved_frames_of_every_task_are_recovered(
    names: list[str], payload: bytes, data: st.DataObject
) -> None:
    queues = {
        i: [f"{i}: {ln}" for ln in frame_lines(n, i, payload + n.encode())] for i, n in enumerate(names)
    }
    merged: list[str] = []
    while any(queues.values()):
        task = data.draw(st.sampled_from([t for t, q in queues.items() if q]))
        merged.append(queues[task].pop(0))
        if data.draw(st.booleans()):
            merged.append(data.draw(st.sampled_from(["noise", "3: chatter", "srun: warning"])))
    frames = parse_step_output("\n".join(merged).encode())
    assert sorted(frames) == sorted(names)
    for i, n in enumerate(names):
        assert frames[n].exit_status == i and frames[n].stdout == payload + n.encode()


@pytest.mark.fuzz
@given(names=NAMES, data=st.data())
def test_a_frame_cut_anywhere_loses_that_node_only(names: list[str], data: st.DataObject) -> None:
    victim = data.draw(st.sampled_from(names))
    lines: list[str] = []
    for i, n in enumerate(names):
        own = [f"{i}: {ln}" for ln in frame_lines(n, 0, b"z" * 200)]
        if n == victim:
            k = data.draw(st.integers(1, len(own) - 1))
            own = own[:k] if data.draw(st.booleans()) else own[:k] + own[k + 1 :]
        lines += own
    assert sorted(parse_step_output("\n".join(lines).encode())) == sorted(set(names) - {victim})


# ---- the transport over a scripted srun ---------------------------------------------------------

SINFO = {
    "nodes": [
        {"name": "sn1", "state": "idle", "state_flags": [], "reason": ""},
        {"name": "sn2", "state": "idle", "state_flags": [], "reason": ""},
        {"name": "sn3", "state": "idle", "state_flags": [], "reason": ""},
        {"name": "sn4", "state": "idle", "state_flags": ["DRAIN"], "reason": "admin: cabling"},
        {"name": "sn5", "state": "down", "state_flags": ["NOT_RESPONDING"], "reason": "Not responding"},
    ]
}

FAKE_SRUN = r"""#!{python}
# A scripted srun: launch fails on the nodes listed in DEAD, else every node runs the task.
import os, subprocess, sys
log = os.environ["FAKE_SRUN_LOG"]
args = sys.argv[1:]
open(log, "a").write(" ".join(a for a in args if a.startswith("--nodelist")) + "\n")
nodes = [a.split("=", 1)[1] for a in args if a.startswith("--nodelist=")][0]
import hostlist
nodes = hostlist.expand_hostlist(nodes)
dead = [n for n in nodes if n in os.environ.get("DEAD", "").split(",")]
i = args.index("--quiet") + 1
if dead:
    # the nodes in KILLED answer first: their task's command killed by a signal as Slurm aborts the step
    for k, n in enumerate(nodes):
        if n in os.environ.get("KILLED", "").split(","):
            cmd = args[i:i + 4] + [sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"]
            p = subprocess.run(cmd, env={{**os.environ, "SLURMD_NODENAME": n}}, capture_output=True, stdin=subprocess.DEVNULL)
            for ln in p.stdout.decode().splitlines():
                print(f"{{k}}: {{ln}}")
    sys.stderr.write(f"srun: error: Task launch for StepId=7.0 failed on node {{dead[0]}}: Communication connection failure\n")
    sys.exit(233)
for k, n in enumerate(nodes):
    p = subprocess.run(args[i:], env={{**os.environ, "SLURMD_NODENAME": n}}, capture_output=True, stdin=subprocess.DEVNULL)
    for ln in p.stdout.decode().splitlines():
        print(f"{{k}}: {{ln}}")
"""


def fake_slurm(tmp: Path, monkeypatch: pytest.MonkeyPatch, dead: str = "") -> SrunTransport:
    """The transport with ``sinfo`` answered from :data:`SINFO` and a scripted ``srun`` in ``tmp``."""
    srun = tmp / "srun"
    srun.write_text(FAKE_SRUN.format(python=sys.executable))
    srun.chmod(0o755)
    monkeypatch.setenv("FAKE_SRUN_LOG", str(tmp / "calls.log"))
    monkeypatch.setenv("DEAD", dead)

    def runner(argv: Sequence[str], env: Mapping[str, str], timeout_s: float) -> CommandOutput:
        if Path(argv[0]).name == "scontrol":  # nodes sinfo does not list: the node table has none more
            return CommandOutput(0, "", "")
        assert Path(argv[0]).name == "sinfo", argv
        return CommandOutput(0, json.dumps(SINFO), "")

    return SrunTransport(Slurm(bin_dir=tmp, runner=runner))


def test_batch_skips_nodes_slurm_cannot_run_a_step_on_and_answers_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = fake_slurm(tmp_path, monkeypatch)
    hosts = [host(n) for n in ("sn1", "sn2", "sn4", "sn5", "nosuch")]
    res = t.run_batch(
        hosts, [sys.executable, "-c", "import os;print(os.environ['SLURMD_NODENAME'])"], timeout_s=30
    )
    assert list(res) == ["sn1", "sn2", "sn4", "sn5", "nosuch"]
    for n in ("sn1", "sn2"):
        r = res[n]
        assert isinstance(r, CommandResult) and r.stdout == f"{n}\n".encode()
    assert (
        isinstance(res["sn4"], HostUnreachable)
        and "drained in Slurm (reason: admin: cabling)" in res["sn4"].reason
    )
    assert isinstance(res["sn5"], HostUnreachable) and "Slurm reports the node down" in res["sn5"].reason
    assert isinstance(res["nosuch"], HostUnreachable) and "unknown to Slurm" in res["nosuch"].reason
    assert (tmp_path / "calls.log").read_text().splitlines() == ["--nodelist=sn[1-2]"]  # one step, two nodes


def test_launch_failure_marks_the_node_and_retries_the_others_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = fake_slurm(tmp_path, monkeypatch, dead="sn3")
    res = t.run_batch(
        [host("sn1"), host("sn2"), host("sn3")], [sys.executable, "-c", "print(1)"], timeout_s=30
    )
    assert isinstance(res["sn3"], HostUnreachable) and "could not launch" in res["sn3"].reason
    assert all(isinstance(res[n], CommandResult) for n in ("sn1", "sn2"))
    assert (tmp_path / "calls.log").read_text().splitlines() == ["--nodelist=sn[1-3]", "--nodelist=sn[1-2]"]
    with pytest.raises(HostUnreachable, match="could not launch"):
        t.run(host("sn3"), ["true"], timeout_s=30)


def test_a_node_whose_command_was_killed_by_the_aborted_step_is_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slurm kills the other nodes' tasks when it aborts a step whose launch failed on one node; a
    frame of a command killed by a signal then is not that node's answer: it is asked again."""
    monkeypatch.setenv("KILLED", "sn1")
    t = fake_slurm(tmp_path, monkeypatch, dead="sn3")
    res = t.run_batch(
        [host("sn1"), host("sn2"), host("sn3")], [sys.executable, "-c", "print(1)"], timeout_s=30
    )
    assert (
        isinstance(res["sn1"], CommandResult) and res["sn1"].exit_status == 0 and res["sn1"].stdout == b"1\n"
    )
    assert isinstance(res["sn3"], HostUnreachable)
    assert (tmp_path / "calls.log").read_text().splitlines() == ["--nodelist=sn[1-3]", "--nodelist=sn[1-2]"]


def test_node_side_timeout_is_a_command_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = fake_slurm(tmp_path, monkeypatch)
    res = t.run_batch([host("sn1")], ["sleep", "30"], timeout_s=5)
    assert isinstance(res["sn1"], CommandTimeout)
