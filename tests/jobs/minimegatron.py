"""minimegatron: a tiny Megatron-LM-style training job for the robustctl testbed.

One process per rank, started torchrun-style (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT`` in the environment)::

    python -m tests.jobs.minimegatron --tp 2 --pp 2 --dp 2 --steps 0 --ckpt-dir D --ckpt-every 5

What it does, like Megatron-LM and at toy size (hidden 32, so 16 ranks fit on 2 CPU cores):

* **Process groups** in Megatron's default rank order ``tp-cp-ep-dp-pp`` (TP fastest, cp = ep = 1):
  ``rank = tp_rank + tp * (dp_rank + dp * pp_rank)``. Every TP, DP and PP group is built with
  ``dist.new_group`` on every rank, in the same order.
* **TP**: each stage is ``--layers`` residual MLP blocks; the first linear is column-parallel, the
  second row-parallel, and their partial outputs are all-reduced over the TP group (Megatron's ``g``
  operator in forward, ``f`` in backward: one TP all-reduce per layer in each direction).
* **PP**: a GPipe schedule over ``--micro-batches`` micro-batches: activations ``dist.send``/``recv``
  to the next stage in forward, gradients back to the previous stage in backward.
* **DP**: the gradients of all parameters, flattened into one buffer, are all-reduced over the DP
  group at the end of the step (Megatron's contiguous grad buffer), then plain SGD. The last stage
  also averages the loss over its DP group, as Megatron does for logging.
* **Data**: a ``torch.utils.data.DataLoader`` with ``--num-workers`` forked worker processes over a
  synthetic, deterministic dataset (the same samples on every TP rank of one DP replica).
* **Device time**: each layer forward sleeps ``--compute-ms`` (backward twice that) in
  ``_device_compute``: the CPU waiting for a GPU kernel. This is what a slow rank multiplies.
* **Checkpoints** every ``--ckpt-every`` steps: every rank writes ``D/iter_NNNNNNN/rank_RRRRR.pt``
  (``torch.save``, then an atomic rename); rank 0 then writes ``D/latest_checkpointed_iteration.txt``.
  ``--ckpt-mode process`` (default) hands the state to a persistent forked writer process (Megatron's
  async checkpointing; the next save first waits for the previous one), ``thread`` to a background
  thread, ``sync`` saves in the training loop.
* **Resume**: ``--load ITER`` (or ``latest``: the iteration ``D/latest_checkpointed_iteration.txt``
  names; ``none``: no resume, a fresh start, so a launcher can always pass ``--load {ckpt_iter}``) restores each rank's own shard ``D/iter_NNNNNNN/rank_RRRRR.pt`` (``D`` = ``--ckpt-dir``)
  before the process group starts, and training goes on from step ITER+1 with the data it would
  have seen (the synthetic dataset resumes at sample ITER · micro-batches · micro-batch-size). A
  missing or unreadable shard (or tracker) ends the rank with exit status 1 and one line naming it.
* **Pacing**: ``--idle-ms`` of host-side pause after each step keeps 16 ranks at a few steps/s.

Faults, injected from outside the training logic. Spec: ``KIND[:WHERE][:key=value]...``; several
specs separated by ``;`` or newlines; ``#`` starts a comment line. Read from the environment variable
``ROBUSTCTL_FAULT`` and the ``--fault SPEC`` options (repeatable) at start, and from ``--fault-file``
(re-read whenever it changes, checked at least every 0.5 s, by the rank, its data-loader workers and
its checkpoint writer); a bad spec in the first two is exit status 2 with one line naming it::

    hang:compute:rank=5             rank 5 loops inside a layer's forward (_compute_hang); mode=busy spins
    hang:p2p_recv:rank=15           rank 15 blocks in a dist.recv that no one sends (stage > 0: its next
                                    forward recv; stage 0: its next backward recv); never released
    hang:dataloader:rank=3          rank 3's data-loader worker blocks in __getitem__ (_dataloader_hang);
                                    the rank then blocks in DataLoader._next_data
    hang:checkpoint:rank=0          rank 0's checkpoint save blocks (_checkpoint_hang: in the writer
                                    process; the rank blocks at its next save waiting for it)
    hang:skip_collective:rank=0:step=5
                                    from step 5 on, rank 0 calls none of its DP group's collectives
                                    (_skip_collective: the gradient all-reduce and, on a last stage,
                                    the loss average; it goes on with its own gradients and loss) and
                                    goes on to its next collective: its DP peers block for good in the
                                    gradient all-reduce it skipped first, and the ranks that need them
                                    block after them (with tp > 1, rank 0 itself, in a TP all-reduce a
                                    step or two later). One step's skip (steps=1) is no hang: gloo,
                                    like NCCL, pairs a group's collectives by order, so the rank's next
                                    step's DP collectives complete the ones its peers wait in (a silent
                                    desync). Skipping the gradient all-reduce alone would pair a last
                                    stage's 1-element loss average with it: a size mismatch, the rank
                                    aborts (see wrong_size); hence both are skipped
    hang:wrong_size:rank=3:step=5   in step 5, rank 3 calls its DP gradient all-reduce with 0 elements
                                    (_wrong_size_collective: an empty bucket) and goes on: gloo returns
                                    at once on rank 3 without exchanging anything, so its DP peers block
                                    in that all-reduce for good and rank 3 blocks in its next DP
                                    collective (a last stage's loss average, else step 6's gradient
                                    all-reduce), which they never reach (measured, torch 2.13 gloo).
                                    Any other wrong size is no hang under gloo: a rank handed more
                                    bytes than it posted aborts (std::terminate, "Received data size
                                    doesn't match expected size"; the smaller rank itself, or a ring
                                    neighbour of a larger one), its peers then fail with "Connection
                                    closed/reset by peer"
    slow:rank=5:factor=3            (factor default 3) rank 5's compute takes factor x as long (_straggle sleeps
                                    (factor - 1) x the measured compute time of each layer)
    crash:rank=5[:signal=KILL]      rank 5 raises RuntimeError at its next step (or kills itself)
    crash:cuda:rank=5:step=8        rank 5 raises, in step 8 before its gradient all-reduce, the
      [:error=illegal-address]      RuntimeError PyTorch raises for an asynchronous CUDA error: its
                                    traceback ends the log with ``RuntimeError: CUDA error: an illegal
                                    memory access was encountered`` and PyTorch's "CUDA kernel errors
                                    might be asynchronously reported..." lines; exit status 1. error=
                                    illegal-address (default), launch-failure, ecc or assert
    nan:rank=1:step=20              from step 20, rank 1's stage output is NaN (nan:activation, the
                                    default place): the loss of its pipeline goes NaN at step 20 and,
                                    since the NaN reaches the gradients and every DP replica's weights,
                                    stays NaN after the spec is gone (and in checkpoints from step 20
                                    on) until the job is rolled back to an earlier checkpoint
    nan:loss:rank=3:step=20         from step 20, the loss last-stage rank 3 adds to the logged DP mean
                                    is NaN; the weights stay finite, so it ends with the spec
    spike:rank=3:step=20[:factor=10][:steps=3]
                                    for 3 steps from step 20 the loss last-stage rank 3 adds to the
                                    logged DP mean is 10 x its value (not its gradients: training goes
                                    on as without it); needs step=; factor > 0 (default 10), steps
                                    default 3

Common keys: ``rank=R`` or ``ranks=R1,R2`` (default: every rank), ``step=N`` (active from step N on),
``steps=K`` (with ``step=N``: active at steps N … N+K-1 only). Hangs other than ``p2p_recv``,
``skip_collective`` and ``wrong_size`` end when the spec is removed from the fault file (those three
leave the ranks' collectives out of step for good; the last two change nothing with dp = 1).
``nan:loss`` and ``spike`` change nothing on a rank that
computes no loss (a stage before the last); with dp > 1 the logged loss is the DP mean, so a spike of
F on one rank raises it by (F - 1) x that rank's share. A fault with ``step=N`` is deterministic: it
hits step N whatever the timing, and the same specs and seed give the same losses.

Host loss needs nothing of the job: the test harness stops the host's sshd and kills its ranks (their
data-loader workers and checkpoint writer die with them, ``PR_SET_PDEATHSIG``). A rank whose peer is
killed sees gloo's "Connection closed by peer" in its next collective or pipeline send/recv, prints the
traceback and exits 1; where the harness drops the host's traffic instead, it blocks until
``--pg-timeout-s`` passes, then raises gloo's timeout error and exits 1.

Outputs: ``--progress-dir P``: ``P/rankRRRRR.json`` (the heartbeat), written by the in-job agent
(:mod:`robustctl.agent`, which also writes ``P/events/``, ``P/stacks/`` on SIGUSR1 and serves
``P/debug/rankRRRRR.sock``; with ``--flight-recorder N`` the agent sizes Flight Recorder's ring to N
collectives per process group before ``init_process_group``, so every collective is recorded, gloo's
too, and the socket's ``fr_trace_json`` answers with it) atomically after init (``step`` 0, ``phase``
"ready"), after every step (``phase`` "train"; the agent's rate limit is off here) and at the end
(``phase`` "done"): ``{rank,
pid, step, phase, time, step_s, loss, local_rank, world_size, debug_socket, straggle_s, init_s,
started_at, timings: {import_s, init_process_group_s, new_groups_s, model_and_loader_s}}`` (seconds,
UNIX time; ``init_s`` counts from the process start; ``straggle_s``: what a ``slow`` fault added to
the step, 0 without one). ``loss`` is the step's DP-averaged loss on a last-stage rank: a JSON number when finite, the
string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` when not (robustctl's spelling: the file is strict
JSON, which has no NaN, and ``float()`` reads either form), null on the other ranks and before the
first step; "done" keeps the last step's. Logs: every last-stage rank prints Megatron's training-log
line every ``--log-every`` steps (and at step 1)::

    [rank 3] [2025-01-01 12:00:00] iteration       20/       0 | consumed samples:          640 |
    elapsed time per iteration (ms): 151.2 | learning rate: 5.000000E-02 | global batch size:    32 |
    lm loss: nan | loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   1 |

(one line; ``/ 0``: ``--steps 0``, until stopped; ``lm loss`` is this step's loss, ``1.234567E+00``
or ``nan``/``inf``/``-inf``); rank 0 also prints ``[rank 0] step N step_s X``. A traceback (a crash,
``crash:cuda``, a lost peer) goes to stderr, each line prefixed ``[rankR]: `` by torch.distributed once
the process group is up (as the PyTorch of this test bed, 2.13, prints it). Exit status 0 after
``--steps`` steps, 1 on an error (crash faults included), 2 on a bad argument or fault spec, 3 when
``--max-runtime-s`` passed, 4 when ``--stdin-watch`` saw the launcher go.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import math
import multiprocessing
import os
import pickle
import queue
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset

import robustctl.agent
from robustctl.agent import jsonsafe


def _process_start_time() -> float:
    """UNIX time this process started (``/proc/self/stat`` starttime), so startup includes imports."""
    try:
        stat = Path("/proc/self/stat").read_text()
        start_ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.time()


_T0 = _process_start_time()
_T_IMPORTED = time.time()  # torch and the rest imported
FAULT_ENV = "ROBUSTCTL_FAULT"
HANG_PLACES = ("compute", "p2p_recv", "dataloader", "checkpoint", "skip_collective", "wrong_size")
FAULT_KINDS = ("hang", "slow", "crash", "nan", "spike")
SHOWN_SPEC_CHARS = 120
"""Most characters of a bad spec quoted in its error (a fault file may hold any text: the error stays
one short line, and every spec of this grammar is shorter)."""
NAN_PLACES = ("activation", "loss")
"""Where a ``nan`` fault puts the NaN: the stage's output activations (they carry it into the loss,
the gradients and, through the DP all-reduce, every replica's weights), or the logged loss alone."""
SPIKE_FACTOR = 10.0
"""A ``spike``'s default loss multiplier (our choice: twice the 5x spike factor the watch's default
rule is meant to trip at, so the default spike is unambiguous to any rolling-median rule)."""
SPIKE_STEPS = 3
"""Steps a ``spike`` lasts by default: "a few steps" (issue 22 section 5); a one-step spike is
``steps=1``."""
CUDA_ERRORS = {
    "illegal-address": "an illegal memory access was encountered",
    "launch-failure": "unspecified launch failure",
    "ecc": "uncorrectable ECC error encountered",
    "assert": "device-side assert triggered",
}
"""``crash:cuda:error=NAME``: the ``cudaGetErrorString`` text of cudaErrorIllegalAddress (700),
cudaErrorLaunchFailure (719), cudaErrorECCUncorrectable (214) and cudaErrorAssert (710)."""
CUDA_ERROR_SUFFIX = (
    "\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace"
    " below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)
"""What PyTorch appends to ``CUDA error: <text>`` (c10/cuda/CUDAException.cpp,
``c10_cuda_check_implementation``: the suffix of c10/cuda/CUDAMiscFunctions.cpp, then
c10_retrieve_device_side_assertion_info of a build without TORCH_USE_CUDA_DSA) in the form PyTorch 2
bug reports quote it (e.g. NVIDIA/TensorRT#3491); the current source drops the period after ``=1``
and adds a "Search for ..." line."""
_NEVER_SENT_TAG = 7777  # a tag no rank ever sends with: a recv on it blocks forever
_PR_SET_PDEATHSIG = 1


# --------------------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """One injected fault (see the module docstring for the spec grammar).

    ``step`` is the first step it is active at (None: every step); ``steps`` how many steps from
    ``step`` on (None: every later step). ``factor``: a ``slow`` rank's compute multiplier or a
    ``spike``'s loss multiplier; ``error``: the CUDA error a ``crash:cuda`` raises (a key of
    :data:`CUDA_ERRORS`).
    """

    kind: str
    where: str | None = None
    ranks: frozenset[int] | None = None
    step: int | None = None
    factor: float = 1.0
    mode: str = "sleep"
    signal: str | None = None
    steps: int | None = None
    error: str | None = None

    def applies(self, rank: int, step: int | None) -> bool:
        """Whether this fault targets ``rank`` at ``step`` (``None``: step unknown, e.g. in a worker)."""
        if self.ranks is not None and rank not in self.ranks:
            return False
        if self.step is None or step is None:
            return True
        return step >= self.step and (self.steps is None or step < self.step + self.steps)


def _cut(text: str) -> str:
    """``text`` as an error quotes it: at most :data:`SHOWN_SPEC_CHARS` characters, then ``...``."""
    return text if len(text) <= SHOWN_SPEC_CHARS else text[:SHOWN_SPEC_CHARS] + "..."


def parse_faults(text: str) -> list[Fault]:
    """Parse fault specs. Raises ValueError naming the bad spec."""
    faults = []
    for raw in re.split(r"[;\n]", text):
        item = raw.strip()
        if not item or item.startswith("#"):
            continue
        shown = _cut(item)
        parts = item.split(":")
        kind, where, opts = parts[0].strip(), None, {}
        for p in parts[1:]:
            if "=" in p:
                k, v = p.split("=", 1)
                opts[k.strip()] = v.strip()
            elif where is None:
                where = p.strip()
            else:
                raise ValueError(f"fault {shown!r}: unexpected {_cut(p)!r}")
        try:
            ranks: frozenset[int] | None = None
            if "rank" in opts:
                ranks = frozenset([int(opts.pop("rank"))])
            if "ranks" in opts:
                ranks = frozenset(int(r) for r in opts.pop("ranks").split(","))
            step = int(opts.pop("step")) if "step" in opts else None
            default_factor = {"slow": "3", "spike": str(SPIKE_FACTOR)}.get(kind, "1")
            factor = float(opts.pop("factor", default_factor))
            mode = opts.pop("mode", "sleep")
            sig = opts.pop("signal", None)
            steps = int(opts.pop("steps")) if "steps" in opts else None
            error = opts.pop("error", None)
        except ValueError as exc:
            raise ValueError(f"fault {shown!r}: {str(exc)[:SHOWN_SPEC_CHARS]}") from None
        if opts:
            raise ValueError(f"fault {shown!r}: unknown key {_cut(next(iter(opts)))!r}")
        if not math.isfinite(factor):
            raise ValueError(f"fault {shown!r}: factor must be a finite number")
        if steps is not None and (steps < 1 or step is None):
            raise ValueError(f"fault {shown!r}: steps=K needs K >= 1 and a step=N to count from")
        if kind == "hang":
            if where not in HANG_PLACES:
                raise ValueError(f"fault {shown!r}: hang needs a place, one of {', '.join(HANG_PLACES)}")
            if mode not in ("sleep", "busy"):
                raise ValueError(f"fault {shown!r}: mode must be sleep or busy")
        elif kind == "slow":
            if factor < 1:
                raise ValueError(f"fault {shown!r}: factor must be >= 1")
        elif kind == "crash":
            if where not in (None, "cuda"):
                raise ValueError(f"fault {shown!r}: a crash's place is cuda or none")
            if sig is not None and not hasattr(signal, f"SIG{sig.upper()}"):
                raise ValueError(f"fault {shown!r}: unknown signal {_cut(sig)!r}")
            if where == "cuda":
                if sig is not None:
                    raise ValueError(f"fault {shown!r}: crash:cuda raises its error, it takes no signal")
                error = error or "illegal-address"
                if error not in CUDA_ERRORS:
                    raise ValueError(f"fault {shown!r}: error must be one of {', '.join(CUDA_ERRORS)}")
        elif kind == "nan":
            where = where or "activation"
            if where not in NAN_PLACES:
                raise ValueError(f"fault {shown!r}: a nan's place is one of {', '.join(NAN_PLACES)}")
        elif kind == "spike":
            if step is None:
                raise ValueError(f"fault {shown!r}: a spike needs step=N (the step it starts at)")
            if factor <= 0:
                raise ValueError(f"fault {shown!r}: factor must be > 0")
            steps = SPIKE_STEPS if steps is None else steps
        else:
            raise ValueError(f"fault {shown!r}: unknown kind {_cut(kind)!r} ({', '.join(FAULT_KINDS)})")
        if error is not None and not (kind == "crash" and where == "cuda"):
            raise ValueError(f"fault {shown!r}: error= is a key of crash:cuda only")
        if kind in ("slow", "spike") and where is not None:
            raise ValueError(f"fault {shown!r}: {kind} takes no place")
        faults.append(Fault(kind, where, ranks, step, factor, mode, sig, steps, error))
    return faults


class FaultSource:
    """The faults that apply to one rank: from ``ROBUSTCTL_FAULT`` and a polled fault file.

    Each process (rank, data-loader worker, checkpoint writer) holds its own instance; the file is
    re-read when its mtime or size changes, at most every ``poll_s`` seconds. ``env_text``: the specs
    fixed at start (``ROBUSTCTL_FAULT`` and ``--fault``), handed on to the helper processes.
    """

    def __init__(self, rank: int, env_text: str, path: str | None, poll_s: float = 0.5) -> None:
        self.rank = rank
        self.env_text = env_text
        self.path = path
        self.poll_s = poll_s
        self._env = parse_faults(env_text)
        self._file: list[Fault] = []
        self._sig: tuple[int, int] | None = None
        self._checked = 0.0
        self.refresh(force=True)

    def refresh(self, force: bool = False) -> None:
        """Re-read the fault file if it changed (a malformed file is reported once and ignored)."""
        now = time.monotonic()
        if not self.path or (not force and now - self._checked < self.poll_s):
            return
        self._checked = now
        try:
            st = os.stat(self.path)
        except OSError:
            self._file, self._sig = [], None
            return
        sig = (st.st_mtime_ns, st.st_size)
        if sig == self._sig:
            return
        self._sig = sig
        try:
            self._file = parse_faults(Path(self.path).read_text())
        except (OSError, ValueError) as exc:
            print(f"[rank {self.rank}] ignoring fault file {self.path}: {exc}", file=sys.stderr, flush=True)
            self._file = []

    def find(self, kind: str, where: str | None = None, step: int | None = None) -> Fault | None:
        """The first active fault of ``kind`` (and ``where``) for this rank at ``step``, or None."""
        found = self.active(kind, step)
        return next((f for f in found if where is None or f.where == where), None)

    def active(self, kind: str, step: int | None = None) -> list[Fault]:
        """Every active fault of ``kind`` for this rank at ``step``, the start's specs first."""
        self.refresh()
        return [f for f in (*self._env, *self._file) if f.kind == kind and f.applies(self.rank, step)]


def _set_pdeathsig(sig: int = signal.SIGKILL) -> None:
    """Die with the parent (Linux prctl): helper processes never outlive their rank."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def _busy_or_sleep(mode: str, seconds: float) -> None:
    if mode == "busy":
        end = time.perf_counter() + seconds
        a = torch.ones(16, 16)
        while time.perf_counter() < end:
            a = (a @ a).clamp_(-1, 1)
    else:
        time.sleep(seconds)


def _compute_hang(faults: FaultSource, fault: Fault, step: int) -> None:
    """Injected: loop inside a layer's forward until the fault is removed."""
    while faults.find("hang", "compute", step) is not None:
        _busy_or_sleep(fault.mode, 0.2)


def _dataloader_hang(faults: FaultSource, fault: Fault) -> None:
    """Injected: a data-loader worker stuck reading a sample until the fault is removed."""
    while faults.find("hang", "dataloader") is not None:
        _busy_or_sleep(fault.mode, 0.2)


def _checkpoint_hang(faults: FaultSource, fault: Fault, step: int) -> None:
    """Injected: a checkpoint write stuck (storage) until the fault is removed."""
    while faults.find("hang", "checkpoint", step) is not None:
        _busy_or_sleep(fault.mode, 0.2)


def _skip_collective() -> None:
    """Injected (``hang:skip_collective``): the DP gradient all-reduce this rank does not call."""


def _wrong_size_collective(group: Any) -> None:
    """Injected (``hang:wrong_size``): the DP gradient all-reduce called with 0 elements (returns at once
    under gloo, the peers' all-reduce of the same sequence number waits for data that never comes)."""
    dist.all_reduce(torch.empty(0), group=group)


def _straggle(seconds: float) -> None:
    """Injected: the extra time of a slow rank."""
    time.sleep(seconds)


def _device_compute(seconds: float) -> None:
    """Emulated device time: the host thread waits for a kernel (a GPU would not use this CPU)."""
    if seconds > 0:
        time.sleep(seconds)


# --------------------------------------------------------------------------------------------------
# Topology (Megatron order tp-cp-ep-dp-pp, cp = ep = 1)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Topology:
    """Coordinates of ranks in a ``tp x dp x pp`` job, TP fastest, PP slowest."""

    tp: int
    dp: int
    pp: int

    @property
    def world_size(self) -> int:
        return self.tp * self.dp * self.pp

    def rank(self, tp_rank: int, dp_rank: int, pp_rank: int) -> int:
        return tp_rank + self.tp * (dp_rank + self.dp * pp_rank)

    def coords(self, rank: int) -> tuple[int, int, int]:
        """``(tp_rank, dp_rank, pp_rank)`` of ``rank``."""
        return rank % self.tp, (rank // self.tp) % self.dp, rank // (self.tp * self.dp)

    def tp_groups(self) -> list[list[int]]:
        return [[self.rank(t, d, p) for t in range(self.tp)] for p in range(self.pp) for d in range(self.dp)]

    def dp_groups(self) -> list[list[int]]:
        return [[self.rank(t, d, p) for d in range(self.dp)] for p in range(self.pp) for t in range(self.tp)]

    def pp_groups(self) -> list[list[int]]:
        return [[self.rank(t, d, p) for p in range(self.pp)] for d in range(self.dp) for t in range(self.tp)]


# --------------------------------------------------------------------------------------------------
# Model: Megatron's column/row-parallel MLP with f/g operators
# --------------------------------------------------------------------------------------------------


class _CopyToTP(torch.autograd.Function):
    """Megatron's ``f``: identity in forward, all-reduce of the gradient over TP in backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    """Megatron's ``g``: all-reduce of the partial outputs over TP in forward, identity in backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        x = x.contiguous().clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class _DeviceTime(torch.autograd.Function):
    """Identity whose backward spends the layer's emulated backward device time."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, layer: ParallelMLP) -> torch.Tensor:
        ctx.layer = layer
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        ctx.layer.backward_compute()
        return grad, None


class ParallelMLP(nn.Module):
    """``x + RowParallel(gelu(ColumnParallel(x)))`` with one TP all-reduce each way.

    Shapes: input and output ``[micro_batch, hidden]``; ``w1`` ``[hidden, ffn / tp]``, ``w2``
    ``[ffn / tp, hidden]``.
    """

    def __init__(self, trainer: Trainer, hidden: int, ffn: int, seed: int) -> None:
        super().__init__()
        self.trainer = trainer
        tp = trainer.topo.tp
        g = torch.Generator().manual_seed(seed)
        self.w1 = nn.Parameter(torch.randn(hidden, ffn // tp, generator=g) * hidden**-0.5)
        self.w2 = nn.Parameter(torch.randn(ffn // tp, hidden, generator=g) * ffn**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tr = self.trainer
        y = _DeviceTime.apply(x, self)
        if tr.topo.tp > 1:
            y = _CopyToTP.apply(y, tr.tp_group)
        tr.compute_faults()
        t0 = time.perf_counter()
        h = torch.nn.functional.gelu(y @ self.w1)
        out = h @ self.w2
        _device_compute(tr.args.compute_ms / 1000.0)
        tr.straggle(time.perf_counter() - t0)
        if tr.topo.tp > 1:
            out = _ReduceFromTP.apply(out, tr.tp_group)
        return x + out

    def backward_compute(self) -> None:
        t0 = time.perf_counter()
        _device_compute(2 * self.trainer.args.compute_ms / 1000.0)
        self.trainer.straggle(time.perf_counter() - t0)


# --------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------


class SyntheticDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Deterministic regression samples: ``x ~ N(0, 1)^hidden``, ``y = sin(x)``, per DP replica.

    Every TP/PP rank of one DP replica sees the same sample at the same index.
    """

    def __init__(
        self,
        hidden: int,
        dp_rank: int,
        seed: int,
        rank: int,
        fault_env: str,
        fault_file: str | None,
        start: int = 0,
    ):
        self.hidden, self.dp_rank, self.seed = hidden, dp_rank, seed
        self.rank, self.fault_env, self.fault_file = rank, fault_env, fault_file
        self.start = start  # first sample index (a resumed run goes on where the saved one was)
        self._faults: FaultSource | None = None

    def __len__(self) -> int:
        return 1 << 40  # endless, iterated sequentially

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._faults is None:  # built in the worker process
            self._faults = FaultSource(self.rank, self.fault_env, self.fault_file)
        fault = self._faults.find("hang", "dataloader")
        if fault is not None:
            _dataloader_hang(self._faults, fault)
        idx += self.start
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.dp_rank * 7919 + idx)
        x = torch.randn(self.hidden, generator=g)
        return x, torch.sin(x)


def _worker_init(_worker_id: int) -> None:
    _set_pdeathsig()
    torch.set_num_threads(1)


# --------------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------------


def _write_shard(path: str, state: dict[str, Any], faults: FaultSource, step: int) -> None:
    """``torch.save`` to ``path`` via a temporary file and an atomic rename."""
    fault = faults.find("hang", "checkpoint", step)
    if fault is not None:
        _checkpoint_hang(faults, fault, step)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(state, tmp)
    os.replace(tmp, path)


def _checkpoint_writer_main(
    requests: Any, acks: Any, rank: int, fault_env: str, fault_file: str | None
) -> None:
    """The persistent checkpoint writer process: save each request, acknowledge it."""
    _set_pdeathsig()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    faults = FaultSource(rank, fault_env, fault_file)
    while True:
        item = requests.get()
        if item is None:
            return
        step, path, blob = item
        try:
            _write_shard(path, pickle.loads(blob), faults, step)
            acks.put((step, None))
        except Exception as exc:
            acks.put((step, f"{type(exc).__name__}: {exc}"))


class Checkpointer:
    """Saves this rank's shard every ``ckpt_every`` steps, in one of three modes (sync/thread/process)."""

    def __init__(self, args: argparse.Namespace, rank: int, faults: FaultSource) -> None:
        self.dir = Path(args.ckpt_dir) if args.ckpt_dir else None
        self.every = args.ckpt_every if self.dir else 0
        self.mode = args.ckpt_mode
        self.rank, self.faults = rank, faults
        self._pending: list[int] = []
        self._thread: threading.Thread | None = None
        self._proc: Any = None
        if self.every and self.mode == "process":
            ctx = multiprocessing.get_context("fork")
            self._requests, self._acks = ctx.Queue(), ctx.Queue()
            self._proc = ctx.Process(
                target=_checkpoint_writer_main,
                args=(self._requests, self._acks, rank, faults.env_text, args.fault_file),
                name=f"ckpt-writer-{rank}",
                daemon=True,
            )
            self._proc.start()

    def path(self, step: int) -> Path:
        assert self.dir is not None
        return self.dir / f"iter_{step:07d}" / f"rank_{self.rank:05d}.pt"

    def maybe_save(self, step: int, state: dict[str, Any]) -> None:
        """Save at multiples of ``ckpt_every`` (waits for the previous asynchronous save first)."""
        if not self.every or step % self.every:
            return
        self.wait_for_previous_save()
        path = str(self.path(step))
        if self.mode == "sync":
            _write_shard(path, state, self.faults, step)
            self._finished(step)
        elif self.mode == "thread":
            snap = {k: (v.detach().clone() if torch.is_tensor(v) else v) for k, v in state.items()}
            self._thread = threading.Thread(
                target=self._thread_save, args=(path, snap, step), name="ckpt-thread", daemon=True
            )
            self._thread.start()
        else:
            self._requests.put((step, path, pickle.dumps(state)))
            self._pending.append(step)

    def _thread_save(self, path: str, state: dict[str, Any], step: int) -> None:
        _write_shard(path, state, self.faults, step)
        self._finished(step)

    def wait_for_previous_save(self) -> None:
        """Block until the previous asynchronous save is on disk (Megatron's async-save barrier)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        while self._pending:
            try:
                step, err = self._acks.get(timeout=1.0)
            except queue.Empty:
                if not self._proc.is_alive():
                    raise RuntimeError(f"checkpoint writer died (exit {self._proc.exitcode})") from None
                continue
            if err:
                raise RuntimeError(f"checkpoint of step {step} failed: {err}")
            self._pending.remove(step)
            self._finished(step)

    def _finished(self, step: int) -> None:
        if self.rank == 0 and self.dir is not None:
            tmp = self.dir / f".latest.tmp{os.getpid()}"
            tmp.write_text(f"{step}\n")
            os.replace(tmp, self.dir / "latest_checkpointed_iteration.txt")

    def close(self) -> None:
        self.wait_for_previous_save()
        if self._proc is not None:
            self._requests.put(None)
            self._proc.join(timeout=10)


class LoadError(Exception):
    """A checkpoint to resume from is missing or unreadable (the message names it)."""


def load_shard(ckpt_dir: str | None, which: str, rank: int) -> dict[str, Any]:
    """This rank's saved state for ``--load ITER|latest``. Raises LoadError naming what is missing."""
    if not ckpt_dir:
        raise LoadError("--load needs --ckpt-dir (the directory the checkpoints are in)")
    base = Path(ckpt_dir)
    if which == "latest":
        tracker = base / "latest_checkpointed_iteration.txt"
        try:
            text = tracker.read_text()[:64].strip()
        except OSError as exc:
            raise LoadError(f"cannot read the tracker {tracker}: {exc.strerror or exc}") from None
        if not text.isdigit():
            raise LoadError(f"tracker {tracker} names no iteration ({text[:20]!r})")
        iteration = int(text)
    else:
        iteration = int(which)
    path = base / f"iter_{iteration:07d}" / f"rank_{rank:05d}.pt"
    if not path.is_file():
        raise LoadError(f"rank {rank}: no checkpoint shard {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise LoadError(f"rank {rank}: cannot load {path}: {type(exc).__name__}: {exc}") from None
    if not isinstance(state, dict) or state.get("rank") != rank or state.get("step") != iteration:
        raise LoadError(f"rank {rank}: {path} is not rank {rank}'s shard of iteration {iteration}")
    return state


def faults_env() -> str:
    return os.environ.get(FAULT_ENV, "")


def fault_text(args: argparse.Namespace) -> str:
    """The specs fixed at start: ``ROBUSTCTL_FAULT``, then every ``--fault``, one per line."""
    return "\n".join([faults_env(), *(args.fault or [])])


def format_loss(loss: float) -> str:
    """The loss as the log prints it: ``1.234567E+00`` (Megatron's ``{:.6E}``), and ``nan``, ``inf``,
    ``-inf`` for the values that are not finite (Python's own spelling, where ``{:.6E}`` writes ``NAN``)."""
    return f"{loss:.6E}" if math.isfinite(loss) else str(loss)


NON_FINITE_JSON = jsonsafe.NON_FINITE_JSON
"""How the heartbeat writes a loss that is not finite, by ``repr(loss)``: robustctl's own spelling
(``robustctl.models.NON_FINITE_JSON``), strings that strict JSON holds and ``float()`` reads back; the
agent (:mod:`robustctl.agent`) writes the heartbeat with it."""
loss_json = jsonsafe.loss_json
"""The heartbeat's ``loss`` (:func:`robustctl.agent.jsonsafe.loss_json`): the number when finite,
``"NaN"``/``"Infinity"``/``"-Infinity"`` when not, None where this rank has no loss."""


def _cuda_error(fault: Fault) -> None:
    """Injected (``crash:cuda``): raise the RuntimeError PyTorch raises for an asynchronous CUDA error."""
    assert fault.error is not None
    raise RuntimeError(f"CUDA error: {CUDA_ERRORS[fault.error]}{CUDA_ERROR_SUFFIX}")


# --------------------------------------------------------------------------------------------------
# The trainer
# --------------------------------------------------------------------------------------------------


def _bound_gloo_backend(bind_addr: str) -> str:
    """Register a gloo backend whose devices bind ``bind_addr``; return its name."""
    gloo = dist.ProcessGroupGloo

    def create(store: Any, rank: int, size: int, timeout: datetime.timedelta) -> Any:
        opts = gloo._Options()
        opts._timeout = timeout
        opts._devices = [gloo.create_device(hostname=bind_addr)]
        return gloo(store, rank, size, opts)

    name = "gloobound"
    with contextlib.suppress(Exception):  # already registered
        dist.Backend.register_backend(name, create, devices=["cpu"])
    return name


class Trainer:
    """One rank: groups, stage model, data, schedule, checkpoints, faults, progress."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.topo = Topology(args.tp, args.dp, args.pp)
        if self.topo.world_size != self.world:
            raise SystemExit(f"minimegatron: tp*dp*pp = {self.topo.world_size} but WORLD_SIZE = {self.world}")
        self.tp_rank, self.dp_rank, self.pp_rank = self.topo.coords(self.rank)
        self.first = self.pp_rank == 0
        self.last = self.pp_rank == args.pp - 1
        self.step = 0
        self.faults = FaultSource(self.rank, fault_text(args), args.fault_file)
        self._slow_factor = 1.0
        self.last_loss: float | None = None
        self.nan_iterations = 0  # steps with a loss that is not finite since the last log line
        self.straggle_s = 0.0
        self.agent = (
            robustctl.agent.start(  # every step written (no rate limit): bench.failslow reads each
                # step's step_s from the heartbeats of the ranks that print none
                args.progress_dir,
                rank=self.rank,
                local_rank=self.local_rank,
                world_size=self.world,
                interval_s=0.0,
                flight_recorder=args.flight_recorder,  # before init_process_group (setup)
            )
            if args.progress_dir
            else None
        )
        self.init_s: float | None = None
        self.timings: dict[str, float] = {}

    # ---- setup ---------------------------------------------------------------------------------

    def setup(self) -> None:
        args = self.args
        t_setup = time.time()
        self.ckpt = Checkpointer(args, self.rank, self.faults)  # forks the writer before gloo starts
        loaded = load_shard(args.ckpt_dir, args.load, self.rank) if args.load else None
        if loaded is not None:
            want = {"tp": self.tp_rank, "dp": self.dp_rank, "pp": self.pp_rank}
            if loaded.get("coords") != want:
                raise LoadError(
                    f"rank {self.rank}: the shard's coordinates {loaded.get('coords')} are not {want}"
                )
            self.step = int(loaded["step"])
        timeout = datetime.timedelta(seconds=args.pg_timeout_s)
        backend = _bound_gloo_backend(args.bind_addr) if args.bind_addr else "gloo"
        dist.init_process_group(backend, timeout=timeout)
        t_pg = time.time()
        mine: dict[str, Any] = {}
        for kind, groups in (
            ("tp", self.topo.tp_groups()),
            ("dp", self.topo.dp_groups()),
            ("pp", self.topo.pp_groups()),
        ):
            for ranks in groups:
                g = dist.new_group(ranks, timeout=timeout)  # every rank creates every group, in order
                if self.rank in ranks:
                    mine[kind] = (g, ranks)
        t_groups = time.time()
        self.tp_group, self.tp_ranks = mine["tp"]
        self.dp_group, self.dp_ranks = mine["dp"]
        self.pp_group, self.pp_ranks = mine["pp"]
        self.prev_rank = self.pp_ranks[self.pp_rank - 1] if not self.first else None
        self.next_rank = self.pp_ranks[self.pp_rank + 1] if not self.last else None

        layers = [
            ParallelMLP(
                self,
                args.hidden,
                args.ffn,
                seed=args.seed * 10_007 + (self.pp_rank * 100 + i) * 31 + self.tp_rank,
            )
            for i in range(args.layers)
        ]
        self.model = nn.Sequential(*layers)
        if loaded is not None:
            self.model.load_state_dict(loaded["model"])
        self.params = [p for p in self.model.parameters()]
        start = self.step * args.micro_batches * args.micro_batch_size
        ds = SyntheticDataset(
            args.hidden, self.dp_rank, args.seed, self.rank, self.faults.env_text, args.fault_file, start
        )
        nw = args.num_workers
        self.loader = DataLoader(
            ds,
            batch_size=args.micro_batch_size,
            num_workers=nw,
            persistent_workers=nw > 0,
            prefetch_factor=2 if nw > 0 else None,
            multiprocessing_context="fork" if nw > 0 else None,
            worker_init_fn=_worker_init if nw > 0 else None,
        )
        self.data = iter(self.loader)  # starts the workers
        now = time.time()
        self.init_s = now - _T0
        self.timings = {
            "import_s": round(_T_IMPORTED - _T0, 3),
            "init_process_group_s": round(t_pg - t_setup, 3),
            "new_groups_s": round(t_groups - t_pg, 3),
            "model_and_loader_s": round(now - t_groups, 3),
        }
        self.write_progress("ready", None, None)

    # ---- fault hooks (called from the model) -----------------------------------------------------

    def compute_faults(self) -> None:
        fault = self.faults.find("hang", "compute", self.step)
        if fault is not None:
            _compute_hang(self.faults, fault, self.step)

    def corrupt_output(self, out: torch.Tensor) -> torch.Tensor:
        """Injected (``nan:activation``): this stage's output is NaN, as a kernel writing NaN makes it.

        The NaN flows on as it would: into the next stage, the loss, every gradient of the pipeline
        and, through the DP all-reduce, every replica's weights (so it outlives the fault).
        """
        if self.faults.find("nan", "activation", self.step) is None:
            return out
        return out * math.nan

    def corrupt_loss(self, total: torch.Tensor) -> torch.Tensor:
        """Injected into the loss this rank adds to the logged DP mean, not into its gradients:
        ``spike`` multiplies it by the spike's factor, ``nan:loss`` makes it NaN."""
        for fault in self.faults.active("spike", self.step):
            total = total * fault.factor
        if self.faults.find("nan", "loss", self.step) is not None:
            total = total * math.nan
        return total

    def device_synchronize(self) -> None:
        """Where the step waits for its device work (before the gradient all-reduce): an injected
        ``crash:cuda`` surfaces here, as an asynchronous CUDA error surfaces at the next synchronising
        call, and ends the rank like any uncaught exception (traceback on stderr, exit status 1)."""
        fault = self.faults.find("crash", "cuda", self.step)
        if fault is not None:
            _cuda_error(fault)

    def straggle(self, compute_s: float) -> None:
        if self._slow_factor > 1.0:
            extra = (self._slow_factor - 1.0) * compute_s
            self.straggle_s += extra
            _straggle(extra)

    # ---- pipeline communication ------------------------------------------------------------------

    def _hang_in_recv(self, shape: tuple[int, ...], peer: int) -> None:
        """Injected: a recv that no rank will ever match."""
        buf = torch.empty(shape)
        dist.recv(buf, src=peer, group=self.pp_group, tag=_NEVER_SENT_TAG)

    def recv_forward(self, shape: tuple[int, ...]) -> torch.Tensor:
        assert self.prev_rank is not None
        if self.faults.find("hang", "p2p_recv", self.step) is not None:
            self._hang_in_recv(shape, self.prev_rank)
        buf = torch.empty(shape)
        dist.recv(buf, src=self.prev_rank, group=self.pp_group)
        return buf

    def send_forward(self, t: torch.Tensor) -> None:
        assert self.next_rank is not None
        dist.send(t.detach().contiguous(), dst=self.next_rank, group=self.pp_group)

    def recv_backward(self, shape: tuple[int, ...]) -> torch.Tensor:
        assert self.next_rank is not None
        if self.first and self.faults.find("hang", "p2p_recv", self.step) is not None:
            self._hang_in_recv(shape, self.next_rank)
        buf = torch.empty(shape)
        dist.recv(buf, src=self.next_rank, group=self.pp_group)
        return buf

    def send_backward(self, t: torch.Tensor) -> None:
        assert self.prev_rank is not None
        dist.send(t.detach().contiguous(), dst=self.prev_rank, group=self.pp_group)

    # ---- one step ----------------------------------------------------------------------------------

    def train_step(self) -> float | None:
        """GPipe: every micro-batch forward, then every backward; DP all-reduce; SGD. Returns the loss."""
        args = self.args
        m = args.micro_batches
        shape = (args.micro_batch_size, args.hidden)
        inputs: list[torch.Tensor] = []
        outputs: list[torch.Tensor] = []
        for _ in range(m):
            x, y = next(self.data)
            if self.first:
                inp = x
            else:
                inp = self.recv_forward(shape).requires_grad_()
            out = self.corrupt_output(self.model(inp))
            if self.last:
                outputs.append(torch.nn.functional.mse_loss(out, y) / m)
            else:
                self.send_forward(out)
                outputs.append(out)
            inputs.append(inp)
        for i in range(m):
            if self.last:
                outputs[i].backward()
            else:
                outputs[i].backward(self.recv_backward(shape))
            if not self.first:
                grad = inputs[i].grad
                assert grad is not None
                self.send_backward(grad)
        self.device_synchronize()
        self.reduce_gradients()
        loss = None
        if self.last:
            total = self.corrupt_loss(torch.stack([o.detach() for o in outputs]).sum().reshape(1))
            if self.faults.find("hang", "skip_collective", self.step) is not None:
                _skip_collective()  # out of its DP group: logs its own loss
                return float(total.item())
            dist.all_reduce(total, group=self.dp_group)  # loss averaged over DP, for logging
            loss = float(total.item()) / args.dp
        return loss

    def reduce_gradients(self) -> None:
        """All-reduce every gradient over DP in one flat buffer, average, apply SGD."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        if self.args.dp > 1:
            if self.faults.find("hang", "skip_collective", self.step) is not None:
                _skip_collective()  # goes on with this rank's own gradients
            elif self.faults.find("hang", "wrong_size", self.step) is not None:
                _wrong_size_collective(self.dp_group)
            else:
                dist.all_reduce(flat, group=self.dp_group)
                flat /= self.args.dp
        with torch.no_grad():
            offset = 0
            for p in self.params:
                n = p.numel()
                p -= self.args.lr * flat[offset : offset + n].view_as(p)
                offset += n
                p.grad = None

    # ---- loop ----------------------------------------------------------------------------------------

    def run(self) -> int:
        args = self.args
        while args.steps == 0 or self.step < args.steps:
            t0 = time.perf_counter()
            self.step += 1
            crash = next((f for f in self.faults.active("crash", self.step) if f.where is None), None)
            if crash is not None:
                self.crash(crash)
            slow = self.faults.find("slow", None, self.step)
            self._slow_factor = slow.factor if slow is not None else 1.0
            self.straggle_s = 0.0
            loss = self.train_step()
            self.ckpt.maybe_save(self.step, self.state())
            step_s = time.perf_counter() - t0
            self.last_loss = loss
            self.write_progress("train", step_s, loss)
            if loss is not None and not math.isfinite(loss):
                self.nan_iterations += 1
            if self.step == 1 or self.step % args.log_every == 0:
                if self.rank == 0:
                    print(f"[rank 0] step {self.step} step_s {step_s:.3f}", flush=True)
                if loss is not None:
                    print(self.log_line(step_s, loss), flush=True)
                    self.nan_iterations = 0
            if args.idle_ms > 0:
                time.sleep(args.idle_ms / 1000.0)
        self.ckpt.close()
        self.write_progress("done", None, self.last_loss)
        dist.barrier()
        dist.destroy_process_group()
        if self.agent is not None:
            self.agent.close()
        return 0

    def crash(self, fault: Fault) -> None:
        msg = f"injected crash (fault {fault.kind}) on rank {self.rank} at step {self.step}"
        print(f"[rank {self.rank}] {msg}", file=sys.stderr, flush=True)
        if fault.signal:
            os.kill(os.getpid(), getattr(signal, f"SIG{fault.signal.upper()}"))
            time.sleep(5)
        raise RuntimeError(msg)

    def log_line(self, step_s: float, loss: float) -> str:
        """Megatron's training-log line (``training_log``: ``iteration N/ M | ... | lm loss: X |``) for this
        step, printed by every rank of the last stage every ``--log-every`` steps.

        ``lm loss`` is this step's loss (Megatron prints the mean over the log interval; one step's
        value shows a fault at the step it hit), :func:`format_loss`-spelled; ``number of nan
        iterations`` counts the steps since the last line whose loss was not finite.
        """
        args = self.args
        batch = args.micro_batches * args.micro_batch_size * args.dp
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        return (
            f"[rank {self.rank}] [{stamp}] iteration {self.step:8d}/{args.steps:8d} |"
            f" consumed samples: {self.step * batch:12d} |"
            f" elapsed time per iteration (ms): {step_s * 1000.0:.1f} |"
            f" learning rate: {args.lr:.6E} | global batch size: {batch:5d} |"
            f" lm loss: {format_loss(loss)} | loss scale: 1.0 |"
            f" number of skipped iterations:   0 | number of nan iterations: {self.nan_iterations:3d} |"
        )

    def state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "rank": self.rank,
            "coords": {"tp": self.tp_rank, "dp": self.dp_rank, "pp": self.pp_rank},
            "model": {k: v.detach() for k, v in self.model.state_dict().items()},
        }

    def write_progress(self, phase: str, step_s: float | None, loss: float | None) -> None:
        """Hand this step to the agent (:mod:`robustctl.agent`), which writes the heartbeat."""
        if self.agent is None:
            return
        self.agent.step(
            self.step,
            loss,
            phase=phase,
            step_s=step_s,
            straggle_s=self.straggle_s,
            init_s=self.init_s,
            timings=self.timings,
            started_at=_T0,
        )


# --------------------------------------------------------------------------------------------------
# Process plumbing
# --------------------------------------------------------------------------------------------------


def _default_bind_addr() -> str | None:
    """This host's address as sshd saw it (``SSH_CONNECTION``'s server address), when loopback."""
    parts = os.environ.get("SSH_CONNECTION", "").split()
    if len(parts) == 4 and parts[2].startswith("127."):
        return parts[2]
    return None


def _watch_stdin() -> None:
    """Exit when stdin reaches EOF: the launcher (the SSH channel) went away."""
    try:
        while os.read(0, 65536):
            pass
    except OSError:
        pass
    print("minimegatron: stdin closed (launcher gone), exiting", file=sys.stderr, flush=True)
    os._exit(4)


def _exit_after(seconds: float) -> None:
    time.sleep(seconds)
    print(f"minimegatron: --max-runtime-s {seconds} passed, exiting", file=sys.stderr, flush=True)
    os._exit(3)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.jobs.minimegatron", description=__doc__.split("\n")[0])
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    p.add_argument("--pp", type=int, default=1, help="pipeline-parallel size")
    p.add_argument("--dp", type=int, default=1, help="data-parallel size")
    p.add_argument("--steps", type=int, default=0, help="steps to train; 0 = until stopped")
    p.add_argument("--ckpt-dir", default=None, help="checkpoint directory (none: no checkpoints)")
    p.add_argument("--ckpt-every", type=int, default=0, help="checkpoint every K steps (0: never)")
    p.add_argument("--ckpt-mode", choices=("process", "thread", "sync"), default="process")
    p.add_argument(
        "--load",
        default=None,
        metavar="ITER|latest|none",
        help="resume from this iteration of --ckpt-dir ('none': start fresh, as a launcher's template may say)",
    )
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--ffn", type=int, default=64, help="MLP inner size (divisible by --tp)")
    p.add_argument("--layers", type=int, default=2, help="layers per pipeline stage")
    p.add_argument("--micro-batches", type=int, default=2)
    p.add_argument("--micro-batch-size", type=int, default=4)
    p.add_argument("--num-workers", type=int, default=1, help="data-loader worker processes per rank")
    p.add_argument("--compute-ms", type=float, default=10.0, help="emulated device ms per layer forward")
    p.add_argument("--idle-ms", type=float, default=100.0, help="host pause after each step, ms")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--fault-file", default=None, help="fault specs, re-read when changed")
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="SPEC",
        help="a fault spec fixed at start (repeatable)",
    )
    p.add_argument("--progress-dir", default=None, help="write rankRRRRR.json progress files here")
    p.add_argument(
        "--flight-recorder",
        type=int,
        default=0,
        metavar="N",
        help="Flight Recorder ring of N collectives per process group, gloo's too (needs --progress-dir: "
        "the agent sets it before the process group exists; 0: off)",
    )
    p.add_argument("--bind-addr", default=None, help="gloo bind address (default: SSH_CONNECTION's)")
    p.add_argument("--pg-timeout-s", type=float, default=900.0, help="collective timeout")
    p.add_argument("--max-runtime-s", type=float, default=0.0, help="exit after this long (0: never)")
    p.add_argument("--stdin-watch", action="store_true", help="exit when stdin reaches EOF")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--job-id", default=None, help="free-form marker (a launcher finds its processes by it)")
    args = p.parse_args(argv)
    if args.ffn % args.tp:
        p.error("--ffn must be divisible by --tp")
    if args.log_every < 1:
        p.error("--log-every must be >= 1")
    if args.flight_recorder < 0:
        p.error("--flight-recorder must be >= 0")
    if args.flight_recorder and not args.progress_dir:
        p.error("--flight-recorder needs --progress-dir (the agent turns it on)")
    if args.pp > 1 and args.micro_batches < 1:
        p.error("--micro-batches must be >= 1")
    if args.load == "none":  # a restart with no checkpoint to load ({ckpt_iter} of a launch: template)
        args.load = None
    if args.load is not None and not (args.load == "latest" or args.load.isdigit()):
        p.error("--load takes an iteration number, 'latest' or 'none'")
    if args.load is not None and not args.ckpt_dir:
        p.error("--load needs --ckpt-dir")
    if args.bind_addr is None:
        args.bind_addr = _default_bind_addr()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if var not in os.environ:
            print(f"minimegatron: {var} is not set (torchrun-style environment expected)", file=sys.stderr)
            return 2
    for where, text in ((FAULT_ENV, faults_env()), *(("--fault", f) for f in args.fault)):
        try:
            parse_faults(text)
        except ValueError as exc:
            print(f"minimegatron: {where}: {exc}", file=sys.stderr)
            return 2
    torch.set_num_threads(1)
    if args.stdin_watch:
        threading.Thread(target=_watch_stdin, name="stdin-watch", daemon=True).start()
    if args.max_runtime_s > 0:
        threading.Thread(
            target=_exit_after, args=(args.max_runtime_s,), name="max-runtime", daemon=True
        ).start()
    trainer = Trainer(args)
    try:
        trainer.setup()
    except LoadError as exc:
        print(f"minimegatron: {exc}", file=sys.stderr, flush=True)
        return 1
    if args.load:
        print(f"[rank {trainer.rank}] resumed from iteration {trainer.step}", flush=True)
    print(
        f"[rank {trainer.rank}] ready: tp={trainer.tp_rank} dp={trainer.dp_rank} pp={trainer.pp_rank} "
        f"init {trainer.init_s:.2f}s bind {args.bind_addr or 'default'}",
        flush=True,
    )
    return trainer.run()


if __name__ == "__main__":
    sys.exit(main())
