"""Parsers of py-spy output (``py-spy dump --json`` and the text format people paste)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from robustctl.stacks.model import DumpParseError, Frame, ThreadStack


def _opt_bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def parse_pyspy_json(obj: Any) -> tuple[ThreadStack, ...]:
    """Parse the decoded output of ``py-spy dump --json`` (py-spy 0.3/0.4).

    Args:
        obj: a list of thread objects ``{thread_id, thread_name, os_thread_id, active, owns_gil,
            frames: [{name, filename, module, short_filename, line, locals}]}``, frames innermost
            first. A single thread object (a mapping) is accepted too.

    Returns:
        One :class:`ThreadStack` per thread, in py-spy's order, frames innermost first. The thread id
        is ``os_thread_id`` when present (the TID that the text format prints), else ``thread_id``.

    Raises:
        DumpParseError: ``obj`` is not a list of thread objects with a ``frames`` list.
    """
    if isinstance(obj, Mapping):
        obj = [obj]
    if not isinstance(obj, list):
        raise DumpParseError(f"py-spy JSON: expected a list of threads, got {type(obj).__name__}")
    threads: list[ThreadStack] = []
    for i, t in enumerate(obj):
        if not isinstance(t, Mapping) or not isinstance(t.get("frames"), list):
            raise DumpParseError(f"py-spy JSON: thread #{i} is not an object with a 'frames' list")
        frames: list[Frame] = []
        for j, f in enumerate(t["frames"]):
            if not isinstance(f, Mapping) or not isinstance(f.get("name"), str):
                raise DumpParseError(f"py-spy JSON: thread #{i} frame #{j} has no 'name'")
            short = f.get("short_filename")
            filename = f.get("filename") or short or "?"
            line = f.get("line")
            module = f.get("module")
            frames.append(
                Frame(
                    function=f["name"],
                    file=str(filename),
                    line=line if isinstance(line, int) and not isinstance(line, bool) else None,
                    module=str(module) if module else None,
                    short_file=str(short) if short and short != filename else None,
                )
            )
        tid = t.get("os_thread_id")
        if tid is None:
            tid = t.get("thread_id")
        name = t.get("thread_name")
        active = _opt_bool(t.get("active"))
        threads.append(
            ThreadStack(
                thread_id=str(tid) if tid is not None else str(i),
                name=name if isinstance(name, str) else None,
                frames=tuple(frames),
                idle=None if active is None else not active,
                active=active,
                owns_gil=_opt_bool(t.get("owns_gil")),
            )
        )
    return tuple(threads)
