"""Consoles and JSON output.

Tables, progress and logs go to stderr through rich; JSON documents go to stdout. rich honours
``NO_COLOR`` and disables styling and live displays when the stream is not a terminal.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape as rich_escape
from rich.text import Text

from robustctl.errors import ConfigError
from robustctl.models import Status, to_jsonable

STATUS_STYLE: dict[Status, str] = {
    Status.OK: "green",
    Status.WARNING: "yellow",
    Status.CRITICAL: "bold red",
    Status.UNKNOWN: "magenta",
    Status.NOT_APPLICABLE: "dim",
    Status.SKIPPED: "dim",
}


WIDE_COLUMNS = 200
"""Width of a ``wide`` console whose stream is not a terminal (rich's own default there is 80)."""


def stderr_console(*, wide: bool = False) -> Console:
    """A console on stderr (highlighting off: verdict colours carry the meaning).

    ``wide``: when stderr is not a terminal and ``$COLUMNS`` is unset, lay out to
    :data:`WIDE_COLUMNS` columns instead of 80, so a table piped to a file or a pager keeps whole
    rows (tables still take only the width they need).
    """
    console = Console(stderr=True, highlight=False, soft_wrap=False)
    if wide and not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = WIDE_COLUMNS
    return console


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""C0 and C1 control characters except tab and newline (ESC and CSI among them)."""


def escape(text: object) -> str:
    """``text`` made safe to embed in rich markup: data, never markup.

    Every string that came from a user, a file, a host or the store goes through this before rich
    renders it: ``[`` is escaped (:func:`rich.markup.escape`), so ``"[/]"`` or
    ``"[link=file:///etc/passwd]x[/link]"`` prints literally and never raises ``MarkupError``; control
    characters other than tab and newline (``ESC``, ``CSI``, ``BEL``, ...) are shown as ``\\xNN``, so a
    host's output cannot move the cursor, recolour or retitle the user's terminal. ``None`` and
    other objects are converted with ``str`` first.
    """
    return rich_escape(plain(text))


def as_text(text: object) -> Text:
    """``text`` as a :class:`rich.text.Text` cell (no markup parsed; control characters as ``\\xNN``)."""
    return Text(plain(text))


def plain(text: object) -> str:
    """``str(text)`` with control characters other than tab and newline shown as ``\\xNN``: for text
    written to a terminal without rich (the CLI's one-line errors)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def styled(status: Status) -> str:
    """Rich markup for a status word, e.g. ``[bold red]CRITICAL[/]``."""
    return f"[{STATUS_STYLE[status]}]{status.value.upper()}[/]"


def dump_json(obj: Any) -> str:
    """The JSON text of a result object (dataclasses and enums converted), sorted keys, 2-space indent."""
    return json.dumps(to_jsonable(obj), indent=2, sort_keys=True, allow_nan=False, default=str)


def emit_json(obj: Any, *, to_stdout: bool, output: Path | None) -> None:
    """Write the JSON document to stdout and/or ``output``.

    Raises:
        ConfigError: ``output`` or stdout cannot be written (the message names which).
    """
    text = dump_json(obj) + "\n"
    if output is not None:
        write_output(output, text)
    if to_stdout:
        write_stdout(text)


def write_output(output: Path, text: str) -> None:
    """Write ``text`` to the file ``output`` (``--output``), created or truncated.

    The file is opened without blocking: a FIFO nobody reads (``mkfifo x; -o x``) is refused at once
    (ENXIO) instead of hanging the command; a pipe with a reader (``-o >(jq .)``) or a terminal is
    written normally.

    Raises:
        ConfigError: ``output`` cannot be opened or written (the message names it and why).
    """
    data = text.encode("utf-8", "backslashreplace")
    try:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        why = "a FIFO with no reader" if exc.errno == errno.ENXIO else exc.strerror
        raise ConfigError(f"{output}: cannot write: {why}") from None
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        raise ConfigError(f"{output}: cannot write: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def write_stdout(text: str) -> None:
    """Write ``text`` to stdout and flush it.

    Raises:
        ConfigError: stdout cannot be written (a full disk, ``> /dev/full``, an I/O error): one line,
            exit 78 -- the output is where the user pointed it, not a host problem, so never 3.
        BrokenPipeError: the reader went away (``| head``); the CLI exits 0 for it.

    On either error stdout is pointed at ``/dev/null`` first, so the interpreter's final flush of
    the unwritten buffer cannot fail a second time and print a traceback.
    """
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_to_devnull()
        raise
    except OSError as exc:
        _stdout_to_devnull()
        raise ConfigError(f"cannot write output to stdout: {exc.strerror or exc}") from None


def _stdout_to_devnull() -> None:
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError):  # no real file descriptor (a test's capture): nothing to protect
        pass
