"""Loading one rank's Flight Recorder dump: JSON, or pickle through an unpickler that loads no class."""

from __future__ import annotations

import io
import json
import pickle
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

MAX_DUMP_BYTES = 64 * 1024 * 1024
"""Largest dump read: torch's default ring holds 2,000 entries of about 1 KiB with frames (a few MiB);
64 MiB leaves room for ``TORCH_FR_BUFFER_SIZE=20000`` with stack frames and matches ``analyze``'s
bound on a file read whole (:data:`robustctl.analysis.detect.MAX_BYTES`)."""

MAX_ENTRIES = 200_000
"""Entries kept per dump (the rest are counted): ten times the largest buffer seen in practice
(``TORCH_FR_BUFFER_SIZE=20000``); a dump claiming more is damaged or hostile."""

MAX_SIZES = 1024
"""Tensors kept per entry's ``input_sizes``/``output_sizes``: a coalesced collective over a
model's parameter buckets lists hundreds; the rest are cut (and the cut compared like the rest)."""

_PICKLE_PROTOCOLS = frozenset({2, 3, 4, 5})
"""Pickle protocols a dump may use: torch writes protocol 2 (``\\x80\\x02``); 3-5 are accepted for
dumps re-saved by newer tools."""

_JSON_KEYS = (b'"entries"', b'"pg_config"', b'"pg_status"', b'"collective_seq_id"', b'"profiling_name"')
_RANK_NAME_RE = re.compile(r"rank[_\-.]?(\d{1,7})(?!.*rank[_\-.]?\d)", re.IGNORECASE)
_TRAILING_DIGITS_RE = re.compile(r"(\d{1,7})$")
_SUFFIX_RE = re.compile(r"(\.(gz|json|pkl|pickle|bin|dump|fr|trace))+$", re.IGNORECASE)
P2P_PEER_RE = re.compile(r"(\d+)\s*(->|<-)\s*(\d+)")
P2P_OPS = frozenset({"send", "recv", "isend", "irecv"})


class FrLoadError(ValueError):
    """A file that is not a readable Flight Recorder dump; the message is one line naming the file."""


# --- the dump ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrEntry:
    """One recorded operation of one rank.

    Attributes:
        record_id: its place in the rank's ring buffer (ascending with time).
        pg_name: the process group's name (``process_group[0]``, the ``pg_config`` key).
        pg_desc: the group's description (``"default_pg"``, ``"TENSOR_MODEL_PARALLEL_GROUP"``).
        collective_seq_id: the group's collective sequence number (0 for p2p).
        p2p_seq_id: the group's point-to-point sequence number (0 for collectives).
        is_p2p: a send or receive.
        op: the operation (``"all_reduce"``, ``"send"``), ``profiling_name`` without the backend.
        profiling_name: as recorded (``"nccl:send 0->1"``).
        input_sizes: shapes of the inputs (at most :data:`MAX_SIZES`). output_sizes: of the outputs.
        input_dtypes: dtype names of the inputs.
        state: ``scheduled``, ``started`` or ``completed`` (gloo: always ``scheduled``).
        retired: the work finished and left the backend's queue (``None``: not recorded).
        time_created_ns: when it was enqueued (ns since the epoch), when recorded.
        frame: the innermost recorded Python frame, ``"file:line name"``, when there are frames.
    """

    record_id: int
    pg_name: str
    pg_desc: str
    collective_seq_id: int
    p2p_seq_id: int
    is_p2p: bool
    op: str
    profiling_name: str
    input_sizes: tuple[tuple[int, ...], ...] = ()
    output_sizes: tuple[tuple[int, ...], ...] = ()
    input_dtypes: tuple[str, ...] = ()
    state: str = ""
    retired: bool | None = None
    time_created_ns: int | None = None
    frame: str | None = None

    @property
    def complete(self) -> bool:
        """Finished: state ``completed``, or retired (gloo never reports a state past ``scheduled``)."""
        return self.state == "completed" or self.retired is True

    @property
    def seq(self) -> int:
        """The sequence number that orders it in its group: p2p or collective."""
        return self.p2p_seq_id if self.is_p2p else self.collective_seq_id


@dataclass(frozen=True)
class FrDump:
    """One rank's Flight Recorder dump, validated.

    Attributes:
        name: the file it came from (as reports name it).
        rank: the global rank; ``None`` when neither the dump nor the file name says.
        rank_source: ``"dump"`` (its ``rank`` field) or ``"file name"``; ``None`` without a rank.
        format: ``"pickle"`` or ``"json"``.
        version: the dump format's version (``"2.10"``).
        entries: the recorded operations, ``record_id`` order (at most :data:`MAX_ENTRIES`).
        pg_config: group name → its global ranks, from the dump (empty when the dump left it empty).
        pg_desc: group name → description, from ``pg_config``.
        skipped: entries not kept (malformed, or past :data:`MAX_ENTRIES`).
    """

    name: str
    rank: int | None
    rank_source: str | None
    format: str
    version: str
    entries: tuple[FrEntry, ...]
    pg_config: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    pg_desc: Mapping[str, str] = field(default_factory=dict)
    skipped: int = 0


class _NoClassUnpickler(pickle.Unpickler):
    """An unpickler that builds plain containers and scalars only: every class, function or
    persistent id is refused, so no opcode can call anything (``REDUCE``, ``BUILD``, ``INST``,
    ``OBJ``, ``NEWOBJ`` and the extension registry all need a callable from :meth:`find_class`)."""

    def find_class(self, module: str, name: str) -> NoReturn:
        """Refuse every global.

        Args:
            module: the module the pickle names.
            name: the name in it.

        Raises:
            pickle.UnpicklingError: always.
        """
        raise pickle.UnpicklingError(
            f"refused to load {module[:60]}.{name[:60]}: a dump holds plain data only"
        )

    def persistent_load(self, pid: Any) -> NoReturn:
        """Refuse persistent ids.

        Args:
            pid: the id.

        Raises:
            pickle.UnpicklingError: always.
        """
        raise pickle.UnpicklingError("refused a persistent id: a dump holds plain data only")


def is_pickle(head: bytes) -> bool:
    """Whether ``head`` starts with a pickle protocol header torch's dumps use (``\\x80`` + 2..5).

    Args:
        head: the first bytes of a file.

    Returns:
        True for a pickle header.
    """
    return len(head) >= 2 and head[0] == 0x80 and head[1] in _PICKLE_PROTOCOLS


def claim(base: str, head: bytes) -> bool:
    """Cheap test for ``analyze``'s group kind: a pickle naming Flight Recorder keys, or a JSON object
    whose head holds its keys. Never raises.

    Args:
        base: the file's own name (unused: the content decides).
        head: the file's first bytes (decompressed).

    Returns:
        True when the file looks like a Flight Recorder dump.
    """
    del base
    if is_pickle(head):
        return b"entries" in head or b"pg_config" in head
    start = head[:64].lstrip()
    if not start.startswith(b"{"):
        return False
    window = head[:65536]
    found = sum(1 for k in _JSON_KEYS if k in window)
    return found >= 2 or (b'"entries"' in window and b'"version"' in window)


def _as_int(value: Any) -> int | None:
    """An int from an int (not a bool) or a decimal string (JSON dumps write ``pg_status`` as text)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and 0 < len(value) <= 20 and value.lstrip("-").isdigit():
        return int(value)
    return None


def _sizes(value: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    out: list[tuple[int, ...]] = []
    for shape in value[:MAX_SIZES]:
        if isinstance(shape, (list, tuple)):
            out.append(tuple(v if isinstance(v, int) and not isinstance(v, bool) else -1 for v in shape[:16]))
    return tuple(out)


_LIBRARY_FRAME_RE = re.compile(r"/torch/|/multiprocessing/|^<")
"""Frames of torch itself and of the process launcher: the caller's frame below them is the evidence."""


def _frame(frames: Any) -> str | None:
    """The innermost recorded frame outside torch (else the innermost), ``"file:line name"``."""
    if not isinstance(frames, (list, tuple)):
        return None
    usable = [f for f in frames[:MAX_SIZES] if isinstance(f, Mapping)]
    if not usable:
        return None
    f = next((f for f in usable if not _LIBRARY_FRAME_RE.search(str(f.get("filename", "")))), usable[0])
    return f"{str(f.get('filename', '?'))[-120:]}:{f.get('line', '?')} {str(f.get('name', '?'))[:80]}"


def _entry(raw: Any, index: int) -> FrEntry | None:
    """One entry, or ``None`` when it lacks what the analysis needs (a group and a sequence number)."""
    if not isinstance(raw, Mapping):
        return None
    pg = raw.get("process_group")
    if isinstance(pg, (list, tuple)) and pg and isinstance(pg[0], (str, int)) and not isinstance(pg[0], bool):
        pg_name = str(pg[0])
        pg_desc = str(pg[1]) if len(pg) > 1 and isinstance(pg[1], str) else ""
    elif _as_int(raw.get("pg_id")) is not None:
        pg_name, pg_desc = str(raw.get("pg_id")), ""
    else:
        return None
    coll = _as_int(raw.get("collective_seq_id")) or 0
    p2p = _as_int(raw.get("p2p_seq_id")) or 0
    pname = raw.get("profiling_name")
    pname = pname if isinstance(pname, str) else ""
    op = pname.split(":", 1)[-1].split(" ", 1)[0].strip() or "unknown"
    is_p2p = raw.get("is_p2p") is True or op in P2P_OPS or (coll == 0 and p2p > 0)
    if (p2p if is_p2p else coll) <= 0:
        return None
    retired = raw.get("retired")
    dtypes = raw.get("input_dtypes")
    state = raw.get("state")
    rid = _as_int(raw.get("record_id"))
    return FrEntry(
        record_id=rid if rid is not None else index,
        pg_name=pg_name[:200],
        pg_desc=pg_desc[:200],
        collective_seq_id=coll,
        p2p_seq_id=p2p,
        is_p2p=is_p2p,
        op=op[:80],
        profiling_name=pname[:200],
        input_sizes=_sizes(raw.get("input_sizes")),
        output_sizes=_sizes(raw.get("output_sizes")),
        input_dtypes=tuple(str(d)[:20] for d in dtypes[:MAX_SIZES])
        if isinstance(dtypes, (list, tuple))
        else (),
        state=state[:20] if isinstance(state, str) else "",
        retired=retired if isinstance(retired, bool) else None,
        time_created_ns=_as_int(raw.get("time_created_ns")),
        frame=_frame(raw.get("frames")),
    )


def _pg_config(value: Any) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    """Group name → ranks and → description; groups listing no rank (gloo's placeholder) are left out."""
    ranks: dict[str, tuple[int, ...]] = {}
    descs: dict[str, str] = {}
    if not isinstance(value, Mapping):
        return ranks, descs
    for key, cfg in list(value.items())[:MAX_ENTRIES]:
        if not isinstance(cfg, Mapping):
            continue
        name = str(cfg.get("name") or key)[:200]
        desc = cfg.get("desc")
        if isinstance(desc, str) and desc:
            descs[name] = desc[:200]
        raw = cfg.get("ranks")
        if isinstance(raw, (list, tuple)):
            members = [r for r in raw if isinstance(r, int) and not isinstance(r, bool) and r >= 0]
        elif isinstance(raw, str) and len(raw) <= 10_000_000:
            members = [int(m) for m in re.findall(r"\d{1,7}", raw)]
        else:
            members = []
        if members:
            ranks[name] = tuple(sorted(set(members)))
    return ranks, descs


def rank_from_name(name: str) -> int | None:
    """The rank in a dump's file name as torch names them: ``nccl_trace_rank_3``, ``rank3.json``,
    ``trace_7`` (torchfrtrace's rule: the trailing digits).

    Args:
        name: a path, ``ARCHIVE:MEMBER`` or a base name.

    Returns:
        The rank, or ``None`` when the name holds none.
    """
    base = re.split(r"[/\\:]", name)[-1]
    stem = _SUFFIX_RE.sub("", base)
    m = _RANK_NAME_RE.search(stem)
    if m is None:
        m = _TRAILING_DIGITS_RE.search(stem)
    return int(m.group(1)) if m else None


def _decode(name: str, data: bytes) -> tuple[Any, str]:
    """The parsed top-level value and the format; raises :class:`FrLoadError`."""
    if len(data) > MAX_DUMP_BYTES:
        raise FrLoadError(f"{name}: larger than {MAX_DUMP_BYTES // (1024 * 1024)} MiB")
    if is_pickle(data[:2]):
        try:
            return _NoClassUnpickler(io.BytesIO(data)).load(), "pickle"
        except pickle.UnpicklingError as exc:
            raise FrLoadError(f"{name}: not a Flight Recorder dump: {str(exc)[:200]}") from None
        except Exception as exc:  # any damage in a hostile pickle is a bad file
            raise FrLoadError(f"{name}: damaged pickle ({type(exc).__name__})") from None
    text = data.lstrip()[:1]
    if text != b"{":
        raise FrLoadError(f"{name}: neither a pickle nor a JSON object")
    try:
        return json.loads(data.decode("utf-8")), "json"
    except UnicodeDecodeError:
        raise FrLoadError(f"{name}: JSON dump is not UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise FrLoadError(f"{name}: damaged JSON ({str(exc)[:120]})") from None


def load_dump(name: str, data: bytes, *, base: str | None = None) -> FrDump:
    """Read one rank's dump: JSON, or pickle through an unpickler that loads no class.

    Args:
        name: what errors and reports call the file (path, ``ARCHIVE:MEMBER``).
        data: the file's bytes (decompressed).
        base: the file's own name when ``name`` is not a path (for the rank); default ``name``.

    Returns:
        The dump; entries that lack a group or a sequence number are counted in ``skipped``.

    Raises:
        FrLoadError: the only error: larger than :data:`MAX_DUMP_BYTES`, neither pickle nor JSON,
            damaged, a pickle naming any class or function, or no Flight Recorder keys; the message
            is one line starting with ``name``.
    """
    try:
        return _load(name, data, base)
    except FrLoadError:
        raise
    except Exception as exc:  # the documented contract: one error type for any bad file
        raise FrLoadError(f"{name}: not a Flight Recorder dump ({type(exc).__name__})") from None


def _load(name: str, data: bytes, base: str | None) -> FrDump:
    top, fmt = _decode(name, bytes(data))
    if not isinstance(top, Mapping):
        raise FrLoadError(f"{name}: not a Flight Recorder dump (top level is not a dict)")
    raw_entries = top.get("entries", [])
    if not any(k in top for k in ("entries", "pg_config", "pg_status")) or not isinstance(
        raw_entries, (list, tuple)
    ):
        raise FrLoadError(f"{name}: not a Flight Recorder dump (no entries, pg_config or pg_status)")
    entries: list[FrEntry] = []
    skipped = max(0, len(raw_entries) - MAX_ENTRIES)
    for i, raw in enumerate(raw_entries[:MAX_ENTRIES]):
        e = _entry(raw, i)
        if e is None:
            skipped += 1
        else:
            entries.append(e)
    entries.sort(key=lambda e: e.record_id)
    rank = _as_int(top.get("rank"))
    source: str | None = "dump"
    if rank is None or rank < 0:
        rank = rank_from_name(base or name)
        source = "file name" if rank is not None else None
    ranks, descs = _pg_config(top.get("pg_config"))
    version = top.get("version")
    return FrDump(
        name=name,
        rank=rank,
        rank_source=source,
        format=fmt,
        version=str(version)[:20] if isinstance(version, (str, int, float)) else "",
        entries=tuple(entries),
        pg_config=ranks,
        pg_desc=descs,
        skipped=skipped,
    )
