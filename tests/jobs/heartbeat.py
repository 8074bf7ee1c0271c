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

The file also holds ``time`` (UNIX seconds of the write) and ``loss``: a made-up training loss of the
step, :func:`base_loss`, the same on every rank (a DP-averaged loss is), spelled as minimegatron's
heartbeat spells it: a JSON number when finite, the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``
when not (strict JSON has no NaN; ``float()`` reads either form); a child's file has ``loss`` null. Faults of
the loss and a CUDA-style exit, deterministic in the step, on the ranks ``--fault-ranks R,R`` names
(default: every rank):

* ``--nan-from-step N``: the loss is NaN from step N on;
* ``--spike-at-step N [--spike-factor F] [--spike-steps K]``: the loss is F x (default 10) its value
  for K (default 3) steps from step N;
* ``--cuda-error-at-step N``: at step N (before its beat) the process raises the RuntimeError PyTorch
  raises for an asynchronous CUDA error (``CUDA error: an illegal memory access was encountered`` and
  PyTorch's lines after it), so its traceback ends the log, and exits 1 (its ``--children`` killed
  first, as a crashed rank's data-loader workers go with it).

``--log-every K`` prints a Megatron-like line (``iteration N/ 0 | lm loss: X | number of nan
iterations: K |``, the loss as ``1.234567E+00`` or ``nan``) every K steps on stdout (default 0: none).
"""

from __future__ import annotations

import argparse
import json
import math
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
CUDA_ILLEGAL_ADDRESS = (
    "CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace"
    " below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)
"""The message of PyTorch's RuntimeError for cudaErrorIllegalAddress: the same text as minimegatron's
``crash:cuda`` (``CUDA_ERRORS["illegal-address"]`` + ``CUDA_ERROR_SUFFIX``, sourced there)."""


def base_loss(step: int) -> float:
    """The made-up loss of ``step`` without faults: 10 at step 0, falling towards 2."""
    return 2.0 + 8.0 / (1.0 + 0.1 * step)


def step_loss(step: int, args: argparse.Namespace, faulty: bool) -> float:
    """The loss of ``step`` with the loss faults of ``args`` applied when this rank is ``faulty``."""
    loss = base_loss(step)
    if faulty and args.spike_at_step is not None:
        if args.spike_at_step <= step < args.spike_at_step + args.spike_steps:
            loss *= args.spike_factor
    if faulty and args.nan_from_step is not None and step >= args.nan_from_step:
        loss = math.nan
    return loss


NON_FINITE_JSON = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
"""How ``loss`` is written when not finite, by ``repr(loss)``: robustctl's own spelling
(``robustctl.models.NON_FINITE_JSON``), as minimegatron's heartbeat writes it."""


def loss_json(loss: float | None) -> float | str | None:
    """The heartbeat's ``loss``: the number when finite, ``"NaN"``/``"Infinity"``/``"-Infinity"`` when
    not (:data:`NON_FINITE_JSON`)."""
    if loss is None or math.isfinite(loss):
        return loss
    return NON_FINITE_JSON[repr(loss)]


def log_line(step: int, loss: float, nan_iterations: int) -> str:
    """A Megatron-like training-log line of ``step`` (see minimegatron's ``Trainer.log_line``)."""
    shown = f"{loss:.6E}" if math.isfinite(loss) else str(loss)
    return f"iteration {step:8d}/{0:8d} | lm loss: {shown} | number of nan iterations: {nan_iterations:3d} |"


def _cuda_error() -> None:
    """Injected (``--cuda-error-at-step``): what PyTorch raises for an illegal memory access."""
    raise RuntimeError(CUDA_ILLEGAL_ADDRESS)


def beat(path: str, every_s: float, args: argparse.Namespace | None = None, faulty: bool = False) -> None:
    """Rewrite ``path`` every ``every_s`` seconds, forever; ``args`` None: no loss (a child process)."""
    step = 0
    nan_iterations = 0
    while True:
        step += 1
        loss = None
        if args is not None:
            if faulty and args.cuda_error_at_step == step:
                _cuda_error()
            loss = step_loss(step, args, faulty)
        doc = {
            "pid": os.getpid(),
            "step": step,
            "time": time.time(),
            "loss": loss_json(loss),
            "argv": sys.argv,
            "cwd": os.getcwd(),
            "env": {k: os.environ[k] for k in (*ENV_KEYS, "HB_EXTRA") if k in os.environ},
        }
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, allow_nan=False)
        os.replace(tmp, path)
        if loss is not None and args is not None and args.log_every > 0:
            nan_iterations += 0 if math.isfinite(loss) else 1
            if step % args.log_every == 0:
                print(log_line(step, loss, nan_iterations), flush=True)
                nan_iterations = 0
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
    p.add_argument("--nan-from-step", type=int, default=None, help="the loss is NaN from this step on")
    p.add_argument("--spike-at-step", type=int, default=None, help="the loss spikes from this step")
    p.add_argument("--spike-factor", type=float, default=10.0, help="a spike's loss multiplier")
    p.add_argument("--spike-steps", type=int, default=3, help="steps a spike lasts")
    p.add_argument("--cuda-error-at-step", type=int, default=None, help="exit with a CUDA error here")
    p.add_argument("--fault-ranks", default="", help="comma-separated ranks of the faults (default: all)")
    p.add_argument("--log-every", type=int, default=0, help="a training-log line every K steps (0: none)")
    args = p.parse_args()
    if args.spike_steps < 1 or not math.isfinite(args.spike_factor) or args.spike_factor <= 0:
        p.error("--spike-steps must be >= 1 and --spike-factor a finite number > 0")
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
    children = []
    for i in range(args.children):
        pid = os.fork()
        if pid == 0:
            beat(os.path.join(args.dir, f"{name}-child{i}.json"), args.every_s)
        children.append(pid)
    targets = {r.strip() for r in args.fault_ranks.split(",") if r.strip()}
    faulty = not targets or os.environ.get("RANK") in targets
    try:
        beat(os.path.join(args.dir, f"{name}.json"), args.every_s, args, faulty)
    except RuntimeError:  # the injected CUDA error: the children go with the process, as workers do
        for pid in children:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
