"""A fake :class:`~robustctl.transport.base.Transport` for tests and plugin authors.

It answers probe runs from scripted per-host data instead of running anything, and raises the same
errors as the real transports (:class:`~robustctl.errors.HostUnreachable`,
:class:`~robustctl.errors.HostKeyError`, :class:`~robustctl.errors.CommandTimeout`), so engine
logic is tested without SSH. Real-SSH behaviour is covered by the integration tests.
"""

from __future__ import annotations

import ast
import functools
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from robustctl.errors import CommandTimeout
from robustctl.probes import PRELUDE, PROBES, probe_script, probe_source
from robustctl.transport.base import CommandResult

if TYPE_CHECKING:
    from robustctl.inventory import Host

Answer = Mapping[str, Any] | BaseException | CommandResult | Callable[[Sequence[str]], Any]
"""A scripted answer: the probe's ``data`` mapping, an exception to raise, a raw CommandResult,
or a callable receiving the probe argv and returning one of those."""


@dataclass
class FakeTransport:
    """Scripted transport.

    Args:
        answers: ``{host_name: {probe_name: Answer}}``; a missing probe answers ``{}``.
        delay_s: ``{host_name: seconds}`` to sleep before answering (past the timeout → CommandTimeout).

    Attributes:
        calls: ``(host_name, probe_name, argv)`` of every run, in order (thread-safe).
    """

    answers: dict[str, dict[str, Answer]] = field(default_factory=dict)
    delay_s: dict[str, float] = field(default_factory=dict)
    calls: list[tuple[str, str, list[str]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout_s: float,
        keep_stdin_open: bool = False,
    ) -> CommandResult:
        """Answer a probe run (identified by its streamed source, framed or not) from the script."""
        delay = self.delay_s.get(host.name, 0.0)
        if delay:
            time.sleep(min(delay, timeout_s))
            if delay >= timeout_s:
                raise CommandTimeout(host.name, f"command timed out after {timeout_s:g}s")
        name, extra = _streamed_call(_unframed(stdin or b""))
        if name == "bundle" and extra:
            return self._bundle(host, extra[0], _script_args(argv))
        return self._answer(host, name, list(argv))

    def _answer(self, host: Host, probe: str, argv: list[str]) -> CommandResult:
        with self._lock:
            self.calls.append((host.name, probe, argv))
        answer: Any = self.answers.get(host.name, {}).get(probe, {})
        if callable(answer) and not isinstance(answer, BaseException):
            answer = answer(argv)
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, CommandResult):
            return answer
        doc = {
            "probe": probe,
            "version": 1,
            "hostname": host.name,
            "time": time.time(),
            "data": answer,
            "errors": [],
        }
        return CommandResult(host.name, 0, json.dumps(doc).encode(), b"", 0.001)

    def _bundle(self, host: Host, payload: list[dict[str, Any]], common: list[str]) -> CommandResult:
        """Answer a ``diagnostics/bundle.py`` run: each probe from the script, one bundle document.

        Each probe's argv is ``[name, *the bundle's own arguments, *the probe's]``, as the bundle
        passes them.
        """
        results = []
        for p in payload:
            res = self._answer(host, p["name"], [p["name"], *common, *p["args"]])
            results.append(
                {
                    "name": p["name"],
                    "stdout": res.stdout.decode(),
                    "stderr": res.stderr.decode(),
                    "exit_code": res.exit_status,
                }
            )
        doc = {"probe": "bundle", "version": 1, "results": results}
        return CommandResult(host.name, 0, json.dumps(doc).encode(), b"", 0.001)

    def close(self) -> None:
        """Nothing to release."""


def _script_args(argv: Sequence[str]) -> list[str]:
    """The script's own arguments: those after ``python -c STREAM_BOOT`` (or ``python -``)."""
    args = list(argv)
    if "-c" in args:
        return args[args.index("-c") + 2 :]
    return args[args.index("-") + 1 :] if "-" in args else []


def _unframed(stdin: bytes) -> bytes:
    """The script of a :func:`robustctl.probes.framed` input (``LENGTH\\n`` + script); else ``stdin``."""
    head, sep, rest = stdin.partition(b"\n")
    if sep and head.isdigit() and int(head) == len(rest):
        return rest
    return stdin


@functools.lru_cache(maxsize=64)
def _streamed_call(stdin: bytes) -> tuple[str, list[Any]]:
    """``(probe name, extra arguments)`` of a streamed script (``robustctl.probes.probe_script``
    or ``bundle_script``), or ``("?", [])`` for anything else."""
    for name in PROBES:
        if stdin == probe_script(name):
            return name, []
    prelude = probe_source(PRELUDE)
    if not stdin.startswith(prelude):
        return "?", []
    try:
        last = ast.parse(stdin[len(prelude) :].decode()).body[-1]
        if not (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)):
            return "?", []
        args = [ast.literal_eval(a) for a in last.value.args]
    except (SyntaxError, ValueError, IndexError):
        return "?", []
    return (str(args[0]), args[2:]) if args else ("?", [])
