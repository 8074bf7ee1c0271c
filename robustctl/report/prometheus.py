"""A sweep as a Prometheus textfile, for node_exporter's textfile collector.

Names follow the Prometheus naming conventions (https://prometheus.io/docs/practices/naming/): the
``robustctl_`` prefix, base units (seconds), ``_total`` on counters, one label per dimension. Label
values are first made printable (:func:`robustctl.report.console.printable`: control, bidi and
zero-width characters shown as ``\x1b``, ``\u202e``), then escaped as the text exposition format
requires (backslash, double quote, newline); HELP text escapes backslash and newline; a sample value
that is not finite is spelled ``NaN``, ``+Inf`` or ``-Inf``
(https://prometheus.io/docs/instrumenting/exposition_formats/#text-format-details).

Metrics::

    robustctl_sweep_last_run_timestamp_seconds     gauge  when the last sweep finished
    robustctl_sweep_duration_seconds               gauge  how long it ran
    robustctl_sweep_hosts{status}                  gauge  hosts by verdict (ok, warning, critical, unknown, ...)
    robustctl_host_status{host,status}             gauge  1 for each host's verdict now (after the policy)
    robustctl_check_status{host,check,status}      gauge  1 for each check's status now
    robustctl_host_named{host}                     gauge  1 when the policy names the host
    robustctl_host_observations_total{host}        counter sweeps and diagnose runs that observed it
    robustctl_host_failures_total{host}            counter times it was named (verdict into critical)
    robustctl_lemon{host}                          gauge  1 for each lemon
    robustctl_job_ettr{job}                        gauge  cumulative ETTR of the job, 0 to 1
    robustctl_job_unproductive_seconds_total{job,cause}  counter  unproductive seconds by cause

A host's verdict is the sweep policy's (:func:`robustctl.sweep.policy.record_sweep`), as the history
records it: ``critical`` only when the policy names the host, ``warning`` while a CRITICAL check is
pending (its ``robustctl_check_status`` still says ``critical``). A *failure* is a change of that
verdict into ``critical`` (or a diagnose run's critical verdict): what ``robustctl lemons`` counts.

The two job families (issue 22, item 4) come from each job's ETTR ledger over everything the store
holds for it (:func:`robustctl.commands.ettr.ettr_of_store`), for every job of the inventory that has
ledger data; a job without is absent (never ETTR 1). The unproductive seconds grow with the window
(it ends at the sweep), so they are counters; ``cause`` is one of the ledger's unproductive causes
(detection, localization, eviction, restart, recomputation, waiting, unaccounted).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from robustctl.models import Status
from robustctl.report.console import printable

if TYPE_CHECKING:
    from robustctl.commands.sweep import SweepResult

__all__ = ["escape_help", "escape_label", "sweep_textfile"]


def escape_label(value: object) -> str:
    """A label value for the text exposition format: :func:`~robustctl.report.console.printable`
    (no raw control or bidi character; newline and tab kept), then ``\\``, ``"`` and newline escaped."""
    return printable(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: object) -> str:
    """A HELP docstring for the text exposition format: printable, then ``\\`` and newline escaped."""
    return printable(text).replace("\\", "\\\\").replace("\n", "\\n")


def _value(value: float) -> str:
    """A sample value: shortest round-trip form; ``NaN``, ``+Inf``, ``-Inf`` as the format spells them."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.17g}"


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items()) + "}"


def _family(
    name: str, kind: str, help_text: str, samples: Iterable[tuple[Mapping[str, str], float]]
) -> list[str]:
    out = [f"# HELP {name} {escape_help(help_text)}", f"# TYPE {name} {kind}"]
    out += [f"{name}{_labels(lbl)} {_value(value)}" for lbl, value in samples]
    return out


def sweep_textfile(result: SweepResult) -> str:
    """The textfile of ``result`` (UTF-8 text ending in a newline)."""
    lines: list[str] = []
    lines += _family(
        "robustctl_sweep_last_run_timestamp_seconds", "gauge", "UNIX time the last robustctl sweep finished.",
        [({}, result.finished_at)],
    )  # fmt: skip
    lines += _family("robustctl_sweep_duration_seconds", "gauge", "Wall time of the last robustctl sweep.",
                     [({}, result.duration_s)])  # fmt: skip
    by_status = {s.value: 0 for s in (Status.OK, Status.WARNING, Status.CRITICAL, Status.UNKNOWN)}
    for h in result.hosts:
        by_status[h.status.value] = by_status.get(h.status.value, 0) + 1
    lines += _family("robustctl_sweep_hosts", "gauge", "Hosts of the last sweep by verdict.",
                     [({"status": k}, v) for k, v in sorted(by_status.items())])  # fmt: skip
    lines += _family("robustctl_host_status", "gauge", "1 for the verdict of each host in the last sweep.",
                     [({"host": h.host, "status": h.status.value}, 1) for h in result.hosts])  # fmt: skip
    lines += _family(
        "robustctl_check_status", "gauge", "1 for the status of each check of each host now.",
        [({"host": h.host, "check": c, "status": s}, 1) for h in result.hosts for c, s in sorted(h.checks.items())],
    )  # fmt: skip
    lines += _family("robustctl_host_named", "gauge", "1 when the sweep policy names the host (confirmed finding).",
                     [({"host": h.host}, int(h.named)) for h in result.hosts])  # fmt: skip
    counters = [(h, result.counters[h.host]) for h in result.hosts if h.host in result.counters]
    lines += _family("robustctl_host_observations_total", "counter", "Sweeps and diagnose runs that observed the host.",
                     [({"host": h.host}, c.seen) for h, c in counters])  # fmt: skip
    lines += _family("robustctl_host_failures_total", "counter", "Times the host was named (its verdict changed into critical).",
                     [({"host": h.host}, c.failures) for h, c in counters])  # fmt: skip
    lines += _family("robustctl_lemon", "gauge", "1 for each lemon host (repeated failures or returns).",
                     [({"host": lm.host}, 1) for lm in result.lemons])  # fmt: skip
    lines += _family("robustctl_job_ettr", "gauge", "Cumulative effective training time ratio of the job (0 to 1).",
                     [({"job": e.job}, e.cumulative_ettr) for e in result.ettr])  # fmt: skip
    lines += _family(
        "robustctl_job_unproductive_seconds_total", "counter", "Seconds of the job's time not spent training, by cause.",
        [({"job": e.job, "cause": c}, v) for e in result.ettr for c, v in e.unproductive_s.items()],
    )  # fmt: skip
    return "\n".join(lines) + "\n"
