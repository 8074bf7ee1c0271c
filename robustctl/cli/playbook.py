"""``robustctl playbook list|show|validate|run|resume``: recovery ladders as YAML.

Parse → :mod:`robustctl.commands.playbook` → render (:mod:`robustctl.report.playbook`) → exit code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from robustctl.cli.help import examples
from robustctl.cli.options import (
    InventoryOpt,
    JsonOpt,
    LockTimeoutOpt,
    QuietOpt,
    StateOpt,
    YesOpt,
    build_request,
)
from robustctl.cli.session import confirmer, plan_shower
from robustctl.playbooks import MAX_RUN_ID

app = typer.Typer(
    help="Playbooks: the recovery ladder (diagnose → evict → standby → restart → rollback) as YAML steps.",
    no_args_is_help=True,
    epilog=examples(
        ("robustctl playbook show job-failed", "the decision tree, step by step"),
        ("robustctl playbook run hang --job llama70b --yes", "run it; the journal records every step"),
        ("robustctl playbook resume 12 --yes", "go on after a kill, from the step that did not finish"),
    ),
)

JobOpt = Annotated[str | None, typer.Option("--job", "-j", help="The job (the playbook's 'job' parameter).")]
"""``-j/--job`` of playbook run: the playbook's ``job`` parameter."""
PlaybookDryRunOpt = Annotated[
    bool,
    typer.Option("--dry-run", help="Render the decision tree and plan the first steps; apply nothing."),
]
"""``--dry-run`` of playbook run (the tree and the first steps' plans, where an action's shows its plan)."""


@app.command("list", epilog=examples(("robustctl playbook list --json", "as one JSON document")))
def list_(inventory: InventoryOpt = None, json_out: JsonOpt = False) -> int:
    """List the shipped playbooks and the inventory's own (``playbooks:``). Exit: 0, 78 bad inventory."""
    from robustctl.commands.base import exit_code_of, result_json
    from robustctl.commands.playbook import run_playbook_list
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.playbook import render_list

    result = run_playbook_list(inventory)
    render_list(result, stderr_console(wide=True))
    emit_json(result_json(result), to_stdout=json_out, output=None)
    return exit_code_of(result)


@app.command("show", epilog=examples(("robustctl playbook show job-failed", "Fig. 5 of ByteRobust")))
def show(
    name: Annotated[str, typer.Argument(help="A playbook name (see 'playbook list') or a file.")],
    inventory: InventoryOpt = None,
    json_out: JsonOpt = False,
) -> int:
    """Show a playbook's decision tree: each step, its condition and where each branch leads. Exit: 0,
    64 no such playbook, 78 invalid."""
    from robustctl.commands.base import exit_code_of, result_json
    from robustctl.commands.playbook import run_playbook_show
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.playbook import render_show

    result = run_playbook_show(name, inventory)
    render_show(result, stderr_console(wide=True))
    emit_json(result_json(result), to_stdout=json_out, output=None)
    return exit_code_of(result)


@app.command("validate", epilog=examples(("robustctl playbook validate my.yaml", "FILE:LINE errors")))
def validate(
    file: Annotated[Path, typer.Argument(help="The playbook YAML file.")],
    json_out: JsonOpt = False,
) -> int:
    """Validate a playbook strictly: every problem one line FILE:LINE. Exit: 0 valid, 78 not."""
    from robustctl.commands.base import exit_code_of, result_json
    from robustctl.commands.playbook import run_playbook_validate
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.playbook import render_validate

    result = run_playbook_validate(file)
    render_validate(result, stderr_console(wide=True))
    emit_json(result_json(result), to_stdout=json_out, output=None)
    return exit_code_of(result)


@app.command(
    "run",
    epilog=examples(
        (
            "robustctl playbook run hang --job llama70b --dry-run",
            "the tree, and what the first steps would do",
        ),
        ("robustctl playbook run gpu-lost --job llama70b --param hosts=node017 --yes", "evict at once"),
    ),
)
def run(
    name: Annotated[str, typer.Argument(help="A playbook name (see 'playbook list') or a file.")],
    job: JobOpt = None,
    param: Annotated[
        list[str] | None, typer.Option("--param", "-p", help="A parameter, KEY=VALUE (repeatable).")
    ] = None,
    dry_run: PlaybookDryRunOpt = False,
    yes: YesOpt = False,
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    lock_timeout_s: LockTimeoutOpt = None,
    quiet: QuietOpt = False,
    json_out: JsonOpt = False,
) -> int:
    """Run a playbook on a job; every step is journaled in the state store before and after it runs.

    Destructive steps (evict, standby-activate, restart, rollback) need --yes (or the playbook's policy).
    Exit: 0 reached the end, 2 stopped on a refused action or no progress, 3 another failure, 64 usage,
    78 invalid playbook or inventory.
    """
    from robustctl.commands.base import exit_code_of, result_json
    from robustctl.commands.playbook import PlaybookRunRequest, parse_params, run_playbook_run
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.playbook import render_dry_run, render_event, render_run

    console = stderr_console(wide=True)
    req = PlaybookRunRequest(
        name=name,
        params=parse_params(job, param or []),
        inventory=inventory,
        state=state,
        dry_run=dry_run,
        lock_timeout_s=lock_timeout_s,
    )
    result = run_playbook_run(
        req,
        confirm=confirmer(yes),
        show=plan_shower(quiet),
        progress=None if quiet else (lambda ev: render_event(ev, console)),
    )
    from robustctl.commands.playbook import PlaybookDryRunResult

    if isinstance(result, PlaybookDryRunResult):
        if not quiet:
            render_dry_run(result, console)
    else:
        render_run(result, console)
    emit_json(result_json(result), to_stdout=json_out, output=None)
    return exit_code_of(result)


@app.command("resume", epilog=examples(("robustctl playbook resume 12 --yes", "finish run 12")))
def resume(
    run_id: Annotated[
        int, typer.Argument(help="The run's id (printed by 'playbook run').", min=1, max=MAX_RUN_ID)
    ],
    yes: YesOpt = False,
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    lock_timeout_s: LockTimeoutOpt = None,
    quiet: QuietOpt = False,
    json_out: JsonOpt = False,
) -> int:
    """Go on with a run that was killed: finished steps are never repeated; an unfinished destructive
    step whose action the audit log shows finished counts as done. Exit: as 'playbook run'."""
    cli = dict(locals())
    from robustctl.commands.base import exit_code_of, result_json
    from robustctl.commands.playbook import PlaybookResumeRequest, run_playbook_resume
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.playbook import render_event, render_run

    console = stderr_console(wide=True)
    result = run_playbook_resume(
        build_request(PlaybookResumeRequest, cli),
        confirm=confirmer(yes),
        show=plan_shower(quiet),
        progress=None if quiet else (lambda ev: render_event(ev, console)),
    )
    render_run(result, console)
    emit_json(result_json(result), to_stdout=json_out, output=None)
    return exit_code_of(result)
