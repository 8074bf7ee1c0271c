"""Registry of checks.

A check is declared once with a :class:`CheckSpec` (name, level, the probe whose JSON it reads,
whether it needs a GPU, whether it is destructive, its timeout) and a pure ``evaluate`` function
``(data, thresholds) -> list[CheckResult]``. Collection (running the probe on a host) is done by
the diagnose engine; evaluation never touches a host, so it is unit-tested on plain dicts.
Registering two checks with one name raises :class:`ValueError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from robustctl.models import CheckResult

if TYPE_CHECKING:
    from robustctl.checks.thresholds import Thresholds

Evaluator = Callable[[Mapping[str, Any], "Thresholds"], list[CheckResult]]


@dataclass(frozen=True)
class CheckSpec:
    """Declaration of one check.

    Attributes:
        name: dotted unique name, ``"<probe>.<what>"``, e.g. ``"host.xid"``.
        level: 0 quick host/GPU checks, 1 burn, 2 intra-host all-reduce, 3 inter-host all-reduce.
        probe: name of the node-side probe in ``diagnostics/`` whose ``data`` it reads.
        needs_gpu: the check is meaningful only where GPUs are present.
        destructive: the check disturbs the host (e.g. a burn that would slow a live job).
        timeout_s: default per-host time budget of the probe run for this check, seconds.
        description: one line for ``--help`` and the docs.
        evaluate: pure function from the probe's ``data`` mapping and thresholds to verdicts.
    """

    name: str
    level: int
    probe: str
    evaluate: Evaluator
    description: str = ""
    needs_gpu: bool = False
    destructive: bool = False
    timeout_s: float = 60.0


_REGISTRY: dict[str, CheckSpec] = {}


def register(spec: CheckSpec) -> CheckSpec:
    """Add ``spec`` to the registry. Raises ValueError if the name is already registered."""
    if spec.name in _REGISTRY:
        raise ValueError(f"check {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def check(
    name: str,
    *,
    level: int,
    probe: str,
    description: str = "",
    needs_gpu: bool = False,
    destructive: bool = False,
    timeout_s: float = 60.0,
) -> Callable[[Evaluator], Evaluator]:
    """Decorator form of :func:`register` for an evaluate function."""

    def deco(fn: Evaluator) -> Evaluator:
        doc_lines = (fn.__doc__ or "").strip().splitlines()
        register(
            CheckSpec(
                name=name,
                level=level,
                probe=probe,
                evaluate=fn,
                description=description or (doc_lines[0] if doc_lines else ""),
                needs_gpu=needs_gpu,
                destructive=destructive,
                timeout_s=timeout_s,
            )
        )
        return fn

    return deco


def all_checks() -> list[CheckSpec]:
    """Every registered check, ordered by (level, name). Imports the built-in check modules first."""
    _load_builtin()
    return sorted(_REGISTRY.values(), key=lambda s: (s.level, s.name))


def checks_for_probe(probe: str) -> list[CheckSpec]:
    """Registered checks that read ``probe``'s output, ordered by name."""
    return [s for s in all_checks() if s.probe == probe]


def _load_builtin() -> None:
    import importlib

    for mod in ("host", "nvml", "burn", "allreduce"):
        importlib.import_module(f"robustctl.checks.{mod}")
