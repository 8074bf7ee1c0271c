"""``robustctl stacks`` end to end: the real CLI against a real 16-rank gloo job on 4 testbed hosts.

The job (tp=2, pp=2, dp=4, 4 ranks per host) is the run's ``stacks_job`` (conftest.py), shared with
``test_stacks_collect.py``; each test injects one fault from outside the training logic, runs the CLI as
a user would, and removes the fault again. The ByteRobust Fig. 7 case (a hang in the last PP stage's
recv, which is never released) runs last; the next user of the job relaunches it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from robustctl.store import MachineState, Store

from .jobrunner import MiniJob

TP, PP, DP, G = 2, 2, 4, 4


@pytest.fixture(scope="module")
def inventory(stacks_job: MiniJob, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stacks_job.write_inventory(tmp_path_factory.mktemp("stacks-cli-inv") / "inventory.yaml")


@pytest.fixture
def clean(training_stacks_job: MiniJob) -> MiniJob:
    """The run's 16-rank job (``stacks_job``, conftest.py), training; faults removed after the test."""
    return training_stacks_job


def robustctl(*args: str, timeout: float = 240, state: Path | None = None) -> tuple[int, dict[str, Any], str]:
    """Run the CLI; suspects are recorded in ``state`` when given, else not at all (``--no-record``)."""
    record = ["--state", str(state)] if state is not None else ["--no-record"]
    proc = subprocess.run(
        [sys.executable, "-m", "robustctl", *args, *record, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": "/nonexistent", "COLUMNS": "200"},
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_healthy_job_has_no_suspect(clean: MiniJob, inventory: Path) -> None:
    clean.wait_step(max(clean.steps_done().values()) + 1, timeout=60)
    code, doc, err = robustctl("stacks", "-i", str(inventory), "--job", "mini")
    assert code == 0, err
    assert doc["kind"] == "stacks" and doc["status"] == "ok"
    assert doc["suspect_ranks"] == [] and doc["over_eviction"] == []
    assert doc["n_not_collected"] == 0
    assert len(doc["collection"]) == 2 and all(h["status"] == "ok" for h in doc["collection"][-1]["hosts"])


def test_rank_hung_in_compute_names_its_machine_and_group(
    clean: MiniJob, inventory: Path, tmp_path: Path
) -> None:
    hung = clean.rank_at(tp=1, dp=2, pp=0)
    clean.set_faults(f"hang:compute:rank={hung}")
    clean.wait_stalled(2.0, timeout=60)
    db = tmp_path / "state.db"
    code, doc, err = robustctl("stacks", "-i", str(inventory), "--job", "mini", state=db)
    assert code == 2, err
    assert hung in doc["likely_culprits"]
    assert clean.host_name(hung) in doc["over_eviction"]
    group = doc["group"]
    assert group is not None
    assert str(hung) in group["ranks"] or group["kind"] == "rank"
    culprit = next(s for s in doc["suspects"] if s["rank"] == hung)
    assert culprit["category"] == "compute" and culprit["host"] == clean.host_name(hung)
    # The suspect machines are recorded in the state store, the hung rank's with its reason.
    assert doc["recorded"]["marked"] == doc["suspect_hosts"] and doc["recorded"]["error"] is None
    with Store.open(db) as s:
        assert [m.host for m in s.machines([MachineState.SUSPECT])] == sorted(doc["suspect_hosts"])
        rec = s.machine(clean.host_name(hung))
        assert rec is not None and f"rank {hung} hung in compute" in rec.reason


def test_compute_hang_in_a_pipeline_is_named_through_the_waits_for_chain(
    clean: MiniJob, inventory: Path
) -> None:
    # the first stage of replica 1 hangs in compute: its TP peer waits in the TP all-reduce, the next
    # stage in recv_forward, the other replicas in the DP all-reduce; the chains end at the hung rank
    hung = clean.rank_at(tp=0, dp=1, pp=0)
    clean.set_faults(f"hang:compute:rank={hung}")
    clean.wait_stalled(2.0, timeout=60)
    code, doc, err = robustctl("stacks", "-i", str(inventory), "--job", "mini")
    assert code == 2, err
    wf = doc["waits_for"]
    assert wf["decided"] and [s["rank"] for s in wf["suspects"]] == [hung], wf
    chain = wf["chains"][0]
    assert chain["hops"][-1]["rank"] == hung and chain["hops"][-1]["state"] == "compute"
    assert len(chain["hops"]) >= 2 and chain["text"].endswith(")")
    assert doc["likely_culprits"] == [hung]
    assert clean.host_name(hung) in doc["over_eviction"]


def test_stuck_dataloader_worker_is_named_through_the_child(clean: MiniJob, inventory: Path) -> None:
    stuck = clean.rank_at(tp=0, dp=1, pp=1)
    clean.set_faults(f"hang:dataloader:rank={stuck}")
    clean.wait_stalled(2.0, timeout=60)
    code, doc, err = robustctl("stacks", "-i", str(inventory), "--job", "mini")
    assert code == 2, err
    assert stuck in doc["suspect_ranks"]
    mine = [s for s in doc["suspects"] if s["rank"] == stuck]
    assert any(s["category"] == "dataloader" for s in mine), mine
    assert clean.host_name(stuck) in doc["over_eviction"]


def test_slow_rank_named_by_fail_slow_voting(clean: MiniJob, inventory: Path) -> None:
    slow = clean.rank_at(tp=0, dp=3, pp=1)
    clean.set_faults(f"slow:rank={slow}:factor=3")
    clean.step_times(0, samples=2)  # the slowdown is in effect: steps already ran with it
    # 20 quick rounds rather than ByteRobust's 10 s x 5: the test job's "device time" is a sleep, so
    # a snapshot catches healthy ranks busy far more often than a real GPU job's would.
    code, doc, err = robustctl(
        "stacks", "-i", str(inventory), "--job", "mini", "--slow", "--rounds", "20", "--interval", "0.2"
    )
    assert doc["kind"] == "stacks-failslow"
    res = doc["result"]
    assert code == 2, (
        err,
        json.dumps({k: v for k, v in res.items() if k != "rounds"}),
        [(r["outliers"], r["flagged"], r["abstained"]) for r in res["rounds"]],
    )
    assert res["degrader"] is not None
    assert clean.host_name(slow) in res["degrader_hosts"]


def test_fig7_last_pp_stage_stuck_over_evicts_its_pp_group(clean: MiniJob, inventory: Path) -> None:
    # ByteRobust Fig. 7: a rank of the last PP stage stuck; its stage-mates block in send/recv,
    # every other rank waits in the DP all-reduce. The PP group is over-evicted.
    stuck = clean.rank_at(tp=0, dp=2, pp=PP - 1)
    clean.set_faults(f"hang:p2p_recv:rank={stuck}")
    clean.wait_stalled(2.0, timeout=60)
    code, doc, err = robustctl("stacks", "-i", str(inventory), "--job", "mini")
    assert code == 2, err
    group = doc["group"]
    assert group is not None and "pp" in group["kind"].split("-"), group
    pp_mates = [clean.rank_at(tp=0, dp=2, pp=p) for p in range(PP)]
    assert set(pp_mates) <= set(doc["suspect_ranks"]) | {int(r) for r in _expand(group["ranks"])}
    assert set(doc["over_eviction"]) == {clean.host_name(r) for r in _expand(group["ranks"])}
    assert set(doc["over_eviction"]) >= {clean.host_name(r) for r in pp_mates}
    clean.stop()  # the recv is never released: the next test of the job relaunches it at once


def _expand(ranges: str) -> list[int]:
    out: list[int] = []
    for part in ranges.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out
