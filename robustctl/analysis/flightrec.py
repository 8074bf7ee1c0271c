"""PyTorch Flight Recorder dumps: which rank every other rank waits on, and who called the odd collective.

PyTorch's Flight Recorder (``torch/distributed/flight_recorder/``; on with ``TORCH_FR_BUFFER_SIZE``,
formerly ``TORCH_NCCL_TRACE_BUFFER_SIZE``) keeps each rank's last N collectives. A rank's dump is a
pickle (``torch._C._distributed_c10d._dump_fr_trace()``, what ProcessGroupNCCL writes on a timeout to
``TORCH_FR_DUMP_TEMP_FILE<rank>``, by default ``/tmp/nccl_trace_rank_<rank>``) or JSON
(``_dump_fr_trace_json()``, the debug server's ``fr_trace_json``) of a dict: ``version``,
``pg_config`` (process group name → ``{name, desc, ranks}``; gloo leaves it empty: one entry with
``ranks: "[]"``), ``pg_status`` and ``entries``, each with ``record_id``, ``pg_id``,
``process_group`` ``(name, desc)``, ``collective_seq_id``, ``p2p_seq_id``, ``op_id``,
``profiling_name`` (``"nccl:all_reduce"``, ``"gloo:broadcast"``, ``"nccl:send 0->1"``),
``input_sizes``, ``output_sizes``, ``input_dtypes``, ``state`` (``scheduled``/``started``/
``completed``), ``retired``, ``time_created_ns`` and ``frames``. Torch 2.13's gloo backend records
collectives but no point-to-point operation, never moves ``state`` past ``scheduled`` and marks a
finished collective ``retired``; an entry is *complete* when its state is ``completed`` or it is
retired.

The analysis (:func:`analyze_dumps`), all of it a pure function of the dumps:

1. **Loading** (:func:`load_dump`): JSON, or pickle through an unpickler that admits no class or
   function at all (plain containers and scalars only: a pickle from a host never runs code);
   bounded by :data:`MAX_DUMP_BYTES` and :data:`MAX_ENTRIES`. The rank comes from the dump's
   ``rank`` field, else the file name as torch names it (``nccl_trace_rank_3``, ``rank3.json``).
2. **Groups**: each process group's ranks come from ``pg_config``; when it is empty (gloo), from
   the job's layout (the group of the layout kind the group's description names, Megatron's
   ``TENSOR_MODEL_PARALLEL_GROUP`` → tp, else the smallest layout group holding every rank that
   recorded it); without a layout, the ranks that recorded it (the default group: every rank).
3. **Votes**: per (group, collective sequence number) a majority over the member ranks of op, then
   sizes, then dtypes: the ranks off the majority are the odd ones, whatever order the dumps were
   read in; a tie names nobody and says so. Only the first mismatch of a group is a suspect (the
   later ones follow from it).
4. **Waits-for**: rank A waits on rank B when A's oldest incomplete operation, in group G, is one B
   never reached (B's last sequence number in G is behind, or B left no dump). The ends of the
   chains, ranks that wait on nobody, are the roots (a rank stuck in another group's collective
   waits on someone there, so the chain goes on through it). The longest chain to each root is the
   evidence; ranks that only wait on each other are a cycle, reported as one.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from robustctl.analysis import Finding, Verdict, sort_findings
from robustctl.errors import UsageError
from robustctl.inventory.hostrange import compact_ranges
from robustctl.inventory.topology import DIMS, Topology
from robustctl.models import Status

if TYPE_CHECKING:
    from robustctl.config import ParallelLayout

__all__ = [
    "MAX_CHAIN_HOPS",
    "MAX_DUMP_BYTES",
    "MAX_ENTRIES",
    "FrAnalysis",
    "FrChain",
    "FrDump",
    "FrEntry",
    "FrGroup",
    "FrHop",
    "FrLoadError",
    "FrMismatch",
    "FrSuspect",
    "analyze_dumps",
    "analyze_members",
    "claim",
    "evaluate_members",
    "load_dump",
    "to_verdict",
]

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

MAX_CHAIN_HOPS = 12
"""Hops shown per chain (as :data:`robustctl.stacks.waitsfor.MAX_CHAIN_HOPS`); a longer chain keeps
its last hops, the end being the evidence."""

MAX_CHAINS = 20
"""Chains kept in a result, one per root, most waited-on first (as ``stacks``)."""

MAX_LISTED = 64
"""Ranks, values or notes listed in one piece of evidence; more are counted, not listed."""

_PICKLE_PROTOCOLS = frozenset({2, 3, 4, 5})
"""Pickle protocols a dump may use: torch writes protocol 2 (``\\x80\\x02``); 3-5 are accepted for
dumps re-saved by newer tools."""

_JSON_KEYS = (b'"entries"', b'"pg_config"', b'"pg_status"', b'"collective_seq_id"', b'"profiling_name"')
_RANK_NAME_RE = re.compile(r"rank[_\-.]?(\d{1,7})(?!.*rank[_\-.]?\d)", re.IGNORECASE)
_TRAILING_DIGITS_RE = re.compile(r"(\d{1,7})$")
_SUFFIX_RE = re.compile(r"(\.(gz|json|pkl|pickle|bin|dump|fr|trace))+$", re.IGNORECASE)
_P2P_PEER_RE = re.compile(r"(\d+)\s*(->|<-)\s*(\d+)")
_P2P_OPS = frozenset({"send", "recv", "isend", "irecv"})


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
    is_p2p = raw.get("is_p2p") is True or op in _P2P_OPS or (coll == 0 and p2p > 0)
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


# --- the result ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrGroup:
    """One process group seen in the dumps.

    Attributes:
        name: its name (``pg_config`` key, ``process_group[0]``). desc: its description.
        ranks: its global ranks, ascending. membership: where they came from: ``"pg_config"``,
            ``"layout"`` (rebuilt, with ``kind``), ``"world"`` (the default group: every rank) or
            ``"observed"`` (the ranks that recorded it: a member that never did is not known).
        kind: the layout group kind (``"tp"``, ``"pp"``, ``"job"``) when rebuilt from the layout.
    """

    name: str
    desc: str
    ranks: tuple[int, ...]
    membership: str
    kind: str | None = None

    @property
    def label(self) -> str:
        """``"TENSOR_MODEL_PARALLEL_GROUP 2"``: description and name, or the name alone."""
        return f"{self.desc} {self.name}" if self.desc and self.desc != "undefined" else f"group {self.name}"


@dataclass(frozen=True)
class FrMismatch:
    """Member ranks that called a different collective at one sequence number of one group.

    Attributes:
        group: the group's name. desc: its description. seq: the collective sequence number.
        field: what differs: ``"op"``, ``"sizes"`` or ``"dtypes"``.
        majority: the majority's value (``None`` on a tie). odd_ranks: the ranks off the majority
            (on a tie: every rank that recorded the sequence number). values: rank → its value.
        decided: a strict majority exists.
    """

    group: str
    desc: str
    seq: int
    field: str
    majority: str | None
    odd_ranks: tuple[int, ...]
    values: Mapping[int, str]
    decided: bool


@dataclass(frozen=True)
class FrHop:
    """One rank of a chain of waits.

    Attributes:
        rank: the rank. state: ``"waiting"``, ``"not waiting"`` or ``"no dump"``.
        what: ``"all_reduce #2 in TENSOR_MODEL_PARALLEL_GROUP 2"``, or for the end what it did last.
        frame: the caller's frame of that operation (``"train.py:42 train_step"``), when recorded.
    """

    rank: int
    state: str
    what: str
    frame: str | None = None


@dataclass(frozen=True)
class FrChain:
    """A chain of waits ending at a root (or going round a cycle).

    Attributes:
        hops: first the rank farthest from the end, last the root (for a cycle, the first rank
            again). truncated: hops left out at the start (longer than :data:`MAX_CHAIN_HOPS`).
        text: ``"rank 2 [...] → rank 3 [...] → rank 1 (not waiting: ...)"``.
    """

    hops: tuple[FrHop, ...]
    truncated: int
    text: str


@dataclass(frozen=True)
class FrSuspect:
    """A rank at fault, named the way ``stacks --json`` names its suspects.

    Attributes:
        rank: the global rank. host: its machine (``machine-k`` from ranks per host), when known.
        machine: its machine index, when known. process_group: the group the evidence is in.
        group_desc: that group's description. kind: ``"root"`` (others wait on it and it waits on
            nobody), ``"missing"`` (others wait on it and it left no dump), ``"mismatch"`` (the odd
            rank of a vote) or ``"cycle"`` (waits only on ranks that wait on it).
        reason: one line. waiters: ranks waiting on it, directly or through others.
        direct: ranks waiting on it directly. evidence: the values behind the reason.
        likely_culprit: not waiting on a peer itself (a root or the odd rank), as ``stacks``.
    """

    rank: int
    host: str | None
    machine: int | None
    process_group: str | None
    group_desc: str | None
    kind: str
    reason: str
    waiters: int = 0
    direct: int = 0
    evidence: Mapping[str, Any] = field(default_factory=dict)
    likely_culprit: bool = True


@dataclass(frozen=True)
class FrAnalysis:
    """The analysis of one job's dumps (:func:`analyze_dumps`).

    Attributes:
        status: CRITICAL with suspects; WARNING when ranks are blocked but nobody is to blame (every
            member entered the collective, a tie) or dumps are missing; OK when nothing is blocked;
            UNKNOWN without a usable dump.
        summary: one line.
        suspects: roots (most waited-on first), then odd ranks, then cycle members.
        chains: one per root (at most :data:`MAX_CHAINS`), or one round a cycle.
        mismatches: the first mismatch of each group. groups: every group seen.
        ranks: the ranks with a dump. missing_dumps: member ranks with none.
        blocked: rank → its oldest incomplete operation (``"all_reduce #2 in ..."``).
        undecided: why nobody is named while ranks are blocked; ``None`` otherwise.
        notes: other observations (duplicate dumps, dumps without a rank, layout ambiguities).
    """

    status: Status
    summary: str
    suspects: tuple[FrSuspect, ...] = ()
    chains: tuple[FrChain, ...] = ()
    mismatches: tuple[FrMismatch, ...] = ()
    groups: tuple[FrGroup, ...] = ()
    ranks: tuple[int, ...] = ()
    missing_dumps: tuple[int, ...] = ()
    blocked: Mapping[int, str] = field(default_factory=dict)
    undecided: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def suspect_ranks(self) -> tuple[int, ...]:
        """The suspects' distinct ranks, ascending."""
        return tuple(sorted({s.rank for s in self.suspects}))


# --- groups --------------------------------------------------------------------------------------

_DESC_DIMS = (
    ("tensor", "tp"),
    ("tp", "tp"),
    ("pipeline", "pp"),
    ("pp", "pp"),
    ("data", "dp"),
    ("dp", "dp"),
    ("context", "cp"),
    ("cp", "cp"),
    ("expert", "ep"),
    ("ep", "ep"),
    ("moe", "ep"),
)


def desc_kind(desc: str) -> str | None:
    """The layout group kind a group description names: Megatron's ``TENSOR_MODEL_PARALLEL_GROUP``
    → ``"tp"``, ``DATA_PARALLEL_GROUP_WITH_CP`` → ``"cp-dp"``, ``MODEL_PARALLEL_GROUP`` →
    ``"tp-pp"``, ``default_pg`` → ``"job"``; embedding groups and other descriptions name none.

    Args:
        desc: the description (``process_group[1]``).

    Returns:
        A kind :meth:`Topology.group_of` accepts, or ``None``.
    """
    low = desc.lower()
    if low == "default_pg":
        return "job"
    if "embedding" in low:
        return None
    toks = set(re.split(r"[^a-z0-9]+", low))
    dims = {d for tok, d in _DESC_DIMS if tok in toks}
    if not dims and {"model", "parallel"} <= toks:
        dims = {"tp", "pp"}
    return "-".join(d for d in DIMS if d in dims) or None


def _from_layout(
    name: str, desc: str, observed: Sequence[int], topo: Topology
) -> tuple[FrGroup | None, str | None]:
    """The group rebuilt from the layout, or ``None`` with why (a note) when the layout cannot say."""
    valid = sorted(r for r in observed if 0 <= r < topo.world_size)
    if not valid or len(valid) != len(observed):
        return None, None
    finder = topo.finder
    named = desc_kind(desc)
    if named is not None:
        try:
            members = finder.group_of(valid[0], named)
        except UsageError:
            members = ()
        if set(valid) <= set(members):
            return FrGroup(name, desc, members, "layout", named), None
    fits: list[tuple[int, str, tuple[int, ...]]] = []
    for kind in [d for d in topo.order if topo.sizes[d] > 1] + ["job"]:
        members = finder.group_of(valid[0], kind)
        if set(valid) <= set(members):
            fits.append((len(members), kind, members))
    if not fits:
        return None, None
    size = min(f[0] for f in fits)
    best = [f for f in fits if f[0] == size]
    if len({f[2] for f in best}) > 1:
        kinds = "/".join(f[1] for f in best)
        return None, (
            f"group {name} ({desc or 'no description'}): recorded by rank(s) {compact_ranges(valid)} only; "
            f"the layout allows {kinds}: its members are the ranks that recorded it"
        )
    return FrGroup(name, desc, best[0][2], "layout", best[0][1]), None


def _build_groups(
    dumps: Mapping[int, FrDump], topo: Topology | None, world: int
) -> tuple[dict[str, FrGroup], list[str]]:
    """Every group named in the entries, with its members (see the module docstring, step 2)."""
    observed: dict[str, set[int]] = {}
    descs: dict[str, str] = {}
    config: dict[str, tuple[int, ...]] = {}
    for rank in sorted(dumps):
        d = dumps[rank]
        for e in d.entries:
            observed.setdefault(e.pg_name, set()).add(rank)
            if e.pg_desc and e.pg_name not in descs:
                descs[e.pg_name] = e.pg_desc
        for gname, members in d.pg_config.items():
            config.setdefault(gname, members)
        for gname, gdesc in d.pg_desc.items():
            descs.setdefault(gname, gdesc)
    groups: dict[str, FrGroup] = {}
    notes: list[str] = []
    for gname in sorted(observed, key=_name_key):
        desc = descs.get(gname, "")
        seen = sorted(observed[gname])
        if gname in config:
            groups[gname] = FrGroup(gname, desc, config[gname], "pg_config")
            continue
        if topo is not None:
            rebuilt, note = _from_layout(gname, desc, seen, topo)
            if note:
                notes.append(note)
            if rebuilt is not None:
                groups[gname] = rebuilt
                continue
        if desc == "default_pg" or (gname == "0" and not desc):
            groups[gname] = FrGroup(gname, desc, tuple(range(world)), "world", "job")
        else:
            groups[gname] = FrGroup(gname, desc, tuple(seen), "observed")
    return groups, notes


def _name_key(name: str) -> tuple[int, int, str]:
    """Groups in creation order: numeric names ascending, then the others by name."""
    return (0, int(name), "") if name.isdigit() and len(name) < 12 else (1, 0, name)


# --- per rank ------------------------------------------------------------------------------------


@dataclass
class _View:
    """One rank's entries indexed by group: the last (and first) sequence number it recorded."""

    dump: FrDump
    last: dict[tuple[str, bool], int] = field(default_factory=dict)
    first: dict[tuple[str, bool], int] = field(default_factory=dict)
    at: dict[str, dict[int, FrEntry]] = field(default_factory=dict)  # group -> seq -> collective
    blocked: FrEntry | None = None
    latest: FrEntry | None = None

    @classmethod
    def of(cls, dump: FrDump) -> _View:
        v = cls(dump)
        for e in dump.entries:
            key = (e.pg_name, e.is_p2p)
            v.last[key] = max(v.last.get(key, 0), e.seq)
            v.first[key] = min(v.first.get(key, e.seq), e.seq)
            if not e.is_p2p:
                v.at.setdefault(e.pg_name, {}).setdefault(e.seq, e)
            if v.blocked is None and not e.complete:
                v.blocked = e
            v.latest = e
        return v


def _what(e: FrEntry, groups: Mapping[str, FrGroup]) -> str:
    g = groups.get(e.pg_name)
    label = g.label if g is not None else f"group {e.pg_name}"
    kind = " p2p" if e.is_p2p else ""
    return f"{e.op}{kind} #{e.seq} in {label}"


def _peers(e: FrEntry, group: FrGroup | None, rank: int) -> tuple[int, ...] | None:
    """The ranks ``rank``'s blocked operation needs: the other members for a collective, the peer
    for a p2p operation (``None`` when it cannot be told)."""
    if group is None:
        return None
    others = tuple(r for r in group.ranks if r != rank)
    if not e.is_p2p:
        return others
    if len(others) == 1:
        return others
    m = _P2P_PEER_RE.search(e.profiling_name)
    if m is not None and group.membership != "observed":
        me, peer = int(m.group(1)), int(m.group(3))
        if me < len(group.ranks) and peer < len(group.ranks) and group.ranks[me] == rank:
            return (group.ranks[peer],)
    return None


# --- votes ---------------------------------------------------------------------------------------


def _values(e: FrEntry, what: str) -> str:
    if what == "op":
        return e.op
    if what == "sizes":
        ins, outs = list(map(list, e.input_sizes)), list(map(list, e.output_sizes))
        return f"{e.op} {ins}" if ins == outs or not outs else f"{e.op} in {ins} out {outs}"
    return ",".join(e.input_dtypes)


def _vote(group: FrGroup, seq: int, at: Mapping[int, FrEntry]) -> FrMismatch | None:
    """The mismatch at one sequence number (op first, then sizes, then dtypes), ``None`` if none."""
    for what in ("op", "sizes", "dtypes"):
        values = {r: _values(at[r], what) for r in sorted(at)}
        counts: dict[str, int] = {}
        for v in values.values():
            counts[v] = counts.get(v, 0) + 1
        if len(counts) < 2:
            continue
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        decided = ranked[0][1] > ranked[1][1]
        majority = ranked[0][0] if decided else None
        odd = tuple(r for r, v in values.items() if v != majority)
        return FrMismatch(group.name, group.desc, seq, what, majority, odd, values, decided)
    return None


def _mismatches(views: Mapping[int, _View], groups: Mapping[str, FrGroup]) -> list[FrMismatch]:
    """The first mismatch of each group, over the sequence numbers two or more members recorded."""
    found: list[FrMismatch] = []
    for g in groups.values():
        seqs: dict[int, dict[int, FrEntry]] = {}
        for r in g.ranks:
            v = views.get(r)
            if v is None:
                continue
            for seq, e in v.at.get(g.name, {}).items():
                seqs.setdefault(seq, {})[r] = e
        for seq in sorted(seqs):
            if len(seqs[seq]) < 2:
                continue
            m = _vote(g, seq, seqs[seq])
            if m is not None:
                found.append(m)
                break
    return found


# --- waits-for -----------------------------------------------------------------------------------


@dataclass
class _Graph:
    edges: dict[int, list[int]] = field(default_factory=dict)
    why: dict[tuple[int, int], str] = field(default_factory=dict)
    complete_calls: dict[int, str] = field(default_factory=dict)  # rank -> blocked op every peer entered
    unplaced: list[int] = field(default_factory=list)  # blocked ranks whose peers are unknown


def _waits(views: Mapping[int, _View], groups: Mapping[str, FrGroup]) -> _Graph:
    """Rank A → B when A's oldest incomplete operation is one B never reached (or B left no dump)."""
    graph = _Graph()
    for rank in sorted(views):
        e = views[rank].blocked
        if e is None:
            continue
        group = groups.get(e.pg_name)
        peers = _peers(e, group, rank)
        if peers is None:
            graph.unplaced.append(rank)
            continue
        out: list[int] = []
        for b in peers:
            bv = views.get(b)
            if bv is None:
                out.append(b)
                graph.why[(rank, b)] = f"rank {b} left no dump"
                continue
            last = bv.last.get((e.pg_name, e.is_p2p), 0)
            if last < e.seq:
                out.append(b)
                kind = "p2p operation" if e.is_p2p else "collective"
                graph.why[(rank, b)] = (
                    f"rank {b}'s last {kind} there is #{last}" if last else f"rank {b} recorded none there"
                )
        if out:
            graph.edges[rank] = out
        else:
            graph.complete_calls[rank] = _what(e, groups)
    return graph


def _reverse_bfs(end: int, redges: Mapping[int, Sequence[int]]) -> dict[int, int]:
    """Distance (in waits) to ``end`` of every rank that waits on it, directly or through others."""
    dist = {end: 0}
    queue = deque([end])
    while queue:
        b = queue.popleft()
        for a in redges.get(b, ()):
            if a not in dist:
                dist[a] = dist[b] + 1
                queue.append(a)
    return dist


def _cycles(graph: _Graph, reached: set[int]) -> list[list[int]]:
    """Sets of waiting ranks that reach no end: walk the first edge until a rank repeats (each
    such rank waits on another of them, so every walk ends in a cycle); each cycle once."""
    cycles: list[list[int]] = []
    done: set[int] = set()
    for start in sorted(graph.edges):
        if start in reached or start in done:
            continue
        path: list[int] = []
        pos: dict[int, int] = {}
        node: int | None = start
        while node is not None and node not in pos and node not in done:
            pos[node] = len(path)
            path.append(node)
            nxt = [b for b in graph.edges.get(node, ()) if b not in reached]
            node = min(nxt) if nxt else None
        if node is not None and node in pos:
            cycles.append(path[pos[node] :])
        done.update(path)
    return cycles


def _chain(path: Sequence[int], views: Mapping[int, _View], groups: Mapping[str, FrGroup]) -> FrChain:
    """The hops of ``path`` (the last hop the end, or for a cycle the first rank again)."""
    truncated = max(0, len(path) - MAX_CHAIN_HOPS)
    hops: list[FrHop] = []
    for r in path[truncated:]:
        v = views.get(r)
        if v is None:
            hops.append(FrHop(r, "no dump", "no dump"))
        elif v.blocked is not None:
            hops.append(FrHop(r, "waiting", _what(v.blocked, groups), v.blocked.frame))
        elif v.latest is not None:
            hops.append(
                FrHop(r, "not waiting", f"last recorded: {_what(v.latest, groups)}, complete", v.latest.frame)
            )
        else:
            hops.append(FrHop(r, "not waiting", "no operation recorded"))
    parts = [
        f"rank {h.rank} [{h.what}]" if h.state == "waiting" else f"rank {h.rank} ({h.what})" for h in hops
    ]
    text = ("… → " if truncated else "") + " → ".join(parts)
    return FrChain(tuple(hops), truncated, text)


def _short(chain: FrChain) -> str:
    """``"rank 2 → rank 3 → rank 1"``."""
    return ("… → " if chain.truncated else "") + " → ".join(f"rank {h.rank}" for h in chain.hops)


def _path_to(end: int, dist: Mapping[int, int], edges: Mapping[int, Sequence[int]]) -> list[int]:
    """The longest chain of waits to ``end``: from the farthest waiter (lowest rank among them)."""
    far = max(dist.values())
    node = min(r for r, d in dist.items() if d == far)
    path = [node]
    while node != end:
        node = min(b for b in edges.get(node, ()) if dist.get(b) == dist[node] - 1)
        path.append(node)
    return path


# --- the analysis --------------------------------------------------------------------------------


class _Placer:
    """Host and machine of a rank, from the topology when ranks per host is known."""

    def __init__(self, topo: Topology | None) -> None:
        self.topo = topo

    def where(self, rank: int) -> tuple[str | None, int | None]:
        if self.topo is None or self.topo.ranks_per_host is None or not 0 <= rank < self.topo.world_size:
            return None, None
        return self.topo.host_of(rank), self.topo.machine_of(rank)


def _pick_dumps(dumps: Sequence[FrDump]) -> tuple[dict[int, FrDump], list[str]]:
    """One dump per rank, chosen the same whatever the input order: the most entries, then the
    pickle (torch's own dump), then the name."""
    by_rank: dict[int, list[FrDump]] = {}
    notes: list[str] = []
    for d in dumps:
        if d.rank is None:
            notes.append(f"{d.name}: no rank in the dump or its file name; not used")
        else:
            by_rank.setdefault(d.rank, []).append(d)
    chosen: dict[int, FrDump] = {}
    doubled: list[int] = []
    for rank in sorted(by_rank):
        ds = sorted(by_rank[rank], key=lambda d: (-len(d.entries), d.format != "pickle", d.name))
        chosen[rank] = ds[0]
        if len(ds) > 1:
            doubled.append(rank)
    notes.sort()
    if doubled:
        notes.append(
            f"rank(s) {compact_ranges(doubled)}: more than one dump (e.g. pickle and JSON side by side); "
            "used the one with the most entries, the pickle on a tie"
        )
    return chosen, notes


def _root_suspects(
    graph: _Graph,
    views: Mapping[int, _View],
    groups: Mapping[str, FrGroup],
    placer: _Placer,
) -> tuple[list[FrSuspect], list[FrChain], set[int]]:
    """The ends of the waits (roots and missing ranks) with their chains; and the ranks reaching one."""
    redges: dict[int, list[int]] = {}
    for a, bs in graph.edges.items():
        for b in bs:
            redges.setdefault(b, []).append(a)
    ends = sorted({b for bs in graph.edges.values() for b in bs if b not in graph.edges})
    found: list[tuple[int, FrSuspect, FrChain]] = []
    reached: set[int] = set()
    for end in ends:
        dist = _reverse_bfs(end, redges)
        reached.update(dist)
        direct = sorted(redges.get(end, ()))
        first = views[direct[0]].blocked
        assert first is not None  # a direct waiter is blocked
        g = groups.get(first.pg_name)
        chain = _chain(_path_to(end, dist, graph.edges), views, groups)
        missing = end not in views
        waited = [
            {"rank": a, "waits_in": _what(views[a].blocked, groups), "because": graph.why[(a, end)]}  # type: ignore[arg-type]
            for a in direct[:MAX_LISTED]
        ]
        end_hop = chain.hops[-1]
        state = "left no dump" if missing else "waits on nobody"
        reason = (
            f"root of the waits: {len(dist) - 1} rank(s) wait on it and it {state}; rank {direct[0]} waits "
            f"in {_what(first, groups)}, {graph.why[(direct[0], end)]}; chain {_short(chain)}"
        )
        host, machine = placer.where(end)
        suspect = FrSuspect(
            rank=end,
            host=host,
            machine=machine,
            process_group=first.pg_name,
            group_desc=g.desc if g is not None else first.pg_desc,
            kind="missing" if missing else "root",
            reason=reason,
            waiters=len(dist) - 1,
            direct=len(direct),
            evidence={"waited_on_by": waited, "chain": chain.text, "state": end_hop.what},
        )
        found.append((len(dist) - 1, suspect, chain))
    found.sort(key=lambda t: (-t[0], t[1].rank))
    return [s for _, s, _ in found], [c for _, _, c in found][:MAX_CHAINS], reached


_FIELD_WORD = {"op": "op type", "sizes": "size", "dtypes": "dtype"}


def _mismatch_suspects(mismatches: Sequence[FrMismatch], placer: _Placer) -> list[FrSuspect]:
    out: list[FrSuspect] = []
    for m in mismatches:
        if not m.decided:
            continue
        label = f"{m.desc} {m.group}" if m.desc else f"group {m.group}"
        for r in m.odd_ranks[:MAX_LISTED]:
            host, machine = placer.where(r)
            out.append(
                FrSuspect(
                    rank=r,
                    host=host,
                    machine=machine,
                    process_group=m.group,
                    group_desc=m.desc,
                    kind="mismatch",
                    reason=(
                        f"{_FIELD_WORD[m.field]} mismatch at collective #{m.seq} in {label}: it called "
                        f"{m.values[r]} where {len(m.values) - len(m.odd_ranks)} rank(s) called {m.majority}"
                    ),
                    evidence={
                        "seq": m.seq,
                        "field": m.field,
                        "majority": m.majority,
                        "value": m.values[r],
                        "values": {str(k): v for k, v in list(m.values.items())[:MAX_LISTED]},
                    },
                )
            )
    return out


def _cycle_results(
    cycles: Sequence[Sequence[int]],
    graph: _Graph,
    views: Mapping[int, _View],
    groups: Mapping[str, FrGroup],
    placer: _Placer,
) -> tuple[list[FrSuspect], list[FrChain]]:
    suspects: list[FrSuspect] = []
    chains: list[FrChain] = []
    for cyc in cycles:
        chain = _chain([*cyc, cyc[0]], views, groups)
        chains.append(chain)
        for r in cyc:
            e = views[r].blocked
            host, machine = placer.where(r)
            suspects.append(
                FrSuspect(
                    rank=r,
                    host=host,
                    machine=machine,
                    process_group=e.pg_name if e is not None else None,
                    group_desc=e.pg_desc if e is not None else None,
                    kind="cycle",
                    reason=f"deadlock: ranks {compact_ranges(cyc)} wait only on each other ({chain.text})",
                    evidence={"cycle": list(cyc), "chain": chain.text},
                    likely_culprit=False,
                )
            )
    return suspects, chains


def analyze_dumps(
    dumps: Sequence[FrDump],
    layout: ParallelLayout | None = None,
    ranks_per_host: int | None = None,
) -> FrAnalysis:
    """Analyse one job's Flight Recorder dumps (see the module docstring): votes, missing ranks,
    the waits-for root across groups.

    The result does not depend on the order of ``dumps``. Pure; linear in the entries plus the
    members of the groups the blocked ranks wait in.

    Args:
        dumps: one or more dumps per rank (duplicates: one is used, see ``notes``).
        layout: the job's parallel layout, to rebuild empty ``pg_config`` (gloo) and to know the
            world size; ``None``: unknown.
        ranks_per_host: ranks per machine, to name each suspect's machine; ``None``: unknown.

    Returns:
        The analysis; status UNKNOWN when no dump carries a rank.

    Raises:
        UsageError: ``ranks_per_host`` below 1.
    """
    chosen, notes = _pick_dumps(dumps)
    if not chosen:
        return FrAnalysis(Status.UNKNOWN, "no Flight Recorder dump with a rank", notes=tuple(notes))
    topo = Topology(layout, ranks_per_host) if layout is not None else None
    world = topo.world_size if topo is not None else max(chosen) + 1
    outside = [r for r in chosen if r >= world]
    if outside:
        notes.append(f"rank(s) {compact_ranges(outside)} outside the layout's {world} ranks")
    groups, group_notes = _build_groups(chosen, topo, max(world, max(chosen) + 1))
    notes.extend(group_notes)
    views = {r: _View.of(d) for r, d in chosen.items()}
    expected = set(range(world)) if topo is not None else {r for g in groups.values() for r in g.ranks}
    missing = tuple(sorted(expected - set(chosen)))
    placer = _Placer(topo)
    graph = _waits(views, groups)
    roots, chains, reached = _root_suspects(graph, views, groups, placer)
    cycles = _cycles(graph, reached)
    cyc_suspects, cyc_chains = _cycle_results(cycles, graph, views, groups, placer)
    mismatches = _mismatches(views, groups)
    suspects = [*roots, *_mismatch_suspects(mismatches, placer), *cyc_suspects]
    blocked = {r: _what(v.blocked, groups) for r, v in views.items() if v.blocked is not None}
    undecided = _undecided(graph, blocked, suspects, mismatches)
    if graph.unplaced:
        notes.append(
            f"rank(s) {compact_ranges(graph.unplaced)}: blocked in a p2p operation whose peer is unknown"
        )
    status, summary = _judge(
        suspects, chains + cyc_chains, mismatches, blocked, missing, undecided, len(chosen)
    )
    return FrAnalysis(
        status=status,
        summary=summary,
        suspects=tuple(suspects),
        chains=tuple(chains + cyc_chains),
        mismatches=tuple(mismatches),
        groups=tuple(groups.values()),
        ranks=tuple(sorted(chosen)),
        missing_dumps=missing,
        blocked=blocked,
        undecided=undecided,
        notes=tuple(notes[:MAX_LISTED]),
    )


def _undecided(
    graph: _Graph, blocked: Mapping[int, str], suspects: Sequence[FrSuspect], mismatches: Sequence[FrMismatch]
) -> str | None:
    if not blocked or suspects:
        return None
    tie = next((m for m in mismatches if not m.decided), None)
    if tie is not None:
        return (
            f"{tie.field} mismatch at collective #{tie.seq} in group {tie.group} without a majority "
            f"(ranks {compact_ranges(tie.odd_ranks)}): the dumps cannot say which side is wrong"
        )
    if graph.complete_calls:
        r = min(graph.complete_calls)
        return (
            f"every member entered the blocked collective (rank {r}: {graph.complete_calls[r]}): stuck inside "
            "the collective (network or communication library), not waiting on a rank"
        )
    return "the blocked ranks' peers are unknown: give --layout"


def _judge(
    suspects: Sequence[FrSuspect],
    chains: Sequence[FrChain],
    mismatches: Sequence[FrMismatch],
    blocked: Mapping[int, str],
    missing: Sequence[int],
    undecided: str | None,
    n_ranks: int,
) -> tuple[Status, str]:
    head = f"Flight Recorder, {n_ranks} rank{'s' if n_ranks != 1 else ''}"
    if suspects:
        top = suspects[0]
        if top.kind in ("root", "missing"):
            what = "left no dump" if top.kind == "missing" else "waits on nobody"
            text = f"rank {top.rank} is the root: {top.waiters} rank(s) wait on it and it {what}"
            if chains and len(chains[0].hops) > 2:
                text += f" (chain {_short(chains[0])})"
        elif top.kind == "mismatch":
            text = f"rank {top.rank}: {top.reason}"
        else:
            text = top.reason
        return Status.CRITICAL, f"{head}: {text}"
    if undecided is not None:
        return Status.WARNING, f"{head}: {len(blocked)} rank(s) blocked; {undecided}"
    if missing:
        return Status.WARNING, f"{head}: nothing blocked, but rank(s) {compact_ranges(missing)} left no dump"
    if mismatches:
        return Status.WARNING, f"{head}: mismatch without a majority in group {mismatches[0].group}"
    return Status.OK, f"{head}: no operation blocked, no mismatch"


# --- analyze's group kind --------------------------------------------------------------------------


class NamedBytes(Protocol):
    """A file handed to :func:`evaluate_members` (``analyze``'s ``GroupMember``)."""

    @property
    def name(self) -> str:
        """What reports call the file."""

    @property
    def base(self) -> str:
        """The file's own name."""

    @property
    def data(self) -> bytes:
        """Its bytes (decompressed)."""


def to_verdict(analysis: FrAnalysis, unloaded: Iterable[tuple[str, str]] = ()) -> Verdict:
    """The ``analyze`` verdict of an analysis: one finding per suspect (CRITICAL), per undecided
    mismatch or blocked state (WARNING), per missing dump (WARNING) and per file not loaded (UNKNOWN).

    Args:
        analysis: from :func:`analyze_dumps`.
        unloaded: ``(file, reason)`` of the files :func:`load_dump` refused.

    Returns:
        The verdict; its details hold the analysis as JSON-ready data.
    """
    findings: list[Finding] = []
    for s in analysis.suspects[:MAX_LISTED]:
        where = f" on {s.host}" if s.host else ""
        findings.append(Finding(Status.CRITICAL, f"rank {s.rank}{where}: {s.reason}", asdict(s), device=None))
    rest = analysis.suspects[MAX_LISTED:]
    if rest:
        ranks = compact_ranges(s.rank for s in rest)
        findings.append(
            Finding(Status.CRITICAL, f"{len(rest)} more suspect(s): rank(s) {ranks}", {"ranks": ranks})
        )
    for m in analysis.mismatches:
        if not m.decided:
            findings.append(
                Finding(
                    Status.WARNING,
                    f"{m.field} mismatch without a majority in group {m.group} #{m.seq}",
                    asdict(m),
                )
            )
    if analysis.undecided:
        findings.append(Finding(Status.WARNING, analysis.undecided, {"blocked": dict(analysis.blocked)}))
    if analysis.missing_dumps:
        ranks = compact_ranges(analysis.missing_dumps)
        findings.append(Finding(Status.WARNING, f"rank(s) {ranks} left no dump", {"ranks": ranks}))
    bad = list(unloaded)
    for name, reason in bad[:MAX_LISTED]:
        findings.append(Finding(Status.UNKNOWN, reason, {"file": name}))
    status = analysis.status
    if bad and status in (Status.OK, Status.WARNING):
        status = Status.worst([status, Status.UNKNOWN])
    summary = analysis.summary
    if bad:
        summary += f"; {len(bad)} file(s) not read"
    details = {
        "ranks": compact_ranges(analysis.ranks),
        "missing_dumps": compact_ranges(analysis.missing_dumps),
        "suspects": [asdict(s) for s in analysis.suspects],
        "chains": [asdict(c) for c in analysis.chains],
        "mismatches": [asdict(m) for m in analysis.mismatches],
        "groups": [{**asdict(g), "ranks": compact_ranges(g.ranks)} for g in analysis.groups],
        "blocked": {str(k): v for k, v in analysis.blocked.items()},
        "undecided": analysis.undecided,
        "notes": list(analysis.notes),
        "not_read": [{"file": n, "reason": r} for n, r in bad[:MAX_LISTED]],
    }
    return Verdict(status, summary, sort_findings(findings), _jsonable(details))


def _jsonable(value: Any) -> Any:
    """Tuples as lists and mapping keys as strings, for the ``--json`` document."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def evaluate_members(
    members: Sequence[NamedBytes], layout: ParallelLayout | None = None, ranks_per_host: int | None = None
) -> Verdict:
    """``analyze``'s group kind: load every claimed file and analyse them together. Never raises for a
    bad file (it is a finding).

    Args:
        members: the claimed files.
        layout: the job's layout (``--layout``), when given.
        ranks_per_host: ranks per machine (``-G``), when given.

    Returns:
        The verdict (:func:`to_verdict`).
    """
    dumps: list[FrDump] = []
    unloaded: list[tuple[str, str]] = []
    for m in members:
        try:
            dumps.append(load_dump(m.name, m.data, base=m.base))
        except FrLoadError as exc:
            unloaded.append((m.name, str(exc)))
    return to_verdict(analyze_dumps(dumps, layout, ranks_per_host), unloaded)


class GroupOptions(Protocol):
    """What :func:`analyze_members` reads from ``analyze``'s options."""

    @property
    def layout(self) -> ParallelLayout | None:
        """The job's layout (``--layout``), when given."""

    @property
    def ranks_per_host(self) -> int | None:
        """Ranks per machine (``-G``), when given."""


def analyze_members(members: Sequence[NamedBytes], options: GroupOptions) -> Verdict:
    """``analyze``'s group kind entry point: :func:`evaluate_members` with the layout and ranks per host
    of ``options``.

    Args:
        members: the claimed files.
        options: ``analyze``'s options (``AnalysisOptions``).

    Returns:
        The verdict.
    """
    return evaluate_members(members, options.layout, options.ranks_per_host)
