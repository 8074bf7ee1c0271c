"""robustctl replay-sdc: the replay probe, the --command result line, and the Fig. 6 flow end to end
on this machine (several inventory hosts, all through the local transport; one of them with the
matmul fault injector of tests/jobs/sdcfault on its Python path)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robustctl.cli.main import main
from robustctl.probes import probe_script
from robustctl.sdc.replay import parse_result_line

REPO = Path(__file__).resolve().parents[2]
FAULT_DIR = REPO / "tests" / "jobs" / "sdcfault"


def run_probe(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-", *args], input=probe_script("replay"), capture_output=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    doc = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert doc["probe"] == "replay" and doc["data"]["error"] is None, doc
    return dict(doc["data"])


def fault_env(spec: str) -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(FAULT_DIR), "ROBUSTCTL_SDC_FAULT": spec}


@pytest.mark.external  # a torch process
def test_replay_is_bitwise_reproducible_and_the_injector_changes_it() -> None:
    pytest.importorskip("torch")
    args = ("--tp", "2", "--pp", "2", "--steps", "2", "--hidden", "32", "--timeout", "60")
    a, b = run_probe(*args), run_probe(*args)
    assert a["world_size"] == 4 and a["backend"] == "gloo" and a["consistent"] is True
    assert len(a["loss"]) == 2 and all(float.fromhex(v) > 0 for v in a["loss"])
    assert (a["loss"], a["digest"]) == (b["loss"], b["digest"])
    flipped = run_probe(*args, env=fault_env("bitflip:every=7"))
    assert flipped["digest"] != a["digest"] and flipped["nonfinite"] is False
    nan = run_probe(*args, env=fault_env("nan:after=3"))
    assert nan["nonfinite"] is True and "nan" in nan["loss"]


@pytest.mark.external  # a torch process
def test_replay_across_two_hosts_matches_all_ranks_on_one() -> None:
    """Two probe processes (127.0.0.2 serving, 127.0.0.3 dialling), each one rank: same bits as one host."""
    pytest.importorskip("torch")
    port = random.randint(42000, 48000)
    common = ["--pp", "2", "--nnodes", "2", "--master-addr", "127.0.0.2", "--master-port", str(port)]
    common += ["--steps", "2", "--hidden", "32", "--timeout", "60"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-", *common, "--node-rank", str(i), "--bind-addr", f"127.0.0.{i + 2}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(2)
    ]
    for p in procs:  # both start before either is waited for
        assert p.stdin is not None
        p.stdin.write(probe_script("replay"))
        p.stdin.close()
    docs = []
    for p in procs:
        assert p.stdout is not None and p.stderr is not None
        p.wait(120)
        with p.stdout, p.stderr:
            out, err = p.stdout.read(), p.stderr.read()
        assert p.returncode == 0, err.decode()[-2000:]
        docs.append(json.loads(out.decode().strip().splitlines()[-1])["data"])
    alone = run_probe("--pp", "2", "--steps", "2", "--hidden", "32", "--timeout", "60")
    assert docs[0]["error"] is None and docs[1]["error"] is None
    assert docs[0]["digest"] == docs[1]["digest"] == alone["digest"]
    assert docs[0]["loss"] == alone["loss"]


def test_result_line_contract_round_trips_through_the_helper() -> None:
    sys.path.insert(0, str(REPO / "diagnostics"))
    try:
        import replay_result
    finally:
        sys.path.pop(0)
    line = replay_result.result_line([4.25, float("nan")], "abc")
    assert parse_result_line(b"noise\n" + line.encode() + b"\n") == (("0x1.1000000000000p+2", "nan"), "abc")
    assert parse_result_line(b"no result here\n") is None
    assert "not JSON" in str(parse_result_line(b'{"robustctl_replay": 1, "loss": [\n'))
    assert "not a number" in str(parse_result_line(b'{"robustctl_replay": 1, "loss": ["x"], "digest": "d"}'))
    assert "digest" in str(parse_result_line(b'{"robustctl_replay": 1, "loss": [1.0], "digest": 5}'))


def inventory(tmp_path: Path, faults: dict[int, str], *, command_host_python: str | None = None) -> Path:
    py = sys.executable
    lines = [
        f"python: {{path: {py}}}",
        f"diagnose: {{host_timeout_s: 90, allreduce: {{master_port: {random.randint(42000, 60000)}}}}}",
        "hosts:",
    ]
    for i in range(6):
        if i in faults:
            wrapper = f'[env, "PYTHONPATH={FAULT_DIR}", "ROBUSTCTL_SDC_FAULT={faults[i]}"]'
            lines.append(
                f"  - {{name: node{i}, transport: local, python: {{path: {py}, wrapper: {wrapper}}}}}"
            )
        else:
            lines.append(f"  - {{name: node{i}, transport: local}}")
    lines += ["jobs:", '  tiny: {hosts: "node[0-5]", layout: {pp: 2, dp: 3}, ranks_per_host: 1}']
    path = tmp_path / "inv.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def replay(inv: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    rc = main(["replay-sdc", "-i", str(inv), "--job", "tiny", "--json", "-q", "--steps", "2", *extra])
    out = capsys.readouterr().out
    return rc, json.loads(out)


@pytest.mark.external  # a torch process
def test_fig6_flow_isolates_the_injected_machine_in_two_rounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """M=6, m=2, n=3: node3 flips bits; H1={2,3} and V0={0,3} fail; their intersection is node3."""
    pytest.importorskip("torch")
    rc, doc = replay(inventory(tmp_path, {3: "bitflip:every=5"}), capsys)
    assert rc == 2 and doc["verdict"] == "isolated" and doc["machines"] == ["node3"]
    assert (doc["grouping"]["m"], doc["grouping"]["n"]) == (2, 3)
    faulty = [[g["name"] for g in p["groups"] if g["state"] == "faulty"] for p in doc["phases"]]
    assert faulty == [["H1"], ["V0"]]
    healthy = {g["digest"] for p in doc["phases"] for g in p["groups"] if g["state"] == "healthy"}
    assert len(healthy) == 1  # healthy groups agree bit for bit, across both phases
    assert doc["recorded"]["marked"] == ["node3"]


def test_command_contract_end_to_end_and_a_command_without_result_fails_to_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--command: a script printing the result line; no host faulty -> not_reproduced (exit 1); a
    command printing garbage -> failed_to_run (exit 3), nothing blamed."""
    script = tmp_path / "train.py"
    script.write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {str(REPO / 'diagnostics')!r})\n"
        "from replay_result import emit\n"
        "if os.environ['NODE_RANK'] == '0':\n"
        "    emit([1.5, 1.25], 'digest-' + os.environ['WORLD_SIZE'] + sys.argv[1])\n"
    )
    inv = inventory(tmp_path, {})
    rc, doc = replay(inv, capsys, "--command", f"{sys.executable} {script} {{nnodes}}")
    assert rc == 1 and doc["verdict"] == "not_reproduced", doc
    assert {g["digest"] for p in doc["phases"] for g in p["groups"]} == {"digest-22"}
    rc, doc = replay(inv, capsys, "--command", f"{sys.executable} -c print(42)")
    assert rc == 3 and doc["verdict"] == "failed_to_run" and doc["machines"] == []
    assert "printed a robustctl_replay result line" in doc["phases"][0]["groups"][0]["reason"]


@pytest.mark.parametrize(
    ("argv", "code", "words"),
    [
        (["--hosts", "node[0-5]", "--pp", "3", "--dp", "2"], 64, "no valid k"),
        (["--job", "tiny", "--k", "3"], 64, "--k 3"),
        (["--job", "tiny", "--pp", "2"], 64, "cannot be used with --job"),
        (["--job", "nope"], 78, "unknown job"),
        (["--hosts", "node[0-5]", "--pp", "2"], 64, "needs --pp and --dp"),
        (["--job", "tiny", "--command", "'unclosed"], 64, "--command"),
        (["--hosts", "node[0-5]", "--tp", "4096", "--pp", "4096", "--dp", "4096"], 64, "largest world size"),
    ],
)
def test_bad_input_is_one_line_with_the_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, words: str
) -> None:
    rc = main(["replay-sdc", "-i", str(inventory(tmp_path, {})), *argv])
    err = capsys.readouterr().err
    assert rc == code and words in err and len(err.strip().splitlines()) == 1, err


@settings(max_examples=40)
@given(
    sizes=st.tuples(*[st.integers(1, 10**7) | st.sampled_from([1, 2, 3, 6]) for _ in range(3)]),
    k=st.none() | st.integers(1, 10**6),
)
def test_any_layout_flags_are_a_plan_or_a_usage_error(
    tmp_path_factory: pytest.TempPathFactory, sizes: tuple[int, int, int], k: int | None
) -> None:
    """--tp/--pp/--dp (and --k) of any size with an inventory: a plan (0) or one line and 64, never the
    catch-all (a world size past the largest used to end in ``internal error: ValidationError``)."""
    import contextlib
    import io

    inv = inventory(tmp_path_factory.mktemp("layout"), {})
    tp, pp, dp = sizes
    argv = ["replay-sdc", "-i", str(inv), "--hosts", "node[0-5]", "--tp", str(tp), "--pp", str(pp)]
    argv += ["--dp", str(dp), "--plan", "--json", "-q", *(["--k", str(k)] if k is not None else [])]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    assert rc in (0, 64), (argv, rc, err.getvalue())
    if rc == 64:  # robustctl's one line, or the option parser's usage block ending in its error line
        said = err.getvalue()
        assert "internal error" not in said and "Traceback" not in said, said
        assert said.strip().splitlines()[-1].startswith(("robustctl: error: ", "Error: Invalid value")), said
    else:
        assert json.loads(out.getvalue())["kind"] == "replay-sdc-plan"


def test_plan_connects_to_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        "hosts:\n  - {name: 'node[001-024]', address: '127.0.0.[1-24]'}\n"
        "jobs:\n  big: {hosts: 'node[001-024]', layout: {pp: 2, dp: 12}, ranks_per_host: 1}\n"
    )
    rc = main(["replay-sdc", "-i", str(inv), "--job", "big", "--plan", "--json", "-q"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["kind"] == "replay-sdc-plan" and (doc["m"], doc["n"], doc["k"]) == (4, 6, 2)
    assert doc["phases"][0]["groups"][3]["hosts"] == ["node013", "node014", "node015", "node016"]
    assert doc["phases"][1]["groups"][1]["machines"] == [1, 7, 13, 19]
    assert doc["cost"]["rounds"] == {"dual_phase": 2, "bisection": 5}


def test_the_plan_takes_the_jobs_machines_after_a_standby_swap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A standby that took node002's place is replayed in its slot; the evicted node002 is not."""
    from robustctl.store import Store

    inv = tmp_path / "inv.yaml"
    inv.write_text(
        "hosts:\n  - {name: 'node[001-004]', address: '127.0.0.[2-5]'}\n"
        "  - {name: spare1, address: 127.0.0.6, state: standby}\n"
        "jobs:\n  small: {hosts: 'node[001-004]', layout: {pp: 2, dp: 2}, ranks_per_host: 1}\n"
    )
    state = tmp_path / "s.db"
    with Store.open(state) as s:
        s.set_job_hosts("small", ["node001", "spare1", "node003", "node004"])
    rc = main(
        ["replay-sdc", "-i", str(inv), "--job", "small", "--plan", "--json", "-q", "--state", str(state)]
    )
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert rc == 0, out
    named = {h for ph in doc["phases"] for grp in ph["groups"] for h in grp["hosts"]}
    assert named == {"node001", "spare1", "node003", "node004"}, doc["phases"]


@pytest.mark.gpu
def test_replay_over_local_gpus_is_bitwise_reproducible() -> None:
    import torch

    gpus = torch.cuda.device_count()
    tp, pp = (2, 2) if gpus >= 4 else ((2, 1) if gpus >= 2 else (1, 1))
    args = ("--backend", "nccl", "--tp", str(tp), "--pp", str(pp), "--steps", "2", "--timeout", "120")
    a, b = run_probe(*args), run_probe(*args)
    assert a["backend"] == "nccl" and a["device"] == "cuda" and a["world_size"] == tp * pp
    assert a["consistent"] is True and a["nonfinite"] is False
    assert (a["loss"], a["digest"]) == (b["loss"], b["digest"])
