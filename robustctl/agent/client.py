"""Ask a rank's debug server for one handler's answer: HTTP over a unix socket, standard library only.

The server is the one :func:`robustctl.agent.start` starts per rank (``RUN_DIR/debug/rankRRRRR.sock``,
its path in the heartbeat's ``debug_socket``): PyTorch's ``c10d._WorkerServer``, which answers
``POST /handler/NAME[?param=value&...]`` with the handler's bytes (status 200), 404 for a name it does
not know and 500 with the handler's error text. :func:`fetch` is what a node-side probe runs on the
rank's host (the control side reaches it over its transport): bounded in time and size.

The module imports only the standard library and nothing of robustctl, so the control side can
stream its source to a host's ``python3 -`` as it streams a probe (no robustctl installed there):
``python3 - SOCKET HANDLER [TIMEOUT_S [MAX_BYTES]]`` writes the answer's bytes to stdout and exits
0, or writes one line to stderr and exits 3 (could not check) or 64 (bad arguments).
"""

from __future__ import annotations

import http.client
import re
import socket
import sys
import time
import urllib.parse
from collections.abc import Mapping

__all__ = ["MAX_ERROR_CHARS", "MAX_RESPONSE_BYTES", "FetchError", "fetch", "main"]

MAX_RESPONSE_BYTES = 16 * 1024 * 1024
"""Most bytes of one answer (a larger one is an error): a Flight Recorder dump of 2,000 entries, the
largest ring people run (``TORCH_FR_BUFFER_SIZE=2000``), is ~1.5 MB of JSON with stack frames; a
py-spy dump of a rank with 200 threads ~200 KB."""
MAX_ERROR_CHARS = 300
"""Longest server text quoted in a :class:`FetchError`."""

_HANDLER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


class FetchError(Exception):
    """The debug server could not be asked or did not answer: no socket, refused, timed out, an
    answer other than 200, or one over the size bound. The message is one line naming the socket."""


class _UnixConnection(http.client.HTTPConnection):
    """An HTTP connection whose transport is the unix socket ``path``."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.unix_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def _one_line(data: bytes) -> str:
    return " ".join(data.decode("utf-8", "replace").split())[:MAX_ERROR_CHARS]


def fetch(
    socket_path: str,
    handler: str,
    timeout_s: float = 10.0,
    *,
    params: Mapping[str, str] | None = None,
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> bytes:
    """The answer of ``handler`` from the debug server on ``socket_path``.

    Args:
        socket_path: the rank's socket (the heartbeat's ``debug_socket``).
        handler: a handler name (``dump_traceback``, ``pyspy_dump``, ``fr_trace_json``, ``ping``).
        timeout_s: the whole exchange's deadline, seconds (connect, send, every read).
        params: query parameters the handler reads (``pyspy_dump``: ``native``, ``subprocesses``).
        max_bytes: most bytes accepted.

    Returns:
        The answer's body.

    Raises:
        ValueError: ``handler`` is not a handler name, or ``timeout_s`` is not positive.
        FetchError: see :class:`FetchError`.
    """
    if not _HANDLER.fullmatch(handler):
        raise ValueError(f"not a debug-server handler name: {handler[:80]!r}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, not {timeout_s!r}")
    deadline = time.monotonic() + timeout_s
    query = f"?{urllib.parse.urlencode(dict(params))}" if params else ""
    conn = _UnixConnection(socket_path, timeout_s)
    where = f"debug server {socket_path}"
    try:
        conn.request("POST", f"/handler/{handler}{query}", body=b"", headers={"Connection": "close"})
        resp = conn.getresponse()
        length = resp.getheader("Content-Length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            raise FetchError(f"{where}: {handler} answers {length} bytes, over the {max_bytes} bound")
        chunks: list[bytes] = []
        got = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise FetchError(f"{where}: {handler} did not answer within {timeout_s:g} s")
            if conn.sock is not None:
                conn.sock.settimeout(left)
            chunk = resp.read1(65536)
            if not chunk:
                break
            got += len(chunk)
            if got > max_bytes:
                raise FetchError(f"{where}: {handler} answers more than {max_bytes} bytes")
            chunks.append(chunk)
        body = b"".join(chunks)
        if resp.status != 200:
            raise FetchError(f"{where}: {handler} answered {resp.status} {resp.reason}: {_one_line(body)}")
        return body
    except FetchError:
        raise
    except TimeoutError:
        raise FetchError(f"{where}: {handler} did not answer within {timeout_s:g} s") from None
    except (OSError, http.client.HTTPException) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise FetchError(f"{where}: {handler}: {' '.join(why.split())[:MAX_ERROR_CHARS]}") from None
    finally:
        conn.close()


def main(argv: list[str]) -> int:
    """``SOCKET HANDLER [TIMEOUT_S [MAX_BYTES]]``: the answer on stdout (see the module docstring).

    Args:
        argv: the arguments after the program's name.

    Returns:
        0 with the answer written, 3 when the server could not be asked, 64 for bad arguments.
    """
    try:
        if not 2 <= len(argv) <= 4:
            raise ValueError("usage: SOCKET HANDLER [TIMEOUT_S [MAX_BYTES]]")
        timeout_s = float(argv[2]) if len(argv) > 2 else 10.0
        max_bytes = int(argv[3]) if len(argv) > 3 else MAX_RESPONSE_BYTES
        body = fetch(argv[0], argv[1], timeout_s, max_bytes=max_bytes)
    except ValueError as exc:
        print(f"robustctl.agent.client: {exc}", file=sys.stderr)
        return 64
    except FetchError as exc:
        print(f"robustctl.agent.client: {exc}", file=sys.stderr)
        return 3
    sys.stdout.buffer.write(body)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
