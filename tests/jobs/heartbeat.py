"""heartbeat: the smallest "training job" for launch/stop tests (stdlib only, no torch).

Each process writes ``DIR/<name>.json`` (``name``: ``rank<RANK>`` when ``RANK`` is set, else
``node<NODE_RANK>``) every ``--every-s`` seconds with a step counter, its PID, its argv and the rank
environment it was given, so a test can tell that it runs, what it was started with and that it
makes progress. Options that make stopping it hard, as real jobs do:

* ``--children N``: fork N child processes that loop too (data-loader workers, checkpoint writers);
* ``--ignore-term``: ignore SIGTERM (the stop must fall back to SIGKILL after its grace);
* ``--ranks N`` (a torchrun-style per-host launcher): start N worker processes with ``RANK`` =
  ``NODE_RANK * N + i`` and ``LOCAL_RANK`` = ``i`` in their environment, then wait for them.

Usage: ``python -m tests.jobs.heartbeat --dir D [--every-s 0.2] [--children N] [--ignore-term]
[--ranks N] [--fail-ranks R,R] [--tag TEXT]`` (``--tag`` is free text a launcher finds its processes
by; ``--fail-ranks``: those ranks exit 1 as they start, as a rank with a bad argument does).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

ENV_KEYS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "NNODES",
    "MASTER_ADDR",
    "MASTER_PORT",
)


def beat(path: str, every_s: float) -> None:
    step = 0
    while True:
        step += 1
        doc = {
            "pid": os.getpid(),
            "step": step,
            "argv": sys.argv,
            "cwd": os.getcwd(),
            "env": {k: os.environ[k] for k in (*ENV_KEYS, "HB_EXTRA") if k in os.environ},
        }
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
        time.sleep(every_s)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--every-s", type=float, default=0.2)
    p.add_argument("--children", type=int, default=0)
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--ranks", type=int, default=0)
    p.add_argument("--tag", default="")
    p.add_argument("--fail-ranks", default="", help="comma-separated ranks that exit 1 at once")
    args = p.parse_args()
    if "RANK" in os.environ and os.environ["RANK"] in args.fail_ranks.split(","):
        print(f"rank {os.environ['RANK']}: failing at start (--fail-ranks)", file=sys.stderr)
        return 1
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.makedirs(args.dir, exist_ok=True)
    if args.ranks:
        node = int(os.environ.get("NODE_RANK", "0"))
        argv = list(sys.argv[1:])
        i = argv.index("--ranks")
        del argv[i : i + 2]
        workers = []
        for i in range(args.ranks):
            env = dict(os.environ, RANK=str(node * args.ranks + i), LOCAL_RANK=str(i))
            workers.append(subprocess.Popen([sys.executable, "-m", "tests.jobs.heartbeat", *argv], env=env))
        for w in workers:
            w.wait()
        return 0
    name = f"rank{os.environ['RANK']}" if "RANK" in os.environ else f"node{os.environ.get('NODE_RANK', 'x')}"
    for i in range(args.children):
        if os.fork() == 0:
            beat(os.path.join(args.dir, f"{name}-child{i}.json"), args.every_s)
    beat(os.path.join(args.dir, f"{name}.json"), args.every_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
