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
  written at O into T, created (with its directories) when O is 0 and truncated first;
* ``commit --path T --dest P --size N``: T is N bytes (else refused), flushed to disk and renamed
  over P (atomic: a reader sees the old file or the whole new one); ``--tracker PATH --iteration I``
  also writes the tracker file PATH (``I``, as Megatron writes it) when it is missing;
* ``abort --path T``: T removed (a copy that failed leaves nothing behind).

Containment (``--dir D``, the checkpoint directory): every path (``--path``, ``--dest``,
``--tracker``) must be below D (``D/iter_0000030/rank_00003.pt``; no ``.`` or ``..`` component), and
nothing outside D is read, written, renamed or removed. D itself is opened (it may be a link: the
operator named it; for ``write`` it is created when missing); every level below it (the iteration
directory, an ``mp_rank`` directory, the file) is opened relative to its parent's descriptor with
``O_NOFOLLOW`` (``os.open(name, ..., dir_fd=parent)``), after an ``lstat`` that names what it found:
a symbolic link at any level is refused, whether it points inside D or out, and a link swapped in
after the ``lstat`` fails the open (``ELOOP``) instead of being followed. Renames and removals use
the parent's descriptor too. A refused path is the document's ``error``, one line.

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
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
SYMLINK = "a symbolic link, not followed (only what is inside the checkpoint directory is touched)"
"""Why a symbolic link below the checkpoint directory is refused, whatever it points at."""


class Refused(ValueError):
    """A path this probe does not touch: outside ``--dir``, or through a symbolic link or a
    non-directory below it. The message is the document's ``error``."""


def below(base: str, path: str) -> list[str]:
    """The components of ``path`` below the directory ``base`` (both absolute).

    Raises:
        Refused: ``path`` is not below ``base``, or has an empty, ``.`` or ``..`` component.
    """
    root = base.rstrip("/") or "/"
    prefix = root if root == "/" else root + "/"
    if not path.startswith(prefix):
        raise Refused(f"{path}: not inside the checkpoint directory {root}")
    parts = path[len(prefix) :].split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise Refused(f"{path}: not a plain path inside the checkpoint directory {root}")
    return parts


def open_parent(base: str, path: str, create: bool = False) -> tuple[int, str]:
    """(a descriptor of the directory holding ``path``, ``path``'s last component), every directory
    below ``base`` opened from its parent's descriptor without following a link (see the module doc).

    Args:
        create: make missing directories (``base`` included), as ``os.makedirs`` would.

    Raises:
        Refused: outside ``base``, a link or a non-directory on the way. OSError: a directory is
            missing (without ``create``) or cannot be opened.
    """
    parts = below(base, path)
    if create:
        os.makedirs(base, exist_ok=True)
    fd = os.open(base, os.O_RDONLY | _DIRECTORY)
    done = base.rstrip("/")
    try:
        for part in parts[:-1]:
            done = f"{done}/{part}"
            if create:
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, done) from None
            if stat.S_ISLNK(st.st_mode):
                raise Refused(f"{done}: {SYMLINK}")
            if not stat.S_ISDIR(st.st_mode):
                raise Refused(f"{done}: not a directory")
            try:
                nfd = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=fd)
            except OSError as exc:  # ELOOP: a link swapped in after the lstat
                raise OSError(exc.errno, exc.strerror, done) from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def leaf_check(parent: int, name: str, path: str, missing_ok: bool = False) -> None:
    """Refuse a link or a non-regular file at ``name`` in ``parent`` before it is opened (opening a
    device can act on it); nothing there passes when ``missing_ok``.

    Raises:
        Refused, OSError.
    """
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        if missing_ok:
            return
        raise FileNotFoundError(2, "No such file or directory", path) from None
    if stat.S_ISLNK(st.st_mode):
        raise Refused(f"{path}: {SYMLINK}")
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"{path}: not a regular file")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--op", required=True, choices=("read", "write", "commit", "abort"))
    p.add_argument("--dir", required=True, help="the checkpoint directory: every path is below it")
    p.add_argument("--path", required=True)
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--length", type=int, default=MAX_CHUNK)
    p.add_argument("--dest")
    p.add_argument("--size", type=int)
    p.add_argument("--tracker")
    p.add_argument("--iteration", type=int)


def check_args(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    if not os.path.isabs(args.path) or not os.path.isabs(args.dir):
        p.error("--dir and --path must be absolute")
    if args.offset < 0 or not 0 < args.length <= MAX_CHUNK:
        p.error(f"--offset must be >= 0 and --length 1 ... {MAX_CHUNK}")
    if args.op == "commit" and (args.dest is None or args.size is None or not os.path.isabs(args.dest)):
        p.error("commit needs an absolute --dest and --size")
    if args.tracker is not None and not os.path.isabs(args.tracker):
        p.error("--tracker must be absolute")


def _read(args: argparse.Namespace, doc: Document) -> None:
    try:
        parent, name = open_parent(args.dir, args.path)
        try:
            leaf_check(parent, name, args.path)
            fd = os.open(name, os.O_RDONLY | _NONBLOCK | _NOFOLLOW, dir_fd=parent)
        finally:
            os.close(parent)
    except Refused as exc:
        doc.set("error", str(exc))
        return
    except OSError as exc:
        doc.set("error", f"{args.path}: {exc.strerror or exc}")
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
        flags = os.O_WRONLY | os.O_CREAT | _NOFOLLOW | _NONBLOCK
        if args.offset == 0:
            flags |= os.O_TRUNC
        parent, name = open_parent(args.dir, args.path, create=args.offset == 0)
        try:
            leaf_check(parent, name, args.path, missing_ok=True)
            fd = os.open(name, flags, 0o600, dir_fd=parent)
        finally:
            os.close(parent)
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
    except Refused as exc:
        doc.set("error", str(exc))
    except OSError as exc:
        doc.set("error", describe(exc))


def _commit(args: argparse.Namespace, doc: Document) -> None:
    opened: list[int] = []
    try:
        src_dir, src = open_parent(args.dir, args.path)
        opened.append(src_dir)
        dst_dir, dst = open_parent(args.dir, args.dest)
        opened.append(dst_dir)
        leaf_check(src_dir, src, args.path)
        st = os.stat(src, dir_fd=src_dir, follow_symlinks=False)
        if st.st_size != args.size:
            doc.set("error", f"{args.path}: {st.st_size} bytes, expected {args.size}")
            return
        fd = os.open(src, os.O_RDONLY | _NOFOLLOW | _NONBLOCK, dir_fd=src_dir)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(
            src, dst, src_dir_fd=src_dir, dst_dir_fd=dst_dir
        )  # a link at dst is replaced, not followed
        doc.set("size", st.st_size)
        written = False
        if args.tracker and args.iteration is not None:
            t_dir, tracker = open_parent(args.dir, args.tracker)
            opened.append(t_dir)
            try:
                os.stat(tracker, dir_fd=t_dir, follow_symlinks=False)
            except FileNotFoundError:
                tmp = f"{tracker}.tmp{os.getpid()}"
                try:  # a stale one of an earlier run of this pid
                    os.unlink(tmp, dir_fd=t_dir)
                except FileNotFoundError:
                    pass
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
                tfd = os.open(tmp, flags, 0o666, dir_fd=t_dir)
                try:
                    os.write(tfd, str(args.iteration).encode("ascii"))
                    os.fsync(tfd)
                finally:
                    os.close(tfd)
                os.replace(tmp, tracker, src_dir_fd=t_dir, dst_dir_fd=t_dir)
                written = True
        doc.set("tracker_written", written)
    except Refused as exc:
        doc.set("error", str(exc))
    except OSError as exc:
        doc.set("error", describe(exc))
    finally:
        for fd in opened:
            os.close(fd)


def _abort(args: argparse.Namespace, doc: Document) -> None:
    try:
        parent, name = open_parent(args.dir, args.path)
    except FileNotFoundError:
        return  # its directory is gone: so is the file
    except Refused as exc:
        doc.set("error", str(exc))
        return
    except OSError as exc:
        doc.set("error", describe(exc))
        return
    try:
        os.unlink(name, dir_fd=parent)  # a link is removed itself, never what it points at
    except FileNotFoundError:
        pass
    except OSError as exc:
        doc.set("error", f"{args.path}: {exc.strerror or exc}")
    finally:
        os.close(parent)


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
