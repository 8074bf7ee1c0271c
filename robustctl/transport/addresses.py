"""Where a host's peers reach it: the rendezvous address of an all-reduce rank (L3 pairs, replay-sdc).

- by default the host's inventory ``address`` as written, an IP literal or a name (resolved on the
  hosts, never replaced by a loopback address);
- with ``diagnose.allreduce.interface`` (e.g. ``ib0``): the IPv4 address the host itself reports for
  that interface, asked with a short command over the transport (:func:`address_argv`);
- ``127.0.0.1`` only for hosts of the ``local`` transport (they are this machine).

Used by the L3 pairs (:mod:`robustctl.diagnose.pairs`) and the SDC replay (:mod:`robustctl.sdc.replay`);
it lives with the transports so that neither of those two packages imports the other for it.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from robustctl.errors import ProbeError
from robustctl.models import Outcome
from robustctl.transport.fanout import fan_out

if TYPE_CHECKING:
    from robustctl.config import DiagnoseSettings
    from robustctl.inventory import Host
    from robustctl.transport.pool import TransportPool

__all__ = [
    "ADDRESS_SCRIPT",
    "ADDRESS_TIMEOUT_S",
    "LOCAL_ADDRESS",
    "address_argv",
    "lookup_addresses",
    "parse_address",
    "static_address",
]

LOCAL_ADDRESS = "127.0.0.1"
ADDRESS_TIMEOUT_S = 30.0
"""Upper bound of the interface-address command (it reads one ioctl; the rest is the login)."""

# Runs under the host's Python (and wrapper, e.g. inside the training container, whose network
# namespace is the one that matters): SIOCGIFADDR (0x8915), the interface's primary IPv4 address.
# A missing interface or one without IPv4 ends in a traceback whose last line says why.
ADDRESS_SCRIPT = (
    "import fcntl,socket,struct,sys;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);"
    "print(socket.inet_ntoa(fcntl.ioctl(s.fileno(),0x8915,struct.pack('256s',sys.argv[1].encode()[:15]))[20:24]))"
)


def static_address(host: Host, interface: str | None) -> str | None:
    """The address ``host``'s peers reach it at, when known without asking the host.

    ``127.0.0.1`` for the local transport; the inventory address (IP literal or name, as is)
    when no interface is configured; None when it must be asked (:func:`address_argv`).
    """
    if host.transport == "local":
        return LOCAL_ADDRESS
    if interface is None:
        return host.address
    return None


def address_argv(host: Host, interface: str) -> list[str]:
    """The command that prints ``host``'s IPv4 address on ``interface`` (through its python wrapper)."""
    return [*host.python.wrapper, host.python.path, "-c", ADDRESS_SCRIPT, interface]


def parse_address(stdout: bytes) -> str:
    """The address printed by :data:`ADDRESS_SCRIPT`. Raises ValueError when it is not a usable one."""
    text = stdout.decode("utf-8", "replace").strip()
    addr = ipaddress.ip_address(text.splitlines()[-1].strip() if text else "")
    if addr.is_unspecified:
        raise ValueError(f"{addr} is not an address a peer can dial")
    return str(addr)


def lookup_addresses(
    pool: TransportPool, hosts: Sequence[Host], settings: DiagnoseSettings, deadline: float
) -> tuple[dict[str, str], dict[str, str]]:
    """Each host's rendezvous address: ``({name: address}, {name: why there is none})``.

    Asks the hosts only when ``diagnose.allreduce.interface`` is set (one short command each,
    bounded by :data:`ADDRESS_TIMEOUT_S` and ``deadline``, a ``time.monotonic()`` instant).
    """
    interface = settings.allreduce.interface
    found: dict[str, str] = {}
    ask: list[Host] = []
    for h in hosts:
        addr = static_address(h, interface)
        if addr is not None:
            found[h.name] = addr
        else:
            ask.append(h)
    missing: dict[str, str] = {}
    if not ask or interface is None:
        return found, missing

    def lookup(host: Host, host_deadline: float) -> str:
        timeout = max(0.5, min(ADDRESS_TIMEOUT_S, host_deadline - time.monotonic()))
        res = pool.for_host(host).run(host, address_argv(host, interface), timeout_s=timeout)
        if res.exit_status != 0:
            raise ProbeError(host.name, res.stderr_tail() or f"exit status {res.exit_status}")
        try:
            return parse_address(res.stdout)
        except ValueError as exc:
            raise ProbeError(host.name, f"no IPv4 address reported ({exc})") from None

    res = fan_out(
        ask,
        lookup,
        concurrency=settings.concurrency,
        host_timeout_s=min(ADDRESS_TIMEOUT_S, settings.host_timeout_s),
        deadline=deadline,
        retries=settings.retries,
        backoff_s=settings.retry_backoff_s,
        on_deadline=pool.shutdown,
    )
    for o in res.outcomes:
        if o.ok and o.value is not None:
            found[o.host.name] = o.value
        else:
            what = "" if o.outcome is Outcome.FAILED else f"{o.outcome.value}: "
            missing[o.host.name] = f"no address for interface {interface}: {what}{o.error}"
    return found, missing
