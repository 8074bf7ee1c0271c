"""``robustctl playbook`` as library calls: list, show, validate, run (and its dry run), resume.

Exit codes: list/show 0 · validate 0, or 78 with every problem one line ``FILE:LINE`` · run/resume 0
the run reached its end, 2 it stopped on a step that exited 2 (a refused action, no progress), 3 on
another failure; a dry run 0 · 2 the job has an unfinished run, or another process runs one on it ·
64 bad parameters, destructive steps without ``--yes`` · 78 an invalid playbook, inventory or store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robustctl.commands import steps as _steps  # noqa: F401  binds the step kinds' library calls
from robustctl.errors import ConfigError, InventoryError, UsageError
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION
from robustctl.playbooks.engine import DryRunStep, RunOutcome, StepEvent, StepOutcome

__all__ = [
    "PlaybookDryRunResult",
    "PlaybookInfo",
    "PlaybookListResult",
    "PlaybookResumeRequest",
    "PlaybookRunRequest",
    "PlaybookShowResult",
    "PlaybookValidateResult",
    "RunOutcome",
    "StepOutcome",
    "parse_params",
    "run_playbook_list",
    "run_playbook_resume",
    "run_playbook_run",
    "run_playbook_show",
    "run_playbook_validate",
]


@dataclass(frozen=True)
class PlaybookInfo:
    """One playbook of ``list``: name (None: it does not validate), origin (``shipped``/``inventory``),
    source, description, steps (count), destructive (step ids), errors, overrides (a shipped one)."""

    name: str | None
    origin: str
    source: str
    description: str = ""
    steps: int = 0
    destructive: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    overrides: bool = False


@dataclass(frozen=True)
class PlaybookListResult:
    """``playbook list``: every playbook, shipped and the inventory's. Exit 0 (an invalid one is listed
    with its errors)."""

    playbooks: tuple[PlaybookInfo, ...]
    kind: str = "playbook-list"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """Always OK."""
        return ExitCode.OK


@dataclass(frozen=True)
class PlaybookShowResult:
    """``playbook show``: the decision tree (no host contacted).

    Attributes:
        name, source, description, params (name → ``{required, default, description}``), policy, steps.
    """

    name: str
    source: str
    description: str
    params: Mapping[str, Any]
    policy: Mapping[str, Any]
    steps: tuple[DryRunStep, ...]
    kind: str = "playbook-show"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """Always OK."""
        return ExitCode.OK


@dataclass(frozen=True)
class PlaybookValidateResult:
    """``playbook validate FILE``: ``ok``, ``errors`` (one line each, ``FILE:LINE: where: why``), the
    playbook's ``name`` and step count when valid."""

    source: str
    ok: bool
    errors: tuple[str, ...] = ()
    name: str | None = None
    steps: int = 0
    kind: str = "playbook-validate"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """0 valid, 78 not."""
        return ExitCode.OK if self.ok else ExitCode.CONFIG


@dataclass(frozen=True)
class PlaybookDryRunResult:
    """``playbook run --dry-run``: the decision tree with what the steps that read no earlier result would
    do on the job now (their library call's plan). Exit 0."""

    name: str
    source: str
    params: Mapping[str, str]
    steps: tuple[DryRunStep, ...]
    kind: str = "playbook-dry-run"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """Always OK: a plan is not a verdict."""
        return ExitCode.OK


@dataclass(frozen=True, kw_only=True)
class PlaybookRunRequest:
    """``playbook run NAME``.

    Attributes:
        name: a playbook name (shipped or the inventory's) or a file path. params: ``job`` and the
        ``--param`` values. inventory / state: paths (None: the environment's, the defaults).
        dry_run: the decision tree only. lock_timeout_s: the store lock wait of each action.
    """

    name: str
    params: Mapping[str, str] = field(default_factory=dict)
    inventory: Path | None = None
    state: Path | None = None
    dry_run: bool = False
    lock_timeout_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class PlaybookResumeRequest:
    """``playbook resume RUN_ID``: the run's id, and where to act (inventory, state, lock wait)."""

    run_id: int
    inventory: Path | None = None
    state: Path | None = None
    lock_timeout_s: float | None = None


Confirm = Callable[[Any], bool]
Show = Callable[[Any], None]
Progress = Callable[[StepEvent], None]


def parse_params(job: str | None, pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``--job`` and ``--param k=v`` as a parameter mapping.

    Args:
        job: the ``--job`` value (None: not given).
        pairs: the ``--param`` values, each ``KEY=VALUE``.

    Returns:
        Parameter name → value (``job`` included when given).

    Raises:
        UsageError: a pair without ``=``, an empty key, a key given twice.
    """
    from robustctl.errors import UsageError

    out: dict[str, str] = {}
    if job is not None:
        out["job"] = job
    for p in pairs:
        key, sep, value = p.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--param {p[:80]!r}: expected KEY=VALUE")
        if key in out:
            raise UsageError(f"parameter {key[:80]!r} given twice")
        out[key] = value
    return out


def run_playbook_list(inventory: Path | None = None) -> PlaybookListResult:
    """Every playbook, shipped and the inventory's. Raises ConfigError/InventoryError (bad inventory)."""
    from robustctl.playbooks.catalog import catalog

    out = []
    for e in catalog(inventory):
        pb = e.playbook
        out.append(
            PlaybookInfo(
                e.name,
                e.origin,
                e.source,
                pb.spec.description if pb else "",
                len(pb.spec.steps) if pb else 0,
                tuple(pb.destructive_steps()) if pb else (),
                e.error,
                e.overrides,
            )
        )
    return PlaybookListResult(tuple(out))


def run_playbook_show(name: str, inventory: Path | None = None) -> PlaybookShowResult:
    """The decision tree of ``name`` (no host contacted, nothing planned).

    Args:
        name: a playbook's name or file.
        inventory: the inventory path (None: ``$ROBUSTCTL_INVENTORY``, else shipped playbooks only).

    Returns:
        The playbook's steps, conditions and where each branch leads.

    Raises:
        UsageError: no such playbook. PlaybookError: it does not validate.
    """
    from robustctl.playbooks.catalog import find_playbook
    from robustctl.playbooks.engine import dry_run

    pb = find_playbook(name, inventory)
    steps = dry_run(pb, {}, plan_now=False)
    return PlaybookShowResult(
        pb.name,
        pb.source,
        pb.spec.description,
        {k: v.model_dump() for k, v in pb.spec.params.items()},
        pb.spec.policy.model_dump(),
        steps,
    )


def run_playbook_validate(path: Path) -> PlaybookValidateResult:
    """Validate the playbook file ``path``: every problem, one line each (never raises for a bad file)."""
    from robustctl.playbooks.schema import PlaybookError, load_playbook

    try:
        pb = load_playbook(path)
    except PlaybookError as exc:
        return PlaybookValidateResult(str(path), False, exc.errors)
    except ConfigError as exc:
        return PlaybookValidateResult(str(path), False, (str(exc),))
    return PlaybookValidateResult(str(path), True, name=pb.name, steps=len(pb.spec.steps))


def _known_job(job: str | None, inventory: Path | None) -> None:
    """Refuse, before any step (dry run included), a ``job`` parameter the inventory does not hold.

    Args:
        job: the ``job`` parameter (None: the playbook has none; nothing to check).
        inventory: the inventory path (None: ``$ROBUSTCTL_INVENTORY`` or the embedded default).

    Raises:
        UsageError: unknown job (the known ones listed). ConfigError / InventoryError: bad inventory.
    """
    if job is None:
        return
    from robustctl.commands.options import inventory as load_inventory

    inv = load_inventory(inventory)  # a bad file stays a configuration error
    try:
        inv.job(job)
    except InventoryError as exc:
        raise UsageError(str(exc)) from None


def run_playbook_run(
    req: PlaybookRunRequest,
    *,
    confirm: Confirm | None = None,
    show: Show | None = None,
    progress: Progress | None = None,
) -> RunOutcome | PlaybookDryRunResult:
    """Run the playbook (or only render its decision tree with ``dry_run``).

    Args:
        req: the playbook, its parameters and the session options.
        confirm: asked before each destructive action (:func:`robustctl.actions.session.always` for
            ``--yes``); None refuses a playbook with destructive steps before anything runs (unless its
            policy applies them).
        show: receives each action plan before it is confirmed.
        progress: receives a step event as each step starts and ends.

    Returns:
        The run's outcome, or with ``dry_run`` the decision tree and what each step would do now.

    Raises:
        UsageError: no such playbook, bad parameters, a job the inventory does not hold, destructive steps
            and nobody to confirm.
        PlaybookError / ConfigError / StoreError. ActionRefused / StoreLocked: the job has an unfinished
            run, or another process runs one on it.
    """
    from robustctl.playbooks.catalog import find_playbook
    from robustctl.playbooks.engine import dry_run, run_playbook

    pb = find_playbook(req.name, req.inventory)
    _known_job(req.params.get("job"), req.inventory)
    if req.dry_run:
        from robustctl.playbooks.engine import resolve_params

        params = resolve_params(pb, req.params)
        steps = dry_run(pb, params, inventory=req.inventory, state=req.state)
        return PlaybookDryRunResult(pb.name, pb.source, params, steps)
    return run_playbook(
        pb,
        req.params,
        inventory=req.inventory,
        state=req.state,
        confirm=confirm,
        show=show,
        lock_timeout_s=req.lock_timeout_s,
        progress=progress,
    )


def run_playbook_resume(
    req: PlaybookResumeRequest,
    *,
    confirm: Confirm | None = None,
    show: Show | None = None,
    progress: Progress | None = None,
) -> RunOutcome:
    """Carry an interrupted run on (:func:`robustctl.playbooks.engine.resume_playbook`)."""
    from robustctl.playbooks.engine import resume_playbook

    return resume_playbook(
        req.run_id,
        inventory=req.inventory,
        state=req.state,
        confirm=confirm,
        show=show,
        lock_timeout_s=req.lock_timeout_s,
        progress=progress,
    )
