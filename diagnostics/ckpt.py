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


def read_head(path: str, limit: int) -> bytes:
    """Up to ``limit`` bytes from the start of the regular file ``path``.

    Raises OSError (ValueError for something that is not a regular file): opened ``O_NONBLOCK`` so a
    FIFO put in a shard's place never blocks, and checked with ``fstat`` after opening.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        return os.read(fd, limit)
    finally:
        os.close(fd)


def shard_entry(path: str, name: str, keys: Mapping[str, int | None]) -> dict[str, Any]:
    """One shard: size, readable, and why not."""
    entry: dict[str, Any] = {"name": name, "rank": None, "tp": None, "pp": None}
    entry.update(keys)
    entry["size"] = None
    entry["readable"] = False
    entry["error"] = None
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            entry["error"] = "not a regular file"
            return entry
        entry["size"] = st.st_size
        if st.st_size == 0:
            entry["error"] = "empty (0 bytes)"
            return entry
        head = read_head(path, HEADER_BYTES)
        if not head:
            entry["error"] = "read no bytes"
            return entry
    except (OSError, ValueError) as exc:
        entry["error"] = describe(exc)
        return entry
    entry["readable"] = True
    return entry


def scan_iteration(base: str, name: str, number: int, shards: str, budget: Budget) -> dict[str, Any]:
    """The shards of one iteration directory."""
    out: dict[str, Any] = {"iteration": number, "name": name, "truncated": False, "other": 0, "shards": []}
    path = os.path.join(base, name)
    try:
        entries = sorted(os.listdir(path))
    except OSError as exc:
        out["error"] = describe(exc)
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
            out["shards"].append(shard_entry(os.path.join(path, entry), entry, {"rank": int(m.group(1))}))
            continue
        m = MP_DIR_RE.match(entry)
        if m is None:
            out["other"] += 1
            continue
        keys = {"tp": int(m.group(1)), "pp": int(m.group(2)) if m.group(2) is not None else 0}
        rel = f"{entry}/{MP_FILE}"
        out["shards"].append(shard_entry(os.path.join(path, entry, MP_FILE), rel, keys))
    return out


def read_tracker(base: str, name: str) -> dict[str, Any]:
    """The tracker file: present, its first bytes, the iteration it names."""
    out: dict[str, Any] = {"present": False, "raw": None, "iteration": None, "error": None}
    path = os.path.join(base, name)
    try:
        raw = read_head(path, TRACKER_BYTES)
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
    doc.set("exists", True)
    doc.set("error", None)
    doc.set("tracker", read_tracker(base, args.tracker))
    budget = Budget(args.max_entries)
    found: list[tuple[int, str]] = []
    other = 0
    truncated = False
    try:
        with os.scandir(base) as it:
            for e in it:
                if not budget.take():
                    truncated = True
                    break
                m = ITER_RE.match(e.name)
                if m is None:
                    other += 1
                    continue
                found.append((int(m.group(1)), e.name))
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
        listed.append(scan_iteration(base, name, number, args.shards, budget))
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
