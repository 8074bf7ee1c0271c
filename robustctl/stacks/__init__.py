"""Stack-trace collection, parsing, clustering and blame (``robustctl stacks``, issue #3).

Pipeline (every step pure except collection):

* :mod:`.model` — the types: :class:`Frame`, :class:`ThreadStack` (frames innermost first, as py-spy
  prints them), :class:`ProcessDump` (one process, or why py-spy could not read it), :class:`ProcessRole`.
* :mod:`.parse` — py-spy ``dump --json`` and pasted text dumps → ProcessDumps; rank from the dump or
  the file name; role from the frames.
* :mod:`.collect` — live collection through the node-side ``stacks`` probe.
* :mod:`.cluster` — STAT-like equivalence classes per role, dominance, divergence, categories.
* :mod:`.blame` — outliers → smallest parallel group → over-eviction set (ByteRobust §5).
* :mod:`.failslow` — fail-slow voting over rounds.
* :mod:`.result` — :class:`~.result.StacksReport` (the ``--json`` document) and
  :func:`~.result.analyze_stacks` (dumps → report, the live command's pure half).
* :mod:`.analyze` — offline: :func:`~.analyze.analyze_dumps` (files → report) and the ``pyspy``
  artefact kind of ``robustctl analyze`` (registered when the module is imported).

Importing this package imports only :mod:`.model` (no torch, no rich).
"""

from __future__ import annotations

from robustctl.stacks.model import DumpParseError, Frame, ProcessDump, ProcessRole, ThreadStack

__all__ = ["DumpParseError", "Frame", "ProcessDump", "ProcessRole", "ThreadStack"]
