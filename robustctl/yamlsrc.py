"""YAML loading that remembers where every value came from.

:func:`load_yaml` returns the data (plain dicts/lists/scalars, like ``yaml.safe_load``) and a
:class:`SourceMap` from key paths to line numbers, so a validation error can say
``cluster.yaml:14: hosts[2].ssh.prot: unknown key``. Duplicate keys, which ``safe_load`` would
silently overwrite, are errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from robustctl.errors import ConfigError

PathKey = tuple[str | int, ...]


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


def load_yaml(path: Path) -> tuple[Any, SourceMap]:
    """Read and parse a YAML file.

    Returns:
        ``(data, source_map)``; ``data`` is None for an empty file.

    Raises:
        ConfigError: unreadable file, YAML syntax error or duplicate key, with ``FILE:LINE``.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, expected a YAML file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    return parse_yaml(text, str(path))


def parse_yaml(text: str, filename: str) -> tuple[Any, SourceMap]:
    """Parse YAML ``text`` named ``filename`` in messages. See :func:`load_yaml`."""
    smap = SourceMap(filename)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{filename}{line}: YAML syntax error: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{filename}: YAML error: {exc}") from None
    if node is None:
        return None, smap
    _walk(node, (), smap)
    try:
        data = yaml.load(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:  # pragma: no cover - compose already succeeded
        raise ConfigError(f"{filename}: YAML error: {exc}") from None
    return data, smap


def _walk(node: yaml.Node, path: PathKey, smap: SourceMap) -> None:
    smap.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen and key != "<<":
                raise ConfigError(f"{smap.file}:{line}: duplicate key {key!r} (first at line {seen[key]})")
            seen[key] = line
            sub = (*path, key)  # not inside [...]: mypy reads that as 3.11's star in a subscript
            smap.lines[sub] = line
            _walk(value_node, sub, smap)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*path, i), smap)
