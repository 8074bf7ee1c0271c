#!/usr/bin/env python3
"""robustctl node-side probe ``ckpt``: the checkpoints a training job left in a directory of this host.

Standalone with the shared prelude ``_prelude.py`` (Python >= 3.8, stdlib only); never imports
robustctl. Prints exactly one JSON document (see ``diagnostics/README.md``). It observes; the
control side (``robustctl/ckpt/``) decides which iterations are complete.

The layout is Megatron-LM's (``megatron/training/checkpointing.py``): ``DIR/iter_NNNNNNN/`` per
saved iteration (``iter_{:07d}``; more digits past 9,999,999) and the tracker file
``DIR/latest_checkpointed_iteration.txt`` (an iteration number, or ``release``). Shards
(``--shards``):

* ``rank``: ``iter_NNNNNNN/rank_RRRRR.pt``, one per global rank;
* ``mp_rank``: ``iter_NNNNNNN/mp_rank_TT/model_optim_rng.pt`` (PP = 1) or
  ``iter_NNNNNNN/mp_rank_TT_PPP/model_optim_rng.pt``, one per tensor- and pipeline-parallel rank.

A shard is **readable** when it is a regular file that opens and yields its first bytes (up to 64,
a bounded header read): a zero-length file, a directory, a FIFO or a device under a shard's name,
or a file that cannot be opened or read is not. Temporary files (``rank_00003.pt.tmp123``) and
other names are counted in ``other``, never listed as shards.

Containment: nothing outside ``--dir`` is read. Below it, every level (an iteration directory, an
``mp_rank`` directory, the shard, the tracker) is opened relative to its parent's descriptor with
``O_NOFOLLOW`` (``os.open(name, ..., dir_fd=parent)``), after an ``lstat`` that names what it
found: a symbolic link at any level, whether it points inside the directory or out, is refused with
that reason (an iteration's ``error``, a shard's ``error``), never followed, and a link swapped in
between the ``lstat`` and the open fails the open. ``--dir`` itself may be a link (the operator
named it).

Bounds: the ``--max-iterations`` newest iteration directories are listed (the count of all is
kept); at most ``--max-entries`` directory entries are read in all (a listing cut short says
``truncated``); the tracker is read up to 64 bytes; the watchdog ends the probe at ``--timeout``
(a hung network file system) with what it has.

``--root`` is not applied: the directory is the path as this Python (the training environment, with
the host's ``python.wrapper``) sees it.

Data schema::

    {"dir": str, "shards": "rank"|"mp_rank", "exists": bool, "error": str|null,
     "tracker": {"present": bool, "raw": str|null, "iteration": int|null, "error": str|null},
     "iterations_found": int, "truncated": bool, "other": int,
     "iterations": [                                   # newest first
        {"iteration": int, "name": "iter_0000030", "truncated": bool, "other": int,
         "shards": [{"name": "rank_00005.pt", "rank": int|null, "tp": int|null, "pp": int|null,
                     "size": int|null, "readable": bool, "error": str|null}]}]}
"""

from __future__ import annotations

import argparse
import os
import re
import stat
import sys
from typing import Any, Mapping, Sequence

from _prelude import Document, describe, probe_main

PROBE = "ckpt"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | _NOFOLLOW
_DIR_FLAGS = os.O_RDONLY | _DIRECTORY | _NOFOLLOW
SYMLINK = "a symbolic link, not followed (only what is inside the checkpoint directory is read)"
"""Why a symbolic link below the checkpoint directory is refused, whatever it points at."""
HEADER_BYTES = 64
"""Bytes read from the start of each shard to call it readable."""
TRACKER_BYTES = 64
"""Bytes read of the tracker file (an iteration number, or ``release``)."""

ITER_RE = re.compile(r"^iter_(\d{7,12})$")
RANK_RE = re.compile(r"^rank_(\d{1,7})\.pt$")
MP_DIR_RE = re.compile(r"^mp_rank_(\d{2,7})(?:_(\d{3,7}))?$")
MP_FILE = "model_optim_rng.pt"


class Budget:
    """Directory entries left to read (``--max-entries``)."""

    def __init__(self, entries: int) -> None:
        self.left = entries

    def take(self) -> bool:
        """One entry more; False when the budget is spent."""
        if self.left <= 0:
            return False
        self.left -= 1
        return True


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", required=True, help="checkpoint directory")
    p.add_argument("--shards", choices=("rank", "mp_rank"), default="rank", help="shard naming")
    p.add_argument(
        "--tracker", default="latest_checkpointed_iteration.txt", help="tracker file name in --dir"
    )
    p.add_argument("--max-iterations", type=int, default=64, help="newest iteration directories listed")
    p.add_argument("--max-entries", type=int, default=100_000, help="directory entries read in all")


def check_args(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    if not 1 <= args.max_iterations <= 10_000:
        p.error("--max-iterations must be 1-10000")
    if not 1 <= args.max_entries <= 1_000_000:
        p.error("--max-entries must be 1-1000000")
    if "/" in args.tracker or "\x00" in args.tracker or not args.tracker:
        p.error("--tracker must be a file name")
    if args.timeout is None or not args.timeout > 0:
        p.error("--timeout must be positive")


class Refused(ValueError):
    """Something below the checkpoint directory that is not read: a symbolic link, or not the kind
    of file expected there (a FIFO where a shard should be, a file where a directory should be)."""


def open_below(parent: int, name: str, directory: bool) -> int:
    """Open ``name`` (one path component) of the directory open as ``parent``, never following a link.

    An ``lstat`` first says what is there (a link or a special file is refused without being
    opened: opening a device can act on it); the open then uses ``O_NOFOLLOW`` (``O_DIRECTORY`` for
    a directory, ``O_NONBLOCK`` for a file), so a link swapped in after the ``lstat`` fails it, and
    the descriptor's ``fstat`` is checked again.

    Raises:
        OSError: missing, no permission, a swapped-in link (``ELOOP``). Refused: see :class:`Refused`
            (its message does not name ``name``: ``"not a regular file"``, :data:`SYMLINK`).
    """
    st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    want, kind = (stat.S_ISDIR, "a directory") if directory else (stat.S_ISREG, "a regular file")
    if stat.S_ISLNK(st.st_mode):
        raise Refused(SYMLINK)
    if not want(st.st_mode):
        raise Refused(f"not {kind}")
    fd = os.open(name, _DIR_FLAGS if directory else _FILE_FLAGS, dir_fd=parent)
    try:
        if not want(os.fstat(fd).st_mode):
            raise Refused(f"not {kind}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_head(parent: int, name: str, limit: int) -> tuple[int, bytes]:
    """(size, up to ``limit`` bytes from the start) of the regular file ``name`` in ``parent``.

    Raises OSError, Refused (:func:`open_below`: a FIFO put in a shard's place is never opened, a
    link is never followed).
    """
    fd = open_below(parent, name, directory=False)
    try:
        return os.fstat(fd).st_size, os.read(fd, limit)
    finally:
        os.close(fd)


def shard_entry(parent: int, parts: Sequence[str], keys: Mapping[str, int | None]) -> dict[str, Any]:
    """One shard at ``parts`` (``rank_00005.pt``, or ``mp_rank_00_001``, ``model_optim_rng.pt``)
    below the iteration directory open as ``parent``: size, readable, and why not."""
    entry: dict[str, Any] = {"name": "/".join(parts), "rank": None, "tp": None, "pp": None}
    entry.update(keys)
    entry["size"] = None
    entry["readable"] = False
    entry["error"] = None
    opened: list[int] = []
    try:
        for part in parts[:-1]:
            try:
                opened.append(open_below(opened[-1] if opened else parent, part, directory=True))
            except Refused as exc:
                raise Refused(f"{part}: {exc}") from None
        size, head = read_head(opened[-1] if opened else parent, parts[-1], HEADER_BYTES)
        entry["size"] = size
        if size == 0:
            entry["error"] = "empty (0 bytes)"
            return entry
        if not head:
            entry["error"] = "read no bytes"
            return entry
    except Refused as exc:
        entry["error"] = str(exc)
        return entry
    except OSError as exc:
        entry["error"] = describe(exc)
        return entry
    finally:
        for fd in opened:
            os.close(fd)
    entry["readable"] = True
    return entry


def scan_iteration(root: int, name: str, number: int, shards: str, budget: Budget) -> dict[str, Any]:
    """The shards of iteration directory ``name`` of the checkpoint directory open as ``root``."""
    out: dict[str, Any] = {"iteration": number, "name": name, "truncated": False, "other": 0, "shards": []}
    try:
        fd = open_below(root, name, directory=True)
    except Refused as exc:
        out["error"] = f"{name}: {exc}"
        return out
    except OSError as exc:
        out["error"] = f"{name}: {exc.strerror or exc}"
        return out
    try:
        try:
            entries = sorted(os.listdir(fd))
        except OSError as exc:
            out["error"] = f"{name}: {exc.strerror or exc}"
            return out
        for entry in entries:
            if not budget.take():
                out["truncated"] = True
                break
            if shards == "rank":
                m = RANK_RE.match(entry)
                if m is None:
                    out["other"] += 1
                    continue
                out["shards"].append(shard_entry(fd, (entry,), {"rank": int(m.group(1))}))
                continue
            m = MP_DIR_RE.match(entry)
            if m is None:
                out["other"] += 1
                continue
            keys = {"tp": int(m.group(1)), "pp": int(m.group(2)) if m.group(2) is not None else 0}
            out["shards"].append(shard_entry(fd, (entry, MP_FILE), keys))
    finally:
        os.close(fd)
    return out


def read_tracker(root: int, name: str) -> dict[str, Any]:
    """The tracker file ``name`` of the checkpoint directory open as ``root``: present, its first
    bytes, the iteration it names."""
    out: dict[str, Any] = {"present": False, "raw": None, "iteration": None, "error": None}
    try:
        _, raw = read_head(root, name, TRACKER_BYTES)
    except FileNotFoundError:
        return out
    except (OSError, ValueError) as exc:
        out["present"] = True
        out["error"] = describe(exc)
        return out
    out["present"] = True
    text = raw.decode("utf-8", "replace").strip()
    out["raw"] = text
    if text.isascii() and text.isdigit() and len(text) <= 12:
        out["iteration"] = int(text)
    elif text != "release":
        out["error"] = "not an iteration number"
    return out


def collect(args: argparse.Namespace, doc: Document) -> None:
    base = args.dir
    doc.set("dir", base)
    doc.set("shards", args.shards)
    try:
        st = os.stat(base)
    except OSError as exc:
        doc.set("exists", False)
        doc.set("error", describe(exc))
        return
    if not stat.S_ISDIR(st.st_mode):
        doc.set("exists", False)
        doc.set("error", f"{base}: not a directory")
        return
    try:
        root = os.open(base, os.O_RDONLY | _DIRECTORY)  # --dir itself may be a link: the operator named it
    except OSError as exc:
        doc.set("exists", False)
        doc.set("error", describe(exc))
        return
    try:
        scan_root(args, doc, root)
    finally:
        os.close(root)


def scan_root(args: argparse.Namespace, doc: Document, root: int) -> None:
    """The tracker and the iterations of the checkpoint directory open as ``root``."""
    base = args.dir
    doc.set("exists", True)
    doc.set("error", None)
    doc.set("tracker", read_tracker(root, args.tracker))
    budget = Budget(args.max_entries)
    found: list[tuple[int, str]] = []
    other = 0
    truncated = False
    try:
        for name in os.listdir(root):
            if not budget.take():
                truncated = True
                break
            m = ITER_RE.match(name)
            if m is None:
                other += 1
                continue
            found.append((int(m.group(1)), name))
    except OSError as exc:
        doc.set("error", describe(exc))
        doc.error(f"listing {base}: {describe(exc)}")
        return
    found.sort(reverse=True)
    doc.set("iterations_found", len(found))
    doc.set("truncated", truncated)
    doc.set("other", other)
    listed: list[dict[str, Any]] = []
    doc.set("iterations", listed)  # filled in place: a timeout prints what was listed by then
    for number, name in found[: args.max_iterations]:
        listed.append(scan_iteration(root, name, number, args.shards, budget))
        if listed[-1].get("truncated"):
            doc.set("truncated", True)
            break


def main(argv: Sequence[str] | None = None) -> int:
    return probe_main(
        PROBE,
        add_args,
        collect,
        argv,
        timeout_s=60.0,
        check_args=check_args,
        description="robustctl ckpt probe: Megatron-style checkpoint iterations and shards (one JSON document).",
    )


if __name__ == "__main__":
    sys.exit(main())
