"""``robustctl inventory validate|show``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from robustctl.cli.help import examples
from robustctl.cli.options import JsonOpt, build_request
from robustctl.commands.base import exit_code_of, result_json

app = typer.Typer(
    help="Validate and inspect inventory files.",
    no_args_is_help=True,
    epilog=examples(
        ("robustctl inventory validate cluster.yaml", "strict validation, errors with FILE:LINE"),
        ("robustctl inventory show cluster.yaml --hosts 'node[001-004]'", "effective address, user, port"),
    ),
)
PathArg = Annotated[Path, typer.Argument(help="Inventory YAML file.", show_default=False)]


@app.command(
    "validate",
    epilog=examples(
        ("robustctl inventory validate cluster.yaml", "strict validation, errors with FILE:LINE"),
        ("robustctl inventory validate cluster.yaml --json", "host counts per state as JSON"),
    ),
)
def validate(path: PathArg, json_out: JsonOpt = False) -> int:
    """Strictly validate an inventory: unknown keys, bad host ranges and names are errors with FILE:LINE.

    Exit: 0 valid, 78 invalid.
    """
    cli = dict(locals())
    from robustctl.commands.inventory import InventoryValidateRequest, run_inventory_validate
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.inventory import render_validation

    result = run_inventory_validate(build_request(InventoryValidateRequest, cli))
    if json_out:
        emit_json(result_json(result), to_stdout=True, output=None)
    else:
        render_validation(result, stderr_console())
    return exit_code_of(result)


@app.command(
    "show",
    epilog=examples(
        ("robustctl inventory show cluster.yaml", "every host with its effective settings"),
        ("robustctl inventory show cluster.yaml --hosts 'node[001-004]' --json", "four hosts as JSON"),
    ),
)
def show(
    path: PathArg,
    hosts: Annotated[str | None, typer.Option("--hosts", "-H", help="Host range to show.")] = None,
    json_out: JsonOpt = False,
) -> int:
    """List the hosts of an inventory with their effective address, transport, user, port and state."""
    cli = dict(locals())
    from robustctl.commands.inventory import InventoryShowRequest, run_inventory_show
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.inventory import render_inventory

    result = run_inventory_show(build_request(InventoryShowRequest, cli))
    if json_out:
        emit_json(result_json(result), to_stdout=True, output=None)
    else:
        render_inventory(result, stderr_console())
    return exit_code_of(result)
