"""The CLI ends of an action session, shared by every action command: confirm, show the plan, finish.

An action command parses its options (:mod:`robustctl.cli.options`), calls its ``run_X(request,
confirm=confirmer(yes), show=plan_shower(quiet))`` and returns :func:`finish` of the result.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from robustctl.actions.session import ActionResult, Confirm, ShowPlan

__all__ = ["confirmer", "finish", "plan_shower"]


def confirmer(yes: bool) -> Confirm | None:
    """``--yes``: always; a terminal on stdin: ask there; else None (the library's usage error, 64).

    Args:
        yes: ``--yes`` was given.

    Returns:
        The confirmation hook of the session, or None when nobody can be asked.
    """
    from robustctl.actions.session import always

    if yes:
        return always
    if not sys.stdin.isatty():
        return None
    return lambda plan: typer.confirm(f"Apply this {plan.action} plan?", default=False, err=True)


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
