"""``robustctl watch --once`` and ``--history`` (issue 22 §1, §3) on the heartbeat job, local transport.

A hang is made by stopping the ranks (SIGSTOP, alive) and writing their heartbeats 60 s in the past,
so a 10 s ``watch.stall_after_s`` sees a stall without waiting for it. The recovery is an inventory
playbook named ``hang`` (it overrides the shipped one) whose one step is a harmless ``notify`` that
writes a marker file: the test needs no real recovery.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from robustctl import watchstore
from robustctl.cli.main import main
from robustctl.commands.watch import WatchHistoryRequest, WatchRequest, run_watch_history, run_watch_once
from robustctl.errors import UsageError
from robustctl.inventory import load_inventory
from robustctl.store import Store
from robustctl.watch.decide import WatchMemory
from tests.unit.test_restart import Job as BedJob
from tests.unit.test_watch_signals import POLL_S, start

PLAYBOOK = """\
name: hang
description: test recovery that only writes a marker
params:
  job: {required: true, description: the job}
steps:
  - id: mark
    kind: notify
    args: {command: [%(py)s, -c, "import sys; open(sys.argv[1], 'a').write('ran\\\\n')", %(marker)s]}
"""


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[BedJob]:
    j = BedJob(tmp_path)
    yield j
    for p in j.processes():
        try:
            os.kill(p.pid, signal.SIGCONT)
        except OSError:
            pass
    j.kill_all()


def configure(bed: BedJob, **watch: Any) -> Path:
    """Add ``watch:`` and the marker playbook to the bed's inventory; the marker file's path."""
    marker = bed.tmp / "marker.txt"
    pb = bed.tmp / "hang.yaml"
    pb.write_text(PLAYBOOK % {"py": json.dumps(sys.executable), "marker": json.dumps(str(marker))})
    data = yaml.safe_load(bed.inventory.read_text())
    data["playbooks"] = [str(pb)]
    data["watch"] = {"stall_after_s": 10, **watch}
    bed.inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    return marker


def stall(bed: BedJob, age_s: float = 60.0) -> None:
    """Stop every rank (alive, no new step) and write its heartbeat ``age_s`` in the past."""
    deadline = time.monotonic() + 20
    while len(list(bed.beats.glob("*.json"))) < 4 and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for p in bed.processes():
        os.kill(p.pid, signal.SIGSTOP)
    for f in bed.beats.glob("*.json"):
        doc = json.loads(f.read_text())
        doc["time"] = time.time() - age_s
        f.write_text(json.dumps(doc))


def once(bed: BedJob, **kw: Any) -> Any:
    inv = load_inventory(bed.inventory, environ={})
    return run_watch_once(WatchRequest(inventory=inv, job="hb", state=bed.state, **kw))


def test_a_stalled_job_is_advised_then_recovered_once_and_listed(
    bed: BedJob, capsys: pytest.CaptureFixture[str]
) -> None:
    start(bed)
    marker = configure(bed)
    stall(bed)
    # --advise through the CLI: the hang decision with its evidence, exit 2, nothing run
    rc = main(
        [
            "watch",
            "-i",
            str(bed.inventory),
            "--state",
            str(bed.state),
            "--job",
            "hb",
            "--once",
            "--advise",
            "--json",
        ]
    )
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert rc == 2 and doc["kind"] == "watch" and doc["schema_version"] == 1
    d = doc["decision"]
    assert (d["action"], d["signal"], d["playbook"], d["params"]) == ("advise", "hang", "hang", {"job": "hb"})
    assert d["evidence"][0]["rule"] == "hang.stall" and d["evidence"][0]["values"]["stall_after_s"] == 10
    assert "watch hb: advise hang -> hang (job=hb)" in out.err and "hang.stall" in out.err
    assert not marker.exists()
    # the run: the playbook ran once, its run id on the event and the incident
    ran = once(bed)
    assert ran.action == "run" and ran.exit_code == 2 and ran.playbook_run["status"] == "done"
    assert marker.read_text() == "ran\n"
    # still stalled: the same incident is not recovered twice
    again = once(bed)
    assert again.action == "skip" and again.decision["rail"] == "same-incident" and again.exit_code == 1
    assert marker.read_text() == "ran\n"
    with Store.open(bed.state) as store:
        evs = watchstore.events(store, "hb")
        inc = watchstore.current_incident(store, "hb")
        mem = WatchMemory.from_json((watchstore.get_state(store, "hb") or {})["memory"])
    assert [e.action.value for e in evs] == ["advise", "run", "skip"]
    assert evs[1].playbook_run_id == ran.playbook_run["run_id"] and evs[1].rule == "hang.stall"
    assert (
        inc is not None and inc.incident_class == "hang" and inc.playbook_run_id == ran.playbook_run["run_id"]
    )
    assert mem.running is None and mem.incident is not None and mem.incident.handled
    hist = run_watch_history(WatchHistoryRequest(job="hb", state=bed.state))
    assert [e.id for e in hist.events] == [e.id for e in evs]
    rc = main(["watch", "--history", "--job", "hb", "--state", str(bed.state), "--json"])
    listed = json.loads(capsys.readouterr().out)
    assert rc == 0 and [e["action"] for e in listed["events"]] == ["advise", "run", "skip"]


def test_a_second_watcher_exits_3_naming_the_holder(bed: BedJob, capsys: pytest.CaptureFixture[str]) -> None:
    start(bed)
    configure(bed)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from pathlib import Path; from robustctl.watchstore import watch_lock\n"
         "with watch_lock(Path(sys.argv[1]), 'hb'):\n print('held', flush=True); sys.stdin.read()",
         str(bed.state)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        rc = main(["watch", "-i", str(bed.inventory), "--state", str(bed.state), "--job", "hb", "--once"])
        err = capsys.readouterr().err
        assert rc == 3 and str(holder.pid) in err and "another watcher" in err
    finally:
        holder.communicate("", timeout=20)


def test_bad_input_is_a_one_line_usage_or_config_error(
    bed: BedJob, capsys: pytest.CaptureFixture[str]
) -> None:
    bed.write()
    inv = str(bed.inventory)
    assert main(["watch", "-i", inv, "--state", str(bed.state), "--job", "nope", "--once"]) == 64
    assert "nope" in capsys.readouterr().err
    assert main(["watch", "-i", inv, "--job", "hb"]) == 64
    assert "--once is required" in capsys.readouterr().err
    assert main(["watch", "--history", "--once", "--job", "hb"]) == 64
    bad = bed.tmp / "bad.yaml"
    bad.write_text(bed.inventory.read_text() + "watch:\n  stall_after_s: 1\n")
    assert main(["watch", "-i", str(bad), "--state", str(bed.state), "--job", "hb", "--once"]) == 78
    err = capsys.readouterr().err
    assert "stall_after_s" in err and "Traceback" not in err
    with pytest.raises(UsageError):
        run_watch_once(
            WatchRequest(inventory=load_inventory(bed.inventory, environ={}), job="nope", state=bed.state)
        )
