"""Soak: one fault of each class under ``robustctl watch`` and under today's practice, in one run.

First (unless ``--skip-failslow``) the fail-slow rule's detection delay and false alarms on the
test-bed job's step-time traces, with and without a slow rank (:mod:`bench.failslow`).

One test bed of :data:`HOSTS` loopback sshd hosts; the job of :mod:`tests.integration.hangjob`
(minimegatron launched by robustctl: tp=1, pp=2, dp=4, one rank per host on node01-node08, rank =
dp + 4·pp, so the PP groups are {r, r + 4}; checkpoints every 3 steps; collective timeout
``--pg-timeout-s``, default :data:`PG_TIMEOUT_S`) with :data:`STANDBY_COUNT` warm standbys. The same
schedule of five faults runs twice, each time on a fresh job, state store and standbys:

* **hang**: rank 2 hangs in compute (``hang:compute``);
* **crash**: rank 1 raises a CUDA error (``crash:cuda``) while its host logs XID 79;
* **fail-slow**: rank 3's compute takes :data:`SLOW_FACTOR` x as long (``slow``);
* **nan-loss**: last-stage rank 5 logs a NaN loss from its next step on (``nan:loss``; a transient
  NaN: the weights stay finite);
* **host-loss**: rank 6's host goes away: its sshd stopped and its rank killed (the peers then fail on
  the lost connection).

A fault file names ranks, not machines: a fault is removed once the process it was injected into is
gone (the machine it models is then out of the job, or the fault was transient).

Policies:

1. **watch**: a thread calls :func:`~robustctl.commands.watch.run_watch_once` (``yes=True``) every
   0.5 s with a small ``watch:`` section (hang after 10 s without a step, no cool-down, ten
   recoveries an hour) and the shipped playbooks, but for a faster fail-slow vote
   (:func:`_failslow_playbook`) and looser peer-relative bandwidth thresholds (:data:`PEER_RATIOS`). Per fault: *detect* = injection → the watcher's
   decision (the incident's ``decision_at``), *localize* = the playbook's stacks/diagnose span (the
   incident's localization times), *MTTR* = injection → every rank has finished a step in a new
   process, *evicted* = the incident's machines.
2. **baseline** (today's practice, no eviction): the job is declared failed when it leaves the
   running state by itself (a rank exits: for a hang when the peers' collectives hit the collective
   timeout; for a crash or a lost host when the peers see the lost connection), or, for the signals
   that do not stop a job, when the practice of the field would notice: a NaN loss at its first step
   (Megatron-LM's ``--check-for-nan-in-loss-and-grad``, on by default, raises there), a slowdown
   after :data:`OPERATOR_S` (``--operator-s``: a person notices the throughput drop; nothing in the
   job stops it). Then the whole job restarts in place
   (:func:`~robustctl.commands.restart.run_restart`, newest complete checkpoint, same hosts). A
   lost host fails that restart; after ``--operator-s`` a person has brought it back (its sshd is
   started again) and the restart is repeated. *detect* = injection → the job declared failed.

Each fault is injected :data:`HEALTHY_S` (``--healthy-s``) after the previous recovery. Both
policies' ETTR come from the same ledger (:func:`robustctl.commands.ettr.ettr_of_store`) over the
same kind of span (the first injection to ``--healthy-s`` after the last recovery): the watch's incidents and progress samples
are what the watcher recorded; the baseline's are recorded by this bench into its own store in the
same form (the same progress reading every 0.5 s, one incident per fault with onset, decision,
restart and first new step).

Printed per class and policy: detect, localize, MTTR, machines evicted, unproductive seconds of the
incident in the ledger; per policy the job's ETTR over the schedule; then the MTTR ratio baseline /
watch per class, both measured in this run. Caveats of the test bed, in the baseline's favour:
gloo's peers of a crashed rank fail at once (NCCL's often block until the watchdog's timeout), an
in-place restart succeeds because the fault is removed before it (a lost GPU would fail it again),
and the modeled person is quick. One sample per cell: the figures carry the noise of a shared machine.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
PG_TIMEOUT_S = 60.0
"""The job's collective timeout (s) by default: above the watch's hang recovery here (10 s stall, then
stacks, evict and restart: ~30 s on an idle 2-core machine), so the watch acts before the timeout does;
real jobs keep PyTorch's default of 10 minutes (NCCL) or 30 minutes."""
OPERATOR_S = 120.0
"""The baseline's person (s, default of ``--operator-s``): from a slowdown's onset to its restart, and
from a failed in-place restart to the lost host back. Short for an on-call person at night; the bench
waits it for real."""
HEALTHY_S = 60.0
"""Seconds of training between two faults and after the last one (default of ``--healthy-s``): both
policies get the same, so their ETTR over the schedule compares the time their recoveries cost (a
real job runs days between failures: its ETTR is far higher than this dense schedule's)."""
RECOVERY_TIMEOUT_S = 300.0
"""Longest wait for one fault to be recovered (past it the bench fails): a baseline lost host needs
the peers' failure, a failed restart, the person and a restart."""
DP = 4
WORLD = 2 * DP
STANDBY_COUNT = 7
"""Machines the watch evicts at most: the hang's PP group (2), the crashed host (1), the slow rank's
group (2), the lost host (1), plus one spare."""
HOSTS = WORLD + STANDBY_COUNT
SLOW_FACTOR = 3.0
"""The slow rank's compute multiplier: a step-time rise well over the watch's default 1.2 slow factor."""
VOTE_ROUNDS, VOTE_INTERVAL_S = 20, 0.5
"""The soak's fail-slow vote (:func:`_failslow_playbook`)."""
PEER_RATIOS = {"allreduce_peer_ratio": 0.5, "burn_peer_ratio": 0.5}
"""The diagnose thresholds of the soak's inventory: a host or pair below half the fleet median is a
suspect (defaults 0.9). Gloo on loopback with 8 hosts' probes sharing two cores varies by ±30%
between pairs, so the default names a healthy machine now and then (a NaN's all-level diagnose
evicted one in a trial run); a GPU fleet's NCCL busbw is far steadier."""
EVAL_INTERVAL_S = 0.5
"""Pause between two evaluations of the watcher, and between two progress readings of the baseline."""
FAULTS: tuple[tuple[str, int], ...] = (
    ("hang", 2),
    ("crash", 1),
    ("fail-slow", 3),
    ("nan-loss", 5),
    ("host-loss", 6),
)
"""The schedule: (class, rank), in order."""


@dataclass
class Row:
    """One fault under one policy (seconds from the injection; ``None``: not measured)."""

    cls: str
    detect: float | None
    localize: float | None
    mttr: float
    evicted: tuple[str, ...]
    lost_s: float | None = None
    marks: list[str] = field(default_factory=list)


@dataclass
class Injected:
    """A fault put in: when, the pids before it, the faulted rank's pid and host."""

    at: float
    old: set[int]
    pid: int
    host: str
    step: int


def _trains_anew(hj: Any, old: set[int]) -> bool:
    prog = hj.progress()
    return len(prog) == hj.world and all(
        int(d["pid"]) not in old and d.get("phase") == "train" for d in prog.values()
    )


def _gone(pid: int) -> bool:
    from tests.integration.test_watch_e2e import gone

    return bool(gone(pid))


def _any_gone(pids: set[int]) -> bool:
    return any(_gone(p) for p in pids)


def _nan_seen(hj: Any) -> bool:
    """A rank's heartbeat holds a loss that is not finite (the form the job writes it in)."""
    for d in hj.progress().values():
        loss = d.get("loss")
        if isinstance(loss, str) or (isinstance(loss, float) and not math.isfinite(loss)):
            return True
    return False


def _poll(what: str, ok: Callable[[], bool], hj: Any, check: Callable[[], None] = lambda: None) -> float:
    """Poll ``ok`` every 50 ms until it holds; its UNIX time. RuntimeError past the deadline."""
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    while True:
        check()
        if ok():
            return time.time()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {RECOVERY_TIMEOUT_S:g} s\n{hj.log_tails()}")
        time.sleep(0.05)


def _inject(hj: Any, cls: str, rank: int, not_before: float) -> Injected:
    """Put one fault in, a few steps after the last recovery (so a newer checkpoint exists) and not
    before the UNIX time ``not_before`` (the healthy training between two faults)."""
    hj.wait_step(max(int(d["step"]) for d in hj.progress().values()) + 4, timeout=RECOVERY_TIMEOUT_S)
    time.sleep(max(0.0, not_before - time.time()))
    prog = hj.progress()
    old = {int(d["pid"]) for d in prog.values()}
    pid = int(prog[rank]["pid"])
    step = max(int(d["step"]) for d in prog.values())
    host = hj.job_hosts()[rank]
    tb = hj.tb
    if cls == "crash":
        tb.inject_xid(tb.index_of(host), 79)
    at = time.time()
    if cls == "hang":
        hj.mini.set_faults(f"hang:compute:rank={rank}")
    elif cls == "crash":
        hj.mini.set_faults(f"crash:cuda:rank={rank}")
    elif cls == "fail-slow":
        hj.mini.set_faults(f"slow:rank={rank}:factor={SLOW_FACTOR:g}")
    elif cls == "nan-loss":
        hj.mini.set_faults(f"nan:loss:rank={rank}:step={step + 1}")
    elif cls == "host-loss":
        tb.stop_host(tb.index_of(host))
        import psutil

        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass
    else:
        raise ValueError(cls)
    return Injected(at, old, pid, host, step)


def _add_watch(hj: Any) -> None:
    """The inventory's small ``watch:`` section and its ``fail-slow`` playbook (:func:`_failslow_playbook`)."""
    doc = yaml.safe_load(hj.inventory.read_text())
    doc["watch"] = {"stall_after_s": 10, "cooldown_s": 0, "interval_s": 1, "max_recoveries_per_hour": 10}
    doc["playbooks"] = [str(_failslow_playbook(hj.workdir))]
    doc["thresholds"] = {**doc.get("thresholds", {}), **PEER_RATIOS}
    hj.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))


def _failslow_playbook(workdir: Path) -> Path:
    """The shipped ``fail-slow`` playbook with :data:`VOTE_ROUNDS` rounds :data:`VOTE_INTERVAL_S` apart.

    The test job's "device time" is a sleep, so a snapshot catches healthy ranks busy far more often
    than a real GPU job's would, and eight ranks share two cores: ByteRobust's 5 rounds 10 s apart
    vote on noise here (the same adaptation as ``tests/integration/test_stacks_cli.py``)."""
    src = REPO / "playbooks" / "fail-slow.yaml"
    doc = yaml.safe_load(src.read_text())
    for step in doc["steps"]:
        if step["id"] == "vote":
            step["args"] = {**step["args"], "rounds": VOTE_ROUNDS, "interval_s": VOTE_INTERVAL_S}
            step["description"] = f"fail-slow voting over {VOTE_ROUNDS} rounds {VOTE_INTERVAL_S:g} s apart"
    out = workdir / "fail-slow.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def _set_pg_timeout(hj: Any, seconds: float) -> None:
    """Give the job's launch command ``--pg-timeout-s seconds`` (its collective timeout)."""
    doc = yaml.safe_load(hj.inventory.read_text())
    cmd = doc["jobs"]["mini"]["launch"]["command"]
    doc["jobs"]["mini"]["launch"]["command"] = [*cmd, "--pg-timeout-s", f"{seconds:g}"]
    hj.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))


def _job(tb: Any, work: Path, pg_timeout: float) -> Any:
    from tests.integration.hangjob import HangJob

    hj = HangJob(tb, work, dp=DP, standbys=tuple(range(WORLD, HOSTS)))
    _set_pg_timeout(hj, pg_timeout)
    _add_watch(hj)
    return hj


def _ledger_rows(hj: Any, span: tuple[float, float], rows: list[Row]) -> float | None:
    """Fill each row's ``lost_s`` from the job's ledger over ``span``; the job's ETTR over it."""
    from robustctl.commands.ettr import ettr_of_store
    from robustctl.store import Store
    from tests.integration.hangjob import JOB

    with Store.open(hj.state) as s:
        res = ettr_of_store(s, JOB, now=span[1], since=span[0])
    led = res.ledger
    if led is None:
        return None
    for row, inc in zip(rows, led.incidents, strict=False):
        row.lost_s = inc.unproductive_s
    return float(led.cumulative_ettr)


def _watch_policy(tb: Any, work: Path, pg_timeout: float, healthy_s: float) -> tuple[list[Row], float | None]:
    from tests.integration.test_watch_e2e import Watcher, incidents

    rows: list[Row] = []
    with _job(tb, work, pg_timeout) as hj:
        hj.cold_start()
        hj.wait_step(3, timeout=RECOVERY_TIMEOUT_S)
        w = Watcher(hj.inventory, hj.state)
        w.start()
        start = end = time.time()
        try:
            for n, (cls, rank) in enumerate(FAULTS, start=1):
                inj = _inject(hj, cls, rank, end + healthy_s)
                start = min(start, inj.at)
                cleared = [False]

                def clear_when_gone(inj: Injected = inj, cleared: list[bool] = cleared) -> None:
                    w.check()
                    if not cleared[0] and _gone(inj.pid):  # the machine it models is out of the job
                        hj.mini.clear_faults()
                        cleared[0] = True

                first = _poll(
                    f"watch {cls}: first new step", partial(_trains_anew, hj, inj.old), hj, clear_when_gone
                )

                def closed(n: int = n) -> bool:
                    incs = incidents(hj)
                    return len(incs) >= n and incs[n - 1].closed_at is not None

                _poll(f"watch {cls}: incident closed", closed, hj, w.check)
                inc = incidents(hj)[n - 1]
                loc = (
                    inc.localization_end_at - inc.localization_start_at
                    if inc.localization_end_at is not None and inc.localization_start_at is not None
                    else None
                )
                detect = inc.decision_at - inj.at if inc.decision_at is not None else None
                row = Row(cls, detect, loc, first - inj.at, tuple(inc.machines_evicted))
                if inc.incident_class != _watch_class(cls):
                    row.marks.append(f"decided {inc.incident_class}")
                rows.append(row)
                end = first
            time.sleep(max(0.0, end + healthy_s - time.time()))  # the last fault's healthy training
            end += healthy_s
        finally:
            w.stop()
            for i in range(tb.n_hosts):
                tb.start_host(i)
        ettr = _ledger_rows(hj, (start, end), rows)
    return rows, ettr


def _watch_class(cls: str) -> str:
    """The signal class the watch is expected to decide for a fault of the schedule."""
    return {"host-loss": "crash"}.get(cls, cls)


class _Recorder(threading.Thread):
    """The baseline's progress readings into its store, as the watcher records its own: every
    :data:`EVAL_INTERVAL_S`, the lowest step of the ranks at the newest heartbeat time."""

    def __init__(self, hj: Any) -> None:
        super().__init__(name="recorder", daemon=True)
        self.hj = hj
        self.done = threading.Event()

    def run(self) -> None:
        from robustctl import watchstore
        from robustctl.store import Store
        from tests.integration.hangjob import JOB

        with Store.open(self.hj.state) as s:
            while not self.done.is_set():
                prog = self.hj.progress()
                if len(prog) == self.hj.world:
                    step = min(int(d["step"]) for d in prog.values())
                    at = max(float(d["time"]) for d in prog.values())
                    watchstore.record_progress(s, JOB, at=min(at, time.time()), step=step)
                self.done.wait(EVAL_INTERVAL_S)

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=30)


def _baseline_policy(
    tb: Any, work: Path, pg_timeout: float, operator_s: float, healthy_s: float
) -> tuple[list[Row], float | None]:
    from robustctl import watchstore
    from robustctl.actions.session import always
    from robustctl.commands.restart import RestartRequest, run_restart
    from robustctl.store import Store
    from tests.integration.hangjob import JOB

    def restart(cls: str) -> str:
        res = run_restart(
            RestartRequest(
                job=JOB, inventory=hj.inventory, state=hj.state, reason=f"baseline {cls}: in place"
            ),
            confirm=always,
        )
        return str(res.outcome.value)

    rows: list[Row] = []
    with _job(tb, work, pg_timeout) as hj:
        hj.cold_start()
        hj.wait_step(3, timeout=RECOVERY_TIMEOUT_S)
        rec = _Recorder(hj)
        rec.start()
        start = end = time.time()
        try:
            for cls, rank in FAULTS:
                inj = _inject(hj, cls, rank, end + healthy_s)
                start = min(start, inj.at)
                if cls in ("hang", "crash", "host-loss"):
                    ended = _poll(
                        f"baseline {cls}: a rank exits", partial(_any_gone, inj.old - {inj.pid}), hj
                    )
                elif cls == "nan-loss":
                    ended = _poll(f"baseline {cls}: a NaN loss", partial(_nan_seen, hj), hj)
                else:
                    time.sleep(max(0.0, inj.at + operator_s - time.time()))
                    ended = time.time()
                with Store.open(hj.state) as s:
                    inc = watchstore.open_incident(
                        s, JOB, incident_class=_watch_class(cls), onset_at=inj.at, opened_at=ended
                    )
                    watchstore.update_incident(s, inc.id, decision_at=ended, restart_start_at=ended)
                hj.mini.clear_faults()
                outcome = restart(cls)
                row = Row(cls, ended - inj.at, None, 0.0, ())
                if cls == "host-loss" and outcome != "applied":
                    time.sleep(max(0.0, ended + operator_s - time.time()))
                    tb.start_host(tb.index_of(inj.host))
                    row.marks.append(f"in-place restart {outcome}; host back after {operator_s:g} s")
                    outcome = restart(cls)
                if outcome != "applied":
                    raise RuntimeError(f"baseline {cls}: restart {outcome}")
                first = _poll(f"baseline {cls}: first new step", partial(_trains_anew, hj, inj.old), hj)
                resumed = hj.first_step_after_resume()
                with Store.open(hj.state) as s:
                    watchstore.update_incident(
                        s,
                        inc.id,
                        first_new_step_at=first,
                        closed_at=first,
                        last_step=inj.step,
                        checkpoint_step=resumed[0] if resumed is not None else None,
                    )
                row.mttr = first - inj.at
                rows.append(row)
                end = first
            time.sleep(max(0.0, end + healthy_s - time.time()))  # the last fault's healthy training
            end += healthy_s
        finally:
            rec.stop()
            for i in range(tb.n_hosts):
                tb.start_host(i)
        if hj.audits("evict"):
            raise RuntimeError(f"baseline evicted: {hj.audits('evict')}")
        ettr = _ledger_rows(hj, (start, end), rows)
    return rows, ettr


def _s(v: float | None) -> str:
    return f"{v:7.2f}" if v is not None else "      -"


def main(argv: Sequence[str] | None = None) -> int:
    """Run both policies on one test bed and print the table; 0 when every fault was recovered, else 1
    (1 too when the test bed cannot run here, with the reason on stderr)."""
    ap = argparse.ArgumentParser(prog="python -m bench soak", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--pg-timeout-s",
        type=float,
        default=PG_TIMEOUT_S,
        help=f"the job's collective timeout (default {PG_TIMEOUT_S:g})",
    )
    ap.add_argument(
        "--healthy-s",
        type=float,
        default=HEALTHY_S,
        help=f"training between two faults and after the last one (default {HEALTHY_S:g})",
    )
    ap.add_argument(
        "--skip-failslow",
        action="store_true",
        help="skip the fail-slow rule's measurement (python -m bench failslow) run first",
    )
    ap.add_argument(
        "--operator-s",
        type=float,
        default=OPERATOR_S,
        help=f"the baseline's person: slowdown noticed, lost host back (default {OPERATOR_S:g})",
    )
    args = ap.parse_args(list(argv) if argv is not None else None)
    if not 30.0 <= args.pg_timeout_s <= 180.0:
        ap.error("--pg-timeout-s must be 30..180 (above the watch's recovery, within the recovery deadline)")
    if not 0.0 <= args.operator_s <= 180.0:
        ap.error("--operator-s must be 0..180 (within the recovery deadline)")
    if not 0.0 <= args.healthy_s <= 3600.0:
        ap.error("--healthy-s must be 0..3600")
    sys.path.insert(0, str(REPO))
    from tests.integration.testbed import Testbed, unavailable_reason

    failslow_rc = 0
    if not args.skip_failslow:
        from bench import failslow

        print("fail-slow rule on the test-bed job's step times (python -m bench failslow):", flush=True)
        failslow_rc = failslow.main([])

    reason = unavailable_reason()
    if reason:
        print(f"bench: the test bed cannot run: {reason}", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    results: dict[str, tuple[list[Row], float | None]] = {}
    try:
        with Testbed(work / "tb", HOSTS) as tb:
            for name in ("watch", "baseline"):
                t0 = time.monotonic()
                if name == "watch":
                    results[name] = _watch_policy(tb, work / name, args.pg_timeout_s, args.healthy_s)
                else:
                    results[name] = _baseline_policy(
                        tb, work / name, args.pg_timeout_s, args.operator_s, args.healthy_s
                    )
                tb.reset_faults()
                print(f"  {name} schedule: {time.monotonic() - t0:.1f} s", flush=True)
    except (RuntimeError, AssertionError) as exc:
        print(f"soak failed: {exc}")
        return 1
    print(
        f"soak on {HOSTS} loopback sshd hosts (minimegatron tp=1 pp=2 dp={DP}, {STANDBY_COUNT} standbys, "
        f"collective timeout {args.pg_timeout_s:g} s, baseline person {args.operator_s:g} s, "
        f"{args.healthy_s:g} s of training after each recovery); seconds from the injection; lost: the "
        "ledger's unproductive seconds of the incident"
    )
    print(f"  {'class':<9} {'policy':<9} {'detect':>7} {'localize':>8} {'MTTR':>7} {'lost':>7}  evicted")
    watch_rows, watch_ettr = results["watch"]
    base_rows, base_ettr = results["baseline"]
    for w, b in zip(watch_rows, base_rows, strict=True):
        for name, row in (("watch", w), ("baseline", b)):
            notes = f"  ({'; '.join(row.marks)})" if row.marks else ""
            print(
                f"  {row.cls:<9} {name:<9} {_s(row.detect)} {_s(row.localize):>8} {_s(row.mttr)} "
                f"{_s(row.lost_s)}  {len(row.evicted)} {' '.join(row.evicted)}{notes}"
            )
    print(
        "  MTTR baseline / watch: "
        + ", ".join(f"{w.cls} {b.mttr / w.mttr:.2f}x" for w, b in zip(watch_rows, base_rows, strict=True))
    )
    shown = {
        k: f"{v:.3f}" if v is not None else "-" for k, v in (("watch", watch_ettr), ("baseline", base_ettr))
    }
    print(f"  job ETTR over the schedule: watch {shown['watch']}, baseline {shown['baseline']}")
    return 1 if failslow_rc else 0


if __name__ == "__main__":
    raise SystemExit(main())
