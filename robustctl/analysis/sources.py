"""The inputs of ``robustctl analyze``: files, directories of files, and tar archives of files.

An argument is expanded into :class:`Source` values, in order:

* a **file**: itself (read through :func:`robustctl.inputfile.open_regular`, so a FIFO or device
  named on the command line is refused at once, never waited on);
* a **directory**: every regular file directly inside it, sorted by name. It is read one level
  deep: a subdirectory, a symbolic link, a FIFO, a device or a socket inside it is *skipped* with
  its reason (give ``dumps/*/`` to read subdirectories). A directory without a regular file in it
  is an input that could not be used, never an empty, healthy result;
* a **tar archive** (a name ending in ``.tar``, ``.tar.gz`` or ``.tgz``): every regular member, in
  archive order, named ``ARCHIVE:MEMBER`` (``dumps.tgz:dumps/rank12.txt``). The archive is read as
  a stream (``tarfile`` mode ``r|*``) and nothing is written to disk, so member paths (``../x``,
  absolute names) cannot escape anywhere. Directory members are passed over; links, devices and
  FIFOs are skipped with their reason. Bounds: :data:`MAX_MEMBERS` headers,
  :data:`MAX_ARCHIVE_BYTES` of uncompressed archive, ``max_bytes`` per member, :data:`MAX_HEADER_BYTES`
  per extended (pax, GNU long name) header; past a bound the rest of the archive is not read and the
  archive is an input saying so. A corrupt or truncated archive is an input with that reason, after
  the members read before the damage; one without a regular member is an input that could not be used.

Each source carries the name to report, the file name its rank may be read from (``rank12.txt``),
and either its content (at most ``max_bytes + 1`` bytes: a longer one is over the caller's bound) or
why it was not read.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import tarfile
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import Self

from robustctl.inputfile import NotReadable, file_kind, open_regular

__all__ = [
    "MAX_ARCHIVE_BYTES",
    "MAX_DIR_ENTRIES",
    "MAX_HEADER_BYTES",
    "MAX_MEMBERS",
    "TAR_SUFFIXES",
    "Source",
    "is_archive",
    "iter_sources",
    "read_bounded",
]

TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz")
"""Names read as tar archives (case-insensitive); the compression is recognised from the content."""
MAX_MEMBERS = 1_000_000
"""Tar headers read from one archive (members of every type)."""
MAX_ARCHIVE_BYTES = 16 * 1024**3
"""Uncompressed bytes of one archive read (headers and data, skipped members included): 16 GiB."""
MAX_HEADER_BYTES = 1024 * 1024
"""Largest extended header (pax, GNU long name) of a member: real ones hold a name and a few times."""
MAX_DIR_ENTRIES = 1_000_000
"""Entries of one directory looked at."""

_READ_CHUNK = 64 * 1024
_DECOMPRESSED_BUFFER = 1024 * 1024
"""Read-ahead of the decompressed archive stream: tarfile then reads headers and members from memory."""
_MAGIC: tuple[tuple[bytes, str], ...] = ((b"\x1f\x8b", "gz"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "xz"))
"""Leading bytes of a gzip, bzip2 and xz stream (RFC 1952; bzip2; the xz file format)."""


@dataclass(frozen=True, slots=True)
class Source:
    """One input of an analysis.

    Attributes:
        name: what reports call it: the argument as given, ``DIR/NAME`` for a directory's file,
            ``ARCHIVE:MEMBER`` for a tar member.
        base: the file's own name (no directory, no archive), where a rank may be read from.
        data: the content, at most the caller's ``max_bytes + 1`` bytes (longer means over the
            bound); ``None`` when not read.
        path: the file to open, when the caller reads it itself (``read=False``); else ``None``.
        error: why it was not read, one line without the name (``"no such file"``, ``"is a FIFO,
            not a regular file"``, ``"corrupt or truncated archive (...)"``); ``None`` when read.
        special: the error is the kind of file (not a regular file), not a failure to read one.
        unopened: the error is why the file could not be opened (``"no such file"``,
            ``"permission denied"``: :class:`~robustctl.inputfile.NotReadable`).
        skipped: deliberately not read (a link, subdirectory or device inside a directory or
            archive): reported, but it does not make the analysis incomplete.
    """

    name: str
    base: str
    data: bytes | None = None
    path: str | None = None
    error: str | None = None
    special: bool = False
    unopened: bool = False
    skipped: bool = False


def is_archive(name: str) -> bool:
    """True when ``name`` ends in one of :data:`TAR_SUFFIXES` (case-insensitive)."""
    return name.lower().endswith(TAR_SUFFIXES)


def read_bounded(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes from the descriptor ``fd`` (stops at end of file).

    Args:
        fd: an open file descriptor, read from its current offset.
        limit: most bytes read.

    Returns:
        The bytes read (fewer than ``limit`` at end of file).

    Raises:
        OSError: the read failed.
    """
    first = os.read(fd, min(limit, _READ_CHUNK))
    if not first or len(first) >= limit:
        return first
    parts = [first]
    got = len(first)
    while got < limit:
        chunk = os.read(fd, min(limit - got, _READ_CHUNK))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _read_file(name: str, base: str, path: str, max_bytes: int) -> Source:
    try:
        fd = open_regular(path)
    except NotReadable as exc:
        return Source(name, base, error=exc.reason, special=exc.special, unopened=not exc.special)
    try:
        return Source(name, base, data=read_bounded(fd, max_bytes + 1))
    except OSError as exc:
        return Source(name, base, error=f"cannot read: {exc.strerror or exc}")
    finally:
        os.close(fd)


def iter_sources(
    args: Sequence[str | os.PathLike[str]], *, max_bytes: int, read: bool = True
) -> Iterator[Source]:
    """Expand ``args`` (files, directories, tar archives) into sources, in order; never raises for
    a bad input (it becomes a source with ``error`` set).

    Args:
        args: paths as given on the command line.
        max_bytes: the caller's size bound: a file or member is read up to ``max_bytes + 1`` bytes;
            a member declared larger is not read (its ``error`` says so).
        read: read files (``data``); ``False``: give their ``path`` and let the caller open them
            (tar members are always read, bounded).

    Yields:
        One source per file or archive member, in the order of ``args`` (a directory's entries by
        name); a bad input is a source with ``error`` set.
    """
    for arg in args:
        name = os.fspath(arg)
        if is_archive(name):
            yield from _iter_tar(name, max_bytes)
            continue
        if read:
            src = _read_file(name, os.path.basename(name), name, max_bytes)
            if not (src.special and src.error == "is a directory"):
                yield src
                continue
        elif not os.path.isdir(name):
            yield Source(name, os.path.basename(name), path=name)
            continue
        yield from _iter_dir(name, max_bytes, read)


def _iter_dir(path: str, max_bytes: int, read: bool) -> Iterator[Source]:
    try:
        with os.scandir(path) as it:
            entries: list[os.DirEntry[str]] = []
            for e in it:
                if len(entries) >= MAX_DIR_ENTRIES:
                    yield Source(path, "", error=f"more than {MAX_DIR_ENTRIES} entries: the rest not read")
                    break
                entries.append(e)
    except OSError as exc:
        yield Source(path, "", error=f"cannot read the directory: {exc.strerror or exc}")
        return
    if not entries:
        yield Source(path, "", error="empty directory: no file to analyse")
        return
    entries.sort(key=lambda e: e.name)
    regular = 0
    for e in entries:
        full = os.path.join(path, e.name)
        try:
            if e.is_symlink():
                yield Source(full, e.name, error="symbolic link: not followed", special=True, skipped=True)
            elif e.is_file(follow_symlinks=False):
                regular += 1
                yield _read_file(full, e.name, full, max_bytes) if read else Source(full, e.name, path=full)
            elif e.is_dir(follow_symlinks=False):
                yield Source(
                    full, e.name, error="subdirectory: not read (one level deep)", special=True, skipped=True
                )
            else:
                kind = file_kind(e.stat(follow_symlinks=False).st_mode)
                yield Source(
                    full,
                    e.name,
                    error=f"is a {kind}, not a regular file: not read",
                    special=True,
                    skipped=True,
                )
        except OSError as exc:
            yield Source(full, e.name, error=f"cannot read: {exc.strerror or exc}")
    if not regular:
        yield Source(path, "", error="no regular file in it")


class _BoundedTarInfo(tarfile.TarInfo):
    """A ``TarInfo`` that refuses extended headers larger than :data:`MAX_HEADER_BYTES`, which
    ``tarfile`` would otherwise read into memory whole, and decodes the commonest header faster.

    :meth:`frombuf` gives what ``tarfile.TarInfo.frombuf`` gives for a POSIX ustar or GNU header of
    a regular file or directory whose number fields are octal text and whose checksum is the
    unsigned one (what GNU tar, bsdtar and Python's ``tarfile`` write); any other header (pax and
    GNU extension headers, links, devices, base-256 numbers, a signed checksum, damage) is decoded
    by ``tarfile`` itself. At 100,000 members the header decoding is then about a tenth of the
    archive's reading time instead of most of it.
    """

    @classmethod
    def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> Self:
        if (
            len(buf) != tarfile.BLOCKSIZE
            or buf[156:157] not in _FAST_TYPES
            or buf[257:263] not in _USTAR_MAGIC
            or buf[148] in _BASE256
        ):
            return super().frombuf(buf, encoding, errors)
        try:
            chksum = _octal(buf, 148, 156)
            if chksum != sum(buf) - sum(buf[148:156]) + 256:  # the field counted as 8 spaces
                raise ValueError("not the unsigned checksum")
            obj = cls()
            obj.name = _text(buf, 0, 100, encoding, errors)
            obj.mode = _octal(buf, 100, 108)
            obj.uid = _octal(buf, 108, 116)
            obj.gid = _octal(buf, 116, 124)
            obj.size = _octal(buf, 124, 136)
            obj.mtime = _octal(buf, 136, 148)
            obj.chksum = chksum
            obj.type = bytes(buf[156:157])
            obj.linkname = _text(buf, 157, 257, encoding, errors)
            obj.uname = _text(buf, 265, 297, encoding, errors)
            obj.gname = _text(buf, 297, 329, encoding, errors)
            obj.devmajor = _octal(buf, 329, 337)
            obj.devminor = _octal(buf, 337, 345)
            prefix = _text(buf, 345, 500, encoding, errors) if buf[345] else ""
        except (ValueError, UnicodeError):
            return super().frombuf(buf, encoding, errors)
        if obj.type == tarfile.AREGTYPE and obj.name.endswith("/"):
            obj.type = tarfile.DIRTYPE
        if obj.type == tarfile.DIRTYPE:
            obj.name = obj.name.rstrip("/")
        if prefix:  # a ustar long name (_FAST_TYPES holds no GNU type)
            obj.name = prefix + "/" + obj.name
        return obj

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _EXTENDED and self.size > MAX_HEADER_BYTES:
            raise tarfile.HeaderError(f"extended header of {self.size} bytes (more than {MAX_HEADER_BYTES})")
        return super()._proc_member(tarfile_)  # type: ignore[misc,no-any-return]


_FAST_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE)
_USTAR_MAGIC = (b"ustar\x0000", b"ustar ")
"""POSIX ustar magic + version, and the GNU magic (``ustar`` and a space; its version follows)."""
_BASE256 = (0o200, 0o377)
"""First byte of a base-256 (GNU) number field: left to ``tarfile``."""


def _octal(buf: bytes | bytearray, start: int, end: int) -> int:
    """A tar number field as ``tarfile.nti`` reads an octal one (NUL-terminated, blank-padded).

    Args:
        buf: the tar header block.
        start: the field's first byte offset in ``buf``.
        end: the offset just past the field.

    Returns:
        The number.

    Raises:
        ValueError: not octal text (non-ASCII bytes included).
    """
    field = buf[start:end]
    nul = field.find(0)
    if nul != -1:
        field = field[:nul]
    return int(field.decode("ascii").strip() or "0", 8)


def _text(buf: bytes | bytearray, start: int, end: int, encoding: str, errors: str) -> str:
    """A tar text field as ``tarfile.nts`` reads it (up to the first NUL)."""
    field = buf[start:end]
    nul = field.find(0)
    return (field if nul == -1 else field[:nul]).decode(encoding, errors)


_EXTENDED = (
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
)
_TAR_ERRORS = (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError, ValueError)
"""What reading a damaged archive can raise: a bad header, a truncated stream, a corrupt gzip, bz2
or xz stream (``OSError``, ``zlib.error``, ``lzma.LZMAError``), a bad number field (``ValueError``)."""


def _member_kind(m: tarfile.TarInfo) -> str:
    if m.issym():
        return "symbolic link"
    if m.islnk():
        return "hard link"
    if m.ischr():
        return "character device"
    if m.isblk():
        return "block device"
    if m.isfifo():
        return "FIFO"
    return "special member"


def _decompressed(fh: IO[bytes], opened: list[IO[bytes] | io.IOBase]) -> IO[bytes]:
    """The tar stream inside ``fh``: ``fh`` itself, or its gzip, bzip2 or xz decompression, read ahead
    in :data:`_DECOMPRESSED_BUFFER` blocks. Every stream it opens is appended to ``opened`` (the
    caller closes them, last first).

    The compression is recognised from the first bytes, as ``tarfile``'s ``r|*`` does; decompressing
    here, in large blocks, spares ``tarfile``'s stream from decompressing per 512-byte header
    (``r|*`` spends about as long on that as on the headers).
    """
    buffered = io.BufferedReader(fh, buffer_size=_READ_CHUNK)  # type: ignore[type-var]
    opened.append(buffered)
    head = buffered.peek(6)[:6]
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            inner: io.BufferedIOBase
            if kind == "gz":
                inner = gzip.GzipFile(fileobj=buffered, mode="rb")
            elif kind == "bz2":
                inner = bz2.BZ2File(buffered, mode="rb")
            else:
                inner = lzma.LZMAFile(buffered, mode="rb")
            opened.append(inner)
            outer = io.BufferedReader(inner, buffer_size=_DECOMPRESSED_BUFFER)
            opened.append(outer)
            return outer
    return buffered


def _iter_tar(path: str, max_bytes: int) -> Iterator[Source]:
    try:
        fd = open_regular(path)
    except NotReadable as exc:
        yield Source(path, "", error=exc.reason, special=exc.special, unopened=not exc.special)
        return
    fh: IO[bytes] = os.fdopen(fd, "rb")
    opened: list[IO[bytes] | io.IOBase] = [fh]
    n_headers = done = regular = 0
    try:
        with tarfile.open(fileobj=_decompressed(fh, opened), mode="r|", tarinfo=_BoundedTarInfo) as tf:
            raw = tf.fileobj  # the tar stream, positioned by next()
            while True:
                m = tf.next()
                if m is None:
                    break
                tf.members.clear()  # type: ignore[attr-defined]  # a stream is read once: keep no header
                n_headers += 1
                if n_headers > MAX_MEMBERS:
                    yield Source(path, "", error=f"more than {MAX_MEMBERS} members: the rest not read")
                    return
                if m.offset_data + m.size > MAX_ARCHIVE_BYTES:
                    yield Source(
                        path,
                        "",
                        error=f"more than {MAX_ARCHIVE_BYTES // 1024**3} GiB uncompressed: "
                        f"the rest not read, from member {m.name!r} on",
                    )
                    return
                if m.isdir():
                    continue
                name = f"{path}:{m.name}"
                base = m.name.rstrip("/").rsplit("/", 1)[-1]
                if not m.isreg():
                    yield Source(name, base, error=f"{_member_kind(m)}: not read", special=True, skipped=True)
                elif m.size > max_bytes:
                    yield Source(name, base, error=f"larger than {max_bytes // (1024 * 1024)} MiB: not read")
                else:
                    regular += 1
                    # In a stream, next() leaves the position at the member's data, and skips
                    # from wherever the read stops to the next header: read the data in place.
                    data = raw.read(m.size)
                    if len(data) < m.size:
                        raise EOFError(f"member {m.name!r} is cut short")
                    yield Source(name, base, data=data)
                done += 1
    except _TAR_ERRORS as exc:
        after = f" after {done} member{'s' if done != 1 else ''}" if done else ""
        yield Source(path, "", error=f"corrupt or truncated archive{after} ({exc})")
        return
    finally:
        for stream in reversed(opened):
            stream.close()
    if not regular:
        yield Source(path, "", error="no regular file in the archive")
