"""What the agent asks of PyTorch, when the process has it: the per-rank debug server and Flight Recorder.

Every function here imports torch inside itself and only when the caller decided torch is in use
(:func:`robustctl.agent.start`'s ``torch`` argument): importing this module costs nothing.

* **Debug server**: ``torch._C._distributed_c10d._WorkerServer(path, -1)`` (PyTorch ≥ 2.4, what
  ``torch.distributed.debug.start_debug_server`` starts on every rank, there on a TCP port) serves
  HTTP on a unix socket from a C++ thread: ``POST /handler/NAME`` runs a registered handler. The
  builds of 2.13 register ``ping``, ``dump_traceback`` (every Python thread's stack, taken with the
  GIL, so a rank blocked in a collective, which releases it, answers), ``pyspy_dump`` (runs
  ``py-spy dump`` on its own PID: needs py-spy on the rank's PATH, not ptrace rights of an outsider),
  ``fr_trace_json`` (the Flight Recorder, below) and ``wait_counter_values``. The agent's socket is
  ``RUN_DIR/debug/rankRRRRR.sock`` in a directory only the job's user may enter
  (:data:`SOCKET_DIR_MODE`): whoever reaches the socket can read every stack and run py-spy.
* **Flight Recorder**: each process group records its last ``TORCH_FR_BUFFER_SIZE`` collectives
  (``TORCH_NCCL_TRACE_BUFFER_SIZE`` before 2.6) when the variable is set before the group is
  created: gloo groups as well as NCCL ones. :func:`flight_recorder_json` reads this rank's ring
  (``_dump_fr_trace_json``, ``_dump_nccl_trace_json`` before it) as torch's own JSON dump.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import Any

__all__ = [
    "FR_ENV_VARS",
    "MAX_SOCKET_PATH_BYTES",
    "SOCKET_DIR_MODE",
    "distributed_initialized",
    "enable_flight_recorder",
    "flight_recorder_json",
    "start_worker_server",
    "stop_worker_server",
]

MAX_SOCKET_PATH_BYTES = 107
"""Longest unix socket path, in bytes: ``sockaddr_un.sun_path`` holds 108 on Linux with the
terminating NUL (``unix(7)``); a longer path is cut by the C++ server or refused by ``bind``, so the
agent refuses it first and says so."""
SOCKET_DIR_MODE = 0o700
"""Mode of the debug sockets' directory: only the job's user may connect (a socket's own mode is not
honoured by every system, its directory's is)."""
FR_ENV_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
"""The variables that size Flight Recorder's ring (entries per process): the name of 2.6 and later,
and the one before it (``distributed_c10d.py`` reads the second when the first is unset)."""


def distributed_initialized() -> bool:
    """Whether ``torch.distributed``'s default process group exists already (False without torch).

    Returns:
        True once ``init_process_group`` has run in this process.
    """
    dist = sys.modules.get("torch.distributed")
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:  # a torch build without the call: not initialised as far as anyone can tell
        return False


def enable_flight_recorder(entries: int) -> str | None:
    """Size Flight Recorder's ring to ``entries`` for the process groups created from now on.

    Args:
        entries: collectives kept per process group (> 0).

    Returns:
        None, or a one-line warning when the default process group exists already (its ring was
        sized when it was created: call :func:`robustctl.agent.start` before ``init_process_group``).
    """
    version = _installed_torch_version()
    # 2.6 and later read the new name and warn that the old one is deprecated: set only what this
    # torch reads (both when its version cannot be told)
    names = FR_ENV_VARS[:1] if version is not None and version >= (2, 6) else FR_ENV_VARS
    for var in names:
        os.environ[var] = str(entries)
    if distributed_initialized():
        return (
            "Flight Recorder asked for after init_process_group: groups created before start() record "
            "nothing; call robustctl.agent.start() before torch.distributed.init_process_group()"
        )
    return None


def _installed_torch_version() -> tuple[int, int] | None:
    """(major, minor) of the torch this process runs or would import, without importing it; None
    when torch is not installed or its version cannot be read."""
    torch = sys.modules.get("torch")
    text = getattr(torch, "__version__", None) if torch is not None else None
    if not isinstance(text, str):
        try:
            from importlib.metadata import version

            text = version("torch")
        except Exception:  # not installed, or metadata unreadable: unknown
            return None
    parts = text.split("+", 1)[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def _c10d() -> Any:
    import torch._C._distributed_c10d as c10d

    return c10d


def start_worker_server(path: str) -> tuple[Any, str | None]:
    """Start a ``_WorkerServer`` on the unix socket ``path`` (a stale socket file there is replaced).

    Args:
        path: the socket's path (at most :data:`MAX_SOCKET_PATH_BYTES` bytes).

    Returns:
        ``(server, None)``, or ``(None, why)``: the path is too long, a non-socket file is in its
        place, this torch build has no ``_WorkerServer``, or it failed to start.
    """
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH_BYTES:
        return None, (
            f"debug socket path {path} is {size} bytes, over the {MAX_SOCKET_PATH_BYTES} a unix socket "
            "path may have: give start() a shorter run_dir or socket_dir"
        )
    try:
        server_cls = _c10d()._WorkerServer
    except (ImportError, AttributeError):
        return None, "this torch build has no c10d _WorkerServer (PyTorch >= 2.4): no debug server"
    try:
        os.makedirs(os.path.dirname(path) or ".", mode=SOCKET_DIR_MODE, exist_ok=True)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISSOCK(st.st_mode):
                return None, f"{path} exists and is not a socket: no debug server"
            os.unlink(path)  # a socket left by an earlier run of this rank
        return server_cls(path, -1), None
    except Exception as exc:  # the C++ server's own error (bind, listen) or the directory's
        return None, f"debug server on {path} did not start: {' '.join(str(exc).split())[:200]}"


def stop_worker_server(server: Any, path: str) -> None:
    """Shut ``server`` down and remove its socket file (the C++ server leaves it).

    Args:
        server: what :func:`start_worker_server` returned.
        path: its socket path.
    """
    try:
        server.shutdown()
    finally:
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)
        except OSError:
            pass


def flight_recorder_json() -> bytes:
    """This rank's Flight Recorder ring as torch's JSON dump (``entries``, ``pg_config``,
    ``pg_status``, ``version``, ...), collectives included, completed ones too.

    Returns:
        The JSON document's bytes.

    Raises:
        RuntimeError: this torch build has no Flight Recorder dump.
    """
    c10d = _c10d()
    for name in ("_dump_fr_trace_json", "_dump_nccl_trace_json"):
        dump = getattr(c10d, name, None)
        if dump is not None:
            out = dump(True, False)  # includeCollectives, onlyActive
            return out if isinstance(out, bytes) else str(out).encode()
    raise RuntimeError("this torch build has no Flight Recorder JSON dump (_dump_fr_trace_json)")
