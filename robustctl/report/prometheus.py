"""A sweep as a Prometheus textfile, for node_exporter's textfile collector.

Names follow the Prometheus naming conventions (https://prometheus.io/docs/practices/naming/): the
``robustctl_`` prefix, base units (seconds), ``_total`` on counters, one label per dimension. Label
values are escaped as the text exposition format requires (backslash, double quote, newline).

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

A host's verdict is the sweep policy's (:func:`robustctl.sweep.policy.record_sweep`), as the history
records it: ``critical`` only when the policy names the host, ``warning`` while a CRITICAL check is
pending (its ``robustctl_check_status`` still says ``critical``). A *failure* is a change of that
verdict into ``critical`` (or a diagnose run's critical verdict): what ``robustctl lemons`` counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from robustctl.models import Status

if TYPE_CHECKING:
    from robustctl.commands.sweep import SweepResult

__all__ = ["escape_label", "sweep_textfile"]


def escape_label(value: str) -> str:
    """A label value for the text exposition format: ``\\``, ``"`` and newline escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items()) + "}"


def _family(
    name: str, kind: str, help_text: str, samples: Iterable[tuple[Mapping[str, str], float]]
) -> list[str]:
    out = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    out += [f"{name}{_labels(lbl)} {value:.17g}" for lbl, value in samples]
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
    return "\n".join(lines) + "\n"
