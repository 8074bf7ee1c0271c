"""``robustctl audit``: every action robustctl applied (or refused), from the state store."""

from __future__ import annotations

import re
from typing import Annotated

import typer

from robustctl.cli.common import JsonOpt, StateOpt
from robustctl.errors import UsageError
from robustctl.exit_codes import ExitCode

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str) -> float:
    """``"90s"``, ``"30m"``, ``"24h"``, ``"7d"``, ``"2w"`` or plain seconds → seconds. Raises UsageError."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text.lower())
    if not m:
        raise UsageError(f"bad duration {text!r}: expected e.g. 90s, 30m, 24h, 7d")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


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
    import datetime
    import json
    import sys
    import time

    from rich.table import Table

    from robustctl.models import SCHEMA_VERSION, to_jsonable
    from robustctl.report.console import stderr_console
    from robustctl.store import Store

    cutoff = time.time() - parse_duration(since) if since else None
    with Store.open(state) as store:
        records = store.audit(since=cutoff)
    if json_out:
        doc = {"kind": "audit", "schema_version": SCHEMA_VERSION, "records": to_jsonable(records)}
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        return int(ExitCode.OK)
    table = Table(title=f"audit log: {len(records)} record(s)", title_justify="left")
    for col in ("id", "started (UTC)", "who", "action", "targets", "status", "steps", "reason"):
        table.add_column(col)
    for r in records:
        when = datetime.datetime.fromtimestamp(r.started_at, datetime.timezone.utc).strftime(
            "%Y-%m-%d %H:%M:%S"
        )
        done = sum(s.status in ("done", "noop") for s in r.steps)
        running = [s.index for s in r.steps if s.status == "running"]
        steps = f"{done}/{len(r.plan.get('steps', [])) if r.plan else len(r.steps)}"
        if running:
            steps += f" (step {running[0]} was running)"
        targets = ", ".join(r.targets[:4]) + (f" +{len(r.targets) - 4}" if len(r.targets) > 4 else "")
        status = r.status
        if status == "started" and _gone(r.who, r.pid):
            status = f"incomplete (pid {r.pid} is gone)"
        table.add_row(str(r.id), when, r.who, r.action, targets, status, steps, r.reason)
    stderr_console().print(table)
    return int(ExitCode.OK)


def _gone(who: str, pid: int) -> bool:
    """True when ``pid`` ran on this host and no longer exists (a killed action)."""
    import os

    from robustctl.store import whoami

    if who.split("@")[-1] != whoami().split("@")[-1]:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False
