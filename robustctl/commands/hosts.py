"""``robustctl hosts`` as a library call: :func:`run_hosts` lists the hosts out of the ordinary.

A host's state is the store's when robustctl changed it (``diagnose``/``stacks`` mark suspects,
``evict``, ``return`` and ``standby`` change the rest), else its inventory ``state:``. By default the
hosts that are ``suspect``, ``evicted`` or ``standby`` are listed; with ``include_active`` every host
(``active`` and ``returned`` ones too).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION

if TYPE_CHECKING:
    from robustctl.inventory import Inventory

__all__ = ["NOTABLE_STATES", "HostEntry", "HostsRequest", "HostsResult", "run_hosts"]

NOTABLE_STATES = ("suspect", "evicted", "standby")
"""The states listed without ``include_active``, in the order they are listed."""

_ORDER = {s: i for i, s in enumerate((*NOTABLE_STATES, "returned", "active"))}


@dataclass(frozen=True)
class HostsRequest:
    """What to list.

    Attributes:
        inventory: hosts whose state comes from the inventory (no store row), and the complete host
            list with ``include_active``; None: the store only.
        state: the store file (None: ``$ROBUSTCTL_STATE`` or the XDG default). It is never created.
        include_active: list every host, not only suspect, evicted and standby ones.
    """

    inventory: Inventory | None = None
    state: Path | None = None
    include_active: bool = False


@dataclass(frozen=True)
class HostEntry:
    """One host and why it is in its state.

    Attributes:
        host: the name. state: ``suspect``, ``evicted``, ``standby``, ``active`` or ``returned``.
        since: UNIX seconds of the last change robustctl recorded (None: the inventory's state).
        reason: the reason of that change (``diagnose L0: XID 79 …``, ``evict: …``), or
            ``"inventory state"``. finding: the last reason the host was named suspect (what
            diagnose or stacks found), when it ever was. readiness: a standby's self-check
            (``ready``, ``bad``, ``unchecked``), else None. source: ``"store"`` or ``"inventory"``.
        in_inventory: whether the inventory (when given) has the host.
    """

    host: str
    state: str
    since: float | None
    reason: str
    finding: str | None
    readiness: str | None
    source: str
    in_inventory: bool = True


@dataclass(frozen=True)
class HostsResult:
    """The listed hosts, suspect first, then evicted, standby (returned, active), each by name.

    Attributes:
        hosts: the entries. state: the store file read (it may not exist). inventory: its source,
        or None. kind: ``"hosts"``. schema_version.
    """

    hosts: tuple[HostEntry, ...]
    state: str
    inventory: str | None
    kind: str = "hosts"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """Always OK: a listing, not a verdict."""
        return ExitCode.OK


def run_hosts(request: HostsRequest) -> HostsResult:
    """List the hosts that are suspect, evicted or standby (or every host with ``include_active``).

    Args:
        request: the store, the inventory, and whether active hosts are listed too.

    Returns:
        The hosts with their state, reason and when it changed.

    Raises:
        StoreError: the store exists but cannot be read.
    """
    from robustctl.commands.options import state_path
    from robustctl.store import Store

    path = state_path(request.state)
    entries: dict[str, HostEntry] = {}
    in_store: set[str] = set()
    known = {h.name for h in request.inventory.hosts} if request.inventory is not None else None
    if path.exists():
        with Store.open(path) as store:
            for m in store.machines():
                in_store.add(m.host)
                if not (request.include_active or m.state.value in NOTABLE_STATES):
                    continue
                named = [r.reason for r in store.history(m.host) if r.to_state == "suspect"]
                entries[m.host] = HostEntry(
                    host=m.host,
                    state=m.state.value,
                    since=m.updated_at,
                    reason=m.reason,
                    finding=named[-1] if named else None,
                    readiness=m.readiness.value if m.state.value == "standby" else None,
                    source="store",
                    in_inventory=known is None or m.host in known,
                )
    for h in request.inventory.hosts if request.inventory is not None else ():
        if h.name in in_store or not (request.include_active or h.state.value in NOTABLE_STATES):
            continue  # robustctl changed it: the store's state wins
        entries[h.name] = HostEntry(
            host=h.name,
            state=h.state.value,
            since=None,
            reason="inventory state",
            finding=None,
            readiness="unchecked" if h.state.value == "standby" else None,
            source="inventory",
        )
    order = sorted(entries.values(), key=lambda e: (_ORDER.get(e.state, 99), e.host))
    return HostsResult(
        hosts=tuple(order),
        state=str(path),
        inventory=request.inventory.source if request.inventory is not None else None,
    )
