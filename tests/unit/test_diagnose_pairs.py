"""L3 neighbour pairs: ring, round schedule, and blame (pure functions)."""

from __future__ import annotations

import pytest

from robustctl.diagnose import PairResult, blame_pairs, ring_pairs, schedule_rounds
from robustctl.models import Status


def test_ring_pairs() -> None:
    assert ring_pairs(["a"]) == []
    assert ring_pairs(["a", "b"]) == [("a", "b")]
    assert ring_pairs(["a", "b", "c"]) == [("a", "b"), ("b", "c"), ("c", "a")]


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 64])
def test_rounds_never_use_a_host_twice_and_cover_every_pair(n: int) -> None:
    names = [f"h{i}" for i in range(n)]
    pairs = ring_pairs(names)
    rounds = schedule_rounds(pairs)
    assert sorted(p for r in rounds for p in r) == sorted(pairs)
    for r in rounds:
        used = [h for p in r for h in p]
        assert len(used) == len(set(used))
    assert len(rounds) <= (2 if n % 2 == 0 or n == 2 else 3)


def ok(a: str, b: str, bw: float) -> tuple[tuple[str, str], PairResult]:
    return (a, b), PairResult((a, b), ok=True, busbw_gbps=bw)


def bad(a: str, b: str, why: str = "timed out") -> tuple[tuple[str, str], PairResult]:
    return (a, b), PairResult((a, b), ok=False, busbw_gbps=None, error=why)


def test_host_failing_with_both_neighbours_is_the_suspect() -> None:
    # Names of which none is a part of another: a name found in a summary is that host.
    hosts = ["gpu-a11", "gpu-b22", "gpu-c33", "gpu-d44", "gpu-e55"]
    a, b, c, d, e = hosts
    results = dict([ok(a, b, 1.0), bad(b, c), bad(c, d), ok(d, e, 1.0), ok(e, a, 1.1)])
    v = blame_pairs(results, hosts, 0.9)
    assert v[c].status is Status.CRITICAL
    assert [h for h in hosts if h in v[c].summary] == [b, d], v[c].summary  # its two neighbours, only
    assert [(p["peer"], p["ok"]) for p in v[c].evidence["pairs"]] == [(b, False), (d, False)]
    # c's neighbours are cleared: their one bad pair is explained by c, whom they name.
    for n in (b, d):
        assert v[n].status is Status.OK and [h for h in hosts if h in v[n].summary] == [c], v[n].summary
    assert v[a].status is Status.OK and v[e].status is Status.OK


def test_slow_host_named_by_pair_median() -> None:
    hosts = ["a", "b", "c", "d", "e", "f"]
    results = dict(
        [
            ok("a", "b", 1.0),
            ok("b", "c", 0.3),
            ok("c", "d", 0.31),
            ok("d", "e", 1.0),
            ok("e", "f", 0.98),
            ok("f", "a", 1.02),
        ]
    )
    v = blame_pairs(results, hosts, 0.9)
    assert [h for h, c in v.items() if c.status is Status.CRITICAL] == ["c"]
    assert "slow" in v["c"].summary


def test_single_bad_link_is_a_warning_for_both_ends() -> None:
    hosts = ["a", "b", "c", "d"]
    results = dict([ok("a", "b", 1.0), bad("b", "c"), ok("c", "d", 1.0), ok("d", "a", 1.0)])
    v = blame_pairs(results, hosts, 0.9)
    assert v["b"].status is Status.WARNING and v["c"].status is Status.WARNING
    assert v["a"].status is Status.OK


def test_two_hosts_cannot_be_split_so_both_are_suspects() -> None:
    v = blame_pairs(dict([bad("a", "b")]), ["a", "b"], 0.9)
    assert v["a"].status is Status.CRITICAL and v["b"].status is Status.CRITICAL
    assert "cannot tell" in v["a"].summary


def test_unmeasured_host_is_unknown_not_ok() -> None:
    v = blame_pairs(dict([ok("a", "b", 1.0)]), ["a", "b", "z"], 0.9)
    assert v["z"].status is Status.UNKNOWN


def test_rendezvous_address_is_the_inventory_address_as_written() -> None:
    from robustctl.config import PythonSettings, SshSettings
    from robustctl.inventory import Host
    from robustctl.transport.addresses import static_address

    named = Host("node001", "node001", "ssh", SshSettings(), PythonSettings())
    literal = Host("node002", "127.0.0.3", "ssh", SshSettings(), PythonSettings())
    local = Host("localhost", "localhost", "local", SshSettings(), PythonSettings())
    assert static_address(named, None) == "node001"  # a name stays a name: the hosts resolve it
    assert static_address(literal, None) == "127.0.0.3"
    assert static_address(local, None) == static_address(local, "ib0") == "127.0.0.1"
    assert static_address(named, "ib0") is None  # asked from the host at run time


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [(b"127.0.0.7\n", "127.0.0.7"), (b"noise\n127.0.0.8\n", "127.0.0.8")],
)
def test_parse_address(stdout: bytes, expected: str) -> None:
    from robustctl.transport.addresses import parse_address

    assert parse_address(stdout) == expected


@pytest.mark.parametrize("stdout", [b"", b"eth0\n", b"0.0.0.0\n"])
def test_parse_address_refuses_what_a_peer_cannot_dial(stdout: bytes) -> None:
    from robustctl.transport.addresses import parse_address

    with pytest.raises(ValueError):
        parse_address(stdout)
