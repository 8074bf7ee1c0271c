"""``robustctl hosts``: the hosts that are suspect, evicted or standby, and why."""

from __future__ import annotations

from typing import Annotated

import typer

from robustctl.cli.help import examples
from robustctl.cli.options import InventoryOpt, JsonOpt, StateOpt, build_request
from robustctl.commands.base import exit_code_of, result_json

EXAMPLES = examples(
    ("robustctl hosts", "suspect, evicted and standby hosts with their last finding"),
    ("robustctl hosts -i cluster.yaml --all", "every host of the inventory and its state"),
    ("robustctl hosts --json", "the same as one JSON document"),
)


def hosts(
    inventory: InventoryOpt = None,
    state: StateOpt = None,
    include_active: Annotated[
        bool, typer.Option("--all", "-a", help="Also list active (and returned) hosts.")
    ] = False,
    json_out: JsonOpt = False,
) -> int:
    """List the hosts that are suspect, evicted or standby: state, since when, reason and last finding.

    A host's state is the state store's when robustctl changed it (diagnose and stacks mark
    suspects; evict, return and standby the rest), else its inventory state (with -i or
    $ROBUSTCTL_INVENTORY; without, the store alone). 'last finding' is the
    last reason the host was named suspect. Nothing is written; a missing store is empty. Exit: 0,
    78 unreadable store or invalid inventory.
    """
    cli = dict(locals())
    from robustctl.commands import options
    from robustctl.commands.hosts import HostsRequest, run_hosts
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.hosts import render_hosts

    result = run_hosts(build_request(HostsRequest, cli, inventory=options.inventory_if_given(inventory)))
    if json_out:
        emit_json(result_json(result), to_stdout=True, output=None)
    else:
        render_hosts(result, stderr_console(wide=True))
    return exit_code_of(result)
