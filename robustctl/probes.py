"""Run a node-side probe (``diagnostics/<name>.py``) on a host and return its JSON document.

What a host's Python reads (with the host's optional wrapper, e.g. ``docker exec -i trainer``) is
one script: the shared prelude (``diagnostics/_prelude.py``), then one line calling its
``run_streamed`` with the probe's name and source (:func:`probe_script`; the bundle of several
probes: :func:`bundle_script`). Hosts need no robustctl install. See ``diagnostics/README.md``.

The script is sent framed (:func:`framed`: its length, a newline, the script) to ``python3 -c``
:data:`STREAM_BOOT`, which reads exactly that many bytes and runs them, so standard input stays
open afterwards: the probe's lifeline. When it closes (the run ended, was interrupted, or the
controller died), the probe kills its own process group (``_prelude.hold_lifeline``).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import shutil
import sys
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from robustctl.errors import HostError, ProbeError

if TYPE_CHECKING:
    from robustctl.inventory import Host
    from robustctl.transport.base import CommandResult, Transport
    from robustctl.transport.srun import SrunTransport

PROBES = (
    "host",
    "nvml",
    "burn",
    "allreduce",
    "stacks",
    "bundle",
    "replay",
    "ckpt",
    "jobprocs",
    "launch",
    "shard",
)
"""Probes shipped in ``diagnostics/``."""

PRELUDE = "_prelude"
"""The module every probe imports its scaffolding from (``diagnostics/_prelude.py``)."""


@dataclass(frozen=True)
class ProbeDocument:
    """A probe's parsed output.

    Attributes:
        probe: probe name. data: the observation (see each probe's docstring). errors: failed
        sub-collections. host_time: the host's clock (UNIX s) when it printed. sent_at/received_at:
        control-side clock (UNIX s) around the command, for clock-skew estimates. elapsed_s: command
        wall seconds.
    """

    probe: str
    data: dict[str, Any]
    errors: tuple[str, ...]
    host_time: float | None
    sent_at: float
    received_at: float
    elapsed_s: float
    timed_out: bool = False
    """The probe ran out of its own ``--timeout`` (its data is partial; ``data["error"]`` says so)."""


@functools.cache
def probe_source(name: str) -> bytes:
    """The source of probe ``name`` (or of the prelude, ``"_prelude"``). Raises ValueError for an unknown probe."""
    if name not in PROBES and name != PRELUDE:
        raise ValueError(f"unknown probe {name!r}")
    return resources.files("robustctl").joinpath("_probes").joinpath(f"{name}.py").read_bytes()


def _streamed(name: str, *extra: Any) -> bytes:
    """The prelude, then ``run_streamed(name, <source of name>, *extra)`` (Python literals)."""
    call = ", ".join(repr(x) for x in (name, probe_source(name).decode("utf-8"), *extra))
    return probe_source(PRELUDE) + f"\nrun_streamed({call})\n".encode()


STREAM_BOOT = (
    "import sys;_i=sys.stdin.buffer;_n=int(_i.readline());ROBUSTCTL_LIFELINE=1;"
    "exec(compile(_i.read(_n),'<stdin>','exec'))"
)
"""The ``python3 -c`` program that runs a framed script from standard input and leaves the input
open as the probe's lifeline (Python >= 3.8; the prelude sees ``ROBUSTCTL_LIFELINE``)."""


def framed(script: bytes) -> bytes:
    """``script`` as :data:`STREAM_BOOT` reads it: its length in bytes, a newline, the script."""
    return b"%d\n" % len(script) + script


@functools.cache
def probe_script(name: str) -> bytes:
    """What a host's ``python3 -`` reads to run probe ``name``: the prelude, then the probe.

    Raises ValueError for an unknown probe.
    """
    return _streamed(name)


def streamed_script(name: str, *extra: Any) -> bytes:
    """What a host's ``python3 -`` reads to run probe ``name`` with ``extra`` arguments for its
    ``main`` (Python literals), e.g. the process list of ``launch`` or the ``stacks`` source that
    ``jobprocs`` scans with.

    Raises ValueError for an unknown probe.
    """
    return _streamed(name, *extra)


def bundle_script(probes: Sequence[tuple[str, Sequence[str]]]) -> bytes:
    """What a host's ``python3 -`` reads to run ``probes`` (name, own arguments) in one process.

    The bundle passes its own arguments (the host's common ones, :func:`probe_argv`) to every probe
    ahead of the probe's own.
    """
    payload = [{"name": n, "args": list(a), "source": probe_source(n).decode("utf-8")} for n, a in probes]
    return _streamed("bundle", payload)


@functools.cache
def load_probe(name: str) -> types.ModuleType:
    """Probe ``name`` as a module of this process (tests, and ``FakeNvml``, which runs the nvml
    probe's injection reader). The prelude is registered first as module ``_prelude``, the name the
    probe imports it by; the probe's ``main`` is not run.

    Raises ValueError for an unknown probe.
    """
    if PRELUDE not in sys.modules:
        _exec_module(PRELUDE, PRELUDE)
    return _exec_module(name, f"_robustctl_probe_{name}")


def _exec_module(name: str, module_name: str) -> types.ModuleType:
    if name not in PROBES and name != PRELUDE:
        raise ValueError(f"unknown probe {name!r}")
    path = resources.files("robustctl").joinpath("_probes").joinpath(f"{name}.py")
    spec = importlib.util.spec_from_file_location(module_name, str(path))
    if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has a loader
        raise ValueError(f"cannot load probe {name!r} from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def beside_interpreter(program: str) -> str | None:
    """``program`` installed beside the Python running robustctl (its virtual environment's ``bin``),
    when it is not on ``PATH``; None otherwise.

    For probes run by the local transport without a wrapper: they run on this machine with this
    process's ``PATH``, but under the host's ``python3``, so they cannot look beside this
    interpreter themselves (e.g. ``py-spy`` installed in ``.venv`` with robustctl).
    """
    if shutil.which(program):
        return None
    for exe in (sys.executable, os.path.realpath(sys.executable or "")):
        if exe:
            cand = os.path.join(os.path.dirname(exe), program)
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                return cand
    return None


def probe_argv(host: Host, args: Sequence[str] = ()) -> list[str]:
    """``wrapper + [python, "-c", STREAM_BOOT, *common_args, *args]`` for ``host``: what runs a
    :func:`framed` script there."""
    common: list[str] = []
    if host.probe_root:
        common += ["--root", host.probe_root]
    return [*host.python.wrapper, host.python.path, "-c", STREAM_BOOT, *common, *args]


ANSWER_MARGIN_S = 2.0
"""A probe's ``--timeout`` is its host deadline minus this margin, for the answer to travel back."""


def budget_s(deadline: float) -> str:
    """A probe's ``--timeout``: seconds left until ``deadline`` (a ``time.monotonic()`` instant) minus
    :data:`ANSWER_MARGIN_S`, at least 1, as the probe's argument text."""
    return f"{max(1.0, deadline - time.monotonic() - ANSWER_MARGIN_S):.0f}"


def command_deadline(host: Host, deadline: float) -> float:
    """The deadline of one command on ``host``: ``deadline``, or sooner when the host's
    ``ssh.command_timeout_s`` ends first (SSH hosts; the transport stops the command then, so the
    probe's own ``--timeout`` must end before it, to report what it has)."""
    if host.transport == "ssh":
        return min(deadline, time.monotonic() + host.ssh.command_timeout_s)
    return deadline


def run_probe(
    transport: Transport,
    host: Host,
    name: str,
    args: Sequence[str] = (),
    *,
    deadline: float,
    extra: Sequence[Any] = (),
) -> ProbeDocument:
    """Run probe ``name`` on ``host`` and parse its document.

    Args:
        transport: runs the command on ``host``.
        host: the inventory host (its Python, wrapper and probe root).
        name: the probe (``diagnostics/NAME.py``).
        args: the probe's own arguments, after the host's common ones (``--root``).
        deadline: ``time.monotonic()`` instant by which the probe must have answered.
        extra: what the probe's ``main`` takes besides its arguments (:func:`streamed_script`).

    Returns:
        The probe's document: its data, its errors, the host's clock and the control side's times
        around the command.

    Raises:
        HostUnreachable: from the transport.
        HostKeyError: from the transport.
        CommandTimeout: from the transport.
        ProbeError: the probe exited non-zero without a document, or printed something else
            (message: one line, e.g. the exception line of its traceback).
    """
    timeout = max(0.5, deadline - time.monotonic())
    sent = time.time()
    res = transport.run(
        host,
        probe_argv(host, args),
        stdin=framed(streamed_script(name, *extra) if extra else probe_script(name)),
        timeout_s=timeout,
        keep_stdin_open=True,
    )
    received = time.time()
    doc = parse_document(res.stdout, name)
    if doc is None:
        raise ProbeError(host.name, f"probe {name} failed: {_failure(res, host)}")
    return _document(name, doc, sent, received, res.elapsed_s)


def run_probes(
    transport: Transport, host: Host, probes: Sequence[tuple[str, Sequence[str]]], *, deadline: float
) -> list[ProbeDocument | ProbeError]:
    """Run several probes in ONE remote Python process (``diagnostics/bundle.py``), in order.

    Halves the remote interpreter starts of a level that needs several probes per host (L0: host
    and nvml). Every probe gets the host's common arguments (``--root``) as when run alone.

    Args:
        transport: runs the command on ``host``.
        host: the inventory host (its Python, wrapper and probe root).
        probes: ``(probe name, its arguments)`` of each probe, in the order they run.
        deadline: ``time.monotonic()`` instant by which the bundle must have answered.

    Returns:
        One entry per probe, in order: its document, or the :class:`ProbeError` that says why it has
        none; the other probes' documents are kept.

    Raises:
        HostUnreachable: from the transport.
        HostKeyError: from the transport.
        CommandTimeout: from the transport.
        ProbeError: the bundle itself crashed or printed no bundle document.
    """
    script = bundle_script(probes)
    timeout = max(0.5, deadline - time.monotonic())
    sent = time.time()
    res = transport.run(host, probe_argv(host), stdin=framed(script), timeout_s=timeout, keep_stdin_open=True)
    return _bundle_documents(res, host, probes, sent, time.time())


def _bundle_documents(
    res: CommandResult, host: Host, probes: Sequence[tuple[str, Sequence[str]]], sent: float, received: float
) -> list[ProbeDocument | ProbeError]:
    """Each probe's document (or why it has none) from one bundle command's output."""
    bundle = parse_document(res.stdout, "bundle")
    if bundle is None:
        names = ", ".join(n for n, _ in probes)
        raise ProbeError(host.name, f"probes {names} failed: {_failure(res, host)}")
    raw = bundle.get("results")
    results: list[Any] = raw if isinstance(raw, list) else []
    out: list[ProbeDocument | ProbeError] = []
    for i, (name, _) in enumerate(probes):
        entry = results[i] if i < len(results) and isinstance(results[i], dict) else {}
        doc = parse_document(str(entry.get("stdout", "")).encode(), name)
        if doc is None:
            tail = [ln.strip() for ln in str(entry.get("stderr", "")).splitlines() if ln.strip()]
            why = tail[-1][:200] if tail else f"exit status {entry.get('exit_code')}, no output"
            if i >= len(results):  # the bundle ended early: a watchdog fired in an earlier probe
                why = "not run: an earlier probe of the bundle ran out of time"
            out.append(ProbeError(host.name, f"probe {name} failed: {why}"))
            continue
        out.append(_document(name, doc, sent, received, res.elapsed_s))
    return out


def run_probes_batch(
    transport: SrunTransport,
    hosts: Sequence[Host],
    probes: Sequence[tuple[str, Sequence[str]]],
    *,
    deadline: float,
) -> dict[str, list[ProbeDocument | ProbeError] | HostError]:
    """:func:`run_probes` on many hosts at once: one srun step per group of hosts with the same
    command line (the same Python, wrapper and ``--root``).

    Returns, by host name, the probes' documents (as :func:`run_probes`) or the
    :class:`~robustctl.errors.HostError` that says why the host has none (unreachable, timed out,
    the bundle crashed). Never raises for a host.
    """
    script = framed(bundle_script(probes))
    groups: dict[tuple[str, ...], list[Host]] = {}
    for h in hosts:
        groups.setdefault(tuple(probe_argv(h)), []).append(h)
    out: dict[str, list[ProbeDocument | ProbeError] | HostError] = {}
    for argv, members in groups.items():
        timeout = max(0.5, deadline - time.monotonic())
        sent = time.time()
        answers = transport.run_batch(members, list(argv), stdin=script, timeout_s=timeout)
        received = time.time()
        for h in members:
            res = answers[h.name]
            if isinstance(res, HostError):
                out[h.name] = res
                continue
            try:
                out[h.name] = _bundle_documents(res, h, probes, sent, received)
            except ProbeError as exc:
                out[h.name] = exc
    return out


def run_probe_batch(
    transport: SrunTransport, hosts: Sequence[Host], name: str, args: Sequence[str], *, deadline: float
) -> dict[str, ProbeDocument | HostError]:
    """:func:`run_probe` on many hosts at once (one srun step per group of hosts with the same
    command line); by host name, the document or the error that says why there is none."""
    script = framed(probe_script(name))
    groups: dict[tuple[str, ...], list[Host]] = {}
    for h in hosts:
        groups.setdefault(tuple(probe_argv(h, args)), []).append(h)
    out: dict[str, ProbeDocument | HostError] = {}
    for argv, members in groups.items():
        timeout = max(0.5, deadline - time.monotonic())
        sent = time.time()
        answers = transport.run_batch(members, list(argv), stdin=script, timeout_s=timeout)
        received = time.time()
        for h in members:
            res = answers[h.name]
            if isinstance(res, HostError):
                out[h.name] = res
                continue
            doc = parse_document(res.stdout, name)
            out[h.name] = (
                _document(name, doc, sent, received, res.elapsed_s)
                if doc is not None
                else ProbeError(h.name, f"probe {name} failed: {_failure(res, h)}")
            )
    return out


def _failure(res: CommandResult, host: Host) -> str:
    """One line saying why a command printed no probe document."""
    out = res.stdout.decode("utf-8", "replace").strip()
    if res.exit_status == 0 and out:
        why = f"printed no JSON document (output starts {out.splitlines()[0][:80]!r})"
    else:
        why = res.stderr_tail() or f"exit status {res.exit_status}, no output"
    if res.exit_status == 127 or "No such file" in why or "not found" in why:
        why = f"cannot start {host.python.path!r}: {why}"
    return why


def _errors(errors: Any) -> tuple[str, ...]:
    """A document's ``errors``: a list of lines (one line when a host sent a single string)."""
    if isinstance(errors, list):
        return tuple(str(e) for e in errors)
    return (errors,) if isinstance(errors, str) and errors else ()


def _document(name: str, doc: dict[str, Any], sent: float, received: float, elapsed: float) -> ProbeDocument:
    data = doc.get("data")
    return ProbeDocument(
        probe=name,
        data=data if isinstance(data, dict) else {},
        errors=_errors(doc.get("errors")),
        host_time=float(doc["time"]) if isinstance(doc.get("time"), (int, float)) else None,
        sent_at=sent,
        received_at=received,
        elapsed_s=elapsed,
        timed_out=doc.get("timed_out") is True,
    )


def _not_a_number(token: str) -> None:
    """``NaN``, ``Infinity`` and ``-Infinity`` from a host read as null (see :func:`host_json`)."""
    return None


def _finite(text: str) -> float | None:
    """A JSON number as a float; one past the float range (``1e999``) reads as null."""
    value = float(text)
    return value if math.isfinite(value) else None


def host_json(text: str) -> Any:
    """Parse JSON a host printed, reading every non-finite number (``NaN``, ``Infinity``, ``-Infinity``,
    ``1e999``) as null.

    A value a host could not measure is unread, never a number a threshold can be compared with:
    every comparison with NaN is false, so a NaN temperature or clock would otherwise pass every
    check as healthy. Checks treat null as not reported (UNKNOWN or NOT_APPLICABLE, never OK), and
    every document robustctl writes stays strict JSON.

    Args:
        text: the JSON text.

    Returns:
        The parsed value, non-finite numbers as None.

    Raises:
        ValueError: not JSON, or nested deeper than the parser's recursion limit.
    """
    try:
        return json.loads(text, parse_constant=_not_a_number, parse_float=_finite)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None


def parse_document(stdout: bytes, name: str) -> dict[str, Any] | None:
    """The probe document in ``stdout``: the last line that is a JSON object naming probe ``name``,
    parsed by :func:`host_json` (non-finite numbers read as null)."""
    text = stdout.decode("utf-8", "replace").strip()
    if not text:
        return None
    candidates = [text, *reversed(text.splitlines())]
    for cand in candidates:
        cand = cand.strip()
        if not cand.startswith("{"):
            continue
        try:
            obj = host_json(cand)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("probe") == name:
            return obj
    return None
