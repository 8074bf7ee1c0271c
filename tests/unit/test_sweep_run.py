"""The fleet sweep's orchestration in pieces (robustctl/sweep/run.py): which hosts, which levels, the
merged report, acting on the policy, each host's row, the session lock, and the exit-code ladder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from robustctl.errors import RobustctlError, UsageError
from robustctl.exit_codes import ExitCode
from robustctl.inventory import Inventory, load_inventory
from robustctl.models import HostReport, LevelSummary, Outcome, RunReport, Status
from robustctl.store import MachineState, Store
from robustctl.sweep.history import HOST_CHECK, CheckState
from robustctl.sweep.lock import SweepBusy
from robustctl.sweep.policy import CheckClass, Decision, Finding, sweep_exit_code
from robustctl.sweep.run import (
    DRAIN_REASON_CHARS,
    SweepSpec,
    act_on,
    merge_reports,
    split_levels,
    sweep_fleet,
    sweep_hosts,
    sweep_session,
    sweep_targets,
    with_transport,
)
from tests.unit.test_sweep import Clock, inventory


def load(tmp: Path, sweep: dict[str, str] | None = None, jobs: bool = False) -> Inventory:
    return load_inventory(inventory(tmp, sweep, jobs=jobs), environ={})


def host_report(name: str, status: Status) -> HostReport:
    return HostReport(name, "127.0.0.2", status, Outcome.OK)


def named(host: str, detail: str = "XID 79", confirmed: bool = True) -> Decision:
    return Decision(host, (Finding("host.xid", CheckClass.HARDWARE, detail, confirmed, "at once"),))


class Drains:
    """A drainer that records its calls and answers ``code`` (or raises ``error``)."""

    def __init__(self, code: int = 0, error: RobustctlError | None = None) -> None:
        self.code, self.error = code, error
        self.calls: list[tuple[list[str], str]] = []

    def __call__(self, hosts: Sequence[str], reason: str) -> int:
        self.calls.append((list(hosts), reason))
        if self.error is not None:
            raise self.error
        return self.code


# --- which hosts -------------------------------------------------------------------------------------


def test_targets_follow_the_stores_record_over_the_inventory_and_name_every_jobs_hosts(
    tmp_path: Path,
) -> None:
    inv = load(tmp_path, jobs=True)  # node[1-3] active, spare1 standby, gone1 evicted; job j: node[1-2]
    with Store.open(tmp_path / "s.db", clock=Clock()) as store:
        store.set_state("node3", MachineState.EVICTED, "test")  # evicted since: skipped
        store.set_state("gone1", MachineState.RETURNED, "test")  # back from repair: swept
        store.set_job_hosts("j", ["node1", "spare1"])  # a standby swapped in
        t = sweep_targets(inv.hosts, inv, store)
    assert [h.name for h in t.swept] == ["node1", "node2", "spare1", "gone1"]
    assert t.skipped == ("node3",)
    assert t.busy == {"node1", "node2", "spare1"}


def test_levels_above_0_only_on_hosts_no_job_holds_unless_asked(tmp_path: Path) -> None:
    hosts = load(tmp_path).hosts[:4]
    busy = frozenset({"node1", "spare1"})
    quick, deep = split_levels(hosts, busy, 0, include_busy=True)
    assert (quick, deep) == (list(hosts), [])
    quick, deep = split_levels(hosts, busy, 2, include_busy=False)
    assert [h.name for h in quick] == ["node1", "spare1"] and [h.name for h in deep] == ["node2", "node3"]
    quick, deep = split_levels(hosts, busy, 2, include_busy=True)
    assert (quick, deep) == ([], list(hosts))


def test_merged_report_keeps_the_asked_order_and_judges_the_union() -> None:
    quick = RunReport(
        Status.UNKNOWN,
        (host_report("b", Status.UNKNOWN),),
        (LevelSummary(0, "quick", True),),
        (),
        ("b",),
        10.0,
        20.0,
    )
    deep = RunReport(
        Status.CRITICAL,
        (host_report("a", Status.CRITICAL), host_report("c", Status.OK)),
        (LevelSummary(0, "quick", True), LevelSummary(1, "burn", True)),
        ("a",),
        (),
        5.0,
        30.0,
    )
    r = merge_reports([quick, deep], ["c", "missing", "b", "a"])
    assert [h.host for h in r.hosts] == ["c", "b", "a"]
    assert r.status is Status.CRITICAL and r.suspects == ("a",) and r.unknown == ("b",)
    assert [lv.level for lv in r.levels] == [0, 1]
    assert (r.started_at, r.finished_at) == (5.0, 30.0)


def test_with_transport_moves_every_host_or_refuses(tmp_path: Path) -> None:
    inv = load(tmp_path)
    srun = with_transport(inv, "srun")
    assert {(h.transport, h.address) for h in srun.hosts if h.name == "node1"} == {("srun", "node1")}
    local = with_transport(inv, "local")
    assert {h.address for h in local.hosts} == {"local"}
    assert with_transport(inv, "ssh").hosts == inv.hosts
    with pytest.raises(UsageError, match="transport ssh: host node1 is transport: local"):
        with_transport(local, "ssh")
    with pytest.raises(UsageError, match="bad --transport 'rsh'"):
        with_transport(inv, "rsh")


# --- acting ------------------------------------------------------------------------------------------


def test_act_records_suspects_and_drains_only_with_sweep_act_drain(tmp_path: Path) -> None:
    decisions = [named("node1"), named("node2", confirmed=False), named("spare1")]
    drains = Drains()
    with Store.open(tmp_path / "s.db", clock=Clock()) as store:
        out = act_on(load(tmp_path), store, decisions, drains)
        assert store.machine("node1") is not None and store.machine("node2") is None
    # spare1 is a standby in the inventory: never marked; node2 is pending: not named
    assert out == {"suspect": ["node1"], "drained": [], "skipped": ["spare1 (standby)"], "error": None}
    assert drains.calls == []  # sweep.act: suspect
    with Store.open(tmp_path / "d.db", clock=Clock()) as store:
        out = act_on(load(tmp_path, {"act": "drain"}), store, decisions, drains)
    assert out["drained"] == ["node1"] and out["error"] is None
    assert drains.calls == [(["node1"], "sweep: host.xid: XID 79")]


@pytest.mark.parametrize(
    ("drains", "error"),
    [
        (Drains(code=2), "drain not applied (exit 2): see robustctl audit"),
        (
            Drains(error=RobustctlError("rail: too many evictions")),
            "drain not applied: rail: too many evictions",
        ),
    ],
)
def test_a_failed_drain_is_an_error_line_not_a_failed_sweep(
    tmp_path: Path, drains: Drains, error: str
) -> None:
    with Store.open(tmp_path / "s.db", clock=Clock()) as store:
        out = act_on(load(tmp_path, {"act": "drain"}), store, [named("node1")], drains)
    assert out == {"suspect": ["node1"], "drained": [], "skipped": [], "error": error}


def test_nothing_named_nothing_done(tmp_path: Path) -> None:
    drains = Drains()
    with Store.open(tmp_path / "s.db", clock=Clock()) as store:
        out = act_on(load(tmp_path, {"act": "drain"}), store, [named("node1", confirmed=False)], drains)
        assert store.machines() == []
    assert out == {"suspect": [], "drained": [], "skipped": [], "error": None} and drains.calls == []


def test_the_drain_reason_is_bounded_however_many_hosts_are_named(tmp_path: Path) -> None:
    hosts = [f"n{i}" for i in range(20)]
    drains = Drains()
    with Store.open(tmp_path / "s.db", clock=Clock()) as store:
        out = act_on(load(tmp_path, {"act": "drain"}), store, [named(h, "x" * 150) for h in hosts], drains)
    assert out["drained"] == hosts
    ((drained, reason),) = drains.calls
    assert (
        drained == hosts and len(reason) == DRAIN_REASON_CHARS and reason.startswith("sweep: host.xid: xxx")
    )


# --- each host's row ---------------------------------------------------------------------------------


def state(host: str, check: str, status: str) -> CheckState:
    return CheckState(host, check, status, 0.0, 0.0, 1, "", ())


def test_a_hosts_row_is_its_recorded_verdict_its_checks_and_its_pending_findings() -> None:
    report = RunReport(
        Status.CRITICAL,
        (host_report("a", Status.CRITICAL), host_report("b", Status.UNKNOWN)),
        (),
        ("a",),
        ("b",),
        0.0,
        1.0,
    )
    states = {
        ("a", HOST_CHECK): state(
            "a", HOST_CHECK, "warning"
        ),  # pending: the policy's verdict, not the engine's
        ("a", "host.nic"): state("a", "host.nic", "critical"),
        ("a", "host.disk"): state("a", "host.disk", "ok"),
        ("b", "host.nic"): state("b", "host.nic", "ok"),
    }
    pending = Decision("a", (Finding("host.nic", CheckClass.NETWORK, "eth0 down", False, "1 failure(s)"),))
    a, b = sweep_hosts(report, states, [pending], frozenset({"b"}), {"a": 2})
    assert (a.status, a.named, a.pending, a.busy, a.max_level) == (
        Status.WARNING,
        False,
        ("host.nic",),
        False,
        2,
    )
    assert list(a.checks.items()) == [("host.disk", "ok"), ("host.nic", "critical")]
    # no verdict recorded: the engine's; no decision: nothing pending; no level: 0
    assert (b.status, b.named, b.pending, b.busy, b.max_level) == (Status.UNKNOWN, False, (), True, 0)
    assert dict(b.checks) == {"host.nic": "ok"}
    (a,) = sweep_hosts(report, states, [named("a")], frozenset(), {})[:1]
    assert a.named and a.pending == ()


# --- the session and the whole sweep -----------------------------------------------------------------


def test_one_sweep_session_at_a_time(tmp_path: Path) -> None:
    with sweep_session(tmp_path / "s.db", Clock()) as store:
        assert store.path == tmp_path / "s.db"
        with pytest.raises(SweepBusy), sweep_session(tmp_path / "s.db", Clock()):
            pass
    with sweep_session(tmp_path / "s.db", Clock()):
        pass  # released on leaving


def test_a_sweep_with_no_host_in_service_records_an_empty_skipped_run(tmp_path: Path) -> None:
    inv = load(tmp_path)
    gone = tuple(h for h in inv.hosts if h.name == "gone1")
    spec = SweepSpec(inventory=inv, state=tmp_path / "s.db", hosts=gone, act=True)
    clock = Clock()
    with sweep_session(spec.state, clock) as store:
        out = sweep_fleet(spec, store, clock=clock, drain=Drains())
    assert out.hosts == () and out.skipped == ("gone1",) and out.report.status is Status.SKIPPED
    assert out.acted == {"suspect": [], "drained": [], "skipped": [], "error": None}
    assert out.started_at == out.finished_at == clock.t and out.state == str(tmp_path / "s.db")


# --- the exit code -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("named_", "unchecked", "pending", "code"),
    [
        (True, True, True, ExitCode.CRITICAL),
        (False, True, True, ExitCode.UNKNOWN),
        (False, False, True, ExitCode.WARNING),
        (False, False, False, ExitCode.OK),
    ],
)
def test_a_confirmed_finding_outranks_an_unchecked_host_which_outranks_a_pending_one(
    named_: bool, unchecked: bool, pending: bool, code: ExitCode
) -> None:
    assert sweep_exit_code(named=named_, unchecked=unchecked, pending=pending) is code
