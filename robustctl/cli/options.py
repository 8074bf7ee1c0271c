"""Every option more than one command takes, declared once, and the request built from the parsed values.

Each shared option is an ``Annotated[type, typer.Option(...)]`` alias: its flag names, help text,
bounds and environment variable live here and nowhere else, and a command takes it by naming the alias
in its signature (``state: StateOpt = None``). The default stays in the signature, where typer reads
it. The action commands (evict, return, standby add/activate, restart, stop, update stage/apply,
rollback, playbook run/resume) share the bundle :data:`ACTION_OPTIONS`.

A command whose parameters are the fields of its request builds the request with
:func:`build_request` (``build_request(EvictRequest, cli)``, ``cli`` the parameters by name), so that
adding an option means declaring it in the signature and in the request dataclass only. The Python
name of a parameter is the request's field name (``lock_timeout_s``, the value of ``--lock-timeout``);
the flag names are given explicitly, so the name shows nowhere in ``--help``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from robustctl.errors import UsageError

__all__ = [
    "ACTION_OPTIONS",
    "CLI_ONLY_OPTIONS",
    "MAX_LOCK_TIMEOUT_S",
    "AuditReasonOpt",
    "ConcurrencyOpt",
    "DryRunOpt",
    "ForceOpt",
    "ForceReasonOpt",
    "InventoryJobOpt",
    "InventoryOpt",
    "JsonOpt",
    "LockTimeoutOpt",
    "NoRecordOpt",
    "OutputOpt",
    "QuietOpt",
    "QuietProgressOpt",
    "StateOpt",
    "YesOpt",
    "build_request",
]

MAX_LOCK_TIMEOUT_S = 3600
"""Longest ``--lock-timeout``, seconds. An action waits for another robustctl holding the store's lock
only as long as that one takes to apply a plan (minutes at most: a drain, a restart); an hour bounds a
typo such as ``--lock-timeout 36000`` without refusing any wait an operator would mean."""

InventoryOpt = Annotated[
    Path | None,
    typer.Option(
        "--inventory",
        "-i",
        help="Inventory YAML (default: $ROBUSTCTL_INVENTORY, else this machine through the local transport).",
        show_default=False,
    ),
]
"""``-i/--inventory``: the inventory file (None: ``$ROBUSTCTL_INVENTORY``, else this machine)."""

StateOpt = Annotated[
    Path | None,
    typer.Option(
        "--state",
        help="State store (SQLite) \\[default: $ROBUSTCTL_STATE, else $XDG_STATE_HOME/robustctl/state.db].",
        show_default=False,
    ),
]
"""``--state``: the state store (None: ``$ROBUSTCTL_STATE``, else the XDG default)."""

JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as one JSON document on stdout.")]
"""``--json``: the result document on stdout."""

OutputOpt = Annotated[
    Path | None, typer.Option("--output", "-o", help="Also write the JSON document to this file.")
]
"""``-o/--output``: also write the result document to this file."""

NoRecordOpt = Annotated[
    bool,
    typer.Option("--no-record", help="Do not record the suspects in the state store (write nothing)."),
]
"""``--no-record``: the suspects a diagnosis names are not written to the state store."""

QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No table on stderr.")]
"""``-q/--quiet`` of the commands that render one table (or an action's plan and outcome)."""

QuietProgressOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No table or progress on stderr.")]
"""``-q/--quiet`` of the commands that also show progress while they run (diagnose, replay-sdc)."""

InventoryJobOpt = Annotated[
    str,
    typer.Option("--job", "-j", help="Job name from the inventory's jobs: section.", show_default=False),
]
"""``-j/--job`` (required): a job of the inventory's ``jobs:`` section (stacks, ckpt status)."""

ConcurrencyOpt = Annotated[
    int | None,
    typer.Option("--concurrency", "-c", min=1, help="Hosts contacted at once \\[default: 64]."),
]
"""``-c/--concurrency``: hosts contacted at once (None: the ``diagnose:`` settings)."""

YesOpt = Annotated[
    bool, typer.Option("--yes", "-y", help="Apply without asking (required without a terminal).")
]
"""``-y/--yes``: apply the plan without asking."""

DryRunOpt = Annotated[
    bool,
    typer.Option(
        "--dry-run", help="Print the plan apply would run (with --json: the plan document); change nothing."
    ),
]
"""``--dry-run`` of an action: the plan only."""

LockTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--lock-timeout",
        min=0,
        max=MAX_LOCK_TIMEOUT_S,
        help="Seconds to wait for another robustctl acting on the store \\[default: policy, 30].",
    ),
]
"""``--lock-timeout``: seconds to wait for the store's lock (None: the inventory's policy)."""

ForceOpt = Annotated[
    bool,
    typer.Option("--force", help="Override the failing safety rails that allow it (needs --force-reason)."),
]
"""``--force``: override the safety rails that allow it."""

ForceReasonOpt = Annotated[
    str | None,
    typer.Option("--force-reason", help="Why the rails are overridden (recorded in the audit log)."),
]
"""``--force-reason``: why the rails are overridden."""

AuditReasonOpt = Annotated[str, typer.Option("--reason", help="Why (recorded in the audit log).")]
"""``--reason`` of the actions whose reason goes to the audit log only (the default is the command's)."""

ACTION_OPTIONS: Mapping[str, object] = {
    "inventory": InventoryOpt,
    "state": StateOpt,
    "yes": YesOpt,
    "dry_run": DryRunOpt,
    "json_out": JsonOpt,
    "lock_timeout_s": LockTimeoutOpt,
    "quiet": QuietOpt,
    "force": ForceOpt,
    "force_reason": ForceReasonOpt,
}
"""The action option bundle: parameter name → the alias every action command declares it with.

Every action command takes the session options (inventory, state, yes, json_out, lock_timeout_s,
quiet; dry_run where a plan can be shown without applying it); the ones whose safety rails can be
overridden take force and force_reason too. ``tests/unit/test_cli_options.py`` checks that each action
command declares every one it takes with the very object named here."""

CLI_ONLY_OPTIONS: frozenset[str] = frozenset({"yes", "json_out", "quiet"})
"""Parameters the CLI itself consumes (how to confirm, where the document goes, what is rendered): no
request has a field for them, so :func:`build_request` passes over them."""

_R = TypeVar("_R")


def build_request(cls: type[_R], cli: Mapping[str, Any], /, **given: Any) -> _R:
    """The request dataclass ``cls`` with each field taken, by name, from the parsed CLI values.

    ``cli`` holds the command's parameters by name (``cli = dict(locals())``, the first statement of
    the command). A field whose value the command computes from its parameter of the same name
    (``inventory=options.inventory_if_given(inventory)``) is passed in ``given``, which wins over
    ``cli``. A command whose parameters do not map one to one onto its request's fields builds the
    request explicitly instead.

    Args:
        cls: a dataclass whose fields are the request's (``EvictRequest``).
        cli: the command's parameters by name; those of :data:`CLI_ONLY_OPTIONS` are passed over.
        **given: fields computed by the command.

    Returns:
        ``cls(**fields)``.

    Raises:
        UsageError: ``cls`` is not a dataclass, a parameter or a ``given`` name is not a field of
            ``cls`` (unknown), or a field is neither in ``cli`` nor in ``given`` (missing). Each is a
            mistake in the command's declaration that any run of the command finds; no user input
            leads here.
    """
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise UsageError(f"build_request: {cls!r} is not a request dataclass")
    fields = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = sorted((set(cli) - CLI_ONLY_OPTIONS - set(fields)) | (set(given) - set(fields)))
    if unknown:
        raise UsageError(f"build_request: {cls.__name__} has no field {', '.join(map(repr, unknown))}")
    values = {name: cli[name] for name in fields if name in cli} | given
    missing = [name for name in fields if name not in values]
    if missing:
        raise UsageError(f"build_request: {cls.__name__} field {', '.join(map(repr, missing))} not given")
    return cls(**values)
