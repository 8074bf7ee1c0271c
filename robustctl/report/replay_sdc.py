"""Rendering of ``robustctl replay-sdc``: the verdict, both phases' groups, and the plan (stderr)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.table import Table

from robustctl.inventory.hostrange import collapse
from robustctl.report.console import as_text, escape

if TYPE_CHECKING:
    from rich.console import Console

    from robustctl.commands.replay_sdc import ReplaySdcResult
    from robustctl.sdc.verdict import GroupRun

STATE_STYLE = {"healthy": "green", "faulty": "bold red", "failed_to_run": "magenta", "undecided": "yellow"}
VERDICT_STYLE = {"isolated": "bold red", "candidates": "bold red", "not_reproduced": "yellow", "failed_to_run": "magenta"}  # fmt: skip


def _layout(doc: Mapping[str, Any]) -> str:
    r = doc["replay"]
    return (
        f"{doc['machines']} machines, k={doc['k']} ({doc['k_chosen_by']}): {doc['n']} groups of m={doc['m']} "
        f"machines per phase, each replaying tp={r['tp']} pp={r['pp']} dp={r['dp']} for {doc['steps']} steps "
        f"({doc['workload']} workload)"
    )


def print_plan(plan: Mapping[str, Any], console: Console) -> None:
    """The ``--plan`` view: layout, both phases' groups, cost."""
    console.print(as_text(_layout(plan)), highlight=False, soft_wrap=True)
    for phase in plan["phases"]:
        table = Table(title=f"phase {phase['phase']} ({phase['kind']})", show_edge=False)
        table.add_column("group")
        table.add_column("machines")
        table.add_column("hosts")
        for g in phase["groups"]:
            table.add_row(
                as_text(g["name"]), as_text(",".join(map(str, g["machines"]))), as_text(collapse(g["hosts"]))
            )
        console.print(table)
    cost = plan["cost"]
    console.print(
        as_text(
            f"cost: 2 rounds (bisection would need {cost['rounds']['bisection']}), {cost['groups_per_round']} "
            f"groups per round, {cost['groups_at_once']} at once, {cost['machine_runs']} machine runs; "
            f"each group within {cost['group_timeout_s']:g} s, each round within {cost['round_deadline_s']:g} s"
        ),
        highlight=False,
        soft_wrap=True,
    )


def render_group_done(run: GroupRun, console: Console) -> None:
    """One progress line as a group finishes."""
    what = f"digest {run.digest[:12]}" if run.ran and run.digest else f"did not run: {run.error}"
    console.print(
        f"  {escape(run.name)} ({run.elapsed_s:.1f} s): {escape(what)}", highlight=False, soft_wrap=True
    )


def render_result(result: ReplaySdcResult, console: Console) -> None:
    """Both phases' groups, then the verdict and its notes."""
    console.print(as_text(_layout(result.grouping)), highlight=False, soft_wrap=True)
    for rnd, pj in zip(result.rounds, result.verdict.phases, strict=True):
        table = Table(title=f"phase {pj.phase}: {rnd.elapsed_s:.1f} s", show_edge=False)
        for col in ("group", "hosts", "state", "digest", "s", "reason"):
            table.add_column(col)
        for g in pj.groups:
            style = STATE_STYLE[g.state.value]
            table.add_row(
                as_text(g.run.name),
                as_text(collapse(result.names(g.run.machines))),
                f"[{style}]{g.state.value}[/]",
                as_text((g.run.digest or "-")[:12]),
                f"{g.run.elapsed_s:.1f}",
                as_text(g.reason),
            )
        console.print(table)
    v = result.verdict
    style = VERDICT_STYLE[v.verdict.value]
    line = f"[{style}]{v.verdict.value}[/]"
    if v.machines:
        line += f": {escape(collapse(result.names(v.machines)))}"
    if v.verdict.value == "candidates":
        line += f" (over-evict: {escape(collapse(result.names(v.over_evict)))})"
    console.print(line, highlight=False, soft_wrap=True)
    for note in v.notes:
        console.print(f"  {escape(note)}", highlight=False, soft_wrap=True)
