"""``robustctl ettr``: a job's effective training time ratio and where the rest of the time went."""

from __future__ import annotations

from typing import Annotated

import typer

from robustctl.cli.help import examples
from robustctl.cli.options import InventoryOpt, JsonOpt, StateOpt
from robustctl.commands.base import exit_code_of, result_json

EXAMPLES = examples(
    ("robustctl ettr -i cluster.yaml --job llama", "ETTR since the watcher's first record, by cause"),
    ("robustctl ettr -i cluster.yaml --job llama --since 7d --window 6h", "the last week; a 6 h window"),
    ("robustctl ettr -i cluster.yaml --job llama --json | jq .incidents", "one row per incident as JSON"),
)
ETTR_EXAMPLES = EXAMPLES


def _seconds(flag: str, text: str) -> float:
    """``text`` (``24h``, ``7d``: the parser of ``history --since``) as seconds, at most 3650d."""
    from robustctl.commands.ettr import MAX_WINDOW_S
    from robustctl.commands.options import parse_duration
    from robustctl.errors import UsageError

    seconds = parse_duration(text)
    if not 0 < seconds <= MAX_WINDOW_S:
        raise UsageError(f"bad {flag} {text!r:.40}: more than 0 and at most 3650d")
    return seconds


def ettr(
    job: Annotated[str, typer.Option("--job", "-j", help="The job (a job of the inventory).")],
    inventory: InventoryOpt = None,
    window: Annotated[
        str, typer.Option("--window", "-w", help="Sliding window of the second ETTR, e.g. 6h, 24h, 7d.")
    ] = "24h",
    since: Annotated[
        str | None,
        typer.Option(
            "--since", help="Only this long back, e.g. 7d \\[default: since the job's first record]."
        ),
    ] = None,
    state: StateOpt = None,
    json_out: JsonOpt = False,
) -> int:
    """ETTR of a job from what robustctl watch recorded: cumulative and over a sliding window,
    the unproductive time by cause, and one row per incident (onset, class, playbook, MTTR,
    machines evicted).

    Nothing is written. Exit: 0 a ledger, 3 no data (never shown as ETTR 100%), 64 usage, 78 config.
    """
    from robustctl.commands import options
    from robustctl.commands.ettr import EttrRequest, run_ettr
    from robustctl.report.console import emit_json, stderr_console
    from robustctl.report.ettr import render_ettr

    request = EttrRequest(
        job=job,
        inventory=options.inventory_if_given(inventory),
        state=state,
        window_s=_seconds("--window", window),
        since_s=None if since is None else _seconds("--since", since),
    )
    result = run_ettr(request)
    if json_out:
        emit_json(result_json(result), to_stdout=True, output=None)
    else:
        render_ettr(result, stderr_console(wide=True))
    return exit_code_of(result)
