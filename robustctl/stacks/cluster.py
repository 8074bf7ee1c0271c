"""Stack equivalence classes in the manner of LLNL STAT, and where outliers diverge.

STAT (Arnold et al., "Stack Trace Analysis for Large Scale Debugging", IPDPS 2007) merges the stack
traces of every task into a prefix tree (outermost frame at the root) and labels each tree path with
the set of tasks that took it: tasks on the same path form an *equivalence class*, and a hang shows up
as a small class next to a large one. ByteRobust (arXiv 2509.16293, §5) applies the same idea to LLM
training: group the stacks of every training process by string matching, treat the dominant groups as
healthy and the rest as outliers, then isolate the smallest parallel group containing the outliers
(:mod:`robustctl.stacks.blame`).

What this module does, per process role (main rank processes, data-loader workers, checkpoint
writers, other children are clustered separately):

1. **Normalize** each frame to ``function (file)``: the function without its Python 3.11+ qualifier
   (``Queue.get`` → ``get``), the file reduced to its last ``path_components`` (3) components after
   any ``site-packages/`` or ``lib/pythonX.Y/`` prefix, so different venvs, checkouts and py-spy's
   short/long file names agree; line numbers only when ``with_lines`` is set (off by default: two ranks
   one line apart in the same loop are in the same state).
2. **Represent a process by its main thread** (``MainThread``, else the first thread). With
   ``threads="all"`` the signature also includes every other thread's path (sorted), which separates
   processes whose background threads differ (e.g. a stuck NCCL watchdog or checkpoint thread); the
   default is the main thread alone, because background threads (tqdm monitors, queue feeders, idle pool
   workers) differ between healthy ranks for no reason.
3. **Equivalence classes** = identical normalized paths, computed by interning: each distinct raw frame
   is normalized once and mapped to a small int, a path is a tuple of ints, a dict maps path → class.
   Time is linear in the number of frames (100K ranks × 40 frames ≈ 0.5 s on one core, see
   ``bench/stacks.py``); no per-process tree is built. The STAT prefix tree is built from one
   representative path per class only, for rendering (:func:`prefix_tree`).
4. **Partial stacks** (a dump cut before its outermost frames: the outermost frame is not ``<module>``,
   a thread/multiprocessing bootstrap or ``runpy``) are merged into the largest complete class whose
   innermost frames they match (``merge_partial``); otherwise they stay a class of their own.
5. **Dominance**: the largest class is *dominant* when it is strictly larger than the second and
   holds at least ``min_dominant_fraction`` (30 %) of the role's readable processes. Otherwise the role
   is *ambiguous* (e.g. every process different, or two classes of equal size): nothing is called
   healthy and blame names nobody. Classes holding at least ``secondary_fraction`` (10 %) are marked
   ``large``: blame may treat a large class of ranks waiting in a collective as healthy too when that is
   what localizes the outliers (ByteRobust's "dominant groups", plural; see :mod:`.blame`).
6. **Unreadable processes** (py-spy failed: EPERM, D state, process gone) form one evidence class per
   role with the reasons counted; they are never dropped and always count as outliers.
7. **Divergence**: for each class other than the dominant one, the deepest frame it shares with the
   dominant path (outermost first) and the first frame where it differs.
"""

from __future__ import annotations

import enum
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Literal

from robustctl.inventory.hostrange import compact_ranges  # re-exported: stacks code imported it from here
from robustctl.stacks.model import Frame, ProcessDump, ProcessRole, ThreadStack

__all__ = [
    "Category",
    "ClusterOptions",
    "ClusterResult",
    "Divergence",
    "RoleClusters",
    "SampleComparison",
    "StackClass",
    "TreeNode",
    "categorize",
    "cluster",
    "compact_ranges",
    "compare_samples",
    "frame_category",
    "normalize_function",
    "normalize_path",
    "prefix_tree",
]

ROLE_ORDER = (ProcessRole.MAIN, ProcessRole.DATALOADER, ProcessRole.CHECKPOINT, ProcessRole.OTHER)


@dataclass(frozen=True)
class ClusterOptions:
    """How stacks are normalized and classes judged.

    Attributes:
        with_lines: include line numbers in the frame identity (default off).
        path_components: file path components kept (from the end) after stripping install prefixes.
        qualified_names: keep Python 3.11+ qualified names (``Queue.get``) instead of the last part.
        threads: ``"main"``: a process's class is its main thread's path; ``"all"``: also the sorted
            paths of its other threads.
        merge_partial: merge cut stacks into the complete class they match (``threads="main"`` only).
        min_dominant_fraction: share of a role's readable processes the largest class needs to be
            dominant (it must also be strictly larger than the second); 0.3.
        secondary_fraction: share from which a class counts as ``large``; 0.1.
    """

    with_lines: bool = False
    path_components: int = 3
    qualified_names: bool = False
    threads: Literal["main", "all"] = "main"
    merge_partial: bool = True
    min_dominant_fraction: float = 0.3
    secondary_fraction: float = 0.1

    def __post_init__(self) -> None:
        if self.path_components < 1:
            raise ValueError("path_components must be at least 1")
        if not 0 < self.min_dominant_fraction <= 1 or not 0 < self.secondary_fraction <= 1:
            raise ValueError("fractions must be in (0, 1]")


class Category(str, enum.Enum):
    """What the processes of a class are doing, read from their frames (:func:`categorize`)."""

    COMPUTE = "compute"
    """Running their own code: model forward/backward, optimizer, a user loop (no wait recognised)."""
    COLLECTIVE = "collective"
    """Waiting in a collective: all_reduce, all_gather, reduce_scatter, broadcast, barrier, all_to_all."""
    P2P = "p2p"
    """Waiting in point-to-point send/recv (pipeline-parallel stage exchange)."""
    DATALOADER = "dataloader"
    """Waiting for or producing input batches (DataLoader, its workers, a data iterator)."""
    CHECKPOINT = "checkpoint"
    """Saving or loading a checkpoint."""
    IO = "io"
    """File, object-store or network I/O outside checkpointing and data loading."""
    UNKNOWN = "unknown"
    """Blocked in a wait that is not recognised (a lock, a queue, select), or no Python frame."""
    UNREADABLE = "unreadable"
    """py-spy could not read the process."""


@dataclass(frozen=True)
class Divergence:
    """Where a class leaves the dominant path (paths outermost first).

    Attributes:
        common_depth: number of outermost frames shared with the dominant path.
        last_common: the deepest shared frame (``None`` when even the outermost frame differs).
        first_different: this class's first frame after the shared part (``None`` when this path
            ends there: it is a prefix of the dominant path).
        dominant_next: the dominant path's frame at that depth (``None`` when the dominant path ends).
    """

    common_depth: int
    last_common: str | None
    first_different: str | None
    dominant_next: str | None


@dataclass(frozen=True)
class StackClass:
    """One equivalence class of one role.

    Attributes:
        id: index within the role's classes (0 = largest; the unreadable class comes last).
        role: the processes' role.
        frames: the normalized path, **outermost first** (``"all_reduce (torch/distributed/distributed_c10d.py)"``).
        members: indices into :attr:`ClusterResult.dumps`, ascending.
        ranks: distinct known ranks of the members, ascending.
        category: :class:`Category` of the path.
        dominant: the role's dominant class.
        large: holds at least ``secondary_fraction`` of the role's readable processes.
        unreadable: the class of processes py-spy could not read.
        reasons: for the unreadable class, ``(error, count)`` pairs, most frequent first.
        partial: members whose cut stacks were merged into this class.
        divergence: where it leaves the dominant path (``None`` for the dominant class, the
            unreadable class, or when the role has no dominant class).
        other_threads: with ``threads="all"``, the other threads' paths (outermost first) of the class.
    """

    id: int
    role: ProcessRole
    frames: tuple[str, ...]
    members: tuple[int, ...]
    ranks: tuple[int, ...]
    category: Category
    dominant: bool = False
    large: bool = False
    unreadable: bool = False
    reasons: tuple[tuple[str, int], ...] = ()
    partial: int = 0
    divergence: Divergence | None = None
    other_threads: tuple[tuple[str, ...], ...] = ()

    @property
    def size(self) -> int:
        """Number of processes in the class."""
        return len(self.members)


@dataclass(frozen=True)
class RoleClusters:
    """The classes of one role.

    Attributes:
        role: the role. processes: processes of this role (readable or not). readable: those read.
        classes: readable classes, largest first (ties: first seen first), then the unreadable class.
        dominant: id of the dominant class; ``None`` when ambiguous or nothing was readable.
        ambiguous: True when readable processes exist but no class dominates.
        reason: why it is ambiguous (one line), else ``None``.
    """

    role: ProcessRole
    processes: int
    readable: int
    classes: tuple[StackClass, ...]
    dominant: int | None
    ambiguous: bool
    reason: str | None = None

    @property
    def outliers(self) -> tuple[StackClass, ...]:
        """Every class but the dominant one (including unreadable); empty when ambiguous without unreadable."""
        if self.dominant is None:
            return tuple(c for c in self.classes if c.unreadable)
        return tuple(c for c in self.classes if c.id != self.dominant)


@dataclass(frozen=True)
class ClusterResult:
    """Classes of every role present, and the dumps they index.

    Attributes:
        roles: one :class:`RoleClusters` per role present, in the order main, dataloader, checkpoint, other.
        dumps: the input dumps; class ``members`` index this tuple.
        options: the options used.
    """

    roles: tuple[RoleClusters, ...]
    dumps: tuple[ProcessDump, ...]
    options: ClusterOptions = field(default_factory=ClusterOptions)

    def role(self, role: ProcessRole) -> RoleClusters | None:
        """The classes of ``role``, or ``None`` when no process has it."""
        for rc in self.roles:
            if rc.role is role:
                return rc
        return None

    @property
    def readable(self) -> int:
        """Processes py-spy read, over all roles."""
        return sum(rc.readable for rc in self.roles)


# --- normalization ---------------------------------------------------------------------------------

_STDLIB_RE = re.compile(r"/lib(?:64)?/python\d+(?:\.\d+)?t?/")
_ROOT_FUNCS = frozenset(
    {
        "<module>",
        "_bootstrap",
        "_bootstrap_inner",
        "_run_module_as_main",
        "_run_code",
        "run_path",
        "spawn_main",
    }
)


def normalize_path(path: str, components: int = 3) -> str:
    """A stable suffix of a source path: install prefixes removed, last ``components`` parts kept.

    ``/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py`` and py-spy's short
    ``torch/distributed/distributed_c10d.py`` both give ``torch/distributed/distributed_c10d.py``;
    ``/usr/lib/python3.10/threading.py`` gives ``threading.py``.
    """
    p = path.replace("\\", "/")
    for marker in ("site-packages/", "dist-packages/"):
        i = p.rfind(marker)
        if i >= 0:
            p = p[i + len(marker) :]
            break
    else:
        ends = [m.end() for m in _STDLIB_RE.finditer(p)]
        if ends:
            p = p[ends[-1] :]
    parts = [x for x in p.split("/") if x and x != "."]
    return "/".join(parts[-components:]) if parts else p


def normalize_function(name: str, qualified: bool = False) -> str:
    """``Queue.get`` → ``get``, ``_exception_logger.<locals>.wrapper`` → ``wrapper`` (unless ``qualified``)."""
    if qualified or "." not in name or name.startswith("<"):
        return name
    if " " in name or "::" in name:  # a native symbol
        return name
    return name.rsplit(".", 1)[-1] or name


class _Interner(dict[Any, int]):
    """Raw frame key → normalized frame id; each distinct raw key is normalized once."""

    def __init__(self, options: ClusterOptions) -> None:
        super().__init__()
        self.options = options
        self.labels: list[str] = []
        self.parts: list[tuple[str, str]] = []  # (raw function name, normalized path) per id
        self._by_label: dict[str, int] = {}

    def __missing__(self, key: tuple[Any, ...]) -> int:
        function, file, short = key[0], key[1], key[2]
        fn = normalize_function(function, self.options.qualified_names)
        path = normalize_path(short or file, self.options.path_components)
        label = (
            f"{fn} ({path}:{key[3]})" if self.options.with_lines and key[3] is not None else f"{fn} ({path})"
        )
        fid = self._by_label.get(label)
        if fid is None:
            fid = len(self.labels)
            self._by_label[label] = fid
            self.labels.append(label)
            self.parts.append((function, path))  # the raw (qualified) name, for categories
        self[key] = fid
        return fid


def _main_thread(dump: ProcessDump) -> ThreadStack | None:
    threads = dump.threads
    if not threads:
        return None
    for t in threads:
        if t.name == "MainThread":
            return t
    return threads[0]


# --- clustering ------------------------------------------------------------------------------------


def cluster(dumps: Sequence[ProcessDump], options: ClusterOptions | None = None) -> ClusterResult:
    """Group processes into equivalence classes per role; judge dominance; find divergences.

    Args:
        dumps: every process collected or parsed (any roles, readable or not); ranks may be
            ``None``. Frames innermost first (py-spy's order).
        options: see :class:`ClusterOptions`.

    Returns:
        A :class:`ClusterResult`; every dump is a member of exactly one class.
    """
    opts = options or ClusterOptions()
    dumps = tuple(dumps)
    interner = _Interner(opts)
    getter: Callable[[Frame], tuple[Any, ...]] = (
        attrgetter("function", "file", "short_file", "line")
        if opts.with_lines
        else attrgetter("function", "file", "short_file")
    )
    lookup = interner.__getitem__
    by_role: dict[ProcessRole, dict[Any, list[int]]] = {}
    unreadable: dict[ProcessRole, list[int]] = {}
    all_threads = opts.threads == "all"
    # hot loop: ~40 frames x 100K processes; everything per frame happens in C (map, attrgetter, dict)
    for i, d in enumerate(dumps):
        if d.error is not None:
            unreadable.setdefault(d.role, []).append(i)
            continue
        threads = d.threads
        t = threads[0] if threads else None
        if t is not None and t.name != "MainThread":
            t = _main_thread(d)
        key: Any = tuple(map(lookup, map(getter, t.frames))) if t is not None else ()
        if all_threads and threads:
            others = tuple(sorted(tuple(map(lookup, map(getter, o.frames))) for o in threads if o is not t))
            key = (key, others)
        groups = by_role.get(d.role)
        if groups is None:
            groups = by_role[d.role] = {}
        members = groups.get(key)
        if members is None:
            groups[key] = [i]
        else:
            members.append(i)

    roles: list[RoleClusters] = []
    for role in ROLE_ORDER:
        groups = by_role.get(role, {})
        bad = unreadable.get(role, [])
        if not groups and not bad:
            continue
        roles.append(_judge_role(role, groups, bad, dumps, interner, opts))
    return ClusterResult(roles=tuple(roles), dumps=dumps, options=opts)


def _is_partial(path: tuple[int, ...], interner: _Interner) -> bool:
    return bool(path) and interner.parts[path[-1]][0] not in _ROOT_FUNCS


def _merge_partial(groups: dict[Any, list[int]], interner: _Interner) -> dict[Any, int]:
    """Fold cut stacks into the largest complete class starting (innermost) with the same frames.

    Returns ``{complete key: merged member count}``; ``groups`` is updated in place.
    """
    partial = [k for k in groups if _is_partial(k, interner) and len(k) >= 2]
    if not partial:
        return {}
    # trie over complete paths, innermost first; each node remembers its largest class below
    root: dict[int, Any] = {}
    best: dict[int, tuple[int, Any]] = {}  # id(node) -> (size, key)
    tie: set[int] = set()
    for k, members in groups.items():
        if _is_partial(k, interner):
            continue
        node = root
        for fid in k:
            node = node.setdefault(fid, {})
            nid = id(node)
            cur = best.get(nid)
            if cur is None or len(members) > cur[0]:
                best[nid] = (len(members), k)
                tie.discard(nid)
            elif len(members) == cur[0]:
                tie.add(nid)
    merged: dict[Any, int] = {}
    for k in partial:
        node = root
        for fid in k:
            nxt = node.get(fid)
            if nxt is None:
                break
            node = nxt
        else:
            nid = id(node)
            if nid in best and nid not in tie:
                target = best[nid][1]
                groups[target].extend(groups.pop(k))
                groups[target].sort()
                merged[target] = merged.get(target, 0) + 1
    return merged


def _judge_role(
    role: ProcessRole,
    groups: dict[Any, list[int]],
    bad: list[int],
    dumps: tuple[ProcessDump, ...],
    interner: _Interner,
    opts: ClusterOptions,
) -> RoleClusters:
    merged: dict[Any, int] = {}
    partial_count: dict[Any, int] = {}
    if opts.merge_partial and opts.threads == "main":
        before = {k: len(v) for k, v in groups.items()}
        merged = _merge_partial(groups, interner)
        partial_count = {k: len(groups[k]) - before[k] for k in merged}
    readable = sum(len(v) for v in groups.values())
    # largest first; ties keep first-seen order (dict order), i.e. the lowest member index first
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
    dominant: int | None = None
    reason: str | None = None
    if ordered:
        top = len(ordered[0][1])
        second = len(ordered[1][1]) if len(ordered) > 1 else 0
        if top == second:
            n_tied = sum(1 for _, v in ordered if len(v) == top)
            reason = (
                f"no dominant {role.value} class: {'every process differs' if top == 1 else f'{n_tied} classes hold {top} processes each'}"
                f" ({readable} processes, {len(ordered)} classes)"
            )
        elif top < opts.min_dominant_fraction * readable:
            reason = (
                f"no dominant {role.value} class: the largest holds {top} of {readable} processes "
                f"(< {opts.min_dominant_fraction:.0%}; {len(ordered)} classes)"
            )
        else:
            dominant = 0
    dom_path: tuple[int, ...] | None = None
    if dominant is not None:
        k0 = ordered[0][0]
        dom_path = tuple(reversed(k0[0] if opts.threads == "all" else k0))
    classes: list[StackClass] = []
    for cid, (key, members) in enumerate(ordered):
        main_key = key[0] if opts.threads == "all" else key
        path = tuple(reversed(main_key))
        others: tuple[tuple[str, ...], ...] = ()
        if opts.threads == "all":
            others = tuple(tuple(interner.labels[f] for f in reversed(o)) for o in key[1])
        div = None
        if dom_path is not None and cid != dominant:
            div = _divergence(path, dom_path, interner.labels)
        members_t = tuple(members)
        classes.append(
            StackClass(
                id=cid,
                role=role,
                frames=tuple(interner.labels[f] for f in path),
                members=members_t,
                ranks=_ranks(dumps, members_t),
                category=categorize_parts([interner.parts[f] for f in main_key]),
                dominant=cid == dominant,
                large=len(members) >= opts.secondary_fraction * readable,
                partial=partial_count.get(key, 0),
                divergence=div,
                other_threads=others,
            )
        )
    if bad:
        reasons = Counter(dumps[i].error or "unreadable" for i in bad)
        members_t = tuple(bad)
        classes.append(
            StackClass(
                id=len(classes),
                role=role,
                frames=(),
                members=members_t,
                ranks=_ranks(dumps, members_t),
                category=Category.UNREADABLE,
                unreadable=True,
                reasons=tuple(reasons.most_common()),
            )
        )
    if not ordered and bad:
        reason = f"no {role.value} process could be read ({len(bad)} unreadable)"
    return RoleClusters(
        role=role,
        processes=readable + len(bad),
        readable=readable,
        classes=tuple(classes),
        dominant=dominant,
        ambiguous=bool(ordered) and dominant is None,
        reason=reason,
    )


def _ranks(dumps: tuple[ProcessDump, ...], members: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted({r for r in (dumps[i].rank for i in members) if r is not None}))


def _divergence(path: tuple[int, ...], dom: tuple[int, ...], labels: list[str]) -> Divergence:
    n = min(len(path), len(dom))
    i = 0
    while i < n and path[i] == dom[i]:
        i += 1
    return Divergence(
        common_depth=i,
        last_common=labels[path[i - 1]] if i else None,
        first_different=labels[path[i]] if i < len(path) else None,
        dominant_next=labels[dom[i]] if i < len(dom) else None,
    )


# --- categories ------------------------------------------------------------------------------------

TORCH_COLLECTIVES = frozenset(
    {
        "all_reduce",
        "allreduce",
        "all_gather",
        "allgather",
        "all_gather_into_tensor",
        "all_gather_object",
        "_all_gather_base",
        "all_gather_coalesced",
        "all_reduce_coalesced",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "_reduce_scatter_base",
        "reduce_scatter_coalesced",
        "broadcast",
        "broadcast_object_list",
        "barrier",
        "monitored_barrier",
        "all_to_all",
        "all_to_all_single",
        "alltoall",
        "reduce",
        "gather",
        "gather_object",
        "scatter",
        "scatter_object_list",
    }
)
"""torch.distributed's collective calls (and their common spellings): a rank inside one waits for its group."""
_COLLECTIVE_FUNCS = TORCH_COLLECTIVES | frozenset(
    {
        "_reduce",
        "_gather_along_first_dim",
        "_reduce_scatter_along_first_dim",
        "inference_all_reduce",
    }
)
_P2P_FUNCS = frozenset(
    {
        "send",
        "recv",
        "isend",
        "irecv",
        "batch_isend_irecv",
        "send_object_list",
        "recv_object_list",
        "_communicate",
    }
)
_COMM_PATH_HINTS = ("distributed", "comm", "c10d", "nccl", "collective", "mappings", "parallel", "mpu")
_NEUTRAL_PATHS = (
    "threading.py",
    "queue.py",
    "selectors.py",
    "multiprocessing/connection.py",
    "multiprocessing/queues.py",
    "multiprocessing/synchronize.py",
    "concurrent/futures/_base.py",
    "subprocess.py",
    "c10d_logger.py",
)
_IO_SUFFIXES = (
    "shutil.py",
    "tarfile.py",
    "zipfile.py",
    "gzip.py",
    "bz2.py",
    "lzma.py",
    "socket.py",
    "ssl.py",
    "http/client.py",
    "tempfile.py",
    "glob.py",
    "pathlib.py",
    "genericpath.py",
)
_IO_PARTS = (
    "fsspec/",
    "s3fs/",
    "gcsfs/",
    "adlfs/",
    "botocore/",
    "boto3/",
    "urllib3/",
    "requests/",
    "h5py/",
    "safetensors/",
    "pyarrow/",
    "smart_open/",
    "huggingface_hub/",
    "azure/storage",
)
_DATA_FUNCS = frozenset(
    {
        "__next__",
        "__iter__",
        "next",
        "_next_data",
        "_get_data",
        "_try_get_data",
        "_next_index",
        "get_batch",
        "fetch",
    }
)


_ACTIVATION_CKPT = ("torch/utils/checkpoint.py", "tensor_parallel/random.py")
_CKPT_VERBS = ("save", "load", "write", "persist", "wait", "flush", "finalize")


def frame_category(qualified: str, path: str) -> Category | None:
    """Category of one frame, or ``None`` when the frame says nothing (``qualified``: the function
    name as py-spy printed it, e.g. ``Checkpointer.wait_for_previous_save`` on Python ≥ 3.11)."""
    fn = qualified.rsplit(".", 1)[-1] if not qualified.startswith("<") else qualified
    low = path.lower()
    fql = qualified.lower()
    base = low.rsplit("/", 1)[-1]
    activation = low.endswith(_ACTIVATION_CKPT)
    if not activation and (
        "distributed/checkpoint/" in low
        or "dist_checkpointing/" in low
        or "checkpoint_engine" in low
        or (low.endswith("torch/serialization.py") and fn in ("save", "_save", "_legacy_save"))
        or (("checkpoint" in fql or "ckpt" in fql) and any(w in fql for w in _CKPT_VERBS))
        or ("checkpoint" in base or "ckpt" in base)
    ):
        return Category.CHECKPOINT
    if "p2p" in low or (fn in _P2P_FUNCS and any(h in low for h in _COMM_PATH_HINTS)):
        return Category.P2P
    if fn in _COLLECTIVE_FUNCS and any(h in low for h in _COMM_PATH_HINTS):
        return Category.COLLECTIVE
    if "torch/utils/data/" in low or "dataloader" in low:
        return Category.DATALOADER
    dirs = low.split("/")[:-1]
    if fn in _DATA_FUNCS and ("data" in dirs or "iterators" in low or "dataset" in low):
        return Category.DATALOADER
    if low.endswith(_IO_SUFFIXES) or any(p in low for p in _IO_PARTS):
        return Category.IO
    return None


def categorize_parts(parts: Sequence[tuple[str, str]]) -> Category:
    """:func:`categorize` on ``(function as printed, normalized path)`` pairs, innermost first."""
    if not parts:
        return Category.UNKNOWN
    first: Category | None = None
    depth = 0
    for depth, (fn, path) in enumerate(parts):  # noqa: B007 - depth used after the loop
        first = frame_category(fn, path)
        if first is not None:
            break
    if first is None:
        fn, path = parts[0]
        neutral = path.endswith(_NEUTRAL_PATHS)
        return Category.UNKNOWN if neutral else Category.COMPUTE
    if first is Category.IO:
        for fn, path in parts[depth + 1 :]:
            outer = frame_category(fn, path)
            if outer in (Category.CHECKPOINT, Category.DATALOADER):
                return outer
    return first


def categorize(frames: Sequence[Frame]) -> Category:
    """What a thread is doing, from its frames (innermost first).

    The innermost recognised frame decides: checkpoint (``torch.distributed.checkpoint``, Megatron
    ``dist_checkpointing``, ``torch.save``, a ``*checkpoint*``/``*ckpt*`` function that saves, loads,
    writes or waits, a ``*checkpoint*`` module; activation checkpointing is compute), p2p (``send``/``recv``/``isend``/
    ``irecv``/``batch_isend_irecv`` in a distributed module, any ``*p2p*`` module such as Megatron's
    ``p2p_communication.py``), collective (``all_reduce``, ``all_gather*``, ``reduce_scatter*``,
    ``broadcast``, ``barrier``, ``all_to_all*`` … in a distributed module), dataloader
    (``torch/utils/data/``, a data iterator's ``__next__``/``__iter__`` under a ``data`` directory, e.g.
    fairseq's ``fairseq/data/iterators.py``), io (``shutil``, ``socket``, ``fsspec``, ``botocore`` …;
    reported as checkpoint or dataloader when called from one). Waits in ``threading``, ``queue``,
    ``selectors`` and ``multiprocessing`` are transparent: the frames above them decide. With nothing
    recognised: compute when the innermost frame is the process's own code, unknown when it is a
    generic wait.
    """
    return categorize_parts([(f.function, normalize_path(f.short_file or f.file)) for f in frames])


# --- the STAT prefix tree (for rendering) ------------------------------------------------------------


@dataclass
class TreeNode:
    """A node of the merged prefix tree: one frame, the classes whose paths pass through it.

    Attributes:
        frame: the normalized frame (``""`` for the root).
        classes: ids of the classes whose path passes here, ascending.
        ends: ids of the classes whose path ends here.
        children: child nodes in first-seen order (largest class first).
    """

    frame: str
    classes: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    children: dict[str, TreeNode] = field(default_factory=dict)


def prefix_tree(classes: Sequence[StackClass]) -> TreeNode:
    """Merge the classes' paths (outermost first) into one prefix tree, as STAT draws it."""
    root = TreeNode("")
    for c in classes:
        if c.unreadable:
            continue
        node = root
        node.classes.append(c.id)
        for f in c.frames:
            nxt = node.children.get(f)
            if nxt is None:
                nxt = node.children[f] = TreeNode(f)
            nxt.classes.append(c.id)
            node = nxt
        node.ends.append(c.id)
    return root


# --- comparing two samples -----------------------------------------------------------------------


@dataclass(frozen=True)
class SampleComparison:
    """Two samples of the same job compared rank by rank (main processes).

    Attributes:
        compared: ranks readable in both samples. changed: ranks whose main-thread stack (with line
        numbers) differs. unchanged: the others.
    """

    compared: int
    changed: tuple[int, ...]
    unchanged: tuple[int, ...]

    @property
    def changed_fraction(self) -> float:
        """changed / compared (0.0 when nothing was compared)."""
        return len(self.changed) / self.compared if self.compared else 0.0


def compare_samples(before: Sequence[ProcessDump], after: Sequence[ProcessDump]) -> SampleComparison:
    """Which ranks moved between two samples taken a little apart (e.g. 1-2 s).

    A hung job's waiting ranks show the very same stack twice; a healthy job's ranks move on. A job
    where most ranks changed is making progress: a single sample's classes then describe where ranks
    happened to be, not a hang (the live ``stacks`` command uses this to avoid blaming a healthy job).
    Only MAIN processes with a rank are compared; line numbers count.
    """

    def paths(ds: Sequence[ProcessDump]) -> dict[int, tuple[tuple[str, str, int | None], ...]]:
        out: dict[int, tuple[tuple[str, str, int | None], ...]] = {}
        for d in ds:
            if d.role is not ProcessRole.MAIN or d.rank is None or d.error is not None:
                continue
            t = _main_thread(d)
            if t is not None:
                out[d.rank] = tuple(
                    (f.function, normalize_path(f.short_file or f.file), f.line) for f in t.frames
                )
        return out

    a, b = paths(before), paths(after)
    common = sorted(a.keys() & b.keys())
    changed = tuple(r for r in common if a[r] != b[r])
    unchanged = tuple(r for r in common if a[r] == b[r])
    return SampleComparison(compared=len(common), changed=changed, unchanged=unchanged)
