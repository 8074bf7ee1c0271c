"""The shared CLI options and request building (:mod:`robustctl.cli.options`).

The action option bundle is one object per option, taken by every action command (found by walking
the command tree, so a new action command joins the check on its own); :func:`build_request` fills a
request by field name and refuses an unknown or a missing field.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from robustctl.cli import evict as evict_cmd
from robustctl.cli.main import command_tree, main
from robustctl.cli.options import (
    ACTION_OPTIONS,
    CLI_ONLY_OPTIONS,
    MAX_LOCK_TIMEOUT_S,
    build_request,
)
from robustctl.commands.evict import EvictRequest, ReturnRequest
from robustctl.commands.standby import StandbySizeRequest
from robustctl.errors import UsageError
from robustctl.exit_codes import ExitCode

SESSION_OPTIONS = ("inventory", "state", "yes", "json_out", "lock_timeout_s", "quiet")
"""The options every action command takes (dry_run, force and force_reason only some)."""

OWN_DRY_RUN = {"playbook run"}
"""Action commands whose --dry-run says something else than the bundle's (and so is their own)."""

EXPECTED_ACTIONS = {
    "evict", "return", "standby add", "standby activate", "restart", "stop", "update stage",
    "update apply", "rollback", "playbook run", "playbook resume",
}  # fmt: skip


def _commands() -> Iterator[tuple[str, Any]]:
    """Every leaf command of the CLI: (its path, its click command)."""

    def walk(cmd: Any, path: list[str]) -> Iterator[tuple[str, Any]]:
        subs = getattr(cmd, "commands", None)
        if subs is None:
            yield " ".join(path), cmd
            return
        for name, sub in subs.items():
            yield from walk(sub, [*path, name])

    yield from walk(command_tree(), [])


def _action_commands() -> dict[str, Callable[..., Any]]:
    """The commands that apply a plan under the store's lock (``--yes`` and ``--lock-timeout``)."""
    found = {}
    for path, cmd in _commands():
        flags = {opt for p in cmd.params for opt in getattr(p, "opts", ())}
        if {"--yes", "--lock-timeout"} <= flags:
            found[path] = cmd.callback.__wrapped__  # typer wraps the declared function
    return found


def _option_info(alias: object) -> object:
    """The ``typer.Option(...)`` object an ``Annotated`` alias carries."""
    metadata = getattr(alias, "__metadata__", ())
    assert len(metadata) == 1, alias
    return metadata[0]


def test_the_action_commands_are_the_expected_ones() -> None:
    assert set(_action_commands()) == EXPECTED_ACTIONS


@pytest.mark.parametrize("path", sorted(EXPECTED_ACTIONS))
def test_every_action_command_takes_the_bundle_as_the_same_objects(path: str) -> None:
    fn = _action_commands()[path]
    hints = typing.get_type_hints(fn, include_extras=True)
    missing = [name for name in SESSION_OPTIONS if name not in hints]
    assert not missing, f"{path} lacks {missing}"
    for name, alias in ACTION_OPTIONS.items():
        if name not in hints or (name == "dry_run" and path in OWN_DRY_RUN):
            continue
        assert _option_info(hints[name]) is _option_info(alias), f"{path}: {name} is declared anew"


def test_playbook_run_declares_its_own_dry_run() -> None:
    """The exception is real: if playbook run took the bundle's --dry-run, OWN_DRY_RUN must shrink."""
    hints = typing.get_type_hints(_action_commands()["playbook run"], include_extras=True)
    assert _option_info(hints["dry_run"]) is not _option_info(ACTION_OPTIONS["dry_run"])


def test_the_bundle_shows_the_same_help_in_every_action_command() -> None:
    """What the user sees: each bundle flag has one help text and one range across the action commands."""
    seen: dict[str, set[str]] = {}
    for path, cmd in _commands():
        if path not in EXPECTED_ACTIONS:
            continue
        for p in cmd.params:
            if p.name in ACTION_OPTIONS and not (p.name == "dry_run" and path in OWN_DRY_RUN):
                seen.setdefault(p.name, set()).add(
                    f"{p.opts} {p.help} {p.min} {p.max} {p.envvar} {p.default}"
                )
    assert set(seen) == set(ACTION_OPTIONS)
    assert all(len(texts) == 1 for texts in seen.values()), seen


def test_lock_timeout_bound_is_the_named_constant() -> None:
    rc = main(["return", "node01", "--dry-run", "-q", "--lock-timeout", str(MAX_LOCK_TIMEOUT_S + 1)])
    assert rc == ExitCode.USAGE


def test_the_old_names_stay_importable_from_cli_evict() -> None:
    from robustctl.cli import options, session

    assert evict_cmd.YesOpt is options.YesOpt
    assert evict_cmd.LockTimeoutOpt is options.LockTimeoutOpt
    assert evict_cmd.confirmer is session.confirmer
    assert evict_cmd.finish is session.finish


def _return_values(**extra: Any) -> dict[str, Any]:
    """A ``return`` command's parameters, by name, as its signature declares them."""
    values: dict[str, Any] = {
        "hosts": "node01",
        "reason": "GPU replaced",
        "inventory": Path("inv.yaml"),
        "state": None,
        "yes": True,
        "dry_run": True,
        "json_out": False,
        "lock_timeout_s": 5.0,
        "quiet": True,
    }
    return values | extra


def test_build_request_takes_each_field_by_name_and_passes_over_the_cli_only_options() -> None:
    req = build_request(ReturnRequest, _return_values())
    assert req == ReturnRequest(
        hosts="node01", reason="GPU replaced", inventory=Path("inv.yaml"), dry_run=True, lock_timeout_s=5.0
    )
    assert CLI_ONLY_OPTIONS == {"yes", "json_out", "quiet"}


def test_build_request_refuses_an_unknown_field() -> None:
    with pytest.raises(UsageError, match=r"ReturnRequest has no field 'lock_timeout'"):
        build_request(ReturnRequest, _return_values(lock_timeout=5.0))


def test_build_request_refuses_an_unknown_given_field() -> None:
    with pytest.raises(UsageError, match=r"has no field 'colour'"):
        build_request(ReturnRequest, _return_values(), colour="red")


def test_build_request_refuses_a_missing_field_even_one_with_a_default() -> None:
    values = _return_values()
    del values["dry_run"]
    with pytest.raises(UsageError, match=r"ReturnRequest field 'dry_run' not given"):
        build_request(ReturnRequest, values)


def test_build_request_refuses_what_is_not_a_dataclass() -> None:
    with pytest.raises(UsageError, match="not a request dataclass"):
        build_request(dict, {})
    with pytest.raises(UsageError, match="not a request dataclass"):
        build_request(ReturnRequest(hosts="x"), {})  # type: ignore[arg-type]


def test_build_request_given_wins_over_the_parsed_value() -> None:
    req = build_request(ReturnRequest, _return_values(), inventory=None)
    assert req.inventory is None


@pytest.mark.parametrize("cls", [EvictRequest, ReturnRequest, StandbySizeRequest])
def test_build_request_covers_every_init_field(cls: type[Any]) -> None:
    """A request built from every field's default equals the request built with no argument."""
    fields = {f.name: getattr(cls(**_required(cls)), f.name) for f in dataclasses.fields(cls) if f.init}
    assert build_request(cls, fields) == cls(**fields)


def _required(cls: type[Any]) -> dict[str, Any]:
    """Values for the fields of ``cls`` that have no default."""
    return {
        f.name: "x"
        for f in dataclasses.fields(cls)
        if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }


def test_an_action_command_still_builds_its_request_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``return --dry-run --json``: the request built by field name reaches the plan (hosts, reason)."""
    import json

    inv = tmp_path / "inv.yaml"
    inv.write_text("hosts:\n  - name: node[01-02]\n    address: 127.0.0.[2-3]\n")
    rc = main(
        ["return", "node01", "--reason", "GPU replaced", "-i", str(inv), "--dry-run", "--json", "-q",
         "--lock-timeout", "1"]
    )  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert rc == ExitCode.OK
    assert (doc["kind"], doc["action"], doc["reason"], doc["targets"]) == (
        "plan",
        "return",
        "GPU replaced",
        ["node01"],
    )


def test_asker_says_yes_with_yes_and_refuses_without_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from robustctl.cli.session import asker

    hook = asker(True, lambda plan: f"apply {plan}?")
    assert hook is not None and hook("p") is True
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert asker(False, lambda plan: f"apply {plan}?") is None


def test_asker_asks_the_question_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from robustctl.cli import session

    asked: list[tuple[str, bool, bool]] = []
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr(
        session.typer, "confirm", lambda text, default, err: asked.append((text, default, err)) or False
    )
    hook = session.asker(False, lambda plan: f"apply {plan}?")
    assert hook is not None and hook("p") is False
    assert asked == [("apply p?", False, True)]


def test_an_older_typer_without_the_type_tag_hook_keeps_its_own_help(monkeypatch: pytest.MonkeyPatch) -> None:
    """typer 0.27 (as a training image ships it) has no ``TyperOption.display_type_rich``: the CLI
    must still import and run, only the flags' type tags stay as typer prints them."""
    import typer.core

    from robustctl.cli import help as cli_help

    older = type("TyperOption", (), {})  # no display_type_rich, as in typer 0.27
    monkeypatch.setattr(typer.core, "TyperOption", older)
    monkeypatch.setattr(cli_help, "_patched", False)
    cli_help.hide_switch_types()  # no AttributeError
    assert not hasattr(older, "display_type_rich")
    assert cli_help._patched
