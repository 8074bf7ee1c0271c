"""A rich progress bar on stderr for fan-outs (shown only on a terminal)."""

from __future__ import annotations

import threading

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from robustctl.models import Outcome
from robustctl.report.console import escape


class RichProgress:
    """Implements :class:`robustctl.diagnose.ProgressSink` with a transient rich progress bar.

    Counts hosts that answered and those that did not; silent when ``console`` is not a terminal.
    """

    def __init__(self, console: Console, *, enabled: bool = True) -> None:
        self._console = console
        self._enabled = enabled and console.is_terminal
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._failed = 0
        self._lock = threading.Lock()

    def start(self, description: str, total: int) -> None:
        """Show a new bar of ``total`` units."""
        if not self._enabled:
            return
        self._failed = 0
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[failed]}"),
            TimeElapsedColumn(),
            console=self._console,
            transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task(escape(description), total=total, failed="")

    def advance(self, label: str, outcome: Outcome) -> None:
        """One unit finished."""
        with self._lock:
            if self._progress is None or self._task is None:
                return
            if outcome is not Outcome.OK:
                self._failed += 1
            failed = f"[magenta]{self._failed} not answering[/]" if self._failed else ""
            self._progress.update(self._task, advance=1, failed=failed)

    def stop(self) -> None:
        """Remove the bar."""
        if self._progress is not None:
            self._progress.stop()
        self._progress = None
        self._task = None
