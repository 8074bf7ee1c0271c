"""Run one piece of work on many hosts at once, keeping every host's outcome.

:func:`fan_out` works on hosts; :func:`fan_out_units` is the same machinery for any unit of work
(e.g. the diagnose engine's level-3 pairs of hosts): each unit gets its own deadline and its own
outcome, and error classification is the same.

Bounded concurrency (a fixed set of daemon worker threads, so a host stuck in a kernel call can
never keep the process alive), a per-host deadline handed to the work function, a global deadline
after which unfinished hosts are reported ``timed_out`` and their connections closed, and
connection-error retries with jittered exponential backoff ("full jitter" variant of the AWS
Architecture Blog's "Exponential Backoff and Jitter"). Contrast fabric's ``ThreadingGroup``,
which starts one unbounded thread per host and joins without a timeout.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from robustctl.errors import CommandTimeout, HostError, HostKeyError, HostUnreachable, RobustctlError
from robustctl.models import Outcome

if TYPE_CHECKING:
    from robustctl.inventory import Host

T = TypeVar("T")
U = TypeVar("U")


@dataclass(frozen=True)
class UnitOutcome(Generic[U, T]):
    """The outcome of the work on one unit (a host, a pair of hosts, ...).

    Attributes:
        unit: what was worked on. outcome: ok / failed / unreachable / timed_out. value: the work's
        return value when ok. error: one line when not ok. elapsed_s: wall seconds. attempts: tries made.
    """

    unit: U
    outcome: Outcome
    value: T | None = None
    error: str | None = None
    elapsed_s: float = 0.0
    attempts: int = 1

    @property
    def ok(self) -> bool:
        """True when the work returned a value."""
        return self.outcome is Outcome.OK


class HostOutcome(UnitOutcome["Host", T]):
    """The outcome of the work on one host (``host`` is the unit)."""

    @property
    def host(self) -> Host:
        """The host worked on."""
        return self.unit


@dataclass(frozen=True)
class FanoutResult(Generic[T]):
    """Every host's outcome, in the order the hosts were given."""

    outcomes: tuple[HostOutcome[T], ...]

    @property
    def ok(self) -> list[HostOutcome[T]]:
        """Outcomes whose work succeeded."""
        return [o for o in self.outcomes if o.ok]

    @property
    def failed(self) -> list[HostOutcome[T]]:
        """Outcomes that are not ok (failed, unreachable or timed out)."""
        return [o for o in self.outcomes if not o.ok]


Work = Callable[["Host", float], T]
"""``work(host, deadline)``: ``deadline`` is a ``time.monotonic()`` instant it must finish by."""


def backoff_delay(attempt: int, base_s: float, rng: random.Random | None = None) -> float:
    """Full-jitter backoff: uniform in ``[0, base_s · 2**attempt]``, capped at 30 s."""
    r = rng or random
    return float(r.uniform(0.0, min(30.0, base_s * (2**attempt))))


def fan_out(
    hosts: Sequence[Host],
    work: Work[T],
    *,
    concurrency: int = 64,
    host_timeout_s: float = 120.0,
    deadline: float | None = None,
    retries: int = 2,
    backoff_s: float = 0.5,
    on_done: Callable[[HostOutcome[T]], None] | None = None,
    on_deadline: Callable[[], None] | None = None,
) -> FanoutResult[T]:
    """Run ``work`` on every host and return every host's outcome.

    Args:
        hosts: targets; duplicates are run twice.
        work: see :data:`Work`. Raising :class:`HostUnreachable` retries (not for
            :class:`HostKeyError`); :class:`CommandTimeout` → ``timed_out``; any other exception →
            ``failed`` with its message (one line).
        concurrency: hosts worked on at once (≥ 1).
        host_timeout_s: per-host budget, retries included.
        deadline: global ``time.monotonic()`` deadline; hosts unfinished then are ``timed_out``.
        retries: extra attempts after a connection error.
        backoff_s: base of the jittered exponential backoff between attempts.
        on_done: called (from worker threads) as each host finishes, e.g. to advance a progress bar.
        on_deadline: called once when the global deadline passes with hosts still running, to
            close their connections.

    Returns:
        Every host's outcome (ok, failed, unreachable or timed out; its value or error, seconds,
        attempts), in the order of ``hosts``.
    """

    def as_host(o: UnitOutcome[Host, T]) -> HostOutcome[T]:
        return HostOutcome(o.unit, o.outcome, o.value, o.error, o.elapsed_s, o.attempts)

    def done(o: UnitOutcome[Host, T]) -> None:
        if on_done is not None:
            on_done(as_host(o))

    outcomes = fan_out_units(
        hosts,
        work,
        concurrency=concurrency,
        unit_timeout_s=host_timeout_s,
        deadline=deadline,
        retries=retries,
        backoff_s=backoff_s,
        on_done=done,
        on_deadline=on_deadline,
    )
    return FanoutResult(tuple(as_host(o) for o in outcomes))


def fan_out_units(
    units: Sequence[U],
    work: Callable[[U, float], T],
    *,
    concurrency: int = 64,
    unit_timeout_s: float = 120.0,
    deadline: float | None = None,
    retries: int = 2,
    backoff_s: float = 0.5,
    on_done: Callable[[UnitOutcome[U, T]], None] | None = None,
    on_deadline: Callable[[], None] | None = None,
) -> tuple[UnitOutcome[U, T], ...]:
    """Run ``work(unit, deadline)`` on every unit; every unit's outcome, in the order given.

    The machinery of :func:`fan_out` for units that are not single hosts (e.g. pairs of hosts):
    same arguments (``unit_timeout_s`` is the per-unit budget), same error classification, same
    bounded worker threads and global deadline.
    """
    n = len(units)
    results: list[UnitOutcome[U, T] | None] = [None] * n
    if n == 0:
        return ()
    todo: queue.Queue[int] = queue.Queue()
    for i in range(n):
        todo.put(i)
    lock = threading.Condition()
    remaining = [n]
    abandoned = threading.Event()

    def finish(i: int, res: UnitOutcome[U, T]) -> None:
        with lock:
            if results[i] is not None or abandoned.is_set():
                return
            results[i] = res
            remaining[0] -= 1
            lock.notify_all()
        if on_done is not None:
            on_done(res)

    def worker() -> None:
        while not abandoned.is_set():
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            unit_deadline = time.monotonic() + unit_timeout_s
            if deadline is not None:
                unit_deadline = min(unit_deadline, deadline)
            finish(i, _run_one(units[i], work, unit_deadline, retries, backoff_s))

    threads = [
        threading.Thread(target=worker, name=f"fanout-{k}", daemon=True) for k in range(min(concurrency, n))
    ]
    for t in threads:
        t.start()
    with lock:
        while remaining[0] > 0:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                break
            lock.wait(timeout=wait)
        unfinished = [i for i in range(n) if results[i] is None]
        if unfinished:
            abandoned.set()
    if unfinished and on_deadline is not None:
        on_deadline()
    out: list[UnitOutcome[U, T]] = []
    for i, r in enumerate(results):
        if r is None:
            r = UnitOutcome(
                units[i], Outcome.TIMED_OUT, error="global deadline passed before this host answered"
            )
            if on_done is not None:
                on_done(r)
        out.append(r)
    return tuple(out)


def _run_one(
    unit: U, work: Callable[[U, float], T], deadline: float, retries: int, backoff_s: float
) -> UnitOutcome[U, T]:
    start = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            value = work(unit, deadline)
        except HostKeyError as exc:
            return UnitOutcome(
                unit, Outcome.UNREACHABLE, error=exc.reason, elapsed_s=_since(start), attempts=attempt
            )
        except HostUnreachable as exc:
            delay = backoff_delay(attempt - 1, backoff_s)
            if attempt > retries or time.monotonic() + delay >= deadline:
                return UnitOutcome(
                    unit, Outcome.UNREACHABLE, error=exc.reason, elapsed_s=_since(start), attempts=attempt
                )
            time.sleep(delay)
            continue
        except CommandTimeout as exc:
            return UnitOutcome(
                unit, Outcome.TIMED_OUT, error=exc.reason, elapsed_s=_since(start), attempts=attempt
            )
        except RobustctlError as exc:
            msg = exc.reason if isinstance(exc, HostError) else str(exc)
            return UnitOutcome(unit, Outcome.FAILED, error=msg, elapsed_s=_since(start), attempts=attempt)
        except Exception as exc:
            return UnitOutcome(
                unit,
                Outcome.FAILED,
                error=f"internal error: {type(exc).__name__}: {exc}",
                elapsed_s=_since(start),
                attempts=attempt,
            )
        return UnitOutcome(unit, Outcome.OK, value=value, elapsed_s=_since(start), attempts=attempt)


def _since(t0: float) -> float:
    return round(time.monotonic() - t0, 6)
