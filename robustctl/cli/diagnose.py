"""``robustctl diagnose``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from robustctl.cli.common import State
from robustctl.cli.help import examples
from robustctl.cli.options import (
    ConcurrencyOpt,
    InventoryOpt,
    JsonOpt,
    NoRecordOpt,
    OutputOpt,
    QuietProgressOpt,
    StateOpt,
)
from robustctl.commands.base import exit_code_of, result_json

if TYPE_CHECKING:
    from pathlib import Path

    from robustctl.commands.diagnose import DiagnoseRequest

EXAMPLES = examples(
    ("robustctl diagnose --dry-run", "hosts, levels and each host's command; connects to nothing"),
    ("robustctl diagnose --level 0 --json", "quick checks of this machine, JSON on stdout"),
    ("robustctl diagnose -i cluster.yaml --hosts 'node[001-064]' -l 2", "L0-L2 on 64 hosts over SSH"),
)

HostsOpt = Annotated[
    str | None,
    typer.Option(
        "--hosts", "-H", help="Host range to check, e.g. 'node[001-064]' (default: every active host)."
    ),
]
"""``-H/--hosts``: the hosts to check (None: every active host)."""
LevelOpt = Annotated[
    int,
    typer.Option(
        "--level",
        "-l",
        min=0,
        max=4,
        help=(
            "Highest level to run: 0 quick, 1 burn, 2 intra-host all-reduce, 3 inter-host all-reduce, "
            "4 bitwise alignment (one reference training step per host, asked for explicitly)."
        ),
    ),
]
"""``-l/--level``: the highest level of the ladder (L0-L4; L4 only when asked for)."""
AllLevelsOpt = Annotated[
    bool, typer.Option("--all-levels", help="Do not stop at the first level that names suspects.")
]
"""``--all-levels``: run every level up to ``--level``."""
HostTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--host-timeout",
        min=0.1,
        max=86400,
        help="Per-host, per-level deadline in seconds, at most a day \\[default: 120].",
    ),
]
"""``--host-timeout``: the per-host, per-level deadline, seconds (None: the ``diagnose:`` settings)."""
DeadlineOpt = Annotated[
    float | None,
    typer.Option(
        "--deadline",
        min=0.1,
        max=86400,
        help="Deadline of the whole run in seconds, at most a day \\[default: 900].",
    ),
]
"""``--deadline``: the deadline of the whole run, seconds (None: the ``diagnose:`` settings)."""
BurnSecondsOpt = Annotated[
    float | None,
    typer.Option(
        "--burn-seconds",
        min=0.1,
        max=86400,
        help="L1 load per device, seconds, at most a day \\[default: 10].",
    ),
]
"""``--burn-seconds``: the L1 load per device, seconds (None: the ``diagnose:`` settings)."""
AcceptNewHostKeysOpt = Annotated[
    bool,
    typer.Option(
        "--accept-new-host-keys",
        help="Record unknown host keys in known_hosts (like OpenSSH accept-new); changed keys are still refused.",
    ),
]
"""``--accept-new-host-keys``: trust on first use, as OpenSSH's ``accept-new``."""
DryRunOpt = Annotated[
    bool,
    typer.Option(
        "--dry-run", help="Print the hosts, levels and commands that would run; connect to nothing."
    ),
]
"""``--dry-run`` of diagnose: the plan, no host contacted."""


def diagnose(
    inventory: InventoryOpt = None,
    hosts: HostsOpt = None,
    level: LevelOpt = 3,
    all_levels: AllLevelsOpt = False,
    json_out: JsonOpt = False,
    output: OutputOpt = None,
    concurrency: ConcurrencyOpt = None,
    host_timeout: HostTimeoutOpt = None,
    deadline: DeadlineOpt = None,
    burn_seconds: BurnSecondsOpt = None,
    accept_new_host_keys: AcceptNewHostKeysOpt = False,
    dry_run: DryRunOpt = False,
    quiet: QuietProgressOpt = False,
    state: StateOpt = None,
    no_record: NoRecordOpt = False,
) -> int:
    """Run hierarchical stop-time diagnostics and name the suspect hosts.

    Levels: L0 quick host/GPU checks → L1 verified burn → L2 intra-host all-reduce → L3 inter-host
    all-reduce between neighbour pairs; with --level 4, L4 bitwise alignment (one reference training
    step per host, a digest that differs from the majority's names the host; needs 3 hosts).
    Stops at the first level that names suspects.
    The suspects (critical hosts) are recorded as suspect in the state store, and suspects verified
    healthy at every level up to --level are set back to active (unless --no-record; never evicted or
    standby hosts); the --json document's 'recorded' says what (null with --no-record). The store is
    best effort: if it cannot be written, one warning line, and the same report and exit code.
    Exit: 0 healthy, 1 warning, 2 suspects found, 3 some hosts could not be checked, 64 usage, 78 config.
    """
    from robustctl.commands.diagnose import diagnose_request

    request = diagnose_request(
        inventory=inventory,
        hosts=hosts,
        level=level,
        all_levels=all_levels,
        concurrency=concurrency,
        host_timeout_s=host_timeout,
        deadline_s=deadline,
        burn_seconds=burn_seconds,
        accept_new_host_keys=accept_new_host_keys,
        state=state,
        record=not no_record,
    )
    if dry_run:
        return _plan(request, quiet=quiet, json_out=json_out, output=output)
    return _run(request, quiet=quiet, json_out=json_out, output=output)


def _plan(request: DiagnoseRequest, *, quiet: bool, json_out: bool, output: Path | None) -> int:
    """``--dry-run``: print the hosts, levels and commands (unless quiet), emit the plan document."""
    from robustctl.commands.diagnose import plan_diagnose
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.diagnose import print_plan

    plan = plan_diagnose(request)
    if not quiet:
        print_plan(dict(plan.plan), stderr_console())
    emit_json(result_json(plan), to_stdout=json_out, output=output)
    return exit_code_of(plan)


def _run(request: DiagnoseRequest, *, quiet: bool, json_out: bool, output: Path | None) -> int:
    """Run the ladder with progress on stderr, render the report and what was recorded, emit the document."""
    from robustctl.commands.diagnose import run_diagnose
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.diagnose import render_run
    from robustctl.report.progress import RichProgress
    from robustctl.report.record import render_recorded

    console = stderr_console()
    result = run_diagnose(request, progress=RichProgress(console, enabled=not quiet))
    if not quiet:
        render_run(result.report, console, verbose=State.verbose > 0)
    render_recorded(result.recorded, console, quiet=quiet)
    emit_json(result_json(result), to_stdout=json_out, output=output)
    return exit_code_of(result)
