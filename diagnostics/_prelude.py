"""robustctl node-side probe prelude: what every probe shares, so that each probe holds only its collection.

Standalone (Python >= 3.8, stdlib only); never imports robustctl. It gives every probe the same

- :class:`Document`: the one JSON document a probe prints (``diagnostics/README.md``), at most once;
- :class:`Watchdog`: after the probe's ``--timeout`` it prints what was collected and exits 0. A probe
  that ran out of time says so the same way whichever probe it is: ``timed_out: true`` in the
  document, a ``timeout: ...`` line in ``errors``, and that line as ``data.error`` (unless the data
  already names an error, or says ``available: false``);
- common arguments (:func:`add_common_args`): ``--root``, ``--nvml-injection``, ``--timeout``;
- :func:`probe_main`: parse the arguments, start the watchdog, collect, print;
- the rank harness of the torch probes (``allreduce``, ``replay``): :func:`serve_rendezvous` (the
  listening socket rank 0's TCPStore serves on), :func:`make_store`, :func:`run_rank_processes`
  (one forked process per local rank, each rank's answer collected through a pipe before a
  deadline), :func:`gpu_count` and :func:`kill_children` (the watchdog's clean-up). torch is never
  imported here: the probe's rank function imports it inside the forked rank.

How a probe finds it (each probe starts with ``from _prelude import ...``):

- **streamed** (how robustctl runs probes): the control side sends ``python3 -`` this file, then one
  line ``run_streamed("host", "<the probe's source>")`` (``robustctl/probes.py``). :func:`run_streamed`
  registers this module as ``_prelude`` and runs the probe's ``main`` with the process's arguments.
- **by hand** (``python3 diagnostics/host.py --help``): Python puts the script's directory first on
  ``sys.path``, so the probe imports this file from beside it.
- **imported** by robustctl's tests and fakes: ``robustctl.probes.load_probe`` registers this file as
  ``_prelude`` before it loads the probe.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import socket
import sys
import threading
import time
import types
from typing import Any, Callable, Dict, Optional, Sequence

VERSION = 1
"""Version of the probe document envelope (``probe``, ``version``, ..., ``errors``, ``timed_out``)."""

RANK_JOIN_S = 5.0
"""Longest wait (s) for a rank process to exit once its answer came (or its deadline passed), and
again after killing one: a rank exits right after sending its answer, so a rank still there after
this is stuck and is killed."""

EXIT_HOOKS: list[Callable[[], None]] = []
"""Called (in order) by a watchdog that fired, after the document went out and before the process
exits: the bundle prints its own document there."""


class Document:
    """The probe's one JSON document; :meth:`emit` prints it at most once (thread-safe).

    Args:
        probe: the probe's name (``"host"``). finalize: called with ``data`` (under the lock) just
            before the document is printed, e.g. to mark what a timeout left undone.

    The printed document: ``{probe, version, hostname, time, elapsed_s, data, errors, timed_out}``.
    """

    def __init__(self, probe: str, finalize: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.probe = probe
        self.started = time.monotonic()
        self.data: dict[str, Any] = {}
        self.errors: list[str] = []
        self.timed_out = False
        self.finalize = finalize
        self._lock = threading.Lock()
        self._emitted = False

    def set(self, key: str, value: Any) -> None:
        """Set ``data[key]``."""
        with self._lock:
            self.data[key] = value

    def unavailable(self, reason: str, reason_code: str, **context: Any) -> None:
        """Say the probe cannot run here: ``available: false``, ``context``, ``reason``, ``reason_code``.

        The keys are set in that order (the document's key order).

        Args:
            reason: one line saying why.
            reason_code: a stable word the control side tests (``torch_missing``, ...).
            **context: keys set between ``available`` and ``reason`` (e.g. ``mode``).
        """
        self.set("available", False)
        for key, value in context.items():
            self.set(key, value)
        self.set("reason", reason)
        self.set("reason_code", reason_code)

    def error(self, message: object) -> None:
        """Add one line to ``errors`` (a failed sub-collection)."""
        with self._lock:
            self.errors.append(str(message))

    def emit(self, timeout_s: float | None = None) -> None:
        """Print the document (once; later calls do nothing).

        Args:
            timeout_s: the budget that ran out, when the watchdog prints it: the document then says
                ``timed_out: true`` and carries the ``timeout: ...`` line (see the module docstring).
        """
        with self._lock:
            if self._emitted:
                return
            self._emitted = True
            if timeout_s is not None:
                message = f"timeout: probe ran past its {timeout_s:.1f} s budget; partial data"
                self.timed_out = True
                self.errors.append(message)
                if not self.data.get("error") and self.data.get("available") is not False:
                    self.data["error"] = message
            if self.finalize is not None:
                self.finalize(self.data)
            doc = {
                "probe": self.probe,
                "version": VERSION,
                "hostname": socket.gethostname(),
                "time": time.time(),
                "elapsed_s": round(time.monotonic() - self.started, 6),
                "data": self.data,
                "errors": list(self.errors),
                "timed_out": self.timed_out,
            }
            sys.stdout.write(json.dumps(doc, default=str) + "\n")
            sys.stdout.flush()


class Watchdog:
    """After ``timeout_s`` (+ ``grace_s``): ``on_fire()``, print ``doc`` as timed out, exit 0.

    Args:
        doc: the document to print. timeout_s: the probe's budget (named in the timeout line).
        on_fire: called first, e.g. to kill forked children; its exceptions are ignored.
        grace_s: extra seconds before firing, for a probe that watches its own deadline and only
            needs the watchdog when something hangs past it.
    """

    def __init__(
        self,
        doc: Document,
        timeout_s: float,
        on_fire: Callable[[], None] | None = None,
        grace_s: float = 0.0,
    ) -> None:
        self.doc = doc
        self.timeout_s = timeout_s
        self.on_fire = on_fire
        self._timer = threading.Timer(max(0.0, timeout_s + grace_s), self.fire)
        self._timer.daemon = True

    def start(self) -> Watchdog:
        """Start counting; returns self."""
        self._timer.start()
        return self

    def cancel(self) -> None:
        """Stop counting (the probe finished in time)."""
        self._timer.cancel()

    def fire(self) -> None:
        """Print the timed-out document and end the process (``os._exit(0)``)."""
        if self.on_fire is not None:
            try:
                self.on_fire()
            except Exception:  # the document must go out whatever the clean-up does
                pass
        self.doc.emit(timeout_s=self.timeout_s)
        for hook in EXIT_HOOKS:
            try:
                hook()
            except Exception:
                pass
        os._exit(0)


def add_common_args(p: argparse.ArgumentParser, timeout_s: float | None, timeout_help: str = "") -> None:
    """The arguments every probe accepts (``diagnostics/README.md``, "Common arguments")."""
    p.add_argument(
        "--root",
        default=os.environ.get("ROBUSTCTL_PROBE_ROOT", "/"),
        help="prefix for every system file read (default: env ROBUSTCTL_PROBE_ROOT, else /)",
    )
    p.add_argument(
        "--nvml-injection",
        default=os.environ.get("ROBUSTCTL_NVML_INJECTION") or None,
        help="read GPU state from this NVML injection file instead of NVML",
    )
    default = f"default {timeout_s:g}" if timeout_s is not None else ""
    p.add_argument(
        "--timeout",
        type=float,
        default=timeout_s,
        help=f"time budget, seconds ({timeout_help or default})",
    )


def probe_main(
    name: str,
    add_args: Callable[[argparse.ArgumentParser], None],
    collect: Callable[[argparse.Namespace, Document], None],
    argv: Sequence[str] | None = None,
    *,
    description: str = "",
    timeout_s: float | None = 30.0,
    timeout_help: str = "",
    check_args: Callable[[argparse.Namespace, argparse.ArgumentParser], None] | None = None,
    on_timeout: Callable[[], None] | None = None,
    grace_s: float = 0.0,
    finalize: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """A probe's whole ``main``: arguments, document, watchdog, ``collect(args, doc)``, print.

    Args:
        name: the probe (``"host"``). add_args: adds the probe's own arguments to the parser.
        collect: fills the document; may raise (the traceback goes to stderr, exit status 1).
        argv: the arguments (default ``sys.argv[1:]``). timeout_s: ``--timeout`` default.
        check_args: validates/completes the parsed arguments (``parser.error`` exits 2); it must
            leave ``args.timeout`` a number.
        on_timeout, grace_s: see :class:`Watchdog`. finalize: see :class:`Document`.

    Returns:
        0 once the document was printed.
    """
    p = argparse.ArgumentParser(
        prog=f"{name}.py", description=description or f"robustctl {name} probe (one JSON document)."
    )
    add_common_args(p, timeout_s, timeout_help)
    add_args(p)
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    if check_args is not None:
        check_args(args, p)
    doc = Document(name, finalize)
    dog = Watchdog(doc, float(args.timeout), on_timeout, grace_s).start()
    try:
        collect(args, doc)
    finally:
        dog.cancel()
    doc.emit()
    return 0


def describe(exc: BaseException) -> str:
    """One line for an exception: ``PATH: strerror`` for OSErrors, else ``str(exc)``."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return str(exc) or type(exc).__name__


def one_line(exc: BaseException) -> str:
    """``"TypeName: first line of the message"`` (or the type name alone)."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


# --------------------------------------------------------------------------- torch rank processes
CHILDREN: list[Any] = []
"""Forked rank processes (:func:`run_rank_processes`), killed by :func:`kill_children` when the
probe's watchdog fires."""


def listening_socket(addr: str, port: int) -> socket.socket:
    """A TCP socket bound to ``addr:port`` (port 0: a free one) and listening.

    Args:
        addr: an IPv4 or IPv6 address of this host.
        port: the port, 0 for a free one.

    Returns:
        The listening socket.

    Raises:
        OSError: the address cannot be bound (in use, not this host's).
    """
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(128)
    return s


def listen_failure(addr: str, port: int | None, exc: OSError) -> str:
    """The error line of a rendezvous address that cannot be listened on.

    Args:
        addr: the address.
        port: the port asked for (None: a free one).
        exc: why it failed.

    Returns:
        ``cannot listen on ADDR:PORT: REASON``.
    """
    return f"cannot listen on {addr}:{port}: {exc.strerror or exc}"


def serve_rendezvous(cfg: dict[str, Any], doc: Document) -> socket.socket:
    """Listen on ``cfg["master_addr"]:cfg["master_port"]`` for rank 0's TCPStore.

    Args:
        cfg: the probe's config; ``master_port`` None or 0 asks for a free port, and the port
            taken is written back.
        doc: gets the port taken as ``master_port``.

    Returns:
        The listening socket (hand it to :func:`run_rank_processes`).

    Raises:
        OSError: the address cannot be bound (see :func:`listen_failure`).
    """
    sock = listening_socket(cfg["master_addr"], cfg["master_port"] or 0)
    cfg["master_port"] = sock.getsockname()[1]
    doc.set("master_port", cfg["master_port"])
    return sock


def make_store(dist: Any, cfg: dict[str, Any], rank: int, listen_fd: int | None) -> Any:
    """The rendezvous TCPStore: rank 0 serves it on the listening socket ``listen_fd``.

    Args:
        dist: ``torch.distributed``.
        cfg: ``master_addr``, ``master_port``, ``world`` (ranks) and ``rdzv_timeout`` (s).
        rank: the global rank.
        listen_fd: rank 0's listening socket (bound to master:port), owned and closed by the
            store from here; None for the other ranks.

    Returns:
        The ``torch.distributed.TCPStore`` (a client on ranks other than 0).
    """
    timeout = datetime.timedelta(seconds=cfg["rdzv_timeout"])
    addr, port, world = cfg["master_addr"], cfg["master_port"], cfg["world"]
    if rank == 0:
        try:
            return dist.TCPStore(
                addr, port, world, True, timeout, wait_for_workers=False, master_listen_fd=listen_fd
            )
        except TypeError:  # torch without master_listen_fd: let the store bind the port itself
            return dist.TCPStore(addr, port, world, True, timeout, wait_for_workers=False)
    return dist.TCPStore(addr, port, world, False, timeout)


RankFn = Callable[[Dict[str, Any], int, Optional[int]], Dict[str, Any]]
"""A probe's rank function: ``(cfg, rank, listen_fd) -> answer`` (a dict with ``rank`` and
``error``); it never raises."""


def _rank_child(run_rank: RankFn, cfg: dict[str, Any], rank: int, listen_fd: int | None, conn: Any) -> None:
    """Body of a forked rank: run it, send its answer through ``conn``, exit at once."""
    try:
        res = run_rank(cfg, rank, listen_fd)
    except BaseException as exc:  # pragma: no cover - a rank function does not raise
        res = {"rank": rank, "error": one_line(exc)}
    try:
        conn.send(res)
    finally:
        conn.close()
        os._exit(0)


def run_rank_processes(
    run_rank: RankFn,
    ranks: Sequence[tuple[int, dict[str, Any]]],
    sock: socket.socket | None,
    deadline: float,
) -> list[dict[str, Any]]:
    """Fork one process per ``(rank, cfg)``, collect every rank's answer before ``deadline``.

    Args:
        run_rank: what each forked process runs (:data:`RankFn`).
        ranks: each rank's global rank and its own config, in order.
        sock: the rendezvous socket (:func:`serve_rendezvous`) whose fd global rank 0 gets;
            closed here once the ranks are forked. None on a node without rank 0.
        deadline: the ``time.monotonic()`` by which every answer must have come.

    Returns:
        One answer per rank, in order. A rank without an answer gets ``{rank, error}``: "did not
        finish before the deadline" when it was still running (it is killed), else "exited with
        code N without an answer".
    """
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    procs: list[Any] = []
    pipes: list[Any] = []
    try:
        for rank, cfg in ranks:
            rcv, snd = ctx.Pipe(duplex=False)
            fd = sock.fileno() if (sock is not None and rank == 0) else None
            p = ctx.Process(target=_rank_child, args=(run_rank, cfg, rank, fd, snd))
            p.daemon = True
            p.start()
            snd.close()
            procs.append(p)
            CHILDREN.append(p)
            pipes.append(rcv)
    finally:
        if sock is not None:
            sock.close()
    answers: list[dict[str, Any] | None] = [None] * len(procs)
    for i, (p, rcv) in enumerate(zip(procs, pipes)):
        if rcv.poll(max(0.0, deadline - time.monotonic())):
            try:
                answers[i] = rcv.recv()
            except EOFError:
                answers[i] = None
        p.join(max(0.0, min(RANK_JOIN_S, deadline - time.monotonic())))
    out: list[dict[str, Any]] = []
    for (rank, _), p, ans in zip(ranks, procs, answers):
        if p.is_alive():
            p.kill()
            p.join(RANK_JOIN_S)
            if ans is None:
                ans = {"rank": rank, "error": "did not finish before the deadline"}
        elif ans is None:
            ans = {"rank": rank, "error": f"exited with code {p.exitcode} without an answer"}
        out.append(ans)
    return out


def import_distributed(doc: Document, **context: Any) -> Any:
    """Import ``torch.distributed``, or say in ``doc`` why the probe cannot run.

    Args:
        doc: marked unavailable (:meth:`Document.unavailable`): ``torch_missing`` without torch,
            ``no_distributed`` for a torch built without it.
        **context: passed to :meth:`Document.unavailable` (e.g. ``mode``).

    Returns:
        The ``torch.distributed`` module, or None when it cannot be used.
    """
    try:
        import torch.distributed as dist
    except ImportError:
        doc.unavailable("torch is not installed", "torch_missing", **context)
        return None
    if not dist.is_available():
        doc.unavailable("this torch build has no torch.distributed", "no_distributed", **context)
        return None
    return dist


def pick_backend(requested: str, dist: Any, ngpu: int) -> str:
    """The collective backend to use.

    Args:
        requested: ``gloo``, ``nccl`` or ``auto``.
        dist: ``torch.distributed``.
        ngpu: the GPUs torch sees (:func:`gpu_count`).

    Returns:
        ``requested``, or for ``auto``: ``nccl`` when torch sees GPUs and has NCCL, else ``gloo``
        (CPU processes).
    """
    if requested != "auto":
        return requested
    return "nccl" if ngpu > 0 and dist.is_nccl_available() else "gloo"


def gpu_count() -> int:
    """CUDA devices torch sees, without initialising CUDA (fork stays safe).

    Returns:
        The device count; 0 without torch or CUDA.
    """
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    try:
        import torch

        return int(torch.cuda.device_count()) if torch.backends.cuda.is_built() else 0
    except Exception:
        return 0


def kill_children() -> None:
    """Kill every rank process still running (the torch probes' watchdog clean-up)."""
    for p in CHILDREN:
        if p.is_alive():
            p.kill()


# --------------------------------------------------------------------------- streamed scripts
def load_source(name: str, source: str) -> types.ModuleType:
    """Run ``source`` as a new module ``name`` (registered in ``sys.modules``) and return it."""
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, f"{name}.py", "exec", dont_inherit=True), module.__dict__)
    return module


def hold_lifeline() -> None:
    """Kill this process's whole group (the probe and every child) when standard input ends.

    The control side keeps the probe's input open while it waits (``robustctl/probes.py``); the
    input ends when the run is over, interrupted, timed out, or the controller died, and then
    nothing the probe started may go on. The probe first leads its own process group (it already
    does when started by ``sshd`` or robustctl's local transport), so the kill reaches no one else.
    """
    try:
        os.setpgid(0, 0)
    except OSError:  # already a session leader: already leads its group
        pass

    def watch() -> None:
        try:
            while os.read(0, 65536):
                pass
        except (OSError, ValueError):
            pass
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="lifeline", daemon=True).start()


def run_streamed(name: str, source: str, *extra: Any) -> None:
    """Entry point of a streamed script: ``sys.exit(probe.main(sys.argv[1:], *extra))``.

    The control side appends one call of this to the prelude it streams (``robustctl/probes.py``);
    ``extra`` carries what a probe takes besides its arguments (the bundle's probe list). Started
    by robustctl's boot program (``ROBUSTCTL_LIFELINE`` set), it holds the lifeline first
    (:func:`hold_lifeline`).
    """
    if globals().get("ROBUSTCTL_LIFELINE"):
        hold_lifeline()
    sys.modules.setdefault("_prelude", sys.modules[__name__])
    module = load_source(name, source)
    sys.exit(module.main(sys.argv[1:], *extra))
