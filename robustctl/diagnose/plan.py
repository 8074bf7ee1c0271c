"""The dry-run plan: what a diagnose run would send to each host, without connecting.

The command lines come from the builders the levels use (:mod:`robustctl.diagnose.levels`,
:mod:`robustctl.diagnose.pairs`), so the plan shows each host's real argv per level. Two things are
known only at run time and are said so: a probe's ``--timeout`` is the per-host budget left minus
a margin, capped by an SSH host's ``ssh.command_timeout_s`` (the plan shows the full budget's
value, the most it can be), and with
``diagnose.allreduce.interface`` the L3 rendezvous address is the one the host reports then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from robustctl.diagnose.alignment import MIN_HOSTS, alignment_args
from robustctl.diagnose.levels import (
    L0_PROBES,
    LEVEL_NAMES,
    MAX_LEVEL,
    budget_of,
    burn_args,
    command_budget_s,
    intra_args,
    l1_timeout_s,
)
from robustctl.diagnose.pairs import pair_args, pair_ports, ring_pairs
from robustctl.models import SCHEMA_VERSION
from robustctl.probes import probe_argv
from robustctl.transport.addresses import address_argv, static_address
from robustctl.transport.base import remote_command

if TYPE_CHECKING:
    from robustctl.diagnose.engine import DiagnoseSpec
    from robustctl.inventory import Host


def plan_levels(request: DiagnoseSpec) -> dict[str, Any]:
    """What a run would do, without connecting: per host its transport, address and command lines.

    Returns a JSON-ready mapping: ``kind: "diagnose-plan"``, ``schema_version``, ``levels`` (each
    ``{level, name}``, plus ``skipped`` with the reason for a level that cannot run), limits, and
    ``hosts``: ``{host, transport, address, gpus, ssh?, command, commands}`` where ``command`` is
    the probe runner (``[wrapper] python3 -c STREAM_BOOT [--root R]``, :func:`robustctl.probes.probe_argv`) and ``commands`` one entry per level and
    probe run: ``{level, probe, command, stdin}`` (L3: also ``pair``, ``rank``, ``peer``).
    ``robustctl diagnose --dry-run`` prints it.
    """
    s = request.settings
    hosts = list(request.hosts)
    names = [h.name for h in hosts]
    levels: list[dict[str, Any]] = []
    for lv in range(min(request.max_level, MAX_LEVEL) + 1):
        entry: dict[str, Any] = {"level": lv, "name": LEVEL_NAMES[lv]}
        if lv == 3 and len(hosts) < 2:
            entry["skipped"] = f"needs at least two hosts, {len(hosts)} targeted"
        if lv == 4 and len(hosts) < MIN_HOSTS:
            entry["skipped"] = f"needs at least {MIN_HOSTS} hosts to form a majority, {len(hosts)} targeted"
        levels.append(entry)
    runs = {lv["level"] for lv in levels if "skipped" not in lv}
    interface = s.allreduce.interface
    by_name = {h.name: h for h in hosts}
    pairs = ring_pairs(names) if 3 in runs else []
    ports = pair_ports(pairs, s)
    out_hosts = []
    for h in hosts:
        commands: list[dict[str, Any]] = []
        if 0 in runs:
            bundle = ", ".join(
                f"{p}.py --timeout {budget_of(command_budget_s(h, s.host_timeout_s))}" for p in L0_PROBES
            )
            commands.append(
                {
                    "level": 0,
                    "probe": "bundle",
                    "command": remote_command(probe_argv(h)),
                    "stdin": f"diagnostics/_prelude.py + bundle.py ({bundle})",
                }
            )
        if 1 in runs:
            args = [*burn_args(s), "--timeout", budget_of(command_budget_s(h, l1_timeout_s(s)))]
            commands.append(_probe(1, "burn", h, args))
        if 2 in runs:
            args = [*intra_args(s), "--timeout", budget_of(command_budget_s(h, s.host_timeout_s))]
            commands.append(_probe(2, "allreduce", h, args))
        if pairs and interface is not None and static_address(h, interface) is None:
            commands.append(
                {
                    "level": 3,
                    "probe": "address",
                    "command": remote_command(address_argv(h, interface)),
                    "stdin": "",
                }
            )
        for pair in pairs:
            if h.name not in pair:
                continue
            rank = pair.index(h.name)
            master = _address(by_name[pair[0]], interface)
            args = pair_args(
                s,
                rank=rank,
                master=master,
                port=ports[pair],
                bind=_address(h, interface),
                timeout=budget_of(command_budget_s(h, s.host_timeout_s)),
            )
            entry = _probe(3, "allreduce", h, args)
            entry.update(pair=f"{pair[0]}<->{pair[1]}", rank=rank, peer=pair[1 - rank])
            commands.append(entry)
        if 4 in runs:
            args = [*alignment_args(h), "--timeout", budget_of(s.host_timeout_s)]
            commands.append(_probe(4, "replay", h, args))
        row: dict[str, Any] = {"host": h.name, "transport": h.transport, "address": h.address, "gpus": h.gpus}
        if h.transport == "ssh":
            user = f"{h.ssh.user}@" if h.ssh.user else ""
            port = f":{h.ssh.port}" if h.ssh.port else ""
            row["ssh"] = f"{user}{h.address}{port}"
        row["command"] = remote_command(probe_argv(h))
        row["commands"] = commands
        out_hosts.append(row)
    notes = ["--timeout is the per-host budget left at run time minus 2 s; the plan shows its largest value"]
    if pairs:
        notes.append("L3 pairs form a ring over the hosts still checked when L3 starts (shown: every host)")
    if interface and pairs:
        notes.append(f"L3 rendezvous addresses are the {interface} addresses the hosts report at run time")
    return {
        "kind": "diagnose-plan",
        "schema_version": SCHEMA_VERSION,
        "levels": levels,
        "all_levels": request.all_levels,
        "concurrency": s.concurrency,
        "host_timeout_s": s.host_timeout_s,
        "deadline_s": s.deadline_s,
        "interface": interface,
        "hosts": out_hosts,
        "notes": notes,
    }


def _probe(level: int, probe: str, host: Host, args: list[str]) -> dict[str, Any]:
    return {
        "level": level,
        "probe": probe,
        "command": remote_command(probe_argv(host, args)),
        "stdin": f"diagnostics/_prelude.py + {probe}.py",
    }


def _address(host: Host, interface: str | None) -> str:
    addr = static_address(host, interface)
    return addr if addr is not None else f"<{interface} address of {host.name}, resolved at run time>"
