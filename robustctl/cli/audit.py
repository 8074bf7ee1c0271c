"""``robustctl audit``: every action robustctl applied (or refused), from the state store."""

from __future__ import annotations

from typing import Annotated

import typer

from robustctl.cli.help import examples
from robustctl.cli.options import JsonOpt, StateOpt
from robustctl.commands.base import exit_code_of, result_json

EXAMPLES = examples(
    ("robustctl audit --since 24h", "every action of the last day, step by step"),
    ("robustctl audit --json | jq '.records[-1]'", "the last action as JSON"),
)


def audit(
    since: Annotated[
        str | None,
        typer.Option("--since", help="Only actions started within this long, e.g. 24h, 7d \\[default: all]."),
    ] = None,
    state: StateOpt = None,
    json_out: JsonOpt = False,
) -> int:
    """List the audit log: who did what, when, why, with which plan, and each step's outcome.

    A record left 'started' with a step 'running' is an action that was killed mid-apply: the steps
    before it ran, the running one may or may not have. Exit: 0, 64 bad --since, 78 unreadable store.
    """
    from robustctl.commands.audit import audit_request, run_audit
    from robustctl.report.audit import render_audit
    from robustctl.report.console import emit_json, stderr_console

    result = run_audit(audit_request(state=state, since=since))
    if json_out:
        emit_json(result_json(result), to_stdout=True, output=None)
    else:
        render_audit(result, stderr_console(wide=True))
    return exit_code_of(result)
