"""The CLI ends of an action session, shared by every action command: confirm, show the plan, finish.

An action command parses its options (:mod:`robustctl.cli.options`), calls its ``run_X(request,
confirm=confirmer(yes), show=plan_shower(quiet))`` and returns :func:`finish` of the result.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import typer

if TYPE_CHECKING:
    from robustctl.actions.session import ActionResult, Confirm, ShowPlan

__all__ = ["asker", "confirmer", "finish", "plan_shower"]

_P = TypeVar("_P")


def asker(yes: bool, question: Callable[[_P], str]) -> Callable[[_P], bool] | None:
    """The confirmation hook of a plan of any kind: ``--yes``: yes; a terminal on stdin: ask there.

    Args:
        yes: ``--yes`` was given.
        question: the question asked about a plan (answered no unless the operator says yes).

    Returns:
        The hook, or None when nobody can be asked (no ``--yes``, no terminal: the command's
        usage error, 64).
    """
    if yes:
        return lambda plan: True
    if not sys.stdin.isatty():
        return None
    return lambda plan: typer.confirm(question(plan), default=False, err=True)


def confirmer(yes: bool) -> Confirm | None:
    """The confirmation hook of an action session (:func:`asker` with "Apply this ACTION plan?").

    Args:
        yes: ``--yes`` was given.

    Returns:
        The session's confirmation hook, or None when nobody can be asked.
    """
    from robustctl.actions.session import always

    if yes:
        return always
    return asker(yes, lambda plan: f"Apply this {plan.action} plan?")


def plan_shower(quiet: bool) -> ShowPlan | None:
    """The hook that renders the plan on stderr before it is confirmed (None with ``--quiet``).

    Args:
        quiet: ``--quiet`` was given.

    Returns:
        The session's plan hook, or None.
    """
    if quiet:
        return None
    from robustctl.report.actions import render_plan
    from robustctl.report.console import stderr_console

    console = stderr_console()
    return lambda plan: render_plan(plan, console)


def finish(result: ActionResult, *, json_out: bool, quiet: bool) -> int:
    """Render what happened, print the JSON document (``--json``), and return the exit code.

    Args:
        result: what the session did.
        json_out: ``--json`` (the document on stdout).
        quiet: ``--quiet`` (no outcome table, unless the plan was declined).

    Returns:
        The exit code of ``result``.

    Raises:
        ActionRefused: the plan was refused (after its document, with the failing rails, is printed).
    """
    from robustctl.actions.session import Outcome
    from robustctl.commands.base import exit_code_of, result_json
    from robustctl.report.actions import render_action_outcome
    from robustctl.report.console import emit_json, stderr_console

    if not quiet or result.outcome is Outcome.DECLINED:
        render_action_outcome(result, stderr_console())
    if result.outcome is not Outcome.DECLINED:
        emit_json(result_json(result), to_stdout=json_out, output=None)
    if result.outcome is Outcome.REFUSED:
        raise result.refused_error()
    return exit_code_of(result)
