"""Regenerate the captured Slurm outputs in this directory from a real Slurm testbed.

Run as root from the repository root (needs the Debian packages of scripts/testbed-deps.sh):

    .venv/bin/python tests/data/slurm/capture.py

It starts tests/integration/slurmbed.py's cluster of 5 nodes, brings it to the state described in
SOURCE.md, and writes each command's stdout here. Temporary paths are replaced by /tmp/slurmbed.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "integration"))

from slurmbed import SlurmBed  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="slurmcap") as tmp, SlurmBed(Path(tmp), 5) as bed:

        def save(name: str, *argv: str) -> None:
            text = bed.cmd(*argv).replace(str(bed.base), "/tmp/slurmbed")
            (HERE / name).write_text(text)

        save("sinfo-idle.json", "sinfo", "--json", "--all")
        # Job "train": running on sn1, sn2. Job "held": ran on sn3, requeued held and pinned.
        train = bed.sbatch(2, name="train", extra=["--nodelist=sn1,sn2"])
        held = bed.sbatch(1, name="held", extra=["--nodelist=sn3"])
        bed.wait_job(train, "RUNNING")
        bed.wait_job(held, "RUNNING")
        bed.cmd("scontrol", "requeuehold", held)
        bed.wait_job(held, "PENDING")
        bed.cmd("scontrol", "update", f"jobid={held}", "ReqNodeList=sn3", "ExcNodeList=sn5")
        # Job "waiting": pending on resources.
        bed.sbatch(2, name="waiting")
        # Node states: sn2 draining (runs "train"), sn3 standby, sn4 down, sn5 drained by robustctl.
        bed.cmd("scontrol", "update", "nodename=sn2", "state=drain", "reason=robustctl: xid 79 on GPU 3")
        bed.cmd("scontrol", "update", "nodename=sn3", "state=drain", "reason=robustctl-standby: warm spare")
        bed.cmd("scontrol", "update", "nodename=sn4", "state=down", "reason=operator: PSU swap")
        bed.cmd("scontrol", "update", "nodename=sn5", "state=drain", "reason=robustctl: fail-slow, rank=5 x=1")
        save("sinfo-mixed.json", "sinfo", "--json", "--all")
        save("sinfo-mixed.out", "sinfo", "--all", "-N", "-h", "-o", "%N|%T|%E")
        save("scontrol-show-node.out", "scontrol", "show", "node", "-o")
        save("squeue.json", "squeue", "--json", "--all")
        save("scontrol-show-job-running.out", "scontrol", "show", "job", "-o", train)
        save("scontrol-show-job-held.out", "scontrol", "show", "job", "-o", held)
        print(f"captured from {bed.base}: train={train} held={held}")


if __name__ == "__main__":
    main()
