"""The Slurm back end against a real Slurm 22.05: munged, slurmctld and 4 slurmd on 127.0.0.1.

Every effect robustctl claims is checked through Slurm's own tools (``sinfo``, ``scontrol show``),
not through robustctl's parsers. The testbed (``slurmbed.py``) starts once for the module (~1 s).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from robustctl.errors import RobustctlError
from robustctl.schedulers.base import NodeState, Scheduler, SchedulerError
from robustctl.schedulers.slurm import Slurm
from tests.support.needs import needed

from .slurmbed import LOAD_CHECK_OFF, SlurmBed

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def cluster(slurm_cluster: SlurmBed) -> SlurmBed:
    """The module's testbed with no job and every node idle."""
    return slurm_cluster


@pytest.fixture
def slurm(cluster: SlurmBed) -> Slurm:
    """The robustctl back end pointed at the testbed's slurm.conf."""
    return Slurm(conf=cluster.conf, timeout_s=15)


def test_testbed_starts_fast_and_every_node_is_active(cluster: SlurmBed, slurm: Slurm) -> None:
    assert cluster.startup_s < 15, f"Slurm testbed took {cluster.startup_s:.2f}s to start"
    assert isinstance(slurm, Scheduler)
    states = slurm.state([*cluster.nodes, "nosuch"])
    assert states == {**{n: NodeState.ACTIVE for n in cluster.nodes}, "nosuch": NodeState.UNKNOWN}
    print(f"slurm testbed: {cluster.n_nodes} slurmd + slurmctld + munged idle in {cluster.startup_s:.2f}s")


def test_drain_then_resume_seen_through_sinfo_and_scontrol(cluster: SlurmBed, slurm: Slurm) -> None:
    [res] = slurm.drain(["sn2"], "xid 79 on GPU 3")
    assert res.changed and res.operation == "drain" and res.host == "sn2"
    assert cluster.node_states()["sn2"] == ("drained", "robustctl: xid 79 on GPU 3")
    line = cluster.scontrol_node("sn2")
    assert "State=IDLE+DRAIN " in line
    assert "Reason=robustctl: xid 79 on GPU 3 [root@" in line
    assert slurm.state(["sn1", "sn2"]) == {"sn1": NodeState.ACTIVE, "sn2": NodeState.DRAINED}

    [res] = slurm.resume(["sn2"], "GPU replaced")
    assert res.changed
    cluster.wait_nodes({"sn2": "idle"})  # "idle*" (not responding) for a moment while slurmctld pings it
    assert cluster.node_states()["sn2"] == ("idle", "none")
    assert "State=IDLE " in cluster.scontrol_node("sn2")
    assert slurm.state(["sn2"]) == {"sn2": NodeState.ACTIVE}


def test_draining_an_already_drained_node_is_a_no_op(cluster: SlurmBed, slurm: Slurm) -> None:
    cluster.cmd("scontrol", "update", "nodename=sn3", "state=drain", "reason=an operator's own reason")
    results = slurm.drain(["sn3", "sn4"], "suspect")
    assert [(r.host, r.changed) for r in results] == [("sn3", False), ("sn4", True)]
    assert "already drained" in results[0].detail
    states = cluster.node_states()
    assert states["sn3"] == ("drained", "an operator's own reason")  # left alone
    assert states["sn4"] == ("drained", "robustctl: suspect")
    again = slurm.drain(["sn4"], "suspect")
    assert [r.changed for r in again] == [False]
    # Resume: an idle node is a no-op too (Slurm itself rejects resuming an idle node).
    results = slurm.resume(["sn1", "sn4"], "repaired")
    assert [(r.host, r.changed) for r in results] == [("sn1", False), ("sn4", True)]
    cluster.wait_nodes({"sn4": "idle"})


def test_draining_the_machines_of_a_pp_group_drains_exactly_those(cluster: SlurmBed, slurm: Slurm) -> None:
    # A job on sn1..sn4, one rank per machine, layout tp=1 dp=2 pp=2 (Megatron order tp-cp-ep-dp-pp):
    # ranks 0,1 are pipeline stage 0 and 2,3 stage 1; the PP group of rank 1 is {1, 3} → sn2, sn4.
    from robustctl.config import ParallelLayout
    from robustctl.inventory.topology import Topology

    layout = ParallelLayout(tp=1, dp=2, pp=2)
    topo = Topology(layout, ranks_per_host=1, hosts=cluster.nodes)
    hosts = [topo.machine_name(m) for m in topo.machines_of(topo.group_of(1, "pp"))]
    assert hosts == ["sn2", "sn4"]
    results = slurm.drain(hosts, "pp group of rank 1")
    assert [r.host for r in results if r.changed] == ["sn2", "sn4"]
    states = cluster.node_states()
    assert {n for n, (s, _) in states.items() if s == "drained"} == {"sn2", "sn4"}
    assert {n for n, (s, _) in states.items() if s == "idle"} == set(cluster.nodes) - {"sn2", "sn4"}


def test_drain_of_a_node_running_a_job_leaves_the_job_running(cluster: SlurmBed, slurm: Slurm) -> None:
    job = cluster.sbatch(2, extra=["--nodelist=sn1,sn2"])
    cluster.wait_job(job, "RUNNING")
    [res] = slurm.drain(["sn2"], "slow NIC")
    assert res.changed
    assert cluster.node_states()["sn2"][0] == "draining"
    assert slurm.state(["sn2"]) == {"sn2": NodeState.DRAINED}
    assert cluster.job_fields(job)["JobState"] == "RUNNING"
    assert slurm.job_hosts(job) == ["sn1", "sn2"]
    assert slurm.drain(["sn2"], "slow NIC")[0].changed is False


def test_standby_is_drained_with_a_standby_reason(cluster: SlurmBed, slurm: Slurm) -> None:
    [res] = slurm.hold_standby(["sn4"], "warm spare")
    assert res.changed and res.operation == "hold_standby"
    assert cluster.node_states()["sn4"] == ("drained", "robustctl-standby: warm spare")
    assert slurm.state(["sn4"]) == {"sn4": NodeState.STANDBY}
    assert slurm.hold_standby(["sn4"], "warm spare")[0].changed is False
    # Evicting a standby changes its reason: it is no longer a standby.
    assert slurm.drain(["sn4"], "failed self-check")[0].changed
    assert slurm.state(["sn4"]) == {"sn4": NodeState.DRAINED}
    assert cluster.node_states()["sn4"] == ("drained", "robustctl: failed self-check")


def test_job_hosts_by_id_and_by_name(cluster: SlurmBed, slurm: Slurm) -> None:
    job = cluster.sbatch(3, name="llama-hosts")
    fields = cluster.wait_job(job, "RUNNING")
    assert slurm.job_hosts(job) == ["sn1", "sn2", "sn3"] == slurm.job_hosts("llama-hosts")
    assert fields["NodeList"] == "sn[1-3]"


def test_requeue_restarts_the_job_at_once(cluster: SlurmBed, slurm: Slurm) -> None:
    job = cluster.sbatch(2)
    cluster.wait_job(job, "RUNNING")
    t0 = time.monotonic()
    res = slurm.requeue(job)
    assert res.changed and "scontrol requeue" in res.detail and "StartTime=now" in res.detail
    fields = cluster.wait_job(job, "RUNNING", timeout_s=20)
    elapsed = time.monotonic() - t0
    assert fields["Restarts"] == "1"
    assert elapsed < 15, f"requeued job took {elapsed:.1f}s to run again (Slurm's own delay is ~120 s)"
    out = Path(cluster.base / f"job-{job}.out")
    deadline = time.monotonic() + 10
    while out.read_text().count("start ") < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert out.read_text().count("start ") == 2  # ran twice; --open-mode=append kept the first run
    print(f"requeue → running again in {elapsed:.2f}s")


def test_standby_activation_replaces_the_evicted_node_in_the_job(cluster: SlurmBed, slurm: Slurm) -> None:
    slurm.hold_standby(["sn4"], "warm spare")
    job = cluster.sbatch(3, name="llama-swap", extra=["--nodelist=sn1,sn2,sn3"])
    cluster.wait_job(job, "RUNNING")
    # Evict sn2, activate the standby sn4 in its place, restart the job.
    slurm.drain(["sn2"], "xid 79")
    slurm.resume(["sn4"], "standby activated")
    res = slurm.replace_host("llama-swap", "sn2", "sn4")
    assert res.changed and "requeuehold" in res.detail
    held = cluster.job_fields(job)
    assert held["JobState"] == "PENDING"
    assert slurm.job_hosts(job) == ["sn1", "sn3", "sn4"]
    assert slurm.replace_host(job, "sn2", "sn4").changed is False  # idempotent
    slurm.requeue(job)
    fields = cluster.wait_job(job, "RUNNING", timeout_s=20)
    assert fields["NodeList"] == "sn[1,3-4]"
    assert fields["ExcNodeList"] == "sn2"
    assert slurm.job_hosts(job) == ["sn1", "sn3", "sn4"]
    assert cluster.node_states()["sn2"] == ("drained", "robustctl: xid 79")


def test_replace_host_refuses_a_host_not_in_the_job(cluster: SlurmBed, slurm: Slurm) -> None:
    job = cluster.sbatch(2, extra=["--nodelist=sn1,sn2"])
    cluster.wait_job(job, "RUNNING")
    with pytest.raises(SchedulerError, match=r"sn3 is not a host of job"):
        slurm.replace_host(job, "sn3", "sn4")
    assert cluster.job_fields(job)["JobState"] == "RUNNING"  # nothing done


def test_unknown_node_is_a_typed_error_and_changes_nothing(cluster: SlurmBed, slurm: Slurm) -> None:
    with pytest.raises(SchedulerError, match=r"nosuch") as info:
        slurm.drain(["sn1", "nosuch"], "x")
    assert isinstance(info.value, RobustctlError)
    assert cluster.node_states()["sn1"] == ("idle", "none")
    # The command itself failing: scontrol's stderr and the command line are in the error.
    with pytest.raises(SchedulerError) as info:
        slurm.run(["scontrol", "update", "nodename=nosuch", "state=drain", "reason=x"])
    err = info.value
    assert err.scheduler == "slurm"
    assert "nodename=nosuch" in err.command
    assert "Invalid node name specified" in err.reason
    with pytest.raises(SchedulerError, match=r"Invalid job id specified"):
        slurm.job_hosts("999999")
    with pytest.raises(SchedulerError, match=r"no pending or running job named 'nosuchjob'"):
        slurm.job_hosts("nosuchjob")


def test_frozen_controller_times_out_within_the_deadline(cluster: SlurmBed) -> None:
    slurm = Slurm(conf=cluster.conf, timeout_s=2)
    with cluster.frozen_controller():
        for call in (lambda: slurm.state(["sn1"]), lambda: slurm.drain(["sn1"], "x")):
            t0 = time.monotonic()
            with pytest.raises(SchedulerError, match=r"timed out after 2 s") as info:
                call()
            elapsed = time.monotonic() - t0
            assert 1.9 <= elapsed < 10, elapsed  # the 2 s timeout; a frozen controller never answers
            assert "sinfo" in info.value.command
    assert slurm.state(["sn1"]) == {"sn1": NodeState.ACTIVE}  # thawed: answers again
    assert cluster.node_states()["sn1"] == ("idle", "none")


def test_controller_not_running_is_a_typed_error(cluster: SlurmBed, tmp_path: Path) -> None:
    # A copy of the configuration whose controller port has no listener: connection refused.
    from .slurmbed import free_ports

    [port] = free_ports(1)
    text = cluster.conf.read_text().replace(f"SlurmctldPort={cluster.ctld_port}", f"SlurmctldPort={port}")
    conf = tmp_path / "slurm.conf"
    conf.write_text(text)
    slurm = Slurm(conf=conf, timeout_s=3)
    t0 = time.monotonic()
    with pytest.raises(SchedulerError, match=r"sinfo") as info:
        slurm.state(["sn1"])
    elapsed = time.monotonic() - t0
    # sinfo retries the connection for ~9 s, then exits 0 with an "errors" entry and no node: either way
    # the call fails, typed, within its timeout; never "every node unknown".
    assert "timed out after 3 s" in info.value.reason or "reported errors" in info.value.reason
    assert elapsed < 7, elapsed  # the 3 s timeout, before sinfo's own ~9 s of retries


def test_no_daemon_outlives_the_testbed(tmp_path: Path) -> None:
    from .slurmbed import require_slurmbed

    require_slurmbed()
    bed = SlurmBed(tmp_path / "bed", 2)
    with bed:
        job = bed.sbatch(2)
        bed.wait_job(job, "RUNNING")
        deadline = time.monotonic() + 20  # the job's processes start a moment after RUNNING
        while len(bed.leftover_pids()) < 5:  # munged, slurmctld, 2 slurmd, job processes
            assert time.monotonic() < deadline, bed.leftover_pids()
            time.sleep(0.05)
    assert bed.leftover_pids() == []


# ---- the robustctl CLI end to end on the real Slurm (scheduler.kind: slurm) ---------------------------


def _write_inventory(path: Path, hosts: str, job_hosts: str) -> Path:
    path.write_text(
        f"""\
hosts:
  - name: {hosts}
    transport: local
scheduler: {{kind: slurm, timeout_s: 20}}
policy: {{max_job_fraction: 0.5, max_cluster_fraction: 0.5, circuit_breaker_fraction: 0.6}}
{LOAD_CHECK_OFF}jobs:
  llama:
    hosts: "{job_hosts}"
    ranks_per_host: 1
    layout: {{tp: 1, dp: 2, pp: 2}}
"""
    )
    return path


def _robustctl(cluster: SlurmBed, *args: str) -> subprocess.CompletedProcess[str]:
    import sys

    env = {**cluster.env, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "robustctl", *args], env=env, capture_output=True, text=True, timeout=90
    )


def test_cli_over_eviction_of_a_pp_group_drains_exactly_those_nodes(
    cluster: SlurmBed, tmp_path: Path
) -> None:
    inv = _write_inventory(tmp_path / "inv.yaml", "sn[1-4]", "sn[1-4]")
    job = cluster.sbatch(4, name="llama", extra=["--nodelist=sn1,sn2,sn3,sn4"])
    cluster.wait_job(job, "RUNNING")
    state = tmp_path / "state.db"
    proc = _robustctl(
        cluster, "evict", "sn2", "--job", "llama", "--over-evict", "pp", "--reason", "xid 79",
        "--yes", "--json", "-i", str(inv), "--state", str(state),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema_version"]
    states = cluster.node_states()
    # PP group of sn2 (rank 1) in a tp=1 dp=2 pp=2 job: ranks {1, 3} → sn2, sn4; nothing else drained.
    assert {n for n, (s, _) in states.items() if s.startswith("drain")} == {"sn2", "sn4"}
    assert states["sn2"][1] == states["sn4"][1]
    assert states["sn2"][1].startswith("robustctl: ") and "xid 79" in states["sn2"][1]
    # Again: idempotent, nothing changes in Slurm.
    again = _robustctl(
        cluster, "evict", "sn2", "--job", "llama", "--over-evict", "pp", "--reason", "xid 79",
        "--yes", "--json", "-i", str(inv), "--state", str(state),
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert cluster.node_states() == states


def test_cli_rails_refuse_an_over_large_and_an_empty_plan_and_slurm_is_untouched(
    cluster: SlurmBed, tmp_path: Path
) -> None:
    inv = _write_inventory(tmp_path / "inv.yaml", "sn[1-4]", "sn[1-4]")
    state = tmp_path / "state.db"
    before = cluster.node_states()
    # three of four machines: over max_job_fraction and max_cluster_fraction (0.5)
    big = _robustctl(
        cluster, "evict", "sn[1-3]", "--reason", "xid 79", "--yes", "-i", str(inv), "--state", str(state),
    )  # fmt: skip
    assert big.returncode == 2, big.stderr
    assert "max-job-fraction" in big.stderr or "max-cluster-fraction" in big.stderr
    assert "--force" in big.stderr  # the refusal says how to override it
    empty_report = tmp_path / "empty.json"
    empty_report.write_text(json.dumps({"kind": "diagnose", "schema_version": 1, "suspects": []}))
    empty = _robustctl(
        cluster, "evict", "--from-report", str(empty_report), "--yes", "-i", str(inv), "--state", str(state),
    )  # fmt: skip
    assert empty.returncode == 2, empty.stderr
    assert "rule non-empty-targets" in empty.stderr
    assert cluster.node_states() == before  # nothing drained
    audit = _robustctl(cluster, "audit", "--json", "--state", str(state))
    assert [r["status"] for r in json.loads(audit.stdout)["records"]] == ["refused", "refused"]


def test_cli_standby_activation_puts_the_standby_in_the_slurm_job(cluster: SlurmBed, tmp_path: Path) -> None:
    if cluster.n_nodes < 5:
        needed("needs a Slurm testbed of at least 5 nodes (ROBUSTCTL_SLURM_NODES)")
    inv = _write_inventory(tmp_path / "inv.yaml", "sn[1-5]", "sn[1-4]")
    state = tmp_path / "state.db"
    common = ["-i", str(inv), "--state", str(state), "--yes", "--json"]
    job = cluster.sbatch(4, name="llama", extra=["--nodelist=sn1,sn2,sn3,sn4"])
    cluster.wait_job(job, "RUNNING")
    added = _robustctl(cluster, "standby", "add", "sn5", *common)
    assert added.returncode == 0, added.stderr
    assert cluster.node_states()["sn5"][1].startswith("robustctl-standby: ")
    evicted = _robustctl(cluster, "evict", "sn3", "--reason", "xid 79", *common)
    assert evicted.returncode == 0, evicted.stderr
    activated = _robustctl(
        cluster, "standby", "activate", "--for", "sn3", "--job", "llama", "--standby", "sn5", "--requeue",
        "--reason", "replace sn3", "--force", "--force-reason", "standby not self-checked in this test",
        *common,
    )  # fmt: skip
    assert activated.returncode == 0, activated.stderr
    fields = cluster.wait_job(job, "RUNNING", timeout_s=30)
    assert fields["NodeList"] == "sn[1-2,4-5]"
    assert fields["ExcNodeList"] == "sn3"
    states = cluster.node_states()
    assert states["sn3"][0] == "drained" and states["sn5"][0] == "allocated"
