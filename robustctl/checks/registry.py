"""Registry of checks.

A check is declared once with a :class:`CheckSpec` (name, level, the probe whose JSON it reads,
whether it needs a GPU, whether it is destructive, its timeout) and a pure ``evaluate`` function
``(data, thresholds, context) -> list[CheckResult]``: ``data`` is the probe's observation,
``context`` (:class:`CheckContext`) what the control side knows about the host and the probe run.
Collection (running the probe on a host) is done by the diagnose engine; evaluation never touches
a host, so it is unit-tested on plain dicts. Registering two checks with one name raises
:class:`ValueError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from robustctl.models import CheckResult, Status

if TYPE_CHECKING:
    from robustctl.thresholds import Thresholds


@dataclass(frozen=True)
class CheckContext:
    """What the control side knows about one probe run, handed to every evaluator.

    Attributes:
        expected_gpus: GPUs the inventory expects on the host (``gpus_per_host``; 0: none expected
            or unknown). Read by ``nvml.count`` and ``burn.verify``.
        host_time: the host's clock (UNIX s) when the probe printed, or None.
        control_time: control-side UNIX time at the midpoint of the probe's round trip, or None
            (offline evaluation). ``host.clock`` compares it with the host's clock.
        round_trip_s: control-side seconds from sending the command to its answer, or None.
        probe_errors: the probe's own ``errors`` lines (failed sub-collections, its timeout);
            evaluators quote them when a value is missing.
    """

    expected_gpus: int = 0
    host_time: float | None = None
    control_time: float | None = None
    round_trip_s: float | None = None
    probe_errors: tuple[str, ...] = ()


NO_CONTEXT = CheckContext()
"""The context of an offline evaluation: nothing known beyond the probe's data."""

Evaluator = Callable[[Mapping[str, Any], "Thresholds", CheckContext], list[CheckResult]]
"""``evaluate(data, thresholds, context) -> results``: pure, never touches a host."""


@dataclass(frozen=True)
class ResultMaker:
    """Builds the :class:`CheckResult` objects of one level's checks.

    ``make(name, status, summary, evidence=None, device=None)``; ``evidence`` is copied into a
    plain dict. Each check module holds one: ``_r = ResultMaker(LEVEL)``.
    """

    level: int

    def __call__(
        self,
        name: str,
        status: Status,
        summary: str,
        evidence: Mapping[str, Any] | None = None,
        device: str | None = None,
    ) -> CheckResult:
        """One result of this level."""
        return CheckResult(name, self.level, status, summary, dict(evidence or {}), device)


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
        evaluate: pure function from the probe's ``data`` mapping, thresholds and the
            :class:`CheckContext` to verdicts.
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
