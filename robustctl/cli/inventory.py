"""``robustctl inventory validate|show``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from robustctl.cli.common import JsonOpt
from robustctl.exit_codes import ExitCode

app = typer.Typer(help="Validate and inspect inventory files.", no_args_is_help=True)


@app.command("validate")
def validate(
    path: Annotated[Path, typer.Argument(help="Inventory YAML file.", show_default=False)],
    json_out: JsonOpt = False,
) -> int:
    """Strictly validate an inventory: unknown keys, bad host ranges and names are errors with FILE:LINE.

    Exit: 0 valid, 78 invalid.
    """
    from robustctl.inventory import load_inventory
    from robustctl.report.console import emit_json, stderr_console

    inv = load_inventory(path)
    counts: dict[str, int] = {}
    for h in inv.hosts:
        counts[h.state.value] = counts.get(h.state.value, 0) + 1
    if json_out:
        emit_json(
            {"kind": "inventory-validate", "file": str(path), "valid": True, "hosts": counts},
            to_stdout=True,
            output=None,
        )
    else:
        parts = ", ".join(f"{n} {s}" for s, n in counts.items())
        stderr_console().print(f"{path}: valid, {len(inv.hosts)} host(s) ({parts})")
    return int(ExitCode.OK)


@app.command("show")
def show(
    path: Annotated[Path, typer.Argument(help="Inventory YAML file.", show_default=False)],
    hosts: Annotated[str | None, typer.Option("--hosts", "-H", help="Host range to show.")] = None,
    json_out: JsonOpt = False,
) -> int:
    """List the hosts of an inventory with their effective address, transport, user, port and state."""
    from rich.table import Table

    from robustctl.config import HostState
    from robustctl.inventory import load_inventory
    from robustctl.report.console import emit_json, stderr_console

    inv = load_inventory(path)
    selected = inv.select(hosts, states=list(HostState)) if hosts else list(inv.hosts)
    rows = [
        {
            "host": h.name,
            "address": h.address,
            "transport": h.transport,
            "user": h.ssh.user,
            "port": h.ssh.port,
            "gpus": h.gpus,
            "state": h.state.value,
            "labels": h.labels,
        }
        for h in selected
    ]
    if json_out:
        emit_json({"kind": "inventory", "file": str(path), "hosts": rows}, to_stdout=True, output=None)
        return int(ExitCode.OK)
    table = Table()
    for col in ("host", "address", "transport", "user", "port", "gpus", "state", "labels"):
        table.add_column(col)
    for r in rows:
        labels = r["labels"]
        assert isinstance(labels, dict)
        table.add_row(
            *(
                str(r[c]) if r[c] is not None else "-"
                for c in ("host", "address", "transport", "user", "port", "gpus", "state")
            ),
            ",".join(f"{k}={v}" for k, v in labels.items()),
        )
    stderr_console().print(table)
    return int(ExitCode.OK)
