"""``robustctl history`` and ``robustctl lemons`` as library calls: what the sweeps and diagnoses
recorded about one host, and the machines that keep failing (Kokolis et al., HPCA 2025).

Both read the store only; a store that does not exist is an empty answer (nothing is created).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION

if TYPE_CHECKING:
    from robustctl.inventory import Inventory
    from robustctl.sweep.history import CheckChange, CheckState, HostCounters
    from robustctl.sweep.lemons import Lemon

__all__ = ["HistoryRequest", "HistoryResult", "LemonsRequest", "LemonsResult", "run_history", "run_lemons"]


# --- history -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryRequest:
    """``robustctl history HOST --since 7d``: ``host``, ``since_s`` (seconds back from now), the store."""

    host: str
    since_s: float = 7 * 86_400
    state: Path | None = None
    limit: int = 10_000


@dataclass(frozen=True)
class HistoryResult:
    """A host's sweep and diagnose history.

    Attributes:
        host; since (UNIX s); counters (None: never seen); checks: each check's state now;
        changes: state changes since ``since``, oldest first (at most the request's ``limit``, the newest).
    """

    host: str
    since: float
    counters: HostCounters | None
    checks: tuple[CheckState, ...]
    changes: tuple[CheckChange, ...]
    state: str
    kind: str = "history"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """Always OK: a listing, not a verdict."""
        return ExitCode.OK


def run_history(request: HistoryRequest, *, clock: Callable[[], float] = time.time) -> HistoryResult:
    """Read ``request.host``'s history; a missing store is an empty history (nothing is created).

    Args:
        request: the host, the window and the store.
        clock: seconds since the epoch now (tests pass a fixed one).

    Returns:
        The host's sweep results in the window, oldest first.

    Raises:
        StoreError: the store exists but cannot be read.
    """
    from robustctl.commands.options import state_path
    from robustctl.store import Store
    from robustctl.sweep.history import host_history

    path = state_path(request.state)
    since = clock() - request.since_s
    if not path.exists():
        return HistoryResult(request.host, since, None, (), (), str(path))
    with Store.open(path, clock=clock) as store:
        h = host_history(store, request.host, since=since, limit=request.limit)
    return HistoryResult(request.host, since, h.counters, h.checks, h.changes, str(path))


# --- lemons --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LemonsRequest:
    """``robustctl lemons --since 30d``: the window (None: ``sweep.lemon_days``), the thresholds
    (None: the inventory's ``sweep:``), the inventory (None: defaults) and the store."""

    since_s: float | None = None
    min_failures: int | None = None
    min_returns: int | None = None
    inventory: Inventory | None = None
    state: Path | None = None


@dataclass(frozen=True)
class LemonsResult:
    """The lemons of the window: ``lemons`` (with evidence), the rules applied, the store read."""

    lemons: tuple[Lemon, ...]
    since: float
    min_failures: int
    min_returns: int
    state: str
    rules: Mapping[str, str] = field(default_factory=dict)
    kind: str = "lemons"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """Always OK: a listing (a lemon is acted on by policy, not by this exit code)."""
        return ExitCode.OK


def run_lemons(request: LemonsRequest, *, clock: Callable[[], float] = time.time) -> LemonsResult:
    """List the lemons (:func:`robustctl.sweep.lemons.find_lemons`); a missing store has none.

    Args:
        request: the window, the thresholds and the store.
        clock: seconds since the epoch now (tests pass a fixed one).

    Returns:
        The hosts that failed often enough in the window, worst first.

    Raises:
        StoreError: the store exists but cannot be read.
    """
    from robustctl.commands.options import state_path
    from robustctl.config import SweepSettings
    from robustctl.store import Store
    from robustctl.sweep.lemons import find_lemons

    s = request.inventory.sweep if request.inventory is not None else SweepSettings()
    window = request.since_s if request.since_s is not None else s.lemon_days * 86_400
    fails = request.min_failures if request.min_failures is not None else s.lemon_failures
    rets = request.min_returns if request.min_returns is not None else s.lemon_returns
    path = state_path(request.state)
    since = clock() - window
    rules = {
        "failures": f">= {fails} failures (times named: by the sweep policy, or diagnose) since the window's start",
        "returns": f">= {rets} evicted-and-returned cycles since the window's start",
        "source": "Kokolis et al., HPCA 2025",
    }
    if not path.exists():
        return LemonsResult((), since, fails, rets, str(path), rules)
    with Store.open(path, clock=clock) as store:
        found = find_lemons(store, since=since, min_failures=fails, min_returns=rets)
    return LemonsResult(tuple(found), since, fails, rets, str(path), rules)
