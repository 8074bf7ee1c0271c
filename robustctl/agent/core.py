"""The agent: one object per rank process, fed one call per training step.

See :mod:`robustctl.agent` for what it writes and why; this module is the implementation.
"""

from __future__ import annotations

import atexit
import faulthandler
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from robustctl.agent import torchside
from robustctl.agent.jsonsafe import jsonable, loss_json

__all__ = [
    "HEARTBEAT_INTERVAL_S",
    "HEARTBEAT_MAX_BYTES",
    "MAX_NAN_EVENTS",
    "Agent",
    "start",
]

HEARTBEAT_INTERVAL_S = 1.0
"""Least time between two heartbeat writes, seconds (the first step, a phase change, a NaN/Inf loss
and :meth:`Agent.close` write at once regardless). The watch evaluates a job every 30 s by default
and calls a stall a hang after ``stall_after_s`` (at least 10 s; ``robustctl.config``), so 1 s loses
nothing it reads; it bounds a fast loop's cost to one small file write per second (130-400 µs of the
writer thread's CPU on the test machine's disk, ``python -m bench agent``). A step held back by it
is written by the writer thread within 1.5 intervals, so a rank that then hangs still shows it."""
HEARTBEAT_MAX_BYTES = 65_536
"""Largest heartbeat written: what the control side reads of one (``robustctl.jobcode.progress.
MAX_HEARTBEAT_BYTES``, 64 KiB; a longer file is cut and unreadable). A step's ``extra`` fields that
would pass it are dropped from that write (``extra_dropped`` counts them)."""
MAX_NAN_EVENTS = 16
"""Most NaN/Inf event files one agent writes: the first ones date the fault; a loss that stays NaN
would otherwise write one file per step for the rest of the run."""

_MEASURE: Any = object()
"""``step_s`` not given: measured between calls."""
_CORE_KEYS = frozenset(
    (
        "rank",
        "pid",
        "step",
        "phase",
        "time",
        "step_s",
        "loss",
        "tokens",
        "local_rank",
        "world_size",
        "debug_socket",
    )
)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"robustctl.agent: ${name}={raw[:40]!r} is not an integer") from None
    if value < 0:
        raise ValueError(f"robustctl.agent: ${name}={value} is negative")
    return value


def _as_float(value: Any) -> float | None:
    if value is None or isinstance(value, float):
        return value
    try:
        return float(value)
    except Exception:  # not a number: no loss recorded
        return None


class Agent:
    """One rank's agent (make it with :func:`start`): heartbeats, NaN events, stacks, debug server.

    Constructing one writes nothing; :func:`start` creates ``run_dir``, the SIGUSR1 dump, the debug
    server and the background writer.

    Args:
        run_dir: the run's directory.
        rank: this process's rank.
        local_rank: its rank on its machine.
        world_size: ranks in the job.
        interval_s: least time between heartbeat writes, seconds.
        clock: monotonic seconds (rate limit, ``step_s``).
        wall: UNIX seconds (the heartbeat's ``time``).
        flusher: run the background thread that writes a held-back step.

    Attributes:
        run_dir: where it writes. rank, local_rank, world_size: this process's place in the job.
        heartbeat_path: ``run_dir/rankRRRRR.json``. debug_socket: the debug server's socket path, or
        None when it is not running. notes: one line per feature that is off and why (no torch, no
        ``_WorkerServer``, a socket path too long, not the main thread). errors: I/O errors met
        (counted; the first printed on stderr). writes, nan_events: files written.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        rank: int,
        local_rank: int,
        world_size: int,
        interval_s: float = HEARTBEAT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        flusher: bool = True,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.rank, self.local_rank, self.world_size = rank, local_rank, world_size
        self.heartbeat_path = self.run_dir / f"rank{rank:05d}.json"
        self.interval_s = interval_s
        self.debug_socket: str | None = None
        self.notes: list[str] = []
        self.errors = 0
        self.writes = 0
        self.nan_events = 0
        self._clock, self._wall = clock, wall
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._state: tuple[Any, str, float, Any, float | None, Any, dict[str, Any]] | None = None
        """The latest step: (step, phase, time, step_s, loss, tokens, extra), a tuple (the cheapest to build)."""
        self._pending = False
        self._phase: str | None = None
        self._last_call: float | None = None
        self._last_write = -math.inf
        self._closed = False
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._due = False
        self._thread: threading.Thread | None = None
        self._stacks_file: IO[str] | None = None
        self._server: Any = None
        self._use_flusher = flusher
        self._torch = False
        self._torch_allowed = True

    # ---- the training loop's calls -------------------------------------------------------------------

    def step(
        self,
        step: int,
        loss: float | None = None,
        tokens: int | None = None,
        *,
        step_s: float | None = _MEASURE,
        phase: str = "train",
        **extra: Any,
    ) -> None:
        """Record that this rank finished ``step``; write the heartbeat when due. Never raises for I/O.

        The heartbeat is written at once for the first call, a new ``phase`` and a NaN/Inf loss,
        else at most every ``interval_s``, by the agent's writer thread (woken when a write is due;
        a step held back by the rate limit is written within 1.5 intervals), so the loop never waits
        on the file system; without the thread (``flusher=False``) in this call. A loss that is not
        finite also writes ``run_dir/events/rankRRRRR-STEP-nan.json`` in this call (at most
        :data:`MAX_NAN_EVENTS`).

        Args:
            step: the step just finished (the heartbeat's ``step``).
            loss: its loss, a Python number (a tensor works, at the cost of a device sync).
            tokens: tokens processed, written when given.
            step_s: the step's duration in seconds; when not given, the time since the previous call.
            phase: the heartbeat's ``phase`` (``"train"``; ``"ready"``, ``"done"`` as the job says).
            **extra: more fields, written as given (made strict JSON, bounded); a core field's name
                is ignored.
        """
        if self._closed:
            return
        try:
            now = self._clock()
            last, self._last_call = self._last_call, now
            if step_s is _MEASURE:
                step_s = None if last is None else now - last
            lossf = loss if loss is None or loss.__class__ is float else _as_float(loss)
            self._state = (step, phase, self._wall(), step_s, lossf, tokens, extra)
            force = self._phase != phase
            self._phase = phase
            if lossf is not None and not math.isfinite(lossf):
                force = self._nan_event(step, lossf, tokens) or force
            self._pending = True
            if force or now - self._last_write >= self.interval_s:
                if self._thread is None:
                    self._write()
                else:  # the writer thread does the I/O: a slow shared file system never stalls the loop
                    self._due = True
                    self._wake.set()
        except Exception as exc:  # the training loop goes on whatever the agent met
            self._error("recording a step", exc)

    def writer_cpu_s(self) -> float | None:
        """CPU seconds the writer thread has used so far (its per-thread clock).

        Returns:
            The seconds, or None without the thread (``flusher=False``, ended, or a system without
            per-thread CPU clocks).
        """
        thread = self._thread
        if thread is None or thread.ident is None or not thread.is_alive():
            return None
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (AttributeError, OSError):
            return None

    def dump_flight_recorder(self, path: str | os.PathLike[str] | None = None) -> Path | None:
        """Write this rank's Flight Recorder ring as torch's JSON dump (atomically).

        Args:
            path: where; default ``run_dir/fr/rankRRRRR.json``.

        Returns:
            The file written, or None when it could not be (torch not in use, no dump in this build,
            an I/O error: counted, reported once).
        """
        target = Path(path) if path is not None else self.run_dir / "fr" / f"rank{self.rank:05d}.json"
        if not self._torch and not (self._torch_allowed and "torch" in sys.modules):
            self._note("Flight Recorder dump asked for, but the agent runs without torch")
            return None
        try:
            data = torchside.flight_recorder_json()
            target.parent.mkdir(parents=True, exist_ok=True)
            self._atomic(target, data)
            return target
        except Exception as exc:
            self._error(f"dumping Flight Recorder to {target}", exc)
            return None

    def close(self) -> None:
        """Stop the background writer, the debug server and the SIGUSR1 dump; write the last heartbeat.

        The last heartbeat is the latest step's, without ``debug_socket`` (the server is gone).
        Idempotent; also run at interpreter exit. Never raises for I/O. In a process forked from the
        agent's (a data-loader worker that exits through ``sys.exit``) it does nothing: the server,
        the socket and the files are the parent's.
        """
        if self._closed:
            return
        self._closed = True
        if os.getpid() != self._pid:  # a forked child (a data-loader worker): the parent's server and files
            return
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        if self._server is not None:
            try:
                torchside.stop_worker_server(self._server, self.debug_socket or "")
            except Exception as exc:
                self._error("stopping the debug server", exc)
            self._server = None
        self.debug_socket = None
        try:
            self._write()
        except Exception as exc:
            self._error("writing the last heartbeat", exc)
        self._stop_stacks()
        atexit.unregister(self.close)

    def __enter__(self) -> Agent:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ---- writing -------------------------------------------------------------------------------------

    def heartbeat_doc(self, state: tuple[Any, ...] | None = None) -> dict[str, Any]:
        """The heartbeat document of the latest step, as it is written (strict JSON values).

        Keys: ``rank``, ``pid``, ``step``, ``phase``, ``time``, ``step_s``, ``loss`` (minimegatron's
        heartbeat and :mod:`robustctl.jobcode.progress`'s reader), ``local_rank``, ``world_size``,
        ``tokens`` when given, ``debug_socket`` when the server runs, then the step's ``extra``.

        Args:
            state: a step as the agent keeps it; default the latest.

        Returns:
            The document (step 0, phase ``"start"`` before the first step).
        """
        state = state or self._state or (0, "start", self._wall(), None, None, None, {})
        step, phase, at, step_s, loss, tokens, extra = state
        doc: dict[str, Any] = {
            "rank": self.rank,
            "pid": self._pid,
            "step": step if type(step) is int else jsonable(step),
            "phase": jsonable(phase),
            "time": at,
            "step_s": jsonable(step_s),
            "loss": loss_json(loss),
            "local_rank": self.local_rank,
            "world_size": self.world_size,
        }
        if tokens is not None:
            doc["tokens"] = jsonable(tokens)
        if self.debug_socket is not None:
            doc["debug_socket"] = self.debug_socket
        for key, value in extra.items():
            if key not in _CORE_KEYS:
                doc[key] = jsonable(value)
        return doc

    def _write(self) -> None:
        """Write the latest step's heartbeat now (under the lock; an error is counted)."""
        if os.getpid() != self._pid:  # a forked child writes nothing in its parent's name
            return
        with self._lock:
            self._pending = False
            state = self._state
            doc = self.heartbeat_doc(state)
            text = json.dumps(doc, allow_nan=False)
            if len(text) > HEARTBEAT_MAX_BYTES:
                extra = state[6] if state is not None else {}
                for key in extra:
                    doc.pop(key, None)
                doc["extra_dropped"] = len(extra)
                text = json.dumps(doc, allow_nan=False)
            self._last_write = self._clock()
            try:
                self._atomic(self.heartbeat_path, text.encode())
                self.writes += 1
            except OSError as exc:
                self._error(f"writing {self.heartbeat_path}", exc)

    def _nan_event(self, step: Any, loss: float, tokens: Any) -> bool:
        """Write the event file of a NaN/Inf loss (within :data:`MAX_NAN_EVENTS`); whether it did."""
        if self.nan_events >= MAX_NAN_EVENTS or os.getpid() != self._pid:
            return False
        self.nan_events += 1
        tag = str(step) if type(step) is int and step >= 0 else f"x{self.nan_events}"
        path = self.run_dir / "events" / f"rank{self.rank:05d}-{tag}-nan.json"
        doc = {"kind": "nan", "rank": self.rank, "pid": self._pid, "step": jsonable(step)}
        doc.update({"loss": loss_json(loss), "time": self._wall(), "tokens": jsonable(tokens)})
        try:
            path.parent.mkdir(exist_ok=True)
            self._atomic(path, json.dumps(doc, allow_nan=False).encode())
        except OSError as exc:
            self._error(f"writing {path}", exc)
        return True

    @staticmethod
    def _atomic(path: Path, data: bytes) -> None:
        """Write ``data`` to ``path`` through a temporary file in its directory and ``os.replace``."""
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def _error(self, doing: str, exc: BaseException) -> None:
        self.errors += 1
        if self.errors == 1:
            why = (
                exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
            )
            print(
                f"robustctl.agent: rank {self.rank}: {doing}: {' '.join(str(why).split())[:200]} "
                "(further errors are counted, not printed)",
                file=sys.stderr,
                flush=True,
            )

    def _note(self, line: str) -> None:
        """Say once, on stderr, that a feature is off and why."""
        if line not in self.notes:
            self.notes.append(line)
            print(f"robustctl.agent: rank {self.rank}: {line}", file=sys.stderr, flush=True)

    # ---- background and signals ----------------------------------------------------------------------

    def _flush_loop(self) -> None:
        """The writer thread: a write the loop found due, or a held-back step once its interval passed."""
        tick = self.interval_s / 2 or None  # no rate limit: nothing is held back, every write is woken
        while True:
            self._wake.wait(tick)
            self._wake.clear()
            if self._stop.is_set():
                return
            if self._pending and (self._due or self._clock() - self._last_write >= self.interval_s):
                self._due = False
                try:
                    self._write()
                except Exception as exc:
                    self._error("writing the heartbeat", exc)

    def _start_flusher(self) -> None:
        if self._use_flusher:
            self._thread = threading.Thread(target=self._flush_loop, name="robustctl-agent", daemon=True)
            self._thread.start()

    def _start_stacks(self) -> None:
        """Dump every thread's stack to ``run_dir/stacks/rankRRRRR.txt`` on SIGUSR1 (faulthandler).

        Only from the main thread (Python installs signal handlers there only). A handler already
        installed for SIGUSR1 (Python's or another library's) is chained: it still runs after the
        dump; the default action (terminate) is not chained, so SIGUSR1 no longer kills the process.
        """
        if threading.current_thread() is not threading.main_thread():
            self._note("not started from the main thread: no stack dump on SIGUSR1")
            return
        path = self.run_dir / "stacks" / f"rank{self.rank:05d}.txt"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._stacks_file = open(path, "w", encoding="utf-8")
            previous = signal.getsignal(signal.SIGUSR1)
            chain = previous is not signal.SIG_DFL
            faulthandler.register(signal.SIGUSR1, file=self._stacks_file, all_threads=True, chain=chain)
        except (OSError, ValueError, RuntimeError) as exc:
            self._error(f"setting up the SIGUSR1 stack dump to {path}", exc)
            self._stop_stacks()

    def _stop_stacks(self) -> None:
        if self._stacks_file is None:
            return
        try:
            faulthandler.unregister(signal.SIGUSR1)
        except (ValueError, RuntimeError):
            pass
        self._stacks_file.close()
        self._stacks_file = None

    def _start_flight_recorder(self, entries: int) -> None:
        """Size Flight Recorder's ring (environment only: torch may be imported after start())."""
        warning = torchside.enable_flight_recorder(entries)
        if warning is not None:
            self._note(warning)

    def _start_torch(self, debug_server: bool | None, socket_dir: Path | None) -> None:
        """The debug server, when torch is in use."""
        self._torch = True
        if debug_server is False:
            return
        where = socket_dir if socket_dir is not None else self.run_dir / "debug"
        path = str(where / f"rank{self.rank:05d}.sock")
        self._server, why = torchside.start_worker_server(path)
        if self._server is not None:
            self.debug_socket = path
        elif why is not None:
            self._note(why)


def _wants_torch(torch: bool | None) -> bool:
    if torch is None:
        return "torch" in sys.modules
    if torch:
        try:
            import torch as _torch  # noqa: F401 (asked for: the one place torch is imported)
        except ImportError:
            return False
    return bool(torch)


def start(
    run_dir: str | os.PathLike[str],
    rank: int | None = None,
    *,
    local_rank: int | None = None,
    world_size: int | None = None,
    torch: bool | None = None,
    debug_server: bool | None = None,
    flight_recorder: int = 0,
    socket_dir: str | os.PathLike[str] | None = None,
    stacks_on_sigusr1: bool = True,
    interval_s: float = HEARTBEAT_INTERVAL_S,
    clock: Callable[[], float] = time.monotonic,
    flusher: bool = True,
) -> Agent:
    """Start this rank's agent. Call it once per process, before ``init_process_group``.

    Args:
        run_dir: directory for the heartbeat, events, stacks, Flight Recorder dumps and sockets
            (created).
        rank: this process's rank; default ``$RANK`` (0 when unset).
        local_rank: default ``$LOCAL_RANK`` (0).
        world_size: default ``$WORLD_SIZE`` (1).
        torch: use torch (debug server, Flight Recorder): True imports it, False never touches
            it, None (default) uses it only when the script has imported it already.
        debug_server: start the per-rank debug server when torch is in use (default: when the build
            has ``_WorkerServer``); False: never.
        flight_recorder: entries of Flight Recorder's ring per process group (0: leave it as it is):
            sets ``TORCH_FR_BUFFER_SIZE`` (and the older name), so it takes effect for the groups
            created after this call, whether torch is imported yet or not; a default process group
            that exists already is warned about (its ring was sized when it was created).
        socket_dir: where the debug socket goes instead of ``run_dir/debug`` (a shorter path).
        stacks_on_sigusr1: dump every thread's stack to ``run_dir/stacks/rankRRRRR.txt`` on SIGUSR1.
        interval_s: least time between heartbeat writes (:data:`HEARTBEAT_INTERVAL_S`).
        clock: monotonic seconds (tests inject one).
        flusher: run the background writer of a held-back step (tests of the rate limit turn it off).

    Returns:
        The :class:`Agent`; an I/O error on the way (a read-only ``run_dir``) is counted on it and
        reported once on stderr, not raised.

    Raises:
        ValueError: a rank, local rank or world size (given or from the environment) that is not a
            non-negative integer, a rank not below the world size, or ``interval_s`` < 0.
    """
    rank = _env_int("RANK", 0) if rank is None else rank
    local_rank = _env_int("LOCAL_RANK", 0) if local_rank is None else local_rank
    world_size = _env_int("WORLD_SIZE", max(1, rank + 1)) if world_size is None else world_size
    for name, value in (("rank", rank), ("local_rank", local_rank), ("world_size", world_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"robustctl.agent.start: {name} must be a non-negative integer, not {value!r}")
    if rank >= world_size:
        raise ValueError(f"robustctl.agent.start: rank {rank} is not below the world size {world_size}")
    if not interval_s >= 0:
        raise ValueError(f"robustctl.agent.start: interval_s must be >= 0, not {interval_s!r}")
    agent = Agent(
        run_dir,
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        interval_s=interval_s,
        clock=clock,
        flusher=flusher,
    )
    try:
        agent.run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        agent._error(f"creating {agent.run_dir}", exc)
    if stacks_on_sigusr1:
        agent._start_stacks()
    agent._torch_allowed = torch is not False
    if flight_recorder > 0:
        agent._start_flight_recorder(flight_recorder)
    if _wants_torch(torch):
        agent._start_torch(debug_server, Path(socket_dir) if socket_dir is not None else None)
    elif debug_server:
        agent._note("torch is not in use (not imported, or torch=False): no debug server")
    agent._start_flusher()
    atexit.register(agent.close)
    return agent
