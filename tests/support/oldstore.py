"""A state store as an older robustctl left it: the schema's migrations up to (not including) a version.

Example::

    conn = store_before(tmp_path / "old.db", version)   # an open sqlite3 connection; add rows, close
"""

from __future__ import annotations

import sqlite3
from pathlib import Path


def migration_version(description_start: str) -> int:
    """The schema version whose migration's description starts with ``description_start``."""
    from robustctl.store import SCHEMA

    return next(m.version for m in SCHEMA if m.description.startswith(description_start))


def store_before(path: Path, version: int) -> sqlite3.Connection:
    """Create ``path`` with every migration below ``version`` applied and recorded, as a store of that
    older schema; the open connection (the caller adds rows, commits and closes)."""
    from robustctl.store import SCHEMA

    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE migrations(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL, description TEXT NOT NULL)"
    )
    for step in SCHEMA[: version - 1]:
        for stmt in step.statements:
            conn.execute(stmt)
        conn.execute("INSERT INTO migrations VALUES (?, 0, ?)", (step.version, step.description))
    return conn
