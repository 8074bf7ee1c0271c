#!/usr/bin/env python3
"""robustctl node-side probe ``burn``: a timed, verified matmul load on every device.

Standalone with the shared prelude ``_prelude.py``
(Python >= 3.8; torch, else numpy); never imports robustctl. Prints exactly one JSON
document (see ``diagnostics/README.md``).

Each device (every CUDA GPU torch sees, all at once, one thread each; else one CPU device)
multiplies two seeded N x N matrices (uniform in [-1, 1), rounded to ``--dtype``) for
``--seconds`` and checks **every** product against a float64 reference computed once on the CPU
from the same rounded inputs. An element is wrong when ``|C - ref| > tolerance`` (or C is NaN/inf),
with ``tolerance = TOLERANCE[dtype] * max|ref|``: a few times the dtype's output rounding error
(float64 1e-9, float32 1e-4, float16 5e-3, bfloat16 1e-2; reduced-precision reductions are disabled
so CUDA accumulates in float32). Throughput is ``2 N^3 iterations / seconds / 1e12`` TFLOP/s, timed
on the wall clock (CPU) or with CUDA events around the matmuls only (GPU); the verification runs
between matmuls and is not counted. A CPU quota or a throttled GPU shows up as lower TFLOP/s.

``data``::

    {available: true, backend: "torch"|"numpy", library_version: str, dtype: str, size: int,
     seconds: float, threads: int|null, cuda_available: bool, cuda_reason: str|null,
     reference_s: float,
     devices: [ {index: int, name: str, kind: "cuda"|"cpu", dtype: str, size: int,
                 iterations: int,          # timed matmuls
                 checked: int,             # products verified (timed + warm-up)
                 mismatches: int,          # products with at least one wrong element
                 mismatched_elements: int, non_finite: int,
                 max_abs_error: float|null, max_rel_error: float|null,   # null: NaN/inf seen
                 tolerance: float, matmul_s: float, wall_s: float,
                 tflops: float|null, wall_tflops: float|null, error: str|null} ]}

``{available: false, reason: str, reason_code: "no_backend"}`` when neither torch nor numpy
imports. ``cuda_reason`` says why a host ran on the CPU (torch without CUDA, no device).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import threading
import time
from typing import Any, Sequence

from _prelude import Document, probe_main

PROBE = "burn"
SEED = 20240917
TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "float16": 5e-3, "bfloat16": 1e-2}
"""Allowed |error| as a fraction of max|reference|, per dtype (see module docstring)."""


# --------------------------------------------------------------------------- helpers
def finite_or_none(x: float) -> float | None:
    x = float(x)
    return x if x == x and x not in (float("inf"), float("-inf")) else None


def tflops(n: int, iterations: int, seconds: float) -> float | None:
    if iterations <= 0 or seconds <= 0:
        return None
    return round(2.0 * n**3 * iterations / seconds / 1e12, 6)


def new_result(index: int, name: str, kind: str, dtype: str, n: int, tolerance: float) -> dict[str, Any]:
    return {
        "index": index,
        "name": name,
        "kind": kind,
        "dtype": dtype,
        "size": n,
        "iterations": 0,
        "checked": 0,
        "mismatches": 0,
        "mismatched_elements": 0,
        "non_finite": 0,
        "max_abs_error": 0.0,
        "max_rel_error": 0.0,
        "tolerance": tolerance,
        "matmul_s": 0.0,
        "wall_s": 0.0,
        "tflops": None,
        "wall_tflops": None,
        "error": "did not finish",
    }


# --------------------------------------------------------------------------- verification
def verify_torch(torch: Any, result: Any, reference: Any, tolerance: float) -> tuple[Any, Any, Any]:
    """Compare one product with the reference, on the product's device, without syncing.

    Args:
        torch: the torch module. result: the N x N product (any float dtype).
        reference: the float32/float64 reference on the same device. tolerance: allowed |error|.

    Returns:
        Device tensors ``(bad_elements int64, max_abs_error float, non_finite int64)``; NaN/inf in
        ``result`` count as bad elements and make ``max_abs_error`` inf.
    """
    diff = (result.to(reference.dtype) - reference).abs_()
    finite = torch.isfinite(diff)
    bad = (~(diff <= tolerance)).sum()
    max_err = torch.where(finite, diff, torch.full_like(diff, float("inf"))).max()
    non_finite = (~torch.isfinite(result)).sum()
    return bad, max_err, non_finite


def verify_numpy(np: Any, result: Any, reference: Any, tolerance: float) -> tuple[int, float, int]:
    """NumPy twin of :func:`verify_torch`; returns Python ``(bad_elements, max_abs_error, non_finite)``."""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(result.astype(np.float64) - reference)
        bad = int(np.count_nonzero(~(diff <= tolerance)))
        finite = np.isfinite(diff)
        max_err = float(diff[finite].max()) if finite.all() else float("inf")
    non_finite = int(np.count_nonzero(~np.isfinite(result)))
    return bad, max_err, non_finite


# --------------------------------------------------------------------------- torch backend
def torch_inputs(torch: Any, n: int, dtype: Any) -> tuple[Any, Any, Any]:
    """Seeded inputs rounded to ``dtype`` (CPU) and the float64 reference of their product."""
    gen = torch.Generator().manual_seed(SEED)
    a64 = torch.rand((n, n), generator=gen, dtype=torch.float64) * 2 - 1
    b64 = torch.rand((n, n), generator=gen, dtype=torch.float64) * 2 - 1
    a, b = a64.to(dtype), b64.to(dtype)
    ref = torch.matmul(a.to(torch.float64), b.to(torch.float64))
    return a, b, ref


def burn_torch_device(
    torch: Any,
    device: Any,
    kind: str,
    a_cpu: Any,
    b_cpu: Any,
    ref_cpu: Any,
    res: dict[str, Any],
    seconds: float,
    deadline: float,
) -> None:
    """Run the verified load on one torch device, filling ``res`` (see module docstring)."""
    n = a_cpu.shape[0]
    tol = res["tolerance"]
    ref_dtype = torch.float64 if a_cpu.dtype == torch.float64 else torch.float32
    a, b = a_cpu.to(device), b_cpu.to(device)
    ref = ref_cpu.to(device=device, dtype=ref_dtype)
    c = torch.empty_like(a)
    zero = torch.zeros((), dtype=torch.int64, device=device)
    bad_products, bad_elems, non_finite = zero.clone(), zero.clone(), zero.clone()
    max_err = torch.zeros((), dtype=ref_dtype, device=device)
    is_cuda = kind == "cuda"

    def check() -> None:
        bad, err, nf = verify_torch(torch, c, ref, tol)
        bad_products.add_((bad > 0).to(torch.int64))
        bad_elems.add_(bad)
        non_finite.add_(nf)
        torch.maximum(max_err, err.to(ref_dtype), out=max_err)

    torch.matmul(a, b, out=c)  # warm-up (cuBLAS/BLAS set-up), verified but not timed
    check()
    checked = 1
    if is_cuda:
        torch.cuda.synchronize(device)
    events = []
    matmul_s = 0.0
    t0 = time.perf_counter()
    stop = min(t0 + seconds, deadline)
    iterations = 0
    while True:
        if is_cuda:
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            torch.matmul(a, b, out=c)
            e1.record()
            events.append((e0, e1))
        else:
            s = time.perf_counter()
            torch.matmul(a, b, out=c)
            matmul_s += time.perf_counter() - s
        check()
        iterations += 1
        checked += 1
        if time.perf_counter() >= stop:
            break
    if is_cuda:
        torch.cuda.synchronize(device)
        matmul_s = sum(e0.elapsed_time(e1) for e0, e1 in events) / 1e3
    wall_s = time.perf_counter() - t0
    max_abs = finite_or_none(max_err.item())
    scale = float(ref_cpu.abs().max())
    res.update(
        iterations=iterations,
        checked=checked,
        mismatches=int(bad_products.item()),
        mismatched_elements=int(bad_elems.item()),
        non_finite=int(non_finite.item()),
        max_abs_error=max_abs,
        max_rel_error=(max_abs / scale if max_abs is not None and scale > 0 else None),
        matmul_s=round(matmul_s, 6),
        wall_s=round(wall_s, 6),
        tflops=tflops(n, iterations, matmul_s),
        wall_tflops=tflops(n, iterations, wall_s),
        error=None,
    )


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def run_torch(torch: Any, args: argparse.Namespace, doc: Document, deadline: float) -> None:
    cuda_reason = None
    cuda = False
    try:
        cuda = bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0
        if not cuda:
            cuda_reason = (
                "torch has no CUDA support" if torch.version.cuda is None else "torch sees no CUDA device"
            )
    except Exception as exc:
        cuda_reason = f"torch.cuda failed: {exc}"
    dtype_name = args.dtype if args.dtype != "auto" else ("bfloat16" if cuda else "float32")
    n = args.size or (4096 if cuda else 1024)
    if args.threads:
        torch.set_num_threads(args.threads)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    dtype = getattr(torch, dtype_name)
    doc.set("available", True)
    doc.set("backend", "torch")
    doc.set("library_version", torch.__version__)
    doc.set("dtype", dtype_name)
    doc.set("size", n)
    doc.set("seconds", args.seconds)
    doc.set("threads", torch.get_num_threads() if not cuda else None)
    doc.set("cuda_available", cuda)
    doc.set("cuda_reason", cuda_reason)
    t = time.perf_counter()
    a, b, ref = torch_inputs(torch, n, dtype)
    doc.set("reference_s", round(time.perf_counter() - t, 6))
    tol = TOLERANCE[dtype_name] * float(ref.abs().max())
    if cuda:
        devices = [
            (f"cuda:{i}", new_result(i, torch.cuda.get_device_name(i), "cuda", dtype_name, n, tol))
            for i in range(torch.cuda.device_count())
        ]
    else:
        devices = [("cpu", new_result(0, cpu_name(), "cpu", dtype_name, n, tol))]
    results = [r for _, r in devices]
    doc.set("devices", results)

    def work(device: str, res: dict[str, Any]) -> None:
        try:
            if device.startswith("cuda"):
                with torch.cuda.device(device):
                    burn_torch_device(
                        torch, torch.device(device), "cuda", a, b, ref, res, args.seconds, deadline
                    )
            else:
                burn_torch_device(torch, torch.device("cpu"), "cpu", a, b, ref, res, args.seconds, deadline)
        except Exception as exc:  # a failing device is an observation (e.g. a CUDA ECC error)
            res["error"] = (
                f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            )
        doc.set("devices", [dict(r) for r in results])

    if len(devices) == 1:
        work(*devices[0])
    else:
        threads = [threading.Thread(target=work, args=d, daemon=True) for d in devices]
        for th in threads:
            th.start()
        for th in threads:
            th.join(max(0.0, deadline - time.perf_counter() + 5.0))
    doc.set("devices", [dict(r) for r in results])


# --------------------------------------------------------------------------- numpy backend
def run_numpy(np: Any, args: argparse.Namespace, doc: Document, deadline: float) -> None:
    dtype_name = args.dtype if args.dtype not in ("auto", "bfloat16") else "float32"
    n = args.size or 1024
    doc.set("available", True)
    doc.set("backend", "numpy")
    doc.set("library_version", np.__version__)
    doc.set("dtype", dtype_name)
    doc.set("size", n)
    doc.set("seconds", args.seconds)
    doc.set("threads", args.threads)
    doc.set("cuda_available", False)
    doc.set("cuda_reason", "torch is not installed")
    t = time.perf_counter()
    rng = np.random.default_rng(SEED)
    a = (rng.random((n, n)) * 2 - 1).astype(dtype_name)
    b = (rng.random((n, n)) * 2 - 1).astype(dtype_name)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    doc.set("reference_s", round(time.perf_counter() - t, 6))
    scale = float(np.abs(ref).max())
    tol = TOLERANCE[dtype_name] * scale
    res = new_result(0, cpu_name(), "cpu", dtype_name, n, tol)
    doc.set("devices", [res])
    c = np.empty_like(a)
    matmul_s, checked, bad_products, bad_elems, nf_total, max_err = 0.0, 0, 0, 0, 0, 0.0
    t0 = time.perf_counter()
    stop = min(t0 + args.seconds, deadline)
    iterations = -1  # the first product is a verified warm-up
    while True:
        s = time.perf_counter()
        np.matmul(a, b, out=c)
        if iterations >= 0:
            matmul_s += time.perf_counter() - s
        else:
            t0 = time.perf_counter()
        bad, err, nf = verify_numpy(np, c, ref, tol)
        checked += 1
        bad_products += bad > 0
        bad_elems += bad
        nf_total += nf
        max_err = max(max_err, err)
        iterations += 1
        if iterations > 0 and time.perf_counter() >= stop:
            break
    wall_s = time.perf_counter() - t0
    max_abs = finite_or_none(max_err)
    res.update(
        iterations=iterations,
        checked=checked,
        mismatches=int(bad_products),
        mismatched_elements=int(bad_elems),
        non_finite=nf_total,
        max_abs_error=max_abs,
        max_rel_error=(max_abs / scale if max_abs is not None and scale > 0 else None),
        matmul_s=round(matmul_s, 6),
        wall_s=round(wall_s, 6),
        tflops=tflops(n, iterations, matmul_s),
        wall_tflops=tflops(n, iterations, wall_s),
        error=None,
    )
    doc.set("devices", [dict(res)])


# --------------------------------------------------------------------------- main
def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=float, default=10.0, help="load duration per device (default 10)")
    p.add_argument("--size", type=int, default=None, help="matrix size N (default 4096 GPU, 1024 CPU)")
    p.add_argument(
        "--dtype",
        choices=("auto", "float64", "float32", "float16", "bfloat16"),
        default="auto",
        help="matmul dtype (default: bfloat16 on GPU, float32 on CPU)",
    )
    p.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--backend", choices=("auto", "torch", "numpy"), default="auto")


def check_args(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    if (
        args.seconds <= 0
        or (args.size is not None and args.size < 16)
        or (args.threads is not None and args.threads < 1)
    ):
        p.error("--seconds must be > 0, --size >= 16, --threads >= 1")
    if args.timeout is None:
        args.timeout = args.seconds + 60.0
    if args.threads:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)


def collect(args: argparse.Namespace, doc: Document) -> None:
    """Run the load on the first backend that imports (see the module docstring)."""
    timeout = args.timeout
    # Leave time after the load for the reference, synchronisation and the answer.
    deadline = time.perf_counter() + max(0.5, timeout - min(30.0, 0.25 * timeout))
    torch: Any = None
    np: Any = None
    if args.backend in ("auto", "torch"):
        try:
            import torch
        except ImportError:
            torch = None
    if torch is None and args.backend in ("auto", "numpy"):
        try:
            import numpy as np
        except ImportError:
            np = None
    if torch is not None:
        run_torch(torch, args, doc, deadline)
    elif np is not None:
        run_numpy(np, args, doc, deadline)
    else:
        what = "torch or numpy" if args.backend == "auto" else args.backend
        doc.unavailable(f"no {what} to run a matmul load", "no_backend")


def main(argv: Sequence[str] | None = None) -> int:
    return probe_main(
        PROBE,
        add_args,
        collect,
        argv,
        timeout_s=None,
        timeout_help="default: seconds + 60",
        check_args=check_args,
    )


if __name__ == "__main__":
    sys.exit(main())
