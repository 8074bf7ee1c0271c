"""``sweep --local [--slurm]``: this node's L0 (the real probes, a simulated NVML) and what the Slurm
back end is asked to do, over a scripted ``scontrol``/``sinfo`` (the real-slurmd test is
tests/integration/test_slurm_healthcheck.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from robustctl.cli.main import main
from robustctl.config import SweepSettings
from robustctl.errors import UsageError
from robustctl.schedulers.slurm import CommandOutput, Slurm
from robustctl.store import Store
from robustctl.sweep.healthcheck import (
    BUDGET_S,
    MAX_REASON,
    PROBE_BUDGET_S,
    SLURM_LIMIT_S,
    LocalCheckRequest,
    drain_reason,
    node_name,
    reason_check,
    run_local_check,
)
from robustctl.testing.fake_nvml import Ecc, EccCounts, FakeGpu, healthy_gpus, write_injection


class ScriptedSlurm:
    """``scontrol show node -o N`` / ``sinfo --json`` answer one node's state; updates are recorded."""

    def __init__(self, state: str = "IDLE", reason: str = "", *, fail: str | None = None) -> None:
        self.state, self.reason, self.fail = state, reason, fail
        self.updates: list[list[str]] = []

    def __call__(self, argv: Sequence[str], env: Mapping[str, str], timeout_s: float) -> CommandOutput:
        tool = Path(argv[0]).name
        assert timeout_s <= 5.0
        if self.fail is not None and tool == "scontrol" and argv[1] == self.fail:
            return CommandOutput(1, "", "slurm_update error: Invalid node state specified")
        if tool == "scontrol" and argv[1] == "show":
            line = f"NodeName=sn2 Arch=x86_64 State={self.state} Partitions=debug"
            return CommandOutput(
                0, line + (f" Reason={self.reason} [root@2026-11-24T10:00:00]" if self.reason else ""), ""
            )
        if tool == "sinfo":
            base, *flags = self.state.lower().split("+")
            node = {
                "name": "sn2",
                "state": base,
                "state_flags": [f.upper() for f in flags],
                "reason": self.reason,
            }
            return CommandOutput(0, json.dumps({"nodes": [node]}), "")
        if tool == "scontrol" and argv[1] == "update":
            self.updates.append(list(argv[2:]))
            return CommandOutput(0, "", "")
        raise AssertionError(argv)


@pytest.fixture
def nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The nvml probe reads this injection file (2 healthy GPUs; tests rewrite it)."""
    path = write_injection(tmp_path / "nvml.json", healthy_gpus(2))
    monkeypatch.setenv("ROBUSTCTL_NVML_INJECTION", str(path))
    return path


def check(slurm: ScriptedSlurm | None, *, state: Path | None = None, gpus: int = 2) -> object:
    req = LocalCheckRequest(
        node="sn2", slurm=slurm is not None, gpus=gpus, state=state, python=sys.executable
    )
    return run_local_check(req, slurm=Slurm(runner=slurm, timeout_s=5.0) if slurm is not None else None)


def test_budget_is_below_slurms_limit_with_room_for_every_slurm_command() -> None:
    assert PROBE_BUDGET_S + 4 * 5.0 == BUDGET_S < SLURM_LIMIT_S


def test_node_name_order_and_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    assert node_name("gpu01", {"SLURMD_NODENAME": "sn2"}) == "gpu01"
    assert node_name(None, {"SLURMD_NODENAME": "sn2"}) == "sn2"
    monkeypatch.setattr("socket.gethostname", lambda: "node17.cluster.example")
    assert node_name(None, {}) == "node17"
    with pytest.raises(UsageError, match="--node"):
        node_name("bad name;rm", {})


def test_reason_check_knows_only_robustctls_own_reasons() -> None:
    assert reason_check("robustctl: health check: nvml.count: 1 of 2 expected GPUs visible") == "nvml.count"
    assert reason_check("robustctl: sweep: host.xid: XID 79 (+1 more)") == "host.xid"
    for other in ("admin: PSU swap", "robustctl: slow NIC on rank 7", "robustctl-standby: warm spare", ""):
        assert reason_check(other) is None
    long = drain_reason([("nvml.ecc", "x" * 500), ("host.xid", "y")])
    assert len("robustctl: " + long) <= MAX_REASON and long.endswith("… (+1 more)")
    assert reason_check("robustctl: " + long) == "nvml.ecc"


def test_a_finding_drains_the_node_with_the_check_in_the_reason(nvml: Path) -> None:
    write_injection(nvml, healthy_gpus(1))
    slurm = ScriptedSlurm()
    res = check(slurm)
    assert res.exit_code == 2 and res.action == "drained"  # type: ignore[attr-defined]
    assert res.findings == ("nvml.count: 1 of 2 expected GPUs visible",)  # type: ignore[attr-defined]
    [update] = slurm.updates
    assert update[:2] == ["nodename=sn2", "state=drain"]
    assert update[2].startswith("reason=robustctl: health check: nvml.count: 1 of 2 expected GPUs visible")


def test_an_already_drained_node_keeps_its_reason_and_a_standby_is_drained(nvml: Path) -> None:
    write_injection(nvml, [FakeGpu(), FakeGpu(ecc=Ecc(volatile=EccCounts(uncorrected=2)))])
    admin = ScriptedSlurm("IDLE+DRAIN", "admin: PSU swap")
    res = check(admin)
    assert res.exit_code == 2 and admin.updates == []  # type: ignore[attr-defined]
    assert res.action == "already drained (reason: admin: PSU swap)"  # type: ignore[attr-defined]
    standby = ScriptedSlurm("IDLE+DRAIN", "robustctl-standby: warm spare")
    assert check(standby).action == "drained"  # type: ignore[attr-defined]
    assert standby.updates[0][2].startswith("reason=robustctl: health check: nvml.ecc")


@pytest.mark.parametrize(
    ("reason", "resumed"),
    [
        ("robustctl: health check: nvml.count: 1 of 2 expected GPUs visible", True),
        ("robustctl: sweep: nvml.ecc: 2 uncorrectable", True),
        ("robustctl: sweep: burn.tflops: 40% below peers", False),  # L1: not re-checked here
        ("robustctl: slow NIC on rank 7", False),  # robustctl evict's free text
        ("robustctl-standby: warm spare", False),
        ("admin: PSU swap", False),
    ],
)
def test_a_healthy_node_is_resumed_only_from_robustctls_own_cleared_reason(
    nvml: Path, reason: str, resumed: bool
) -> None:
    slurm = ScriptedSlurm("IDLE+DRAIN", reason)
    res = check(slurm)
    assert res.exit_code in (0, 1)  # type: ignore[attr-defined]  # 1: a busy test machine's host.load warning
    assert (slurm.updates == [["nodename=sn2", "state=resume"]]) is resumed
    assert (res.action == "resumed") is resumed  # type: ignore[attr-defined]
    assert res.slurm_reason == reason  # type: ignore[attr-defined]


def test_a_node_that_could_not_be_checked_is_neither_drained_nor_resumed(nvml: Path) -> None:
    nvml.write_text("{not json")
    slurm = ScriptedSlurm("IDLE+DRAIN", "robustctl: health check: nvml.count: 1 of 2 expected GPUs visible")
    res = check(slurm)
    assert slurm.updates == [] and res.exit_code == 3 and res.action.startswith("left drained")  # type: ignore[attr-defined]


def test_slurm_errors_are_exit_3_or_stay_2_on_a_finding(nvml: Path) -> None:
    res = check(ScriptedSlurm("IDLE+DRAIN", "robustctl: health check: nvml.ecc: x", fail="update"))
    assert res.exit_code == 3 and "Invalid node state" in (res.error or "")  # type: ignore[attr-defined]
    write_injection(nvml, healthy_gpus(1))
    res = check(ScriptedSlurm(fail="update"))
    assert res.exit_code == 2 and res.error  # type: ignore[attr-defined]


def test_with_a_store_history_is_recorded_and_a_network_flap_waits(nvml: Path, tmp_path: Path) -> None:
    from robustctl.models import CheckResult, HostReport, Outcome, RunReport, Status
    from robustctl.sweep.healthcheck import _decide

    def report(status: Status) -> RunReport:
        c = CheckResult("host.nic", 0, status, "eth0 down")
        h = HostReport("sn2", "local", status, Outcome.OK, (c,))
        return RunReport(status, (h,), (), (), (), 0.0, 0.0)

    req = LocalCheckRequest(node="sn2", slurm=True, state=tmp_path / "state.db")
    t = [1000.0]
    first = _decide(req, report(Status.CRITICAL), SweepSettings(), lambda: t[0])
    assert first[0] == [] and first[1] == ["host.nic"] and first[2] == str(tmp_path / "state.db")
    t[0] += 60
    second = _decide(req, report(Status.CRITICAL), SweepSettings(), lambda: t[0])
    assert [c for c, _ in second[0]] == ["host.nic"]  # twice within 5 minutes: confirmed
    with Store.open(tmp_path / "state.db") as store:
        from robustctl.sweep import history

        assert history.check_states(store, ["sn2"])[("sn2", "host.nic")].status == "critical"
    # Without a store, one CRITICAL run is a finding (no history to debounce with).
    nostore = _decide(LocalCheckRequest(node="sn2"), report(Status.CRITICAL), SweepSettings(), lambda: 0.0)
    assert [c for c, _ in nostore[0]] == ["host.nic"]
    bad = LocalCheckRequest(node="sn2", state=tmp_path / "missing-dir" / "x" / "state.db")
    (tmp_path / "missing-dir").write_text("a file, not a directory")
    fallback = _decide(bad, report(Status.CRITICAL), SweepSettings(), lambda: 0.0)
    assert [c for c, _ in fallback[0]] == ["host.nic"] and "history not recorded" in fallback[3][0]


def test_cli_local_exit_codes_and_refusals(nvml: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--local", "--node", "sn2", "--gpus", "2", "--json"]) in (0, 1)  # 1: host.load
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "sweep-local" and doc["node"] == "sn2" and doc["action"] == "none"
    write_injection(nvml, healthy_gpus(1))
    assert main(["sweep", "--local", "--node", "sn2", "--gpus", "2", "--quiet"]) == 2
    assert "sn2: CRITICAL: nvml.count" in capsys.readouterr().err
    for argv in (["--slurm"], ["--gpus", "2"], ["--local", "--act"], ["--local", "--level", "1"],
                 ["--local", "--transport", "srun"], ["--local", "--node", "a b"]):  # fmt: skip
        assert main(["sweep", *argv]) == 64, argv
