"""``robustctl ckpt status`` and the over-eviction-aware evict plan on the SSH testbed.

Four testbed hosts (node01-node04, real sshd on 127.0.0.2-5) run a job tp=1, pp=2, dp=2, one rank per
host, with a checkpoint directory local to each host (``ckpt/{host}``: the testbed's hosts share this
machine's disk). Each rank's shard sits on its own host and a backup on the one host that shares
none of its TP, PP or DP groups. The newest iteration is torn (rank 2's shard and its backup are
gone, the tracker names it anyway): the real CLI, reading every host over SSH with the ``ckpt``
probe, names the missing shard and picks the previous iteration.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from .conftest import require_testbed
from .testbed import Testbed

HOSTS = ["node01", "node02", "node03", "node04"]
BACKUP = {
    0: "node04",
    1: "node03",
    2: "node02",
    3: "node01",
}  # rank = dp + 2·pp: PP {0,2} {1,3}, DP {0,1} {2,3}


def robustctl(*args: str, state: Path) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "robustctl", *args, "--state", str(state), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": "/nonexistent", "COLUMNS": "200"},
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def write_checkpoints(root: Path) -> None:
    for iteration in (10, 20):
        for rank in range(4):
            for host in (HOSTS[rank], BACKUP[rank]):
                d = root / host / f"iter_{iteration:07d}"
                d.mkdir(parents=True, exist_ok=True)
                (d / f"rank_{rank:05d}.pt").write_bytes(b"PK\x03\x04" + bytes(100))
    (root / "node01" / "latest_checkpointed_iteration.txt").write_text("20\n")
    for host in ("node03", "node02"):  # the save of iteration 20 was cut short on rank 2
        (root / host / "iter_0000020" / "rank_00002.pt").unlink()


def test_torn_newest_iteration_is_named_and_the_previous_one_picked(testbed: Testbed, tmp_path: Path) -> None:
    require_testbed()
    root = tmp_path / "ckpt"
    write_checkpoints(root)
    job = {
        "hosts": "node[01-04]",
        "ranks_per_host": 1,
        "layout": {"pp": 2, "dp": 2},
        "ckpt": {"dir": f"{root}/{{host}}", "timeout_s": 20},
    }
    policy = {"max_cluster_fraction": 1.0, "max_job_fraction": 1.0, "circuit_breaker_fraction": 1.0}
    inv = testbed.write_inventory(tmp_path / "inv.yaml", range(4), jobs={"j": job}, policy=policy)
    state = tmp_path / "state.db"

    code, doc, err = robustctl("ckpt", "status", "-i", str(inv), "--job", "j", "--layout", state=state)
    assert code == 1, err
    assert doc["kind"] == "ckpt-status" and doc["unread"] == [] and doc["hosts"] == HOSTS
    newest, previous = doc["iterations"]
    assert (newest["iteration"], newest["complete"], newest["missing"]) == (20, False, [2])
    assert (previous["iteration"], previous["complete"]) == (10, True)
    assert doc["tracker"] == 20 and doc["newest_complete"] == 10
    assert doc["pick"] == "tracker says 20, iteration 20 lacks rank 2's shard: using 10 (newest complete)"
    assert {loc["rank"]: loc["hosts"] for loc in doc["locations"]} == {
        r: sorted([HOSTS[r], BACKUP[r]]) for r in range(4)
    }
    assert doc["violations"] == []  # every backup outside the rank's TP, PP and DP groups
    assert "lacks rank 2's shard" in err

    # over-evicting rank 0's PP group (node01, node03) keeps iteration 10: the backups are elsewhere
    code, doc, err = robustctl(
        "evict", "node01", "--job", "j", "--over-evict", "pp", "--dry-run", "-i", str(inv), state=state
    )
    assert code == 0, err
    assert doc["targets"] == ["node01", "node03"]
    (ck,) = doc["checkpoints"]
    assert (ck["status"], ck["latest"], ck["after"]) == ("survives", 10, 10), ck

    # a host that cannot be reached: its shards are unknown, never taken as missing
    testbed.stop_host(3)
    code, doc, err = robustctl("ckpt", "status", "-i", str(inv), "--job", "j", state=state)
    assert code == 3, err
    assert [u["host"] for u in doc["unread"]] == ["node04"]
