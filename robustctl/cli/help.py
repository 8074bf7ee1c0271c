"""What every command's ``--help`` shows beyond typer's defaults: examples, and switches without type tags.

Examples (the convention for every command): build the text with :func:`examples` and pass it as
``epilog=`` where the command is registered::

    EXAMPLES = examples(
        ("robustctl diagnose --dry-run", "show hosts, levels and commands; connect to nothing"),
        ("robustctl diagnose -i cluster.yaml --level 2 --json", "L0-L2 over SSH, JSON on stdout"),
    )
    app.command("diagnose", epilog=EXAMPLES)(diagnose)           # or @app.command("x", epilog=...)

One to three examples per command; each is one line of help (``$ COMMAND  # what it does``), its text
escaped so host ranges such as ``node[001-064]`` are shown as written. ``tests/unit/test_cli.py``
checks that every command and subcommand shows its description and at least one example.

Paragraphs: typer's rich help keeps the single line breaks of a docstring, so a docstring wrapped at
the source's width shows ragged at the terminal's. :func:`reflow_help` gives every command of an app
its docstring with the lines of each paragraph joined (blank lines still part paragraphs; a
paragraph starting with ``\b`` or indented lines, such as a list or an example, keep theirs).

Type tags: typer prints a type column (``<int>``, ``<bool>``) for every option, so switches such as
``--json`` or ``-v`` look as if they took a value. :func:`hide_switch_types` drops the tag for
flags and counters (options that take no value); options that take a value keep theirs.
"""

from __future__ import annotations

import inspect
import re

import typer
from rich.markup import escape

EXAMPLES_HEADING = "Examples:"
"""The first line of every epilog built by :func:`examples` (the help test looks for it)."""


def examples(*items: tuple[str, str]) -> str:
    """An epilog listing ``(command, what it does)`` pairs, one per line of help.

    Args:
        *items: one to three ``(command, what it does)`` pairs, in the order shown.

    Returns:
        The epilog: :data:`EXAMPLES_HEADING`, then ``$ COMMAND  # what it does`` per example
        (commands padded to one width, text escaped for rich), as paragraphs.

    Raises:
        ValueError: no example, or more than three.
    """
    if not 1 <= len(items) <= 3:
        raise ValueError(f"give one to three examples, not {len(items)}")
    width = max(len(cmd) for cmd, _ in items)
    lines = [f"$ {escape(cmd)}{' ' * (width - len(cmd))}  # {escape(why)}" for cmd, why in items]
    # typer's rich help joins single newlines: paragraphs (blank lines) keep one example per line
    return "\n\n".join([EXAMPLES_HEADING, *lines])


def reflow(doc: str) -> str:
    """``doc`` (a docstring, dedented) with the lines of each paragraph joined by spaces.

    Args:
        doc: the text; paragraphs are parted by blank lines.

    Returns:
        The text with one line per paragraph (an ``Exit:`` summary on a line of its own); a paragraph whose first line starts with ``\b``
        (click's "keep as is" mark) or that holds an indented line is kept as written.
    """
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    out = []
    for para in paragraphs:
        lines = para.split("\n")
        if para.startswith("\b") or any(line.startswith((" ", "\t")) for line in lines[1:]):
            out.append(para)
        else:
            joined = " ".join(line.strip() for line in lines)
            out.append(_EXIT_LINE.sub("\nExit:", joined))
    return "\n\n".join(out)


_EXIT_LINE = re.compile(r"(?<=\S) Exit:(?= \d)")
"""The ``Exit: 0 …, 1 …`` summary inside a paragraph: it keeps a line of its own."""


def reflow_help(app: typer.Typer) -> None:
    """Give every command of ``app`` (and of its sub-apps) its docstring reflowed (:func:`reflow`)
    as its help, unless the command was registered with a ``help=`` of its own.

    Args:
        app: the typer app, after its commands are registered.
    """
    for info in app.registered_commands:
        if info.help is None and info.callback is not None and info.callback.__doc__:
            info.help = reflow(info.callback.__doc__)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            reflow_help(group.typer_instance)


_patched = False


def hide_switch_types() -> None:
    """Show no type tag for options that take no value (flags, ``count=True``). Idempotent.

    Cosmetic only: a typer whose ``TyperOption`` has no ``display_type_rich`` hook (typer 0.27 and
    older, as some training images ship) keeps its own help, and the CLI runs the same.
    """
    global _patched
    if _patched:
        return
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None:
        _patched = True
        return

    def display_type_rich(self: TyperOption, ctx: object) -> str | None:
        if self.is_flag or self.count:
            return None
        tag: str | None = shown(self, ctx)
        return tag

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]
    _patched = True
