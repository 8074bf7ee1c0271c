"""Rich rendering of ``robustctl ckpt status``.

Everything that came from the inventory or a host (directory, host names, shard errors) is escaped
before rich renders it.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from robustctl.commands.ckpt import CkptStatusResult
from robustctl.inventory.hostrange import compact_ranges
from robustctl.report.console import escape

__all__ = ["render_ckpt_status"]

MAX_ROWS = 64
"""Iterations shown in the table (the JSON document has them all)."""
MAX_PLACES = 32
"""Host sets shown under "where each rank's shards live"."""


def _ranks(ranks: list[int]) -> str:
    text = compact_ranges(ranks)
    return text if len(text) <= 60 else text[:57] + "..."


def render_ckpt_status(result: CkptStatusResult, console: Console) -> None:
    """The iterations table, where each rank's shards live, tracker vs newest complete, the layout
    check, hosts not read and notes."""
    kind = "shared" if result.shared else "per host"
    console.print(
        f"job {escape(result.job)}: checkpoints in {escape(result.dir)} ({kind}, {escape(result.shards)} "
        f"shards, {result.needed} per iteration) on {len(result.hosts)} host(s) from the {result.hosts_source}"
    )
    if result.hosts_note:
        console.print(f"note: {escape(result.hosts_note)}")
    table = Table(title="iterations (newest first)", title_justify="left")
    for col in ("iteration", "complete", "shards", "missing", "unreadable", ""):
        table.add_column(col)
    for it in result.iterations[:MAX_ROWS]:
        mark = []
        if it.iteration == result.tracker:
            mark.append("tracker")
        if it.iteration == result.newest_complete:
            mark.append("newest complete")
        unreadable = ", ".join(f"{u['rank']}@{u['host']}" for u in it.unreadable[:4])
        if it.n_unreadable > 4:
            unreadable += f" (+{it.n_unreadable - 4})"
        table.add_row(
            str(it.iteration),
            "[green]yes[/]" if it.complete else "[bold red]no[/]",
            f"{it.present}/{result.needed}",
            _ranks(list(it.missing)) or "-",
            escape(unreadable) or "-",
            ", ".join(mark),
        )
    if len(result.iterations) > MAX_ROWS:
        table.caption = f"{len(result.iterations) - MAX_ROWS} older iteration(s) in --json"
    console.print(table)
    if result.locations_iteration is not None and result.locations:
        places: dict[tuple[str, ...], list[int]] = {}
        for loc in result.locations:
            hosts = loc["hosts"]
            rank = loc["rank"]
            if isinstance(hosts, list) and isinstance(rank, int):
                places.setdefault(tuple(str(h) for h in hosts), []).append(rank)
        console.print(f"where each rank's shards live (iteration {result.locations_iteration}):")
        for hosts, ranks in list(places.items())[:MAX_PLACES]:
            word = "rank" if len(ranks) == 1 else "ranks"
            console.print(f"  {word} {_ranks(ranks)}: {escape(', '.join(hosts))}")
        if len(places) > MAX_PLACES:
            console.print(f"  ... {len(places) - MAX_PLACES} more host sets in --json")
    for u in result.unread:
        console.print(f"[yellow]not read[/] {escape(u['host'])}: {escape(u['error'])}")
    if result.tracker_note:
        console.print(f"note: {escape(result.tracker_note)}")
    if result.newest_complete is None:
        console.print("[bold red]no complete iteration[/]: a restart has no checkpoint to load")
    elif result.pick:
        style = "green" if result.tracker == result.newest_complete else "yellow"
        console.print(f"[{style}]restart[/]: {escape(result.pick)}")
    if result.layout_checked:
        if result.layout_note:
            console.print(f"layout: {escape(result.layout_note)}")
        for v in result.violations[:MAX_PLACES]:
            console.print(f"[yellow]layout[/] {escape(v.detail)}")
        if len(result.violations) > MAX_PLACES:
            console.print(f"  ... {len(result.violations) - MAX_PLACES} more in --json")
        if not result.violations and not result.shared and result.locations:
            console.print("[green]layout[/]: every rank's backup peer shares none of its TP, PP or DP groups")
    for note in result.notes[:MAX_PLACES]:
        console.print(f"note: {escape(note)}")
