"""diagnose L4, bitwise alignment: the majority rule, its place in the ladder, the dry-run plan, and
the real replay probe on local hosts, one of them with the matmul fault injector of tests/jobs/sdcfault."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from robustctl.config import DiagnoseSettings, PythonSettings, SshSettings
from robustctl.diagnose import DiagnoseSpec, plan_levels
from robustctl.diagnose.alignment import CHECK, AlignmentRun, alignment_args, judge_alignment, run_alignment
from robustctl.diagnose.engine import Engine, _NoProgress
from robustctl.inventory import Host
from robustctl.models import Status
from robustctl.testing.fake_transport import FakeTransport
from robustctl.thresholds import Thresholds
from robustctl.transport.pool import TransportPool
from tests.unit.test_diagnose_engine import hosts, l3_answers, run

REPO = Path(__file__).resolve().parents[2]
FAULT_DIR = REPO / "tests" / "jobs" / "sdcfault"
GOOD = "a" * 64


def ar(
    host: str, digest: str = GOOD, loss: str = "0x1.08d9f40000000p+2", kind: str = "gloo/4 ranks"
) -> AlignmentRun:
    return AlignmentRun(host, kind, (loss,), digest, True)


def statuses(judged: dict[str, Any]) -> dict[str, Status]:
    return {h: c.status for h, c in judged.items()}


def test_the_odd_digest_out_is_critical_and_only_it() -> None:
    judged = judge_alignment([ar("n0"), ar("n1", "b" * 64), ar("n2"), ar("n3")])
    assert statuses(judged) == {"n0": Status.OK, "n1": Status.CRITICAL, "n2": Status.OK, "n3": Status.OK}
    assert "held by 3 of 4 hosts" in judged["n1"].summary and judged["n1"].name == CHECK
    assert judged["n1"].evidence["majority_digest"] == GOOD and judged["n1"].level == 4


def test_no_majority_or_too_few_hosts_blames_nobody() -> None:
    split = judge_alignment([ar("n0"), ar("n1"), ar("n2", "b" * 64), ar("n3", "b" * 64)])
    assert set(statuses(split).values()) == {Status.UNKNOWN}
    assert "no digest is held by a majority" in split["n0"].summary
    two = judge_alignment([ar("n0"), ar("n1", "b" * 64)])
    assert set(statuses(two).values()) == {Status.UNKNOWN} and "at least 3" in two["n0"].summary


def test_nan_loss_is_critical_and_kinds_are_compared_apart() -> None:
    runs = [ar("n0"), ar("n1", loss="nan"), ar("n2")]
    runs += [ar(f"g{i}", "c" * 64, kind="nccl/8 ranks") for i in range(3)]
    judged = judge_alignment(runs)
    assert judged["n1"].status is Status.CRITICAL and "nan" in judged["n1"].summary
    assert [h for h, s in statuses(judged).items() if s is not Status.OK] == ["n1"]


def test_args_follow_the_hosts_gpus() -> None:
    cpu = Host("c", "127.0.0.2", "ssh", SshSettings(), PythonSettings())
    gpu = Host("g", "127.0.0.3", "ssh", SshSettings(), PythonSettings(), gpus=8)
    assert "--backend" in alignment_args(cpu) and "gloo" in alignment_args(cpu)
    assert "--tp=2" in alignment_args(cpu) and "--dp=1" in alignment_args(cpu)
    assert "nccl" in alignment_args(gpu) and "--dp=2" in alignment_args(gpu)


def replay_answer(digest: str) -> dict[str, Any]:
    return {
        "available": True,
        "backend": "gloo",
        "world_size": 4,
        "loss": ["0x1.08d9f40000000p+2"],
        "digest": digest,
        "consistent": True,
        "error": None,
    }


def test_l4_runs_after_a_clean_l3_and_names_the_odd_host(healthy_host_data: dict[str, Any]) -> None:
    hs = hosts(4)
    answers = l3_answers(hs, healthy_host_data)
    for h in hs:
        answers[h.name]["replay"] = replay_answer("b" * 64 if h.name == "n2" else GOOD)
    rep = run(FakeTransport(answers), hs, max_level=4)
    assert [(lv.level, lv.ran) for lv in rep.levels] == [
        (0, True),
        (1, True),
        (2, True),
        (3, True),
        (4, True),
    ]
    assert rep.suspects == ("n2",) and rep.levels[4].suspects == ("n2",)
    by_host = {h.host: {c.name: c for c in h.checks} for h in rep.hosts}
    assert by_host["n0"][CHECK].status is Status.OK and by_host["n2"][CHECK].status is Status.CRITICAL
    default = run(FakeTransport(answers), hs)  # --level defaults to 3: L4 is asked for explicitly
    assert [lv.level for lv in default.levels] == [0, 1, 2, 3] and default.suspects == ()


def test_l4_does_not_run_after_an_earlier_level_named_suspects(healthy_host_data: dict[str, Any]) -> None:
    from tests.unit.test_diagnose_engine import burn

    hs = hosts(4)
    answers = l3_answers(hs, healthy_host_data)
    answers["n0"]["burn"] = burn(1.0, mismatches=2)
    fake = FakeTransport(answers)
    rep = run(fake, hs, max_level=4)
    assert rep.levels[4].reason == "stopped after L1 named suspects"
    assert not any(p == "replay" for _, p, _ in fake.calls)


def test_fewer_than_three_hosts_skip_l4_with_the_reason(healthy_host_data: dict[str, Any]) -> None:
    from robustctl.report.diagnose import levels_line

    hs = hosts(2)
    answers = l3_answers(hs, healthy_host_data)
    rep = run(FakeTransport(answers), hs, max_level=4)
    assert (rep.levels[4].ran, rep.levels[4].reason) == (
        False,
        "needs at least 3 hosts to form a majority, 2 left to check",
    )
    assert "L4 (needs at least 3 hosts" in levels_line(rep)
    assert {c.status for h in rep.hosts for c in h.checks if c.name == CHECK} == {Status.NOT_APPLICABLE}
    plan = plan_levels(DiagnoseSpec(tuple(hs), DiagnoseSettings(), Thresholds(), max_level=4))
    assert plan["levels"][4] == {
        "level": 4,
        "name": "alignment",
        "skipped": "needs at least 3 hosts to form a majority, 2 targeted",
    }


def test_dry_run_shows_the_l4_command() -> None:
    hs = hosts(3)
    plan = plan_levels(DiagnoseSpec(tuple(hs), DiagnoseSettings(), Thresholds(), max_level=4))
    assert plan["levels"][4] == {"level": 4, "name": "alignment"}
    l4 = [c for c in plan["hosts"][0]["commands"] if c["level"] == 4]
    assert len(l4) == 1 and l4[0]["probe"] == "replay" and "--nnodes 1" in l4[0]["command"]


def local_host(name: str, fault: str | None = None) -> Host:
    wrapper = ["env", f"PYTHONPATH={FAULT_DIR}", f"ROBUSTCTL_SDC_FAULT={fault}"] if fault else []
    return Host(
        name, "127.0.0.1", "local", SshSettings(), PythonSettings(path=sys.executable, wrapper=wrapper)
    )


def run_local_l4(hs: list[Host]) -> dict[str, Any]:
    spec = DiagnoseSpec(tuple(hs), DiagnoseSettings(retries=0, host_timeout_s=120), Thresholds(), max_level=4)
    engine = Engine(spec, TransportPool(), _NoProgress())
    assert run_alignment(engine, hs) is None
    return {n: [c for c in st.checks if c.name == CHECK] for n, st in engine.state.items()}


@pytest.mark.external  # a torch process
def test_real_probe_on_local_hosts_names_the_injected_host_alone() -> None:
    """Three local hosts run the real reference step; node1's torch flips a mantissa bit."""
    pytest.importorskip("torch")
    checks = run_local_l4([local_host("node0"), local_host("node1", "bitflip:every=3"), local_host("node2")])
    assert {n: [c.status for c in cs] for n, cs in checks.items()} == {
        "node0": [Status.OK],
        "node1": [Status.CRITICAL],
        "node2": [Status.OK],
    }, checks
    assert checks["node0"][0].evidence["digest"] != checks["node1"][0].evidence["digest"]


@pytest.mark.external  # a torch process
def test_real_probe_on_healthy_local_hosts_is_ok() -> None:
    pytest.importorskip("torch")
    checks = run_local_l4([local_host(f"node{i}") for i in range(3)])
    assert all([c.status for c in cs] == [Status.OK] for cs in checks.values()), checks
    assert len({cs[0].evidence["digest"] for cs in checks.values()}) == 1
