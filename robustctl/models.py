"""Frozen result types shared by every command.

A :class:`RunReport` is the JSON contract of ``robustctl diagnose --json``: it carries
``schema_version`` and is built only from the frozen dataclasses below. "Not checked" states
(:attr:`Status.UNKNOWN`, :attr:`Status.NOT_APPLICABLE`, :attr:`Status.SKIPPED`) are distinct from
:attr:`Status.OK` and are never counted as healthy.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from robustctl.exit_codes import ExitCode

SCHEMA_VERSION = 1
"""Version of the JSON documents robustctl prints; bumped on any incompatible change."""


class Status(str, enum.Enum):
    """Health state of one check, one host or one run.

    ``OK``: checked and healthy. ``WARNING``: degraded, below the action threshold.
    ``CRITICAL``: a fault; the host is a suspect. ``UNKNOWN``: could not be checked (host
    unreachable, timed out, probe crashed). ``NOT_APPLICABLE``: the hardware is absent (no GPU,
    no InfiniBand). ``SKIPPED``: not run because an earlier level already named suspects.
    """

    OK = "ok"
    WARNING = "warning"
    CRITICAL = "critical"
    UNKNOWN = "unknown"
    NOT_APPLICABLE = "not_applicable"
    SKIPPED = "skipped"

    @property
    def severity(self) -> int:
        """Rank used to combine states: CRITICAL > UNKNOWN > WARNING > OK > NOT_APPLICABLE > SKIPPED."""
        return _SEVERITY[self]

    @property
    def exit_code(self) -> ExitCode:
        """The process exit code this state maps to (NOT_APPLICABLE and SKIPPED map to OK)."""
        return _EXIT[self]

    @staticmethod
    def worst(states: Iterable[Status]) -> Status:
        """Return the most severe of ``states``; ``SKIPPED`` when there are none."""
        worst = Status.SKIPPED
        for s in states:
            if s.severity > worst.severity:
                worst = s
        return worst


_SEVERITY = {
    Status.SKIPPED: 0,
    Status.NOT_APPLICABLE: 1,
    Status.OK: 2,
    Status.WARNING: 3,
    Status.UNKNOWN: 4,
    Status.CRITICAL: 5,
}
_EXIT = {
    Status.SKIPPED: ExitCode.OK,
    Status.NOT_APPLICABLE: ExitCode.OK,
    Status.OK: ExitCode.OK,
    Status.WARNING: ExitCode.WARNING,
    Status.UNKNOWN: ExitCode.UNKNOWN,
    Status.CRITICAL: ExitCode.CRITICAL,
}


class Outcome(str, enum.Enum):
    """What happened when robustctl tried to run something on a host."""

    OK = "ok"
    """The command ran and exited 0."""
    FAILED = "failed"
    """The command ran but exited non-zero or printed garbage."""
    UNREACHABLE = "unreachable"
    """No connection: refused, no route, authentication or host-key failure."""
    TIMED_OUT = "timed_out"
    """The per-host or global deadline passed first."""


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one check on one host (or one peer pair, for inter-host checks).

    Attributes:
        name: dotted check name, e.g. ``"host.xid"``, ``"nvml.row_remap"``, ``"burn.tflops"``.
        level: diagnostic level, 0 (quick checks) to 3 (inter-host all-reduce).
        status: the verdict.
        summary: one human line, e.g. ``"XID 79 on 0000:3b:00.0 (GPU fell off the bus)"``.
        evidence: the observed values that led to the verdict (JSON-serialisable).
        device: the GPU index, NIC or mount the verdict is about, when there is one.
    """

    name: str
    level: int
    status: Status
    summary: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    device: str | None = None


@dataclass(frozen=True)
class HostReport:
    """Everything a run learned about one host.

    Attributes:
        host: inventory name.
        address: where it was reached (``"local"`` for the local transport).
        status: worst of ``checks`` and of the transport outcome.
        outcome: outcome of the last remote command, ``Outcome.OK`` when all ran.
        checks: every check verdict for this host, in level order.
        error: one line explaining an UNKNOWN outcome (never a traceback), else ``None``.
        elapsed_s: wall-clock seconds spent on this host, summed over levels.
    """

    host: str
    address: str
    status: Status
    outcome: Outcome
    checks: tuple[CheckResult, ...] = ()
    error: str | None = None
    elapsed_s: float = 0.0

    @property
    def is_suspect(self) -> bool:
        """True when this host is CRITICAL."""
        return self.status is Status.CRITICAL


@dataclass(frozen=True)
class LevelSummary:
    """What one diagnostic level did.

    Attributes:
        level: 0-3. name: ``"quick"``, ``"burn"``, ``"intra-allreduce"``, ``"inter-allreduce"``.
        ran: whether it ran. suspects: hosts it named CRITICAL. elapsed_s: wall seconds.
        reason: why it did not run (e.g. ``"needs at least two hosts, 1 left to check"``), else None.
    """

    level: int
    name: str
    ran: bool
    suspects: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    reason: str | None = None


@dataclass(frozen=True)
class RunReport:
    """The result of one run of the diagnose levels (the body of ``robustctl diagnose --json``).

    Attributes:
        status: worst host status. exit_code: derived from ``status``.
        hosts: one report per targeted host, in inventory order; no host is ever dropped.
        levels: one summary per level considered. suspects: hosts named CRITICAL.
        unknown: hosts that could not be checked. started_at/finished_at: UNIX seconds.

    What ``robustctl diagnose`` recorded in the state store is not part of the engine's report: see
    :class:`robustctl.commands.diagnose.DiagnoseResult`.
    """

    status: Status
    hosts: tuple[HostReport, ...]
    levels: tuple[LevelSummary, ...]
    suspects: tuple[str, ...]
    unknown: tuple[str, ...]
    started_at: float
    finished_at: float
    schema_version: int = SCHEMA_VERSION
    kind: str = "diagnose"

    @property
    def exit_code(self) -> ExitCode:
        """Exit code of the run: CRITICAL (2) > UNKNOWN (3) > WARNING (1) > OK (0)."""
        return self.status.exit_code


def to_jsonable(obj: Any) -> Any:
    """Convert frozen result dataclasses, enums and tuples into plain JSON-ready values.

    Dataclass properties listed in ``__json_extra__`` are not used; only fields are emitted, plus
    ``exit_code`` for objects that define it as a property (a field of that name, which may be None,
    is emitted as it is).
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        if hasattr(type(obj), "exit_code") and "exit_code" not in out:
            out["exit_code"] = int(getattr(obj, "exit_code"))  # noqa: B009
        return out
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj


def result_json(result: Any) -> dict[str, Any]:
    """The JSON document of a command result: its fields (enums and tuples made plain) plus ``exit_code``.

    A result whose document is not simply its fields defines ``to_json() -> dict``, which is used
    as it is (it carries ``exit_code`` itself where its document has one): ``diagnose`` keeps the
    :class:`RunReport` fields at the top level; the action commands give the plan or apply document
    (:class:`robustctl.actions.session.ActionResult`).

    Args:
        result: a ``run_<command>`` result (``kind``, ``schema_version``, ``exit_code``).

    Returns:
        The document, a dict with ``kind`` and ``schema_version``.

    Raises:
        TypeError: the document has no ``kind`` and ``schema_version``.
    """
    to_json = getattr(result, "to_json", None)
    doc = to_json() if callable(to_json) else to_jsonable(result)
    if not isinstance(doc, dict) or "kind" not in doc or "schema_version" not in doc:
        raise TypeError(f"{type(result).__name__} is not a command result (needs kind and schema_version)")
    return doc


NON_FINITE_JSON = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
"""How a float that JSON cannot hold is written, by ``repr(value)``: the strings ``"NaN"``,
``"Infinity"`` and ``"-Infinity"``, the spelling of JavaScript's ``String(x)`` that Python's
``float()`` and Go's ``strconv.ParseFloat`` read back (lossless). RFC 8259 has no token for them:
Python's own ``NaN`` output is rejected by ``jq`` and every strict parser."""


def strict_jsonable(obj: Any) -> Any:
    """:func:`to_jsonable`, with every non-finite float (NaN, ±Infinity: from a file, a computation
    or a host) written as the string of :data:`NON_FINITE_JSON`: what every JSON document robustctl
    writes goes through, so ``json.dumps(..., allow_nan=False)`` never fails on such a number.

    Finite floats (``1e308``, ``5e-324``) and integers of any size are kept as they are.
    """
    return _finite(to_jsonable(obj))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else NON_FINITE_JSON[repr(float(value))]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
