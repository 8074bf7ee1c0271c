"""YAML loading that remembers where every value came from, with bounds.

:func:`load_yaml` returns the data (plain dicts/lists/scalars, like ``yaml.safe_load``) and a
:class:`SourceMap` from key paths to line numbers, so a validation error can say
``cluster.yaml:14: hosts[2].ssh.prot: unknown key``. Duplicate keys, which ``safe_load`` would
silently overwrite, are errors, and so is a key YAML reads as another type than a string (``null:``,
``1:``, ``yes:``, ``2024-01-01:``): every key robustctl reads is a name, and it is named at its own
line as written (``cluster.yaml:3: hosts[0].labels.1: key '1' reads as an integer ...``).
:func:`format_validation_errors` turns a pydantic ``ValidationError`` over such data into those
``FILE:LINE: key.path: message`` lines, one spelling for the inventory and the playbooks.

Input is bounded before anything grows with it (a hostile or careless file cannot exhaust memory):

* :data:`MAX_YAML_BYTES` caps the file size; :func:`read_regular_file` refuses FIFOs, devices and
  sockets without blocking on them.
* :data:`MAX_YAML_NODES` caps the nodes of the document *with aliases expanded*, so a "billion
  laughs" document (nested aliases, a few hundred bytes that expand to billions of nodes) is refused
  after a bounded walk instead of being expanded downstream.
* :data:`MAX_YAML_DEPTH` caps nesting (the YAML composer and the walker recurse).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from robustctl.errors import ConfigError
from robustctl.inputfile import NotReadable, open_regular, read_bounded

if TYPE_CHECKING:
    from pydantic import ValidationError

PathKey = tuple[str | int, ...]

MAX_YAML_BYTES = 2 * 1024 * 1024
"""Largest YAML file read, bytes (2 MiB). A 10,000-host inventory written one entry per host, with an
address and labels, is about 0.7 MiB (3x room); host ranges (``node[0001-9999]``) keep real inventories
far smaller. A larger file is a wrong one (a log, a dump, ``/dev/zero``) and is refused before it is
parsed: PyYAML, pure Python for the line marks, holds about 100 bytes per character while composing."""

MAX_YAML_NODES = 300_000
"""Most YAML nodes (scalars, mappings, sequences) a document may hold, counted while composing (keys
included) and again with aliases expanded (values). A 10,000-host inventory written one entry per host,
with an address and labels, is about 100,000 (3x room). Measured on 2 busy shared cores: a 2 MiB
inventory of 29,629 hosts (296,000 nodes) validates in 13 s, 270 MB peak RSS; a "billion laughs"
document (9 levels of 9 aliases, 387 million nodes expanded) is refused in 0.7 s, 77 MB."""

MAX_YAML_DEPTH = 100
"""Deepest nesting of mappings/sequences accepted (an inventory nests about 6 deep); deeper documents
would exhaust the recursion of PyYAML's composer and of the walker."""


@dataclass
class SourceMap:
    """Line numbers (1-based) of the YAML nodes of one file, keyed by their path from the root."""

    file: str
    lines: dict[PathKey, int] = field(default_factory=dict)

    def line_of(self, path: Sequence[str | int]) -> int | None:
        """Line of ``path`` or of its nearest ancestor present in the file; None if none is."""
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return self.lines.get((), None)

    def where(self, path: Sequence[str | int]) -> str:
        """``"FILE:LINE"`` for ``path`` (``"FILE"`` when no line is known)."""
        line = self.line_of(path)
        return f"{self.file}:{line}" if line else self.file


ValueSource = Callable[[PathKey], str | None]
"""Where a value that did not come from the file came from: called with an error's key path, returns a
label such as ``$ROBUSTCTL_DEADLINE='-1'`` to show instead of ``FILE:LINE``, or None (the file)."""


def validation_error_lines(
    exc: ValidationError,
    smap: SourceMap,
    data: Any,
    *,
    prefix: PathKey = (),
    value_source: ValueSource | None = None,
) -> list[tuple[int, str]]:
    """Every error of ``exc`` as ``(line, text)``, in order: see :func:`format_validation_errors`.

    ``line`` is the sort key: 0 for a value from ``value_source`` or with no known line, else the
    1-based line of :meth:`SourceMap.line_of`. Callers that merge these with their own
    ``FILE:LINE`` errors (a playbook's cross-step checks) sort the union by it.
    """
    out: list[tuple[int, str]] = []
    seen: set[PathKey] = set()
    for err in exc.errors():
        raw = [p for p in err["loc"] if isinstance(p, (str, int))]
        last_key = err["type"] if err["type"] in ("missing", "extra_forbidden") else None
        path = (*prefix, *_document_path(raw, data, last_key=last_key))
        if path in seen:  # a union reports each alternative at one place: keep the first
            continue
        seen.add(path)
        if err["type"] == "extra_forbidden":
            msg = f"unknown key {_short(str(path[-1]) if path else '')!r}"
        elif err["type"] == "missing":
            msg = "required key is missing"
        else:
            msg = err["msg"].removeprefix("Value error, ")
            if "input" in err and not isinstance(err["input"], (dict, list)):
                msg += f" (got {_short(repr(err['input']))})"
        source = value_source(path) if value_source is not None else None
        if source is not None:
            out.append((0, f"{source}: {dotted_path(path)}: {msg}"))
        else:
            out.append((smap.line_of(path) or 0, f"{smap.where(path)}: {dotted_path(path)}: {msg}"))
    out.sort(key=lambda e: e[0])  # stable: one line's errors stay in pydantic's (field) order
    return out


def format_validation_errors(
    exc: ValidationError,
    smap: SourceMap,
    data: Any,
    *,
    prefix: PathKey = (),
    value_source: ValueSource | None = None,
    limit: int | None = None,
) -> list[str]:
    """One line per error of a pydantic validation of YAML ``data``, each naming the file, line and key.

    Args:
        exc: the error of ``Model.model_validate(data)``.
        smap: the :class:`SourceMap` of the file ``data`` was read from.
        data: the input that was validated (plain dicts/lists/scalars). An error location's parts that
            are not keys or indices of it (pydantic's union-member tags such as ``Goto`` or
            ``literal['abort','continue']``) are left out of the key path, so a key the file spells
            ``str`` or ``Goto`` is still named.
        prefix: the key path of ``data`` inside the file (``("steps", 2, "args")`` when a sub-mapping
            is validated on its own); it leads every key path shown.
        value_source: for values that did not come from the file (an environment variable the caller
            merged into ``data``); see :data:`ValueSource`.
        limit: most lines returned (None: all). When errors are left out, the last line returned ends
            with `` (+N more errors)``.

    Returns:
        Lines of the shape ``FILE:LINE: KEY.PATH: MESSAGE`` (``FILE: ...`` when no line is known;
        ``SOURCE: KEY.PATH: MESSAGE`` for a value ``value_source`` names), where ``KEY.PATH`` is
        :func:`dotted_path` (``hosts[0].ssh.port``; the line is that of the key itself, or of its
        nearest ancestor in the file for a missing key) and ``MESSAGE`` is ``unknown key 'K'``,
        ``required key is missing``, or pydantic's message (less its ``Value error, `` prefix)
        followed by `` (got REPR)`` when the bad value is a scalar (its repr cut to 80 characters).
        Values from ``value_source`` come first, then by line; errors on one line keep pydantic's order;
        one line per key path (a union's alternatives after the first are dropped). For example::

            cluster.yaml:3: ssh.prot: unknown key 'prot'
            cluster.yaml:11: hosts[0].ssh.port: Input should be a valid integer, ... (got 'x')
            $ROBUSTCTL_DEADLINE='-1': diagnose.deadline_s: Input should be greater than 0 (got '-1')
    """
    lines = [
        text for _, text in validation_error_lines(exc, smap, data, prefix=prefix, value_source=value_source)
    ]
    if limit is None or len(lines) <= limit:
        return lines
    shown = lines[: max(limit, 1)]
    shown[-1] += f" (+{len(lines) - len(shown)} more errors)"
    return shown


def _document_path(loc: Sequence[str | int], data: Any, *, last_key: str | None) -> PathKey:
    """The parts of a pydantic error location that are keys and indices of ``data``, in order.

    Any other part is a union member's tag and is left out. ``last_key`` is the error's type when the
    location ends in a key: ``"extra_forbidden"`` (the key is in its mapping) or ``"missing"`` (it is
    not). A tag that a mapping also has as a key (``on_failure: {Goto: x}``) is resolved by trying to
    take each part as a key first and as a tag second, until the whole location fits; the states tried
    are memoised by (part, node), so the search is linear in the location's length times its depth.
    Where nothing fits, the greedy reading (take every part that is a key) is returned.
    """
    failed: set[tuple[int, int]] = set()
    end = len(loc)

    def fits(i: int, node: Any) -> tuple[str | int, ...] | None:
        if (i, id(node)) in failed:
            return None
        found: tuple[str | int, ...] | None
        if i == end:
            found = ()
        elif last_key is not None and i == end - 1:
            present = isinstance(node, dict) and loc[i] in node
            found = (loc[i],) if present == (last_key == "extra_forbidden") else None
        else:
            part = loc[i]
            found = None
            if isinstance(part, int):
                child = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
                rest = fits(i + 1, child)
                found = None if rest is None else (part, *rest)
            else:
                if isinstance(node, dict) and part in node:
                    rest = fits(i + 1, node[part])
                    found = None if rest is None else (part, *rest)
                if found is None:
                    found = fits(i + 1, node)
        if found is None:
            failed.add((i, id(node)))
        return found

    exact = fits(0, data)
    if exact is not None:
        return exact
    out: list[str | int] = []
    node = data
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out.append(part)
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
        elif isinstance(node, dict) and part in node:
            out.append(part)
            node = node[part]
        elif last_key is not None and i == end - 1:
            out.append(part)
    return tuple(out)


def read_regular_file(path: Path, *, max_bytes: int, what: str = "file") -> bytes:
    """Read a regular file of at most ``max_bytes`` bytes, without ever blocking or growing past the cap.

    The file is opened with :func:`robustctl.inputfile.open_regular` (never blocks; FIFOs, character
    and block devices such as ``/dev/zero``, sockets and directories are refused). At most ``max_bytes + 1`` bytes are
    read, so a file that grows after the check is refused as well.

    Args:
        path: the file.
        max_bytes: size cap in bytes.
        what: what the file is, for messages ("YAML file").

    Returns:
        The file's bytes.

    Raises:
        ConfigError: missing, unreadable, not a regular file, or larger than ``max_bytes``; one line
            naming the file.
    """
    try:
        fd = open_regular(path)
    except NotReadable as exc:
        raise ConfigError(f"{path}: {exc.reason}" + (f"; expected a {what}" if exc.special else "")) from None
    try:
        return read_bounded(fd, max_bytes)
    except NotReadable as exc:
        if exc.reason.startswith("is larger than"):
            raise ConfigError(f"{path}: larger than the {max_bytes}-byte limit of a {what}") from None
        raise ConfigError(f"{path}: {exc.reason}") from None
    finally:
        os.close(fd)


def load_yaml(path: Path, *, max_bytes: int = MAX_YAML_BYTES) -> tuple[Any, SourceMap]:
    """Read and parse a YAML file, within the bounds of this module.

    Args:
        path: the YAML file.
        max_bytes: size cap in bytes (default :data:`MAX_YAML_BYTES`).

    Returns:
        ``(data, source_map)``; ``data`` is None for an empty file.

    Raises:
        ConfigError: missing or unreadable file, not a regular file, over ``max_bytes``, not UTF-8,
            YAML syntax error, duplicate key, too many nodes or too deep; with ``FILE:LINE`` where known.
    """
    raw = read_regular_file(path, max_bytes=max_bytes, what="YAML file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text ({exc.reason})") from None
    return parse_yaml(text, str(path))


def parse_yaml(text: str, filename: str) -> tuple[Any, SourceMap]:
    """Parse YAML ``text`` named ``filename`` in messages. See :func:`load_yaml`."""
    smap = SourceMap(filename)
    try:
        loader = _BoundedLoader(text, filename)  # the reader refuses control characters here
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        char = f"U+{exc.character:04X}" if isinstance(exc.character, int) else repr(exc.character)
        raise ConfigError(f"{filename}:{line}: character {char} is not allowed in YAML") from None
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(f"{filename}{_line(exc)}: YAML syntax error: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{filename}: YAML error: {_one_line(exc)}") from None
    try:
        try:
            node = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            raise ConfigError(f"{filename}{_line(exc)}: YAML syntax error: {exc.problem or exc}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{filename}: YAML error: {_one_line(exc)}") from None
        except RecursionError:
            raise ConfigError(f"{filename}: YAML nested too deeply (limit {MAX_YAML_DEPTH} levels)") from None
        if node is None:
            return None, smap
        _Walker(smap).walk(node, (), 0)
        try:
            data = loader.construct_document(node)
        except yaml.MarkedYAMLError as exc:  # e.g. an unknown tag such as !!python/object
            raise ConfigError(
                f"{filename}{_line(exc)}: YAML error: {exc.problem or _one_line(exc)}"
            ) from None
        except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
            # ValueError: e.g. a timestamp-shaped scalar that is no date (2024-13-45).
            raise ConfigError(f"{filename}: YAML error: {_one_line(exc)}") from None
    finally:
        loader.dispose()
    return data, smap


class _BoundedLoader(yaml.SafeLoader):
    """``SafeLoader`` that stops composing past :data:`MAX_YAML_NODES` nodes or :data:`MAX_YAML_DEPTH` levels.

    Counting while composing bounds the memory of the node graph itself (an alias adds one reference,
    not a copy); :class:`_Walker` then bounds the document with aliases expanded.
    """

    def __init__(self, text: str, filename: str) -> None:
        super().__init__(text)
        self._filename = filename
        self._nodes = 0
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._nodes += 1
        self._depth += 1
        try:
            if self._nodes > MAX_YAML_NODES or self._depth > MAX_YAML_DEPTH:
                line = self.peek_event().start_mark.line + 1  # type: ignore[no-untyped-call]
                if self._depth > MAX_YAML_DEPTH:
                    raise ConfigError(
                        f"{self._filename}:{line}: YAML nested too deeply (limit {MAX_YAML_DEPTH} levels)"
                    )
                raise ConfigError(
                    f"{self._filename}:{line}: YAML document too large: more than {MAX_YAML_NODES} nodes"
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


_KEY_TAGS = frozenset({"tag:yaml.org,2002:str", "tag:yaml.org,2002:merge"})
"""Tags a mapping key may resolve to: a string, or ``<<`` (a merge). Every key robustctl reads (an
inventory's or a playbook's) is a name; a plain ``null``, ``1``, ``true`` or ``2024-01-01`` resolves to
another type (YAML 1.1), which a validator could only report by its converted value (``None``,
``[1]``) and at the line of its parent. :class:`_Walker` refuses it at its own line instead."""

_TAG_NAMES = {
    "tag:yaml.org,2002:null": "null",
    "tag:yaml.org,2002:bool": "a boolean",
    "tag:yaml.org,2002:int": "an integer",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:timestamp": "a date",
    "tag:yaml.org,2002:binary": "binary data",
    "tag:yaml.org,2002:value": "YAML's value key (=)",
}
"""How a message names the type a non-string key resolves to (other tags are shown as they are)."""


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def dotted_path(path: Sequence[str | int]) -> str:
    """``hosts[0].labels.rack``: a key path as every ``FILE:LINE: key.path: message`` line shows it.

    A list index is ``[i]``; a key is joined with ``.``. A key that is empty or not printable is shown
    quoted (``ssh.''``, ``ssh.'a\\nb'``), so the message stays one line and an empty key is visible;
    a key longer than 80 characters is cut to 77 and ``...``. The empty path is ``<top>``.
    """
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        text = _short(part) if part and part.isprintable() else repr(_short(part))
        out += f".{text}" if out else text
    return out or "<top>"


def _line(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    return f":{mark.line + 1}" if mark is not None else ""


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class _Walker:
    """Records line numbers; enforces the node budget (aliases expanded) and the depth limit."""

    def __init__(self, smap: SourceMap) -> None:
        self.smap = smap
        self.visited = 0

    def walk(self, node: yaml.Node, path: PathKey, depth: int) -> None:
        smap = self.smap
        line = node.start_mark.line + 1
        self.visited += 1
        if self.visited > MAX_YAML_NODES:
            raise ConfigError(
                f"{smap.file}:{line}: YAML document too large: more than {MAX_YAML_NODES} nodes with aliases "
                "expanded (nested aliases?)"
            )
        if depth > MAX_YAML_DEPTH:
            raise ConfigError(f"{smap.file}:{line}: YAML nested too deeply (limit {MAX_YAML_DEPTH} levels)")
        smap.lines.setdefault(path, line)
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key_node, value_node in node.value:
                kline = key_node.start_mark.line + 1
                if not isinstance(key_node, yaml.ScalarNode):
                    raise ConfigError(
                        f"{smap.file}:{kline}: complex mapping key (a key must be a plain scalar)"
                    )
                key = str(key_node.value)
                if key_node.tag not in _KEY_TAGS:
                    raise ConfigError(
                        f"{smap.file}:{kline}: {dotted_path((*path, key))}: key {_short(key)!r} reads as "
                        f"{_TAG_NAMES.get(key_node.tag, key_node.tag)}, not as a name: quote it "
                        f"({_short(key)!r}) if it is one"
                    )
                if key in seen and key != "<<":
                    raise ConfigError(
                        f"{smap.file}:{kline}: duplicate key {key!r} (first at line {seen[key]})"
                    )
                seen[key] = kline
                sub = (*path, key)  # not inside [...]: mypy reads that as 3.11's star in a subscript
                smap.lines[sub] = kline
                self.walk(value_node, sub, depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self.walk(item, (*path, i), depth + 1)
