"""Stack-trace collection, parsing, clustering and blame (``robustctl stacks``, issue #3).

Modules: :mod:`.model` (types), :mod:`.parse` (py-spy text/JSON), :mod:`.cluster` (STAT-like
equivalence classes), :mod:`.blame` (outliers → smallest parallel group → over-eviction),
:mod:`.failslow` (ByteRobust fail-slow voting), :mod:`.analyze` (offline dumps).
"""

from __future__ import annotations

from robustctl.stacks.model import DumpParseError, Frame, ProcessDump, ProcessRole, ThreadStack

__all__ = ["DumpParseError", "Frame", "ProcessDump", "ProcessRole", "ThreadStack"]
