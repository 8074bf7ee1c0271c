"""Rich rendering of a ``robustctl stacks`` :class:`~robustctl.stacks.result.StacksReport`.

Per role, the stack classes are merged into one prefix tree (outermost frame at the root, as LLNL STAT
draws it): each branch point shows how many processes continue down each side, each class ends in a
leaf with its size, ranks as compact ranges (``0-5,7``) and category; outlier classes are red and the
frame where they leave the dominant path is marked ``✗ diverges``. Straight runs of frames shared by
the same classes are folded (``⋮ 12 frames``) unless ``verbose``. Then a summary: the verdict,
suspects, the chosen group, the over-eviction set and the healthy machines it takes, ranks not
collected, notes. Text taken from dumps is escaped, so a frame can never inject rich markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from robustctl.inventory.hostrange import compact_ranges
from robustctl.report.console import escape, styled
from robustctl.stacks.failslow import FailSlowResult
from robustctl.stacks.result import ClassSummary, StacksReport

if TYPE_CHECKING:
    from robustctl.stacks.collect import StackCollection

__all__ = ["render_collection_note", "render_failslow", "render_live_stacks", "render_stacks"]

_FOLD = 4
"""Straight runs longer than this are folded to first frame, ``⋮ n frames``, last frame."""


@dataclass
class _Node:
    frame: str
    classes: list[ClassSummary] = field(default_factory=list)
    ends: list[ClassSummary] = field(default_factory=list)
    children: dict[str, _Node] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(c.size for c in self.classes)


def _tree(classes: Sequence[ClassSummary]) -> _Node:
    root = _Node("")
    for c in classes:
        if c.unreadable:
            continue
        node = root
        node.classes.append(c)
        for f in c.frames:
            nxt = node.children.get(f)
            if nxt is None:
                nxt = node.children[f] = _Node(f)
            nxt.classes.append(c)
            node = nxt
        node.ends.append(c)
    return root


def _leaf(c: ClassSummary) -> str:
    who = f"rank {c.ranks}" if c.n_ranks == 1 else (f"ranks {c.ranks}" if c.ranks else "no rank")
    procs = f"{c.size} process{'es' if c.size != 1 else ''}"
    tag = "[green]healthy[/]" if c.healthy else "[bold red]OUTLIER[/]"
    if c.dominant:
        tag = "[green]dominant[/]"
    extra = f", {c.partial} cut stack{'s' if c.partial != 1 else ''} merged" if c.partial else ""
    hosts = ""
    if not c.healthy and c.hosts:
        shown = ", ".join(c.hosts[:6]) + (" …" if len(c.hosts) > 6 else "")
        hosts = f" on {escape(shown)}"
    return f"[bold]class {c.id}[/] · {procs} · {escape(who)}{hosts} · {c.category} · {tag}{extra}"


def _label(node: _Node, dominant: ClassSummary | None, marked: bool) -> str:
    text = escape(node.frame)
    if marked:
        return f"[bold red]✗ {text}[/] [red]← diverges[/]"
    if dominant is not None and dominant not in node.classes:
        return f"[red]{text}[/]"
    return text


def _add(
    parent: Tree,
    node: _Node,
    dominant: ClassSummary | None,
    parent_has_dom: bool,
    verbose: bool,
    top: bool = False,
) -> None:
    chain = [node]
    while (
        len(chain[-1].children) == 1
        and not chain[-1].ends
        and next(iter(chain[-1].children.values())).classes == chain[-1].classes
    ):
        chain.append(next(iter(chain[-1].children.values())))
    has_dom = dominant is not None and dominant in node.classes
    marked = dominant is not None and parent_has_dom and not has_dom
    count = f" [dim]({node.size})[/]" if len(node.classes) > 1 or top else ""
    if len(chain) > _FOLD and not verbose:
        lines = [
            _label(chain[0], dominant, marked) + count,
            f"[dim]⋮ {len(chain) - 2} frames[/]",
            _label(chain[-1], dominant, False),
        ]
        branch = parent.add("\n".join(lines))
    else:
        branch = parent.add(_label(chain[0], dominant, marked) + count)
        for n in chain[1:]:
            branch = branch.add(_label(n, dominant, False))
    last = chain[-1]
    for c in last.ends:
        branch.add(_leaf(c))
    kids = sorted(last.children.values(), key=lambda n: -n.size)
    for child in kids:
        _add(branch, child, dominant, has_dom, verbose)


def render_stacks(report: StacksReport, console: Console, *, verbose: bool = False) -> None:
    """Print the class trees and the verdict of ``report`` to ``console`` (meant to be stderr).

    Args:
        report: from :func:`robustctl.stacks.result.analyze_stacks` or
            :func:`robustctl.stacks.analyze.analyze_dumps`.
        console: where to print; colours follow the console (``NO_COLOR``, non-TTY).
        verbose: show every frame (no folding) and every suspect process.
    """
    for f in report.inputs:
        if f.error:
            console.print(f"{styled(f.status)} {escape(f.error)}")
    for role in report.roles:
        classes = [c for c in report.classes if c.role == role.role]
        dominant = next((c for c in classes if c.dominant), None)
        title = (
            f"[bold]{role.role}[/] processes: {role.processes} ({role.readable} read), "
            f"{role.n_classes} class{'es' if role.n_classes != 1 else ''}"
        )
        if role.ambiguous and role.reason:
            title += f" · [yellow]{escape(role.reason)}[/]"
        tree = Tree(title)
        root = _tree(classes)
        for child in sorted(root.children.values(), key=lambda n: -n.size):
            _add(tree, child, dominant, True, verbose, top=True)
        for c in root.ends:  # classes with no Python frame at all
            tree.add("[dim](no Python frame)[/] " + _leaf(c))
        for c in classes:
            if c.unreadable:
                reasons = "; ".join(f"{escape(r)} ×{n}" if n > 1 else escape(r) for r, n in c.reasons[:5])
                who = f"ranks {c.ranks}" if c.ranks else "no rank"
                tree.add(
                    f"[bold magenta]could not be read[/] · {c.size} process{'es' if c.size != 1 else ''} · "
                    f"{escape(who)} · [bold red]OUTLIER[/] · {reasons}"
                )
        if role.classes_omitted:
            tree.add(f"[dim]… {role.classes_omitted} more classes not listed[/]")
        console.print(tree)

    if report.suspects:
        table = Table(title="suspects", title_justify="left")
        for col in ("rank", "host", "role", "pid", "category", "why"):
            table.add_column(col, overflow="fold", no_wrap=col in ("rank", "pid"))
        rows = report.suspects if verbose else report.suspects[:40]
        for s in rows:
            mark = " [bold]*[/]" if s.likely_culprit else ""
            table.add_row(
                ("-" if s.rank is None else str(s.rank)) + mark,
                escape(s.host or "-"),
                s.role.value,
                "-" if s.pid is None else str(s.pid),
                s.category.value,
                escape(s.reason),
            )
        console.print(table)
        if len(rows) < len(report.suspects):
            console.print(f"[dim]… {len(report.suspects) - len(rows)} more suspect processes (--verbose)[/]")
        if report.likely_culprits:
            console.print("[dim]* likely culprit: not waiting on a peer[/]")
    _render_waits(report, console, verbose)
    if report.group is not None:
        g = report.group
        console.print(
            f"smallest group holding the suspects: [bold]{g.kind} group {g.index}[/] "
            f"({g.n_ranks} ranks: {escape(g.ranks)})"
        )
    if report.over_eviction:
        console.print(
            f"over-eviction set: {escape(', '.join(report.over_eviction))} "
            f"({len(report.over_eviction)} machine{'s' if len(report.over_eviction) != 1 else ''}, "
            f"{report.healthy_machines_taken} expected healthy)"
        )
    if report.n_not_collected:
        console.print(f"[magenta]not collected[/]: ranks {escape(report.not_collected)} (not checked)")
    if report.unplaced:
        console.print(f"[magenta]outliers without a rank[/]: {escape(', '.join(report.unplaced[:10]))}")
    for n in report.notes:
        console.print(f"[dim]note: {escape(n)}[/]")
    _render_flight_recorder(report, console, verbose)
    console.print(f"{styled(report.status)}: {escape(report.summary)} → exit {int(report.exit_code)}")


_FR_SHOWN = 5
"""Flight Recorder suspects and chains printed without ``--verbose`` (the JSON has them all)."""


def _render_flight_recorder(report: StacksReport, console: Console, verbose: bool) -> None:
    """The Flight Recorder section of a directory read whole: its verdict, suspects, chains, the
    files it could not read, and the agreement with the stacks."""
    fr = report.flight_recorder
    if fr is None:
        return
    n = len(fr.files)
    console.print(
        f"[bold]Flight Recorder[/] ({n} dump{'s' if n != 1 else ''}): {styled(fr.status)} {escape(fr.summary)}"
    )
    limit = None if verbose else _FR_SHOWN
    for s in fr.suspects[:limit]:
        mark = " [bold]*[/]" if s.likely_culprit else ""
        where = f" on {escape(s.host)}" if s.host else ""
        console.print(f"  rank {s.rank}{mark}{where} ({escape(s.kind)}): {escape(s.reason)}")
    for ch in [c for c in fr.chains if len(c.hops) > 2][:limit]:  # a two-hop chain is in its root's reason
        console.print(f"  chain: {escape(ch.text)}")
    if fr.undecided:
        console.print(f"  [yellow]undecided[/]: {escape(fr.undecided)}")
    for bad in fr.not_read[:limit]:
        console.print(f"  [magenta]not read[/]: {escape(bad.get('reason', ''))}")
    if report.agreement is not None:
        a = report.agreement
        colour = {"agree": "green", "overlap": "yellow", "disagree": "bold red"}.get(a.verdict, "yellow")
        console.print(f"[bold]agreement[/]: [{colour}]{escape(a.summary)}[/]")


def _render_waits(report: StacksReport, console: Console, verbose: bool) -> None:
    """The waits-for chains (each hop with what it waits in, when ``verbose``), or why they do not decide."""
    wf = report.waits_for
    if wf is None or (not wf.decided and not report.ambiguous):
        return
    if not wf.decided:
        console.print(f"[dim]waits-for: undecided: {escape(wf.undecided or '')}[/]")
        return
    used = " (decided the suspects)" if report.decided_by == "waits-for" else ""
    console.print(f"[bold]waits-for[/] (confidence {escape(wf.confidence)}){used}:")
    for ch in wf.chains if verbose else wf.chains[:5]:
        console.print(f"  {escape(ch.text)}")
        if verbose:
            for h in ch.hops:
                console.print(f"    [dim]rank {h.rank}: {escape(h.state)}: {escape(h.what)}[/]")
    if not wf.chains:
        for s in wf.suspects[:5]:
            console.print(f"  rank {s.rank}: {escape(s.reason)}")
    if not verbose and len(wf.chains) > 5:
        console.print(f"[dim]  … {len(wf.chains) - 5} more chains (--verbose)[/]")


def _votes_line(kind: str, votes: Sequence[tuple[int, int]]) -> str:
    """``pp 16-23: 3 each, pp 4: 1``: groups with the same number of flags as compact ranges.

    ``votes`` is ``(group index, flags)`` with most flags first (:attr:`FailSlowResult.votes`).
    """
    by_flags: dict[int, list[int]] = {}
    for g, n in votes:
        by_flags.setdefault(n, []).append(g)
    return ", ".join(
        f"{kind} {compact_ranges(gs)}: {n}{' each' if len(gs) > 1 else ''}" for n, gs in by_flags.items()
    )


def render_failslow(result: FailSlowResult, console: Console) -> None:
    """Print a fail-slow vote: one line per round, the votes and the degrader (or why none)."""
    table = Table(title=f"fail-slow voting ({result.kind} groups)", title_justify="left")
    for col in ("round", "outlier ranks", "flagged", "outliers in it"):
        table.add_column(col, overflow="fold")
    for v in result.rounds:
        flagged = str(v.flagged) if v.flagged is not None else f"[dim]{escape(v.abstained or '-')}[/]"
        table.add_row(str(v.round), escape(v.outliers or "-"), flagged, str(v.count) if v.count else "-")
    console.print(table)
    if result.votes:
        console.print("votes: " + _votes_line(result.kind, result.votes))
    if result.degrader is not None:
        console.print(
            f"[bold red]degrader[/]: {result.kind} {result.degrader} (ranks {escape(result.degrader_ranks)})"
            + (
                f" → over-evict {escape(', '.join(result.degrader_hosts))} "
                f"({result.healthy_machines_taken} expected healthy)"
                if result.degrader_hosts
                else ""
            )
        )
    else:
        console.print(f"[yellow]no degrader[/]: {escape(result.reason or '')}")


def render_collection_note(index: int, col: StackCollection, console: Console) -> None:
    """One dim progress line per collection: ``sample 1: 16 rank(s) from 2/2 host(s) in 0.4s``."""
    bad = len(col.unknown_hosts)
    console.print(
        f"[dim]sample {index + 1}: {len(col.mains)} rank(s) from {len(col.hosts) - bad}/{len(col.hosts)} "
        f"host(s) in {col.elapsed_s:.1f}s[/]"
    )


def render_live_stacks(
    report: StacksReport, collections: Sequence[StackCollection], console: Console, *, verbose: bool = False
) -> None:
    """:func:`render_stacks`, then the last collection's evidence line (how many ranks were read
    through the in-job agent's debug server, how many by py-spy) and one line per host it could not
    read."""
    render_stacks(report, console, verbose=verbose)
    for col in collections[-1:]:
        if col.sources:
            console.print(escape(col.evidence_line()))
        for h in col.unknown_hosts:
            console.print(f"[magenta]{escape(h.host)}: {h.status.value}: {escape(str(h.error))}[/]")
