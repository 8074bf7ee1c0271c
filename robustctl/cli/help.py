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

Type tags: typer prints a type column (``<int>``, ``<bool>``) for every option, so switches such as
``--json`` or ``-v`` look as if they took a value. :func:`hide_switch_types` drops the tag for
flags and counters (options that take no value); options that take a value keep theirs.
"""

from __future__ import annotations

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
