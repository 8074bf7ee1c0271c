"""Checkpoints: real files in temporary directories, read by the real ``ckpt`` probe over the local transport.

The job: tp=1, pp=2, dp=2 on node1-node4, one rank per host (rank r on node{r+1}; rank = dp + 2·pp,
so PP groups {0,2} {1,3} and DP groups {0,1} {2,3}). Per-host directories are ``ROOT/{host}``; a
shared one is ``ROOT/shared``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from robustctl.actions import open_context
from robustctl.actions.evict import EvictSpec, plan_evict
from robustctl.actions.plan import plan_json
from robustctl.ckpt import CheckpointError, CheckpointUnknown, parse_want, resolve_checkpoint
from robustctl.ckpt.state import SurvivalStatus
from robustctl.cli.main import main
from robustctl.commands.ckpt import CkptStatusRequest, CkptStatusResult, run_ckpt_status
from robustctl.errors import ConfigError, UsageError
from robustctl.inventory import Inventory, load_inventory
from robustctl.store import Store

HOSTS = ["node1", "node2", "node3", "node4"]
DIAGONAL = {0: "node4", 1: "node3", 2: "node2", 3: "node1"}
"""Backups that share no TP, PP or DP group with their rank."""


def inventory(tmp: Path, *, shared: bool = False, extra: dict[str, Any] | None = None, **ckpt: Any) -> Path:
    root = tmp / "ckpt"
    spec: dict[str, Any] = {"dir": str(root / ("shared" if shared else "{host}")), "shared": shared, **ckpt}
    data: dict[str, Any] = {
        "python": {"path": sys.executable},
        "hosts": [{"name": "node[1-4]", "transport": "local"}, {"name": "spare1", "transport": "local"}],
        "jobs": {
            "j": {"hosts": "node[1-4]", "ranks_per_host": 1, "layout": {"pp": 2, "dp": 2}, "ckpt": spec},
            "plain": {"hosts": "node[1-4]", "ranks_per_host": 1, "layout": {"pp": 2, "dp": 2}},
        },
        "policy": {"max_cluster_fraction": 1.0, "max_job_fraction": 1.0, "circuit_breaker_fraction": 1.0},
        **(extra or {}),
    }
    for d in ["shared"] if shared else HOSTS:
        (root / d).mkdir(parents=True, exist_ok=True)
    path = tmp / "inv.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def save(
    tmp: Path,
    iteration: int,
    ranks: Iterable[int] = range(4),
    *,
    backups: dict[int, str] | None = None,
    shared: bool = False,
    tracker: bool = True,
    empty: Iterable[int] = (),
) -> None:
    """Write iteration ``iteration``: rank r's shard on its own host (and on ``backups[r]``)."""
    root = tmp / "ckpt"
    for r in ranks:
        places = ["shared"] if shared else [HOSTS[r], *([backups[r]] if backups and r in backups else [])]
        for host in places:
            d = root / host / f"iter_{iteration:07d}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"rank_{r:05d}.pt").write_bytes(b"" if r in set(empty) else b"PK\x03\x04 shard")
    if tracker:
        for host in ["shared"] if shared else [HOSTS[0]]:  # Megatron: rank 0 writes the tracker
            (root / host).mkdir(parents=True, exist_ok=True)
            (root / host / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")


def status(tmp: Path, *, layout: bool = False, path: Path | None = None) -> CkptStatusResult:
    inv = load_inventory(path or tmp / "inv.yaml", environ={})
    return run_ckpt_status(CkptStatusRequest(inventory=inv, job="j", layout=layout, state=tmp / "state.db"))


def load(tmp: Path) -> Inventory:
    return load_inventory(tmp / "inv.yaml", environ={})


# ---- completeness and the restart pick -------------------------------------------------------------


def test_complete_newest_is_the_trackers(tmp_path: Path) -> None:
    inventory(tmp_path)
    save(tmp_path, 10)
    save(tmp_path, 20)
    r = status(tmp_path)
    assert [(i.iteration, i.complete) for i in r.iterations] == [(20, True), (10, True)]
    assert r.tracker == 20 and r.newest_complete == 20 and r.unread == ()
    assert r.exit_code == 0
    assert r.pick == "tracker says 20, complete: using 20"
    assert {loc["rank"]: loc["hosts"] for loc in r.locations} == {
        0: ["node1"],
        1: ["node2"],
        2: ["node3"],
        3: ["node4"],
    }


def test_torn_save_uses_the_previous_iteration(tmp_path: Path) -> None:
    inventory(tmp_path)
    save(tmp_path, 25)
    save(tmp_path, 30, ranks=[0, 1, 2])  # rank 3's shard never written; the tracker says 30 anyway
    r = status(tmp_path)
    it30 = r.iterations[0]
    assert (it30.iteration, it30.complete, it30.missing, it30.present) == (30, False, (3,), 3)
    assert r.tracker == 30 and r.newest_complete == 25 and r.exit_code == 1
    assert r.pick == "tracker says 30, iteration 30 lacks rank 3's shard: using 25 (newest complete)"
    pick = resolve_checkpoint(load(tmp_path), "j", HOSTS, "latest-complete")
    assert (pick.iteration, pick.tracker) == (25, 30) and pick.note == r.pick


def test_torn_save_the_tracker_does_not_name_yet_is_said(tmp_path: Path) -> None:
    """An asynchronous save moves the tracker only when the next save starts: the torn newest
    iteration is not the tracker's, and the pick still says why it was passed over."""
    inventory(tmp_path)
    save(tmp_path, 25)
    save(tmp_path, 30, ranks=[0, 2, 3], tracker=False)
    r = status(tmp_path)
    assert r.tracker == 25 and r.newest_complete == 25
    assert r.pick == "tracker says 25, complete: using 25; newer iteration 30 lacks rank 1's shard"
    pick = resolve_checkpoint(load(tmp_path), "j", HOSTS, 25)  # asked for: nothing more to say
    assert pick.note == "tracker says 25, complete: using 25"


def test_zero_length_shard_is_not_readable(tmp_path: Path) -> None:
    inventory(tmp_path)
    save(tmp_path, 10)
    save(tmp_path, 20, empty=[2])
    r = status(tmp_path)
    it20 = r.iterations[0]
    assert not it20.complete and it20.missing == (2,)
    assert it20.unreadable == ({"rank": 2, "host": "node3", "error": "empty (0 bytes)"},)
    assert it20.why == "lacks rank 2's shard; rank 2's shard on node3 is unreadable: empty (0 bytes)"
    assert r.newest_complete == 10 and r.exit_code == 1


def test_unreadable_shard_kinds(tmp_path: Path) -> None:
    import os

    inventory(tmp_path)
    save(tmp_path, 10)
    d = tmp_path / "ckpt" / "node2" / "iter_0000010"
    (d / "rank_00001.pt").unlink()
    os.mkfifo(d / "rank_00001.pt")  # a FIFO in a shard's place: never blocks the probe
    (d / "rank_00001.pt.tmp123").write_bytes(b"partial")  # a temporary file is no shard
    r = status(tmp_path)
    assert r.iterations[0].unreadable == ({"rank": 1, "host": "node2", "error": "not a regular file"},)
    assert r.newest_complete is None and r.exit_code == 2


def test_asked_for_iteration_must_be_complete(tmp_path: Path) -> None:
    inventory(tmp_path)
    save(tmp_path, 10)
    save(tmp_path, 20, ranks=[0, 1, 3])
    inv = load(tmp_path)
    assert resolve_checkpoint(inv, "j", HOSTS, 10).iteration == 10
    assert resolve_checkpoint(inv, "j", HOSTS, "10").iteration == 10
    with pytest.raises(CheckpointError, match=r"^iteration 20 is incomplete: it lacks rank 2's shard$"):
        resolve_checkpoint(inv, "j", HOSTS, 20)
    with pytest.raises(CheckpointError, match=r"no iteration 15 in .* \(found: 20, 10\)"):
        resolve_checkpoint(inv, "j", HOSTS, 15)
    none = resolve_checkpoint(inv, "j", HOSTS, "none")
    assert none.iteration is None and "without a checkpoint" in none.note
    with pytest.raises(UsageError):
        parse_want("latest")
    with pytest.raises(ConfigError, match="job 'plain' has no 'ckpt:' section"):
        resolve_checkpoint(inv, "plain", HOSTS)


def test_no_complete_iteration_is_critical(tmp_path: Path) -> None:
    inventory(tmp_path)
    save(tmp_path, 10, ranks=[0, 1])
    r = status(tmp_path)
    assert r.newest_complete is None and r.exit_code == 2 and r.pick is None
    with pytest.raises(CheckpointError, match="no complete checkpoint of job j"):
        resolve_checkpoint(load(tmp_path), "j", HOSTS)


def test_unreadable_host_is_unknown(tmp_path: Path) -> None:
    inventory(tmp_path)
    save(tmp_path, 10, ranks=[0, 1, 2])
    (tmp_path / "ckpt" / "node4").rmdir()  # node4 has no directory at all
    r = status(tmp_path)
    assert r.unread == ({"host": "node4", "error": f"{tmp_path}/ckpt/node4: No such file or directory"},)
    assert r.exit_code == 3
    with pytest.raises(CheckpointUnknown, match="not read: node4"):
        resolve_checkpoint(load(tmp_path), "j", HOSTS)


def test_a_copy_on_a_host_no_longer_in_the_job_does_not_count(tmp_path: Path) -> None:
    inventory(tmp_path)
    save(tmp_path, 10)
    with Store.open(tmp_path / "state.db") as store:  # a standby took node4's place
        store.set_job_hosts("j", ["node1", "node2", "node3", "spare1"])
    (tmp_path / "ckpt" / "spare1").mkdir()
    r = status(tmp_path)
    assert r.hosts == ("node1", "node2", "node3", "spare1") and r.hosts_source == "scheduler"
    assert r.iterations[0].missing == (3,) and r.exit_code == 2
    state_hosts = ["node1", "node2", "node3", "node4"]  # node4 back in the job: complete again
    assert resolve_checkpoint(load(tmp_path), "j", state_hosts).iteration == 10


def test_shared_directory_is_read_once(tmp_path: Path) -> None:
    inventory(tmp_path, shared=True)
    save(tmp_path, 10, shared=True)
    save(tmp_path, 20, ranks=[1, 2, 3], shared=True)
    r = status(tmp_path)
    assert r.shared and r.newest_complete == 10 and r.tracker == 20 and r.exit_code == 1
    assert {tuple(loc["hosts"]) for loc in r.locations} == {("node1",)}  # the one host that read it


def test_megatron_mp_rank_naming(tmp_path: Path) -> None:
    path = inventory(tmp_path, shards="mp_rank")
    root = tmp_path / "ckpt"
    for host, (tp, pp) in zip(HOSTS, [(0, 0), (0, 1), (0, 0), (0, 1)], strict=True):
        for it in (5, 10):
            if (it, host) == (10, "node4"):
                continue
            d = root / host / f"iter_{it:07d}" / f"mp_rank_{tp:02d}_{pp:03d}"
            d.mkdir(parents=True)
            (d / "model_optim_rng.pt").write_bytes(b"PK")
    (root / "node1" / "latest_checkpointed_iteration.txt").write_text("10")
    r = status(tmp_path, path=path)
    assert r.needed == 2  # tp × pp model-parallel shards; DP replicas do not save the model
    assert r.newest_complete == 10 and r.exit_code == 0  # node4's copy is not needed: node2 has it


# ---- the backup placement rule (ByteRobust §6.3) ---------------------------------------------------


def test_backups_outside_every_group_satisfy_the_layout_rule(tmp_path: Path) -> None:
    inventory(tmp_path)
    save(tmp_path, 10, backups=DIAGONAL)
    r = status(tmp_path, layout=True)
    assert r.violations == () and r.exit_code == 0
    assert {loc["rank"]: loc["hosts"] for loc in r.locations}[0] == ["node1", "node4"]


def test_backup_in_the_same_group_violates_the_layout_rule(tmp_path: Path) -> None:
    inventory(tmp_path)
    save(tmp_path, 10, backups={**DIAGONAL, 0: "node2", 1: "node4"})  # DP peer, PP peer
    r = status(tmp_path, layout=True)
    got = {(v.rank, v.host, v.groups) for v in r.violations}
    assert got == {(0, "node2", ("dp",)), (1, "node4", ("pp",))}
    assert r.exit_code == 1
    no_backup = status(tmp_path, layout=False)
    assert no_backup.violations == () and no_backup.exit_code == 0  # checked only when asked


def test_rank_without_a_backup_is_reported(tmp_path: Path) -> None:
    inventory(tmp_path)
    save(tmp_path, 10, backups={0: "node4", 1: "node3", 2: "node2"})
    r = status(tmp_path, layout=True)
    assert [(v.rank, v.host) for v in r.violations] == [(3, None)]
    assert r.violations[0].detail == "rank 3: no backup copy (only on node4)"


# ---- over-eviction (ByteRobust §6.3, Fig. 9) -------------------------------------------------------


def evict_plan(tmp: Path, hosts: str, **kw: Any) -> Any:
    ctx = open_context(tmp / "inv.yaml", tmp / "state.db")
    try:
        return plan_evict(EvictSpec(hosts=hosts, reason="test", **kw), ctx)
    finally:
        ctx.close()


def test_evict_plan_survives_with_backups_outside_the_group(tmp_path: Path) -> None:
    inventory(tmp_path)
    save(tmp_path, 10, backups=DIAGONAL)
    plan = evict_plan(tmp_path, "node1", job="j", over_evict="pp")  # PP group {0, 2}: node1, node3
    assert plan.targets == ("node1", "node3")
    (ck,) = plan.checkpoints
    assert (ck.job, ck.status, ck.latest, ck.after) == ("j", SurvivalStatus.SURVIVES, 10, 10)
    doc = plan_json(plan)
    assert (
        doc["checkpoints"][0]["status"] == "survives"
        and "iteration 10 survives" in doc["checkpoints"][0]["summary"]
    )


def test_evict_plan_falls_back_or_loses_everything(tmp_path: Path) -> None:
    inventory(tmp_path)
    save(tmp_path, 10, backups=DIAGONAL)
    save(tmp_path, 20)  # no backups
    (ck,) = evict_plan(tmp_path, "node2").checkpoints
    assert (ck.status, ck.latest, ck.after) == (SurvivalStatus.FALLS_BACK, 20, 10)
    assert "iteration 20 is lost (without node2 it lacks rank 1's shard; " in ck.summary
    assert ck.summary.endswith("rank 1's shard is only on node2, no longer in the job): falls back to 10")
    (ck,) = evict_plan(tmp_path, "node2,node3").checkpoints  # rank 1's backup was on node3
    assert (ck.status, ck.after) == (SurvivalStatus.NONE_SURVIVES, None)
    assert evict_plan(tmp_path, "spare1").checkpoints == ()  # not in a job with checkpoints


def test_evict_plan_shared_directory_survives(tmp_path: Path) -> None:
    inventory(tmp_path, shared=True)
    save(tmp_path, 10, shared=True)
    (ck,) = evict_plan(tmp_path, "node1,node2").checkpoints
    assert ck.status is SurvivalStatus.SURVIVES and "shared directory" in ck.summary


def test_evict_plan_says_unknown_when_reading_fails(tmp_path: Path) -> None:
    inventory(tmp_path)
    for host in HOSTS:  # no checkpoint directory on any host
        (tmp_path / "ckpt" / host).rmdir()
    plan = evict_plan(tmp_path, "node1")
    (ck,) = plan.checkpoints
    assert ck.status is SurvivalStatus.UNKNOWN
    assert ck.summary.startswith("checkpoint survival: job j: unknown (no host could be read: node1: ")
    assert plan.targets == ("node1",) and not plan.refused  # information, not a rail


# ---- the CLI -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setup", "code"),
    [
        (lambda t: (save(t, 10), save(t, 20)), 0),
        (lambda t: (save(t, 10), save(t, 20, ranks=[0, 1, 2])), 1),
        (lambda t: save(t, 10, ranks=[0]), 2),
        (lambda t: (save(t, 10, ranks=[0, 1, 2]), (t / "ckpt" / "node4").rmdir()), 3),
    ],
    ids=["tracker-complete", "torn", "none-complete", "host-unread"],
)
def test_cli_exit_codes(setup: Any, code: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = inventory(tmp_path)
    setup(tmp_path)
    argv = ["ckpt", "status", "-i", str(inv), "--job", "j", "--state", str(tmp_path / "s.db")]
    assert main([*argv, "--json"]) == code
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["kind"] == "ckpt-status" and doc["exit_code"] == code and "schema_version" in doc
    assert main(argv) == code
    err = capsys.readouterr().err
    assert "iterations (newest first)" in err and "Traceback" not in err


def test_cli_layout_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = inventory(tmp_path)
    save(tmp_path, 10, backups={**DIAGONAL, 2: "node1"})  # rank 2's backup on its PP peer
    argv = ["ckpt", "status", "-i", str(inv), "-j", "j", "--state", str(tmp_path / "s.db"), "--layout"]
    assert main(argv) == 1
    assert "rank 2: backup on node1 shares its PP group" in capsys.readouterr().err


def test_cli_bad_job_and_missing_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = inventory(tmp_path)
    base = ["ckpt", "status", "-i", str(inv), "--state", str(tmp_path / "s.db")]
    assert main([*base, "--job", "plain"]) == 78
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{inv}: job 'plain' has no 'ckpt:' section" in err
    assert not (tmp_path / "s.db").exists()  # refused before anything was opened
    assert main([*base, "--job", "nope"]) == 64
    assert main(["ckpt", "status", "-i", str(inv)]) == 64  # --job is required


def test_markup_in_host_errors_is_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = inventory(tmp_path)
    save(tmp_path, 10)
    bad = tmp_path / "ckpt" / "node2" / "iter_0000010" / "rank_00001.pt"
    bad.unlink()
    bad.mkdir()  # a directory in a shard's place
    main(["ckpt", "status", "-i", str(inv), "-j", "j", "--state", str(tmp_path / "s.db")])
    assert "1@node2" in capsys.readouterr().err
