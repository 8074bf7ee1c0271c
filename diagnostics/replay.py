#!/usr/bin/env python3
"""robustctl node-side probe ``replay``: a deterministic reduced training job for SDC replay.

Standalone with the shared prelude ``_prelude.py`` (Python >= 3.8; torch, imported inside); never
imports robustctl. Prints exactly one JSON document (``diagnostics/README.md``). It is the
workload of ``robustctl replay-sdc`` (ByteRobust, arXiv 2509.16293, §4.2 dual-phase replay): every
group of machines runs this same small job, and healthy groups agree bit for bit.

**Placement.** ``--nnodes`` machines run one probe each (``--node-rank``), each forking
``--nproc-per-node`` local ranks (torchrun's shape); global rank = ``node_rank · nproc + local``.
Global rank 0 serves the rendezvous (a TCPStore) on ``--master-addr:--master-port``; gloo binds to
``--bind-addr`` (this host's address) when given. ``--nnodes 1`` runs every rank on this host (a free
port on ``--master-addr`` unless ``--master-port``). NCCL over one GPU per local rank when torch sees
CUDA, else gloo over CPU processes (``--backend``).

**The job.** World ``tp · pp · dp`` ranks in Megatron's order (TP fastest, then DP, then PP). Each of
``pp`` stages holds ``--layers`` residual MLP blocks of width ``--hidden`` (ffn 4x): the first
linear column-parallel, the second row-parallel, partial outputs all-reduced over the TP group
(Megatron's f/g operators). Stages pass activations forward and gradients back (send/recv); the
last stage's loss is the mean squared error against fixed targets. Gradients are averaged over the
DP group, then plain SGD. Weights come from ``--seed`` (the full matrices, then sliced per TP rank,
so the numbers do not depend on where the ranks run); data from ``--seed`` and the step.

**Determinism.** ``torch.use_deterministic_algorithms(True)``, one CPU thread per rank,
``CUBLAS_WORKSPACE_CONFIG=:4096:8`` on GPUs, and every reduction is an all-gather followed by a sum
in rank order (the backend's own reduction algorithm, ring or tree, never decides the bits). Runs
of the same arguments on healthy hardware of one kind agree bit for bit.

``data``::

    {available: true, backend: "gloo"|"nccl", device: "cpu"|"cuda", world_size, nnodes, node_rank,
     nproc_per_node, tp, pp, dp, steps, seed, hidden, layers, batch,
     loss: [str],            # per-step DP-averaged loss, exact bits: float.hex ("nan", "inf" too)
     nonfinite: bool,        # some loss is NaN or infinite
     digest: str|null,       # SHA-256 over every rank's parameter digest, in rank order
     consistent: bool|null,  # every last-stage rank reported the same loss bits
     init_s, train_s: float|null, master_port: int|null,
     error: str|null}        # first failure (rendezvous, dead peer, crash, timeout), else null

    unavailable: {available: false, reason, reason_code: "torch_missing"|"no_distributed"}
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import math
import os
import sys
import time
from typing import Any, Sequence

from _prelude import (
    Document,
    gpu_count,
    import_distributed,
    kill_children,
    listen_failure,
    make_store,
    one_line,
    pick_backend,
    probe_main,
    run_rank_processes,
    serve_rendezvous,
)

PROBE = "replay"
LR = 0.05
TAG_ACT, TAG_GRAD = 1, 2


# --------------------------------------------------------------------------- layout
def coords(rank: int, tp: int, dp: int) -> dict[str, int]:
    """``{tp, dp, pp}`` of ``rank`` (TP fastest, then DP, then PP)."""
    return {"tp": rank % tp, "dp": (rank // tp) % dp, "pp": rank // (tp * dp)}


def rank_at(tp_r: int, dp_r: int, pp_r: int, tp: int, dp: int) -> int:
    return tp_r + tp * (dp_r + dp * pp_r)


def all_groups(tp: int, pp: int, dp: int) -> dict[str, list[list[int]]]:
    """Every TP and DP group of the layout and the whole world, ranks ascending, fixed order."""
    tps = [[rank_at(t, d, p, tp, dp) for t in range(tp)] for p in range(pp) for d in range(dp)]
    dps = [[rank_at(t, d, p, tp, dp) for d in range(dp)] for p in range(pp) for t in range(tp)]
    return {"tp": tps, "dp": dps, "world": [list(range(tp * pp * dp))]}


# --------------------------------------------------------------------------- communication
class Comm:
    """The rank's groups (TP, DP, world) and point-to-point over the world, gloo or NCCL.

    gloo groups are built directly (``ProcessGroupGloo`` on a ``PrefixStore`` per group), so that
    they bind to ``bind_addr``; NCCL uses ``init_process_group`` and ``new_group`` for every group
    on every rank, in the same order.
    """

    def __init__(self, torch: Any, dist: Any, store: Any, rank: int, cfg: dict[str, Any]) -> None:
        self.torch, self.dist, self.rank = torch, dist, rank
        self.backend = cfg["backend"]
        self.groups: dict[str, Any] = {}
        self.members: dict[str, list[int]] = {}
        timeout = datetime.timedelta(seconds=cfg["op_timeout"])
        groups = all_groups(cfg["tp"], cfg["pp"], cfg["dp"])
        if self.backend == "nccl":
            self.device = torch.device("cuda", cfg["local_rank"])
            torch.cuda.set_device(self.device)
            dist.init_process_group("nccl", store=store, rank=rank, world_size=cfg["world"], timeout=timeout)
            for kind in ("tp", "dp"):
                for ranks in groups[kind]:
                    g = dist.new_group(ranks, timeout=timeout)
                    if rank in ranks:
                        self.groups[kind], self.members[kind] = g, ranks
            self.groups["world"], self.members["world"] = None, groups["world"][0]
            return
        self.device = torch.device("cpu")
        gloo = dist.ProcessGroupGloo
        bind = cfg.get("bind_addr")
        dev = gloo.create_device(hostname=bind) if bind else gloo.create_default_device()
        for kind in ("world", "tp", "dp"):
            for i, ranks in enumerate(groups[kind]):
                if rank not in ranks:
                    continue
                opts = gloo._Options()
                opts._timeout = timeout
                opts._devices = [dev]
                prefix = dist.PrefixStore(f"{kind}{i}/", store)
                self.groups[kind] = gloo(prefix, ranks.index(rank), len(ranks), opts)
                self.members[kind] = ranks

    def size(self, kind: str) -> int:
        return len(self.members[kind])

    def allgather(self, t: Any, kind: str) -> list[Any]:
        """Every member's ``t`` (same shape), in rank order."""
        outs = [self.torch.empty_like(t) for _ in self.members[kind]]
        if self.backend == "nccl":
            self.dist.all_gather(outs, t, group=self.groups[kind])
        else:
            self.groups[kind].allgather([outs], [t]).wait()
        return outs

    def allreduce_sum(self, t: Any, kind: str) -> Any:
        """Sum over the group in a fixed order: all-gather, then add in rank order."""
        if self.size(kind) == 1:
            return t
        outs = self.allgather(t.contiguous(), kind)
        acc = outs[0].clone()
        for o in outs[1:]:
            acc = acc + o
        return acc

    def send(self, t: Any, dst: int, tag: int) -> None:
        if self.backend == "nccl":
            self.dist.send(t.contiguous(), dst)
        else:
            self.groups["world"].send([t.contiguous()], dst, tag).wait()

    def recv(self, t: Any, src: int, tag: int) -> Any:
        if self.backend == "nccl":
            self.dist.recv(t, src)
        else:
            self.groups["world"].recv([t], src, tag).wait()
        return t

    def close(self) -> None:
        if self.backend == "nccl":
            try:
                self.dist.destroy_process_group()
            except Exception:
                pass
        self.groups = {}


# --------------------------------------------------------------------------- the model
def tp_ops(torch: Any, comm: Comm) -> Any:
    """Megatron's f (identity forward, TP all-reduce backward) and g (the reverse)."""

    class CopyToTP(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            return x.clone()

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return comm.allreduce_sum(grad, "tp")

    class ReduceFromTP(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            return comm.allreduce_sum(x, "tp")

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad.clone()

    return CopyToTP.apply, ReduceFromTP.apply


def init_params(torch: Any, cfg: dict[str, Any], stage: int, tp_rank: int, device: Any) -> list[Any]:
    """This rank's shards: for each layer W1 rows and W2 columns of the full matrices (seeded)."""
    h, tp = cfg["hidden"], cfg["tp"]
    f = 4 * h
    shard = f // tp
    params = []
    for layer in range(cfg["layers"]):
        g = torch.Generator().manual_seed(cfg["seed"] * 1_000_003 + stage * 1009 + layer)
        w1 = torch.randn(f, h, generator=g) / math.sqrt(h)
        w2 = torch.randn(h, f, generator=g) / math.sqrt(f)
        params.append(w1[tp_rank * shard : (tp_rank + 1) * shard].clone().to(device).requires_grad_())
        params.append(w2[:, tp_rank * shard : (tp_rank + 1) * shard].clone().to(device).requires_grad_())
    return params


def batch_of(torch: Any, cfg: dict[str, Any], step: int, dp_rank: int, device: Any) -> Any:
    """Step ``step``'s inputs and targets of DP replica ``dp_rank`` (the global batch is seeded)."""
    b, h = cfg["batch"], cfg["hidden"]
    g = torch.Generator().manual_seed(cfg["seed"] * 7919 + step)
    x = torch.randn(b * cfg["dp"], h, generator=g)
    y = torch.randn(b * cfg["dp"], h, generator=g)
    sl = slice(dp_rank * b, (dp_rank + 1) * b)
    return x[sl].clone().to(device), y[sl].clone().to(device)


def digest_of(torch: Any, params: Sequence[Any]) -> bytes:
    """SHA-256 over the parameters' shapes and bytes, in order."""
    h = hashlib.sha256()
    for p in params:
        t = p.detach().to("cpu").contiguous().clone()
        h.update(repr(tuple(t.shape)).encode())
        h.update(bytes(t.view(-1).view(torch.uint8).tolist()))
    return h.digest()


def train(torch: Any, comm: Comm, cfg: dict[str, Any], rank: int) -> dict[str, Any]:
    """Run the steps; returns ``{loss: [hex], digest, consistent}`` (identical on every rank)."""
    tp, pp, dp = cfg["tp"], cfg["pp"], cfg["dp"]
    c = coords(rank, tp, dp)
    last = c["pp"] == pp - 1
    dev = comm.device
    params = init_params(torch, cfg, c["pp"], c["tp"], dev)
    f_op, g_op = tp_ops(torch, comm)
    prev = rank_at(c["tp"], c["dp"], c["pp"] - 1, tp, dp) if c["pp"] > 0 else None
    nxt = rank_at(c["tp"], c["dp"], c["pp"] + 1, tp, dp) if not last else None
    losses = torch.zeros(cfg["steps"], dtype=torch.float64, device=dev)
    shape = (cfg["batch"], cfg["hidden"])
    for step in range(cfg["steps"]):
        x, y = batch_of(torch, cfg, step, c["dp"], dev)
        if prev is not None:
            x = comm.recv(torch.empty(shape, dtype=torch.float32, device=dev), prev, TAG_ACT)
            x.requires_grad_()
        out = x
        for i in range(0, len(params), 2):
            hid = torch.matmul(f_op(out) if tp > 1 else out, params[i].t())
            hid = torch.tanh(hid)
            part = torch.matmul(hid, params[i + 1].t())
            out = out + (g_op(part) if tp > 1 else part)
        if last:
            loss = ((out - y) ** 2).mean()
            loss.backward()
            mean = comm.allreduce_sum(loss.detach().reshape(1), "dp") / dp
            losses[step] = mean[0].to(torch.float64)
        else:
            comm.send(out.detach(), nxt, TAG_ACT)  # type: ignore[arg-type]
            grad = comm.recv(torch.empty(shape, dtype=torch.float32, device=dev), nxt, TAG_GRAD)  # type: ignore[arg-type]
            out.backward(grad)
        if prev is not None:
            comm.send(x.grad, prev, TAG_GRAD)
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        flat = comm.allreduce_sum(flat, "dp") / dp
        with torch.no_grad():
            off = 0
            for p in params:
                n = p.numel()
                p -= LR * flat[off : off + n].view_as(p)
                off += n
                p.grad = None
    mine = torch.tensor(list(digest_of(torch, params)), dtype=torch.uint8, device=dev)
    digests = comm.allgather(mine, "world")
    whole = hashlib.sha256(b"".join(bytes(d.to("cpu").tolist()) for d in digests)).hexdigest()
    all_losses = comm.allgather(losses, "world")
    lasts = [r for r in range(tp * pp * dp) if coords(r, tp, dp)["pp"] == pp - 1]
    rows = [[float(v) for v in all_losses[r].to("cpu").tolist()] for r in lasts]
    hexes = [[v.hex() for v in row] for row in rows]
    return {
        "loss": hexes[0],
        "digest": whole,
        "consistent": all(h == hexes[0] for h in hexes),
        "nonfinite": any(not math.isfinite(v) for v in rows[0]),
    }


def run_rank(cfg: dict[str, Any], rank: int, listen_fd: int | None = None) -> dict[str, Any]:
    """One rank's answer: ``{rank, init_s, train_s, loss, digest, consistent, nonfinite, error}``."""
    out: dict[str, Any] = {"rank": rank, "init_s": None, "train_s": None, "error": None}
    comm: Comm | None = None
    try:
        if cfg["backend"] == "nccl":
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        torch.use_deterministic_algorithms(True)
        t0 = time.perf_counter()
        try:
            store = make_store(dist, cfg, rank, listen_fd)
        except Exception as exc:
            raise RuntimeError(
                f"rendezvous with {cfg['master_addr']}:{cfg['master_port']} failed: {one_line(exc)}"
            ) from None
        try:
            comm = Comm(torch, dist, store, rank, cfg)
        except Exception as exc:
            raise RuntimeError(f"process group set-up failed: {one_line(exc)}") from None
        out["init_s"] = round(time.perf_counter() - t0, 6)
        t1 = time.perf_counter()
        try:
            out.update(train(torch, comm, cfg, rank))
        except Exception as exc:
            raise RuntimeError(f"training step failed: {one_line(exc)}") from None
        out["train_s"] = round(time.perf_counter() - t1, 6)
    except Exception as exc:
        out["error"] = str(exc) if "failed:" in str(exc) else one_line(exc)
    finally:
        if comm is not None:
            comm.close()
    return out


# --------------------------------------------------------------------------- processes
def run_node(cfg: dict[str, Any], doc: Document, deadline: float) -> None:
    """Fork this node's ranks, collect their answers before ``deadline``, merge them into ``doc``."""
    sock = None
    first = cfg["node_rank"] * cfg["nproc"]
    if first == 0:
        try:
            sock = serve_rendezvous(cfg, doc)
        except OSError as exc:
            doc.set("error", listen_failure(cfg["master_addr"], cfg["master_port"], exc))
            return
    ranks = [(first + local, dict(cfg, local_rank=local)) for local in range(cfg["nproc"])]
    merge(doc, run_rank_processes(run_rank, ranks, sock, deadline))


def merge(doc: Document, answers: Sequence[dict[str, Any]]) -> None:
    """This node's answer: the first error of its ranks, else its ranks' (identical) results."""
    errors = [f"rank {a['rank']}: {a['error']}" for a in answers if a.get("error")]
    inits = [a["init_s"] for a in answers if a.get("init_s") is not None]
    trains = [a["train_s"] for a in answers if a.get("train_s") is not None]
    doc.set("init_s", max(inits) if inits else None)
    doc.set("train_s", max(trains) if trains else None)
    if errors:
        doc.set("error", errors[0])
        return
    first = answers[0]
    same = all(a.get("digest") == first.get("digest") and a.get("loss") == first.get("loss") for a in answers)
    doc.set("loss", first.get("loss"))
    doc.set("nonfinite", bool(first.get("nonfinite")))
    doc.set("digest", first.get("digest"))
    doc.set("consistent", bool(first.get("consistent")) and same)


# --------------------------------------------------------------------------- main
def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages (default 1)")
    p.add_argument("--dp", type=int, default=1, help="data-parallel size (default 1)")
    p.add_argument("--nnodes", type=int, default=1, help="machines running the job (default 1)")
    p.add_argument("--node-rank", type=int, default=0, help="this machine's index (default 0)")
    p.add_argument(
        "--nproc-per-node", type=int, default=None, help="ranks per machine (default world/nnodes)"
    )
    p.add_argument("--master-addr", default="127.0.0.1", help="global rank 0's address (default 127.0.0.1)")
    p.add_argument("--master-port", type=int, default=None, help="rendezvous port (one machine: free)")
    p.add_argument("--bind-addr", default=None, help="this machine's address for gloo")
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    p.add_argument("--steps", type=int, default=4, help="training steps (default 4)")
    p.add_argument("--seed", type=int, default=1234, help="weights and data seed (default 1234)")
    p.add_argument("--hidden", type=int, default=64, help="model width (default 64)")
    p.add_argument("--layers", type=int, default=2, help="MLP blocks per stage (default 2)")
    p.add_argument("--batch", type=int, default=8, help="samples per DP replica per step (default 8)")


def check_args(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    for name in ("tp", "pp", "dp", "nnodes", "steps", "hidden", "layers", "batch"):
        if not 1 <= getattr(args, name) <= 1_000_000:
            p.error(f"--{name.replace('_', '-')} must be between 1 and 1000000")
    world = args.tp * args.pp * args.dp
    if args.nproc_per_node is None:
        if world % args.nnodes:
            p.error(f"world size {world} is not divisible by --nnodes {args.nnodes}")
        args.nproc_per_node = world // args.nnodes
    if args.nproc_per_node * args.nnodes != world:
        p.error(f"--nnodes {args.nnodes} x --nproc-per-node {args.nproc_per_node} != tp*pp*dp = {world}")
    if not 0 <= args.node_rank < args.nnodes:
        p.error("need 0 <= --node-rank < --nnodes")
    if args.nnodes > 1 and args.master_port is None:
        p.error("--master-port is required with --nnodes > 1")
    if (4 * args.hidden) % args.tp:
        p.error(f"--tp {args.tp} must divide the ffn width {4 * args.hidden}")


def collect(args: argparse.Namespace, doc: Document) -> None:
    """Run this node's ranks of the replay job (see the module docstring)."""
    deadline = time.monotonic() + max(1.0, args.timeout - min(5.0, 0.1 * args.timeout))
    ngpu = gpu_count()
    dist = import_distributed(doc)
    if dist is None:
        return
    import torch

    # Before forking: its first call costs seconds of imports, which the ranks then inherit.
    torch.use_deterministic_algorithms(True)
    backend = pick_backend(args.backend, dist, ngpu)
    world = args.tp * args.pp * args.dp
    budget = max(1.0, deadline - time.monotonic())
    cfg = {
        "backend": backend,
        "world": world,
        "tp": args.tp,
        "pp": args.pp,
        "dp": args.dp,
        "nnodes": args.nnodes,
        "node_rank": args.node_rank,
        "nproc": args.nproc_per_node,
        "master_addr": args.master_addr,
        "master_port": args.master_port,
        "bind_addr": args.bind_addr or (args.master_addr if args.nnodes == 1 else None),
        "steps": args.steps,
        "seed": args.seed,
        "hidden": args.hidden,
        "layers": args.layers,
        "batch": args.batch,
        "rdzv_timeout": max(2.0, min(120.0, 0.4 * budget)),
        "op_timeout": max(2.0, 0.5 * budget),
    }
    for key, value in (
        ("available", True),
        ("backend", backend),
        ("device", "cuda" if backend == "nccl" else "cpu"),
        ("world_size", world),
        ("nnodes", args.nnodes),
        ("node_rank", args.node_rank),
        ("nproc_per_node", args.nproc_per_node),
        ("tp", args.tp),
        ("pp", args.pp),
        ("dp", args.dp),
        ("steps", args.steps),
        ("seed", args.seed),
        ("hidden", args.hidden),
        ("layers", args.layers),
        ("batch", args.batch),
        ("master_port", args.master_port),
        ("loss", []),
        ("nonfinite", None),
        ("digest", None),
        ("consistent", None),
        ("init_s", None),
        ("train_s", None),
        ("error", None),
    ):
        doc.set(key, value)
    if backend == "nccl" and args.nproc_per_node > ngpu:
        doc.set("error", f"--nproc-per-node {args.nproc_per_node} exceeds the {ngpu} GPUs torch sees")
        return
    run_node(cfg, doc, deadline)


def main(argv: Sequence[str] | None = None) -> int:
    return probe_main(
        PROBE, add_args, collect, argv, timeout_s=120.0, check_args=check_args, on_timeout=kill_children
    )


if __name__ == "__main__":
    sys.exit(main())
