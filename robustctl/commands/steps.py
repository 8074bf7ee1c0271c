"""The library calls behind the playbook step kinds, bound by the command layer.

:mod:`robustctl.playbooks.kinds` declares each kind (its ``args:`` model, destructive or not, the exit
codes that succeed); this module binds the ``run_<command>`` each calls, with the request the CLI
builds too (:func:`robustctl.playbooks.kinds.bind_kind`). Importing it binds every kind; the command
modules that run playbooks (:mod:`robustctl.commands.playbook`, :mod:`robustctl.commands.watch`) import
it, so the arrow points from the commands to the playbooks and never back. Each command module is
imported when its step runs (the CLI starts without them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from robustctl.inventory import resolve_inventory
from robustctl.playbooks.kinds import (
    DiagnoseArgs,
    EvictArgs,
    ReplaySdcArgs,
    RestartArgs,
    RollbackArgs,
    StacksArgs,
    StandbyActivateArgs,
    StepEnv,
    StepError,
    StepsResult,
    StopArgs,
    WaitProgressArgs,
    action_json,
    bind_kind,
)

__all__ = ["bind_all", "plan_with_session"]


def _diagnose_build(a: DiagnoseArgs, env: StepEnv) -> Any:
    from robustctl.commands.diagnose import diagnose_request

    if a.hosts_from is not None:
        hosts: str | None = ",".join(env.hosts(a.hosts_from, "hosts_from"))
        if not hosts:
            raise StepError("hosts_from named no host")
    elif a.hosts is not None:
        hosts = a.hosts
    else:  # the job's machines now (after standby swaps), not the inventory's list
        from robustctl.actions.hosts import current_job

        job, _ = current_job(resolve_inventory(env.inventory), env.job, state=env.state)
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
        **_session(env),
    )


def _evict_call(req: Any, env: StepEnv) -> Any:
    from robustctl.commands.evict import run_evict

    if not req.hosts:
        raise StepError("evict: no host to evict (the hosts expression gave an empty list)")
    return run_evict(req, confirm=env.confirm, show=env.show)


def plan_with_session(build: Callable[[Any, StepEnv], Any], call: Callable[[Any, StepEnv], Any]) -> Any:
    """A kind's ``plan``: its own call with ``dry_run`` set, so the action session plans and applies nothing.

    Args:
        build: the kind's request builder.
        call: the kind's library call (an action session: plan → show → apply).

    Returns:
        ``(args, env) -> result``, the dry run's result.
    """

    def plan(a: Any, env: StepEnv) -> Any:
        env = dataclasses.replace(env, dry_run=True)
        return call(build(a, env), env)

    return plan


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
                **_session(env),
            ),
            confirm=env.confirm,
            show=env.show,
        )
        docs.append(action_json(r))
        done.append(host)
        if int(r.exit_code) != 0:
            break
    return StepsResult("standby-activate", tuple(docs), tuple(done), tuple(skipped))


def _session(env: StepEnv) -> dict[str, Any]:
    return {
        "inventory": env.inventory,
        "state": env.state,
        "dry_run": env.dry_run,
        "lock_timeout_s": env.lock_timeout_s,
    }


def _restart_build(a: RestartArgs, env: StepEnv) -> Any:
    from robustctl.commands.restart import RestartRequest

    return RestartRequest(
        job=env.job, from_checkpoint=a.from_checkpoint, reason=env.reason(a.reason), **_session(env)
    )


def _restart_call(req: Any, env: StepEnv) -> Any:
    from robustctl.commands.restart import run_restart

    return run_restart(req, confirm=env.confirm, show=env.show)


def _stop_build(a: StopArgs, env: StepEnv) -> Any:
    from robustctl.commands.restart import StopRequest

    return StopRequest(job=env.job, reason=env.reason(a.reason), **_session(env))


def _stop_call(req: Any, env: StepEnv) -> Any:
    from robustctl.commands.restart import run_stop

    return run_stop(req, confirm=env.confirm, show=env.show)


def _rollback_build(a: RollbackArgs, env: StepEnv) -> Any:
    from robustctl.commands.update import RollbackRequest

    return RollbackRequest(job=env.job, to=a.to, reason=env.reason(a.reason), **_session(env))


def _rollback_call(req: Any, env: StepEnv) -> Any:
    from robustctl.commands.update import run_rollback

    return run_rollback(req, confirm=env.confirm, show=env.show)


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


def bind_all() -> None:
    """Bind every command-backed step kind to its library call (idempotent: binding again replaces)."""
    bind_kind("diagnose", _diagnose_build, _diagnose_call, _diagnose_plan)
    bind_kind("stacks", _stacks_build, _stacks_call)
    bind_kind("evict", _evict_build, _evict_call, plan_with_session(_evict_build, _evict_call))
    bind_kind(
        "standby-activate", _standby_build, _standby_call, plan_with_session(_standby_build, _standby_call)
    )
    bind_kind("restart", _restart_build, _restart_call, plan_with_session(_restart_build, _restart_call))
    bind_kind("stop", _stop_build, _stop_call, plan_with_session(_stop_build, _stop_call))
    bind_kind("rollback", _rollback_build, _rollback_call, plan_with_session(_rollback_build, _rollback_call))
    bind_kind("wait-for-progress", _progress_build, _progress_call)
    bind_kind("replay-sdc", _replay_build, _replay_call, _replay_plan)


bind_all()
