"""Recording suspects in the state store: marks, skips, clears; what diagnose and stacks reports name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from robustctl.config import ParallelLayout
from robustctl.models import CheckResult, HostReport, LevelSummary, Outcome, RunReport, Status, to_jsonable
from robustctl.stacks.model import Frame, ProcessDump, ThreadStack
from robustctl.stacks.result import analyze_stacks
from robustctl.store import MachineState, Readiness, Store, StoreError
from robustctl.suspects import (
    MAX_REASON,
    RecordResult,
    SkippedHost,
    diagnose_findings,
    record_in_store,
    record_suspects,
    stacks_findings,
    verified_healthy,
)


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        self.t += 1
        return self.t


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "state.db", clock=Clock(), who="ops@cron") as s:
        yield s


def state_of(store: Store, host: str) -> MachineState | None:
    rec = store.machine(host)
    return rec.state if rec is not None else None


# --- record_suspects ----------------------------------------------------------------------------


def test_marks_named_hosts_suspect_with_reason_and_history(store: Store) -> None:
    store.set_state("n2", MachineState.RETURNED, "GPU replaced")
    res = record_suspects(
        store,
        {"n1": "diagnose L0: XID 79 on GPU 3", "n2": "diagnose L1: burn mismatches on cuda:0"},
        source="diagnose",
    )
    assert res == RecordResult("diagnose", str(store.path), marked=("n1", "n2"))
    rec = store.machine("n1")
    assert (
        rec is not None and rec.state is MachineState.SUSPECT and rec.reason == "diagnose L0: XID 79 on GPU 3"
    )
    assert [(h.from_state, h.to_state, h.reason, h.who) for h in store.history("n1")] == [
        (None, "suspect", "diagnose L0: XID 79 on GPU 3", "ops@cron")
    ]
    assert [(h.from_state, h.to_state) for h in store.history("n2")][-1] == ("returned", "suspect")


def test_already_suspect_host_is_not_rewritten(store: Store) -> None:
    record_suspects(store, {"n1": "diagnose L0: first"}, source="diagnose")
    before = store.history("n1")
    res = record_suspects(store, {"n1": "stacks: rank 3 hung in compute"}, source="stacks")
    assert res.marked == () and res.unchanged == ("n1",) and res.suspects == ("n1",)
    assert store.history("n1") == before
    rec = store.machine("n1")
    assert rec is not None and rec.reason == "diagnose L0: first"


def test_evicted_and_standby_hosts_are_skipped_with_their_state(store: Store) -> None:
    store.set_state("gone", MachineState.EVICTED, "xid 79")
    store.set_state("spare", MachineState.STANDBY, "standby add", readiness=Readiness.READY)
    rows = len(store.history())
    res = record_suspects(
        store,
        {"gone": "diagnose L0: x", "spare": "diagnose L0: y", "inv-spare": "diagnose L0: z", "ok": "w"},
        source="diagnose",
        inventory_states={"inv-spare": MachineState.STANDBY},
    )
    assert res.marked == ("ok",)
    assert res.skipped == (
        SkippedHost("gone", MachineState.EVICTED),
        SkippedHost("spare", MachineState.STANDBY),
        SkippedHost("inv-spare", MachineState.STANDBY),
    )
    assert state_of(store, "gone") is MachineState.EVICTED
    spare = store.machine("spare")
    assert spare is not None and spare.state is MachineState.STANDBY and spare.readiness is Readiness.READY
    assert store.machine("inv-spare") is None  # stays in its inventory state: no row written
    assert len(store.history()) == rows + 1
    assert "left alone: gone (evicted), spare (standby), inv-spare (standby)" in res.summary()


def test_clears_only_suspect_hosts(store: Store) -> None:
    record_suspects(store, {"sus": "diagnose L0: x"}, source="diagnose")
    store.set_state("gone", MachineState.EVICTED, "xid 79")
    store.set_state("act", MachineState.ACTIVE, "returned")
    rows = len(store.history())
    res = record_suspects(
        store,
        {"new": "diagnose L2: slow"},
        cleared=["sus", "gone", "act", "never-seen"],
        source="diagnose",
        clear_reason="diagnose: healthy at levels L0–L3",
    )
    assert res.marked == ("new",) and res.cleared == ("sus",) and res.skipped == ()
    assert state_of(store, "sus") is MachineState.ACTIVE
    assert store.history("sus")[-1].reason == "diagnose: healthy at levels L0–L3"
    assert store.history("sus")[-1].from_state == "suspect"
    assert state_of(store, "gone") is MachineState.EVICTED and state_of(store, "never-seen") is None
    assert len(store.history()) == rows + 2  # new → suspect, sus → active; nothing else written
    assert res.summary() == f"recorded 1 suspect (new) in {store.path}; cleared 1 (sus)"


def test_reason_is_one_short_line_and_named_and_cleared_is_an_error(store: Store) -> None:
    record_suspects(store, {"n1": "line one\n  line two " + "x" * 500, "n2": ""}, source="stacks")
    r1, r2 = store.machine("n1"), store.machine("n2")
    assert r1 is not None and "\n" not in r1.reason and len(r1.reason) == MAX_REASON
    assert r1.reason.startswith("line one line two x") and r1.reason.endswith("…")
    assert r2 is not None and r2.reason == "stacks: named suspect"
    with pytest.raises(ValueError, match="both named suspect and cleared"):
        record_suspects(store, {"n3": "x"}, cleared=["n3"], source="diagnose")


def test_read_only_store_raises_store_error_naming_the_file(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    Store.open(db).close()
    db.chmod(0o444)
    with pytest.raises(StoreError, match="read-only") as exc:
        record_in_store(db, {"n1": "diagnose L0: x"}, source="diagnose")
    assert str(db) in str(exc.value)


def test_nothing_to_write_does_not_create_the_store(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "state.db"
    res = record_in_store(db, {}, cleared=["n1"], source="diagnose")
    assert res == RecordResult("diagnose", str(db)) and not db.exists()
    assert res.summary() == "no suspects: no machine marked suspect in the state store"
    res = record_in_store(db, {"n1": "diagnose L0: x"}, source="diagnose")
    assert res.marked == ("n1",) and db.exists()
    assert to_jsonable(res) == {
        "state": str(db),
        "source": "diagnose",
        "marked": ["n1"],
        "unchanged": [],
        "cleared": [],
        "skipped": [],
        "error": None,
    }


# --- diagnose reports ---------------------------------------------------------------------------


def ok(name: str, level: int) -> CheckResult:
    return CheckResult(name, level, Status.OK, "fine")


def host(name: str, status: Status, *checks: CheckResult, outcome: Outcome = Outcome.OK) -> HostReport:
    return HostReport(name, "local", status, outcome, checks)


def run_report(hosts: list[HostReport], ran: int) -> RunReport:
    levels = tuple(LevelSummary(lv, f"l{lv}", ran=lv <= ran) for lv in range(4))
    return RunReport(
        status=Status.worst(h.status for h in hosts),
        hosts=tuple(hosts),
        levels=levels,
        suspects=tuple(h.host for h in hosts if h.status is Status.CRITICAL),
        unknown=tuple(h.host for h in hosts if h.status is Status.UNKNOWN),
        started_at=0.0,
        finished_at=1.0,
    )


def test_diagnose_names_critical_hosts_and_clears_only_verified_ones() -> None:
    xid = CheckResult("host.xid", 0, Status.CRITICAL, "XID 79 on 0000:3b:00.0 (GPU fell off the bus)")
    ecc = CheckResult("nvml.ecc", 0, Status.CRITICAL, "GPU 3: 2 uncorrectable ECC errors", device="gpu3")
    na = CheckResult("nvml.count", 0, Status.NOT_APPLICABLE, "no GPU")
    hosts = [
        host("bad", Status.CRITICAL, ok("host.disk", 0), xid, ecc),
        host("good", Status.OK, ok("host.disk", 0), na, ok("burn.verify", 1)),
        host("warn", Status.WARNING, ok("host.disk", 0), CheckResult("host.load", 0, Status.WARNING, "load")),
        host(
            "gone",
            Status.UNKNOWN,
            CheckResult("quick.reach", 0, Status.UNKNOWN, "unreachable: refused"),
            outcome=Outcome.UNREACHABLE,
        ),
        host("l0only", Status.OK, ok("host.disk", 0)),  # nothing at L1: not verified there
    ]
    found = diagnose_findings(run_report(hosts, ran=1), max_level=1)
    assert found.named == {"bad": "diagnose L0: XID 79 on 0000:3b:00.0 (GPU fell off the bus) (+1 more)"}
    assert found.cleared == ("good",)
    assert found.clear_reason == "diagnose: healthy at levels L0–L1"
    assert diagnose_findings(run_report(hosts, ran=0), max_level=0).cleared == ("good", "l0only")
    assert diagnose_findings(run_report(hosts, ran=0), max_level=0).clear_reason == (
        "diagnose: healthy at level L0"
    )


def test_a_run_that_stopped_early_or_a_lone_host_at_l3_clears_nothing() -> None:
    good = host("good", Status.OK, ok("host.disk", 0), ok("burn.verify", 1))
    stopped = run_report([good], ran=0)  # L1 did not run (another host's suspects at L0)
    assert not verified_healthy(good, stopped, 1)
    assert verified_healthy(good, run_report([good], ran=1), 1)
    lone = host(
        "lone",
        Status.OK,
        ok("host.disk", 0),
        ok("burn.verify", 1),
        ok("allreduce.intra", 2),
        CheckResult("allreduce.pair", 3, Status.NOT_APPLICABLE, "needs at least two hosts"),
    )
    assert not verified_healthy(lone, run_report([lone], ran=3), 3)
    assert verified_healthy(lone, run_report([lone], ran=3), 2)


# --- stacks reports -----------------------------------------------------------------------------

ROOT = [("<module>", "train.py"), ("main", "train.py"), ("step", "train.py")]
WAIT = [*ROOT, ("all_reduce", "torch/distributed/distributed_c10d.py")]
RECV = [*ROOT, ("recv", "torch/distributed/distributed_c10d.py")]
COMPUTE = [*ROOT, ("_call_impl", "torch/nn/modules/module.py"), ("forward", "model.py")]


def mk(rank: int, path: list[tuple[str, str]]) -> ProcessDump:
    frames = tuple(Frame(fn, f, 1) for fn, f in reversed(path))
    return ProcessDump((ThreadStack("1", "MainThread", frames),), rank=rank, pid=100 + rank)


def test_stacks_report_suspects_are_recorded_never_cleared(store: Store) -> None:
    # ByteRobust Fig. 7: rank 12 stuck in compute, its PP stage-mates 0, 4, 8 waiting in recv.
    dumps = [mk(r, COMPUTE if r == 12 else RECV if r in (0, 4, 8) else WAIT) for r in range(16)]
    rep = analyze_stacks(
        dumps, layout=ParallelLayout(tp=2, pp=4, dp=2), ranks_per_host=2, hosts=[f"node{i}" for i in range(8)]
    )
    assert rep.suspect_hosts == ("node0", "node2", "node4", "node6")
    named = stacks_findings(rep)
    assert named == {
        "node0": "stacks: rank 0 hung in p2p (pp group 0)",
        "node2": "stacks: rank 4 hung in p2p (pp group 0)",
        "node4": "stacks: rank 8 hung in p2p (pp group 0)",
        "node6": "stacks: rank 12 hung in compute (pp group 0)",
    }
    store.set_state("node4", MachineState.EVICTED, "earlier")
    record_suspects(store, {"node1": "diagnose L0: x"}, source="diagnose")
    res = record_suspects(store, named, source="stacks")
    assert res.marked == ("node0", "node2", "node6")
    assert res.skipped == (SkippedHost("node4", MachineState.EVICTED),)
    assert state_of(store, "node1") is MachineState.SUSPECT  # stacks clears nothing
    assert store.history("node6")[-1].reason == "stacks: rank 12 hung in compute (pp group 0)"
    healthy = analyze_stacks([mk(r, WAIT) for r in range(16)], layout=ParallelLayout(tp=2, pp=4, dp=2))
    assert stacks_findings(healthy) == {}
