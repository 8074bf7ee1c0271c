"""Generate the Flight Recorder fixtures in ``tests/data/flight-recorder/`` from a real 4-rank gloo job.

Usage::

    .venv/bin/python tests/fr_gen.py [OUT_DIR]      # default: tests/data/flight-recorder

Each case runs four processes (``torch.multiprocessing.spawn``, rendezvous through a
``file://`` store in a temporary directory, no network) with ``TORCH_FR_BUFFER_SIZE`` set, so
torch's Flight Recorder records every collective. The job's layout is ``tp=2,pp=2`` (Megatron's
order, tp fastest): TP groups ``[0,1] [2,3]``, PP groups ``[0,2] [1,3]``, created on every rank in
that order with Megatron's group descriptions. One healthy step runs, then a fault:

* ``skipped-allreduce``: rank 3 skips the world all-reduce the others enter.
* ``size-mismatch``: rank 2 calls the world all-reduce with 1025 elements, the others with 1024.
* ``cascade``: rank 1 (pipeline stage 0) hangs in compute before handing its activations to stage
  1; rank 3 waits for them in its PP group, rank 2 waits for rank 3 in their TP all-reduce, rank 0
  waits for rank 1 in theirs. Gloo's Flight Recorder in torch 2.13 records no point-to-point
  operation (``send``/``recv``/``isend``/``irecv``/``batch_isend_irecv`` leave no entry; checked
  when these fixtures were made), so the stage hand-off is a broadcast in the two-rank PP group from
  the stage-0 rank: recorded, and blocking the receiver exactly as the missing send would.

Collectives that must stay blocked are issued with ``async_op=True``; when every rank has issued
its part (a second file store counts them), each rank dumps its trace as torch serialises it:
``_dump_fr_trace()`` (pickle, written to ``nccl_trace_rank_<r>``, the name torch's own dump on
timeout uses, ``TORCH_FR_DUMP_TEMP_FILE``'s default prefix) and ``_dump_fr_trace_json()`` (written to
``nccl_trace_rank_<r>.json``), then leaves with ``os._exit`` (the blocked collectives would hang a
clean shutdown).
"""

from __future__ import annotations

import datetime
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORLD = 4
"""Ranks of the job (tp=2, pp=2)."""

STORE_TIMEOUT_S = 60.0
"""How long a rank waits for the others at a rendezvous before giving up (a hung generator fails
instead of hanging the caller)."""

CASES = ("skipped-allreduce", "size-mismatch", "cascade")

TP_DESC = "TENSOR_MODEL_PARALLEL_GROUP"
PP_DESC = "PIPELINE_MODEL_PARALLEL_GROUP"


def _wait_done(work: Any, deadline: float) -> None:
    """Poll an async work object until it completes, failing at ``deadline`` (monotonic)."""
    while not work.is_completed():
        if time.monotonic() > deadline:
            raise TimeoutError("collective did not complete")
        time.sleep(0.01)


def _rank_main(rank: int, case: str, tmp: str, out: str) -> None:
    os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"
    import torch
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=STORE_TIMEOUT_S)
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp}/rdzv", rank=rank, world_size=WORLD, timeout=timeout
    )
    tp_groups = [dist.new_group([0, 1], group_desc=TP_DESC), dist.new_group([2, 3], group_desc=TP_DESC)]
    pp_groups = [dist.new_group([0, 2], group_desc=PP_DESC), dist.new_group([1, 3], group_desc=PP_DESC)]
    tp = tp_groups[rank // 2]
    pp = pp_groups[rank % 2]
    stage0 = rank % 2  # the stage-0 rank of this rank's PP group (ranks 0 and 1)
    deadline = time.monotonic() + STORE_TIMEOUT_S

    act = torch.ones(256)
    grad = torch.ones(1024)
    # step 1, healthy: stage hand-off, TP all-reduce, world all-reduce of the loss
    dist.broadcast(act, src=stage0, group=pp)
    dist.all_reduce(grad, group=tp)
    dist.all_reduce(torch.ones(1))

    pending: list[Any] = []
    if case == "skipped-allreduce":
        if rank != 3:
            pending.append(dist.all_reduce(grad, async_op=True))
    elif case == "size-mismatch":
        pass  # issued below, in an order that lets every rank dump before gloo aborts
    elif case == "cascade":
        if rank != 1:  # rank 1 hangs in compute: it issues nothing
            work = dist.broadcast(act, src=stage0, group=pp, async_op=True)
            if rank == 3:
                pending.append(work)  # waits for rank 1's hand-off, forever
            else:
                _wait_done(work, deadline)
                pending.append(dist.all_reduce(grad, group=tp, async_op=True))
    else:
        raise ValueError(case)

    issued = getattr(dist, "FileStore")(f"{tmp}/issued", WORLD)  # not in torch.distributed.__all__
    if case == "size-mismatch":
        # Gloo aborts a process (std::terminate) when a peer's data is larger than it expects, so
        # ranks 0, 1 and 3 enter the 1024-element all-reduce and dump first; rank 2 then enters
        # with 1025 elements and dumps at once. Data reaching the others after that may abort them.
        if rank == 2:
            issued.wait([f"dumped{r}" for r in (0, 1, 3)], timeout)
        pending.append(dist.all_reduce(torch.ones(1025 if rank == 2 else 1024), async_op=True))
    else:
        issued.set(f"rank{rank}", "1")
        issued.wait([f"rank{r}" for r in range(WORLD)], timeout)
    c10d: Any = torch._C._distributed_c10d
    Path(out, f"nccl_trace_rank_{rank}").write_bytes(c10d._dump_fr_trace())
    Path(out, f"nccl_trace_rank_{rank}.json").write_bytes(c10d._dump_fr_trace_json())
    issued.set(f"dumped{rank}", "1")
    if case != "size-mismatch":
        issued.wait([f"dumped{r}" for r in range(WORLD)], timeout)
    sys.stdout.flush()
    os._exit(0)


def generate(out_root: Path) -> None:
    """Run every case and write its dumps under ``out_root/<case>/``."""
    import torch.multiprocessing as mp

    for case in CASES:
        out = out_root / case
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        with tempfile.TemporaryDirectory(prefix="frgen-") as tmp:
            ctx = mp.get_context("spawn")
            procs = [ctx.Process(target=_rank_main, args=(r, case, tmp, str(out))) for r in range(WORLD)]
            for p in procs:
                p.start()
            for p in procs:
                p.join(STORE_TIMEOUT_S * 2)
                if p.is_alive():
                    p.kill()
                    p.join()
        names = sorted(p.name for p in out.iterdir())
        codes = [p.exitcode for p in procs]
        print(f"{case}: exit codes {codes}; {names}")
        expected = sorted(f"nccl_trace_rank_{r}{s}" for r in range(WORLD) for s in ("", ".json"))
        if names != expected:
            raise SystemExit(f"{case}: expected {expected}")


if __name__ == "__main__":
    default = Path(__file__).resolve().parent / "data" / "flight-recorder"
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else default)
