"""Level-0 host evaluators (robustctl.checks.host) on plain probe data."""

from __future__ import annotations

from typing import Any

import pytest

from robustctl.checks.host import (
    evaluate_clock,
    evaluate_disk,
    evaluate_ib,
    evaluate_load,
    evaluate_memory,
    evaluate_nic,
    evaluate_xid,
)
from robustctl.checks.registry import CheckContext, checks_for_probe
from robustctl.models import Status
from robustctl.thresholds import Thresholds

TH = Thresholds()
GIB = 1 << 30


def disk(
    mount: str, free_pct: float, *, total_gib: float = 1000, ro: bool = False, **kw: Any
) -> dict[str, Any]:
    total = int(total_gib * GIB)
    d = {
        "mount": mount,
        "device": "/dev/x",
        "fstype": "ext4",
        "read_only": ro,
        "total_bytes": total,
        "free_bytes": int(total * free_pct / 100),
        "free_pct": free_pct,
        "inodes_total": 1000,
        "inodes_free": 900,
        "inodes_free_pct": 90.0,
        "error": None,
    }
    d.update(kw)
    return d


def statuses(results: list[Any]) -> list[tuple[Status, str | None]]:
    return [(r.status, r.device) for r in results]


def test_every_host_check_is_registered() -> None:
    names = {s.name for s in checks_for_probe("host")}
    assert names == {"host.disk", "host.memory", "host.load", "host.clock", "host.xid", "host.nic", "host.ib"}
    assert all(s.level == 0 for s in checks_for_probe("host"))


@pytest.mark.parametrize(
    ("free_pct", "expected"),
    [(50.0, Status.OK), (9.0, Status.WARNING), (4.0, Status.CRITICAL)],
)
def test_disk_free_space_levels(free_pct: float, expected: Status) -> None:
    out = evaluate_disk({"disks": [disk("/", free_pct)]}, TH)
    assert [r.status for r in out] == [expected]


def test_disk_absolute_floor_inodes_ignore_and_statvfs_error() -> None:
    th = Thresholds(disk_crit_free_gib=1.0, disk_ignore_mounts=("/scratch*",))
    data = {
        "disks": [
            disk("/dev/shm", 50.0, total_gib=1.5),  # 0.75 GiB free: below the 1 GiB floor
            disk("/var", 50.0, inodes_free_pct=1.0),
            disk("/scratch1", 0.1, ro=True),
            {
                **disk("/data", 0),
                "total_bytes": None,
                "free_bytes": None,
                "free_pct": None,
                "error": "Timeout",
            },
        ]
    }
    assert statuses(evaluate_disk(data, th)) == [
        (Status.CRITICAL, "/dev/shm"),
        (Status.CRITICAL, "/var"),
        (Status.UNKNOWN, "/data"),
    ]


def test_readonly_allowed_patterns() -> None:
    data = {"disks": [disk("/etc/hostname", 50, ro=True), disk("/", 50, ro=True)]}
    assert statuses(evaluate_disk(data, TH)) == [(Status.CRITICAL, "/")]
    assert [r.status for r in evaluate_disk(data, Thresholds(readonly_allowed_mounts=("/", "/etc/*")))] == [
        Status.OK
    ]


def test_null_sub_collections_are_unknown_with_the_probe_reason() -> None:
    data = {
        "disks": None,
        "memory": None,
        "load": None,
        "xid": None,
        "nics": None,
        "infiniband": None,
        "clock": None,
    }
    ctx = CheckContext(
        probe_errors=("kernel log: dmesg: Operation not permitted", "memory: /proc/meminfo: gone")
    )
    for fn in (
        evaluate_disk,
        evaluate_memory,
        evaluate_load,
        evaluate_xid,
        evaluate_nic,
        evaluate_ib,
        evaluate_clock,
    ):
        out = fn(data, TH, ctx)
        assert [r.status for r in out] == [Status.UNKNOWN], fn.__name__
    assert "Operation not permitted" in evaluate_xid(data, TH, ctx)[0].summary
    assert "/proc/meminfo: gone" in evaluate_memory(data, TH, ctx)[0].summary


def test_memory_levels_and_total() -> None:
    def mem(pct: float, total_gib: float = 256) -> dict[str, Any]:
        total = int(total_gib * GIB)
        return {
            "memory": {"total_bytes": total, "available_bytes": int(total * pct / 100), "available_pct": pct}
        }

    assert evaluate_memory(mem(50), TH)[0].status is Status.OK
    assert evaluate_memory(mem(8), TH)[0].status is Status.WARNING
    assert evaluate_memory(mem(3), TH)[0].status is Status.CRITICAL
    out = evaluate_memory(mem(50, total_gib=200), Thresholds(memory_min_total_gib=240))
    assert [r.status for r in out] == [Status.CRITICAL] and "expected at least 240" in out[0].summary


def test_load_per_cpu_and_blocked_tasks() -> None:
    def load(per_cpu: float, blocked: int | None = 0) -> dict[str, Any]:
        return {
            "load": {
                "load1": 1,
                "load5": per_cpu * 8,
                "load15": 1,
                "cpu_count": 8,
                "load5_per_cpu": per_cpu,
                "procs_blocked": blocked,
            }
        }

    assert evaluate_load(load(0.5), TH)[0].status is Status.OK
    assert evaluate_load(load(5.0), TH)[0].status is Status.OK  # busy CPUs are not a fault
    assert evaluate_load(load(9.0), TH)[0].status is Status.WARNING
    assert evaluate_load(load(2.5), Thresholds(load_crit_per_cpu=2.2))[0].status is Status.CRITICAL
    hung = evaluate_load(load(0.5, blocked=40), TH)
    assert [r.status for r in hung] == [Status.WARNING] and "D state" in hung[0].summary
    assert evaluate_load(load(0.5, blocked=None), TH)[0].status is Status.OK


def test_clock_skew_outside_the_round_trip_window() -> None:
    def clock(host: float) -> dict[str, Any]:
        return {"clock": {"time": host}}

    ctx = CheckContext(control_time=1000.0, round_trip_s=0.2)
    assert evaluate_clock(clock(1000.09), TH, ctx)[0].status is Status.OK
    assert evaluate_clock(clock(1001.5), TH, ctx)[0].status is Status.OK  # 1.5 - 0.1 = 1.4 s < 2 s
    warn = evaluate_clock(clock(995.0), TH, ctx)[0]
    assert warn.status is Status.WARNING and warn.evidence["skew_s"] == pytest.approx(4.9)
    assert evaluate_clock(clock(1400.0), Thresholds(clock_crit_skew_s=300), ctx)[0].status is Status.CRITICAL
    assert evaluate_clock({"clock": {"time": 5.0}}, TH)[0].status is Status.NOT_APPLICABLE


XID_LINES = [
    "[  170.0] NVRM: Xid (PCI:0000:01:00): 31, pid=77, name=python, Ch 00000013, engmask 00000101",
    "[  219.4] NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable DBE",
    "[  219.5] NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable DBE",
]


def test_xid_events_grouped_and_classified() -> None:
    data = {"xid": {"source": "dmesg", "path": None, "lines": XID_LINES, "matches": 3, "truncated": False}}
    out = evaluate_xid(data, TH)
    assert statuses(out) == [(Status.CRITICAL, "0000:07:00"), (Status.WARNING, "0000:01:00")]
    assert out[0].evidence["count"] == 2 and out[0].evidence["category"] == "hardware"
    assert out[1].evidence["category"] == "application"
    ignored = evaluate_xid(data, Thresholds(xid_ignore=(31, 48)))
    assert [r.status for r in ignored] == [Status.OK]


SXID_LINES = [
    "[  300.1] nvidia-nvswitch0: SXid (PCI:0000:86:00.0): 24007, Fatal, Link 27 sourcetrack timeout error (First)",
    "[  300.1] nvidia-nvswitch0: SXid (PCI:0000:86:00.0): 24007, Severity 1 Engine instance 27 Sub-engine instance 00",
    "[  300.1] nvidia-nvswitch0: SXid (PCI:0000:86:00.0): 24007, Data {0x00000000, 0x10008100}",
    "[  301.0] nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12021, Non-fatal, Link 34 Single bit ECC error",
    "[  302.0] nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 22013, Non-fatal, Link 35 Minion Link DLREQ interrupt",
]


def test_fatal_sxid_makes_the_check_critical_as_a_gpu_xid_does() -> None:
    lines = [*XID_LINES[:1], *SXID_LINES]
    data = {"xid": {"source": "dmesg", "path": None, "lines": lines, "matches": 6, "truncated": False}}
    out = evaluate_xid(data, TH)
    assert statuses(out) == [
        (Status.CRITICAL, "0000:86:00.0"),
        (Status.WARNING, "0000:01:00"),
        (Status.WARNING, "0000:05:00.0"),
    ]
    fatal = out[0].evidence
    assert (fatal["sxid"], fatal["count"], fatal["fatal"], fatal["links"]) == (24007, 1, True, [27])
    assert fatal["switch"] == "nvidia-nvswitch0" and fatal["last_line"] == SXID_LINES[0]
    assert fatal["source"] == "dmesg" and "24007" in out[0].summary
    assert out[2].evidence["sxid"] == 12021  # 22013 ("can be safely ignored") gives no result


def test_ignorable_sxid_alone_is_ok_and_named() -> None:
    data = {
        "xid": {"source": "dmesg", "path": None, "lines": SXID_LINES[4:], "matches": 1, "truncated": False}
    }
    (r,) = evaluate_xid(data, TH)
    assert r.status is Status.OK and "SXid 22013" in r.summary


def test_xid_clean_log_is_ok() -> None:
    data = {
        "xid": {"source": "file", "path": "/var/log/kern.log", "lines": [], "matches": 0, "truncated": False}
    }
    out = evaluate_xid(data, TH)
    assert [r.status for r in out] == [Status.OK] and "/var/log/kern.log" in out[0].summary


def nic(
    name: str, state: str = "up", carrier: int | None = 1, speed: int | None = 100000, **kw: Any
) -> dict[str, Any]:
    d = {
        "name": name,
        "operstate": state,
        "carrier": carrier,
        "speed_mbps": speed,
        "mtu": 9000,
        "admin_up": True,
    }
    d.update(kw)
    return d


def test_nic_rules() -> None:
    data = {
        "nics": [
            nic("eth0"),
            nic("eth1", "down", 0),
            nic("eth2", "up", 0),
            nic("eth3", "dormant"),
            nic("eth4", speed=10000),
            nic("eno9", "down", None, None, admin_up=False),
            nic("ib9", "down", 0),
        ]
    }
    out = evaluate_nic(data, Thresholds(nic_min_speed_mbps=25000, nic_ignore=("ib*",)))
    assert statuses(out) == [
        (Status.CRITICAL, "eth1"),
        (Status.CRITICAL, "eth2"),
        (Status.WARNING, "eth3"),
        (Status.CRITICAL, "eth4"),
    ]
    assert evaluate_nic({"nics": [nic("eth0", "unknown")]}, TH)[0].status is Status.OK
    none = evaluate_nic({"nics": [], "nics_skipped": ["lo", "veth1"]}, TH)
    assert [r.status for r in none] == [Status.NOT_APPLICABLE]


def test_ib_rules() -> None:
    def port(
        dev: str, n: int, state: str = "ACTIVE", phys: str = "LinkUp", rate: float = 400.0
    ) -> dict[str, Any]:
        return {"device": dev, "port": n, "state": state, "phys_state": phys, "rate_gbps": rate}

    assert evaluate_ib({"infiniband": []}, TH)[0].status is Status.NOT_APPLICABLE
    ok = evaluate_ib({"infiniband": [port("mlx5_0", 1), port("mlx5_1", 1)]}, TH)
    assert [r.status for r in ok] == [Status.OK]
    data = {
        "infiniband": [
            port("mlx5_0", 1, "INIT", "LinkUp"),
            port("mlx5_1", 1, phys="Polling"),
            port("mlx5_2", 1, rate=200.0),
            port("mlx5_bond_0", 1, "DOWN", "Disabled"),
        ]
    }
    out = evaluate_ib(data, Thresholds(ib_min_rate_gbps=400, ib_ignore=("mlx5_bond_*",)))
    assert statuses(out) == [
        (Status.CRITICAL, "mlx5_0/1"),
        (Status.CRITICAL, "mlx5_1/1"),
        (Status.CRITICAL, "mlx5_2/1"),
    ]


@pytest.mark.parametrize(
    ("evaluate", "key", "what"),
    [
        (evaluate_disk, "disks", "filesystem"),
        (evaluate_nic, "nics", "network interface"),
        (evaluate_ib, "infiniband", "InfiniBand port"),
    ],
)
def test_list_entries_that_are_not_objects_are_unknown_never_healthy(
    evaluate: Any, key: str, what: str
) -> None:
    results = evaluate({key: [None, 3, "x"]}, Thresholds())
    assert [(r.status, r.summary) for r in results] == [(Status.UNKNOWN, f"3 {what} entries not understood")]
