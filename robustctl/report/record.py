"""Rendering of what ``diagnose``/``stacks`` recorded in the state store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from robustctl.report.console import as_text

if TYPE_CHECKING:
    from rich.console import Console

    from robustctl.suspects import RecordResult


def render_recorded(recorded: RecordResult | None, console: Console, *, quiet: bool = False) -> None:
    """One line: what was recorded (unless ``quiet``) or, when the store could not be written, the
    warning naming the file (always). Nothing when recording was not asked for."""
    if recorded is None or (quiet and recorded.error is None):
        return
    console.print(as_text(recorded.summary()), highlight=False, soft_wrap=True)
