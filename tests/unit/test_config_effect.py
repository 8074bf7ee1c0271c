"""Every inventory option changes what runs, in every mode it applies to, or is refused at load.

One table, :data:`CASES`: each case loads an inventory with the option at its default and at a
changed value, observes what would run (the dry-run plan's per-host command lines, the argv a
:class:`~robustctl.testing.FakeTransport` records for each level and for stacks, the SSH transport's
connection settings, the engine's outcomes, the check outcomes, the rails of an evict plan, the
scheduler back end's commands) and asserts that the two observations differ as they should.
:func:`test_every_option_has_a_case` fails when a config field is added without a case.
"""

from __future__ import annotations

import copy
import dataclasses
import shlex
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel

from robustctl.actions import ActionContext, open_context
from robustctl.actions.evict import EvictSpec, plan_evict
from robustctl.checks.registry import CheckContext
from robustctl.config import InventoryFile
from robustctl.diagnose import DiagnoseSpec, plan_levels, run_levels
from robustctl.diagnose.engine import evaluate_probe
from robustctl.errors import ConfigError, HostUnreachable
from robustctl.inventory import Host, Inventory, load_inventory
from robustctl.models import Status
from robustctl.probes import load_probe
from robustctl.stacks.collect import CollectSettings, collect_stacks
from robustctl.store import MachineState, Readiness, Store, StoreLocked
from robustctl.testing.fake_kube import FakeKubeApiServer
from robustctl.testing.fake_nvml import (
    Ecc,
    EccCounts,
    FakeNvml,
    NvLink,
    Pcie,
    RemappedRows,
    RetiredPages,
    healthy_gpus,
)
from robustctl.testing.fake_transport import FakeTransport
from robustctl.thresholds import Thresholds
from robustctl.transport.pool import TransportPool

BASE: dict[str, Any] = {
    "gpus_per_host": 2,
    "hosts": [{"name": "node[1-4]", "address": "127.0.0.[2-5]"}],
    "jobs": {
        "j": {
            "hosts": "node[1-4]",
            "layout": {"tp": 2, "pp": 2, "dp": 2},
            "process": {"match": "train.py"},
        }
    },
    "policy": {"max_cluster_fraction": 1.0, "max_job_fraction": 1.0, "circuit_breaker_fraction": 1.0},
}
"""Four SSH hosts of two GPUs, one job over them (W = 8), rails open unless a case closes them."""

Mutate = Callable[[dict[str, Any]], None]


def at(path: str, value: Any) -> Mutate:
    """Set ``path`` (dots; ``[0]`` for the first list item, e.g. ``hosts[0].probe_root``) to ``value``."""

    def mutate(data: dict[str, Any]) -> None:
        node: Any = data
        parts = path.replace("[0]", ".0").split(".")
        for p in parts[:-1]:
            key: Any = int(p) if p.isdigit() else p
            if isinstance(node, dict) and key not in node:
                node[key] = {}
            node = node[key]
        node[int(parts[-1]) if parts[-1].isdigit() else parts[-1]] = value

    return mutate


def write(tmp: Path, data: Mapping[str, Any], name: str) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(dict(data), sort_keys=False))
    return path


def load(tmp: Path, *mutations: Mutate, name: str = "inv") -> Inventory:
    data = copy.deepcopy(BASE)
    for m in mutations:
        m(data)
    return load_inventory(write(tmp, data, name), environ={})


def both(tmp: Path, change: Mutate, observe: Callable[[Inventory], Any], *base: Mutate) -> tuple[Any, Any]:
    """``observe`` on the inventory with ``base`` mutations, then with ``change`` on top."""
    d = observe(load(tmp, *base, name="default"))
    c = observe(load(tmp, *base, change, name="changed"))
    assert d != c, "the option changed nothing"
    return d, c


# -- observers ------------------------------------------------------------------------------------


def spec(inv: Inventory, max_level: int = 3) -> DiagnoseSpec:
    return DiagnoseSpec(
        hosts=tuple(inv.select()),
        settings=inv.diagnose,
        thresholds=inv.thresholds,
        max_level=max_level,
        all_levels=True,
    )


def plan_argv(level: int, probe: str | None = None) -> Callable[[Inventory], dict[str, list[list[str]]]]:
    """Each host's command lines (argv) of ``level`` in the dry-run plan."""

    def observe(inv: Inventory) -> dict[str, list[list[str]]]:
        plan = plan_levels(spec(inv))
        return {
            row["host"]: [
                shlex.split(c["command"]) + ([c["stdin"]] if c["probe"] == "bundle" else [])
                for c in row["commands"]
                if c["level"] == level and (probe is None or c["probe"] == probe)
            ]
            for row in plan["hosts"]
        }

    return observe


def run_fake(inv: Inventory, fake: FakeTransport | None = None, max_level: int = 3) -> FakeTransport:
    fake = fake or FakeTransport()
    run_levels(spec(inv, max_level), TransportPool(override=fake))
    return fake


LEVEL_PROBE = {0: "host", 1: "burn", 2: "allreduce", 3: "allreduce"}


def sent(level: int) -> Callable[[Inventory], list[tuple[str, list[str]]]]:
    """What the engine sends at ``level`` (FakeTransport's record): (host, argv without --timeout)."""

    def observe(inv: Inventory) -> list[tuple[str, list[str]]]:
        fake = run_fake(inv, max_level=level)
        calls = [(h, a) for h, p, a in fake.calls if p == LEVEL_PROBE[level]]
        if level == 2:
            calls = [(h, a) for h, a in calls if "--rank" not in a]
        if level == 3:
            calls = [(h, a) for h, a in calls if "--rank" in a]
        return sorted((h, without_timeout(a)) for h, a in calls)

    return observe


def sent_timeout(level: int) -> Callable[[Inventory], list[int]]:
    """The probes' ``--timeout`` values the engine sends at ``level``, rounded to tens of seconds."""

    def observe(inv: Inventory) -> list[int]:
        fake = run_fake(inv, max_level=level)
        calls = [a for _, p, a in fake.calls if p == LEVEL_PROBE[level]]
        if level == 3:
            calls = [a for a in calls if "--rank" in a]
        return sorted({round(float(flag(a, "--timeout")), -1) for a in calls})

    return observe


def plan_timeout(level: int) -> Callable[[Inventory], set[str]]:
    def observe(inv: Inventory) -> set[str]:
        out = set()
        for cmds in plan_argv(level)(inv).values():
            for argv in cmds:
                out.add(
                    argv[-1].split("--timeout ")[1].split(",")[0] if level == 0 else flag(argv, "--timeout")
                )
        return out

    return observe


def without_timeout(argv: Sequence[str]) -> list[str]:
    out = list(argv)
    if "--timeout" in out:
        i = out.index("--timeout")
        del out[i : i + 2]
    return out


def flag(argv: Sequence[str], name: str) -> str:
    return argv[list(argv).index(name) + 1]


def stacks_sent(inv: Inventory) -> list[tuple[str, list[str]]]:
    """The stacks probe's argv per host (hang mode and --slow share the collection)."""
    fake = FakeTransport()
    job = inv.job("j")
    collect_stacks(job, TransportPool(override=fake), settings=CollectSettings.from_diagnose(inv.diagnose))
    return sorted((h, without_timeout(a)) for h, p, a in fake.calls if p == "stacks")


def endpoint(host: str = "node1", ssh_config: str = "") -> Callable[[Inventory], Any]:
    """The SSH transport's connection settings for ``host`` (built without connecting)."""

    def observe(inv: Inventory) -> Any:
        from robustctl.transport.ssh import SshTransport

        cfg = Path(inv.source).with_name("ssh_config")
        cfg.write_text(ssh_config)
        return SshTransport(ssh_config=cfg).endpoint(inv.by_name(host))

    return observe


# -- the table ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One option in one mode: ``run(tmp_path)`` asserts the option changes what runs there."""

    key: str
    mode: str
    run: Callable[[Path], None]

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", self.key.replace("[0]", "[]"))  # the option, not the entry

    @property
    def id(self) -> str:
        return f"{self.key}@{self.mode}"


CASES: list[Case] = []


def case(key: str, mode: str) -> Callable[[Callable[[Path], None]], Callable[[Path], None]]:
    def register(fn: Callable[[Path], None]) -> Callable[[Path], None]:
        CASES.append(Case(key, mode, fn))
        return fn

    return register


def simple(key: str, mode: str, change: Mutate, observe: Callable[[Inventory], Any], *base: Mutate) -> None:
    """A case that asserts only that the observation differs (plus what ``observe`` checks)."""

    def run(tmp: Path) -> None:
        both(tmp, change, observe, *base)

    CASES.append(Case(key, mode, run))


def expect(
    key: str,
    mode: str,
    change: Mutate,
    observe: Callable[[Inventory], Any],
    check: Callable[[Any, Any], bool],
    *base: Mutate,
) -> None:
    """A case that also asserts ``check(default_observation, changed_observation)``."""

    def run(tmp: Path) -> None:
        d, c = both(tmp, change, observe, *base)
        assert check(d, c), (d, c)

    CASES.append(Case(key, mode, run))


def has(token: str) -> Callable[[Any, Any], bool]:
    """The token appears in the changed observation only."""
    return lambda d, c: token not in repr(d) and token in repr(c)


# ---- hosts[] --------------------------------------------------------------------------------------

expect("hosts[].name", "plan", at("hosts", [{"name": "gpu[1-4]", "address": "127.0.0.[2-5]"}]),
       lambda inv: [r["host"] for r in plan_levels(spec(inv, 0))["hosts"]],
       lambda d, c: c == ["gpu1", "gpu2", "gpu3", "gpu4"], at("jobs", {}))  # fmt: skip
expect("hosts[].address", "plan+L3", at("hosts[0].address", "127.0.0.[12-15]"), plan_argv(3),
       has("127.0.0.12"))  # fmt: skip
expect("hosts[].address", "ssh", at("hosts[0].address", "127.0.0.[12-15]"), endpoint(),
       lambda d, c: c.hostname == "127.0.0.12")  # fmt: skip
expect("hosts[].transport", "plan+L3", at("hosts[0].transport", "local"), plan_argv(3),
       lambda d, c: "127.0.0.1" in repr(c) and "127.0.0.2" not in repr(c), at("hosts[0].address", None))  # fmt: skip


@case("hosts[].transport", "routing")
def _transport_routes(tmp: Path) -> None:
    d, c = load(tmp, name="d"), load(tmp, at("hosts[0].transport", "local"), at("hosts[0].address", None))
    pool = TransportPool()
    from robustctl.transport.local import LocalTransport

    assert not isinstance(pool.for_host(d.hosts[0]), LocalTransport)
    assert isinstance(pool.for_host(c.hosts[0]), LocalTransport)


expect("hosts[].state", "diagnose targets", at("hosts", [
    {"name": "node[1-3]", "address": "127.0.0.[2-4]"},
    {"name": "node4", "address": "127.0.0.5", "state": "standby"}]),
       lambda inv: [h.name for h in inv.select()], lambda d, c: "node4" not in c)  # fmt: skip


@case("hosts[].state", "evict")
def _state_evict(tmp: Path) -> None:
    from robustctl.actions.evict import current_state

    def state(inv: Inventory) -> str:
        path = Path(inv.source)
        ctx = open_context(path, path.with_suffix(".db"))
        try:
            return current_state(ctx, "node4").value
        finally:
            ctx.close()

    two = [{"name": "node[1-3]", "address": "127.0.0.[2-4]"},
           {"name": "node4", "address": "127.0.0.5", "state": "evicted"}]  # fmt: skip
    assert both(tmp, at("hosts", two), state) == ("active", "evicted")  # what evict/return plan from


@case("hosts[].labels", "inventory show")
def _labels_shown(tmp: Path) -> None:
    # informational: nothing but `inventory show` reads labels (see INFORMATIONAL)
    from robustctl.commands.inventory import InventoryShowRequest, run_inventory_show

    path = write(tmp, {**BASE, "hosts": [{"name": "node[1-4]", "labels": {"rack": "r7"}}]}, "inv")
    shown = run_inventory_show(InventoryShowRequest(path=path))
    assert all(dict(r.labels) == {"rack": "r7"} for r in shown.hosts)
    from rich.console import Console

    from robustctl.report.inventory import render_inventory

    console = Console(record=True, width=200)
    render_inventory(shown, console)
    assert "rack=r7" in console.export_text()


for _lvl in (0, 1, 2, 3):
    expect("hosts[].probe_root", f"plan L{_lvl}", at("hosts[0].probe_root", "/host"), plan_argv(_lvl),
           has("/host"))  # fmt: skip
    expect("hosts[].probe_root", f"L{_lvl}", at("hosts[0].probe_root", "/host"), sent(_lvl),
           lambda d, c: all(flag(a, "--root") == "/host" for _, a in c))  # fmt: skip
expect("hosts[].probe_root", "stacks", at("hosts[0].probe_root", "/host"), stacks_sent,
       lambda d, c: all(flag(a, "--root") == "/host" for _, a in c))  # fmt: skip

# python: top level and per host entry
_PY = {"path": "/opt/py/bin/python3", "wrapper": ["docker", "exec", "-i", "trainer"]}
for _where in ("python", "hosts[0].python"):
    for _lvl in (0, 1, 2, 3):
        expect(f"{_where}.path", f"plan L{_lvl}", at(_where, {"path": _PY["path"]}), plan_argv(_lvl),
               has(_PY["path"]))  # fmt: skip
        expect(f"{_where}.wrapper", f"plan L{_lvl}", at(_where, {"wrapper": _PY["wrapper"]}),
               plan_argv(_lvl), has("trainer"))  # fmt: skip
    expect(f"{_where}.path", "L1", at(_where, {"path": _PY["path"]}), sent(1),
           lambda d, c: all(_PY["path"] in a for _, a in c))  # fmt: skip
    expect(f"{_where}.wrapper", "stacks", at(_where, {"wrapper": _PY["wrapper"]}), stacks_sent,
           lambda d, c: all(a[:4] == _PY["wrapper"] for _, a in c))  # fmt: skip
    expect(f"{_where}.path", "L3 interface address", at(_where, {"path": _PY["path"]}),
           plan_argv(3, "address"), has(_PY["path"]), at("diagnose.allreduce.interface", "ib0"))  # fmt: skip
    expect(f"{_where}.wrapper", "L3 interface address", at(_where, {"wrapper": _PY["wrapper"]}),
           plan_argv(3, "address"), has("trainer"), at("diagnose.allreduce.interface", "ib0"))  # fmt: skip


# gpus_per_host: the expected count every check is given, top level and per host
def _l0_count_status(inv: Inventory) -> list[Status]:
    nvml = nvml_data(n=2)
    fake = FakeTransport(answers={h.name: {"nvml": nvml} for h in inv.hosts})
    rep = run_levels(spec(inv, 0), TransportPool(override=fake))
    return [c.status for h in rep.hosts for c in h.checks if c.name == "nvml.count"]


for _where in ("gpus_per_host", "hosts[0].gpus_per_host"):
    expect(_where, "L0 nvml.count", at(_where, 4), _l0_count_status,
           lambda d, c: Status.CRITICAL in c and Status.CRITICAL not in d, at("jobs", {}))  # fmt: skip
    expect(_where, "plan", at(_where, 4), lambda inv: [r["gpus"] for r in plan_levels(spec(inv))["hosts"]],
           lambda d, c: 4 in c, at("jobs", {}))  # fmt: skip


@case("gpus_per_host", "jobs (ranks per host)")
def _gpus_ranks(tmp: Path) -> None:
    d = stacks_sent(load(tmp, name="d"))
    c = stacks_sent(load(tmp, at("gpus_per_host", 1), at("jobs.j.layout", {"tp": 2, "pp": 2}), name="c"))
    assert flag(dict(d)["node2"], "--ranks") == "2-3" and flag(dict(c)["node2"], "--ranks") == "1"


@case("gpus_per_host", "L1 burn.verify")
def _gpus_burn(tmp: Path) -> None:
    cpu = {"available": True, "cuda_available": False, "cuda_reason": "no CUDA", "devices": [
        {"index": 0, "name": "cpu", "kind": "cpu", "tflops": 1.0, "mismatches": 0, "checked": 3}]}  # fmt: skip

    def verify(inv: Inventory) -> list[Status]:
        fake = FakeTransport(answers={h.name: {"burn": cpu} for h in inv.hosts})
        rep = run_levels(spec(inv, 1), TransportPool(override=fake))
        return [c.status for h in rep.hosts for c in h.checks if c.name == "burn.verify"]

    d, c = both(tmp, at("gpus_per_host", 0), verify, at("jobs", {}))
    assert set(d) == {Status.UNKNOWN} and Status.UNKNOWN not in c  # GPUs expected, CPU burned


# ---- ssh (top level) and hosts[].ssh (per host) ---------------------------------------------------

_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
SSH_VALUES: dict[str, tuple[Any, Callable[[Any], bool]]] = {
    "user": ("trainer", lambda e: e.user == "trainer"),
    "port": (2222, lambda e: e.port == 2222),
    "identity_file": ("/keys/id_test", lambda e: e.identity_files == ("/keys/id_test",)),
    "known_hosts": ("/keys/known_hosts", lambda e: str(e.known_hosts) == "/keys/known_hosts"),
    "proxy_jump": ("jump@127.0.0.9:2200", lambda e: e.proxy_jump == "jump@127.0.0.9:2200"),
    "connect_timeout_s": (3.0, lambda e: e.connect_timeout_s == 3.0),
    "accept_new_host_keys": (True, lambda e: e.accept_new),
    "use_ssh_config": (False, lambda e: e.user is None and e.port == 22),
}
_SSH_CONFIG = "Host 127.0.0.*\n  User cfguser\n  Port 2200\n"
for _field, (_value, _check) in SSH_VALUES.items():
    _cfg = _SSH_CONFIG if _field == "use_ssh_config" else ""
    _obs = endpoint(ssh_config=_cfg)
    expect(f"ssh.{_field}", "ssh endpoint", at(f"ssh.{_field}", _value), _obs,
           lambda d, c, _check=_check: _check(c))  # fmt: skip

    def _per_host(tmp: Path, _field: str = _field, _value: Any = _value, _cfg: str = _cfg,
                  _check: Any = _check) -> None:  # fmt: skip
        _, c = both(tmp, at("hosts[0].ssh", {_field: _value}), endpoint("node1", _cfg))
        assert _check(c)
        one = [{"name": "node1", "address": "127.0.0.2", "ssh": {_field: _value}},
               {"name": "node[2-4]", "address": "127.0.0.[3-5]"}]  # fmt: skip
        inv = load(tmp, at("hosts", one), name="split")
        # this entry's host takes the override, the other entry's keeps the top-level value
        assert _check(endpoint("node1", _cfg)(inv)) and not _check(endpoint("node2", _cfg)(inv))

    CASES.append(Case(f"hosts[].ssh.{_field}", "ssh endpoint, this entry only", _per_host))


@case("ssh.identity_file", "preflight")
def _identity_preflight(tmp: Path) -> None:
    from robustctl.transport.ssh import preflight

    key = tmp / "id_test"
    key.write_text(_KEY)
    preflight(load(tmp, at("ssh.identity_file", str(key))).hosts)
    with pytest.raises(ConfigError, match="id_missing"):
        preflight(load(tmp, at("ssh.identity_file", str(tmp / "id_missing"))).hosts)


expect("ssh.user", "plan", at("ssh.user", "trainer"),
       lambda inv: [r["ssh"] for r in plan_levels(spec(inv, 0))["hosts"]], has("trainer@127.0.0.2"))  # fmt: skip
expect("ssh.port", "plan", at("ssh.port", 2222),
       lambda inv: [r["ssh"] for r in plan_levels(spec(inv, 0))["hosts"]], has("127.0.0.2:2222"))  # fmt: skip
for _where in ("ssh.command_timeout_s", "hosts[0].ssh.command_timeout_s"):
    _key = _where.replace("[0]", "[]")
    for _lvl in (0, 1, 2, 3):
        expect(_key, f"plan L{_lvl}", at(_where, 30.0), plan_timeout(_lvl), lambda d, c: c == {"28"})
        expect(_key, f"L{_lvl}", at(_where, 30.0), sent_timeout(_lvl), lambda d, c: c == [30.0])
expect("ssh.command_timeout_s", "stacks", at("ssh.command_timeout_s", 10.0),
       lambda inv: sorted({round(float(flag(a, "--timeout"))) for _, p, a in _stacks_calls(inv)}),
       lambda d, c: c == [7] and d == [30])  # fmt: skip


def _stacks_calls(inv: Inventory) -> list[tuple[str, str, list[str]]]:
    fake = FakeTransport()
    collect_stacks(
        inv.job("j"), TransportPool(override=fake), settings=CollectSettings.from_diagnose(inv.diagnose)
    )
    return fake.calls


# ---- diagnose: fan-out, deadlines, retries --------------------------------------------------------


class Gate(FakeTransport):
    """A FakeTransport that counts commands in flight; the first ones are held (≤ 5 s) until
    ``target`` are in flight at once, so a fan-out that allows ``target`` shows it."""

    def __init__(self, target: int) -> None:
        super().__init__()
        self.target, self.now, self.peak, self.reached = target, 0, 0, False
        self.cond = threading.Condition()

    def run(self, host: Host, argv: Sequence[str], **kw: Any) -> Any:
        with self.cond:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.reached = self.reached or self.now >= self.target
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.reached, timeout=5.0)
        try:
            return super().run(host, argv, **kw)
        finally:
            with self.cond:
                self.now -= 1


def peak(level: int, target: Callable[[Inventory], int]) -> Callable[[Inventory], int]:
    """The most commands in flight at once at ``level`` (L3: pairs, two commands each)."""

    def observe(inv: Inventory) -> int:
        from robustctl.diagnose.engine import LEVELS, Engine, _NoProgress

        gate = Gate(target(inv))
        s = spec(inv, level)

        engine = Engine(s, TransportPool(override=gate), _NoProgress())
        LEVELS[level](engine, list(s.hosts))
        return gate.peak

    return observe


def _conc(inv: Inventory) -> int:
    return min(inv.diagnose.concurrency, 4)


expect(
    "diagnose.concurrency", "L0", at("diagnose.concurrency", 1), peak(0, _conc), lambda d, c: (d, c) == (4, 1)
)
expect(
    "diagnose.concurrency", "L1", at("diagnose.concurrency", 1), peak(1, _conc), lambda d, c: (d, c) == (4, 1)
)
expect(
    "diagnose.concurrency", "L2", at("diagnose.concurrency", 1), peak(2, _conc), lambda d, c: (d, c) == (4, 1)
)
expect("diagnose.concurrency", "L3", at("diagnose.concurrency", 1),
       peak(3, lambda inv: 2 * min(inv.diagnose.concurrency, 2)), lambda d, c: (d, c) == (4, 2))  # fmt: skip
expect("diagnose.burn.concurrency", "L1", at("diagnose.burn.concurrency", 2),
       peak(1, lambda inv: inv.diagnose.burn.concurrency or 4), lambda d, c: (d, c) == (4, 2))  # fmt: skip
expect("diagnose.allreduce.concurrency", "L2", at("diagnose.allreduce.concurrency", 2),
       peak(2, lambda inv: inv.diagnose.allreduce.concurrency or 4), lambda d, c: (d, c) == (4, 2))  # fmt: skip
expect("diagnose.allreduce.concurrency", "L3", at("diagnose.allreduce.concurrency", 1),
       peak(3, lambda inv: 2 * (inv.diagnose.allreduce.concurrency or 2)), lambda d, c: (d, c) == (4, 2))  # fmt: skip
simple("diagnose.concurrency", "stacks", at("diagnose.concurrency", 7),
       lambda inv: CollectSettings.from_diagnose(inv.diagnose).concurrency)  # fmt: skip
expect("diagnose.concurrency", "plan", at("diagnose.concurrency", 7),
       lambda inv: plan_levels(spec(inv))["concurrency"], lambda d, c: c == 7)  # fmt: skip


@case("diagnose.concurrency", "stacks fan-out")
def _stacks_concurrency(tmp: Path) -> None:
    for value, want in ((None, 4), (1, 1)):
        inv = load(tmp, *([at("diagnose.concurrency", value)] if value else []))
        gate = Gate(want)
        collect_stacks(
            inv.job("j"), TransportPool(override=gate), settings=CollectSettings.from_diagnose(inv.diagnose)
        )
        assert gate.peak == want


for _lvl in (0, 1, 2, 3):
    # L1's budget is max(host_timeout_s, 3 x burn + 60 s): raise it to see it there
    _v = 300.0 if _lvl == 1 else 30.0
    expect("diagnose.host_timeout_s", f"L{_lvl}", at("diagnose.host_timeout_s", _v), sent_timeout(_lvl),
           lambda d, c, _v=_v: c == [_v])  # fmt: skip
    expect("diagnose.host_timeout_s", f"plan L{_lvl}", at("diagnose.host_timeout_s", _v), plan_timeout(_lvl),
           lambda d, c, _v=_v: c == {f"{_v - 2:.0f}"})  # fmt: skip
    expect("diagnose.deadline_s", f"L{_lvl}", at("diagnose.deadline_s", 30.0), sent_timeout(_lvl),
           lambda d, c: c == [30.0])  # fmt: skip
expect("diagnose.deadline_s", "plan", at("diagnose.deadline_s", 30.0),
       lambda inv: plan_levels(spec(inv))["deadline_s"], lambda d, c: c == 30.0)  # fmt: skip
expect("diagnose.deadline_s", "stacks", at("diagnose.deadline_s", 30.0),
       lambda inv: CollectSettings.from_diagnose(inv.diagnose).deadline_s, lambda d, c: c == 30.0)  # fmt: skip


@case("diagnose.host_timeout_s", "engine")
def _host_timeout_engine(tmp: Path) -> None:
    def outcome(inv: Inventory) -> str:
        fake = FakeTransport(delay_s={"node1": 1.5})
        rep = run_levels(spec(inv, 0), TransportPool(override=fake))
        return rep.hosts[0].outcome.value

    assert both(tmp, at("diagnose.host_timeout_s", 1.0), outcome) == ("ok", "timed_out")


def flaky(fails: int, attempts: list[int] | None = None) -> Callable[[Sequence[str]], Any]:
    """An answer that raises HostUnreachable ``fails`` times, then answers ``{}``; counts attempts."""
    n = attempts if attempts is not None else [0]
    lock = threading.Lock()

    def answer(argv: Sequence[str]) -> Any:
        with lock:
            n[0] += 1
            if n[0] <= fails:
                raise HostUnreachable("node1", "connection refused")
        return {}

    return answer


class AddressFake(FakeTransport):
    """Answers the L3 interface-address command with the host's address; node1's first try fails."""

    def __init__(self) -> None:
        super().__init__()
        self.tries = 0

    def run(self, host: Host, argv: Sequence[str], **kw: Any) -> Any:
        from robustctl.transport.base import CommandResult

        if argv and argv[-1] == "ib0":
            if host.name == "node1":
                self.tries += 1
                if self.tries == 1:
                    raise HostUnreachable(host.name, "connection refused")
            return CommandResult(host.name, 0, f"{host.address}\n".encode(), b"", 0.0)
        return super().run(host, argv, **kw)


def attempts(level: int, probe: str, *, interface: bool = False) -> Callable[[Inventory], int]:
    """How often node1's ``probe`` (or interface lookup) of ``level`` is tried when its first try cannot connect."""

    def observe(inv: Inventory) -> int:
        n = [0]
        fake: FakeTransport = FakeTransport(answers={"node1": {probe: flaky(1, n)}})
        if interface:
            fake = AddressFake()
        s = spec(inv, level)
        from robustctl.diagnose.engine import LEVELS, Engine, _NoProgress

        engine = Engine(s, TransportPool(override=fake), _NoProgress())
        LEVELS[level](engine, list(s.hosts))
        return fake.tries if isinstance(fake, AddressFake) else n[0]

    return observe


_NO_BACKOFF = at("diagnose.retry_backoff_s", 0.0)
for _lvl, _probe in ((0, "host"), (1, "burn"), (2, "allreduce"), (3, "allreduce")):
    # L3: node1 is in two pairs; only its first command cannot connect
    _want = (3, 2) if _lvl == 3 else (2, 1)
    expect("diagnose.retries", f"L{_lvl}", at("diagnose.retries", 0), attempts(_lvl, _probe),
           lambda d, c, _want=_want: (d, c) == _want, _NO_BACKOFF)  # fmt: skip
expect("diagnose.retries", "L3 interface address", at("diagnose.retries", 0), attempts(3, "", interface=True),
       lambda d, c: (d, c) == (2, 1), _NO_BACKOFF, at("diagnose.allreduce.interface", "ib0"))  # fmt: skip


@case("diagnose.retries", "peer re-measure")
def _retries_remeasure(tmp: Path) -> None:
    def tries(inv: Inventory) -> int:
        n = [0]

        def node4(argv: Sequence[str]) -> Any:
            n[0] += 1
            if n[0] == 2:  # the re-measure's first try cannot connect
                raise HostUnreachable("node4", "connection refused")
            return _burn(500)

        answers: dict[str, dict[str, Any]] = {h.name: {"burn": _burn(700)} for h in inv.hosts}
        answers["node4"] = {"burn": node4}
        run_levels(spec(inv, 1), TransportPool(override=FakeTransport(answers=answers)))
        return n[0]

    assert both(tmp, at("diagnose.retries", 0), tries, _NO_BACKOFF, at("jobs", {})) == (3, 2)


@case("diagnose.retries", "stacks")
def _retries_stacks(tmp: Path) -> None:
    def outcome(inv: Inventory) -> list[str]:
        fake = FakeTransport(answers={"node1": {"stacks": flaky(1)}})
        settings = CollectSettings.from_diagnose(inv.diagnose)
        col = collect_stacks(inv.job("j"), TransportPool(override=fake), settings=settings)
        return [h.outcome.value for h in col.hosts if h.host == "node1"]

    d, c = both(tmp, at("diagnose.retries", 0), outcome, _NO_BACKOFF)
    assert d == ["ok"] and c == ["unreachable"]


@case("diagnose.retry_backoff_s", "fan-out (every level and stacks)")
def _backoff(tmp: Path) -> None:
    import robustctl.transport.fanout as fanout

    seen: list[float] = []
    real = fanout.backoff_delay

    def spy(attempt: int, base_s: float, rng: Any = None) -> float:
        seen.append(base_s)
        return real(attempt, 0.0, rng)

    fanout.backoff_delay = spy  # type: ignore[assignment]
    try:
        for value in (None, 7.0):
            inv = load(tmp, *([at("diagnose.retry_backoff_s", value)] if value else []))
            fake = FakeTransport(answers={"node1": {"host": flaky(1), "stacks": flaky(1)}})
            run_levels(spec(inv, 0), TransportPool(override=fake))
            collect_stacks(
                inv.job("j"),
                TransportPool(override=fake),
                settings=CollectSettings.from_diagnose(inv.diagnose),
            )
    finally:
        fanout.backoff_delay = real  # type: ignore[assignment]
    assert seen == [0.5, 0.5, 7.0, 7.0]


def _peer(
    level: int, probe: str, slow: dict[str, Any], again: dict[str, Any], others: dict[str, Any] | None = None
) -> Callable[[Inventory], Any]:
    """node4 measures ``slow``, then ``again`` when re-measured alone; the other hosts ``others``
    (default ``again``): (peer checks of node4, probes run on node4)."""

    def observe(inv: Inventory) -> Any:
        n = [0]

        def node4(argv: Sequence[str]) -> Any:
            n[0] += 1
            return slow if n[0] == 1 else again

        answers = {h.name: {probe: others or again} for h in inv.hosts}
        answers["node4"] = {probe: node4}
        s = spec(inv, level)
        from robustctl.diagnose.engine import LEVELS, Engine, _NoProgress

        engine = Engine(s, TransportPool(override=FakeTransport(answers=answers)), _NoProgress())
        LEVELS[level](engine, list(s.hosts))
        return [(c.name, c.status) for c in engine.state["node4"].checks if c.name.endswith(".peer")], n[0]

    return observe


def _burn(tflops: float) -> dict[str, Any]:
    return {"available": True, "cuda_available": True, "devices": [
        {"index": i, "name": "H100", "kind": "cuda", "tflops": tflops, "mismatches": 0, "checked": 3}
        for i in range(2)]}  # fmt: skip


def _ar(busbw: float) -> dict[str, Any]:
    rows = [{"size_bytes": 1 << 20, "busbw_gbps": busbw, "algbw_gbps": busbw, "correct": True, "time_s": 0.1}]
    return {"available": True, "mode": "intra", "backend": "nccl", "world_size": 2, "results": rows,
            "correct": True, "error": None}  # fmt: skip


expect("diagnose.peer_confirm", "L1", at("diagnose.peer_confirm", False), _peer(1, "burn", _burn(500), _burn(700)),
       lambda d, c: d == ([("burn.peer", Status.OK)], 2) and c == ([("burn.peer", Status.CRITICAL)], 1))  # fmt: skip
expect("diagnose.peer_confirm", "L2", at("diagnose.peer_confirm", False),
       _peer(2, "allreduce", _ar(50), _ar(100)),
       lambda d, c: d == ([("allreduce.peer", Status.OK)], 2) and c == ([("allreduce.peer", Status.CRITICAL)], 1))  # fmt: skip
expect("thresholds.burn_peer_ratio", "L1 fleet", at("thresholds.burn_peer_ratio", 0.5),
       _peer(1, "burn", _burn(500), _burn(500), _burn(700)),
       lambda d, c: d == ([("burn.peer", Status.CRITICAL)], 2) and c == ([], 1))  # fmt: skip
expect("thresholds.allreduce_peer_ratio", "L2 fleet", at("thresholds.allreduce_peer_ratio", 0.4),
       _peer(2, "allreduce", _ar(50), _ar(50), _ar(100)),
       lambda d, c: d == ([("allreduce.peer", Status.CRITICAL)], 2) and c == ([], 1))  # fmt: skip
expect("thresholds.peer_min_peers", "L2 fleet", at("thresholds.peer_min_peers", 5),
       _peer(2, "allreduce", _ar(50), _ar(50), _ar(100)),
       lambda d, c: d == ([("allreduce.peer", Status.CRITICAL)], 2) and c == ([], 1))  # fmt: skip


@case("thresholds.allreduce_peer_ratio", "L3 blame")
def _l3_ratio(tmp: Path) -> None:
    def blame(inv: Inventory) -> list[Status]:
        def pair(host: str) -> Callable[[Sequence[str]], Any]:
            def answer(argv: Sequence[str]) -> Any:
                # pairs 1 and 2 of the ring, (node2, node3) and (node3, node4): node3 is slow
                slow = "--master-port" in argv and flag(argv, "--master-port") in ("29502", "29503")
                return _ar(50 if slow else 100)

            return answer

        fake = FakeTransport(answers={h.name: {"allreduce": pair(h.name)} for h in inv.hosts})
        rep = run_levels(spec(inv, 3), TransportPool(override=fake))
        return [c.status for h in rep.hosts for c in h.checks if c.name == "allreduce.pair"]

    d, c = both(tmp, at("thresholds.allreduce_peer_ratio", 0.4), blame, at("diagnose.peer_confirm", False))
    assert Status.CRITICAL in d and Status.CRITICAL not in c


# ---- diagnose.burn / diagnose.allreduce: argv of L1-L3 --------------------------------------------

for _mode, _obs in (("plan", plan_argv(1)), ("L1", sent(1))):
    expect("diagnose.burn.seconds", _mode, at("diagnose.burn.seconds", 3), _obs, has("'--seconds', '3'"))
    expect("diagnose.burn.size", _mode, at("diagnose.burn.size", 256), _obs, has("'--size', '256'"))
    expect("diagnose.burn.threads", _mode, at("diagnose.burn.threads", 4), _obs, has("'--threads', '4'"))
expect("diagnose.burn.seconds", "L1 budget", at("diagnose.burn.seconds", 100), sent_timeout(1),
       lambda d, c: c == [360.0], at("ssh.command_timeout_s", 1000.0))  # fmt: skip
for _lvl in (2, 3):
    for _mode, _obs in (("plan", plan_argv(_lvl, "allreduce")), ("", sent(_lvl))):
        _m = f"{_mode} L{_lvl}".strip()
        expect("diagnose.allreduce.sizes", _m, at("diagnose.allreduce.sizes", [1024, 4096]), _obs,
               has("'--sizes', '1024,4096'"))  # fmt: skip
        expect("diagnose.allreduce.iters", _m, at("diagnose.allreduce.iters", 9), _obs, has("'--iters', '9'"))
        expect(
            "diagnose.allreduce.warmup", _m, at("diagnose.allreduce.warmup", 3), _obs, has("'--warmup', '3'")
        )
for _mode, _obs in (("plan L2", plan_argv(2)), ("L2", sent(2))):
    expect("diagnose.allreduce.nproc", _mode, at("diagnose.allreduce.nproc", 4), _obs, has("'--nproc', '4'"))
    expect("diagnose.allreduce.use_nccl_tests", _mode, at("diagnose.allreduce.use_nccl_tests", True), _obs,
           has("--nccl-tests"))  # fmt: skip
for _mode, _obs in (("plan L3", plan_argv(3)), ("L3", sent(3))):
    expect("diagnose.allreduce.master_port", _mode, at("diagnose.allreduce.master_port", 40000), _obs,
           has("'--master-port', '40001'"))  # fmt: skip
    expect("diagnose.allreduce.interface", _mode, at("diagnose.allreduce.interface", "ib0"),
           plan_argv(3, "address") if _mode.startswith("plan") else
           (lambda inv: sorted({p for _, p, _a in run_fake(inv, max_level=3).calls})),
           lambda d, c: "ib0" in repr(c) or c != d)  # fmt: skip


@case("diagnose.allreduce.master_port", "L2 (not used: the probe picks a free port)")
def _master_port_l2(tmp: Path) -> None:
    d = plan_argv(2)(load(tmp, name="d"))
    c = plan_argv(2)(load(tmp, at("diagnose.allreduce.master_port", 40000), name="c"))
    assert d == c and all("--master-port" not in a for cmds in c.values() for a in cmds)
    from robustctl.config import AllreduceSettings

    assert "L2 does not use it" in (AllreduceSettings.model_fields["master_port"].description or "")


@case("diagnose.allreduce.master_port", "L3 ports stay below 65536")
def _ports_wrap(tmp: Path) -> None:
    from robustctl.config import DiagnoseSettings
    from robustctl.diagnose.pairs import pair_ports, ring_pairs

    ports = pair_ports(
        ring_pairs([f"n{i}" for i in range(2000)]), DiagnoseSettings(allreduce={"master_port": 65000})
    )
    assert max(ports.values()) == 65535 and min(ports.values()) == 65001


@case("diagnose.allreduce.use_nccl_tests", "refused without GPUs")
def _nccl_tests_refused(tmp: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"changed\.yaml:\d+: diagnose\.allreduce\.use_nccl_tests: nccl-tests need GPUs"
    ):
        load(
            tmp,
            at("gpus_per_host", 0),
            at("jobs", {}),
            at("diagnose.allreduce.use_nccl_tests", True),
            name="changed",
        )


# ---- thresholds: each one changes a check outcome ------------------------------------------------

_nvml = load_probe("nvml")


def nvml_data(n: int = 8, **gpu0: Any) -> dict[str, Any]:
    gpus = list(healthy_gpus(n))
    gpus[0] = dataclasses.replace(gpus[0], **gpu0)
    doc = _nvml.Document("nvml")
    _nvml.run_library(FakeNvml(gpus), "nvml", doc)
    return dict(doc.data)


def disk(mount: str, free_pct: float, total_gib: float = 1000, ro: bool = False) -> dict[str, Any]:
    total = int(total_gib * (1 << 30))
    return {"mount": mount, "device": "/dev/x", "fstype": "ext4", "read_only": ro, "total_bytes": total,
            "free_bytes": int(total * free_pct / 100), "free_pct": free_pct, "inodes_total": 1000,
            "inodes_free": 900, "inodes_free_pct": 90.0, "error": None}  # fmt: skip


def mem(pct: float, total_gib: float = 256) -> dict[str, Any]:
    total = int(total_gib * (1 << 30))
    return {"memory": {"total_bytes": total, "available_bytes": int(total * pct / 100), "available_pct": pct}}


def load_avg(per_cpu: float, blocked: int = 0) -> dict[str, Any]:
    return {"load": {"load1": 1, "load5": per_cpu * 8, "load15": 1, "cpu_count": 8,
                     "load5_per_cpu": per_cpu, "procs_blocked": blocked}}  # fmt: skip


def nic(name: str, state: str = "up", carrier: int = 1, speed: int = 100000) -> dict[str, Any]:
    return {"nics": [{"name": name, "operstate": state, "carrier": carrier, "speed_mbps": speed, "mtu": 9000,
                      "admin_up": True}]}  # fmt: skip


def ib(state: str = "ACTIVE", rate: float = 400.0) -> dict[str, Any]:
    return {"infiniband": [{"device": "mlx5_0", "port": 1, "state": state, "phys_state": "LinkUp",
                            "rate_gbps": rate}]}  # fmt: skip


_XID = {"xid": {"source": "dmesg", "path": None, "matches": 1, "truncated": False,
                "lines": ["[  1.0] NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, DBE"]}}  # fmt: skip
_CLOCK = CheckContext(control_time=1000.0, round_trip_s=0.2)
_EIGHT = CheckContext(expected_gpus=8)


def burn_doc(tflops: Sequence[float], mismatches: int = 0, cuda: bool = True) -> dict[str, Any]:
    devs = [{"index": i, "name": "H100", "kind": "cuda" if cuda else "cpu", "dtype": "bfloat16", "size": 4096,
             "iterations": 100, "checked": 101, "mismatches": mismatches if i == 0 else 0,
             "mismatched_elements": 0, "non_finite": 0, "max_abs_error": 0.0, "max_rel_error": 0.0,
             "tolerance": 0.9, "tflops": t, "error": None} for i, t in enumerate(tflops)]  # fmt: skip
    return {"available": True, "backend": "torch", "dtype": "bfloat16", "size": 4096, "cuda_available": cuda,
            "cuda_reason": None if cuda else "no CUDA", "devices": devs}  # fmt: skip


THRESHOLD_CASES: dict[str, tuple[Any, str, dict[str, Any], CheckContext]] = {
    # field: (changed value, probe, observation, context); the default and changed outcomes differ
    "disk_warn_free_pct": (5.0, "host", {"disks": [disk("/", 8)]}, _CLOCK),
    "disk_crit_free_pct": (3.0, "host", {"disks": [disk("/", 4)]}, _CLOCK),
    "disk_crit_free_gib": (1.0, "host", {"disks": [disk("/dev/shm", 50, total_gib=1.5)]}, _CLOCK),
    "disk_ignore_mounts": (["/scratch*"], "host", {"disks": [disk("/scratch", 1)]}, _CLOCK),
    "readonly_allowed_mounts": (["/"], "host", {"disks": [disk("/", 50, ro=True)]}, _CLOCK),
    "memory_warn_available_pct": (5.0, "host", mem(8), _CLOCK),
    "memory_crit_available_pct": (2.0, "host", mem(3), _CLOCK),
    "memory_min_total_gib": (240.0, "host", mem(50, 200), _CLOCK),
    "load_warn_per_cpu": (10.0, "host", load_avg(9), _CLOCK),
    "load_crit_per_cpu": (2.2, "host", load_avg(2.5), _CLOCK),
    "procs_blocked_warn": (50, "host", load_avg(0.5, 40), _CLOCK),
    "clock_warn_skew_s": (10.0, "host", {"clock": {"time": 995.0}}, _CLOCK),
    "clock_crit_skew_s": (300.0, "host", {"clock": {"time": 1400.0}}, _CLOCK),
    "xid_ignore": ([48], "host", _XID, _CLOCK),
    "nic_ignore": (["eth1"], "host", nic("eth1", "down", 0), _CLOCK),
    "nic_min_speed_mbps": (25000, "host", nic("eth4", speed=10000), _CLOCK),
    "ib_ignore": (["mlx5_0"], "host", ib("INIT"), _CLOCK),
    "ib_min_rate_gbps": (400.0, "host", ib(rate=200.0), _CLOCK),
    "gpu_temp_warn_c": (86.5, "nvml", nvml_data(temperature_c=86), _EIGHT),
    "gpu_temp_crit_c": (95.0, "nvml", nvml_data(temperature_c=91, temperature_slowdown_c=None), _EIGHT),
    "ecc_uncorrected_volatile_max": (
        5,
        "nvml",
        nvml_data(ecc=Ecc(volatile=EccCounts(uncorrected=1))),
        _EIGHT,
    ),
    "ecc_uncorrected_aggregate_max": (
        5,
        "nvml",
        nvml_data(ecc=Ecc(aggregate=EccCounts(uncorrected=10))),
        _EIGHT,
    ),
    "ecc_corrected_volatile_max": (
        50000,
        "nvml",
        nvml_data(ecc=Ecc(volatile=EccCounts(corrected=20000))),
        _EIGHT,
    ),
    "row_remap_pending": ("warning", "nvml", nvml_data(remapped_rows=RemappedRows(pending=True)), _EIGHT),
    "row_remap_failure": ("ignore", "nvml", nvml_data(remapped_rows=RemappedRows(failure=True)), _EIGHT),
    "row_remap_uncorrectable_max": (
        1000,
        "nvml",
        nvml_data(remapped_rows=RemappedRows(uncorrectable=600)),
        _EIGHT,
    ),
    "retired_pages_pending": ("warning", "nvml", nvml_data(retired_pages=RetiredPages(pending=True)), _EIGHT),
    "retired_pages_total_crit": (
        100,
        "nvml",
        nvml_data(retired_pages=RetiredPages(single_bit=tuple(range(70)))),
        _EIGHT,
    ),
    "retired_pages_dbe_warn": (
        20,
        "nvml",
        nvml_data(retired_pages=RetiredPages(double_bit=tuple(range(16)))),
        _EIGHT,
    ),
    "throttle_critical_reasons": (
        ["hw_thermal_slowdown"],
        "nvml",
        nvml_data(clocks_event_reasons=0x8),
        _EIGHT,
    ),
    "throttle_warning_reasons": ([], "nvml", nvml_data(clocks_event_reasons=0x20), _EIGHT),
    "pcie_width_degraded": ("warning", "nvml", nvml_data(pcie=Pcie(current_width=8)), _EIGHT),
    "pcie_gen_degraded": (
        "critical",
        "nvml",
        nvml_data(pcie=Pcie(current_gen=3), clocks_event_reasons=0),
        _EIGHT,
    ),
    "nvlink_inactive": ("warning", "nvml", nvml_data(nvlink=(NvLink(active=False),)), _EIGHT),
    "nvlink_error_max": (10, "nvml", nvml_data(nvlink=(NvLink(replay=5),)), _EIGHT),
    "nvlink_crc_error_max": (10, "nvml", nvml_data(nvlink=(NvLink(crc_flit=50),)), _EIGHT),
    "burn_max_mismatches": (5, "burn", burn_doc([700, 700], mismatches=1), _EIGHT),
    "burn_require_gpu": (False, "burn", burn_doc([1.0], cuda=False), _EIGHT),
    "burn_min_tflops": (500.0, "burn", burn_doc([100, 100]), _EIGHT),
    "burn_peer_ratio": (0.8, "burn", burn_doc([700, 700, 700, 600]), _EIGHT),
    "allreduce_min_busbw_gbps": (200.0, "allreduce", _ar(100), _EIGHT),
    "peer_min_peers": (5, "burn", burn_doc([700, 700, 700, 600]), _EIGHT),
}


def _outcome(
    th: Thresholds, probe: str, data: dict[str, Any], ctx: CheckContext
) -> list[tuple[str, str, str | None]]:
    return sorted((r.name, r.status.value, r.device) for r in evaluate_probe(probe, data, th, 0, ctx))


for _field, (_value, _probe, _data, _ctx) in THRESHOLD_CASES.items():
    expect(f"thresholds.{_field}", f"{_probe} checks", at(f"thresholds.{_field}", _value),
           lambda inv, _p=_probe, _d=_data, _c=_ctx: _outcome(inv.thresholds, _p, _d, _c),
           lambda d, c: True)  # fmt: skip


# ---- jobs ---------------------------------------------------------------------------------------


def evict_targets(modes: Sequence[str] = ("tp", "pp", "dp", "cp", "ep")) -> Callable[[Inventory], Any]:
    """The machines an over-evicting plan from node1 takes, per mode (the inventory's job ``j``)."""

    def observe(inv: Inventory) -> Any:
        path = Path(inv.source)
        ctx = open_context(path, path.with_suffix(".db"))
        try:
            return {m: plan_evict(EvictSpec(hosts="node1", job="j", over_evict=m, reason="x"), ctx).targets
                    for m in modes}  # fmt: skip
        finally:
            ctx.close()

    return observe


_L = "jobs.j.layout"
expect("jobs.*.hosts", "stacks", at("jobs.j.hosts", "node4,node3,node2,node1"), stacks_sent,
       lambda d, c: dict(c)["node4"] != dict(d)["node4"])  # fmt: skip
expect("jobs.*.hosts", "evict", at("jobs.j.hosts", "node1,node3,node2,node4"), evict_targets(("pp",)),
       lambda d, c: c == {"pp": ("node1", "node2")})  # fmt: skip
simple("jobs.*.layout.tp", "evict", at(_L, {"tp": 4, "pp": 2, "dp": 1}), evict_targets())
simple("jobs.*.layout.pp", "evict", at(_L, {"tp": 2, "pp": 4, "dp": 1}), evict_targets())
simple("jobs.*.layout.dp", "evict", at(_L, {"tp": 2, "pp": 1, "dp": 4}), evict_targets())
simple("jobs.*.layout.cp", "evict", at(_L, {"tp": 2, "cp": 2, "pp": 2}), evict_targets())
simple("jobs.*.layout.ep", "evict", at(_L, {"tp": 2, "ep": 2, "pp": 2}), evict_targets())
simple("jobs.*.layout.order", "evict", at(f"{_L}.order", "pp-dp-ep-cp-tp"), evict_targets())
expect("jobs.*.ranks_per_host", "stacks", at("jobs.j.ranks_per_host", 1), stacks_sent,
       lambda d, c: flag(c[1][1], "--ranks") == "1" and flag(d[1][1], "--ranks") == "2-3",
       at(_L, {"tp": 2, "pp": 2, "dp": 2}), at("jobs.j.hosts", "node[1-4]"))  # fmt: skip
# ranks_per_host needs a layout of 4 ranks when it is 1: give the changed inventory its own
CASES[-1] = Case(CASES[-1].key, CASES[-1].mode, lambda tmp: _ranks_per_host(tmp))


def _ranks_per_host(tmp: Path) -> None:
    d = stacks_sent(load(tmp, name="d"))
    c = stacks_sent(load(tmp, at("jobs.j.ranks_per_host", 1), at(_L, {"tp": 2, "pp": 2}), name="c"))
    assert flag(dict(d)["node2"], "--ranks") == "2-3" and flag(dict(c)["node2"], "--ranks") == "1"


for _f, _v in (("match", "megatron"), ("rank_env", "PMI_RANK"), ("local_rank_env", "MPI_LOCALRANKID"),
               ("rank_cmdline", r"--rank[= ](\d+)")):  # fmt: skip
    expect(
        f"jobs.*.process.{_f}",
        "stacks",
        at(f"jobs.j.process.{_f}", _v),
        stacks_sent,
        has(_v.replace("\\", "\\\\")),
    )


# ---- checkpoints (jobs.*.ckpt) -------------------------------------------------------------------


def ckpt_sent(inv: Inventory) -> list[tuple[str, list[str]]]:
    """The ckpt probe's argv per host (``ckpt status``, ``resolve_checkpoint``, evict survival)."""
    from robustctl.ckpt.scan import scan_checkpoints

    job = inv.job("j")
    fake = FakeTransport(answers={h.name: {"ckpt": {"exists": True, "iterations": []}} for h in job.hosts})
    scan_checkpoints(job, list(job.hosts), pool=TransportPool(override=fake), settings=inv.diagnose)
    return sorted((h, a[a.index("-c") + 2 :]) for h, p, a in fake.calls if p == "ckpt")


_C = "jobs.j.ckpt"


def _CK(data: dict[str, Any]) -> None:  # a fresh section each load: the cases mutate it
    at(_C, {"dir": "/ckpt/{host}"})(data)


expect(f"{_C}.dir".replace("jobs.j", "jobs.*"), "ckpt", at(f"{_C}.dir", "/scratch/ckpt"), ckpt_sent,
       lambda d, c: flag_eq(c[0][1], "--dir=/scratch/ckpt") and flag_eq(d[0][1], "--dir=/ckpt/node1"), _CK)  # fmt: skip
expect("jobs.*.ckpt.shared", "ckpt", at(f"{_C}.shared", True), ckpt_sent,
       lambda d, c: len(d) == 4 and [h for h, _ in c] == ["node1"], _CK)  # fmt: skip
expect("jobs.*.ckpt.shards", "ckpt", at(f"{_C}.shards", "mp_rank"), ckpt_sent, has("--shards=mp_rank"), _CK)
expect(
    "jobs.*.ckpt.tracker",
    "ckpt",
    at(f"{_C}.tracker", "tracker.txt"),
    ckpt_sent,
    has("--tracker=tracker.txt"),
    _CK,
)
expect("jobs.*.ckpt.max_iterations", "ckpt", at(f"{_C}.max_iterations", 7), ckpt_sent,
       lambda d, c: flag(c[0][1], "--max-iterations") == "7" and flag(d[0][1], "--max-iterations") == "64", _CK)  # fmt: skip
expect("jobs.*.ckpt.max_entries", "ckpt", at(f"{_C}.max_entries", 9), ckpt_sent,
       lambda d, c: flag(c[0][1], "--max-entries") == "9", _CK)  # fmt: skip
expect("jobs.*.ckpt.timeout_s", "ckpt", at(f"{_C}.timeout_s", 5), ckpt_sent,
       lambda d, c: flag(c[0][1], "--timeout") == "5.0" and flag(d[0][1], "--timeout") == "60.0", _CK)  # fmt: skip


def flag_eq(argv: Sequence[str], token: str) -> bool:
    return token in argv


# ---- jobs.*.launch (robustctl restart on the inventory back end) ----------------------------------

_LAUNCH = at("jobs.j.launch", {"command": ["train", "--rank", "{rank}"]})
"""The base of the launch cases: a per-rank launch of ``train --rank {rank}``."""


def launched(inv: Inventory) -> list[tuple[str, tuple[str, ...], dict[str, str], str | None, str]]:
    """What restart's launch step hands the hosts' launch probe: (host, argv, env, cwd, log) per process."""
    from robustctl.jobs.launch import render_launch

    job = inv.job("j")
    return [(p.host, p.argv, dict(p.env), p.cwd, p.log) for p in render_launch(job, job.hosts, None)]


def stop_sent(inv: Inventory) -> list[str]:
    """The jobprocs probe's argv (without --timeout) that restart's stop step sends to node1."""
    from robustctl.jobs.launch import stop_job

    fake = FakeTransport()
    job = inv.job("j")
    stop_job(job, job.hosts, TransportPool(override=fake), grace_s=job.launch.stop_grace_s)  # type: ignore[union-attr]
    return next(without_timeout(a) for h, p, a in fake.calls if p == "jobprocs" and h == "node1")


def start_scans(inv: Inventory) -> int:
    """How many scans restart's wait step makes before giving up on ranks that never start."""
    from robustctl.jobs.launch import wait_running

    fake = FakeTransport()
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    job = inv.job("j")
    wait_running(
        job, job.hosts, TransportPool(override=fake), timeout_s=job.launch.start_timeout_s,  # type: ignore[union-attr]
        sleep=sleep, clock=lambda: now[0],
    )  # fmt: skip
    return len([c for c in fake.calls if c[0] == "node1"])


_LA = "jobs.j.launch"
_LK = "jobs.*.launch"
expect(f"{_LK}.command", "restart launch", at(f"{_LA}.command", ["torchrun", "--node-rank={node_rank}"]),
       launched, lambda d, c: c[0][1] == ("torchrun", "--node-rank=0") and d[0][1] == ("train", "--rank", "0"),
       _LAUNCH)  # fmt: skip
expect(f"{_LK}.per", "restart launch", at(f"{_LA}.per", "host"), launched,
       lambda d, c: len(d) == 8 and len(c) == 4 and "RANK" in d[0][2] and "RANK" not in c[0][2],
       at(f"{_LA}.command", ["train", "{node_rank}"]))  # fmt: skip
expect(f"{_LK}.env", "restart launch", at(f"{_LA}.env", {"NCCL_DEBUG": "INFO", "SHARD": "s{rank}"}), launched,
       lambda d, c: c[3][2]["SHARD"] == "s3" and "SHARD" not in d[3][2], _LAUNCH)  # fmt: skip
expect(f"{_LK}.cwd", "restart launch", at(f"{_LA}.cwd", "/srv/{job}"), launched,
       lambda d, c: d[0][3] is None and c[0][3] == "/srv/j", _LAUNCH)  # fmt: skip
expect(f"{_LK}.log_dir", "restart launch", at(f"{_LA}.log_dir", "/var/log/train/{job}"), launched,
       lambda d, c: c[5][4] == "/var/log/train/j/j-rank00005.log", _LAUNCH)  # fmt: skip
expect(f"{_LK}.master_port", "restart launch", at(f"{_LA}.master_port", 31000), launched,
       lambda d, c: c[7][2]["MASTER_PORT"] == "31000" and d[7][2]["MASTER_PORT"] == "29500", _LAUNCH)  # fmt: skip
expect(f"{_LK}.stop_grace_s", "restart stop", at(f"{_LA}.stop_grace_s", 5), stop_sent,
       lambda d, c: flag(d, "--grace") == "30" and flag(c, "--grace") == "5", _LAUNCH)  # fmt: skip
expect(f"{_LK}.start_timeout_s", "restart wait", at(f"{_LA}.start_timeout_s", 10), start_scans,
       lambda d, c: c < d, _LAUNCH, at(f"{_LA}.start_timeout_s", 30))  # fmt: skip


# ---- scheduler ----------------------------------------------------------------------------------


def slurm_run(inv: Inventory) -> tuple[Any, ...]:
    """What the Slurm back end built from the inventory runs for ``sinfo``: (argv[0], SLURM_CONF, timeout)."""
    from robustctl.schedulers import make_scheduler
    from robustctl.schedulers.slurm import CommandOutput

    got: list[tuple[Any, ...]] = []

    def runner(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> Any:
        got.append((argv[0], env.get("SLURM_CONF"), timeout))
        return CommandOutput(0, "", "")

    with Store.open(Path(inv.source).with_suffix(".db")) as store:
        sched = make_scheduler(inv.scheduler, inventory=inv, store=store)
    sched = dataclasses.replace(sched, runner=runner)  # type: ignore[type-var]
    sched.run(["sinfo"])
    return (*got[0], sched.requeue_settle_s)


_SLURM = at("scheduler", {"kind": "slurm"})
expect(
    "scheduler.kind",
    "back end",
    _SLURM,
    lambda inv: inv.scheduler.kind and _kind(inv),
    lambda d, c: c == "Slurm",
)
expect("scheduler.timeout_s", "slurm commands", at("scheduler.timeout_s", 7.0), slurm_run,
       lambda d, c: c[2] == 7.0, _SLURM)  # fmt: skip
expect("scheduler.slurm.conf", "slurm commands", at("scheduler.slurm", {"conf": "/etc/slurm/x.conf"}), slurm_run,
       lambda d, c: c[1] == "/etc/slurm/x.conf", _SLURM)  # fmt: skip
expect("scheduler.slurm.bin_dir", "slurm commands", at("scheduler.slurm", {"bin_dir": "/opt/slurm/bin"}),
       slurm_run, lambda d, c: c[0] == "/opt/slurm/bin/sinfo", _SLURM)  # fmt: skip
expect("scheduler.slurm.requeue_settle_s", "slurm requeue", at("scheduler.slurm", {"requeue_settle_s": 4.0}),
       slurm_run, lambda d, c: c[3] == 4.0, _SLURM)  # fmt: skip


def _kind(inv: Inventory) -> str:
    from robustctl.schedulers import make_scheduler

    with Store.open(Path(inv.source).with_suffix(".db")) as store:
        return type(make_scheduler(inv.scheduler, inventory=inv, store=store)).__name__


@case("scheduler.slurm", "refused under another kind")
def _slurm_refused(tmp: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"changed\.yaml:\d+: scheduler: .*scheduler\.slurm would be ignored"
    ):
        load(tmp, at("scheduler", {"kind": "inventory", "slurm": {"conf": "/x"}}), name="changed")


@pytest.fixture
def kube() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        for i in range(1, 5):
            server.add_node(f"node{i}", labels={"robustctl.io/job": "j"}, address=f"127.0.0.{i + 1}")
        server.add_job("default", "j", completions=4, labels={"robustctl.io/job": "j"},
                       node_selector={"robustctl.io/job": "j"})  # fmt: skip
        yield server


K8S_CASES: dict[str, tuple[Any, Callable[[Any, FakeKubeApiServer], Any], Callable[[Any, Any], bool]]] = {}
"""``field: (changed value, act(scheduler, server) -> observation, check(default, changed))``."""


def _drain(s: Any, k: FakeKubeApiServer) -> Any:
    s.drain(["node1"], "x")
    n = k.node("node1")
    return [(t["key"], t["effect"]) for t in n["spec"]["taints"]], dict(n["metadata"].get("labels") or {})


def _standby(s: Any, k: FakeKubeApiServer) -> Any:
    s.hold_standby(["node2"], "x")
    return [t["key"] for t in k.node("node2")["spec"]["taints"]]


def _job_hosts(s: Any, k: FakeKubeApiServer) -> Any:
    try:
        return s.job_hosts("j")
    except Exception as exc:  # a setting that finds no pods says so
        return type(exc).__name__


def _grace(s: Any, k: FakeKubeApiServer) -> Any:
    s.drain(["node1"], "x")
    return [r.body for r in k.requests_to("POST", "/eviction$")]


K8S_CASES.update({
    "evict_taint_key": ("example.com/bad", _drain, lambda d, c: "example.com/bad" in repr(c)),
    "evict_taint_effect": ("NoExecute", _drain, lambda d, c: "NoExecute" in repr(c)),
    "state_label": ("example.com/state", _drain, lambda d, c: "example.com/state" in repr(c)),
    "standby_taint_key": ("example.com/spare", _standby, lambda d, c: c == ["example.com/spare"]),
    "namespace": ("other", _job_hosts, lambda d, c: isinstance(c, str) and isinstance(d, list)),
    "job_label": ("example.com/job", _job_hosts, lambda d, c: isinstance(c, str) and isinstance(d, list)),
    "pods_per_host": (2, _job_hosts, lambda d, c: isinstance(c, str) and isinstance(d, list)),
    "index_label": ("example.com/index", _job_hosts, lambda d, c: isinstance(c, str) and isinstance(d, list)),
    "grace_period_s": (7, _grace, lambda d, c: "gracePeriodSeconds" in repr(c)),
})  # fmt: skip


def _k8s(tmp: Path, kube: FakeKubeApiServer, sub: Mapping[str, Any], name: str) -> Any:
    from robustctl.schedulers import make_scheduler

    kc = kube.write_kubeconfig(tmp / "kubeconfig")
    inv = load(tmp, at("scheduler", {"kind": "kubernetes", "timeout_s": 5,
                                     "kubernetes": {"kubeconfig": str(kc), **sub}}), name=name)  # fmt: skip
    store = Store.open(tmp / f"{name}.db")
    return make_scheduler(inv.scheduler, inventory=inv, store=store)


@pytest.mark.parametrize("field", sorted(K8S_CASES))
def test_kubernetes_option_changes_what_the_back_end_does(
    field: str, kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    value, act, check = K8S_CASES[field]
    d = act(_k8s(tmp_path, kube, {}, "d"), kube)
    with FakeKubeApiServer() as fresh:  # the default run changed the first server's nodes
        for i in range(1, 5):
            fresh.add_node(f"node{i}", labels={"robustctl.io/job": "j"}, address=f"127.0.0.{i + 1}")
        fresh.add_job("default", "j", completions=4, labels={"robustctl.io/job": "j"},
                      node_selector={"robustctl.io/job": "j"})  # fmt: skip
        c = act(_k8s(tmp_path, fresh, {field: value}, "c"), fresh)
    assert d != c and check(d, c), (d, c)


@pytest.mark.parametrize("field", ["kubeconfig", "context", "eviction_timeout_s", "eviction_retry_s"])
def test_kubernetes_connection_and_pacing_options_reach_the_back_end(
    field: str, kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    if field == "kubeconfig":
        with pytest.raises(ConfigError, match="nowhere"):
            _k8s(tmp_path, kube, {"kubeconfig": str(tmp_path / "nowhere")}, "c")
        return
    if field == "context":
        with pytest.raises(ConfigError, match="scheduler.kubernetes"):
            _k8s(tmp_path, kube, {"context": "no-such-context"}, "c")
        return
    s = _k8s(tmp_path, kube, {field: 0.25}, "c")
    assert getattr(s.settings, field) == 0.25


# ---- policy -------------------------------------------------------------------------------------


def rails(hosts: str = "node1", job: str | None = None, earlier: Sequence[str] = (),
          ago_s: float = 0.0, suspects: Sequence[str] = ()) -> Callable[[Inventory], list[str]]:  # fmt: skip
    """The rails an evict plan of ``hosts`` fails, after ``earlier`` evictions ``ago_s`` seconds ago."""

    def observe(inv: Inventory) -> list[str]:
        path = Path(inv.source)
        ctx: ActionContext = open_context(path, path.with_suffix(".db"))
        try:
            for h in earlier:
                ctx.store.set_state(h, MachineState.EVICTED, "earlier")
            for h in suspects:
                ctx.store.set_state(h, MachineState.SUSPECT, "monitoring")
            ctx.clock = lambda: time.time() + ago_s
            plan = plan_evict(EvictSpec(hosts=hosts, job=job, reason="x"), ctx)
            return [r.rule for r in plan.failed_rails]
        finally:
            ctx.close()

    return observe


expect("policy.max_job_fraction", "evict rails", at("policy.max_job_fraction", 0.25), rails("node1,node2", "j"),
       lambda d, c: c == ["max-job-fraction"])  # fmt: skip
expect("policy.max_cluster_fraction", "evict rails", at("policy.max_cluster_fraction", 0.25),
       rails("node1,node2"), lambda d, c: c == ["max-cluster-fraction"])  # fmt: skip
expect("policy.max_evictions_per_hour", "evict rails", at("policy.max_evictions_per_hour", 2),
       rails("node3", earlier=("node1", "node2")), lambda d, c: c == ["max-evictions-per-hour"])  # fmt: skip
expect("policy.circuit_breaker_fraction", "evict rails", at("policy.circuit_breaker_fraction", 0.25),
       rails("node3", suspects=("node1", "node2")), lambda d, c: c == ["circuit-breaker"])  # fmt: skip
expect("policy.window_s", "evict rails", at("policy.window_s", 86400.0),
       rails("node2", earlier=("node1",), ago_s=7200), lambda d, c: c == ["max-cluster-fraction"],
       at("policy.max_cluster_fraction", 0.25))  # fmt: skip


@case("policy.lock_timeout_s", "action lock")
def _lock_timeout(tmp: Path) -> None:
    def takes_lock(inv: Inventory) -> bool:
        """Another robustctl holds the lock and lets go 1 s after the timer starts, just before this one
        asks for it (a few statements: far inside 1 s at any load). The default (30 s) waits for it;
        0 does not."""
        path = Path(inv.source)
        other = Store.open(tmp / "shared.db")
        other.lock("evict", timeout_s=0)
        ctx = open_context(path, tmp / "shared.db")
        release = threading.Timer(1.0, other.unlock)
        try:
            release.start()
            ctx.lock("evict")
            return True
        except StoreLocked:
            return False
        finally:
            ctx.close()
            release.join()  # the other one let go: the next call can take the lock again
            other.close()

    assert both(tmp, at("policy.lock_timeout_s", 0.0), takes_lock) == (True, False)


def standby_size(inv: Inventory) -> tuple[float, float, int]:
    from robustctl.commands.standby import StandbySizeRequest, run_standby_size

    path = Path(inv.source)
    res = run_standby_size(StandbySizeRequest(machines=1000, daily_failure_rate=0.002, inventory=path,
                                              state=path.with_suffix(".db")))  # fmt: skip
    return res.repair_window_days, res.quantile, res.standbys


expect("policy.standby_repair_window_days", "standby size", at("policy.standby_repair_window_days", 7.0),
       standby_size, lambda d, c: c[0] == 7.0 and c[2] > d[2])  # fmt: skip
expect("policy.standby_quantile", "standby size", at("policy.standby_quantile", 0.5), standby_size,
       lambda d, c: c[1] == 0.5 and c[2] < d[2])  # fmt: skip


# ---- jobs.*.code and jobs.*.progress (update, rollback, the progress signal) ---------------------


class _Recorder:
    """A transport that records (host, argv, timeout) and answers every command with exit 1."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str], float]] = []

    def run(self, host: Host, argv: Sequence[str], *, stdin: bytes | None = None, timeout_s: float,
            keep_stdin_open: bool = False) -> Any:  # fmt: skip
        from robustctl.transport.base import CommandResult

        self.calls.append((host.name, list(argv), timeout_s))
        return CommandResult(host.name, 1, b"", b"fatal: not a git repository", 0.0)

    def close(self) -> None:
        pass


def fresh(path: str, value: dict[str, Any]) -> Mutate:
    """``at(path, a copy of value)``: later mutations of the section never reach the shared literal."""
    return lambda data: at(path, copy.deepcopy(value))(data)


_CODE = fresh("jobs.j.code", {"path": "/srv/code"})
_FILES = fresh("jobs.j.progress", {"files": "/run/p/rank*.json"})
_LOG = fresh("jobs.j.progress", {"log": "/run/train.log", "pattern": r"iteration\s+(?P<step>\d+)"})


def git_argv(inv: Inventory) -> list[list[str]]:
    """The git command lines inspecting the job's work trees would run."""
    from robustctl.jobcode.git import inspect_hosts

    rec = _Recorder()
    job = inv.job("j")
    assert job.code is not None
    inspect_hosts(TransportPool(override=rec), job.hosts[:1], job.code, "v1")
    return [a for _, a, _ in rec.calls]


def reader(inv: Inventory) -> tuple[list[str], float]:
    """The progress reader's argv (after the program) and timeout on the first host."""
    from robustctl.jobcode.progress import read_progress

    rec = _Recorder()
    job = inv.job("j")
    assert job.progress is not None
    read_progress(TransportPool(override=rec), "j", job.hosts[:1], job.progress)
    _, argv, timeout = rec.calls[0]
    return argv[argv.index("-c") + 2 :], round(timeout)


def parsed(doc: dict[str, Any], text: str | None = None) -> Callable[[Inventory], Any]:
    """What the progress parser makes of one heartbeat ``doc`` (or log ``text``) under the inventory's spec."""

    def observe(inv: Inventory) -> Any:
        import json
        import re

        from robustctl.jobcode.progress import _parse_host

        spec = inv.job("j").progress
        assert spec is not None
        body = text if text is not None else json.dumps(doc)
        out = {"files": [{"path": "/f", "mtime": 5.0, "text": body}], "matched": 1}
        pattern = re.compile(spec.pattern) if spec.pattern else None
        return [(e.step, e.at) for e in _parse_host("node1", out, spec, pattern).entries]

    return observe


def stability(inv: Inventory) -> float | None:
    """When a version started at t=0 that made 20 steps by t=600 becomes stable under the job's code spec."""
    from robustctl.jobcode.records import JobVersion, stable_verdict

    spec = inv.job("j").code
    assert spec is not None
    v = JobVersion(1, "j", "a" * 40, None, 0.0, 0, None, None, None, None)
    return stable_verdict(v, spec, 20, 600.0)[3]


def forced_after_2h(inv: Inventory) -> bool:
    """Whether a change staged with the job's window is forced two hours later."""
    from robustctl.jobcode.records import pending_update, record_change

    spec = inv.job("j").code
    assert spec is not None
    with Store.open(Path(inv.source).with_suffix(".db"), clock=lambda: 0.0) as store:
        record_change(
            store, "j", ref="v1", commit="a" * 40, from_ref=None, reason="x", window_s=spec.update_window_s
        )
        return pending_update(store, "j", 7200.0)[2]


expect("jobs.*.code.path", "git", at("jobs.j.code.path", "/data/{host}/code"), git_argv, has("/data/node1/code"),
       _CODE)  # fmt: skip
expect("jobs.*.code.stable_after_steps", "stability", at("jobs.j.code.stable_after_steps", 10), stability,
       lambda d, c: d is None and c == 600.0, _CODE)  # fmt: skip
expect("jobs.*.code.stable_after_s", "stability", at("jobs.j.code.stable_after_s", 300.0), stability,
       lambda d, c: d is None and c == 600.0, _CODE)  # fmt: skip
expect("jobs.*.code.update_window_s", "pending update", at("jobs.j.code.update_window_s", 3600.0), forced_after_2h,
       lambda d, c: d is False and c is True, _CODE)  # fmt: skip
expect("jobs.*.progress.files", "reader", at("jobs.j.progress.files", "/hb/{host}/*.json"), reader,
       has("/hb/node1/*.json"), _FILES)  # fmt: skip
expect("jobs.*.progress.max_files", "reader", at("jobs.j.progress.max_files", 8), reader,
       lambda d, c: c[0][2] == "8", _FILES)  # fmt: skip
expect("jobs.*.progress.timeout_s", "reader", at("jobs.j.progress.timeout_s", 5.0), reader,
       lambda d, c: c[1] == 5, _FILES)  # fmt: skip
expect(
    "jobs.*.progress.log", "reader", _LOG, reader, lambda d, c: c[0][:2] == ["log", "/run/train.log"], _FILES
)
CASES[-1] = Case("jobs.*.progress.log", "reader",
                 lambda tmp: both(tmp, _LOG, reader, _FILES) and None)  # fmt: skip
expect("jobs.*.progress.tail_bytes", "reader", at("jobs.j.progress.tail_bytes", 2048), reader,
       lambda d, c: c[0][3] == "2048", _LOG)  # fmt: skip
expect("jobs.*.progress.pattern", "log parse", at("jobs.j.progress.pattern", r"step=(?P<step>\d+)"),
       parsed({}, "iteration 7\nstep=9 iteration 8\n"), lambda d, c: d == [(8, 5.0)] and c == [(9, 5.0)], _LOG)  # fmt: skip
expect("jobs.*.progress.step_field", "heartbeat parse", at("jobs.j.progress.step_field", "iteration"),
       parsed({"step": 3, "iteration": 4, "time": 9.0}), lambda d, c: d == [(3, 9.0)] and c == [(4, 9.0)], _FILES)  # fmt: skip
expect("jobs.*.progress.time_field", "heartbeat parse", at("jobs.j.progress.time_field", "t"),
       parsed({"step": 3, "time": 9.0, "t": 7.0}), lambda d, c: d == [(3, 9.0)] and c == [(3, 7.0)], _FILES)  # fmt: skip


@pytest.mark.parametrize(
    ("section", "why"),
    [
        ({"code": {"path": "relative/code"}}, "must be an absolute path"),
        ({"code": {"path": "/c", "stable_after_s": None}}, "set stable_after_s or stable_after_steps"),
        ({"progress": {"log": "/l", "pattern": "(?P<step>"}}, "invalid regular expression"),
        ({"progress": {"log": "/l", "pattern": "(\\d+)"}}, "named group"),
        ({"progress": {"log": "/l"}}, "log needs pattern"),
        ({"progress": {"files": "/f", "log": "/l", "pattern": "(?P<step>x)"}}, "either files"),
        ({"progress": {"files": "/f", "pattern": "(?P<step>x)"}}, "pattern would be ignored"),
        ({"progress": {"files": "/f", "max_files": 100000}}, "less than or equal"),
    ],
)
def test_bad_code_and_progress_sections_name_file_and_line(
    section: dict[str, Any], why: str, tmp_path: Path
) -> None:
    data = copy.deepcopy(BASE)
    data["jobs"]["j"].update(section)
    path = write(tmp_path, data, "inv")
    with pytest.raises(ConfigError, match=rf"^{path}:\d+: jobs\.j\.(code|progress).*{why}"):
        load_inventory(path, environ={})


# ---- playbooks ----------------------------------------------------------------------------------


@case("playbooks", "playbook list")
def _playbooks_listed(tmp: Path) -> None:
    from robustctl.commands.playbook import run_playbook_list

    (tmp / "site.yaml").write_text(
        "name: site-hang\nparams: {job: {required: true}}\nsteps:\n  - {id: s, kind: stacks}\n"
    )

    def names(inv: Inventory) -> list[str | None]:
        return [p.name for p in run_playbook_list(Path(inv.source)).playbooks]

    d, c = both(tmp, at("playbooks", ["site.yaml"]), names)
    assert "site-hang" in c and "site-hang" not in d and "hang" in d


# ---- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        (
            {"name": "n1", "transport": "local", "address": "127.0.0.2"},
            "address '127.0.0.2' would be ignored",
        ),
        ({"name": "n1", "transport": "local", "ssh": {"user": "x"}}, "ssh settings would be ignored"),
    ],
)
def test_local_hosts_refuse_connection_settings_with_file_line(
    entry: dict[str, Any], why: str, tmp_path: Path
) -> None:
    path = write(tmp_path, {"hosts": [{"name": "n0", "transport": "local"}, entry]}, "inv")
    with pytest.raises(ConfigError) as exc:
        load_inventory(path, environ={})
    assert str(exc.value).startswith(f"{path}:4: hosts[1]: {why}")  # line 4: the entry's first key
    assert exc.value.exit_code == 78
    load_inventory(
        write(tmp_path, {"hosts": [{"name": "n1", "transport": "local", "address": "local"}]}, "ok")
    )


@pytest.mark.parametrize(
    "text",
    [
        "thresholds: {gpu_temp_warn_c: .nan}\n",
        "thresholds: {burn_min_tflops: .inf}\n",
        "diagnose: {retry_backoff_s: .nan}\n",
        "jobs: {j: {hosts: n1, layout: {tp: 1000, pp: 1000, dp: 1000}}}\n",
        "diagnose: {allreduce: {sizes: [17179869184]}}\n",
        "diagnose: {burn: {threads: 100000}}\n",
    ],
)
def test_unbounded_or_nan_values_are_refused(text: str, tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text("hosts: [{name: n1, address: 127.0.0.2}]\n" + text)
    with pytest.raises(ConfigError, match=rf"^{path}:2: "):
        load_inventory(path, environ={})


# ---- sweep ----------------------------------------------------------------------------------------

XID79 = (
    "[  170.05] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
)


def _sweep_history(inv: Inventory, seq: list[tuple[float, str]], check: str) -> bool:
    """Whether the policy (inv.sweep) names n1 after ``check`` went through ``seq`` of (seconds, status)."""
    from robustctl.sweep import history
    from robustctl.sweep.policy import decide

    now = [1_800_000_000.0]
    with Store.open(Path(inv.source).with_suffix(".db"), clock=lambda: now[0]) as store:
        t0 = now[0]
        for dt, st in seq:
            now[0] = t0 + dt
            rec = history.record(store, [history.Observation("n1", check, Status(st), "x")], source="sweep")
        return any(d.named for d in decide(history.check_states(store), ["n1"], rec.at, inv.sweep))


expect("sweep.flap_count", "policy", at("sweep.flap_count", 1),
       lambda inv: _sweep_history(inv, [(0, "critical")], "host.nic"), lambda d, c: c and not d)  # fmt: skip
expect("sweep.flap_window_s", "policy", at("sweep.flap_window_s", 1000.0),
       lambda inv: _sweep_history(inv, [(0, "critical"), (300, "ok"), (900, "critical")], "host.ib"),
       lambda d, c: c and not d)  # fmt: skip
expect("sweep.sustained_s", "policy", at("sweep.sustained_s", 300.0),
       lambda inv: _sweep_history(inv, [(0, "critical"), (300, "critical")], "nvml.temperature"),
       lambda d, c: c and not d)  # fmt: skip


def _sweep_act(inv: Inventory) -> str:
    from robustctl.commands.sweep import SweepRequest, run_sweep

    db = Path(inv.source).with_suffix(".db")
    fake = FakeTransport({"node1": {"host": {"xid": {"lines": [XID79], "matches": 1}}}})
    run_sweep(SweepRequest(inventory=inv, state=db, act=True), pool=TransportPool(override=fake))
    with Store.open(db) as store:
        m = store.machine("node1")
        return m.state.value if m else "active"


expect("sweep.act", "sweep --act", at("sweep.act", "drain"), _sweep_act,
       lambda d, c: (d, c) == ("suspect", "evicted"))  # fmt: skip


@case("sweep.retention_days", "sweep history")
def _retention(tmp: Path) -> None:
    from robustctl.commands.sweep import SweepRequest, run_sweep
    from robustctl.sweep import history

    def kept(inv: Inventory) -> int:
        db = Path(inv.source).with_suffix(".db")
        now = [1_800_000_000.0]
        for _ in range(2):
            run_sweep(SweepRequest(inventory=inv, state=db), pool=TransportPool(override=FakeTransport()),
                      clock=lambda: now[0])  # fmt: skip
            now[0] += 3 * 86_400
        with Store.open(db) as store:
            return len(history.last_sweeps(store, 10))

    assert both(tmp, at("sweep.retention_days", 1.0), kept) == (2, 1)


def _lemon_store(inv: Inventory) -> Path:
    from robustctl.sweep import history

    db = Path(inv.source).with_suffix(".db")
    now = [1_800_000_000.0 - 20 * 86_400]
    with Store.open(db, clock=lambda: now[0]) as store:
        for i in range(4):  # two failures, 20 and 19 days ago
            now[0] += 12 * 3600
            st = Status.CRITICAL if i % 2 == 0 else Status.OK
            history.record(store, [history.Observation("node4", history.HOST_CHECK, st, "x")], source="sweep")
        store.set_state("node3", MachineState.EVICTED, "evict")
        store.set_state("node3", MachineState.RETURNED, "return")
    return db


def _lemons(inv: Inventory) -> list[str]:
    from robustctl.commands.history import LemonsRequest, run_lemons

    db = _lemon_store(inv)
    res = run_lemons(LemonsRequest(inventory=inv, state=db), clock=lambda: 1_800_000_000.0)
    return [lm.host for lm in res.lemons]


expect("sweep.lemon_failures", "lemons", at("sweep.lemon_failures", 2), _lemons, lambda d, c: "node4" in c)  # fmt: skip
expect("sweep.lemon_returns", "lemons", at("sweep.lemon_returns", 1), _lemons, lambda d, c: "node3" in c)  # fmt: skip
expect("sweep.lemon_days", "lemons", at("sweep.lemon_days", 10.0), _lemons, lambda d, c: c == [],
       at("sweep.lemon_failures", 2))  # fmt: skip


@case("sweep.lemon_no_standby", "standby activate")
def _lemon_standby(tmp: Path) -> None:
    from robustctl.actions.standby import plan_activate

    two = [{"name": "node[1-4]", "address": "127.0.0.[2-5]"},
           {"name": "spare[1-2]", "address": "127.0.0.[6-7]", "state": "standby"}]  # fmt: skip

    def picked(inv: Inventory) -> str:
        from robustctl.sweep import history

        path = Path(inv.source)
        db = path.with_suffix(".db")
        with Store.open(db) as store:
            for i in range(5):
                st = Status.CRITICAL if i % 2 == 0 else Status.OK
                history.record(
                    store, [history.Observation("spare1", history.HOST_CHECK, st, "x")], source="sweep"
                )
            for s in ("spare1", "spare2"):
                store.set_state(s, MachineState.STANDBY, "add", readiness=Readiness.READY)
            store.set_state("node1", MachineState.EVICTED, "evict")
        ctx = open_context(path, db)
        try:
            plan = plan_activate(ctx, for_host="node1", job="j")
        finally:
            ctx.close()
        return plan.targets[1]

    assert both(tmp, at("sweep.lemon_no_standby", True), picked, at("hosts", two)) == ("spare1", "spare2")


# ---- watch: (robustctl watch --once, through run_watch_once with a fixed reading) ---------------


def _reading(
    inv: Inventory,
    *,
    newest_age_s: float | None = 5.0,
    step_times: Sequence[float] = (),
    losses: Sequence[float] = (),
) -> Any:
    """A reading of job ``j`` taken now: every rank alive, logs and findings read clean; the newest
    step ``newest_age_s`` old; one sample per step time and per loss."""
    from robustctl.watch.signals import (
        FindingsSignal,
        JobReading,
        Liveness,
        LivenessSignal,
        LogSignal,
        ProgressSignal,
        StepSample,
    )

    now = time.time()
    n = max(len(step_times), len(losses))
    samples = tuple(
        StepSample(
            i + 1,
            step_time_s=step_times[i] if i < len(step_times) else None,
            loss=losses[i] if i < len(losses) else None,
        )
        for i in range(n)
    )

    class Reading(JobReading):
        @property
        def newest_step_time(self) -> float | None:
            return None if newest_age_s is None else self.read_at - newest_age_s

    hosts = tuple(h.name for h in inv.job("j").hosts)
    return Reading(
        job="j",
        backend="inventory",
        hosts=hosts,
        read_at=now,
        progress=ProgressSignal(None, samples),
        liveness=LivenessSignal("inventory", Liveness.ALIVE, 8, 8),
        logs=LogSignal(),
        findings=FindingsSignal(),
    )


def _watch(
    *, advise: bool = True, memory: Callable[[float], Any] | None = None, **reading: Any
) -> Callable[[Inventory], Any]:
    """One ``watch --once`` evaluation of job ``j`` on a fixed reading, in a fresh store (seeded with
    ``memory(now)`` as the watcher's remembered state): ``(action, rail, class, playbook)``."""
    from robustctl import watchstore
    from robustctl.commands.watch import STATE_VERSION, WatchRequest, run_watch_once
    from robustctl.watch.rules import FailSlowState

    def observe(inv: Inventory) -> Any:
        state = Path(inv.source).with_suffix(".db")
        if memory is not None:
            with Store.open(state) as store:
                doc = {
                    "version": STATE_VERSION,
                    "memory": memory(time.time()).to_json(),
                    "fail_slow": FailSlowState().to_json(),
                    "last_step": None,
                    "incident_id": None,
                }
                watchstore.put_state(store, "j", doc, at=time.time())
        result = run_watch_once(
            WatchRequest(inventory=inv, job="j", state=state, advise=advise),
            reader=lambda *a, **kw: _reading(inv, **reading),
        )
        d = result.decision
        return d["action"], d["rail"], d["signal"], d["playbook"], result.notify is not None

    return observe


def _recent_run(ago_s: float) -> Callable[[float], Any]:
    """A memory whose last recovery (no incident open) was decided ``ago_s`` before now."""
    from robustctl.watch.decide import RunInProgress, WatchMemory

    return lambda now: WatchMemory(
        recoveries_s=(now - ago_s,), running=RunInProgress("hang", "j-1", now - ago_s), incidents_opened=1
    )


_CALM = [1.0 + 0.001 * (i % 7) for i in range(30)]
expect("watch.stall_after_s", "watch --once (hang)", at("watch.stall_after_s", 30), _watch(newest_age_s=60),
       lambda d, c: d[0] == "none" and c[:3] == ("advise", None, "hang"))  # fmt: skip
expect("watch.slow_factor", "watch --once (fail-slow)", at("watch.slow_factor", 2.0),
       _watch(step_times=[*_CALM, *[1.5 + 0.001 * (i % 5) for i in range(15)]]),
       lambda d, c: d[:3] == ("advise", None, "fail-slow") and c[0] == "none")  # fmt: skip
expect("watch.persist_steps", "watch --once (fail-slow)", at("watch.persist_steps", 3),
       _watch(step_times=[*_CALM, *[3.0 + 0.001 * (i % 5) for i in range(5)]]),
       lambda d, c: d[0] == "none" and c[:3] == ("advise", None, "fail-slow"))  # fmt: skip
expect("watch.spike_factor", "watch --once (nan-loss)", at("watch.spike_factor", 3.0),
       _watch(losses=[2.0] * 10 + [8.0]),
       lambda d, c: d[0] == "none" and c[:3] == ("advise", None, "nan-loss"))  # fmt: skip
expect("watch.loss_window", "watch --once (nan-loss)", at("watch.loss_window", 5),
       _watch(losses=[100.0] * 10 + [1.0] * 5 + [6.0]),
       lambda d, c: d[0] == "none" and c[:3] == ("advise", None, "nan-loss"))  # fmt: skip
expect("watch.playbooks", "watch --once (hang)", at("watch.playbooks", {"hang": "my-hang"}),
       _watch(newest_age_s=60), lambda d, c: d[3] == "hang" and c[3] == "my-hang",
       at("watch.stall_after_s", 30))  # fmt: skip
expect("watch.cooldown_s", "watch --once (rails)", at("watch.cooldown_s", 0),
       _watch(newest_age_s=60, memory=_recent_run(100)),
       lambda d, c: d[:2] == ("skip", "cooldown") and c[:2] == ("advise", None),
       at("watch.stall_after_s", 30))  # fmt: skip
expect("watch.max_recoveries_per_hour", "watch --once (rails)", at("watch.max_recoveries_per_hour", 1),
       _watch(newest_age_s=60, memory=_recent_run(100)),
       lambda d, c: d[:2] == ("advise", None) and c[:2] == ("advise", "hourly-limit"),
       at("watch.stall_after_s", 30), at("watch.cooldown_s", 0))  # fmt: skip
expect("watch.notify", "watch --once (hourly limit)", at("watch.notify", ["true"]),
       _watch(advise=False, newest_age_s=60, memory=_recent_run(100)),
       lambda d, c: d == ("stop", "hourly-limit", "hang", "hang", False) and c[4],
       at("watch.stall_after_s", 30), at("watch.cooldown_s", 0), at("watch.max_recoveries_per_hour", 1))  # fmt: skip


def _loop_periods(inv: Inventory) -> list[float]:
    """The waits between three evaluations of ``robustctl watch``'s loop (the job healthy; a fake
    sleep records each period; the stop event is set after the third evaluation)."""
    from robustctl.commands.watch import WatchRequest, run_watch_loop

    stop = threading.Event()
    periods: list[float] = []
    seen: list[object] = []

    def on_result(result: object) -> None:
        seen.append(result)
        if len(seen) == 3:
            stop.set()

    run_watch_loop(
        WatchRequest(inventory=inv, job="j", state=Path(inv.source).with_suffix(".db")),
        sleep=periods.append,
        stop_event=stop,
        on_result=on_result,
        reader=lambda *a, **kw: _reading(inv),
    )
    return periods


expect("watch.interval_s", "watch (the loop)", at("watch.interval_s", 5), _loop_periods,
       lambda d, c: d == [30.0, 30.0] and c == [5.0, 5.0])  # fmt: skip


# ---- the table's own tests ----------------------------------------------------------------------


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_option_takes_effect(c: Case, tmp_path: Path) -> None:
    c.run(tmp_path)


INFORMATIONAL = {
    # read by nothing but `inventory show` (asserted shown by the hosts[].labels case)
    "hosts[].labels",
}


def leaves(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf option of ``model``: (dotted key, pydantic FieldInfo); lists ``[]``, dicts ``*``."""
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        ann = info.annotation
        wrapper = ""
        inner = ann
        for _ in range(3):
            args = [a for a in get_args(inner) if a is not type(None)]
            origin = get_origin(inner)
            if origin in (list,) and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
                wrapper, inner = "[]", args[0]
            elif (
                origin is dict
                and len(args) == 2
                and isinstance(args[1], type)
                and issubclass(args[1], BaseModel)
            ):
                wrapper, inner = ".*", args[1]
            elif len(args) == 1 and origin is not list and origin is not tuple and origin is not dict:
                inner = args[0]
            else:
                break
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            yield from leaves(inner, f"{key}{wrapper}.")
        else:
            yield key, info


def test_every_option_has_a_case() -> None:
    keys = {k for k, _ in leaves(InventoryFile)}
    covered = {c.key for c in CASES}
    covered |= {f"thresholds.{f}" for f in THRESHOLD_CASES}
    covered |= {f"scheduler.kubernetes.{f}" for f in K8S_CASES}
    covered |= {
        f"scheduler.kubernetes.{f}"
        for f in ("kubeconfig", "context", "eviction_timeout_s", "eviction_retry_s")
    }
    missing = sorted(keys - covered - INFORMATIONAL)
    assert not missing, f"options without a case in test_config_effect.py: {missing}"
    assert not (covered - keys - {"scheduler.slurm"}), sorted(covered - keys)


def annotated_metadata(tp: Any) -> list[Any]:
    """The ``Annotated`` metadata anywhere inside a type (``Seconds | None``, ``tuple[Annotated[int, ...], ...]``)."""
    out = list(getattr(tp, "__metadata__", ()))
    for a in get_args(tp):
        out += annotated_metadata(a)
    return out


def test_every_number_has_an_upper_bound() -> None:
    unbounded = []
    for key, info in leaves(InventoryFile):
        ann = repr(info.annotation)
        if not any(t in ann for t in ("int", "float")) or "str" in ann:
            continue
        metas = list(info.metadata) + annotated_metadata(info.annotation)
        for m in list(metas):
            metas.extend(getattr(m, "metadata", ()))
        if not any(getattr(m, "le", None) is not None or getattr(m, "lt", None) is not None for m in metas):
            unbounded.append(key)
    assert not unbounded, unbounded
