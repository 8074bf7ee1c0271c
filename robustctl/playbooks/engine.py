"""Running a playbook: walk the steps, call the library, journal every step; resume; dry-run.

A run (:func:`run_playbook`) takes the per-job lock (:func:`robustctl.playbooks.journal.job_lock`),
records the run, then walks the steps from the first (see :mod:`robustctl.playbooks.schema` for how
``when``, ``retries``, ``on_failure`` and ``next`` choose the way). Each attempt is recorded
``running`` in the journal *before* its library call and ``done``/``failed`` *after* it; a skipped step
is recorded ``skipped``. Expressions read each step's JSON document (:func:`step_view`) as
``steps.ID``: the command's ``--json`` document, its ``exit_code``, and ``step``: ``{"status": "done" |
"failed" | "skipped" | "not-run", "error", "attempts"}``; action steps also carry ``outcome`` and
``targets`` (the hosts the plan acted on).

A step *fails* when its call raises, when its exit code is not one of its kind's ``ok_codes`` (a
refused, declined or failed action; no progress; a probe that could not check), or when its ``when:``
cannot be evaluated. It runs within ``timeout_s``: past it, everything the step started is stopped
(:func:`robustctl.interrupts.stop_all`) and the attempt fails; a call that still does not return within
:data:`STOP_GRACE_S` ends the run as failed, leaving the step ``running`` for ``resume``.

**Resume** (:func:`resume_playbook`, after the process was killed): the walk starts again from the first
step with the journal's outcomes. A step the journal has finished is never run again; its stored result
feeds the later ``when:``s and it leads where it led. A step recorded ``running`` but never finished:

* not destructive (diagnose, stacks, replay-sdc, wait-for-progress, notify): run again;
* destructive, one action per run (evict, restart, rollback): the audit records the step wrote are
  looked up (after its ``audit_after`` id, from its pid, of its action). A record that finished
  (``applied``/``nothing-to-do``) *is* the step's result: the step is recorded ``done`` with it and
  never applied twice. No record (it died before applying), a record still ``started`` (half applied)
  or ``failed``/``refused``: run the step again; the action layer is idempotent (each plan step
  re-checks the state it wants: a host already drained is a no-op);
* ``standby-activate`` (one action per host): run again; a host the job no longer holds was already
  replaced and is skipped.

An interrupted attempt is recorded ``interrupted`` and does not count against ``retries``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robustctl.errors import RobustctlError, UsageError
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION, result_json
from robustctl.playbooks import journal
from robustctl.playbooks.expr import ExpressionError, compile_expr, evaluate
from robustctl.playbooks.kinds import KINDS, StepEnv, StepKind, action_json
from robustctl.playbooks.schema import END, Playbook, StepSpec, parse_playbook
from robustctl.store import AuditStatus, Store

__all__ = [
    "PLAYBOOK_STEP_SLEEP_ENV",
    "STOP_GRACE_S",
    "DryRunStep",
    "RunOutcome",
    "StepEvent",
    "StepOutcome",
    "dry_run",
    "resolve_params",
    "resume_playbook",
    "run_playbook",
    "step_view",
]

PLAYBOOK_STEP_SLEEP_ENV = "ROBUSTCTL_TEST_PLAYBOOK_STEP_SLEEP_S"
"""Testing hook: seconds a step sleeps after its library call returned and before the journal records
it finished (the window in which a killed run leaves an applied action recorded ``running``):
``SECONDS`` for every step, ``STEP=SECONDS`` for one."""

STOP_GRACE_S = 30.0
"""Seconds a step past its ``timeout_s`` is given to return once what it started was stopped."""

MAX_PARAM_CHARS = 4096
"""Longest parameter value (a host list, a job name)."""


@dataclass(frozen=True)
class StepOutcome:
    """How one step ended in a run.

    Attributes:
        step, kind. status: ``done``, ``failed``, ``skipped``. attempts: calls made (0 when skipped or
        taken from the journal). exit_code: of the last call (None when skipped). error: one line.
        result: its JSON document. resumed: how ``resume`` settled it (``journal``: finished before;
        ``audit N``: taken from audit record N; ``rerun``: run again), else None.
    """

    step: str
    kind: str
    status: str
    attempts: int = 0
    exit_code: int | None = None
    error: str = ""
    result: Mapping[str, Any] | None = None
    resumed: str | None = None


@dataclass(frozen=True)
class StepEvent:
    """What :func:`run_playbook` reports as it goes: ``event`` ``start`` (an attempt begins) or ``end``."""

    event: str
    step: str
    kind: str
    attempt: int = 1
    outcome: StepOutcome | None = None


@dataclass(frozen=True)
class RunOutcome:
    """A run of a playbook (``playbook run`` / ``resume``).

    Attributes:
        run_id: its journal id. playbook, source, job, params. status: ``done`` (reached the end) or
        ``failed`` (a step failed with ``on_failure: abort``, or could not be stopped). message: one
        line. steps: the steps in the order they were reached. resumed: this was a resume.
    """

    run_id: int
    playbook: str
    source: str
    job: str | None
    params: Mapping[str, str]
    status: str
    message: str
    steps: tuple[StepOutcome, ...]
    resumed: bool = False
    kind: str = "playbook-run"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """0 done; failed: 2 when the failing step exited 2 (refused, no progress), else 3."""
        if self.status == journal.RunStatus.DONE:
            return ExitCode.OK
        failing = [s for s in self.steps if s.status == "failed"]
        if failing and failing[-1].exit_code == int(ExitCode.CRITICAL):
            return ExitCode.CRITICAL
        return ExitCode.UNKNOWN


@dataclass(frozen=True)
class DryRunStep:
    """One step of the decision tree (``show``, ``run --dry-run``).

    Attributes:
        step, kind, summary (the kind's), description, destructive, when (or None), reads (the steps
        its condition and arguments read), args (as written), retries, timeout_s (effective).
        branches: where it leads: ``skipped`` (``when`` false), ``done``, ``failed`` → a step id,
        ``end`` or ``abort``. now: what it would do on the job now (the library call's dry-run or plan
        document), for a step that reads no earlier step; now_error: why that could not be planned;
        note: one line (e.g. ``depends on diag``).
    """

    step: str
    kind: str
    summary: str
    description: str
    destructive: bool
    when: str | None
    reads: tuple[str, ...]
    args: Mapping[str, Any]
    retries: int
    timeout_s: float
    branches: Mapping[str, str]
    now: Mapping[str, Any] | None = None
    now_error: str | None = None
    note: str = ""


def resolve_params(pb: Playbook, given: Mapping[str, str]) -> dict[str, str]:
    """The run's parameters: ``given`` over the declared defaults.

    Args:
        pb: the playbook.
        given: parameter name → value from ``--job`` / ``--param``.

    Returns:
        Every declared parameter that has a value, name → value.

    Raises:
        UsageError: an undeclared parameter, a missing required one, a NUL or a value over
            :data:`MAX_PARAM_CHARS` characters.
    """
    out: dict[str, str] = {}
    for k, v in given.items():
        if k not in pb.spec.params:
            known = ", ".join(sorted(pb.spec.params)) or "none"
            raise UsageError(f"playbook {pb.name} has no parameter {k!r} (parameters: {known})")
        if "\x00" in v or len(v) > MAX_PARAM_CHARS:
            raise UsageError(f"parameter {k}: a NUL character, or longer than {MAX_PARAM_CHARS} characters")
        out[k] = v
    for k, p in pb.spec.params.items():
        if k not in out:
            if p.default is not None:
                out[k] = p.default
            elif p.required:
                flag = "--job" if k == "job" else f"--param {k}=VALUE"
                raise UsageError(f"playbook {pb.name} needs parameter {k!r} ({flag})")
    return out


def step_view(
    status: str,
    *,
    result: Mapping[str, Any] | None = None,
    exit_code: int | None = None,
    error: str = "",
    attempts: int = 0,
) -> dict[str, Any]:
    """What ``steps.ID`` holds in expressions: the document, ``exit_code`` and ``step`` (see the module doc)."""
    view = dict(result or {})
    view["exit_code"] = exit_code if exit_code is not None else view.get("exit_code")
    view["step"] = {"status": status, "error": error or None, "attempts": attempts}
    return view


def _names(pb: Playbook, params: Mapping[str, str]) -> dict[str, Any]:
    return {"steps": {s.id: step_view("not-run") for s in pb.spec.steps}, "params": dict(params)}


def _result_doc(result: Any) -> dict[str, Any]:
    if hasattr(result, "outcome") and hasattr(result, "plan"):
        return action_json(result)
    return dict(result_json(result))


@dataclass
class _Ctx:
    pb: Playbook
    store: Store
    run_id: int
    params: dict[str, str]
    names: dict[str, Any]
    inventory: Path | None
    state: Path | None
    confirm: Callable[[Any], bool] | None
    show: Callable[[Any], None] | None
    lock_timeout_s: float | None
    progress: Callable[[StepEvent], None] | None
    journal_steps: dict[str, list[journal.JournalStep]] = field(default_factory=dict)
    outcomes: list[StepOutcome] = field(default_factory=list)

    def env(self, step_id: str, timeout_s: float, *, dry: bool = False) -> StepEnv:
        return StepEnv(
            inventory=self.inventory,
            state=self.state,
            params=self.params,
            names=self.names,
            dry_run=dry,
            confirm=self.confirm,
            show=self.show,
            lock_timeout_s=self.lock_timeout_s,
            timeout_s=timeout_s,
            playbook=self.pb.name,
            run_id=self.run_id,
            step_id=step_id,
        )

    def emit(self, ev: StepEvent) -> None:
        if self.progress is not None:
            self.progress(ev)


def _confirm_for(pb: Playbook, confirm: Callable[[Any], bool] | None) -> Callable[[Any], bool] | None:
    if pb.spec.policy.apply_without_confirmation:
        from robustctl.actions.session import always

        return always
    return confirm


def _needs_confirmation(pb: Playbook, confirm: Callable[[Any], bool] | None) -> None:
    destructive = pb.destructive_steps()
    if destructive and confirm is None:
        raise UsageError(
            f"playbook {pb.name} has destructive steps ({', '.join(destructive)}): pass --yes to run them "
            "(or --dry-run to see what it would do)"
        )


def run_playbook(
    pb: Playbook,
    params: Mapping[str, str],
    *,
    inventory: Path | None = None,
    state: Path | None = None,
    confirm: Callable[[Any], bool] | None = None,
    show: Callable[[Any], None] | None = None,
    lock_timeout_s: float | None = None,
    progress: Callable[[StepEvent], None] | None = None,
) -> RunOutcome:
    """Run ``pb`` with ``params`` (see the module docstring).

    Args:
        pb: the validated playbook.
        params: parameter name → value (``job``, ...), over the declared defaults.
        inventory: the inventory path (None: ``$ROBUSTCTL_INVENTORY`` or the embedded default).
        state: the state store path (None: ``$ROBUSTCTL_STATE`` or the default).
        confirm: asked before each destructive action (``always`` for ``--yes``); None: a playbook with
            destructive steps is refused before anything runs, unless its policy applies them.
        show: receives each action plan before it is confirmed.
        lock_timeout_s: seconds an action waits for the store's lock (None: the default).
        progress: receives a :class:`StepEvent` as each step starts and ends.

    Returns:
        The run's outcome: its id, status, and each step's result.

    Raises:
        UsageError: bad parameters; destructive steps and nobody to confirm.
        ActionRefused / StoreLocked: the job has an unfinished run, or another process runs one on it.
        ConfigError / StoreError: the store cannot be used.
    """
    values = resolve_params(pb, params)
    confirm = _confirm_for(pb, confirm)
    _needs_confirmation(pb, confirm)
    job = values.get("job")
    with Store.open(state) as store, journal.job_lock(store, job or "<no job>"):
        run_id = journal.begin_run(store, pb.name, pb.source, pb.text, job, values)
        ctx = _Ctx(
            pb,
            store,
            run_id,
            values,
            _names(pb, values),
            inventory,
            state,
            confirm,
            show,
            lock_timeout_s,
            progress,
        )
        return _walk(ctx, resumed=False)


def resume_playbook(
    run_id: int,
    *,
    inventory: Path | None = None,
    state: Path | None = None,
    confirm: Callable[[Any], bool] | None = None,
    show: Callable[[Any], None] | None = None,
    lock_timeout_s: float | None = None,
    progress: Callable[[StepEvent], None] | None = None,
) -> RunOutcome:
    """Carry run ``run_id`` on from where it stopped (see the module docstring).

    Args:
        run_id: the journal's run id.
        inventory: the inventory path (None: ``$ROBUSTCTL_INVENTORY`` or the embedded default).
        state: the state store path (None: ``$ROBUSTCTL_STATE`` or the default).
        confirm: asked before each destructive action, as for :func:`run_playbook`.
        show: receives each action plan before it is confirmed.
        lock_timeout_s: seconds an action waits for the store's lock (None: the default).
        progress: receives a :class:`StepEvent` as each step starts and ends.

    Returns:
        The run's outcome, the steps finished before the stop included.

    Raises:
        UsageError: no such run, or it is finished; destructive steps and nobody to confirm.
        StoreLocked: another process is running a playbook on the job (the run is alive).
        PlaybookError: the journal's playbook text no longer validates (a kind this robustctl lacks).
    """
    with Store.open(state) as store:
        rec = journal.run_record(store, run_id)
        if rec is None:
            raise UsageError(f"no playbook run {run_id} in {store.path}")
        with journal.job_lock(store, rec.job or "<no job>"):
            rec = journal.run_record(store, run_id)  # re-read under the lock
            assert rec is not None
            if rec.status != journal.RunStatus.RUNNING:
                raise UsageError(f"playbook run {run_id} is {rec.status}: nothing to resume")
            pb = parse_playbook(rec.definition, rec.source)
            confirm = _confirm_for(pb, confirm)
            _needs_confirmation(pb, confirm)
            journal.claim_run(store, run_id)
            ctx = _Ctx(
                pb,
                store,
                run_id,
                dict(rec.params),
                _names(pb, rec.params),
                inventory,
                state,
                confirm,
                show,
                lock_timeout_s,
                progress,
            )
            for st in rec.steps:
                ctx.journal_steps.setdefault(st.step, []).append(st)
            return _walk(ctx, resumed=True)


def _walk(ctx: _Ctx, *, resumed: bool) -> RunOutcome:
    pb = ctx.pb
    steps = pb.spec.steps
    i: int | None = 0
    status, message = journal.RunStatus.DONE, "reached the end"
    try:
        while i is not None:
            s = steps[i]
            out = _settle_step(ctx, i)
            ctx.outcomes.append(out)
            ctx.names["steps"][s.id] = step_view(
                out.status, result=out.result, exit_code=out.exit_code, error=out.error, attempts=out.attempts
            )
            ctx.emit(StepEvent("end", s.id, s.kind, out.attempts, out))
            succ = pb.successors(i)
            if out.status == "skipped":
                i = succ["skipped"]
            elif out.status == "done":
                i = succ["done"]
                if i is None and s.next == END:
                    message = f"ended after step {s.id} (next: end)"
            else:
                if s.on_failure == "abort":
                    status = journal.RunStatus.FAILED
                    message = f"step {s.id} failed: {out.error or f'exit {out.exit_code}'}"
                    break
                i = succ["failed"]
    except _Stuck as exc:  # the journal keeps the run running: resume once the step is over
        status, message = journal.RunStatus.FAILED, str(exc)
    else:
        journal.finish_run(ctx.store, ctx.run_id, status, message)
    return RunOutcome(
        ctx.run_id,
        pb.name,
        pb.source,
        ctx.params.get("job"),
        ctx.params,
        status,
        message,
        tuple(ctx.outcomes),
        resumed=resumed,
    )


class _Stuck(Exception):
    """A step did not return after its timeout and the stop: the run cannot go on safely."""


def _settle_step(ctx: _Ctx, i: int) -> StepOutcome:
    """The outcome of step ``i``: from the journal (resume), or by running it."""
    s = ctx.pb.spec.steps[i]
    k = KINDS[s.kind]
    past = ctx.journal_steps.get(s.id, [])
    attempts_done = 0
    rerun = "rerun" if past and past[-1].status in ("running", "interrupted") else None
    if past:
        last = past[-1]
        if last.status in ("done", "skipped") or (last.status == "failed" and not _may_retry(s, past)):
            return StepOutcome(
                s.id, s.kind, last.status, 0, last.exit_code, last.error, last.result, "journal"
            )
        if last.status == "running":
            settled = _settle_interrupted(ctx, k, last)
            if settled is not None:
                return settled
        attempts_done = sum(1 for p in past if p.status == "failed")
    if s.when is not None:
        try:
            go = bool(evaluate(compile_expr(s.when), ctx.names))
        except ExpressionError as exc:
            err = f"when: {exc}"
            seq = journal.step_start(ctx.store, ctx.run_id, s.id, s.kind, attempts_done + 1)
            journal.step_end(ctx.store, ctx.run_id, seq, "failed", exit_code=int(ExitCode.CONFIG), error=err)
            return StepOutcome(s.id, s.kind, "failed", 0, int(ExitCode.CONFIG), err)
        if not go:
            journal.step_skipped(ctx.store, ctx.run_id, s.id, s.kind, f"when: {s.when} is false")
            return StepOutcome(s.id, s.kind, "skipped", 0, None, f"when: {s.when} is false")
    timeout = s.timeout_s or k.default_timeout_s
    last_out: StepOutcome | None = None
    for attempt in range(attempts_done + 1, s.retries + 2):
        ctx.emit(StepEvent("start", s.id, s.kind, attempt))
        seq = journal.step_start(ctx.store, ctx.run_id, s.id, s.kind, attempt)
        code, doc, err = _call(k, ctx.pb.args[s.id], ctx.env(s.id, timeout), timeout)
        _test_sleep(s.id)
        ok = err == "" and code in k.ok_codes
        if ok and doc.get("outcome") == "declined":
            ok, err = False, "declined: the plan was not confirmed"
        if not ok and not err:
            err = f"exit {code}" + (f" ({doc.get('message')})" if isinstance(doc.get("message"), str) else "")
        status = "done" if ok else "failed"
        journal.step_end(ctx.store, ctx.run_id, seq, status, exit_code=code, result=doc or None, error=err)
        capped = journal.cap_result(doc) if doc else None
        last_out = StepOutcome(s.id, s.kind, status, attempt, code, err, capped, rerun)
        if ok:
            break
    assert last_out is not None
    return last_out


def _test_sleep(step_id: str) -> None:
    """The :data:`PLAYBOOK_STEP_SLEEP_ENV` hook: ``SECONDS`` (every step) or ``STEP=SECONDS`` (that step)."""
    value = os.environ.get(PLAYBOOK_STEP_SLEEP_ENV) or ""
    step, _, secs = value.rpartition("=")
    if secs and (not step or step == step_id):
        time.sleep(float(secs))


def _may_retry(s: StepSpec, past: list[journal.JournalStep]) -> bool:
    return sum(1 for p in past if p.status == "failed") < s.retries + 1


def _settle_interrupted(ctx: _Ctx, k: StepKind, rec: journal.JournalStep) -> StepOutcome | None:
    """Apply the resume rule to an attempt recorded ``running``: an outcome, or None (run it again)."""
    if k.destructive and k.single_action:
        audits = journal.step_audits(ctx.store, rec, k.actions)
        finished = [
            a for a in audits if a.status in (AuditStatus.APPLIED.value, AuditStatus.NOTHING_TO_DO.value)
        ]
        if audits and finished and finished[-1] is audits[-1]:
            a = audits[-1]
            doc: dict[str, Any] = {
                "kind": "apply",
                "schema_version": SCHEMA_VERSION,
                "audit_id": a.id,
                "status": a.status,
                "message": a.message,
                "plan": dict(a.plan or {}),
                "outcome": "applied" if a.status == AuditStatus.APPLIED.value else "nothing-to-do",
                "targets": list(a.targets),
                "exit_code": 0,
                "from_audit": True,
            }
            note = f"the process died after audit record {a.id} finished ({a.status}): not applied again"
            journal.step_end(ctx.store, ctx.run_id, rec.seq, "done", exit_code=0, result=doc, error="")
            return StepOutcome(rec.step, rec.kind, "done", 0, 0, note, doc, f"audit {a.id}")
    why = "interrupted: the process died while it ran; run again on resume"
    journal.step_end(ctx.store, ctx.run_id, rec.seq, "interrupted", error=why)
    return None


def _call(k: StepKind, args: Any, env: StepEnv, timeout_s: float) -> tuple[int, dict[str, Any], str]:
    """Run the step's library call within ``timeout_s``; return (exit code, document, error line)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = k.run(args, env)
        except BaseException as exc:  # carried to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name=f"playbook-step-{env.step_id}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        from robustctl import interrupts

        interrupts.stop_all()
        worker.join(STOP_GRACE_S)
        if worker.is_alive():
            raise _Stuck(
                f"step {env.step_id} ran past its {timeout_s:g} s and did not stop within {STOP_GRACE_S:g} s "
                "of being stopped; the run stops here (resume it once the step is over)"
            )
        return int(ExitCode.UNKNOWN), {}, f"timed out after {timeout_s:g} s; what it started was stopped"
    if "error" in box:
        exc = box["error"]
        if isinstance(exc, RobustctlError):
            return int(exc.exit_code), {}, f"{type(exc).__name__}: {exc}"
        if isinstance(exc, Exception):
            return int(ExitCode.UNKNOWN), {}, f"{type(exc).__name__}: {exc}"
        raise exc  # KeyboardInterrupt, SystemExit: the run stops (journal: running)
    result = box["result"]
    try:
        doc = _result_doc(result)
    except TypeError as exc:
        return int(ExitCode.UNKNOWN), {}, f"not a command result: {exc}"
    return int(result.exit_code), doc, ""


def dry_run(
    pb: Playbook,
    params: Mapping[str, str],
    *,
    inventory: Path | None = None,
    state: Path | None = None,
    plan_now: bool = True,
) -> tuple[DryRunStep, ...]:
    """The decision tree of ``pb``: each step, its condition, where each branch leads, and for a step
    that reads no earlier step's result, what it would do on the job now (``plan_now``; nothing applied).

    Args:
        pb: the validated playbook.
        params: parameter name → value (resolved against the declared defaults when ``plan_now``).
        inventory: the inventory path (None: ``$ROBUSTCTL_INVENTORY`` or the embedded default).
        state: the state store path (None: the default).
        plan_now: also ask each step that can be planned what it would do now (reads the job).

    Returns:
        One :class:`DryRunStep` per step, in the playbook's order.

    Raises:
        UsageError: bad parameters (only when ``plan_now``).
    """
    values = resolve_params(pb, params) if plan_now else dict(params)
    names = _names(pb, values)
    out: list[DryRunStep] = []
    steps = pb.spec.steps
    for i, s in enumerate(steps):
        k = KINDS[s.kind]
        a = pb.args[s.id]
        reads: list[str] = []
        texts = [s.when] if s.when is not None else []
        texts += [getattr(a, n) for n in type(a).expressions if getattr(a, n) is not None]
        for t in texts:
            reads += compile_expr(t).steps
        reads = list(dict.fromkeys(reads))
        branches = {
            key: (steps[v].id if v is not None else _end(s, key)) for key, v in pb.successors(i).items()
        }
        now: Mapping[str, Any] | None = None
        now_error: str | None = None
        note = f"depends on {', '.join(reads)}" if reads else ""
        if plan_now and not reads:
            if k.plan is None:
                note = "reads only: nothing to plan; runs when the playbook runs"
            else:
                env = StepEnv(
                    inventory,
                    state,
                    values,
                    names,
                    dry_run=True,
                    timeout_s=s.timeout_s or k.default_timeout_s,
                    playbook=pb.name,
                    step_id=s.id,
                )
                try:
                    now = _result_doc(k.plan(a, env))
                except RobustctlError as exc:
                    now_error = f"{type(exc).__name__}: {exc}"
        out.append(
            DryRunStep(
                s.id,
                s.kind,
                k.summary,
                s.description,
                k.destructive,
                s.when,
                tuple(reads),
                s.args,
                s.retries,
                s.timeout_s or k.default_timeout_s,
                branches,
                now,
                now_error,
                note,
            )
        )
    return tuple(out)


def _end(s: Any, key: str) -> str:
    if key == "failed" and s.on_failure == "abort":
        return "abort"
    return "end"
