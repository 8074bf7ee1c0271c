"""A sweep as one self-contained HTML page: no script, no network, inline CSS, every text escaped.

Sections: the last sweep's time and duration, a host × check grid coloured by status (each cell a
``<td class="cell s-STATUS" data-host=... data-check=...>``; the verdict column is the host's verdict
after the sweep policy: critical only when named, warning while a critical check is pending), each
host's recent state changes (the ``(host)`` rows are that verdict), and the lemons with their
evidence (a failure is a change of the verdict into critical: the host was named). Text from hosts
and the store is made printable (:func:`robustctl.report.console.printable`: control, bidi and
zero-width characters shown as ``\x1b``, ``\u202e``) and then escaped with :func:`html.escape`
(quotes included), so a finding that holds markup prints as text and a raw control or bidi character
never reaches the page.

**A job's timeline** is a ``<div class="timeline" data-job=...>`` of one ``<span class="seg c-CAUSE"
style="width:X%" title="CAUSE START – END (D s)">`` per interval of its ledger as the sweep carried it
(:attr:`robustctl.commands.ettr.JobEttr.intervals`, at most
:data:`~robustctl.commands.ettr.MAX_TIMELINE_INTERVALS`), in time order, over the ledger's window.
Widths are the differences of the segments' rounded ends (in thousandths of a percent), so they are
finite, in [0, 100] and add up to exactly 100 over the window; a segment narrower than 0.0005% is
still there, zero wide. When earlier intervals were left out, one ``c-omitted`` segment stands for
their span and a line says how many. A legend gives each cause's colour and seconds; a table lists the
job's incidents (onset, class, playbook, MTTR, machines evicted).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING

from robustctl.report.console import printable
from robustctl.timefmt import format_utc

if TYPE_CHECKING:
    from robustctl.commands.ettr import JobEttr, TimelineInterval
    from robustctl.commands.sweep import SweepResult

__all__ = ["MAX_EVICTED_SHOWN", "TIMELINE_CAUSES", "sweep_html"]

MAX_EVICTED_SHOWN = 8
"""Machine names one incident row shows; the rest are counted (``+N more``). Our choice: one parallel
group of a large job (a PP group of 8 machines, what ByteRobust over-evicts, arXiv 2509.16293) fits;
an incident may name up to :data:`robustctl.watch.ledger.MAX_EVICTED_PER_INCIDENT` machines, which
would swamp the table (``robustctl ettr --json`` lists them all)."""

TIMELINE_CAUSES = (
    "productive", "detection", "localization", "eviction", "restart", "recomputation", "waiting",
    "unaccounted",
)  # fmt: skip
"""The causes a timeline segment can have, in the legend's order: the values of
:class:`robustctl.watch.ledger.Cause` (kept here as text so the page needs no ledger import; a test
checks they match). Any other cause is drawn as ``c-other``."""

_WIDTH_UNITS = 100_000
"""A timeline's width in its units: thousandths of a percent, the precision of a segment's width."""

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}
th.check{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:normal}
td.cell{min-width:1.2em;text-align:center}
.s-ok{background:#b7e4b0}.s-warning{background:#ffe08a}.s-critical{background:#f28b82}
.s-unknown{background:#d7aefb}.s-not_applicable,.s-skipped,.s-none{background:#eee}
.named{font-weight:bold;color:#b00020}
.timeline{display:flex;width:100%;height:1.4em;border:1px solid #999;margin:.3em 0}
.seg{display:block;flex:none;height:100%;min-width:0}
.legend span.sw{display:inline-block;width:.9em;height:.9em;border:1px solid #999;margin-right:.3em}
.legend{list-style:none;padding:0}.legend li{display:inline-block;margin-right:1.2em}
.c-productive{background:#34a853}.c-detection{background:#fbbc04}.c-localization{background:#ff6d01}
.c-eviction{background:#ea4335}.c-restart{background:#a142f4}.c-recomputation{background:#4285f4}
.c-waiting{background:#9aa0a6}.c-unaccounted{background:#e8eaed}.c-other{background:#fff}
.c-omitted{background:repeating-linear-gradient(45deg,#fff 0 4px,#ccc 4px 8px)}
"""

_SYMBOL = {"ok": "✓", "warning": "!", "critical": "✗", "unknown": "?", "not_applicable": "–", "skipped": "–"}


def _when(t: float) -> str:
    return format_utc(t, zone=True)


def _h(text: object) -> str:
    """``text`` for the page, in an element or a quoted attribute: printable, then HTML-escaped."""
    return escape(printable(text), quote=True)


def sweep_html(result: SweepResult) -> str:
    """The page of ``result`` (a complete HTML5 document)."""
    checks = sorted({c for h in result.hosts for c in h.checks})
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>robustctl sweep</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>robustctl sweep</h1>",
        f'<p id="last-sweep">Last sweep: <time>{_h(_when(result.finished_at))}</time>, '
        f"{result.duration_s:.1f} s, {len(result.hosts)} host(s); exit code {int(result.exit_code)}.</p>",
    ]
    if result.warnings:
        out.append("<ul>" + "".join(f"<li>{_h(w)}</li>" for w in result.warnings) + "</ul>")
    out.append('<h2>Hosts × checks</h2><table id="grid"><thead><tr><th>host</th><th>verdict</th>')
    out += [f'<th class="check">{_h(c)}</th>' for c in checks]
    out.append("</tr></thead><tbody>")
    for h in result.hosts:
        cls = ' class="named"' if h.named else ""
        title = _h(h.error or "")
        out.append(
            f'<tr><th{cls} title="{title}">{_h(h.host)}</th>'
            f'<td class="s-{_h(h.status.value)}">{_h(h.status.value)}</td>'
        )
        for c in checks:
            s = h.checks.get(c, "none")
            out.append(
                f'<td class="cell s-{_h(s)}" data-host="{_h(h.host)}" '
                f'data-check="{_h(c)}" title="{_h(s)}">{_SYMBOL.get(s, "")}</td>'
            )
        out.append("</tr>")
    out.append("</tbody></table>")
    out.append('<h2>Recent history</h2><table id="history"><thead><tr><th>host</th><th>when</th>'
               "<th>check</th><th>change</th><th>detail</th></tr></thead><tbody>")  # fmt: skip
    for host, changes in result.recent.items():
        for ch in reversed(changes):
            out.append(
                f"<tr><td>{_h(host)}</td><td>{_h(_when(ch.at))}</td><td>{_h(ch.check)}</td>"
                f"<td>{_h(ch.from_status or 'new')} → {_h(ch.to_status)}</td><td>{_h(ch.detail)}</td></tr>"
            )
    out.append("</tbody></table>")
    out.append('<h2>Lemons</h2><table id="lemons"><thead><tr><th>host</th><th>failures</th><th>returns</th>'
               "<th>evidence</th></tr></thead><tbody>")  # fmt: skip
    for lm in result.lemons:
        ev = "<br>".join(f"{_h(_when(e.at))} {_h(e.what)}: {_h(e.detail)}" for e in lm.evidence)
        out.append(f"<tr><td>{_h(lm.host)}</td><td>{lm.failures}</td><td>{lm.returns}</td><td>{ev}</td></tr>")
    if not result.lemons:
        out.append('<tr><td colspan="4">none</td></tr>')
    out.append("</tbody></table>")
    out.append("<h2>Jobs</h2>")
    for job in result.ettr:
        out += _job_section(job)
    if not result.ettr:
        out.append('<p id="no-jobs">No job of the inventory has ETTR data (robustctl watch records it).</p>')
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _cause_class(cause: str) -> str:
    """The CSS class of a cause: ``c-CAUSE`` for a cause of :data:`TIMELINE_CAUSES`, else ``c-other``."""
    return f"c-{cause}" if cause in TIMELINE_CAUSES else "c-other"


def _seconds(value: float) -> str:
    """Seconds for the page, one decimal."""
    return f"{value:.1f}" if math.isfinite(value) else _h(value)


def _percent(ratio: float) -> str:
    """A ratio in [0, 1] as a percentage, one decimal."""
    return f"{100 * ratio:.1f}%" if math.isfinite(ratio) else _h(ratio)


def _positions(times: Sequence[float], start: float, end: float) -> list[int]:
    """Each of ``times`` as its place in ``[start, end]``, in :data:`_WIDTH_UNITS`, clamped and
    non-decreasing (0 for every time when the window is not a finite positive span)."""
    total = end - start
    if not (math.isfinite(total) and total > 0):
        return [0] * len(times)
    out, last = [], 0
    for t in times:
        frac = (t - start) / total
        pos = round(_WIDTH_UNITS * min(1.0, max(0.0, frac))) if math.isfinite(frac) else last
        last = min(_WIDTH_UNITS, max(last, pos))
        out.append(last)
    return out


def _segment(cause_class: str, width: int, title: str) -> str:
    return (
        f'<span class="seg {cause_class}" style="width:{width // 1000}.{width % 1000:03d}%" '
        f'title="{_h(title)}"></span>'
    )


def _span_title(what: str, start: float, end: float) -> str:
    return f"{what} {_when(start)} – {_when(end)} ({_seconds(end - start)} s)"


def _timeline(job: JobEttr) -> list[str]:
    """The bar of ``job``'s intervals (module docstring), then the line on what was left out."""
    ivs: Sequence[TimelineInterval] = job.intervals
    start = job.window_start_s if job.window_start_s is not None else (ivs[0].start_s if ivs else 0.0)
    end = job.window_end_s if job.window_end_s is not None else (ivs[-1].end_s if ivs else 0.0)
    omitted = job.intervals_left_out > 0 and bool(ivs) and ivs[0].start_s > start
    ends = ([ivs[0].start_s] if omitted else []) + [iv.end_s for iv in ivs]
    pos = _positions(ends, start, end)
    segs, prev, k = [], 0, 0
    if omitted:
        title = (
            f"{job.intervals_left_out} earlier interval(s) left out {_when(start)} – {_when(ivs[0].start_s)}"
        )
        segs.append(_segment("c-omitted", pos[0], title))
        prev, k = pos[0], 1
    for iv, p in zip(ivs, pos[k:], strict=True):
        segs.append(_segment(_cause_class(iv.cause), p - prev, _span_title(iv.cause, iv.start_s, iv.end_s)))
        prev = p
    out = [f'<div class="timeline" data-job="{_h(job.job)}">' + "".join(segs) + "</div>"]
    if job.intervals_left_out:
        since = f" (from {_h(_when(start))} to {_h(_when(ivs[0].start_s))})" if ivs else ""
        out.append(
            f'<p class="left-out">{job.intervals_left_out} earlier interval(s){since} left out: the '
            f"timeline shows the most recent {len(ivs)}.</p>"
        )
    return out


def _legend(job: JobEttr) -> str:
    seconds = {"productive": job.productive_s, **job.unproductive_s}
    items = []
    for cause in TIMELINE_CAUSES:
        s = seconds.get(cause)
        shown = "" if s is None else f": {_seconds(s)} s"
        items.append(f'<li><span class="sw {_cause_class(cause)}"></span>{_h(cause)}{shown}</li>')
    return '<ul class="legend">' + "".join(items) + "</ul>"


def _incident_rows(job: JobEttr) -> list[str]:
    out = [
        f'<table class="incidents" data-job="{_h(job.job)}"><thead><tr><th>onset</th><th>incident</th>'
        "<th>class</th><th>playbook</th><th>MTTR s</th><th>machines evicted</th></tr></thead><tbody>"
    ]
    for row in job.incidents:
        mttr = "–" if row.mttr_s is None else _seconds(row.mttr_s)
        machines = ", ".join(_h(m) for m in row.machines_evicted[:MAX_EVICTED_SHOWN])
        more = len(row.machines_evicted) - MAX_EVICTED_SHOWN
        if more > 0:
            machines += f" (+{more} more)"
        out.append(
            f"<tr><td>{_h(_when(row.onset_s))}</td><td>{_h(row.incident_id)}</td>"
            f"<td>{_h(row.incident_class.value)}</td><td>{_h(row.playbook or 'none')}</td>"
            f"<td>{mttr}</td><td>{machines or 'none'}</td></tr>"
        )
    if not job.incidents:
        out.append('<tr><td colspan="6">none</td></tr>')
    out.append("</tbody></table>")
    if job.incidents_left_out:
        out.append(f'<p class="left-out">{job.incidents_left_out} earlier incident(s) left out.</p>')
    return out


def _job_section(job: JobEttr) -> list[str]:
    """``job``'s part of the Jobs section: its ETTR, timeline, legend and incidents."""
    window = ""
    if job.window_start_s is not None and job.window_end_s is not None:
        window = f" from {_h(_when(job.window_start_s))} to {_h(_when(job.window_end_s))}"
    return [
        f'<section class="job" data-job="{_h(job.job)}"><h3>{_h(job.job)}</h3>',
        f'<p class="ettr">Cumulative ETTR <b>{_percent(job.cumulative_ettr)}</b> over '
        f"{_seconds(job.total_s)} s{window}; sliding ETTR <b>{_percent(job.sliding_ettr)}</b> over the last "
        f"{_seconds(job.sliding_window_s)} s.</p>",
        *_timeline(job),
        _legend(job),
        *_incident_rows(job),
        "</section>",
    ]
