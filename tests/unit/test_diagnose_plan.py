"""The dry-run plan: each host's real command line per level, connect-free."""

from __future__ import annotations

import shlex

from robustctl.config import DiagnoseSettings, PythonSettings, SshSettings
from robustctl.diagnose import DiagnoseSpec, plan_levels
from robustctl.inventory import Host
from robustctl.probes import STREAM_BOOT
from robustctl.thresholds import Thresholds


def hosts(n: int) -> tuple[Host, ...]:
    py = PythonSettings(wrapper=["docker", "exec", "-i", "trainer"])
    return tuple(Host(f"node{i}", f"node{i}", "ssh", SshSettings(), py) for i in range(n))


def plan(n: int, **settings: object) -> dict[str, object]:
    spec = DiagnoseSpec(hosts=hosts(n), settings=DiagnoseSettings(**settings), thresholds=Thresholds())
    return plan_levels(spec)


def commands(p: dict[str, object], host: int) -> list[dict[str, object]]:
    return p["hosts"][host]["commands"]  # type: ignore[index,no-any-return]


def test_every_level_shows_the_real_argv() -> None:
    p = plan(3, burn={"seconds": 2, "size": 256}, allreduce={"sizes": [1024], "master_port": 30000})
    assert p["kind"] == "diagnose-plan" and p["schema_version"] == 1
    cmds = commands(p, 0)
    assert [c["level"] for c in cmds] == [0, 1, 2, 3, 3]
    l0, l1, l2, l3a, l3b = cmds
    assert shlex.split(str(l0["command"])) == [
        "docker",
        "exec",
        "-i",
        "trainer",
        "python3",
        "-c",
        STREAM_BOOT,
    ]
    assert l0["stdin"] == "diagnostics/_prelude.py + bundle.py (host.py --timeout 118, nvml.py --timeout 118)"
    assert shlex.split(str(l1["command"]))[7:] == ["--seconds", "2", "--size", "256", "--timeout", "118"]
    argv2 = shlex.split(str(l2["command"]))
    assert argv2[argv2.index("--master-addr") + 1] == "127.0.0.1"
    # node0 is rank 0 of (node0, node1) and rank 1 of (node2, node0); master is the first host's name
    assert (l3a["pair"], l3a["rank"], l3b["pair"], l3b["rank"]) == ("node0<->node1", 0, "node2<->node0", 1)
    a, b = shlex.split(str(l3a["command"])), shlex.split(str(l3b["command"]))
    assert a[a.index("--master-addr") + 1] == "node0" and a[a.index("--master-port") + 1] == "30001"
    assert b[b.index("--master-addr") + 1] == "node2" and b[b.index("--master-port") + 1] == "30003"
    assert a[a.index("--bind-addr") + 1] == b[b.index("--bind-addr") + 1] == "node0"


def test_one_host_lists_l3_as_skipped_with_its_reason() -> None:
    p = plan(1)
    assert p["levels"][-1] == {  # type: ignore[index]
        "level": 3,
        "name": "inter-allreduce",
        "skipped": "needs at least two hosts, 1 targeted",
    }
    assert all(c["level"] != 3 for c in commands(p, 0))


def test_interface_addresses_are_resolved_at_run_time() -> None:
    p = plan(2, allreduce={"interface": "ib0"})
    cmds = commands(p, 1)
    ask = [c for c in cmds if c["probe"] == "address"]
    assert len(ask) == 1 and shlex.split(str(ask[0]["command"]))[-1] == "ib0"
    (pair,) = [c for c in cmds if c.get("pair")]
    argv = shlex.split(str(pair["command"]))
    assert argv[argv.index("--master-addr") + 1] == "<ib0 address of node0, resolved at run time>"
    assert any("ib0" in n for n in p["notes"])  # type: ignore[attr-defined]
