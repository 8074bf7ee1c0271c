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
"""Upper bound on the hosts one range may expand to, counted before anything is expanded, so a typo
like ``node[1-1000000000]`` or ``n[1-99999][1-99999]`` is refused in microseconds instead of
materialising names. 10^6 is the largest world size a layout may describe
(:data:`robustctl.inventory.topology.MAX_WORLD_SIZE`): a job never spans more machines than ranks,
and 10^6 short names cost about 100 MB. python-hostlist adds a bound of its own: one bracket range,
or one comma-separated part, of more than 10^5 names is refused (``hostlist.MAX_SIZE``)."""

MAX_PATTERN = 65_536
"""Longest host range accepted, in characters (a list of 10^4 explicit names fits)."""

MAX_BRACKETS = 16
"""Most bracket groups in one name (``r[1-4]n[01-18]`` has two); python-hostlist recurses once per group."""

_PART_RE = re.compile(r"([^,\[]*)(\[[^\]]*\])?(.*)", re.DOTALL)
_NUMBER_RE = re.compile(r"[0-9]+")
_RANGE_RE = re.compile(r"([0-9]+)-([0-9]+)")


def count(pattern: str) -> int | None:
    """How many names ``pattern`` expands to (duplicates counted), without expanding it.

    Follows python-hostlist's grammar: comma-separated parts at bracket level 0, each a product of
    bracket groups (``[1-3,7]``), each the sum of its ranges. Returns ``None`` when the syntax is not
    one this count understands (the expansion then reports the error).
    """
    parts = _parts(pattern)
    if parts is None:
        return None
    total = 0
    for part in parts:
        n = _count_part(part)
        if n is None:
            return None
        total += n
    return total


def _parts(pattern: str) -> list[str] | None:
    """The comma-separated parts at bracket level 0; None for nested or unbalanced brackets."""
    parts: list[str] = []
    level = 0
    start = 0
    for i, c in enumerate(pattern):
        if c == "[":
            level += 1
        elif c == "]":
            level -= 1
        elif c == "," and level == 0:
            parts.append(pattern[start:i])
            start = i + 1
        if not 0 <= level <= 1:
            return None
    parts.append(pattern[start:])
    return parts if level == 0 else None


def _count_part(part: str) -> int | None:
    if not part:
        return 0
    n = 1
    rest = part
    while rest:
        m = _PART_RE.match(rest)
        if m is None:  # pragma: no cover - the pattern matches any text
            return None
        group = m.group(2)
        if group is None:
            if m.group(3):  # text after an unmatched "[" or a stray "]"
                return None
            break
        size = 0
        for item in group[1:-1].split(","):
            if _NUMBER_RE.fullmatch(item):
                size += 1
            elif (r := _RANGE_RE.fullmatch(item)) is not None and int(r.group(2)) >= int(r.group(1)):
                size += int(r.group(2)) - int(r.group(1)) + 1
            else:
                return None
        n *= size
        rest = m.group(3)
    return n


def expand(pattern: str) -> list[str]:
    """Expand a comma-separated host range into names, in order, duplicates kept.

    Spaces around each name are dropped (``"node01, node02"``).

    Args:
        pattern: e.g. ``"node[001-003,7],login1"``.

    Returns:
        e.g. ``["node001", "node002", "node003", "node007", "login1"]``; never empty.

    Raises:
        InventoryError: the syntax is invalid, a bound is reversed, the range names no host or an
            empty name, it is longer than :data:`MAX_PATTERN` characters, has more than
            :data:`MAX_BRACKETS` bracket groups in one name, or expands past :data:`MAX_EXPANSION`
            hosts (counted before expanding).
    """
    text = pattern.strip()
    if not text:
        raise InventoryError("empty host range")
    shown = _short(text)
    if len(text) > MAX_PATTERN:
        raise InventoryError(f"host range {shown} is {len(text)} characters long (limit {MAX_PATTERN})")
    n = count(text)
    if n is not None and n > MAX_EXPANSION:
        raise InventoryError(f"host range {shown} expands to {n} hosts (limit {MAX_EXPANSION})")
    if any(part.count("[") > MAX_BRACKETS for part in _parts(text) or ()):
        raise InventoryError(f"host range {shown}: more than {MAX_BRACKETS} bracket groups in one name")
    try:
        names: list[str] = hostlist.expand_hostlist(text, allow_duplicates=True)
    except hostlist.BadHostlist as exc:
        raise InventoryError(f"bad host range {shown}: {exc}") from None
    names = [name.strip() for name in names]
    if not names:
        raise InventoryError(f"host range {shown} names no host")
    if not all(names):
        raise InventoryError(f"host range {shown} holds an empty name")
    if len(names) > MAX_EXPANSION:  # pragma: no cover - count() bounds every pattern hostlist accepts
        raise InventoryError(f"host range {shown} expands to {len(names)} hosts (limit {MAX_EXPANSION})")
    return names


def _short(text: str, limit: int = 80) -> str:
    """``repr`` of ``text`` cut to about ``limit`` characters, for one-line messages."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


def collapse(names: list[str]) -> str:
    """Collapse names into the shortest host range, e.g. ``["n1", "n2", "n3"]`` → ``"n[1-3]"``.

    Names python-hostlist cannot hold in a range (with ``,``, ``[`` or ``]``) are listed as they are,
    joined by commas. ``expand(collapse(names))`` gives the same set of names for every output of
    :func:`expand`. Empty → ``""``.
    """
    if not names:
        return ""
    try:
        return str(hostlist.collect_hostlist(names))
    except hostlist.BadHostlist:
        return ",".join(dict.fromkeys(names))


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
