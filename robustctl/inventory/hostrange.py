"""Host ranges (``node[001-128]``, ``127.0.0.[2-9]``), integer ranges (``0-5,7``) and host-name validation.

Expansion is delegated to python-hostlist (the syntax of Slurm and pdsh). Names that could be
interpreted by a shell or by ssh (``a;rm -rf /``, ``-oProxyCommand=...``) are rejected here, before
anything can reach a transport.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import hostlist

from robustctl.errors import InventoryError

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,252}$")
_ADDRESS_RE = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9._-]{0,252}|[0-9A-Fa-f:]+:[0-9A-Fa-f:.]*)$")

MAX_EXPANSION = 1_000_000
"""Upper bound on the hosts one range may expand to; a typo like ``node[1-99999999]`` is refused."""


def expand(pattern: str) -> list[str]:
    """Expand a comma-separated host range into names, in order, duplicates kept.

    Args:
        pattern: e.g. ``"node[001-003,7],login1"``.

    Returns:
        e.g. ``["node001", "node002", "node003", "node007", "login1"]``.

    Raises:
        InventoryError: the syntax is invalid, a bound is reversed, or it expands past
            :data:`MAX_EXPANSION` hosts.
    """
    text = pattern.strip()
    if not text:
        raise InventoryError("empty host range")
    try:
        names: list[str] = hostlist.expand_hostlist(text, allow_duplicates=True)
    except hostlist.BadHostlist as exc:
        raise InventoryError(f"bad host range {pattern!r}: {exc}") from None
    if len(names) > MAX_EXPANSION:
        raise InventoryError(f"host range {pattern!r} expands to {len(names)} hosts (limit {MAX_EXPANSION})")
    return names


def collapse(names: list[str]) -> str:
    """Collapse names into the shortest host range, e.g. ``["n1", "n2", "n3"]`` → ``"n[1-3]"``."""
    if not names:
        return ""
    return str(hostlist.collect_hostlist(names))


def compact_ranges(values: Iterable[int]) -> str:
    """Integers as sorted, deduplicated compact ranges: ``[0, 1, 2, 3, 4, 5, 7]`` → ``"0-5,7"``.

    The syntax inside a host range's brackets (and of the stacks probe's ``--ranks``), used for ranks,
    group indices and link numbers alike. Empty → ``""``.
    """
    xs = sorted(set(values))
    if not xs:
        return ""
    out: list[str] = []
    start = prev = xs[0]
    for x in xs[1:]:
        if x == prev + 1:
            prev = x
            continue
        out.append(f"{start}-{prev}" if prev > start else str(start))
        start = prev = x
    out.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(out)


def validate_name(name: str) -> str:
    """Return ``name`` if it is a safe host name, else raise :class:`InventoryError`.

    A safe name starts with a letter, digit or underscore and holds only letters, digits, ``.``,
    ``_`` and ``-`` (RFC 1123 labels, plus ``_`` seen in cloud inventories), at most 253 characters.
    """
    if not _NAME_RE.match(name):
        raise InventoryError(f"invalid host name {name!r}: use letters, digits, '.', '_' and '-' only")
    return name


def validate_address(address: str) -> str:
    """Return ``address`` if it is a safe host name, IPv4 or IPv6 address, else raise InventoryError."""
    if not _ADDRESS_RE.match(address):
        raise InventoryError(f"invalid host address {address!r}")
    return address
