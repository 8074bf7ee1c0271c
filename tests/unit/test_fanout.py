"""Fan-out: bounded concurrency, deadlines, retries, every host's outcome kept."""

from __future__ import annotations

import threading
import time

import pytest

from robustctl.config import PythonSettings, SshSettings
from robustctl.errors import CommandTimeout, HostKeyError, HostUnreachable, ProbeError
from robustctl.inventory import Host
from robustctl.models import Outcome
from robustctl.transport.fanout import backoff_delay, fan_out, fan_out_units


def hosts(n: int) -> list[Host]:
    return [Host(f"n{i}", f"127.0.0.{i + 2}", "ssh", SshSettings(), PythonSettings()) for i in range(n)]


def test_every_outcome_kept_in_order() -> None:
    hs = hosts(5)

    def work(h: Host, deadline: float) -> str:
        if h.name == "n1":
            raise HostUnreachable(h.name, "connection refused")
        if h.name == "n2":
            raise CommandTimeout(h.name, "command timed out after 1s")
        if h.name == "n3":
            raise ProbeError(h.name, "probe host failed: boom")
        if h.name == "n4":
            raise KeyError("bug")
        return h.name.upper()

    res = fan_out(hs, work, retries=0)
    assert [o.host.name for o in res.outcomes] == ["n0", "n1", "n2", "n3", "n4"]
    assert [o.outcome for o in res.outcomes] == [
        Outcome.OK,
        Outcome.UNREACHABLE,
        Outcome.TIMED_OUT,
        Outcome.FAILED,
        Outcome.FAILED,
    ]
    assert res.outcomes[0].value == "N0"
    assert res.outcomes[1].error == "connection refused"
    assert res.outcomes[3].error == "probe host failed: boom"
    assert res.outcomes[4].error is not None and res.outcomes[4].error.startswith("internal error: KeyError")
    assert len(res.ok) == 1 and len(res.failed) == 4


def test_concurrency_is_bounded() -> None:
    active = 0
    peak = 0
    lock = threading.Lock()

    def work(h: Host, deadline: float) -> None:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.02)
        with lock:
            active -= 1

    res = fan_out(hosts(20), work, concurrency=3)
    assert len(res.ok) == 20
    assert peak == 3


def test_retries_connection_errors_but_not_host_key_errors() -> None:
    attempts: dict[str, int] = {}

    def work(h: Host, deadline: float) -> str:
        attempts[h.name] = attempts.get(h.name, 0) + 1
        if h.name == "n0" and attempts[h.name] < 3:
            raise HostUnreachable(h.name, "connection reset")
        if h.name == "n1":
            raise HostKeyError(h.name, "unknown host key")
        return "ok"

    res = fan_out(hosts(2), work, retries=2, backoff_s=0.001)
    assert res.outcomes[0].ok and res.outcomes[0].attempts == 3
    assert res.outcomes[1].outcome is Outcome.UNREACHABLE and attempts["n1"] == 1


def test_global_deadline_abandons_hung_hosts() -> None:
    release = threading.Event()
    called: list[bool] = []

    def work(h: Host, deadline: float) -> str:
        if h.name == "n1":
            release.wait(30)  # a host that never answers
        return "ok"

    t0 = time.monotonic()
    res = fan_out(hosts(3), work, deadline=time.monotonic() + 0.3, on_deadline=lambda: called.append(True))
    elapsed = time.monotonic() - t0
    release.set()
    assert elapsed < 15  # the 0.3 s deadline, not the hung host's 30 s, on a loaded machine too
    assert [o.outcome for o in res.outcomes] == [Outcome.OK, Outcome.TIMED_OUT, Outcome.OK]
    assert "global deadline" in (res.outcomes[1].error or "")
    assert called == [True]


def test_per_host_deadline_is_passed_to_work() -> None:
    seen: list[float] = []

    def work(h: Host, deadline: float) -> None:
        seen.append(deadline - time.monotonic())

    fan_out(hosts(1), work, host_timeout_s=7.0, deadline=time.monotonic() + 100)
    assert 6.0 < seen[0] <= 7.0
    seen.clear()
    fan_out(hosts(1), work, host_timeout_s=7.0, deadline=time.monotonic() + 2)
    assert seen[0] <= 2.0


def test_empty_and_on_done() -> None:
    assert fan_out([], lambda h, d: None).outcomes == ()
    done: list[str] = []
    fan_out(hosts(3), lambda h, d: None, on_done=lambda o: done.append(o.host.name))
    assert sorted(done) == ["n0", "n1", "n2"]


@pytest.mark.parametrize("attempt", [0, 1, 5, 20])
def test_backoff_is_bounded_full_jitter(attempt: int) -> None:
    for _ in range(50):
        d = backoff_delay(attempt, 0.5)
        assert 0.0 <= d <= min(30.0, 0.5 * 2**attempt)


def test_units_that_are_pairs_keep_every_outcome() -> None:
    pairs = [("a", "b"), ("b", "c"), ("c", "a")]

    def work(pair: tuple[str, str], deadline: float) -> str:
        if pair == ("b", "c"):
            raise CommandTimeout("b", "command timed out after 1s")
        return "<->".join(pair)

    seen: list[tuple[str, str]] = []
    res = fan_out_units(pairs, work, concurrency=2, retries=0, on_done=lambda o: seen.append(o.unit))
    assert [o.unit for o in res] == pairs and sorted(seen) == sorted(pairs)
    assert [o.outcome for o in res] == [Outcome.OK, Outcome.TIMED_OUT, Outcome.OK]
    assert res[0].value == "a<->b" and res[1].error == "command timed out after 1s"
