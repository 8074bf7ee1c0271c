"""The step kinds a playbook can use: name → args model, destructive or not, the codes that succeed.

This module declares each kind (its ``args:`` model, what it may change, its time budget); the command
layer binds the library call that runs it (:mod:`robustctl.commands.steps`, with :func:`bind_kind`), so
the arrow points from the commands to the playbooks and never back. Each kind calls robustctl's own
library function (``robustctl.commands.<cmd>.run_<cmd>``) with a typed request, the one the CLI builds
too: never a subprocess of robustctl, never a CLI function. A kind whose call is not bound refuses to
run (:class:`StepError`, exit 3); ``notify`` needs no command and is bound here.

=================  ==========================================  ===========  ==========================
kind               library call                                destructive  step fails when exit is
=================  ==========================================  ===========  ==========================
diagnose           commands.diagnose.run_diagnose              no           3 (could not check)
stacks             commands.stacks.run_stacks                  no           3
evict              commands.evict.run_evict                    yes          not 0 (refused 2, failed 3)
standby-activate   commands.standby.run_standby_activate (×N)  yes          not 0
restart            commands.restart.run_restart                yes          not 0
rollback           commands.update.run_rollback                yes          not 0
replay-sdc         commands.replay_sdc.run_replay_sdc          no           3
wait-for-progress  commands.progress.run_wait_progress         no           not 0 (2: no progress/exited)
notify             a configured command (argv, no shell)       no           not 0
=================  ==========================================  ===========  ==========================

Every kind but ``notify`` acts on the playbook's ``job`` parameter. Arguments named ``*_from`` are
expressions (:mod:`robustctl.playbooks.expr`) evaluated when the step runs, e.g.
``hosts_from: steps.diag.suspects``; the others are literal values.

Each library module is imported when its step runs (the CLI starts without them). More kinds register
with :func:`register_kind` and bind with :func:`bind_kind`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from robustctl.errors import ConfigError, RobustctlError
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION, result_json, strict_jsonable
from robustctl.playbooks.expr import MAX_EXPR_CHARS, compile_expr, evaluate

__all__ = [
    "KINDS",
    "MAX_NOTIFY_OUTPUT",
    "NotifyResult",
    "StepArgs",
    "StepEnv",
    "StepError",
    "StepKind",
    "StepsResult",
    "action_json",
    "bind_kind",
    "kind",
    "register_kind",
]

MAX_NOTIFY_OUTPUT = 64 * 1024
"""Bytes of a notify command's stdout kept (its tail); a notifier prints a line or two."""

MAX_HOSTS_FROM = 10_000
"""Most host names a ``*_from`` expression may yield (a job of 10,000 machines)."""


class StepError(RobustctlError):
    """A step could not run (a missing library call, a bad argument value at run time); exit 3."""

    exit_code = ExitCode.UNKNOWN


class StepArgs(BaseModel):
    """Base of every kind's ``args:`` model: strict, frozen; ``expressions`` names the ``*_from`` fields."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    expressions: ClassVar[tuple[str, ...]] = ()


Expr = Field(default=None, max_length=MAX_EXPR_CHARS)
Reason = Field(
    default="", max_length=4096, description="Recorded in the audit log ('' → playbook, run, step)."
)


@dataclass(frozen=True)
class StepEnv:
    """What a step's builder and runner see.

    Attributes:
        inventory / state: paths (None: ``$ROBUSTCTL_INVENTORY`` / ``$ROBUSTCTL_STATE`` / defaults).
        params: the playbook's parameters (``job``, ...). names: what expressions read (``steps``, ``params``).
        dry_run: plan only. confirm / show: the action session's hooks. lock_timeout_s: the store lock wait.
        timeout_s: the step's time budget. playbook / run_id / step_id: for the default reason and notify.
    """

    inventory: Path | None
    state: Path | None
    params: Mapping[str, str]
    names: Mapping[str, Any]
    dry_run: bool = False
    confirm: Callable[[Any], bool] | None = None
    show: Callable[[Any], None] | None = None
    lock_timeout_s: float | None = None
    timeout_s: float = 3600.0
    playbook: str = ""
    run_id: int | None = None
    step_id: str = ""

    @property
    def job(self) -> str:
        """The ``job`` parameter. Raises StepError when there is none."""
        job = self.params.get("job")
        if not job:
            raise StepError(f"step {self.step_id}: the playbook has no 'job' parameter")
        return job

    def reason(self, given: str) -> str:
        """``given``, else ``playbook NAME run N step ID``."""
        run = f" run {self.run_id}" if self.run_id is not None else ""
        return given or f"robustctl playbook {self.playbook}{run} step {self.step_id}"

    def hosts(self, expr: str, what: str) -> list[str]:
        """Evaluate a ``*_from`` expression to host names (a list of names, or one comma-separated string).

        Args:
            expr: the expression text (e.g. ``steps.diag.suspects``).
            what: the argument's name, for errors (``hosts_from``).

        Returns:
            The host names, first occurrence kept, duplicates dropped.

        Raises:
            ExpressionError: it does not evaluate. StepError: not host names, or more than
                :data:`MAX_HOSTS_FROM`.
        """
        value = evaluate(compile_expr(expr), self.names)
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise StepError(f"{what}: {expr!r} gave {type(value).__name__}, not a list of host names")
        if len(value) > MAX_HOSTS_FROM:
            raise StepError(f"{what}: {len(value)} hosts, more than {MAX_HOSTS_FROM}")
        return list(dict.fromkeys(value))


@dataclass(frozen=True)
class StepKind:
    """One step kind: its declaration here, its library call bound by the command layer.

    Attributes:
        name: as written in ``kind:``. args: its ``args:`` model. summary: one line for ``show``.
        build: ``(args, env) -> request`` (the library call's request; None until bound). call:
            ``(request, env) -> result`` (a command result: ``kind``, ``schema_version``,
            ``exit_code``; None until bound). destructive: it changes machines or the job (needs
            ``--yes`` or the playbook's policy). ok_codes: exit codes that are a success of the step.
            plan: ``(args, env) -> result`` what it would do now, for ``--dry-run`` (None: it only
            reads, nothing to plan). actions: the audit-log ``action`` names it writes (resume matches
            them). single_action: one audit record per run of the step (a finished record is the
            step's result on resume). needs_job: reads ``params.job``.
        default_timeout_s: the step's budget when ``timeout_s`` is not given.
    """

    name: str
    args: type[StepArgs]
    summary: str
    build: Callable[[Any, StepEnv], Any] | None = None
    call: Callable[[Any, StepEnv], Any] | None = None
    destructive: bool = False
    ok_codes: frozenset[int] = frozenset({0})
    plan: Callable[[Any, StepEnv], Any] | None = None
    actions: tuple[str, ...] = ()
    single_action: bool = True
    needs_job: bool = True
    default_timeout_s: float = 3600.0

    @property
    def bound(self) -> bool:
        """Whether a library call is bound (:func:`bind_kind`)."""
        return self.build is not None and self.call is not None

    def run(self, args: StepArgs, env: StepEnv) -> Any:
        """Build the request and call the library function.

        Args:
            args: the step's validated ``args:``.
            env: what the step sees.

        Returns:
            The library call's result.

        Raises:
            StepError: no library call is bound to this kind (the command layer was not loaded).
        """
        if self.build is None or self.call is None:
            raise StepError(
                f"step kind {self.name!r} has no library call bound (robustctl.commands.steps binds them)"
            )
        return self.call(self.build(args, env), env)


KINDS: dict[str, StepKind] = {}
"""The registry: kind name → :class:`StepKind`."""


def register_kind(spec: StepKind) -> StepKind:
    """Add ``spec`` to :data:`KINDS`.

    Args:
        spec: the kind (its library call may be bound later with :func:`bind_kind`).

    Returns:
        ``spec``.

    Raises:
        ValueError: a kind of that name is already registered.
    """
    if spec.name in KINDS:
        raise ValueError(f"step kind {spec.name!r} is already registered")
    KINDS[spec.name] = spec
    return spec


def bind_kind(
    name: str,
    build: Callable[[Any, StepEnv], Any],
    call: Callable[[Any, StepEnv], Any],
    plan: Callable[[Any, StepEnv], Any] | None = None,
) -> StepKind:
    """Bind the library call of the registered kind ``name`` (the command layer does, at import).

    The declaration (args model, destructive, codes, timeouts) stays where it is; binding again
    replaces the call (a test's stand-in).

    Args:
        name: a registered kind.
        build: ``(args, env) -> request``.
        call: ``(request, env) -> result``.
        plan: ``(args, env) -> result`` for ``--dry-run`` (None: the kind only reads).

    Returns:
        The bound kind, now in :data:`KINDS`.

    Raises:
        ConfigError: no kind of that name is registered.
    """
    bound = dataclasses.replace(kind(name), build=build, call=call, plan=plan)
    KINDS[name] = bound
    return bound


def kind(name: str) -> StepKind:
    """The kind called ``name``. Raises ConfigError naming the known kinds."""
    try:
        return KINDS[name]
    except KeyError:
        raise ConfigError(f"unknown step kind {name!r} (kinds: {', '.join(sorted(KINDS))})") from None


# --- results the engine builds itself ------------------------------------------------------------------


@dataclass(frozen=True)
class StepsResult:
    """The results of a step that makes one library call per host (``standby-activate``).

    Attributes:
        action: the kind. results: each call's JSON document, in order. hosts: the host each was for.
        skipped: hosts left alone, with why (``already replaced``). kind: ``"playbook-step-multi"``.
    """

    action: str
    results: tuple[Mapping[str, Any], ...]
    hosts: tuple[str, ...]
    skipped: tuple[str, ...] = ()
    kind: str = "playbook-step-multi"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """The worst of the calls' exit codes (0 when there was none)."""
        codes = [int(r.get("exit_code", 3)) for r in self.results]
        return ExitCode(max(codes)) if codes else ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        """``kind``, ``action``, ``hosts``, ``skipped``, ``results``, ``exit_code``, ``targets``."""
        targets = [t for r in self.results for t in (r.get("targets") or [])]
        return {
            "kind": self.kind,
            "schema_version": self.schema_version,
            "action": self.action,
            "hosts": list(self.hosts),
            "skipped": list(self.skipped),
            "results": [dict(r) for r in self.results],
            "targets": targets,
            "exit_code": int(self.exit_code),
        }


@dataclass(frozen=True)
class NotifyResult:
    """What a notify command did: ``argv``, ``returncode`` (None: timed out), ``output`` (its stdout tail)."""

    argv: tuple[str, ...]
    returncode: int | None
    output: str
    error: str = ""
    kind: str = "notify"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """0 when the command exited 0, else 3."""
        return ExitCode.OK if self.returncode == 0 else ExitCode.UNKNOWN


def action_json(result: Any) -> dict[str, Any]:
    """An action result's document plus ``outcome`` and ``targets`` at the top level (for expressions)."""
    doc = dict(result_json(result))
    plan = getattr(result, "plan", None)
    doc.setdefault("outcome", getattr(getattr(result, "outcome", None), "value", None))
    doc.setdefault("targets", list(getattr(plan, "targets", ()) or ()))
    doc.setdefault("exit_code", int(result.exit_code))
    return doc


# --- diagnose ---------------------------------------------------------------------------------------


class DiagnoseArgs(StepArgs):
    """``diagnose``: the job's current hosts (after standby swaps; or ``hosts`` / ``hosts_from``) up to
    ``level``."""

    expressions: ClassVar[tuple[str, ...]] = ("hosts_from",)
    level: int = Field(3, ge=0, le=4, description="Highest level (4: bitwise alignment, the NaN playbook).")
    all_levels: bool = False
    hosts: str | None = Field(None, max_length=4096, description="A host range instead of the job's hosts.")
    hosts_from: str | None = Expr
    record: bool = True


register_kind(
    StepKind(
        "diagnose",
        DiagnoseArgs,
        "hierarchical stop-time checks of the job's hosts (commands.diagnose.run_diagnose)",
        ok_codes=frozenset({0, 1, 2}),
        needs_job=False,
        default_timeout_s=3600.0,
    )
)


# --- stacks ----------------------------------------------------------------------------------------


class StacksArgs(StepArgs):
    """``stacks``: py-spy the job's ranks; ``slow: true`` for fail-slow voting."""

    slow: bool = False
    rounds: int = Field(5, ge=1, le=1000)
    interval_s: float = Field(10.0, ge=0, le=3600)
    samples: int = Field(2, ge=1, le=100)
    sample_interval_s: float = Field(1.0, ge=0, le=3600)
    probe_timeout_s: float = Field(30.0, gt=0, le=3600)
    native: bool = False
    record: bool = True


register_kind(
    StepKind(
        "stacks",
        StacksArgs,
        "py-spy every rank, cluster the stacks, name the hung group (commands.stacks.run_stacks)",
        ok_codes=frozenset({0, 1, 2}),
        default_timeout_s=900.0,
    )
)


# --- evict ------------------------------------------------------------------------------------------


class EvictArgs(StepArgs):
    """``evict``: take ``hosts`` / ``hosts_from`` out, over-evicting their ``over_evict`` group of the job."""

    expressions: ClassVar[tuple[str, ...]] = ("hosts_from",)
    hosts: str | None = Field(None, max_length=4096)
    hosts_from: str | None = Expr
    over_evict: Literal["tp", "pp", "dp", "cp", "ep", "auto"] | None = None
    reason: str = Reason


register_kind(
    StepKind(
        "evict",
        EvictArgs,
        "drain the hosts (over-evicting their group) and mark them evicted (commands.evict.run_evict)",
        destructive=True,
        actions=("evict",),
        default_timeout_s=600.0,
    )
)


# --- standby-activate ------------------------------------------------------------------------------


class StandbyActivateArgs(StepArgs):
    """``standby-activate``: one ready standby in for each host of ``for_hosts`` / ``for_hosts_from``."""

    expressions: ClassVar[tuple[str, ...]] = ("for_hosts_from",)
    for_hosts: str | None = Field(None, max_length=4096, description="Host names, comma-separated.")
    for_hosts_from: str | None = Expr
    requeue: bool = False
    reason: str = Reason


register_kind(
    StepKind(
        "standby-activate",
        StandbyActivateArgs,
        "swap a ready warm standby in for each evicted host (commands.standby.run_standby_activate)",
        destructive=True,
        actions=("standby-activate",),
        single_action=False,
        default_timeout_s=600.0,
    )
)


# --- restart, rollback, wait-for-progress ----------------------------------------------------------


class RestartArgs(StepArgs):
    """``restart``: stop the job, apply pending updates, launch from ``from_checkpoint``."""

    from_checkpoint: str = Field("latest-complete", min_length=1, max_length=64)
    reason: str = Reason


register_kind(
    StepKind(
        "restart",
        RestartArgs,
        "restart the job in place from the newest complete checkpoint (commands.restart.run_restart)",
        destructive=True,
        actions=("restart",),
        default_timeout_s=1800.0,
    )
)


class StopArgs(StepArgs):
    """``stop``: end the job's processes (TERM, grace, KILL, verified gone) before stop-time checks."""

    reason: str = Reason


register_kind(
    StepKind(
        "stop",
        StopArgs,
        "stop the job's processes on its machines, verified gone (commands.restart.run_stop)",
        destructive=True,
        actions=("stop",),
        default_timeout_s=600.0,
    )
)


class RollbackArgs(StepArgs):
    """``rollback``: back to ``to`` (None: the last version that ran stably), then restart."""

    to: str | None = Field(None, min_length=1, max_length=256)
    reason: str = Reason


register_kind(
    StepKind(
        "rollback",
        RollbackArgs,
        "check out the last stable code version on every host and restart (commands.update.run_rollback)",
        destructive=True,
        actions=("rollback",),
        default_timeout_s=1800.0,
    )
)


class WaitProgressArgs(StepArgs):
    """``wait-for-progress``: wait until the job made ``min_new_steps`` new training steps."""

    min_new_steps: int = Field(1, ge=1, le=1_000_000)
    timeout_s: float = Field(600.0, gt=0, le=86_400)
    poll_s: float = Field(5.0, ge=0.1, le=600, description="Seconds between two readings of the progress.")


register_kind(
    StepKind(
        "wait-for-progress",
        WaitProgressArgs,
        "wait for new training steps: 0 progress, 2 none or exited (commands.progress.run_wait_progress)",
        default_timeout_s=900.0,
    )
)


# --- replay-sdc ------------------------------------------------------------------------------------


class ReplaySdcArgs(StepArgs):
    """``replay-sdc``: dual-phase replay over the job's machines (ByteRobust §4.3)."""

    steps: int = Field(4, ge=1, le=1000)
    k: int | None = Field(None, ge=2, le=1_000_000)
    command: str | None = Field(None, max_length=4096)
    deadline_s: float | None = Field(None, gt=0, le=86_400)
    record: bool = True


register_kind(
    StepKind(
        "replay-sdc",
        ReplaySdcArgs,
        "dual-phase replay to localize silent data corruption (commands.replay_sdc.run_replay_sdc)",
        ok_codes=frozenset({0, 1, 2}),
        default_timeout_s=3600.0,
    )
)


# --- notify ----------------------------------------------------------------------------------------


class NotifyArgs(StepArgs):
    """``notify``: run ``command`` (an argv list, never a shell string) with the run as JSON on stdin.

    Its environment adds ``ROBUSTCTL_PLAYBOOK``, ``ROBUSTCTL_PLAYBOOK_RUN``, ``ROBUSTCTL_PLAYBOOK_STEP``
    and ``ROBUSTCTL_JOB``; stdin holds ``{"playbook", "run_id", "step", "params", "steps"}`` as strict
    JSON (a host's NaN or Infinity as the string ``"NaN"``/``"Infinity"``/``"-Infinity"``, as in
    every ``--json`` document: :func:`robustctl.models.strict_jsonable`).
    """

    command: list[str] = Field(min_length=1, max_length=64)
    timeout_s: float = Field(30.0, gt=0, le=3600)
    message: str = Field("", max_length=4096)


def _notify_build(a: NotifyArgs, env: StepEnv) -> Any:
    for arg in a.command:
        if "\x00" in arg or len(arg) > 4096:
            raise StepError("notify: a command argument holds a NUL or is longer than 4096 characters")
    return a


def _notify_call(a: NotifyArgs, env: StepEnv) -> NotifyResult:
    import subprocess

    from robustctl.process import OutputLimitExceeded, run_argv

    doc = {
        "playbook": env.playbook,
        "run_id": env.run_id,
        "step": env.step_id,
        "message": a.message,
        "params": dict(env.params),
        "steps": env.names.get("steps", {}),
    }
    extra = {
        "ROBUSTCTL_PLAYBOOK": env.playbook,
        "ROBUSTCTL_PLAYBOOK_RUN": str(env.run_id or ""),
        "ROBUSTCTL_PLAYBOOK_STEP": env.step_id,
        "ROBUSTCTL_JOB": env.params.get("job", ""),
    }
    argv = tuple(a.command)
    try:
        done = run_argv(
            argv,
            timeout_s=min(a.timeout_s, env.timeout_s),
            stdin=json.dumps(strict_jsonable(doc), default=str, allow_nan=False).encode(),
            env={**os.environ, **extra},
            max_stdout=MAX_NOTIFY_OUTPUT,
            label=f"notify {argv[0]}",
        )
    except OSError as exc:
        return NotifyResult(argv, None, "", f"cannot run {argv[0]}: {exc.strerror or exc}")
    except subprocess.TimeoutExpired:
        return NotifyResult(argv, None, "", f"timed out after {a.timeout_s:g} s")
    except OutputLimitExceeded:
        return NotifyResult(argv, None, "", f"printed more than {MAX_NOTIFY_OUTPUT} bytes")
    out = done.stdout.decode("utf-8", "replace")[-4096:]
    return NotifyResult(argv, done.returncode, out, "" if done.returncode == 0 else f"exit {done.returncode}")


register_kind(
    StepKind(
        "notify",
        NotifyArgs,
        "run a configured command (argv list) with the run as JSON on stdin",
        _notify_build,
        _notify_call,
        needs_job=False,
        default_timeout_s=60.0,
    )
)
