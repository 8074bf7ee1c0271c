"""``robustctl watch`` unattended on the SSH test bed: a hang, then a crash, each recovered with no human step.

The job of :mod:`tests.integration.hangjob` (minimegatron launched by robustctl itself: tp=1, pp=2,
dp=2, one rank per host on node01-node04, checkpoints every 3 steps in a directory every host sees),
with warm standbys ready in the store and the inventory's ``watch:`` section set small: a hang after
:data:`STALL_AFTER_S` without a new step, no cool-down. A watcher thread calls
:func:`~robustctl.commands.watch.run_watch_once` over and over (the library call the ``watch`` loop
drives); the test only injects faults and reads what happened:

1. **Hang**: rank 2 hangs in compute (fault file). The watcher decides ``hang`` and runs the shipped
   ``hang`` playbook: ``stacks`` names rank 2's PP group {node01, node03}, ``evict`` takes both out,
   the first two standbys take their places, ``restart`` resumes from the newest complete checkpoint.
2. **Crash**, once the job trains again and the watcher closed the first incident: rank 1 raises a
   CUDA error (``crash:cuda``) while its host logs XID 79 (the GPU fell off the bus). The watcher
   decides ``crash`` and runs the shipped ``job-failed`` playbook: ``diagnose`` names that host (its
   XID), ``evict`` takes it out, the third standby takes its place, ``restart``.

A fault file names ranks, not machines: each fault is removed once the process it was injected into
is gone (the machine it models is then out of the job), so the relaunched rank does not meet it
again. The hang's PP group takes two standbys and the crash's host a third: three standbys in all.

Asserted: each watcher decision that ran a playbook has a journal run that reached its end
(``done``); the job makes new steps in new processes after each recovery; the audit log holds one
eviction per incident, of the machines named; the store holds two closed incidents (hang, crash)
whose onsets (the last good step) are within :data:`ONSET_TOLERANCE_S` of the injections; and
``run_ettr`` reports both. Only loopback addresses: the hosts are 127.0.0.2-8.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml

from robustctl import watchstore
from robustctl.actions.restart import picked_iteration
from robustctl.commands.ettr import EttrRequest, run_ettr
from robustctl.commands.watch import WatchRequest, WatchResult, run_watch_once
from robustctl.inventory import load_inventory
from robustctl.playbooks import journal
from robustctl.store import MachineState, Readiness, Store
from robustctl.transport.pool import TransportPool
from tests.support.needs import needed

from .conftest import require_testbed
from .hangjob import JOB, JOB_HOSTS, HangJob, dumps
from .testbed import Testbed

STANDBYS = (4, 5, 6)
"""node05-node07: two for the hang's PP group, one for the crashed rank's host."""
STALL_AFTER_S = 10.0
"""The smallest ``watch.stall_after_s`` the inventory accepts: the hang is judged 10 s after its onset."""
HUNG = 2  # PP group {0, 2}: node01 and node03 are over-evicted
CRASHED = 1  # node02 after the hang's recovery
EVAL_INTERVAL_S = 0.5
"""Pause between two evaluations of the watcher thread (the ``watch`` loop's ``interval_s``, small)."""
ONSET_TOLERANCE_S = 5.0
"""An incident's onset (the job's last good step) lies at most this far from its injection: a step
takes well under a second here and the fault file is re-read every 0.5 s."""
RECOVERY_TIMEOUT_S = 150.0
"""Longest wait for one injected fault to be detected, recovered and the incident closed."""


class Watcher(threading.Thread):
    """``run_watch_once`` every :data:`EVAL_INTERVAL_S` until stopped; results and the first error kept."""

    def __init__(self, inventory: Path, state: Path) -> None:
        super().__init__(name="watcher", daemon=True)
        self.inventory = load_inventory(inventory)
        self.state = state
        self.results: list[WatchResult] = []
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        pool = TransportPool(scheduler=self.inventory.scheduler)
        try:
            while not self.done.is_set():
                res = run_watch_once(
                    WatchRequest(inventory=self.inventory, job=JOB, state=self.state, yes=True), pool=pool
                )
                self.results.append(res)
                self.done.wait(EVAL_INTERVAL_S)
        except BaseException as exc:
            self.error = exc
        finally:
            pool.close()

    def check(self) -> None:
        """Fail the test with the watcher's own error, if it had one."""
        if self.error is not None:
            raise AssertionError(f"the watcher failed: {self.error!r}") from self.error
        assert self.is_alive(), "the watcher thread ended"

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=RECOVERY_TIMEOUT_S)


def add_watch(hj: HangJob) -> None:
    """The inventory with a third standby and a small ``watch:`` section (the shipped ``hang`` and
    ``job-failed`` playbooks, run with ``--yes``: the watcher is unattended); the standbys ready."""
    doc = yaml.safe_load(hj.inventory.read_text())
    doc["hosts"] = [*hj.tb.host_entries(JOB_HOSTS), *hj.tb.host_entries(STANDBYS, state="standby")]
    doc["watch"] = {"stall_after_s": STALL_AFTER_S, "cooldown_s": 0, "interval_s": 1}
    hj.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    hj.standbys = [hj.tb.name(i) for i in STANDBYS]
    with Store.open(hj.state) as s:
        for name in hj.standbys:
            s.set_state(name, MachineState.STANDBY, "checked", readiness=Readiness.READY)


@pytest.fixture
def watched(testbed: Testbed, tmp_path: Path) -> Iterator[tuple[HangJob, Watcher]]:
    """The job training past step 3, a watcher thread evaluating it."""
    require_testbed()
    if testbed.n_hosts < 7:
        needed("needs a testbed of at least 7 hosts (ROBUSTCTL_TESTBED_HOSTS)")
    with HangJob(testbed, tmp_path) as hj:
        add_watch(hj)
        hj.cold_start()
        hj.wait_step(3)
        w = Watcher(hj.inventory, hj.state)
        w.start()
        try:
            yield hj, w
        finally:
            w.stop()
    assert hj.mini.processes() == [], "the job left processes behind"


def gone(pid: int) -> bool:
    """The process ended (a zombie counts as ended)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def incidents(hj: HangJob) -> list[watchstore.IncidentRecord]:
    with Store.open(hj.state) as s:
        return list(watchstore.incidents(s, JOB))


def inject_and_recover(
    hj: HangJob, w: Watcher, rank: int, spec: str, n_incident: int
) -> tuple[float, set[int]]:
    """Inject ``spec`` into ``rank``, remove it once that rank's process is gone, and wait until the
    watcher closed incident number ``n_incident`` and every rank trains in a new process.
    Returns the injection time (UNIX s) and the pids before it."""
    before = hj.progress()
    old_pids = {int(d["pid"]) for d in before.values()}
    faulted = int(before[rank]["pid"])
    injected = time.time()
    hj.mini.set_faults(spec)
    cleared = False
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    while True:
        w.check()
        if not cleared and gone(faulted):
            hj.mini.clear_faults()
            cleared = True
        incs = incidents(hj)
        closed = len(incs) >= n_incident and incs[n_incident - 1].closed_at is not None
        prog = hj.progress()
        trains = len(prog) == 4 and all(
            int(d["pid"]) not in old_pids and int(d["step"]) > 0 for d in prog.values()
        )
        if cleared and closed and trains:
            return injected, old_pids
        if time.monotonic() > deadline:
            runs = [r.playbook_run for r in w.results if r.playbook_run is not None]
            events = [*runs, *((r.action, r.decision.get("reason")) for r in w.results[-2:])]
            raise AssertionError(
                f"{spec}: not recovered within {RECOVERY_TIMEOUT_S:g} s (cleared {cleared}); incidents "
                f"{dumps([i.__dict__ for i in incs])}; last decisions {dumps(events)}\n{hj.log_tails()}"
            )
        time.sleep(0.1)


def test_watch_recovers_a_hang_then_a_crash_unattended(watched: tuple[HangJob, Watcher]) -> None:
    hj, w = watched
    tb = hj.tb
    first_evals = len(w.results)
    deadline = time.monotonic() + 30
    while len(w.results) == first_evals:  # one evaluation of the healthy job
        w.check()
        assert time.monotonic() < deadline, "the watcher made no evaluation"
        time.sleep(0.05)
    assert w.results[0].action == "none", dumps(w.results[0].to_json())

    # 1. a hang
    hang_at, pids1 = inject_and_recover(hj, w, HUNG, f"hang:compute:rank={HUNG}", 1)
    pp_group = [tb.name(0), tb.name(2)]
    assert [sorted(a.targets) for a in hj.audits("evict")] == [pp_group]
    hosts = hj.job_hosts()
    assert not set(hosts) & set(pp_group) and set(hj.standbys[:2]) <= set(hosts), hosts
    step_after_hang = max(int(d["step"]) for d in hj.wait_step(1, not_pids=pids1).values())

    # 2. a crash: a CUDA error on rank 1 while its host's GPU fell off the bus (XID 79)
    crashed_host = hosts[CRASHED]
    xid_line = tb.inject_xid(tb.index_of(crashed_host), 79)
    crash_at, pids2 = inject_and_recover(hj, w, CRASHED, f"crash:cuda:rank={CRASHED}", 2)
    hj.wait_step(step_after_hang, not_pids=pids2)
    evictions = hj.audits("evict")
    assert [sorted(a.targets) for a in evictions] == [pp_group, [crashed_host]], (xid_line, evictions)
    assert all(a.status == "applied" for a in evictions), evictions
    hosts = hj.job_hosts()
    assert crashed_host not in hosts and set(hj.standbys) <= set(hosts), hosts
    w.stop()
    assert w.error is None, repr(w.error)

    # the watcher's decisions: exactly two runs, each a journal run that reached its end
    with Store.open(hj.state) as s:
        events = list(watchstore.events(s, JOB))
        runs = [e for e in events if e.action is watchstore.WatchAction.RUN]
        assert [(e.signal_class, e.playbook) for e in runs] == [("hang", "hang"), ("crash", "job-failed")], (
            dumps([(e.action.value, e.signal_class, e.reason) for e in events])
        )
        steps: dict[str | None, list[tuple[str, str]]] = {}
        loaded: dict[int, int | None] = {}  # playbook run id -> the checkpoint its restart loaded
        for e in runs:
            assert e.playbook_run_id is not None, e
            rec = journal.run_record(s, e.playbook_run_id)
            assert rec is not None and rec.status == "done", (e, rec)
            steps[e.playbook] = [(x.step, x.status) for x in rec.steps]
            restart = next(x for x in rec.steps if x.step == "restart")
            loaded[e.playbook_run_id] = picked_iteration(restart.result)
    assert steps["hang"][:4] == [
        ("stacks", "done"),
        ("evict", "done"),
        ("standby", "done"),
        ("restart", "done"),
    ]
    assert [x for x in steps["job-failed"] if x[0] in ("evict", "standby", "restart")] == [
        ("evict", "done"),
        ("standby", "done"),
        ("restart", "done"),
    ], steps["job-failed"]

    # two incidents, onsets at the injections, both closed by a new step
    incs = incidents(hj)
    assert [i.incident_class for i in incs] == ["hang", "crash"], dumps([i.__dict__ for i in incs])
    for inc, at in zip(incs, (hang_at, crash_at), strict=True):
        assert abs(inc.onset_at - at) <= ONSET_TOLERANCE_S, (inc, at)
        assert inc.closed_at is not None and inc.playbook_run_id is not None, inc
        # the checkpoint the restart loaded (its journal result); the job may have written it after
        # the watcher's last reading before the fault (last_step), so last_step does not bound it
        assert inc.checkpoint_step is not None and inc.checkpoint_step == loaded[inc.playbook_run_id], (
            inc,
            loaded,
        )
    assert [i.playbook for i in incs] == ["hang", "job-failed"]

    # the ETTR ledger reports both
    ettr = run_ettr(EttrRequest(job=JOB, state=hj.state))
    assert ettr.has_data, ettr.message
    rows = ettr.incidents
    assert len(rows) == 2, dumps(ettr.to_json())
    assert [r.playbook for r in rows] == ["hang", "job-failed"], dumps(ettr.to_json())
    assert [sorted(r.machines_evicted) for r in rows] == [pp_group, [crashed_host]], dumps(ettr.to_json())
    assert all(r.mttr_s is not None and r.mttr_s > 0 for r in rows), dumps(ettr.to_json())
    assert ettr.ledger is not None and 0 < ettr.ledger.cumulative_ettr < 1, dumps(ettr.to_json())
