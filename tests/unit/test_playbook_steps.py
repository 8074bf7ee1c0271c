"""The step kinds are declared by the playbooks and bound to their library calls by the command layer."""

from __future__ import annotations

import dataclasses

import pytest

import robustctl.commands.steps as steps
from robustctl.exit_codes import ExitCode
from robustctl.playbooks.kinds import KINDS, StepEnv, StepError, bind_kind, kind


def test_importing_the_command_layer_binds_every_declared_kind() -> None:
    steps.bind_all()
    unbound = [name for name, spec in KINDS.items() if not spec.bound]
    assert not unbound, unbound
    # destructive kinds can be planned (a dry run through their own action session)
    assert all(spec.plan is not None for spec in KINDS.values() if spec.destructive)


def test_a_kind_without_a_library_call_refuses_to_run_with_exit_3(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = kind("restart")
    monkeypatch.setitem(KINDS, "restart", dataclasses.replace(spec, build=None, call=None, plan=None))
    env = StepEnv(inventory=None, state=None, params={"job": "j"}, names={})
    with pytest.raises(StepError, match="no library call bound") as err:
        kind("restart").run(spec.args(), env)
    assert err.value.exit_code == ExitCode.UNKNOWN


def test_binding_replaces_the_call_and_keeps_the_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    before = kind("stacks")
    monkeypatch.setitem(KINDS, "stacks", before)
    bound = bind_kind("stacks", lambda a, e: ("req", a), lambda r, e: ("called", r))
    assert (bound.ok_codes, bound.default_timeout_s, bound.args) == (
        before.ok_codes,
        before.default_timeout_s,
        before.args,
    )
    env = StepEnv(inventory=None, state=None, params={"job": "j"}, names={})
    args = before.args()
    assert kind("stacks").run(args, env) == ("called", ("req", args))


def test_binding_an_unknown_kind_is_refused() -> None:
    from robustctl.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown step kind"):
        bind_kind("no-such-kind", lambda a, e: a, lambda r, e: r)
