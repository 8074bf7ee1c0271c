"""Live stack collection: the ``stacks`` probe on every host of a job, turned into ProcessDumps.

:func:`collect_stacks` fans the node-side probe ``diagnostics/stacks.py`` out to the job's hosts
(bounded concurrency, per-host and global deadlines, every host's outcome kept). Host ``k`` of the
job (``Job.hosts`` is in rank order) is asked for its own ranks ``k·G … k·G+G-1`` only. Each process
the probe reports becomes a :class:`~robustctl.stacks.model.ProcessDump` (its py-spy JSON parsed by
:func:`~robustctl.stacks.parse.parse_pyspy_json`); the role is MAIN for a rank's main process and is
inferred from the frames for its children (:func:`~robustctl.stacks.parse.infer_role`).

What is evidence and what is not:

* a process py-spy could not read (permission denied, ``D`` state, not Python, gone, timed out) is a
  ProcessDump with ``error`` set: evidence, often the culprit;
* what the *observer* failed to do is not evidence: an unreachable host, a probe that crashed or ran
  out of time, py-spy missing on a host, ranks that the probe did not find. Those ranks are
  ``missing_ranks`` ("not collected", never a suspect by themselves) and the host's result is
  :attr:`~robustctl.models.Status.UNKNOWN` with a one-line reason.

Where a rank runs the in-job agent (:mod:`robustctl.agent`), the probe reads its main process through
the agent's debug server first and py-spy is the fallback, per rank. Such a process's threads come
from the server's ``pyspy_dump`` text (:func:`~robustctl.stacks.parse.parse_pyspy_text`) when its
main thread is whole, else from its ``dump_traceback`` faulthandler text
(:func:`~robustctl.stacks.faulthandler.parse_traceback_text`). Which source read each process, and why
py-spy was used for a rank main process (no socket, a server error, a timeout), is kept in
:attr:`StackCollection.sources`; the Flight Recorder traces the servers gave in
:attr:`StackCollection.fr_traces`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from robustctl.errors import ConfigError, InventoryError
from robustctl.inventory.hostrange import compact_ranges
from robustctl.models import Outcome, Status
from robustctl.probes import ProbeDocument, beside_interpreter, command_deadline, run_probe
from robustctl.stacks.faulthandler import parse_traceback_text
from robustctl.stacks.model import DumpParseError, ProcessDump, ProcessRole, ThreadStack
from robustctl.stacks.parse import infer_role, parse_pyspy_json, parse_pyspy_text
from robustctl.transport.fanout import HostOutcome, fan_out

if TYPE_CHECKING:
    from robustctl.config import DiagnoseSettings, RankProcessSpec
    from robustctl.inventory import Host, Job
    from robustctl.transport.pool import TransportPool

__all__ = [
    "DEBUG_SERVER",
    "PY_SPY",
    "CollectSettings",
    "FrTrace",
    "HostStacks",
    "ProcessSource",
    "StackCollection",
    "collect_stacks",
    "dumps_from_document",
    "sources_from_document",
]

DEBUG_SERVER = "debug-server"
"""A process read through the in-job agent's debug server (``ProcessSource.source``)."""
PY_SPY = "py-spy"
"""A process read by py-spy from outside (``ProcessSource.source``)."""

NOT_DUMPED = "not dumped:"
"""Prefix of a probe's per-process error when the *observer* failed (no py-spy, out of time)."""


@dataclass(frozen=True)
class CollectSettings:
    """How to collect.

    Attributes:
        nonblocking: ``py-spy dump --nonblocking`` (default): never pause the training processes.
        native: ``py-spy --native`` (C/C++ frames; pauses each process, 0.5–1 s each on torch).
        per_process_timeout_s: budget of one ``py-spy dump``.
        probe_timeout_s: the probe's own budget on a host (it reports what it has by then).
        parallel: py-spy processes at once on a host.
        py_spy: py-spy path on the hosts (default: PATH, then beside the hosts' Python; for a
            host on the local transport without a wrapper, also beside the Python running
            robustctl, e.g. its ``.venv/bin``).
        concurrency: hosts contacted at once.
        host_timeout_s: per-host deadline (connection, retries and probe); default
            ``probe_timeout_s + 30``.
        deadline_s: global deadline of the whole collection (None: none beyond the per-host one).
        retries: extra connection attempts after a connection error. retry_backoff_s: base of the
            jittered exponential backoff between them.
        debug_server: read each rank's main process through the in-job agent's debug server
            first (py-spy the fallback); False: py-spy only.
        debug_timeout_s: budget of one debug-server call (None: the probe's default, 3 s).
    """

    nonblocking: bool = True
    native: bool = False
    per_process_timeout_s: float = 10.0
    probe_timeout_s: float = 30.0
    parallel: int = 16
    py_spy: str | None = None
    concurrency: int = 64
    host_timeout_s: float | None = None
    deadline_s: float | None = None
    retries: int = 1
    retry_backoff_s: float = 0.5
    debug_server: bool = True
    debug_timeout_s: float | None = None

    @classmethod
    def from_diagnose(cls, diagnose: DiagnoseSettings, **overrides: Any) -> CollectSettings:
        """Settings taking the inventory's fan-out knobs (concurrency, retries, backoff, the global
        deadline ``deadline_s`` of each collection), then ``overrides``."""
        base: dict[str, Any] = {
            "concurrency": diagnose.concurrency,
            "deadline_s": diagnose.deadline_s,
            "retries": diagnose.retries,
            "retry_backoff_s": diagnose.retry_backoff_s,
        }
        base.update(overrides)
        return cls(**base)


@dataclass(frozen=True)
class HostStacks:
    """What collection got from one host.

    Attributes:
        host: inventory name. outcome: ok / failed / unreachable / timed_out (the probe command).
        status: OK when the probe ran and found every expected rank; UNKNOWN otherwise ("not
            checked" is never healthy). error: one line when not OK, else None.
        expected_ranks: the ranks this host should hold (``k·G … k·G+G-1``).
        found_ranks: expected ranks with a main process dumped or reported unreadable.
        processes: ProcessDumps from this host (mains and children). unreadable: of those, with error.
        elapsed_s: wall seconds of the probe command (0 when it did not run).
        py_spy_version: the py-spy version on the host, when the probe found one.
    """

    host: str
    outcome: Outcome
    status: Status
    error: str | None
    expected_ranks: tuple[int, ...]
    found_ranks: tuple[int, ...]
    processes: int = 0
    unreadable: int = 0
    elapsed_s: float = 0.0
    py_spy_version: str | None = None

    @property
    def missing_ranks(self) -> tuple[int, ...]:
        """Expected ranks that were not collected."""
        found = set(self.found_ranks)
        return tuple(r for r in self.expected_ranks if r not in found)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (enums as their values, ``missing_ranks`` included)."""
        return {
            "host": self.host,
            "outcome": self.outcome.value,
            "status": self.status.value,
            "error": self.error,
            "expected_ranks": list(self.expected_ranks),
            "found_ranks": list(self.found_ranks),
            "missing_ranks": list(self.missing_ranks),
            "processes": self.processes,
            "unreadable": self.unreadable,
            "elapsed_s": self.elapsed_s,
            "py_spy_version": self.py_spy_version,
        }


@dataclass(frozen=True)
class ProcessSource:
    """Which source read one process's stacks, and why py-spy when a debug server was wanted.

    Attributes:
        host: inventory name. pid: process id. rank: its rank (None: unknown). main: a rank's main
            process (only those are asked through a debug server).
        source: :data:`DEBUG_SERVER` or :data:`PY_SPY`.
        fallback_reason: for a main process read by py-spy: ``"no socket"``, ``"server error"`` or
            ``"timed out"``; None otherwise (also when the debug server was not asked).
        fallback_detail: the debug server's failure, one line. debug_socket: the socket asked.
        stacks_from: for the debug server: ``"pyspy_dump"`` or ``"dump_traceback"`` (the text the
            threads were read from).
    """

    host: str
    pid: int
    rank: int | None
    main: bool
    source: str
    fallback_reason: str | None = None
    fallback_detail: str | None = None
    debug_socket: str | None = None
    stacks_from: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "host": self.host,
            "pid": self.pid,
            "rank": self.rank,
            "main": self.main,
            "source": self.source,
            "fallback_reason": self.fallback_reason,
            "fallback_detail": self.fallback_detail,
            "debug_socket": self.debug_socket,
            "stacks_from": self.stacks_from,
        }


@dataclass(frozen=True)
class FrTrace:
    """One rank's Flight Recorder trace as its debug server gave it (``fr_trace_json``).

    Attributes:
        host: inventory name. pid: the rank's process. rank: its rank (None: unknown).
        data: the JSON document's bytes (at most the probe's ``DEBUG_MAX_FR_BYTES``, 4 MiB).
    """

    host: str
    pid: int
    rank: int | None
    data: bytes


@dataclass(frozen=True)
class StackCollection:
    """Everything one live collection of a job returned.

    Attributes:
        job: job name. dumps: every process collected, sorted by (rank, role, host, pid): each rank's
            main process and its children (data-loader workers, checkpoint writers), readable or not.
        hosts: per-host results, in the order the hosts were asked.
        expected_ranks: ranks the asked hosts should hold. missing_ranks: those without a main
            process in ``dumps`` (not collected: unreachable host, no process, observer failure).
        started_at: UNIX time the collection started. elapsed_s: its wall seconds.
        sources: which source read each process (:class:`ProcessSource`), in ``dumps`` order for
            those the probe reported one for.
        fr_traces: the Flight Recorder traces the ranks' debug servers gave.
    """

    job: str
    dumps: tuple[ProcessDump, ...]
    hosts: tuple[HostStacks, ...]
    expected_ranks: tuple[int, ...]
    missing_ranks: tuple[int, ...]
    started_at: float
    elapsed_s: float
    sources: tuple[ProcessSource, ...] = ()
    fr_traces: tuple[FrTrace, ...] = ()

    def source_counts(self) -> dict[str, int]:
        """``{source: rank main processes read by it}`` (:data:`DEBUG_SERVER`, :data:`PY_SPY`)."""
        out = {DEBUG_SERVER: 0, PY_SPY: 0}
        for src in self.sources:
            if src.main:
                out[src.source] = out.get(src.source, 0) + 1
        return out

    def evidence_line(self) -> str:
        """``"evidence: 6 ranks via the debug server, 2 via py-spy"`` (rank main processes), with the
        fallback reasons when py-spy read a rank whose debug server was asked."""
        n = self.source_counts()
        reasons: dict[str, int] = {}
        for src in self.sources:
            if src.main and src.fallback_reason:
                reasons[src.fallback_reason] = reasons.get(src.fallback_reason, 0) + 1
        why = ", ".join(f"{k}: {v}" for k, v in sorted(reasons.items()))
        ds = n[DEBUG_SERVER]
        return f"evidence: {ds} rank{'s' if ds != 1 else ''} via the debug server, {n[PY_SPY]} via py-spy" + (
            f" ({why})" if why else ""
        )

    @property
    def mains(self) -> tuple[ProcessDump, ...]:
        """The rank main processes (role MAIN)."""
        return tuple(d for d in self.dumps if d.role is ProcessRole.MAIN)

    @property
    def unknown_hosts(self) -> tuple[HostStacks, ...]:
        """Hosts whose result is not OK."""
        return tuple(h for h in self.hosts if h.status is not Status.OK)

    @property
    def status(self) -> Status:
        """OK when every host is OK, else UNKNOWN (collection status only; no verdict on the job)."""
        return Status.UNKNOWN if self.unknown_hosts or self.missing_ranks else Status.OK

    def by_rank(self) -> dict[int, list[ProcessDump]]:
        """``{rank: [dumps]}`` (main first), for ranks that are known."""
        out: dict[int, list[ProcessDump]] = {}
        for d in self.dumps:
            if d.rank is not None:
                out.setdefault(d.rank, []).append(d)
        return out


def _opt_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def dumps_from_document(host: str, data: Mapping[str, Any]) -> tuple[list[ProcessDump], list[str]]:
    """Convert the ``data`` of one ``stacks`` probe document into ProcessDumps.

    Args:
        host: inventory name of the host the document came from.
        data: the document's ``data`` (schema: ``diagnostics/stacks.py``).

    Returns:
        ``(dumps, observer_errors)``: one dump per process the probe reported, except those the
        observer failed to dump (``"not dumped: …"``: no py-spy, probe out of time), whose errors
        are returned instead. A malformed process entry is skipped with an observer error; a dump
        that is not py-spy's JSON shape becomes a dump with ``error`` set.
    """
    dumps: list[ProcessDump] = []
    observer: list[str] = []
    entries = data.get("processes")
    if not isinstance(entries, list):
        return [], ["probe reported no process list"]
    for e in entries:
        if not isinstance(e, Mapping) or _opt_int(e.get("pid")) is None:
            observer.append("probe reported a malformed process entry")
            continue
        pid = _opt_int(e.get("pid"))
        error = str(e["error"]) if e.get("error") else None
        if error is not None and error.startswith(NOT_DUMPED):
            observer.append(f"pid {pid}: {error}")
            continue
        threads: tuple[ThreadStack, ...] = ()
        if error is None and e.get("source") == DEBUG_SERVER:
            threads, error, _ = debug_threads(e.get("debug"))
        elif error is None:
            try:
                threads = parse_pyspy_json(e.get("dump"))
            except DumpParseError as exc:
                error = f"unreadable py-spy output: {exc}"
        comm = str(e["comm"]) if e.get("comm") else None
        if e.get("role") == "main":
            role = ProcessRole.MAIN
        else:  # an unreadable child is never counted as a rank's main process; its comm may name it
            role = infer_role(threads, is_child=True, comm=comm)
            role = ProcessRole.OTHER if role is ProcessRole.MAIN else role
        dumps.append(
            ProcessDump(
                threads=threads,
                rank=_opt_int(e.get("rank")),
                host=host,
                pid=pid,
                role=role,
                parent_pid=_opt_int(e.get("parent_pid")),
                cmdline=str(e["cmdline"]) if e.get("cmdline") else None,
                state=str(e["state"]) if e.get("state") else None,
                error=error,
                source=f"{host}:{pid}",
                comm=comm,
            )
        )
    return dumps, observer


def _whole(threads: tuple[ThreadStack, ...]) -> bool:
    """The main thread reaches ``<module>`` (a nonblocking py-spy read can cut it short)."""
    main = next((t for t in threads if t.is_main), None)
    return main is not None and any(f.function == "<module>" for f in main.frames)


def debug_threads(debug: Any) -> tuple[tuple[ThreadStack, ...], str | None, str | None]:
    """The threads of a process its debug server answered for (the probe's ``debug`` object).

    The ``pyspy_dump`` text is used when its main thread is whole (it names threads and qualifies
    functions as py-spy's JSON does, so such a rank clusters with those py-spy read from outside);
    else the ``dump_traceback`` faulthandler text (taken with the GIL: never cut short).

    Args:
        debug: ``{traceback, pyspy, fr_trace, errors}`` as the probe reported it.

    Returns:
        ``(threads, error, stacks_from)``: ``error`` one line when neither text could be read (then
        no threads); ``stacks_from`` ``"pyspy_dump"`` or ``"dump_traceback"``.
    """
    if not isinstance(debug, Mapping):
        return (), "debug server: no answer in the probe's document", None
    why: list[str] = []
    text = debug.get("pyspy")
    spy: tuple[ThreadStack, ...] = ()
    if isinstance(text, str) and text.strip():
        try:
            procs = parse_pyspy_text(text)
            spy = procs[0].threads if procs and procs[0].error is None else ()
            if procs and procs[0].error is not None:
                why.append(f"pyspy_dump: {procs[0].error}")
        except DumpParseError as exc:
            why.append(f"pyspy_dump: {exc}")
        if spy and _whole(spy):
            return spy, None, "pyspy_dump"
    text = debug.get("traceback")
    if isinstance(text, str) and text.strip():
        try:
            parsed = parse_traceback_text(text)
            fh = parsed.dumps[-1]
            if fh.error is None and fh.threads:
                return fh.threads, None, "dump_traceback"
            why.append(f"dump_traceback: {fh.error or 'no thread'}")
        except DumpParseError as exc:
            why.append(f"dump_traceback: {exc}")
    if spy:  # cut short, but the only stack there is
        return spy, None, "pyspy_dump"
    return (), "unreadable debug-server answer: " + ("; ".join(why) or "no stack text"), None


def sources_from_document(host: str, data: Mapping[str, Any]) -> tuple[list[ProcessSource], list[FrTrace]]:
    """Which source read each process of one ``stacks`` probe document, and the Flight Recorder
    traces its debug servers gave.

    Args:
        host: inventory name of the host the document came from.
        data: the document's ``data`` (schema: ``diagnostics/stacks.py``).

    Returns:
        ``(sources, traces)``: one :class:`ProcessSource` per well-formed process entry with a
        ``source`` (a document of a probe without the debug-server path has none), one
        :class:`FrTrace` per non-empty ``fr_trace``.
    """
    sources: list[ProcessSource] = []
    traces: list[FrTrace] = []
    entries = data.get("processes")
    for e in entries if isinstance(entries, list) else ():
        pid = _opt_int(e.get("pid")) if isinstance(e, Mapping) else None
        if pid is None or e.get("source") not in (DEBUG_SERVER, PY_SPY):
            continue
        debug = e.get("debug")
        stacks_from = None
        if e["source"] == DEBUG_SERVER:
            stacks_from = debug_threads(debug)[2]
            trace = debug.get("fr_trace") if isinstance(debug, Mapping) else None
            if isinstance(trace, str) and trace.strip():
                traces.append(FrTrace(host, pid, _opt_int(e.get("rank")), trace.encode("utf-8")))
        reason = e.get("fallback_reason")
        detail = e.get("fallback_detail")
        sock = e.get("debug_socket")
        sources.append(
            ProcessSource(
                host=host,
                pid=pid,
                rank=_opt_int(e.get("rank")),
                main=e.get("role") == "main",
                source=str(e["source"]),
                fallback_reason=str(reason) if reason and e["source"] == PY_SPY else None,
                fallback_detail=str(detail) if detail and e["source"] == PY_SPY else None,
                debug_socket=str(sock) if sock else None,
                stacks_from=stacks_from,
            )
        )
    return sources, traces


@dataclass(frozen=True)
class _HostValue:
    dumps: tuple[ProcessDump, ...]
    result: HostStacks
    sources: tuple[ProcessSource, ...] = ()
    traces: tuple[FrTrace, ...] = ()


def collect_stacks(
    job: Job,
    pool: TransportPool,
    *,
    hosts: Sequence[Host] | None = None,
    settings: CollectSettings | None = None,
    progress: Callable[[HostStacks], None] | None = None,
) -> StackCollection:
    """Dump the stacks of every rank process of ``job`` (and their children), host by host.

    Args:
        job: the job (hosts in rank order, ``ranks_per_host``, process spec).
        pool: transports to the hosts.
        hosts: only these hosts of the job (default: all of them); expected ranks are theirs.
        settings: see :class:`CollectSettings`.
        progress: called (from worker threads) with each host's result as it finishes.

    Returns:
        A :class:`StackCollection`; never raises for a host that fails (its result says why).

    Raises:
        ConfigError: the job has no ``process:`` spec (robustctl cannot find its ranks).
        InventoryError: a host in ``hosts`` is not one of the job's.
    """
    s = settings or CollectSettings()
    spec = job.process
    if spec is None:
        raise ConfigError(
            f"job {job.name!r} has no 'process:' section: add process: {{match: REGEX}} "
            "(a regex of its rank processes' command line) to find its ranks"
        )
    index = {h.name: k for k, h in enumerate(job.hosts)}
    targets = list(job.hosts if hosts is None else hosts)
    for h in targets:
        if h.name not in index:
            raise InventoryError(f"host {h.name!r} is not one of job {job.name!r}'s hosts")
    g = job.ranks_per_host
    expected_of = {h.name: tuple(range(index[h.name] * g, index[h.name] * g + g)) for h in targets}
    common = _probe_args(spec, s)
    spec_heartbeats = job.progress.files if job.progress is not None else None
    host_timeout = s.host_timeout_s if s.host_timeout_s is not None else s.probe_timeout_s + 30.0
    t0 = time.monotonic()
    started_at = time.time()
    deadline = t0 + s.deadline_s if s.deadline_s is not None else None

    def work(host: Host, host_deadline: float) -> _HostValue:
        host_deadline = command_deadline(host, host_deadline)
        expected = expected_of[host.name]
        budget = max(1.0, min(s.probe_timeout_s, host_deadline - time.monotonic() - 3.0))
        args = [*common, "--ranks", compact_ranges(expected), "--timeout", f"{budget:.1f}"]
        if not s.py_spy and host.transport == "local" and not host.python.wrapper:
            local = beside_interpreter("py-spy")  # e.g. installed in robustctl's own .venv
            if local:
                args.append(f"--py-spy={local}")
        if s.debug_server and spec_heartbeats:
            args.append(f"--heartbeats={spec_heartbeats.replace('{host}', host.name)}")
        doc = run_probe(pool.for_host(host), host, "stacks", args, deadline=host_deadline)
        dumps, observer = dumps_from_document(host.name, doc.data)
        sources, traces = sources_from_document(host.name, doc.data)
        result = _host_result(host.name, expected, doc, dumps, observer)
        return _HostValue(tuple(dumps), result, tuple(sources), tuple(traces))

    def on_done(o: HostOutcome[_HostValue]) -> None:
        if progress is not None:
            progress(_result_of(o, expected_of[o.host.name]))

    fan = fan_out(
        targets,
        work,
        concurrency=s.concurrency,
        host_timeout_s=host_timeout,
        deadline=deadline,
        retries=s.retries,
        backoff_s=s.retry_backoff_s,
        on_done=on_done,
        on_deadline=pool.shutdown,
    )
    expected = tuple(sorted(r for h in targets for r in expected_of[h.name]))
    return _collection(job.name, fan.outcomes, expected_of, expected, started_at, time.monotonic() - t0)


def _probe_args(spec: RankProcessSpec, s: CollectSettings) -> list[str]:
    """The stacks probe's arguments common to every host: how to find the ranks, how to dump them."""
    # "--opt=value": a regex may start with "-", which argparse would take for an option
    common = [
        f"--match={spec.match}",
        f"--rank-env={spec.rank_env}",
        f"--local-rank-env={spec.local_rank_env}",
    ]
    if spec.rank_cmdline:
        common.append(f"--rank-cmdline={spec.rank_cmdline}")
    common += ["--per-process-timeout", f"{s.per_process_timeout_s:g}", "--parallel", str(s.parallel)]
    if s.native:
        common.append("--native")
    elif not s.nonblocking:
        common.append("--blocking")
    if s.py_spy:
        common.append(f"--py-spy={s.py_spy}")
    if not s.debug_server:
        common.append("--no-debug-server")
    elif s.debug_timeout_s is not None:
        common += ["--debug-timeout", f"{s.debug_timeout_s:g}"]
    return common


def _collection(
    job: str,
    outcomes: Sequence[HostOutcome[_HostValue]],
    expected_of: Mapping[str, tuple[int, ...]],
    expected: tuple[int, ...],
    started_at: float,
    elapsed_s: float,
) -> StackCollection:
    """The hosts' outcomes as one :class:`StackCollection`: every dump in rank order, each host's
    result, and the ``expected`` ranks no main process was found for."""
    dumps: list[ProcessDump] = []
    results: list[HostStacks] = []
    sources: list[ProcessSource] = []
    traces: list[FrTrace] = []
    for o in outcomes:
        results.append(_result_of(o, expected_of[o.host.name]))
        if o.value is not None:
            dumps.extend(o.value.dumps)
            sources.extend(o.value.sources)
            traces.extend(o.value.traces)
    found = {d.rank for d in dumps if d.role is ProcessRole.MAIN and d.rank is not None}
    dumps.sort(key=_dump_order)
    return StackCollection(
        job=job,
        dumps=tuple(dumps),
        hosts=tuple(results),
        expected_ranks=expected,
        missing_ranks=tuple(r for r in expected if r not in found),
        started_at=started_at,
        elapsed_s=round(elapsed_s, 6),
        sources=tuple(
            sorted(
                sources, key=lambda x: (x.rank if x.rank is not None else 1 << 62, not x.main, x.host, x.pid)
            )
        ),
        fr_traces=tuple(
            sorted(traces, key=lambda t: (t.rank if t.rank is not None else 1 << 62, t.host, t.pid))
        ),
    )


def _dump_order(d: ProcessDump) -> tuple[int, int, str, int]:
    rank = d.rank if d.rank is not None else 1 << 62
    return (rank, 0 if d.role is ProcessRole.MAIN else 1, d.host or "", d.pid or 0)


def _result_of(o: HostOutcome[_HostValue], expected: tuple[int, ...]) -> HostStacks:
    if o.value is not None:
        return o.value.result
    return HostStacks(
        host=o.host.name,
        outcome=o.outcome,
        status=Status.UNKNOWN,
        error=f"{o.outcome.value.replace('_', ' ')}: {o.error}" if o.error else o.outcome.value,
        expected_ranks=expected,
        found_ranks=(),
        elapsed_s=o.elapsed_s,
    )


def _host_result(
    host: str,
    expected: tuple[int, ...],
    doc: ProbeDocument,
    dumps: Sequence[ProcessDump],
    observer: Sequence[str],
) -> HostStacks:
    data = doc.data
    exp = set(expected)
    found = tuple(sorted({d.rank for d in dumps if d.role is ProcessRole.MAIN and d.rank in exp}))
    missing = [r for r in expected if r not in found]
    problems: list[str] = []
    if data.get("error"):
        problems.append(str(data["error"]))
    if missing:
        problems.append(f"rank(s) {compact_ranges(missing)} not found (no matching process with that rank)")
    if observer and not data.get("error"):
        problems.append(f"{len(observer)} process(es) not dumped ({observer[0]})")
    problems.extend(e for e in doc.errors if e not in problems and e != data.get("error"))
    py_spy = data.get("py_spy")
    version = py_spy.get("version") if isinstance(py_spy, Mapping) else None
    return HostStacks(
        host=host,
        outcome=Outcome.OK,
        status=Status.UNKNOWN if problems else Status.OK,
        error="; ".join(problems) if problems else None,
        expected_ranks=expected,
        found_ranks=found,
        processes=len(dumps),
        unreadable=sum(1 for d in dumps if d.error is not None),
        elapsed_s=round(doc.elapsed_s, 6),
        py_spy_version=str(version) if version else None,
    )
