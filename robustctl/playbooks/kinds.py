"""The step kinds a playbook can use: name → args model, request builder, library call, destructive or not.

Each kind calls robustctl's own library function (``robustctl.commands.<cmd>.run_<cmd>``) with a typed
request, the one the CLI builds too: never a subprocess of robustctl, never a CLI function.

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
with :func:`register_kind`.
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
from robustctl.models import SCHEMA_VERSION, strict_jsonable
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
    """One registered step kind.

    Attributes:
        name: as written in ``kind:``. args: its ``args:`` model. summary: one line for ``show``.
        build: ``(args, env) -> request`` (the library call's request). call: ``(request, env) -> result``
            (a command result: ``kind``, ``schema_version``, ``exit_code``). destructive: it changes
            machines or the job (needs ``--yes`` or the playbook's policy). ok_codes: exit codes that
            are a success of the step. plan: ``(args, env) -> result`` what it would do now, for
            ``--dry-run`` (None: it only reads, nothing to plan). actions: the audit-log ``action`` names
            it writes (resume matches them). single_action: one audit record per run of the step (a
            finished record is the step's result on resume). needs_job: reads ``params.job``.
        default_timeout_s: the step's budget when ``timeout_s`` is not given.
    """

    name: str
    args: type[StepArgs]
    summary: str
    build: Callable[[Any, StepEnv], Any]
    call: Callable[[Any, StepEnv], Any]
    destructive: bool = False
    ok_codes: frozenset[int] = frozenset({0})
    plan: Callable[[Any, StepEnv], Any] | None = None
    actions: tuple[str, ...] = ()
    single_action: bool = True
    needs_job: bool = True
    default_timeout_s: float = 3600.0

    def run(self, args: StepArgs, env: StepEnv) -> Any:
        """Build the request and call the library function."""
        return self.call(self.build(args, env), env)


KINDS: dict[str, StepKind] = {}
"""The registry: kind name → :class:`StepKind`."""


def register_kind(spec: StepKind) -> StepKind:
    """Add ``spec`` to :data:`KINDS`. Raises ValueError for a name already registered."""
    if spec.name in KINDS:
        raise ValueError(f"step kind {spec.name!r} is already registered")
    KINDS[spec.name] = spec
    return spec


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
    from robustctl.commands.base import result_json

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


def _diagnose_build(a: DiagnoseArgs, env: StepEnv) -> Any:
    from robustctl.commands import options
    from robustctl.commands.diagnose import diagnose_request

    if a.hosts_from is not None:
        hosts: str | None = ",".join(env.hosts(a.hosts_from, "hosts_from"))
        if not hosts:
            raise StepError("hosts_from named no host")
    elif a.hosts is not None:
        hosts = a.hosts
    else:  # the job's machines now (after standby swaps), not the inventory's list
        from robustctl.actions.hosts import current_job

        job, _ = current_job(options.inventory(env.inventory), env.job, state=env.state)
        hosts = ",".join(h.name for h in job.hosts)
    req = diagnose_request(
        inventory=env.inventory,
        hosts=hosts,
        level=a.level,
        all_levels=a.all_levels,
        state=env.state,
        record=a.record,
    )
    settings = req.settings
    if env.timeout_s < settings.deadline_s:
        settings = settings.model_copy(update={"deadline_s": env.timeout_s})
    return dataclasses.replace(req, settings=settings)


def _diagnose_call(req: Any, env: StepEnv) -> Any:
    from robustctl.commands.diagnose import run_diagnose

    return run_diagnose(req)


def _diagnose_plan(a: DiagnoseArgs, env: StepEnv) -> Any:
    from robustctl.commands.diagnose import plan_diagnose

    return plan_diagnose(_diagnose_build(a, env))


register_kind(
    StepKind(
        "diagnose",
        DiagnoseArgs,
        "hierarchical stop-time checks of the job's hosts (commands.diagnose.run_diagnose)",
        _diagnose_build,
        _diagnose_call,
        ok_codes=frozenset({0, 1, 2}),
        plan=_diagnose_plan,
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


def _stacks_build(a: StacksArgs, env: StepEnv) -> Any:
    from robustctl.commands.stacks import stacks_request

    return stacks_request(
        job=env.job,
        inventory=env.inventory,
        slow=a.slow,
        rounds=a.rounds,
        interval_s=a.interval_s,
        samples=a.samples,
        sample_interval_s=a.sample_interval_s,
        native=a.native,
        timeout_s=min(a.probe_timeout_s, env.timeout_s),
        state=env.state,
        record=a.record,
    )


def _stacks_call(req: Any, env: StepEnv) -> Any:
    from robustctl.commands.stacks import run_stacks

    return run_stacks(req)


register_kind(
    StepKind(
        "stacks",
        StacksArgs,
        "py-spy every rank, cluster the stacks, name the hung group (commands.stacks.run_stacks)",
        _stacks_build,
        _stacks_call,
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


def _evict_build(a: EvictArgs, env: StepEnv) -> Any:
    from robustctl.commands.evict import EvictRequest

    if (a.hosts is None) == (a.hosts_from is None):
        raise StepError("evict needs exactly one of hosts and hosts_from")
    hosts = a.hosts if a.hosts is not None else ",".join(env.hosts(a.hosts_from or "", "hosts_from"))
    return EvictRequest(
        hosts=hosts,
        job=env.job,
        over_evict=a.over_evict,
        reason=env.reason(a.reason),
        inventory=env.inventory,
        state=env.state,
        dry_run=env.dry_run,
        lock_timeout_s=env.lock_timeout_s,
    )


def _evict_call(req: Any, env: StepEnv) -> Any:
    from robustctl.commands.evict import run_evict

    if not req.hosts:
        raise StepError("evict: no host to evict (the hosts expression gave an empty list)")
    return run_evict(req, confirm=env.confirm, show=env.show)


def _plan_with_session(build: Callable[[Any, StepEnv], Any], call: Callable[[Any, StepEnv], Any]) -> Any:
    def plan(a: Any, env: StepEnv) -> Any:
        env = dataclasses.replace(env, dry_run=True)
        return call(build(a, env), env)

    return plan


register_kind(
    StepKind(
        "evict",
        EvictArgs,
        "drain the hosts (over-evicting their group) and mark them evicted (commands.evict.run_evict)",
        _evict_build,
        _evict_call,
        destructive=True,
        plan=_plan_with_session(_evict_build, _evict_call),
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


def _standby_build(a: StandbyActivateArgs, env: StepEnv) -> Any:
    if (a.for_hosts is None) == (a.for_hosts_from is None):
        raise StepError("standby-activate needs exactly one of for_hosts and for_hosts_from")
    if a.for_hosts is not None:
        hosts = [h for h in a.for_hosts.split(",") if h]
    else:
        hosts = env.hosts(a.for_hosts_from or "", "for_hosts_from")
    return (tuple(hosts), a)


def _standby_call(req: tuple[tuple[str, ...], StandbyActivateArgs], env: StepEnv) -> StepsResult:
    """One activation per host. A host no longer in the job's host list was replaced already (by this
    step before a crash, or by hand): it is skipped, so that running the step again is idempotent."""
    from robustctl.actions import open_context
    from robustctl.commands.standby import StandbyActivateRequest, run_standby_activate

    hosts, a = req
    if not hosts:
        raise StepError("standby-activate: no host to replace")
    ctx = open_context(env.inventory, env.state)
    try:
        current = set(ctx.job_hosts(env.job).hosts)
    finally:
        ctx.close()
    docs: list[Mapping[str, Any]] = []
    done: list[str] = []
    skipped: list[str] = []
    for host in hosts:
        if host not in current and not env.dry_run:
            skipped.append(f"{host}: no longer in job {env.job} (already replaced)")
            continue
        r = run_standby_activate(
            StandbyActivateRequest(
                for_host=host,
                job=env.job,
                requeue=a.requeue,
                reason=env.reason(a.reason),
                inventory=env.inventory,
                state=env.state,
                dry_run=env.dry_run,
                lock_timeout_s=env.lock_timeout_s,
            ),
            confirm=env.confirm,
            show=env.show,
        )
        docs.append(action_json(r))
        done.append(host)
        if int(r.exit_code) != 0:
            break
    return StepsResult("standby-activate", tuple(docs), tuple(done), tuple(skipped))


register_kind(
    StepKind(
        "standby-activate",
        StandbyActivateArgs,
        "swap a ready warm standby in for each evicted host (commands.standby.run_standby_activate)",
        _standby_build,
        _standby_call,
        destructive=True,
        plan=_plan_with_session(_standby_build, _standby_call),
        actions=("standby-activate",),
        single_action=False,
        default_timeout_s=600.0,
    )
)


# --- restart, rollback, wait-for-progress ----------------------------------------------------------


def _session(env: StepEnv) -> dict[str, Any]:
    return {
        "inventory": env.inventory,
        "state": env.state,
        "dry_run": env.dry_run,
        "lock_timeout_s": env.lock_timeout_s,
    }


class RestartArgs(StepArgs):
    """``restart``: stop the job, apply pending updates, launch from ``from_checkpoint``."""

    from_checkpoint: str = Field("latest-complete", min_length=1, max_length=64)
    reason: str = Reason


def _restart_build(a: RestartArgs, env: StepEnv) -> Any:
    from robustctl.commands.restart import RestartRequest

    return RestartRequest(
        job=env.job, from_checkpoint=a.from_checkpoint, reason=env.reason(a.reason), **_session(env)
    )


def _restart_call(req: Any, env: StepEnv) -> Any:
    from robustctl.commands.restart import run_restart

    return run_restart(req, confirm=env.confirm, show=env.show)


register_kind(
    StepKind(
        "restart",
        RestartArgs,
        "restart the job in place from the newest complete checkpoint (commands.restart.run_restart)",
        _restart_build,
        _restart_call,
        destructive=True,
        plan=_plan_with_session(_restart_build, _restart_call),
        actions=("restart",),
        default_timeout_s=1800.0,
    )
)


class StopArgs(StepArgs):
    """``stop``: end the job's processes (TERM, grace, KILL, verified gone) before stop-time checks."""

    reason: str = Reason


def _stop_build(a: StopArgs, env: StepEnv) -> Any:
    from robustctl.commands.restart import StopRequest

    return StopRequest(job=env.job, reason=env.reason(a.reason), **_session(env))


def _stop_call(req: Any, env: StepEnv) -> Any:
    from robustctl.commands.restart import run_stop

    return run_stop(req, confirm=env.confirm, show=env.show)


register_kind(
    StepKind(
        "stop",
        StopArgs,
        "stop the job's processes on its machines, verified gone (commands.restart.run_stop)",
        _stop_build,
        _stop_call,
        destructive=True,
        plan=_plan_with_session(_stop_build, _stop_call),
        actions=("stop",),
        default_timeout_s=600.0,
    )
)


class RollbackArgs(StepArgs):
    """``rollback``: back to ``to`` (None: the last version that ran stably), then restart."""

    to: str | None = Field(None, min_length=1, max_length=256)
    reason: str = Reason


def _rollback_build(a: RollbackArgs, env: StepEnv) -> Any:
    from robustctl.commands.update import RollbackRequest

    return RollbackRequest(job=env.job, to=a.to, reason=env.reason(a.reason), **_session(env))


def _rollback_call(req: Any, env: StepEnv) -> Any:
    from robustctl.commands.update import run_rollback

    return run_rollback(req, confirm=env.confirm, show=env.show)


register_kind(
    StepKind(
        "rollback",
        RollbackArgs,
        "check out the last stable code version on every host and restart (commands.update.run_rollback)",
        _rollback_build,
        _rollback_call,
        destructive=True,
        plan=_plan_with_session(_rollback_build, _rollback_call),
        actions=("rollback",),
        default_timeout_s=1800.0,
    )
)


class WaitProgressArgs(StepArgs):
    """``wait-for-progress``: wait until the job made ``min_new_steps`` new training steps."""

    min_new_steps: int = Field(1, ge=1, le=1_000_000)
    timeout_s: float = Field(600.0, gt=0, le=86_400)
    poll_s: float = Field(5.0, ge=0.1, le=600, description="Seconds between two readings of the progress.")


def _progress_build(a: WaitProgressArgs, env: StepEnv) -> Any:
    from robustctl.commands.progress import WaitProgressRequest

    return WaitProgressRequest(
        job=env.job,
        min_new_steps=a.min_new_steps,
        timeout_s=min(a.timeout_s, env.timeout_s),
        poll_s=a.poll_s,
        inventory=env.inventory,
        state=env.state,
    )


def _progress_call(req: Any, env: StepEnv) -> Any:
    from robustctl.commands.progress import run_wait_progress

    return run_wait_progress(req)


register_kind(
    StepKind(
        "wait-for-progress",
        WaitProgressArgs,
        "wait for new training steps: 0 progress, 2 none or exited (commands.progress.run_wait_progress)",
        _progress_build,
        _progress_call,
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


def _replay_build(a: ReplaySdcArgs, env: StepEnv) -> Any:
    from robustctl.commands.replay_sdc import replay_sdc_request

    deadline = min(a.deadline_s or env.timeout_s, env.timeout_s)
    return replay_sdc_request(
        inventory=env.inventory,
        job=env.job,
        k=a.k,
        steps=a.steps,
        command=a.command,
        deadline_s=deadline,
        state=env.state,
        record=a.record,
    )


def _replay_call(req: Any, env: StepEnv) -> Any:
    from robustctl.commands.replay_sdc import run_replay_sdc

    return run_replay_sdc(req)


def _replay_plan(a: ReplaySdcArgs, env: StepEnv) -> Any:
    from robustctl.commands.replay_sdc import plan_replay_sdc

    return plan_replay_sdc(_replay_build(a, env))


register_kind(
    StepKind(
        "replay-sdc",
        ReplaySdcArgs,
        "dual-phase replay to localize silent data corruption (commands.replay_sdc.run_replay_sdc)",
        _replay_build,
        _replay_call,
        ok_codes=frozenset({0, 1, 2}),
        plan=_replay_plan,
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
