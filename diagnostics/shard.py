#!/usr/bin/env python3
"""robustctl node-side probe ``shard``: read or write one checkpoint shard in bounded chunks.

Standalone with the shared prelude ``_prelude.py`` (Python >= 3.8, stdlib only); never imports
robustctl. Prints exactly one JSON document (see ``diagnostics/README.md``). A restart on a warm
standby, with checkpoint directories local to each host, copies the shards the new host's ranks
load from a host that holds them (``robustctl/ckpt/stage.py``): the control side reads a chunk
here on the source host and writes it there on the destination, so the hosts need no SSH trust
between them. One operation per run (``--op``):

* ``read --path P --offset O --length L``: up to L bytes of the regular file P from O, base64;
  ``size`` is the file's size (a FIFO, a device, a directory is refused, never opened);
* ``write --path T --offset O`` with the chunk (base64) streamed as ``main``'s ``data`` argument:
  written at O into T, created (with its directory) when O is 0 and truncated first;
* ``commit --path T --dest P --size N``: T is N bytes (else refused), flushed to disk and renamed
  over P (atomic: a reader sees the old file or the whole new one); ``--tracker PATH --iteration I``
  also writes the tracker file PATH (``I``, as Megatron writes it) when it is missing;
* ``abort --path T``: T removed (a copy that failed leaves nothing behind).

``--root`` is not applied (the path is the one the probe's Python sees, as in ``ckpt.py``).

Data schema::

    {"op": str, "path": str, "size": int|null, "offset": int|null, "length": int|null,
     "data": str|null (read: base64), "eof": bool|null, "written": int|null,
     "tracker_written": bool|null, "error": str|null}
"""

from __future__ import annotations

import argparse
import base64
import os
import stat
import sys
from typing import Any, Sequence

from _prelude import Document, describe, probe_main

PROBE = "shard"
MAX_CHUNK = 8 << 20
"""Largest chunk read or written in one run (8 MiB: 11 MiB of base64, under the transport's 16 MiB)."""


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--op", required=True, choices=("read", "write", "commit", "abort"))
    p.add_argument("--path", required=True)
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--length", type=int, default=MAX_CHUNK)
    p.add_argument("--dest")
    p.add_argument("--size", type=int)
    p.add_argument("--tracker")
    p.add_argument("--iteration", type=int)


def check_args(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    if not os.path.isabs(args.path):
        p.error("--path must be absolute")
    if args.offset < 0 or not 0 < args.length <= MAX_CHUNK:
        p.error(f"--offset must be >= 0 and --length 1 ... {MAX_CHUNK}")
    if args.op == "commit" and (args.dest is None or args.size is None or not os.path.isabs(args.dest)):
        p.error("commit needs an absolute --dest and --size")
    if args.tracker is not None and not os.path.isabs(args.tracker):
        p.error("--tracker must be absolute")


def _read(args: argparse.Namespace, doc: Document) -> None:
    try:
        fd = os.open(args.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        doc.set("error", describe(exc))
        return
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            doc.set("error", f"{args.path}: not a regular file")
            return
        os.lseek(fd, args.offset, os.SEEK_SET)
        chunks = []
        want = min(args.length, max(0, st.st_size - args.offset))
        while want > 0:
            b = os.read(fd, want)
            if not b:
                break
            chunks.append(b)
            want -= len(b)
        data = b"".join(chunks)
        doc.set("size", st.st_size)
        doc.set("length", len(data))
        doc.set("eof", args.offset + len(data) >= st.st_size)
        doc.set("data", base64.b64encode(data).decode("ascii"))
    except OSError as exc:
        doc.set("error", describe(exc))
    finally:
        os.close(fd)


def _write(args: argparse.Namespace, doc: Document, data: str | None) -> None:
    try:
        raw = base64.b64decode((data or "").encode("ascii"), validate=True)
    except ValueError as exc:
        doc.set("error", f"chunk is not base64: {exc}")
        return
    if len(raw) > MAX_CHUNK:
        doc.set("error", f"chunk of {len(raw)} bytes is over {MAX_CHUNK}")
        return
    try:
        flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        if args.offset == 0:
            os.makedirs(os.path.dirname(args.path), exist_ok=True)
            flags |= os.O_TRUNC
        fd = os.open(args.path, flags, 0o600)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                doc.set("error", f"{args.path}: not a regular file")
                return
            os.lseek(fd, args.offset, os.SEEK_SET)
            view = memoryview(raw)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        finally:
            os.close(fd)
        doc.set("written", len(raw))
    except OSError as exc:
        doc.set("error", describe(exc))


def _commit(args: argparse.Namespace, doc: Document) -> None:
    try:
        st = os.lstat(args.path)
        if not stat.S_ISREG(st.st_mode) or st.st_size != args.size:
            doc.set("error", f"{args.path}: {st.st_size} bytes, expected {args.size}")
            return
        fd = os.open(args.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(args.path, args.dest)
        doc.set("size", st.st_size)
        written = False
        if args.tracker and args.iteration is not None:
            tracker = args.tracker
            if not os.path.lexists(tracker):
                tmp = f"{tracker}.tmp{os.getpid()}"
                with open(tmp, "w") as f:
                    f.write(str(args.iteration))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, tracker)
                written = True
        doc.set("tracker_written", written)
    except OSError as exc:
        doc.set("error", describe(exc))


def _abort(args: argparse.Namespace, doc: Document) -> None:
    try:
        os.unlink(args.path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        doc.set("error", describe(exc))


def main(argv: Sequence[str] | None = None, data: str | None = None) -> int:
    def collect(args: argparse.Namespace, doc: Document) -> None:
        for key in ("size", "offset", "length", "data", "eof", "written", "tracker_written", "error"):
            doc.set(key, None)
        doc.set("op", args.op)
        doc.set("path", args.path)
        doc.set("offset", args.offset)
        ops: dict[str, Any] = {"read": _read, "commit": _commit, "abort": _abort}
        if args.op == "write":
            _write(args, doc, data)
        else:
            ops[args.op](args, doc)

    return probe_main(PROBE, add_args, collect, argv, timeout_s=120.0, check_args=check_args)


if __name__ == "__main__":
    sys.exit(main())
