"""Silent data corruption for a simulated test host: wrong bits out of torch's matmul, no error.

Put this directory first on a host's ``PYTHONPATH`` (e.g. the inventory's ``python: {wrapper: [env,
PYTHONPATH=tests/jobs/sdcfault, ROBUSTCTL_SDC_FAULT=bitflip]}``): Python imports ``sitecustomize``
at start-up, and when that process later imports torch, ``torch.matmul``, ``Tensor.matmul`` and
``Tensor.__matmul__`` are wrapped so that some of their outputs come back wrong, the way a
defective core computes them. robustctl has no test branch: only this host's Python is changed.

Spec, from ``ROBUSTCTL_SDC_FAULT`` or the file named by ``ROBUSTCTL_SDC_FAULT_FILE`` (read once,
when torch is imported; ``#`` starts a comment): ``KIND[:key=value]...`` with KIND

- ``bitflip``: flip mantissa bit ``bit`` (0-22, default 22) of one float32 element of the output;
- ``nan``: write NaN into that element.

Keys: ``every=N`` corrupt every N-th matmul call of the process (default 1: every call);
``after=N`` start after N calls (default 0); ``element=I`` the flat index (mod the size; default 0);
``prob=P`` corrupt an eligible call with probability P (seeded by ``seed=S``, default 0: the same
calls every run); ``runs=PATTERN`` intermittent across processes: a string of 1/0, process number
``j`` (counted in the file ``state=PATH``, one line per process that imported torch) is faulty
when ``PATTERN[j % len(PATTERN)]`` is 1 (``runs=10``: the first run faulty, the second not, ...).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import random
import sys
from typing import Any


def parse(text: str) -> dict[str, str] | None:
    """The spec's first non-comment line as ``{"kind": ..., key: value}``; None when there is none."""
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        kind, *items = line.split(":")
        spec = {"kind": kind.strip()}
        for item in items:
            key, _, value = item.partition("=")
            spec[key.strip()] = value.strip()
        if spec["kind"] not in ("bitflip", "nan"):
            raise ValueError(f"unknown SDC fault kind {spec['kind']!r}")
        return spec
    return None


def active_this_run(spec: dict[str, str]) -> bool:
    """Whether this process is faulty under ``runs=``/``state=`` (always, without them)."""
    pattern = spec.get("runs")
    if not pattern:
        return True
    state = spec.get("state") or os.path.join(os.environ.get("TMPDIR", "/tmp"), "robustctl-sdc-runs")
    with open(state, "a+") as f:  # one line per run; the count before ours is our run number
        f.seek(0)
        run = len(f.read().splitlines())
        f.write(f"{os.getpid()}\n")
    return pattern[run % len(pattern)] == "1"


def install(torch: Any, spec: dict[str, str]) -> None:
    """Wrap torch's matmul entry points with the corruption ``spec`` asks for."""
    every = max(1, int(spec.get("every", "1")))
    after = int(spec.get("after", "0"))
    element = int(spec.get("element", "0"))
    bit = int(spec.get("bit", "22"))
    prob = float(spec.get("prob", "1"))
    rng = random.Random(int(spec.get("seed", "0")))
    calls = [0]

    def corrupt(out: Any) -> Any:
        calls[0] += 1
        n = calls[0]
        if n <= after or (n - after - 1) % every or out.dtype != torch.float32 or out.numel() == 0:
            return out
        if prob < 1 and rng.random() >= prob:
            return out
        with torch.no_grad():
            flat = out.detach().reshape(-1).clone()
            i = element % flat.numel()
            if spec["kind"] == "nan":
                flat[i] = float("nan")
            else:
                bits = flat[i : i + 1].view(torch.int32)
                bits ^= 1 << bit
            bad = flat.reshape(out.shape)
            mask = torch.zeros(out.numel(), dtype=torch.bool)
            mask[i] = True
        return torch.where(mask.reshape(out.shape).to(out.device), bad, out)

    real_matmul = torch.matmul
    real_method = torch.Tensor.matmul

    def matmul(*args: Any, **kwargs: Any) -> Any:
        return corrupt(real_matmul(*args, **kwargs))

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return corrupt(real_method(self, *args, **kwargs))

    torch.matmul = matmul
    torch.Tensor.matmul = method
    torch.Tensor.__matmul__ = method


class _TorchHook(importlib.abc.MetaPathFinder):
    """Installs the fault right after ``import torch`` finishes."""

    def __init__(self, spec: dict[str, str]) -> None:
        self.spec = spec

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        found = importlib.machinery.PathFinder.find_spec(name, path)
        if found is None or found.loader is None:
            return found
        loader = found.loader
        real_exec = loader.exec_module  # type: ignore[union-attr]
        spec = self.spec

        def exec_module(module: Any) -> None:
            real_exec(module)
            if active_this_run(spec):
                install(module, spec)

        loader.exec_module = exec_module  # type: ignore[method-assign,union-attr]
        return found


def _start() -> None:
    text = os.environ.get("ROBUSTCTL_SDC_FAULT", "")
    path = os.environ.get("ROBUSTCTL_SDC_FAULT_FILE")
    if path and os.path.exists(path):
        with open(path) as f:
            text = f.read()
    spec = parse(text)
    if spec is not None:
        sys.meta_path.insert(0, _TorchHook(spec))


_start()
