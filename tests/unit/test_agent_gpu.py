"""The in-job agent on a real CUDA GPU: a one-rank NCCL process group whose Flight Recorder ring the
agent sized, dumped by the agent and fetched through its debug server, read back by robustctl's
Flight Recorder analysis. Runs only where a GPU answers (``gpu`` marker; the device check runs it)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from robustctl.analysis import flightrec
from robustctl.models import Status

REPO = Path(__file__).resolve().parents[2]

JOB = textwrap.dedent(
    """
    import json, socket, sys
    from pathlib import Path
    import robustctl.agent
    from robustctl.agent.client import fetch
    run = Path(sys.argv[1])
    agent = robustctl.agent.start(run, rank=0, world_size=1, flight_recorder=64, torch=True)
    import torch
    import torch.distributed as dist
    with socket.socket() as s:  # a free loopback port for the one-rank rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    x = torch.ones(1024, device="cuda")
    for step in range(3):
        dist.all_reduce(x)
        agent.step(step, loss=float(x[0].item()))
    torch.cuda.synchronize()
    # NCCL's watchdog marks an entry completed when it next polls: dump until it has (a deadline)
    import time
    deadline = time.monotonic() + 30
    while True:
        dumped = agent.dump_flight_recorder()
        states = [e.get("state") for e in json.loads(dumped.read_text()).get("entries", [])] if dumped else []
        if (states and all(st == "completed" for st in states)) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    beat = json.loads((run / "rank00000.json").read_text())
    served = None
    if beat.get("debug_socket"):
        served = fetch(beat["debug_socket"], "fr_trace_json", 30.0).decode()
    print(json.dumps({"dumped": str(dumped) if dumped else None, "served": served is not None,
                      "served_bytes": len(served or "")}))
    agent.close()
    dist.destroy_process_group()
    """
)


@pytest.mark.gpu
def test_the_agent_dumps_an_nccl_flight_recorder_ring_the_analysis_reads(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", JOB, str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["dumped"], proc.stderr[-3000:]
    data = Path(out["dumped"]).read_bytes()
    doc = json.loads(data)
    names = [e.get("profiling_name", "") for e in doc.get("entries", [])]
    assert sum("all_reduce" in n for n in names) >= 3, names
    dump = flightrec.load_dump("rank00000.json", data)
    analysis = flightrec.analyze_dumps([dump])
    assert analysis.status is Status.OK, analysis.summary  # three completed all-reduces: nothing blocked
    print("served through the debug server:", out["served"], out["served_bytes"], "bytes")
