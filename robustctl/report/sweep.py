"""Rendering of ``robustctl sweep``, ``history`` and ``lemons`` on stderr (rich); all text escaped."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from robustctl.report.console import as_text, escape, styled
from robustctl.timefmt import format_utc

if TYPE_CHECKING:
    from rich.console import Console

    from robustctl.commands.history import HistoryResult, LemonsResult
    from robustctl.commands.sweep import SweepRequest, SweepResult
    from robustctl.sweep.healthcheck import LocalCheckResult


def write_sweep_files(request: SweepRequest, result: SweepResult) -> None:
    """Write the sweep's artefacts the request names: the Prometheus textfile (``--textfile``) and the
    HTML page (``--html``), each atomically (a reader never sees half a file).

    The caller of :func:`robustctl.commands.sweep.run_sweep` writes them (the CLI does, after the
    sweep), so the command layer imports no renderer.

    Args:
        request: the sweep's request (its ``textfile`` and ``html`` paths; None: not asked for).
        result: the sweep's result, rendered into each file.

    Raises:
        ConfigError: a path that cannot be written (one line naming the flag and the path).
    """
    from robustctl.report.atomic import write_atomic

    if request.textfile is not None:
        from robustctl.report.prometheus import sweep_textfile

        write_atomic(request.textfile, sweep_textfile(result), "--textfile")
    if request.html is not None:
        from robustctl.report.html import sweep_html

        write_atomic(request.html, sweep_html(result), "--html")


def _utc(t: float) -> str:
    return format_utc(t)


def render_sweep(result: SweepResult, console: Console, *, quiet: bool = False) -> None:
    """Warnings always; unless ``quiet``: the hosts that are not OK (with the policy's reading),
    what ``--act`` did, the lemons, and one summary line."""
    for w in result.warnings:
        console.print(as_text(w))
    if result.acted is not None and result.acted.get("error"):
        console.print(as_text(f"robustctl: warning: {result.acted['error']}"))
    if quiet:
        return
    table = _not_ok_table(result)
    if table is not None:
        console.print(table)
    if result.acted is not None:
        a = result.acted
        console.print(as_text(
            f"acted: suspect {', '.join(a['suspect']) or '-'}; drained {', '.join(a['drained']) or '-'}"
            + (f"; left alone {', '.join(a['skipped'])}" if a["skipped"] else "")
        ))  # fmt: skip
    if result.lemons:
        console.print(as_text("lemons: " + ", ".join(f"{lm.host} ({lm.failures} failures, {lm.returns} returns)"
                                                     for lm in result.lemons)))  # fmt: skip
    named = sum(h.named for h in result.hosts)
    console.print(as_text(
        f"swept {len(result.hosts)} host(s) in {result.duration_s:.1f} s: {named} named, "
        f"{sum(bool(h.pending) for h in result.hosts)} pending, "
        f"{sum(h.status.value == 'unknown' for h in result.hosts)} not checked; history in {result.state}"
    ))  # fmt: skip


def _not_ok_table(result: SweepResult) -> Table | None:
    """The hosts whose verdict is not OK, each with the policy's reading of its first finding (or the
    reason it could not be checked); None when every host is OK."""
    by = {d.host: d for d in result.decisions}
    bad = [h for h in result.hosts if h.status.value not in ("ok", "not_applicable", "skipped")]
    if not bad:
        return None
    table = Table(title=f"sweep: {len(bad)} of {len(result.hosts)} host(s) not OK", title_justify="left")
    for col in ("host", "verdict", "policy", "finding"):
        table.add_column(col, overflow="fold")
    for h in bad:
        d = by.get(h.host)
        if d is None:
            policy, finding = "-", h.error or ""
        else:
            f = d.findings[0]
            policy = "named" if d.named else "pending"
            finding = f"{f.check}: {f.detail} [{f.check_class.value}: {f.why}]"
        table.add_row(escape(h.host), styled(h.status), policy, escape(finding))
    return table


def render_history(result: HistoryResult, console: Console) -> None:
    """The host's counters, its checks now, and its state changes."""
    c = result.counters
    if c is None:
        console.print(as_text(f"{result.host}: no sweep or diagnose recorded in {result.state}"))
        return
    console.print(as_text(
        f"{result.host}: observed {c.seen} time(s) since {_utc(c.first_seen)} UTC, last {_utc(c.last_seen)} UTC "
        f"({c.last_status}); {c.failures} failure(s), {c.unknowns} not checked"
    ))  # fmt: skip
    now = Table(title="checks now", title_justify="left")
    for col in ("check", "status", "since (UTC)", "streak", "detail"):
        now.add_column(col, overflow="fold")
    for s in result.checks:
        now.add_row(escape(s.check), escape(s.status), _utc(s.since), str(s.streak), escape(s.detail))
    console.print(now)
    table = Table(
        title=f"changes since {_utc(result.since)} UTC: {len(result.changes)}", title_justify="left"
    )
    for col in ("when (UTC)", "check", "change", "source", "detail"):
        table.add_column(col, overflow="fold")
    for ch in result.changes:
        table.add_row(_utc(ch.at), escape(ch.check), escape(f"{ch.from_status or 'new'} → {ch.to_status}"),
                      escape(ch.source), escape(ch.detail))  # fmt: skip
    console.print(table)


def render_lemons(result: LemonsResult, console: Console) -> None:
    """A table of the lemons and their evidence, or one line saying there are none."""
    rule = f"(>= {result.min_failures} failures or >= {result.min_returns} returns since {_utc(result.since)} UTC)"
    if not result.lemons:
        console.print(as_text(f"no lemons {rule}"))
        return
    table = Table(title=f"lemons: {len(result.lemons)} {rule}", title_justify="left")
    for col in ("host", "failures", "returns", "evidence"):
        table.add_column(col, overflow="fold")
    for lm in result.lemons:
        ev = "\n".join(f"{_utc(e.at)} {e.what}: {e.detail}" for e in lm.evidence)
        table.add_row(escape(lm.host), str(lm.failures), str(lm.returns), escape(ev))
    console.print(table)


def render_local(result: LocalCheckResult, console: Console, *, quiet: bool = False) -> None:
    """``sweep --local``: warnings and a Slurm error always; unless ``quiet``, the checks that are not
    OK; and one line (with ``quiet``, only when the exit is not 0: slurmd logs a failed health check's
    output): node, verdict, findings, what was done."""
    for w in result.warnings:
        console.print(as_text(w))
    if result.error:
        console.print(as_text(f"robustctl: error: slurm: {result.error}"))
    if quiet and int(result.exit_code) == 0:
        return
    for c in result.checks:
        if not quiet and c.status.value not in ("ok", "not_applicable", "skipped"):
            console.print(as_text(f"  {c.name}: {c.status.value}: {c.summary}"))
    what = "; ".join(result.findings) or (f"pending: {', '.join(result.pending)}" if result.pending else "")
    line = f"{result.node}: {result.status.value.upper()}" + (f": {what}" if what else "")
    line += f"; slurm: {result.action}" if result.slurm_state is not None or result.action != "none" else ""
    console.print(as_text(f"{line} ({result.duration_s:.1f} s)"))
