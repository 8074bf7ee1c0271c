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
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from robustctl.report.console import printable
from robustctl.report.timefmt import format_utc

if TYPE_CHECKING:
    from robustctl.commands.sweep import SweepResult

__all__ = ["sweep_html"]

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}
th.check{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:normal}
td.cell{min-width:1.2em;text-align:center}
.s-ok{background:#b7e4b0}.s-warning{background:#ffe08a}.s-critical{background:#f28b82}
.s-unknown{background:#d7aefb}.s-not_applicable,.s-skipped,.s-none{background:#eee}
.named{font-weight:bold;color:#b00020}
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
    out.append("</tbody></table></body></html>")
    return "\n".join(out) + "\n"
