#!/usr/bin/env python3
"""robustctl node-side probe ``allreduce``: all-reduce bandwidth and correctness (torch.distributed).

Standalone with the shared prelude ``_prelude.py``
(Python >= 3.8; torch); never imports robustctl. Prints exactly one JSON document (see
``diagnostics/README.md``). Three modes:

- **intra** (default): ``--nproc`` local ranks forked on this host (NCCL over its GPUs when torch
  sees CUDA, else gloo over CPU processes, default 2), rendezvous on ``--master-addr`` (default
  127.0.0.1) at a free port (or ``--master-port``).
- **rank**: ``--rank R --world-size W --master-addr A --master-port P``: this process is one rank
  of a group spread over hosts; rank 0 listens on ``A:P`` (the control side starts one probe per
  host at once). gloo binds to ``--bind-addr`` (this host's address) when given, NCCL uses GPU 0.
- **nccl-tests** (``--nccl-tests``): run nccl-tests' ``all_reduce_perf`` (``--nccl-tests-bin``,
  else PATH, /usr/local/bin, /opt/nccl-tests/build) with ``-b -e -f 2 -g -n -w -c 1`` and return its
  raw stdout for the control side to parse.

Per message size (``--sizes``, bytes, comma-separated, K/M/G suffixes allowed): ``--warmup``
untimed all-reduces, ``--iters`` timed ones (in place on a zero tensor), then one verified
all-reduce of a known pattern (rank r holds ``r + 1 + i % 13`` at element i; the sum is exact in
float32). ``time_s`` is the mean time per all-reduce of the slowest rank; ``algbw = size / time``
and ``busbw = algbw * 2(n-1)/n`` in GB/s (1e9 B/s), nccl-tests' definitions
(https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md). Every rendezvous and
collective has a timeout (a missing peer ends the probe with ``error`` set, not a hang).

``data``::

    {available: true, mode: "intra"|"rank", backend: "gloo"|"nccl", device: "cpu"|"cuda",
     world_size: int, nproc: int, rank: int|null, master_addr: str, master_port: int|null,
     bind_addr: str|null, dtype: "float32", iters: int, warmup: int, init_s: float|null,
     results: [ {size_bytes: int, count: int, time_s: float, algbw_gbps: float, busbw_gbps: float,
                 correct: bool, wrong_elements: int} ],
     correct: bool|null,      # every size verified correct; null when nothing was verified
     error: str|null}         # first failure (rendezvous timeout, dead peer, crash), else null

    nccl-tests mode: {available: true, mode: "nccl-tests", binary: str, argv: [str],
     returncode: int|null, stdout: str, stderr_tail: str, error: str|null}

    unavailable: {available: false, mode: str, reason: str,
                  reason_code: "torch_missing"|"no_distributed"|"nccl_tests_missing"}
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import time
from typing import Any, Sequence

from _prelude import (
    Document,
    gpu_count,
    import_distributed,
    kill_children,
    listen_failure,
    listening_socket,
    make_store,
    one_line,
    pick_backend,
    probe_main,
    run_rank_processes,
    serve_rendezvous,
)

PROBE = "allreduce"
CPU_SIZES = (1 << 20, 4 << 20, 16 << 20)
GPU_SIZES = (1 << 20, 16 << 20, 256 << 20, 1 << 30)
NCCL_TESTS_DIRS = ("/usr/local/bin", "/opt/nccl-tests/build", "/usr/local/nccl-tests/build")
STDOUT_CAP = 1 << 20


# --------------------------------------------------------------------------- measurements
def busbw_factor(world: int) -> float:
    """nccl-tests' all-reduce bus-bandwidth factor 2(n-1)/n."""
    return 2.0 * (world - 1) / world if world > 1 else 0.0


def expected_sum(torch: Any, count: int, world: int, device: Any) -> Any:
    """The verified pattern's all-reduced value: sum over r of (r + 1 + i % 13)."""
    idx = torch.arange(count, device=device, dtype=torch.int64) % 13
    return (idx * world + world * (world + 1) // 2).to(torch.float32)


def pattern(torch: Any, count: int, rank: int, device: Any) -> Any:
    idx = torch.arange(count, device=device, dtype=torch.int64) % 13
    return (idx + rank + 1).to(torch.float32)


class GlooComm:
    """A gloo process group built directly, so that it binds to ``bind_addr``."""

    def __init__(
        self,
        torch: Any,
        dist: Any,
        store: Any,
        rank: int,
        world: int,
        bind_addr: str | None,
        connect_timeout: datetime.timedelta,
        timeout: datetime.timedelta,
    ) -> None:
        self.torch, self.dist = torch, dist
        self.timeout = timeout
        gloo = dist.ProcessGroupGloo
        opts = gloo._Options()
        opts._timeout = connect_timeout
        opts._devices = (
            [gloo.create_device(hostname=bind_addr)] if bind_addr else [gloo.create_default_device()]
        )
        self.pg = gloo(store, rank, world, opts)  # connects to every peer within connect_timeout
        self.device = torch.device("cpu")

    def allreduce(self, t: Any, op: Any = None) -> None:
        op = op if op is not None else self.dist.ReduceOp.SUM
        self.pg.allreduce([t], op, self.timeout).wait()

    def barrier(self) -> None:
        self.pg.barrier().wait()

    def sync(self) -> None:
        pass

    def close(self) -> None:
        self.pg = None


class NcclComm:
    """The default process group over NCCL, one GPU per rank."""

    def __init__(
        self, torch: Any, dist: Any, store: Any, rank: int, world: int, gpu: int, timeout: datetime.timedelta
    ) -> None:
        self.torch, self.dist = torch, dist
        self.device = torch.device("cuda", gpu)
        torch.cuda.set_device(self.device)
        dist.init_process_group("nccl", store=store, rank=rank, world_size=world, timeout=timeout)
        self.gpu = gpu

    def allreduce(self, t: Any, op: Any = None) -> None:
        self.dist.all_reduce(t, op=op if op is not None else self.dist.ReduceOp.SUM)

    def barrier(self) -> None:
        self.dist.barrier(device_ids=[self.gpu])

    def sync(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def close(self) -> None:
        try:
            self.dist.destroy_process_group()
        except Exception:
            pass


def run_rank(cfg: dict[str, Any], rank: int, listen_fd: int | None = None) -> dict[str, Any]:
    """One rank's measurements: ``{rank, init_s, results, error}`` (never raises)."""
    out: dict[str, Any] = {"rank": rank, "init_s": None, "results": [], "error": None}
    comm: GlooComm | NcclComm | None = None
    stage: str | None = None
    try:
        import torch
        import torch.distributed as dist

        if cfg["backend"] == "gloo":
            torch.set_num_threads(max(1, cfg.get("threads") or 1))
        t0 = time.perf_counter()
        try:
            store = make_store(dist, cfg, rank, listen_fd)
        except Exception as exc:
            raise RuntimeError(
                f"rendezvous with {cfg['master_addr']}:{cfg['master_port']} failed: {one_line(exc)}"
            ) from None
        timeout = datetime.timedelta(seconds=cfg["op_timeout"])
        rdzv_timeout = datetime.timedelta(seconds=cfg["rdzv_timeout"])
        try:
            if cfg["backend"] == "nccl":
                comm = NcclComm(torch, dist, store, rank, cfg["world"], cfg["gpu"], timeout)
            else:
                comm = GlooComm(
                    torch, dist, store, rank, cfg["world"], cfg["bind_addr"], rdzv_timeout, timeout
                )
        except Exception as exc:
            raise RuntimeError(f"process group set-up failed: {one_line(exc)}") from None
        out["init_s"] = round(time.perf_counter() - t0, 6)
        world = cfg["world"]
        for size in cfg["sizes"]:
            stage = f"all-reduce of {size} bytes"
            count = max(1, size // 4)
            x = torch.zeros(count, dtype=torch.float32, device=comm.device)
            for _ in range(cfg["warmup"]):
                comm.allreduce(x)
            comm.barrier()
            comm.sync()
            t = time.perf_counter()
            for _ in range(cfg["iters"]):
                comm.allreduce(x)
            comm.sync()
            elapsed = (time.perf_counter() - t) / max(1, cfg["iters"])
            slowest = torch.tensor([elapsed], dtype=torch.float64, device=comm.device)
            comm.allreduce(slowest, dist.ReduceOp.MAX)
            elapsed = float(slowest.item())
            y = pattern(torch, count, rank, comm.device)
            comm.allreduce(y)
            wrong = torch.tensor([int((y != expected_sum(torch, count, world, comm.device)).sum().item())])
            wrong = wrong.to(comm.device)
            comm.allreduce(wrong)
            wrong_n = int(wrong.item())
            algbw = size / elapsed / 1e9 if elapsed > 0 else 0.0
            out["results"].append(
                {
                    "size_bytes": int(size),
                    "count": int(count),
                    "time_s": round(elapsed, 9),
                    "algbw_gbps": round(algbw, 6),
                    "busbw_gbps": round(algbw * busbw_factor(world), 6),
                    "correct": wrong_n == 0,
                    "wrong_elements": wrong_n,
                }
            )
    except Exception as exc:
        if stage is not None:
            out["error"] = f"{stage} failed: {one_line(exc)}"
        elif isinstance(exc, RuntimeError) and "failed:" in str(exc):
            out["error"] = str(exc)
        else:
            out["error"] = one_line(exc)
    finally:
        if comm is not None:
            comm.close()
    return out


# --------------------------------------------------------------------------- modes
def fill_from_ranks(doc: Document, per_rank: Sequence[dict[str, Any] | None], world: int) -> None:
    """Merge rank answers into ``results``/``correct``/``error`` (rank 0's table; errors first)."""
    first = next((r for r in per_rank if r is not None and r.get("results")), None)
    results = first["results"] if first else []
    error = None
    for rank, r in enumerate(per_rank):
        if r is None:
            error = error or f"rank {rank} gave no answer"
        elif r.get("error"):
            error = error or (f"rank {rank}: {r['error']}" if world > 1 else r["error"])
    inits = [r["init_s"] for r in per_rank if r and r.get("init_s") is not None]
    doc.set("init_s", max(inits) if inits else None)
    doc.set("results", results)
    doc.set("correct", all(x["correct"] for x in results) if results else None)
    doc.set("error", error)


def run_intra(cfg: dict[str, Any], doc: Document, deadline: float) -> None:
    """Fork ``world`` local ranks (rank r on GPU r) and collect their answers before ``deadline``."""
    sock = serve_rendezvous(cfg, doc)
    ranks = [(rank, dict(cfg, gpu=rank)) for rank in range(cfg["world"])]
    fill_from_ranks(doc, run_rank_processes(run_rank, ranks, sock, deadline), cfg["world"])


def run_single_rank(cfg: dict[str, Any], doc: Document) -> None:
    sock = None
    listen_fd = None
    if cfg["rank"] == 0:
        try:
            sock = listening_socket(cfg["master_addr"], cfg["master_port"])
            listen_fd = sock.detach()  # the TCPStore owns (and closes) it from here
        except OSError as exc:
            fill_from_ranks(
                doc,
                [
                    {
                        "rank": 0,
                        "results": [],
                        "error": listen_failure(cfg["master_addr"], cfg["master_port"], exc),
                    }
                ],
                1,
            )
            return
    res = run_rank(cfg, cfg["rank"], listen_fd)
    fill_from_ranks(doc, [res], 1)


def find_nccl_tests(explicit: str | None) -> str | None:
    if explicit:
        return explicit if os.path.isfile(explicit) and os.access(explicit, os.X_OK) else None
    found = shutil.which("all_reduce_perf")
    if found:
        return found
    for d in NCCL_TESTS_DIRS:
        path = os.path.join(d, "all_reduce_perf")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def run_nccl_tests(args: argparse.Namespace, sizes: list[int], doc: Document, deadline: float) -> None:
    binary = find_nccl_tests(args.nccl_tests_bin)
    doc.set("mode", "nccl-tests")
    if binary is None:
        where = args.nccl_tests_bin or "PATH, " + ", ".join(NCCL_TESTS_DIRS)
        doc.unavailable(f"all_reduce_perf not found ({where})", "nccl_tests_missing")
        return
    ngpus = args.nproc or gpu_count() or 1
    argv = [binary, "-b", str(min(sizes)), "-e", str(max(sizes)), "-f", "2", "-g", str(ngpus)]
    argv += ["-n", str(args.iters), "-w", str(args.warmup), "-c", "1"]
    doc.set("available", True)
    doc.set("binary", binary)
    doc.set("argv", argv)
    doc.set("returncode", None)
    doc.set("stdout", "")
    doc.set("stderr_tail", "")
    doc.set("error", None)
    try:
        proc = subprocess.run(
            argv, capture_output=True, timeout=max(1.0, deadline - time.monotonic()), check=False
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or b""
        doc.set("stdout", out[-STDOUT_CAP:].decode("utf-8", "replace"))
        doc.set("error", "all_reduce_perf timed out")
        return
    except OSError as exc:
        doc.set("error", f"cannot run {binary}: {exc.strerror or exc}")
        return
    doc.set("returncode", proc.returncode)
    doc.set("stdout", proc.stdout[-STDOUT_CAP:].decode("utf-8", "replace"))
    doc.set("stderr_tail", proc.stderr[-4000:].decode("utf-8", "replace"))
    if proc.returncode != 0:
        doc.set("error", f"all_reduce_perf exited with status {proc.returncode}")


# --------------------------------------------------------------------------- main
def parse_sizes(text: str) -> list[int]:
    out = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        mult = 1
        suffix = part[-1].upper()
        if suffix in "KMG":
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[suffix]
            part = part[:-1]
        value = int(part) * mult
        if value < 4:
            raise argparse.ArgumentTypeError("message sizes must be at least 4 bytes")
        out.append(value)
    if not out:
        raise argparse.ArgumentTypeError("no message size given")
    return out


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nproc", type=int, default=None, help="local ranks (default: GPUs, or 2 on CPU)")
    p.add_argument("--rank", type=int, default=None, help="this process's rank in a cross-host group")
    p.add_argument("--world-size", type=int, default=None, help="ranks in the cross-host group")
    p.add_argument("--master-addr", default="127.0.0.1", help="rank 0's address (default 127.0.0.1)")
    p.add_argument("--master-port", type=int, default=None, help="rendezvous port (intra default: free)")
    p.add_argument(
        "--bind-addr", default=None, help="this host's address for gloo (default: master-addr intra)"
    )
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    p.add_argument("--sizes", type=parse_sizes, default=None, help="message sizes in bytes, comma-separated")
    p.add_argument("--iters", type=int, default=5, help="timed all-reduces per size (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed all-reduces per size (default 1)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads per gloo rank (default 1)")
    p.add_argument("--nccl-tests", action="store_true", help="run nccl-tests' all_reduce_perf instead")
    p.add_argument("--nccl-tests-bin", default=None, help="path of all_reduce_perf")


def check_args(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    if (args.rank is None) != (args.world_size is None):
        p.error("--rank and --world-size go together")
    if args.rank is not None:
        if args.world_size < 1 or not 0 <= args.rank < args.world_size:
            p.error("need 0 <= --rank < --world-size")
        if args.master_port is None:
            p.error("--master-port is required with --rank")
    if args.nproc is not None and args.nproc < 1:
        p.error("--nproc must be >= 1")
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be >= 1 and --warmup >= 0")


def collect(args: argparse.Namespace, doc: Document) -> None:
    """Run the mode the arguments ask for (see the module docstring)."""
    deadline = time.monotonic() + max(1.0, args.timeout - min(10.0, 0.1 * args.timeout))
    if args.nccl_tests:
        run_nccl_tests(args, args.sizes or list(GPU_SIZES), doc, deadline)
        return
    mode = "rank" if args.rank is not None else "intra"
    ngpu = gpu_count()
    dist = import_distributed(doc, mode=mode)
    if dist is None:
        return
    backend = pick_backend(args.backend, dist, ngpu)
    world = args.world_size if mode == "rank" else (args.nproc or (ngpu if backend == "nccl" else 2))
    budget = max(1.0, deadline - time.monotonic())
    cfg = {
        "backend": backend,
        "world": world,
        "rank": args.rank,
        "master_addr": args.master_addr,
        "master_port": args.master_port,
        "bind_addr": args.bind_addr or (args.master_addr if mode == "intra" else None),
        "sizes": args.sizes or list(GPU_SIZES if backend == "nccl" else CPU_SIZES),
        "iters": args.iters,
        "warmup": args.warmup,
        "threads": args.threads,
        "gpu": 0,
        "rdzv_timeout": max(2.0, min(120.0, 0.3 * budget)),  # c10d may retry once more
        "op_timeout": max(2.0, 0.4 * budget),
    }
    for key, value in (
        ("available", True),
        ("mode", mode),
        ("backend", backend),
        ("device", "cuda" if backend == "nccl" else "cpu"),
        ("world_size", world),
        ("nproc", world if mode == "intra" else 1),
        ("rank", args.rank),
        ("master_addr", args.master_addr),
        ("master_port", args.master_port),
        ("bind_addr", cfg["bind_addr"]),
        ("dtype", "float32"),
        ("iters", args.iters),
        ("warmup", args.warmup),
        ("init_s", None),
        ("results", []),
        ("correct", None),
        ("error", None),
    ):
        doc.set(key, value)
    if backend == "nccl" and mode == "intra" and world > ngpu:
        doc.set("error", f"--nproc {world} exceeds the {ngpu} GPUs torch sees")
    elif mode == "intra":
        run_intra(cfg, doc, deadline)
    else:
        run_single_rank(cfg, doc)


def main(argv: Sequence[str] | None = None) -> int:
    return probe_main(
        PROBE, add_args, collect, argv, timeout_s=120.0, check_args=check_args, on_timeout=kill_children
    )


if __name__ == "__main__":
    sys.exit(main())
