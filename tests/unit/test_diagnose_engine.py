"""The diagnose engine with a scripted transport: levels, stop rule, outcomes, peer rule, pairs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from robustctl.config import DiagnoseSettings, PythonSettings, SshSettings
from robustctl.diagnose import DiagnoseSpec, run_levels
from robustctl.errors import HostUnreachable
from robustctl.inventory import Host
from robustctl.models import Outcome, Status
from robustctl.testing.fake_transport import FakeTransport
from robustctl.thresholds import Thresholds
from robustctl.transport.pool import TransportPool

REPO = Path(__file__).resolve().parents[2]


NO_GPU = {
    "available": False,
    "reason": "nvmlInit: NVML Shared Library Not Found",
    "reason_code": "library_not_found",
}


def burn(tflops: float, mismatches: int = 0) -> dict[str, Any]:
    return {
        "available": True,
        "backend": "torch",
        "devices": [
            {
                "index": 0,
                "name": "AMD EPYC",
                "kind": "cpu",
                "iterations": 10,
                "checked": 10,
                "mismatches": mismatches,
                "tflops": tflops,
                "max_rel_error": 0.0,
                "tolerance": 1e-3,
                "error": None,
            }
        ],
    }


def hosts(n: int) -> list[Host]:
    return [Host(f"n{i}", f"127.0.0.{i + 2}", "ssh", SshSettings(), PythonSettings()) for i in range(n)]


def run(fake: FakeTransport, hs: list[Host], **kw: Any) -> Any:
    settings = DiagnoseSettings(retries=0, **kw.pop("settings", {}))
    req = DiagnoseSpec(hosts=tuple(hs), settings=settings, thresholds=Thresholds(), **kw)
    return run_levels(req, TransportPool(override=fake))


def with_clock(data: dict[str, Any]) -> Any:
    import time

    def answer(argv: Any) -> dict[str, Any]:
        d = json.loads(json.dumps(data))
        d["clock"]["time"] = time.time()
        return d

    return answer


def test_healthy_l0_then_l1_with_not_applicable_gpu(healthy_host_data: dict[str, Any]) -> None:
    hs = hosts(4)
    fake = FakeTransport(
        {h.name: {"host": with_clock(healthy_host_data), "nvml": NO_GPU, "burn": burn(1.0)} for h in hs}
    )
    rep = run(fake, hs, max_level=1)
    assert rep.status is Status.OK and rep.exit_code == 0
    assert [lv.ran for lv in rep.levels] == [True, True, False, False]
    for h in rep.hosts:
        nv = [c for c in h.checks if c.name.startswith("nvml.")]
        assert nv and all(c.status is Status.NOT_APPLICABLE for c in nv)
    assert {p for _, p, _ in fake.calls} == {"host", "nvml", "burn"}


def test_stops_at_first_level_with_suspects_unless_all_levels(healthy_host_data: dict[str, Any]) -> None:
    hs = hosts(4)
    answers = {h.name: {"host": with_clock(healthy_host_data), "nvml": NO_GPU, "burn": burn(1.0)} for h in hs}
    answers["n0"]["burn"] = burn(1.0, mismatches=3)
    rep = run(FakeTransport(answers), hs, max_level=1)
    assert rep.suspects == ("n0",) and rep.exit_code == 2
    # L0 was clean, L1 named n0; nothing after.
    assert [(lv.level, lv.ran, lv.suspects) for lv in rep.levels][:2] == [(0, True, ()), (1, True, ("n0",))]
    assert not rep.levels[2].ran

    xid = json.loads(json.dumps(healthy_host_data))
    xid["xid"]["lines"] = [
        "[  170.05] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    ]
    xid["xid"]["matches"] = 1
    answers["n1"]["host"] = with_clock(xid)
    fake = FakeTransport(answers)
    rep = run(fake, hs, max_level=1)
    assert rep.suspects == ("n1",)
    assert not rep.levels[1].ran and not any(p == "burn" for _, p, _ in fake.calls)
    fake = FakeTransport(answers)
    rep = run(fake, hs, max_level=1, all_levels=True)
    assert rep.suspects == ("n0", "n1")
    assert sum(1 for _, p, _ in fake.calls if p == "burn") == 4


def test_unreachable_host_is_unknown_and_skips_later_levels(healthy_host_data: dict[str, Any]) -> None:
    hs = hosts(3)
    answers = {h.name: {"host": with_clock(healthy_host_data), "nvml": NO_GPU, "burn": burn(1.0)} for h in hs}
    answers["n2"]["host"] = HostUnreachable("n2", "connection refused by 127.0.0.4:22")
    fake = FakeTransport(answers)
    rep = run(fake, hs, max_level=1)
    n2 = rep.hosts[2]
    assert (n2.status, n2.outcome) == (Status.UNKNOWN, Outcome.UNREACHABLE)
    assert n2.error == "connection refused by 127.0.0.4:22"
    assert rep.unknown == ("n2",) and rep.exit_code == 3
    assert ("n2", "burn") not in {(h, p) for h, p, _ in fake.calls}


def test_probe_failure_is_unknown_check_not_lost_host(healthy_host_data: dict[str, Any]) -> None:
    from robustctl.transport.base import CommandResult

    hs = hosts(2)
    answers: dict[str, dict[str, Any]] = {
        h.name: {"host": with_clock(healthy_host_data), "nvml": NO_GPU} for h in hs
    }
    answers["n1"]["nvml"] = CommandResult(
        "n1", 1, b"", b"Traceback...\nImportError: libnvidia-ml.so.1: cannot open\n", 0.1
    )
    rep = run(FakeTransport(answers), hs, max_level=0)
    n1 = rep.hosts[1]
    assert n1.status is Status.UNKNOWN and n1.outcome is Outcome.OK
    probe = [c for c in n1.checks if c.name == "nvml.probe"]
    assert probe and "ImportError: libnvidia-ml.so.1" in probe[0].summary
    assert any(c.name.startswith("host.") and c.status is Status.OK for c in n1.checks)


def slow_then(values: list[float]) -> Any:
    it = iter(values)
    return lambda argv: burn(next(it))


def test_peer_rule_confirms_before_naming(healthy_host_data: dict[str, Any]) -> None:
    hs = hosts(5)
    base = {h.name: {"host": with_clock(healthy_host_data), "nvml": NO_GPU, "burn": burn(1.0)} for h in hs}
    base["n3"]["burn"] = slow_then([0.4, 0.95])  # transient: fine when re-measured
    base["n4"]["burn"] = slow_then([0.4, 0.41])  # really slow
    fake = FakeTransport(base)
    rep = run(fake, hs, max_level=1)
    assert rep.suspects == ("n4",)
    n4 = {c.name: c for c in rep.hosts[4].checks}["burn.peer"]
    assert n4.evidence["measurements"] == [0.4, 0.41] and n4.evidence["fleet_median"] == 1.0
    n3 = {c.name: c for c in rep.hosts[3].checks}["burn.peer"]
    assert n3.status is Status.OK and "re-measured" in n3.summary
    assert sum(1 for h, p, _ in fake.calls if p == "burn") == 7  # 5 + 2 confirmations


def test_peer_rule_without_confirmation(healthy_host_data: dict[str, Any]) -> None:
    hs = hosts(4)
    base = {h.name: {"host": with_clock(healthy_host_data), "nvml": NO_GPU, "burn": burn(1.0)} for h in hs}
    base["n0"]["burn"] = burn(0.5)
    rep = run(FakeTransport(base), hs, max_level=1, settings={"peer_confirm": False})
    assert rep.suspects == ("n0",)


def allreduce_pair(fail_host: str) -> Any:
    def answer_for(host: str) -> Any:
        def answer(argv: Any) -> dict[str, Any]:
            if host == fail_host:
                return {
                    "available": True,
                    "mode": "rank",
                    "backend": "gloo",
                    "world_size": 2,
                    "results": [],
                    "correct": False,
                    "error": "Timed out waiting 10000ms for recv operation to complete",
                }
            return {
                "available": True,
                "mode": "rank",
                "backend": "gloo",
                "world_size": 2,
                "correct": True,
                "error": None,
                "results": [{"size_bytes": 1 << 20, "busbw_gbps": 1.0, "algbw_gbps": 1.0, "correct": True}],
            }

        return answer

    return answer_for


def test_l3_names_the_host_failing_with_both_neighbours(healthy_host_data: dict[str, Any]) -> None:
    hs = hosts(6)
    ans = allreduce_pair("n2")
    intra = {
        "available": True,
        "mode": "intra",
        "backend": "gloo",
        "world_size": 2,
        "correct": True,
        "error": None,
        "results": [{"size_bytes": 1 << 20, "busbw_gbps": 1.0, "algbw_gbps": 1.0, "correct": True}],
    }

    def allreduce_for(name: str) -> Any:
        def answer(argv: Any) -> dict[str, Any]:
            return ans(name)(argv) if "--rank" in argv else intra

        return answer

    answers = {
        h.name: {
            "host": with_clock(healthy_host_data),
            "nvml": NO_GPU,
            "burn": burn(1.0),
            "allreduce": allreduce_for(h.name),
        }
        for h in hs
    }
    fake = FakeTransport(answers)
    rep = run(fake, hs, max_level=3)
    assert rep.suspects == ("n2",), [
        (
            h.host,
            [
                c.summary
                for c in h.checks
                if c.status is not Status.OK and c.status is not Status.NOT_APPLICABLE
            ],
        )
        for h in rep.hosts
    ]
    pair_calls = [argv for _, p, argv in fake.calls if p == "allreduce" and "--rank" in argv]
    assert len(pair_calls) == 12  # 6 ring pairs x 2 ranks
    masters = {argv[argv.index("--master-addr") + 1] for argv in pair_calls}
    assert masters <= {h.address for h in hs}


def l3_answers(hs: list[Host], healthy_host_data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every host healthy at every level (L3: every pair measures 1 GB/s)."""
    ok_pair = allreduce_pair(fail_host="")
    intra = ok_pair("any host")(["--rank"]) | {"mode": "intra"}
    return {
        h.name: {
            "host": with_clock(healthy_host_data),
            "nvml": NO_GPU,
            "burn": burn(1.0),
            "allreduce": (lambda argv, name=h.name: ok_pair(name)(argv) if "--rank" in argv else intra),
        }
        for h in hs
    }


def pair_calls(fake: FakeTransport) -> dict[tuple[str, str], list[str]]:
    """``{(host, rank): argv}`` of the L3 rank runs."""
    return {
        (h, argv[argv.index("--rank") + 1]): argv
        for h, p, argv in fake.calls
        if p == "allreduce" and "--rank" in argv
    }


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def named_hosts(n: int, transport: str = "ssh") -> list[Host]:
    """Hosts as real inventories give them: the address is the name."""
    return [Host(f"node{i}", f"node{i}", transport, SshSettings(), PythonSettings()) for i in range(n)]


def test_l3_rendezvous_on_the_first_hosts_name_never_loopback(healthy_host_data: dict[str, Any]) -> None:
    hs = named_hosts(3)
    fake = FakeTransport(l3_answers(hs, healthy_host_data))
    rep = run(fake, hs, max_level=3)
    assert rep.status is Status.OK and [lv.ran for lv in rep.levels] == [True] * 4
    calls = pair_calls(fake)
    assert len(calls) == 6  # 3 ring pairs x 2 ranks
    for (host, rank), argv in calls.items():
        assert flag(argv, "--bind-addr") == host  # each rank binds to its own host's address
        assert "127.0.0.1" not in argv
    # pair (node0, node1): rank 1 on node1 dials node0 by name
    assert flag(calls[("node1", "1")], "--master-addr") == "node0"
    assert flag(calls[("node0", "1")], "--master-addr") == "node2"  # pair (node2, node0)
    # L2 is intra-host: its ranks rendezvous on the host's own loopback
    intra = [argv for _, p, argv in fake.calls if p == "allreduce" and "--rank" not in argv]
    assert intra and all(flag(argv, "--master-addr") == "127.0.0.1" for argv in intra)


def test_l3_local_transport_uses_loopback(healthy_host_data: dict[str, Any]) -> None:
    hs = named_hosts(2, transport="local")
    fake = FakeTransport(l3_answers(hs, healthy_host_data))
    rep = run(fake, hs, max_level=3)
    assert rep.status is Status.OK
    assert {flag(a, "--master-addr") for a in pair_calls(fake).values()} == {"127.0.0.1"}


class InterfaceTransport:
    """FakeTransport plus answers to the interface-address command (``{host: address or error}``)."""

    def __init__(self, fake: FakeTransport, addresses: dict[str, str]) -> None:
        self.fake = fake
        self.addresses = addresses
        self.asked: list[tuple[str, str]] = []

    def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout_s: float,
        keep_stdin_open: bool = False,
    ) -> Any:
        from robustctl.transport.addresses import ADDRESS_SCRIPT
        from robustctl.transport.base import CommandResult

        if "-c" in argv and argv[list(argv).index("-c") + 1] == ADDRESS_SCRIPT:
            self.asked.append((host.name, argv[-1]))
            answer = self.addresses[host.name]
            if answer.startswith("OSError"):
                return CommandResult(host.name, 1, b"", f"Traceback...\n{answer}\n".encode(), 0.01)
            return CommandResult(host.name, 0, f"{answer}\n".encode(), b"", 0.01)
        return self.fake.run(host, argv, stdin=stdin, timeout_s=timeout_s, keep_stdin_open=keep_stdin_open)

    def close(self) -> None:
        pass


def test_l3_on_a_configured_interface_uses_the_address_each_host_reports(
    healthy_host_data: dict[str, Any],
) -> None:
    hs = named_hosts(4)
    fake = FakeTransport(l3_answers(hs, healthy_host_data))
    reported = {
        "node0": "127.0.0.10",
        "node1": "127.0.0.11",
        "node2": "OSError: [Errno 19] No such device",
        "node3": "127.0.0.13",
    }
    transport = InterfaceTransport(fake, reported)
    settings = DiagnoseSettings(retries=0, allreduce={"interface": "ib0"})
    req = DiagnoseSpec(hosts=tuple(hs), settings=settings, thresholds=Thresholds(), max_level=3)
    rep = run_levels(req, TransportPool(override=transport))
    assert sorted(transport.asked) == [(h.name, "ib0") for h in hs]
    node2 = {c.name: c for c in rep.hosts[2].checks}["allreduce.pair"]
    assert node2.status is Status.UNKNOWN
    assert node2.summary == "not run: no address for interface ib0: OSError: [Errno 19] No such device"
    assert rep.unknown == ("node2",) and rep.suspects == ()
    calls = pair_calls(fake)
    assert not any(host == "node2" for host, _ in calls)  # left out of the ring
    for (host, _), argv in calls.items():
        assert flag(argv, "--bind-addr") == reported[host]
    assert flag(calls[("node1", "1")], "--master-addr") == "127.0.0.10"
    assert flag(calls[("node0", "1")], "--master-addr") == "127.0.0.13"  # ring node0, node1, node3


def test_one_host_skips_l3_with_its_reason(healthy_host_data: dict[str, Any]) -> None:
    from robustctl.report.diagnose import levels_line

    hs = hosts(1)
    fake = FakeTransport(l3_answers(hs, healthy_host_data))
    rep = run(fake, hs, max_level=3)
    l3 = rep.levels[3]
    assert (l3.ran, l3.reason) == (False, "needs at least two hosts, 1 left to check")
    pair = {c.name: c for c in rep.hosts[0].checks}["allreduce.pair"]
    assert pair.status is Status.NOT_APPLICABLE  # said so on the host too: not checked, not ok
    line = levels_line(rep)
    assert "L3 (needs at least two hosts, 1 left to check)" in line and "L3 inter" not in line


def test_skipped_levels_say_why(healthy_host_data: dict[str, Any]) -> None:
    hs = hosts(4)
    answers = {h.name: {"host": with_clock(healthy_host_data), "nvml": NO_GPU, "burn": burn(1.0)} for h in hs}
    answers["n0"]["burn"] = burn(1.0, mismatches=3)
    rep = run(FakeTransport(answers), hs, max_level=2)
    assert [(lv.ran, lv.reason) for lv in rep.levels] == [
        (True, None),
        (True, None),
        (False, "stopped after L1 named suspects"),
        (False, "above the highest level asked (L2)"),
    ]


class FakeSrun:
    """An srun transport over a :class:`FakeTransport`: one ``run_batch`` call per step, recorded;
    the hosts in ``dead`` did not answer (as a node whose launch failed)."""

    def __init__(self, fake: FakeTransport, dead: set[str]) -> None:
        self.fake, self.dead = fake, dead
        self.steps: list[list[str]] = []

    def run_batch(self, hosts: Any, argv: Any, *, stdin: bytes | None = None, timeout_s: float) -> Any:
        from robustctl.errors import HostUnreachable

        self.steps.append([h.name for h in hosts])
        return {
            h.name: HostUnreachable(
                h.name, "srun could not launch the task there: Communication connection failure"
            )
            if h.name in self.dead
            else self.fake.run(h, argv, stdin=stdin, timeout_s=timeout_s)
            for h in hosts
        }

    def run(
        self,
        host: Host,
        argv: Any,
        *,
        stdin: bytes | None = None,
        timeout_s: float,
        keep_stdin_open: bool = False,
    ) -> Any:
        res = self.run_batch([host], argv, stdin=stdin, timeout_s=timeout_s)[host.name]
        if isinstance(res, Exception):
            raise res
        return res

    def close(self) -> None:
        pass


def test_srun_hosts_take_one_step_per_level_and_a_silent_node_is_unknown(
    healthy_host_data: dict[str, Any],
) -> None:
    hs = [Host(f"sn{i}", f"sn{i}", "srun", SshSettings(), PythonSettings()) for i in range(1, 5)]
    answers = {h.name: {"host": with_clock(healthy_host_data), "nvml": NO_GPU, "burn": burn(1.0)} for h in hs}
    answers["sn2"]["burn"] = burn(1.0, mismatches=2)
    srun = FakeSrun(FakeTransport(answers), dead={"sn4"})
    req = DiagnoseSpec(
        hosts=tuple(hs), settings=DiagnoseSettings(retries=0), thresholds=Thresholds(), max_level=1
    )
    rep = run_levels(req, TransportPool(srun=srun))  # type: ignore[arg-type]
    assert srun.steps == [["sn1", "sn2", "sn3", "sn4"], ["sn1", "sn2", "sn3"]]  # L0 all, L1 the reachable
    by = {h.host: h for h in rep.hosts}
    assert by["sn4"].status is Status.UNKNOWN and "could not launch" in (by["sn4"].error or "")
    assert [c.name for c in by["sn4"].checks] == ["quick.reach"]
    assert rep.suspects == ("sn2",) and by["sn1"].status is Status.OK and rep.exit_code == 2
    assert {p for _, p, _ in srun.fake.calls} == {"host", "nvml", "burn"}
