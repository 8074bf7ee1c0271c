"""Where playbooks come from: the shipped ones (``playbooks/*.yaml``, package data) and the inventory's own.

The shipped playbooks are read through :mod:`importlib.resources` (``robustctl/_playbooks``, which is
the top-level ``playbooks/`` in a checkout and package data in the wheel). An inventory adds its own
with ``playbooks: [path, ...]`` (paths relative to the inventory file); one of them with the name of a
shipped playbook replaces it. A name with a ``/`` or ending in ``.yaml``/``.yml`` is a file path.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from robustctl.errors import ConfigError, UsageError
from robustctl.inventory import resolve_inventory_if_given
from robustctl.playbooks.schema import (
    MAX_PLAYBOOK_BYTES,
    Playbook,
    PlaybookError,
    load_playbook,
    parse_playbook,
)

__all__ = ["CatalogEntry", "catalog", "find_playbook", "shipped_names"]

MAX_SHIPPED = 256
"""Most shipped playbook files read."""


@dataclass(frozen=True)
class CatalogEntry:
    """One playbook found: ``name`` (None when it does not validate), ``origin`` (``shipped`` or
    ``inventory``), ``source`` (file), the validated ``playbook`` or the ``error`` lines, ``overrides``
    (an inventory playbook that replaces a shipped one of the same name)."""

    name: str | None
    origin: str
    source: str
    playbook: Playbook | None = None
    error: tuple[str, ...] = ()
    overrides: bool = False


def shipped_names() -> list[str]:
    """File names of the shipped playbooks, sorted."""
    root = resources.files("robustctl").joinpath("_playbooks")
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.name.endswith(".yaml"))[:MAX_SHIPPED]


def _shipped() -> list[CatalogEntry]:
    root = resources.files("robustctl").joinpath("_playbooks")
    out: list[CatalogEntry] = []
    for name in shipped_names():
        src = f"playbooks/{name}"
        try:
            raw = root.joinpath(name).read_bytes()
            if len(raw) > MAX_PLAYBOOK_BYTES:
                raise PlaybookError([f"{src}: larger than the {MAX_PLAYBOOK_BYTES}-byte limit of a playbook"])
            pb = parse_playbook(raw.decode("utf-8"), src)
        except (ConfigError, UnicodeDecodeError, OSError) as exc:
            out.append(CatalogEntry(None, "shipped", src, error=tuple(str(exc).splitlines())))
            continue
        out.append(CatalogEntry(pb.name, "shipped", src, pb))
    return out


def catalog(inventory: Path | None = None) -> list[CatalogEntry]:
    """Every playbook: shipped first (by file name), then the inventory's own (in its order).

    Args:
        inventory: the inventory path (None: ``$ROBUSTCTL_INVENTORY``, else none: shipped ones only).

    Returns:
        One entry per playbook file, an invalid one with its errors.

    Raises:
        ConfigError / InventoryError: the inventory is invalid.
    """
    out = _shipped()
    shipped = {e.name for e in out if e.name}
    inv = resolve_inventory_if_given(inventory)
    for path in inv.playbooks if inv is not None else ():
        try:
            pb = load_playbook(path)
        except ConfigError as exc:
            out.append(CatalogEntry(None, "inventory", str(path), error=tuple(str(exc).splitlines())))
            continue
        out.append(CatalogEntry(pb.name, "inventory", str(path), pb, overrides=pb.name in shipped))
    return out


def find_playbook(name: str, inventory: Path | None = None) -> Playbook:
    """The playbook called ``name`` (the inventory's own before the shipped one), or the file ``name``.

    Args:
        name: a playbook's name, or a path (it holds ``/`` or ends in ``.yaml``/``.yml``).
        inventory: the inventory path (None: ``$ROBUSTCTL_INVENTORY``, else shipped ones only).

    Returns:
        The validated playbook.

    Raises:
        UsageError: no playbook of that name (the message lists them). PlaybookError / ConfigError: the
            file does not validate.
    """
    if "/" in name or name.endswith((".yaml", ".yml")):
        return load_playbook(Path(name))
    entries = catalog(inventory)
    for e in reversed(entries):  # the inventory's own win
        if e.name == name and e.playbook is not None:
            return e.playbook
    bad = [e for e in entries if e.name is None and Path(e.source).stem == name]
    if bad:
        raise PlaybookError(bad[-1].error)
    known = ", ".join(sorted({e.name for e in entries if e.name})) or "none"
    raise UsageError(f"no playbook called {name[:80]!r} (playbooks: {known}; or give a file path)")
