"""``robustctl sweep``, ``robustctl history`` and ``robustctl lemons``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from robustctl.cli.common import InventoryOpt, JsonOpt, StateOpt
from robustctl.cli.help import examples
from robustctl.commands.base import exit_code_of, result_json

if TYPE_CHECKING:
    from robustctl.commands.sweep import SweepRequest

SWEEP_EXAMPLES = examples(
    ("robustctl sweep -i cluster.yaml", "L0 on every active and standby host; history kept"),
    ("robustctl sweep -i cluster.yaml --act --quiet", "from cron: the policy records suspects or drains"),
    ("robustctl sweep --local --slurm", "as Slurm's HealthCheckProgram: L0 here, drains this node itself"),
)
HISTORY_EXAMPLES = examples(("robustctl history node017 --since 7d", "a host's check changes of a week"))
LEMONS_EXAMPLES = examples(("robustctl lemons --since 30d", "hosts that keep failing or keep coming back"))


HostsOpt = Annotated[
    str | None,
    typer.Option("--hosts", "-H", help="Host range to sweep (default: every host in service)."),
]
"""``--hosts``: restrict the sweep to a host range."""
LevelOpt = Annotated[
    int,
    typer.Option("--level", "-l", min=0, max=3, help="Highest level; above 0 only on hosts no job holds."),
]
"""``--level``: the highest diagnose level (0-3)."""
IncludeBusyOpt = Annotated[
    bool, typer.Option("--include-busy", help="Run levels above 0 on hosts a job holds too (GPU load!).")
]
"""``--include-busy``: deeper levels on hosts a job holds too."""
ActOpt = Annotated[
    bool, typer.Option("--act", help="Apply the policy: record suspects, or drain (sweep.act: drain).")
]
"""``--act``: apply the sweep policy."""
TextfileOpt = Annotated[
    Path | None, typer.Option("--textfile", help="Write a Prometheus textfile there (atomically).")
]
"""``--textfile``: the Prometheus textfile to write."""
HtmlOpt = Annotated[Path | None, typer.Option("--html", help="Write the HTML report there (atomically).")]
"""``--html``: the HTML page to write."""
SweepQuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No table on stderr (warnings still).")]
"""``--quiet``: no table (warnings are still printed)."""
AcceptNewHostKeysOpt = Annotated[
    bool,
    typer.Option("--accept-new-host-keys", help="Record unknown host keys (changed keys are refused)."),
]
"""``--accept-new-host-keys``: as diagnose."""
TransportOpt = Annotated[
    str | None,
    typer.Option(
        "--transport",
        help="Reach every host through ssh, local or srun (one Slurm step for all; host = node name).",
    ),
]
"""``--transport``: reach every host through one transport."""
LocalOpt = Annotated[
    bool, typer.Option("--local", help="Check this node only (L0, no inventory); see --slurm.")
]
"""``--local``: check this node only."""
SlurmOpt = Annotated[
    bool,
    typer.Option(
        "--slurm",
        help="With --local, as Slurm's HealthCheckProgram (45 s budget): drain this node on a "
        "finding, resume it when robustctl's own reason is gone.",
    ),
]
"""``--slurm``: with ``--local``, act as Slurm's health check."""
NodeOpt = Annotated[
    str | None,
    typer.Option(
        "--node", help="With --local: this node's name \\[default: $SLURMD_NODENAME, else hostname -s]."
    ),
]
"""``--node``: with ``--local``, this node's name."""
GpusOpt = Annotated[
    int | None, typer.Option("--gpus", min=0, max=64, help="With --local: GPUs this node must have.")
]
"""``--gpus``: with ``--local``, the GPUs this node must have."""


def sweep(
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    hosts: HostsOpt = None,
    level: LevelOpt = 0,
    include_busy: IncludeBusyOpt = False,
    act: ActOpt = False,
    textfile: TextfileOpt = None,
    html: HtmlOpt = None,
    json_out: JsonOpt = False,
    quiet: SweepQuietOpt = False,
    accept_new_host_keys: AcceptNewHostKeysOpt = False,
    transport: TransportOpt = None,
    local: LocalOpt = False,
    slurm: SlurmOpt = False,
    node: NodeOpt = None,
    gpus: GpusOpt = None,
) -> int:
    """Sweep the fleet: quick checks (L0, no GPU load) on every active, standby, suspect and returned host.

    Every host's checks go to the history in the state store; the sweep: policy (debounce per check
    class) names hosts; --act records them suspect or drains them through evict (rails, audit).
    One sweep at a time: a second one exits 3 at once.
    Exit: 0 healthy, 1 pending findings or warnings, 2 hosts named, 3 hosts not checked or another
    sweep running, 64 usage, 78 config, store or output file.
    """
    if local or slurm or node is not None or gpus is not None:
        given = {
            "--inventory": inventory is not None,
            "--hosts": hosts is not None,
            "--level": level != 0,
            "--include-busy": include_busy,
            "--act": act,
            "--textfile": textfile is not None,
            "--html": html is not None,
            "--transport": transport is not None,
            "--accept-new-host-keys": accept_new_host_keys,
        }
        return _local(
            local=local, slurm=slurm, node=node, gpus=gpus, state=state, json_out=json_out, quiet=quiet,
            given=given,
        )  # fmt: skip
    from robustctl.commands.sweep import sweep_request

    request = sweep_request(
        inventory=inventory,
        state=state,
        hosts=hosts,
        level=level,
        include_busy=include_busy,
        act=act,
        textfile=textfile,
        html=html,
        accept_new_host_keys=accept_new_host_keys,
        transport=transport,
    )
    return _fleet(request, json_out=json_out, quiet=quiet)


def _fleet(request: SweepRequest, *, json_out: bool, quiet: bool) -> int:
    """Run the sweep, write its textfile and page, render it, print its JSON; the exit code."""
    from robustctl.commands.sweep import run_sweep
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.progress import RichProgress
    from robustctl.report.sweep import render_sweep, write_sweep_files

    console = stderr_console(wide=True)
    result = run_sweep(request, progress=RichProgress(console, enabled=not quiet))
    write_sweep_files(request, result)
    render_sweep(result, console, quiet=quiet)
    if json_out:
        emit_json(result_json(result), to_stdout=True, output=None)
    return exit_code_of(result)


def _local(
    *,
    local: bool,
    slurm: bool,
    node: str | None,
    gpus: int | None,
    state: Path | None,
    json_out: bool,
    quiet: bool,
    given: dict[str, bool],
) -> int:
    """``sweep --local [--slurm]``: refuse the fleet options (they cannot take effect), then check."""
    from robustctl.commands.sweep import local_request, run_local
    from robustctl.errors import UsageError
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.sweep import render_local

    if not local:
        flag = "--slurm" if slurm else "--node" if node is not None else "--gpus"
        raise UsageError(f"{flag} needs --local (it checks this node only)")
    refused = [flag for flag, on in given.items() if on]
    if refused:
        raise UsageError(f"{refused[0]} cannot take effect with --local (it checks this node only)")
    result = run_local(local_request(node=node, slurm=slurm, gpus=gpus, state=state))
    render_local(result, stderr_console(wide=True), quiet=quiet)
    if json_out:
        emit_json(result_json(result), to_stdout=True, output=None)
    return exit_code_of(result)


def _since(text: str) -> float:
    from robustctl.commands.options import parse_duration

    seconds = parse_duration(text)
    if seconds > 3650 * 86_400:
        from robustctl.errors import UsageError

        raise UsageError(f"bad --since {text!r}: at most 3650d")
    return seconds


def history(
    host: Annotated[str, typer.Argument(help="The host.")],
    since: Annotated[str, typer.Option("--since", help="How far back, e.g. 24h, 7d, 4w.")] = "7d",
    state: StateOpt = None,
    json_out: JsonOpt = False,
) -> int:
    """A host's sweep and diagnose history: counters, each check now, and every state change.

    Nothing is written; a missing store is an empty history. Exit: 0, 64 usage, 78 unreadable store.
    """
    from robustctl.commands.history import HistoryRequest, run_history
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.sweep import render_history

    result = run_history(HistoryRequest(host, _since(since), state))
    if json_out:
        emit_json(result_json(result), to_stdout=True, output=None)
    else:
        render_history(result, stderr_console(wide=True))
    return exit_code_of(result)


def lemons(
    inventory: InventoryOpt = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Window, e.g. 30d \\[default: sweep.lemon_days].")
    ] = None,
    failures: Annotated[
        int | None, typer.Option("--failures", min=1, max=10_000, help="Failures that make a lemon.")
    ] = None,
    returns: Annotated[
        int | None,
        typer.Option("--returns", min=1, max=10_000, help="Evict-and-return cycles that make one."),
    ] = None,
    state: StateOpt = None,
    json_out: JsonOpt = False,
) -> int:
    """Hosts that keep failing (>= N failures) or keep coming back (evicted and returned >= K times).

    Defaults from the inventory's sweep: section (3 failures or 2 returns in 30 days; Kokolis et al.,
    HPCA 2025). Nothing is written. Exit: 0, 64 usage, 78 unreadable store or inventory.
    """
    from robustctl.commands import options
    from robustctl.commands.history import LemonsRequest, run_lemons
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.sweep import render_lemons

    request = LemonsRequest(
        since_s=_since(since) if since is not None else None,
        min_failures=failures,
        min_returns=returns,
        inventory=options.inventory_if_given(inventory),
        state=state,
    )
    result = run_lemons(request)
    if json_out:
        emit_json(result_json(result), to_stdout=True, output=None)
    else:
        render_lemons(result, stderr_console(wide=True))
    return exit_code_of(result)
