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
import unicodedata
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape as rich_escape
from rich.text import Text

from robustctl.errors import ConfigError
from robustctl.models import Status, strict_jsonable

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
    """A console on stderr (highlighting off: verdict colours carry the meaning; emoji codes off:
    ``host:1234:1234`` in an NCCL line, or ``:smile:`` from a host, is text, not a picture).

    ``wide``: when stderr is not a terminal and ``$COLUMNS`` is unset, lay out to
    :data:`WIDE_COLUMNS` columns instead of 80, so a table piped to a file or a pager keeps whole
    rows (tables still take only the width they need).
    """
    console = Console(stderr=True, highlight=False, soft_wrap=False, emoji=False)
    if wide and not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = WIDE_COLUMNS
    return console


_SHOWN_ESCAPED = frozenset({"Cc", "Cf", "Cs", "Cn", "Zl", "Zp"})
"""Unicode categories :func:`printable` shows as escapes: controls (C0, DEL, C1: ``ESC``, ``CSI``,
``NUL``, ``CR``), format characters (the bidi embeddings and isolates U+202A-U+202E and
U+2066-U+2069, the marks U+200E/U+200F, zero-width U+200B-U+200D, the BOM U+FEFF, the tag characters
U+E0000-U+E007F), lone surrogates (not encodable: a file write would fail), unassigned code points
(a newer terminal may give them a meaning) and the line and paragraph separators U+2028/U+2029
(line breaks to some parsers). Each of them can move the cursor, recolour or retitle a terminal,
reorder or hide text on a page, or start a new line where a format allows none (Trojan Source,
CVE-2021-42574)."""

_SUSPECT = re.compile(r"[^\x20-\x7e]")
"""The characters whose category :func:`printable` looks up: anything but printable ASCII."""

_SUSPECT_BUT_LINES = re.compile(r"[^\t\n\x20-\x7e]")
""":data:`_SUSPECT` but tab and newline, which ``newlines=True`` keeps (the common case, made cheap)."""


def _shown(ch: str) -> str:
    if unicodedata.category(ch) not in _SHOWN_ESCAPED:
        return ch
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def printable(text: object, *, newlines: bool = True) -> str:
    """``str(text)`` with every character of :data:`_SHOWN_ESCAPED` shown as its escape: ``\\xNN``
    below U+0100 (ESC ``\\x1b``, NUL ``\\x00``, CR ``\\x0d``), else ``\\uNNNN`` (``\\u202e``, ``\\udce9``)
    or ``\\UNNNNNNNN`` (``\\U000e0041``).

    The one rule for text from hosts, users, files and the store before any output format but JSON
    (whose strings stay exact: ``json.dumps`` escapes them itself): the terminal (:func:`escape`,
    :func:`as_text`, :func:`plain`), the HTML report and the Prometheus textfile.

    Args:
        text: anything; converted with ``str`` first.
        newlines: keep newline and tab as they are (a terminal, HTML text); False shows them as
            ``\\x0a`` / ``\\x09`` too, for a format where a line break ends the record.

    Returns:
        Text with no raw control, bidi, zero-width, separator or surrogate character; everything
        else (printable ASCII, letters and symbols of any script) unchanged.
    """
    if newlines:
        return _SUSPECT_BUT_LINES.sub(lambda m: _shown(m.group()), str(text))
    return _SUSPECT.sub(lambda m: _shown(m.group()), str(text))


def escape(text: object) -> str:
    """``text`` made safe to embed in rich markup: data, never markup.

    Every string that came from a user, a file, a host or the store goes through this before rich
    renders it: ``[`` is escaped (:func:`rich.markup.escape`), so ``"[/]"`` or
    ``"[link=file:///etc/passwd]x[/link]"`` prints literally and never raises ``MarkupError``; control
    and bidi characters other than tab and newline (``ESC``, ``CSI``, ``BEL``, ``U+202E``, ...) are
    shown as escapes (:func:`printable`), so a host's output cannot move the cursor, recolour or
    retitle the user's terminal, nor reorder what it shows. ``None`` and other objects are converted
    with ``str`` first.
    """
    return rich_escape(printable(text))


def as_text(text: object) -> Text:
    """``text`` as a :class:`rich.text.Text` cell (no markup parsed; :func:`printable`)."""
    return Text(printable(text))


def plain(text: object) -> str:
    """``str(text)`` made :func:`printable` (tab and newline kept): for text written to a terminal
    without rich (the CLI's one-line errors)."""
    return printable(text)


def styled(status: Status) -> str:
    """Rich markup for a status word, e.g. ``[bold red]CRITICAL[/]``."""
    return f"[{STATUS_STYLE[status]}]{status.value.upper()}[/]"


def dump_json(obj: Any) -> str:
    """The JSON text of a result object (dataclasses and enums converted), sorted keys, 2-space indent.

    Strict RFC 8259 JSON: a non-finite float (a host that reported NaN or Infinity) is written as the
    string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` (:func:`robustctl.models.strict_jsonable`);
    strings are exact (controls and non-ASCII as ``\\uXXXX`` escapes).
    """
    return json.dumps(strict_jsonable(obj), indent=2, sort_keys=True, allow_nan=False, default=str)


def emit_json(obj: Any, *, to_stdout: bool, output: Path | None) -> None:
    """Write the JSON document to stdout and/or ``output``.

    Args:
        obj: the result object (dataclasses and enums converted, as :func:`dump_json` does).
        to_stdout: write the document to stdout (``--json``).
        output: the file to write it to as well (``--output``; None: none).

    Raises:
        ConfigError: ``output`` or stdout cannot be written (the message names which).
    """
    if output is None and not to_stdout:
        return  # nothing asked for: the document is not even built (a command without --json)
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

    Args:
        output: the ``--output`` path.
        text: the content, encoded as UTF-8 (unencodable characters as backslash escapes).

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

    On either error below, stdout is pointed at ``/dev/null`` first, so the interpreter's final
    flush of the unwritten buffer cannot fail a second time and print a traceback.

    Args:
        text: what to write.

    Raises:
        ConfigError: stdout cannot be written (a full disk, ``> /dev/full``, an I/O error): one line,
            exit 78 -- the output is where the user pointed it, not a host problem, so never 3.
        BrokenPipeError: the reader went away (``| head``); the CLI exits 0 for it.
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
