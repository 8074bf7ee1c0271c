"""Level-0 host checks: pure evaluators of the ``host`` probe's ``data`` (``diagnostics/host.py``).

Every evaluator returns one OK result when all is well, or one result per faulty device (mount,
interface, IB port, GPU PCI address). A sub-collection the probe could not make (its key is
``null``) gives UNKNOWN with the probe's reason, never OK.

Every evaluator also gets the control side's :class:`~robustctl.checks.registry.CheckContext`:
``host.clock`` reads ``control_time`` and ``round_trip_s``; every evaluator quotes ``probe_errors``
(the probe's ``errors``) when a sub-collection is missing.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence
from typing import Any

from robustctl.analysis.sxid import SXidEvent, parse_sxid, switch_label
from robustctl.analysis.xid import DEVICE_REDACTED, DEVICE_UNKNOWN, parse_kernel_log
from robustctl.checks.registry import NO_CONTEXT, CheckContext, ResultMaker, check
from robustctl.models import CheckResult, Status
from robustctl.thresholds import Thresholds, beyond_min, ladder

__all__ = ["never_told", "objects", "probe_error"]

LEVEL = 0
GIB = 1 << 30
_r = ResultMaker(LEVEL)


def never_told(data: Mapping[str, Any]) -> str | None:
    """Why a probe's document does not say whether the probe could run, or None when it does.

    A probe sets ``available`` (True, or False with a ``reason``) once it knows; a document without
    it comes from a probe that ran out of time first (e.g. importing torch past its budget), and
    every probe then says so in ``data["error"]`` (``diagnostics/_prelude.py``). That is UNKNOWN,
    never NOT_APPLICABLE: the returned line is the probe's own error.
    """
    if data.get("available") is not None:
        return None
    return str(data.get("error") or "the probe did not say whether it could run")


def probe_error(data: Mapping[str, Any], ctx: CheckContext, prefix: str) -> str:
    """The probe's error line for sub-collection ``prefix`` (e.g. ``"disks"``), else the probe's
    own ``data["error"]`` (a timeout before it got there), else a generic reason."""
    for err in ctx.probe_errors:
        text = str(err)
        if text.startswith(prefix + ":"):
            return text[len(prefix) + 1 :].strip()
    return str(data.get("error") or "the probe reported no data")


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def objects(name: str, items: Sequence[Any], what: str) -> tuple[list[Mapping[str, Any]], list[CheckResult]]:
    """The entries of a probe's list that are objects, and one UNKNOWN result when some are not (a
    host that answers something else is never read as healthy)."""
    good = [x for x in items if isinstance(x, Mapping)]
    bad = len(items) - len(good)
    if not bad:
        return good, []
    return good, [_r(name, Status.UNKNOWN, f"{bad} {what} entr{'y' if bad == 1 else 'ies'} not understood")]


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


# --------------------------------------------------------------------------------------- disks
@check(
    "host.disk",
    description="Free space, free inodes and read-only state of local filesystems",
    level=LEVEL,
    probe="host",
    timeout_s=30.0,
)
def evaluate_disk(
    data: Mapping[str, Any], th: Thresholds, ctx: CheckContext = NO_CONTEXT
) -> list[CheckResult]:
    """Free space, free inodes and read-only state of local filesystems.

    Per mount (``Thresholds.disk_ignore_mounts`` skipped): read-only and not matching
    ``readonly_allowed_mounts`` → CRITICAL; free percent at or below ``disk_crit_free_pct`` (or
    free GiB at or below ``disk_crit_free_gib``) → CRITICAL; at or below ``disk_warn_free_pct`` →
    WARNING (:func:`robustctl.thresholds.ladder`); the same percentages for free inodes;
    ``statvfs`` failed → UNKNOWN.
    """
    name = "host.disk"
    disks = data.get("disks")
    if not isinstance(disks, list):
        return [_r(name, Status.UNKNOWN, f"filesystems not checked: {probe_error(data, ctx, 'disks')}")]
    disks, out = objects(name, disks, "filesystem")
    judged = 0
    for d in disks:
        mount = str(d.get("mount"))
        if _matches(mount, th.disk_ignore_mounts):
            continue
        judged += 1
        ev = {k: d.get(k) for k in ("device", "fstype", "read_only", "free_bytes", "total_bytes", "free_pct")}
        ev["inodes_free_pct"] = d.get("inodes_free_pct")
        if d.get("read_only") and not _matches(mount, th.readonly_allowed_mounts):
            out.append(
                _r(name, Status.CRITICAL, f"{mount} is mounted read-only ({d.get('fstype')})", ev, mount)
            )
        if d.get("error"):
            out.append(_r(name, Status.UNKNOWN, f"{mount}: cannot read free space: {d['error']}", ev, mount))
            continue
        free_pct, free_b = d.get("free_pct"), d.get("free_bytes")
        if isinstance(free_pct, (int, float)) and isinstance(free_b, int):
            floor = None if th.disk_crit_free_gib is None else th.disk_crit_free_gib * GIB
            status = Status.worst(
                (_free_pct_status(free_pct, th), ladder(free_b, crit=floor, higher_is_worse=False))
            )
            if status is not Status.OK:
                out.append(_r(name, status, f"{mount} has {free_pct:.1f}% free ({_gib(free_b)})", ev, mount))
        ino = d.get("inodes_free_pct")
        if isinstance(ino, (int, float)) and (status := _free_pct_status(ino, th)) is not Status.OK:
            out.append(_r(name, status, f"{mount} has {ino:.1f}% of its inodes free", ev, mount))
    if out:
        return out
    if judged == 0:
        return [_r(name, Status.NOT_APPLICABLE, "no local filesystem to judge")]
    return [
        _r(
            name,
            Status.OK,
            f"{judged} filesystem(s) writable with enough free space",
            {"mounts": [d.get("mount") for d in disks]},
        )
    ]


def _free_pct_status(pct: float, th: Thresholds) -> Status:
    """The disk ladder of a free percentage (space or inodes)."""
    return ladder(pct, warn=th.disk_warn_free_pct, crit=th.disk_crit_free_pct, higher_is_worse=False)


# -------------------------------------------------------------------------------------- memory
@check("host.memory", description="Available and total memory", level=LEVEL, probe="host", timeout_s=30.0)
def evaluate_memory(
    data: Mapping[str, Any], th: Thresholds, ctx: CheckContext = NO_CONTEXT
) -> list[CheckResult]:
    """Available memory (``MemAvailable``) and total memory.

    ``available_pct`` at or below ``memory_crit_available_pct`` → CRITICAL, at or below
    ``memory_warn_available_pct`` → WARNING; ``MemTotal`` below ``memory_min_total_gib`` (the least
    a healthy host has) → CRITICAL.
    """
    name = "host.memory"
    mem = data.get("memory")
    if not isinstance(mem, Mapping):
        return [_r(name, Status.UNKNOWN, f"memory not checked: {probe_error(data, ctx, 'memory')}")]
    total, avail, pct = mem.get("total_bytes"), mem.get("available_bytes"), mem.get("available_pct")
    if not isinstance(total, int) or not isinstance(avail, int) or not isinstance(pct, (int, float)):
        return [_r(name, Status.UNKNOWN, "memory figures missing from the probe", dict(mem))]
    ev = {"total_bytes": total, "available_bytes": avail, "available_pct": pct}
    out: list[CheckResult] = []
    min_total = None if th.memory_min_total_gib is None else th.memory_min_total_gib * GIB
    if ladder(total, crit=beyond_min(min_total), higher_is_worse=False) is Status.CRITICAL:
        out.append(
            _r(
                name,
                Status.CRITICAL,
                f"only {_gib(total)} of memory, expected at least {th.memory_min_total_gib:g} GiB",
                ev,
            )
        )
    what = f"{_gib(avail)} of {_gib(total)} available ({pct:.1f}%)"
    status = ladder(
        pct, warn=th.memory_warn_available_pct, crit=th.memory_crit_available_pct, higher_is_worse=False
    )
    if status is not Status.OK:
        out.append(_r(name, status, what, ev))
    return out or [_r(name, Status.OK, what, ev)]


# ---------------------------------------------------------------------------------------- load
@check(
    "host.load",
    description="Load average per CPU and tasks stuck in D state",
    level=LEVEL,
    probe="host",
    timeout_s=30.0,
)
def evaluate_load(
    data: Mapping[str, Any], th: Thresholds, ctx: CheckContext = NO_CONTEXT
) -> list[CheckResult]:
    """5-minute load average per CPU reaching ``load_crit_per_cpu`` / ``load_warn_per_cpu``, and tasks
    in uninterruptible sleep (``procs_blocked``) reaching ``procs_blocked_warn``
    (:func:`robustctl.thresholds.ladder`)."""
    name = "host.load"
    load = data.get("load")
    per = load.get("load5_per_cpu") if isinstance(load, Mapping) else None
    if not isinstance(load, Mapping) or not isinstance(per, (int, float)) or not math.isfinite(per):
        return [_r(name, Status.UNKNOWN, f"load not checked: {probe_error(data, ctx, 'load')}")]
    per_cpu = float(load["load5_per_cpu"])
    blocked = load.get("procs_blocked")
    ev = dict(load)
    what = f"load {load.get('load5')} over 5 min on {load.get('cpu_count')} CPUs ({per_cpu:.2f} per CPU)"
    out: list[CheckResult] = []
    status = ladder(per_cpu, warn=th.load_warn_per_cpu, crit=th.load_crit_per_cpu)
    if status is not Status.OK:
        out.append(_r(name, status, what, ev))
    if isinstance(blocked, int) and ladder(blocked, warn=th.procs_blocked_warn) is Status.WARNING:
        out.append(_r(name, Status.WARNING, f"{blocked} tasks in uninterruptible sleep (D state)", ev))
    return out or [_r(name, Status.OK, what, ev)]


# --------------------------------------------------------------------------------------- clock
@check(
    "host.clock",
    description="Host clock skew against the control side",
    level=LEVEL,
    probe="host",
    timeout_s=30.0,
)
def evaluate_clock(
    data: Mapping[str, Any], th: Thresholds, ctx: CheckContext = NO_CONTEXT
) -> list[CheckResult]:
    """Host clock against the control side's clock.

    skew = max(0, |host time - control midpoint| - round trip / 2): zero whenever the host's time
    falls inside the control side's [sent, received] window. At or above ``clock_crit_skew_s`` →
    CRITICAL, at or above ``clock_warn_skew_s`` → WARNING. Without a control time (offline
    evaluation) the check is NOT_APPLICABLE.
    """
    name = "host.clock"
    clock = data.get("clock")
    host_time = clock.get("time") if isinstance(clock, Mapping) else None
    if not isinstance(host_time, (int, float)) or not math.isfinite(host_time):
        return [_r(name, Status.UNKNOWN, "host clock not reported by the probe")]
    control = ctx.control_time
    if control is None:
        return [_r(name, Status.NOT_APPLICABLE, "no control-side time to compare with")]
    rtt = ctx.round_trip_s
    half = float(rtt) / 2 if rtt is not None and rtt > 0 else 0.0
    offset = float(host_time) - float(control)
    skew = max(0.0, abs(offset) - half)
    ev = {"host_time": host_time, "control_time": control, "offset_s": offset, "skew_s": skew}
    what = f"host clock {'ahead' if offset > 0 else 'behind'} by {abs(offset):.3f} s (±{half:.3f} s)"
    return [_r(name, ladder(skew, warn=th.clock_warn_skew_s, crit=th.clock_crit_skew_s), what, ev)]


# ----------------------------------------------------------------------------------------- XID
@check(
    "host.xid",
    description="NVIDIA XID (GPU) and SXid (NVSwitch) errors in the kernel log",
    level=LEVEL,
    probe="host",
    timeout_s=30.0,
)
def evaluate_xid(
    data: Mapping[str, Any], th: Thresholds, ctx: CheckContext = NO_CONTEXT
) -> list[CheckResult]:
    """NVIDIA XID and NVSwitch SXid events in the kernel log, judged by their catalogs.

    One result per (GPU PCI address, XID) with the event count and the newest line; status is the
    catalog's severity (CRITICAL for hardware and reset-GPU XIDs, WARNING for application and
    unknown ones). Codes in ``Thresholds.xid_ignore`` are dropped. NVSwitch SXid events
    (``robustctl.analysis.sxid``) the same way, one result per (SXid code, NVSwitch): CRITICAL for a
    fatal one (or one NVIDIA's guide says needs a reset), WARNING for a non-fatal one; their
    ``Severity``/``Data`` continuation lines are part of their event. No XID/SXid line → OK.
    """
    name = "host.xid"
    xid = data.get("xid")
    if not isinstance(xid, Mapping) or not isinstance(xid.get("lines"), list):
        return [_r(name, Status.UNKNOWN, f"kernel log not scanned: {probe_error(data, ctx, 'kernel log')}")]
    source = xid.get("path") or xid.get("source") or "kernel log"
    text = "\n".join(str(x) for x in xid["lines"])
    events = [e for e in parse_kernel_log(text) if e.xid not in th.xid_ignore]
    groups: dict[tuple[str, int], list[Any]] = {}
    for e in events:
        groups.setdefault((e.pci, e.xid), []).append(e)
    out: list[CheckResult] = []
    benign: list[str] = []
    for (pci, code), evs in groups.items():
        last = evs[-1]
        info = last.info
        if last.severity is Status.OK:
            benign.append(f"XID {code} on {pci}")
            continue
        summary = f"XID {code} on {pci} ({info.name}) x{len(evs)}: {info.action}"
        ev = {
            "xid": code,
            "pci": pci,
            "count": len(evs),
            "category": info.category.value,
            "action": info.action,
            "last_line": last.raw,
            "last_timestamp": last.timestamp,
            "source": source,
        }
        out.append(_r(name, last.severity, summary, ev, pci))
    out.extend(_sxid_results(name, parse_sxid(text), source, benign))
    if out:
        out.sort(key=lambda r: -r.status.severity)
        return out
    note = f" ({', '.join(benign)}: no action needed)" if benign else ""
    return [
        _r(
            name,
            Status.OK,
            f"no NVIDIA XID error in {source}{note}",
            {"source": source, "matches": xid.get("matches"), "truncated": xid.get("truncated")},
        )
    ]


def _sxid_results(name: str, events: list[SXidEvent], source: str, benign: list[str]) -> list[CheckResult]:
    """One result per (SXid code, NVSwitch), as for XIDs: the worst event's status, its count.

    Args:
        name: the check's name.
        events: the kernel log's SXid events (:func:`robustctl.analysis.sxid.parse_sxid`).
        source: where the lines came from, quoted in the evidence.
        benign: appended with ``"SXid CODE on SWITCH"`` for groups that need no action (NVIDIA:
            safe to ignore).

    Returns:
        The results of the groups that need attention, in order of first appearance.
    """
    groups: dict[tuple[int, str, str], list[SXidEvent]] = {}
    for e in events:
        groups.setdefault((e.code, e.switch, e.pci), []).append(e)
    out: list[CheckResult] = []
    for (code, _switch, pci), evs in groups.items():
        worst = max(evs, key=lambda e: e.severity.severity)
        last, info = evs[-1], evs[-1].info
        where = switch_label(last)
        if worst.severity is Status.OK:
            benign.append(f"SXid {code} on {where}")
            continue
        links = sorted({e.link for e in evs if e.link is not None})
        summary = f"SXid {code} on NVSwitch {where} ({info.name}) x{len(evs)}: {worst.action}"
        ev = {
            "sxid": code,
            "switch": last.switch,
            "pci": pci,
            "count": len(evs),
            "fatal": any(e.fatal for e in evs),
            "nvidia_class": info.nvidia_class,
            "links": links,
            "action": worst.action,
            "last_line": last.raw,
            "last_timestamp": last.timestamp,
            "source": source,
        }
        device = pci if pci not in (DEVICE_REDACTED, DEVICE_UNKNOWN) else last.switch
        out.append(_r(name, worst.severity, summary, ev, device))
    return out


# ---------------------------------------------------------------------------------------- NICs
_DOWN_STATES = frozenset({"down", "lowerlayerdown", "notpresent"})


@check(
    "host.nic",
    description="Link state and speed of physical network interfaces",
    level=LEVEL,
    probe="host",
    timeout_s=30.0,
)
def evaluate_nic(
    data: Mapping[str, Any], th: Thresholds, ctx: CheckContext = NO_CONTEXT
) -> list[CheckResult]:
    """Link state of physical network interfaces (the probe already left out lo and virtual ones).

    Rule, per interface not matching ``nic_ignore``: an administratively-down interface (IFF_UP
    clear in ``flags``: an unused port) is not judged; an interface that is configured up but has
    ``operstate`` down/lowerlayerdown/notpresent or ``carrier`` 0 → CRITICAL (cable, transceiver,
    switch port); ``dormant``/``testing`` → WARNING; a known speed below ``nic_min_speed_mbps`` →
    CRITICAL. No physical interface at all → NOT_APPLICABLE.
    """
    name = "host.nic"
    nics = data.get("nics")
    if not isinstance(nics, list):
        return [_r(name, Status.UNKNOWN, f"network interfaces not checked: {probe_error(data, ctx, 'nics')}")]
    nics, out = objects(name, nics, "network interface")
    judged: list[str] = []
    admin_down: list[str] = []
    for n in nics:
        ifname = str(n.get("name"))
        if _matches(ifname, th.nic_ignore):
            continue
        if n.get("admin_up") is False:
            admin_down.append(ifname)
            continue
        judged.append(ifname)
        state, carrier, speed = n.get("operstate"), n.get("carrier"), n.get("speed_mbps")
        ev = {"operstate": state, "carrier": carrier, "speed_mbps": speed, "mtu": n.get("mtu")}
        if (isinstance(state, str) and state in _DOWN_STATES) or carrier == 0:
            out.append(
                _r(
                    name,
                    Status.CRITICAL,
                    f"{ifname} link is down (operstate {state}, carrier {carrier})",
                    ev,
                    ifname,
                )
            )
        elif state in ("dormant", "testing"):
            out.append(_r(name, Status.WARNING, f"{ifname} is {state}", ev, ifname))
        elif (
            isinstance(speed, int)
            and ladder(speed, crit=beyond_min(th.nic_min_speed_mbps), higher_is_worse=False)
            is Status.CRITICAL
        ):
            out.append(
                _r(
                    name,
                    Status.CRITICAL,
                    f"{ifname} runs at {speed} Mb/s, below {th.nic_min_speed_mbps} Mb/s",
                    ev,
                    ifname,
                )
            )
    if out:
        return out
    if not judged:
        skipped = list(data.get("nics_skipped") or []) + admin_down
        return [
            _r(
                name,
                Status.NOT_APPLICABLE,
                "no configured physical network interface",
                {"skipped": skipped},
            )
        ]
    return [
        _r(name, Status.OK, f"{len(judged)} interface(s) up: {', '.join(judged)}", {"interfaces": judged})
    ]


@check(
    "host.ib", description="InfiniBand/RoCE port state and rate", level=LEVEL, probe="host", timeout_s=30.0
)
def evaluate_ib(data: Mapping[str, Any], th: Thresholds, ctx: CheckContext = NO_CONTEXT) -> list[CheckResult]:
    """InfiniBand/RoCE port state from sysfs.

    Per port not matching ``ib_ignore`` (``device`` or ``device/port``): ``state`` not ACTIVE or
    ``phys_state`` not LinkUp → CRITICAL; ``rate_gbps`` below ``ib_min_rate_gbps`` → CRITICAL.
    No ``/sys/class/infiniband`` → NOT_APPLICABLE. Source: AzNHC/NHC ``check_hw_ib``.
    """
    name = "host.ib"
    ports = data.get("infiniband")
    if not isinstance(ports, list):
        return [_r(name, Status.UNKNOWN, f"InfiniBand not checked: {probe_error(data, ctx, 'infiniband')}")]
    ports, out = objects(name, ports, "InfiniBand port")
    judged: list[str] = []
    for p in ports:
        label = f"{p.get('device')}/{p.get('port')}"
        if _matches(label, th.ib_ignore) or _matches(str(p.get("device")), th.ib_ignore):
            continue
        judged.append(label)
        state, phys, rate = p.get("state"), p.get("phys_state"), p.get("rate_gbps")
        ev = {k: p.get(k) for k in ("state", "phys_state", "rate", "rate_gbps", "link_layer")}
        if state != "ACTIVE" or phys != "LinkUp":
            out.append(_r(name, Status.CRITICAL, f"{label} is {state} / {phys}", ev, label))
        elif (
            isinstance(rate, (int, float))
            and ladder(rate, crit=beyond_min(th.ib_min_rate_gbps), higher_is_worse=False) is Status.CRITICAL
        ):
            out.append(
                _r(
                    name,
                    Status.CRITICAL,
                    f"{label} runs at {rate:g} Gb/s, below {th.ib_min_rate_gbps:g} Gb/s",
                    ev,
                    label,
                )
            )
    if out:
        return out
    if not judged:
        return [_r(name, Status.NOT_APPLICABLE, "no InfiniBand port")]
    return [_r(name, Status.OK, f"{len(judged)} IB port(s) ACTIVE/LinkUp", {"ports": judged})]
