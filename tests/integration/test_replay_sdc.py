"""``robustctl replay-sdc`` and diagnose L4 end to end: the real CLI, one real sshd per simulated host.

Fig. 6 of ByteRobust (arXiv 2509.16293): 24 machines, PP 2, DP 12, k 2 → groups of m = 4, n = 6
groups per phase, on a bed of its own. The other cases are sized to what they prove. One faulty group
needs two healthy ones to outvote it: six hosts of the run's bed, PP 1, DP 6, k 2 → m = 2, n = 3
(H0 = {0, 1}, H1 = {2, 3}, H2 = {4, 5}; V0 = {0, 3}, V1 = {1, 4}, V2 = {2, 5}). Two faulty machines
need three healthy groups: ten hosts of the 24-host bed, PP 1, DP 10, k 2 → m = 2, n = 5
(V0 = {0, 5} … V4 = {4, 9}). A faulty host's Python has ``tests/jobs/sdcfault`` first on its path (a
per-host ``python.wrapper`` in the inventory): its torch computes wrong bits, robustctl is unchanged.
Machine x is host ``node{x+1:02d}`` (rank order = inventory order).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.support.needs import needed

from .conftest import require_testbed
from .testbed import Testbed

REPO = Path(__file__).resolve().parents[2]
FAULT_DIR = REPO / "tests" / "jobs" / "sdcfault"
M = 24
STEPS = "2"
FIG6 = {"hosts": M, "layout": {"pp": 2, "dp": 12}}  # the paper's example
SMALL = {"hosts": 6, "layout": {"pp": 1, "dp": 6}}  # three groups a phase: two healthy outvote one
FIVE = {"hosts": 10, "layout": {"pp": 1, "dp": 10}}  # five groups a phase: three healthy outvote two


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """A testbed of 24 hosts for the Fig. 6 test and the two-faulty case (the session one has 8)."""
    require_testbed()
    tb = Testbed(tmp_path_factory.mktemp("sdcbed"), M)
    try:
        tb.start()
        yield tb
    finally:
        tb.close()


@pytest.fixture
def testbed24(bed: Testbed) -> Iterator[Testbed]:
    try:
        yield bed
    finally:
        bed.reset_faults()


@pytest.fixture
def small_bed(testbed: Testbed) -> Testbed:
    """The run's testbed, with the hosts the small layout needs (and the 4 of the L4 test)."""
    if testbed.n_hosts < SMALL["hosts"]:
        needed(f"needs a testbed of at least {SMALL['hosts']} hosts (ROBUSTCTL_TESTBED_HOSTS)")
    return testbed


def write_inventory(
    tb: Testbed,
    path: Path,
    faults: Mapping[int, str],
    diagnose: Mapping[str, Any] | None = None,
    job: Mapping[str, Any] = SMALL,
    **overrides: Any,
) -> Path:
    """The job's hosts (the first ``job["hosts"]`` of ``tb``) each its own entry; a faulty one runs
    Python with the injector and its fault spec. The inventory's job is ``sdcjob``."""
    entries: list[dict[str, Any]] = []
    n = int(job["hosts"])
    for i in range(n):
        entry: dict[str, Any] = {"name": tb.name(i), "address": tb.address(i)}
        if i in faults:
            wrapper = ["env", f"PYTHONPATH={FAULT_DIR}", f"ROBUSTCTL_SDC_FAULT={faults[i]}"]
            entry["python"] = {"path": tb.python, "wrapper": wrapper}
        entries.append(entry)
    settings: dict[str, Any] = {
        "concurrency": 64,
        "host_timeout_s": 150,
        "deadline_s": 600,
        "retries": 0,
        "allreduce": {"master_port": random.randint(30000, 60000)},
    }
    for key, value in (diagnose or {}).items():
        settings[key] = {**settings.get(key, {}), **value} if isinstance(value, dict) else value
    return tb.write_inventory(
        path,
        entries,
        diagnose=settings,
        jobs={"sdcjob": {"hosts": tb.hostlist(range(n)), "layout": dict(job["layout"]), "ranks_per_host": 1}},
        **overrides,
    )


def robustctl(*args: str, timeout: float = 400) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "robustctl", *args, "--no-record", "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": "/nonexistent"},
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, doc, proc.stderr


def replay(
    tb: Testbed, tmp_path: Path, faults: Mapping[int, str], job: Mapping[str, Any] = SMALL
) -> tuple[int, dict[str, Any], str]:
    inv = write_inventory(tb, tmp_path / "inv.yaml", faults, job=job)
    code, doc, err = robustctl("replay-sdc", "-i", str(inv), "--job", "sdcjob", "--k", "2", "--steps", STEPS)
    print(
        f"replay-sdc faults={dict(faults)}: exit {code}, rounds",
        [p["elapsed_s"] for p in doc.get("phases", [])],
    )
    return code, doc, err


def faulty_groups(doc: dict[str, Any]) -> list[list[str]]:
    return [[g["name"] for g in p["groups"] if g["state"] == "faulty"] for p in doc["phases"]]


def test_fig6_bitflip_on_machine_13_is_isolated_in_two_rounds(testbed24: Testbed, tmp_path: Path) -> None:
    code, doc, err = replay(testbed24, tmp_path, {13: "bitflip:every=5"}, FIG6)
    assert code == 2, err
    assert (doc["grouping"]["m"], doc["grouping"]["n"], doc["grouping"]["k"]) == (4, 6, 2)
    assert doc["verdict"] == "isolated" and doc["machines"] == [testbed24.name(13)], doc["notes"]
    assert len(doc["phases"]) == 2 and faulty_groups(doc) == [["H3"], ["V1"]]
    h3 = doc["phases"][0]["groups"][3]
    v1 = doc["phases"][1]["groups"][1]
    assert h3["machines"] == [12, 13, 14, 15] and v1["machines"] == [1, 7, 13, 19]
    healthy = {g["digest"] for p in doc["phases"] for g in p["groups"] if g["state"] == "healthy"}
    assert len(healthy) == 1  # 10 healthy groups on 20 hosts agree bit for bit
    assert h3["digest"] not in healthy and v1["digest"] not in healthy


def test_no_fault_is_not_reproduced(small_bed: Testbed, tmp_path: Path) -> None:
    code, doc, err = replay(small_bed, tmp_path, {})
    assert code == 1, err
    assert doc["verdict"] == "not_reproduced" and doc["machines"] == []
    assert {g["state"] for p in doc["phases"] for g in p["groups"]} == {"healthy"}


def test_two_faulty_machines_are_both_candidates(testbed24: Testbed, tmp_path: Path) -> None:
    """Machines 0 and 7 of ten: H0, H3 and V0, V2 fail; both intersections are candidates."""
    code, doc, err = replay(testbed24, tmp_path, {0: "bitflip:every=5", 7: "bitflip:every=5"}, FIVE)
    assert code == 2, err
    assert doc["verdict"] == "candidates"
    names = testbed24.names
    assert set(doc["machines"]) == {names[0], names[7]} and {names[0], names[7]} <= set(doc["over_evict"])
    assert faulty_groups(doc) == [["H0", "H3"], ["V0", "V2"]]
    assert any("more than one faulty machine" in n for n in doc["notes"])


def test_intermittent_fault_is_not_isolated_and_says_so(small_bed: Testbed, tmp_path: Path) -> None:
    """Machine 5 is faulty in its first run only (phase 1): H2 fails, V2 replays healthy."""
    state = tmp_path / "runs.state"
    code, doc, err = replay(small_bed, tmp_path, {5: f"bitflip:every=5:runs=10:state={state}"})
    assert code == 2, err
    assert doc["verdict"] == "candidates" and doc["verdict"] != "isolated"
    assert faulty_groups(doc) == [["H2"], []]
    assert small_bed.name(5) in doc["machines"]
    assert any("intermittent" in n for n in doc["notes"]), doc["notes"]


def test_stopped_sshd_fails_to_run_and_blames_nobody(small_bed: Testbed, tmp_path: Path) -> None:
    small_bed.stop_host(5)
    code, doc, err = replay(small_bed, tmp_path, {})
    assert code == 3, err
    assert doc["verdict"] == "failed_to_run" and doc["machines"] == [] and doc["over_evict"] == []
    failed = [[g["name"] for g in p["groups"] if g["state"] == "failed_to_run"] for p in doc["phases"]]
    assert failed == [["H2"], ["V2"]]  # machine 5: H2 = {4, 5}, V2 = {2, 5}
    reasons = [g["reason"] for p in doc["phases"] for g in p["groups"] if g["state"] == "failed_to_run"]
    assert all(r.startswith(f"{small_bed.name(5)}: unreachable") for r in reasons), reasons
    assert {g["state"] for p in doc["phases"] for g in p["groups"]} == {"healthy", "failed_to_run"}


def test_l4_alignment_names_the_bitflip_host_and_only_it(small_bed: Testbed, tmp_path: Path) -> None:
    """Four hosts through the whole ladder; node03 flips the lowest mantissa bit of every float32
    matmul output: within the burn's tolerance (L1 passes), but not bitwise (L4 names it)."""
    inv = write_inventory(
        small_bed,
        tmp_path / "inv.yaml",
        {2: "bitflip:bit=0"},
        diagnose={
            "burn": {"seconds": 1, "size": 256, "threads": 1, "concurrency": 1},
            "allreduce": {"sizes": [1048576], "iters": 3, "concurrency": 1},
        },
        thresholds={"allreduce_peer_ratio": 0.3, "burn_peer_ratio": 0.3},
    )
    hosts = small_bed.hostlist(range(4))
    code, doc, err = robustctl("diagnose", "-i", str(inv), "--hosts", hosts, "--level", "4", timeout=500)
    assert code == 2, err
    assert [lv["ran"] for lv in doc["levels"]] == [True] * 5, doc["levels"]
    assert doc["levels"][4]["name"] == "alignment" and doc["levels"][4]["suspects"] == [small_bed.name(2)]
    assert doc["suspects"] == [small_bed.name(2)]
    checks = {h["host"]: {c["name"]: c for c in h["checks"]} for h in doc["hosts"]}
    assert checks[small_bed.name(2)]["sdc.alignment"]["status"] == "critical"
    assert all(checks[small_bed.name(i)]["sdc.alignment"]["status"] == "ok" for i in (0, 1, 3))
    assert checks[small_bed.name(2)]["burn.verify"]["status"] == "ok"  # too small for a tolerance check
