"""What every command's result has in common.

A result is a frozen dataclass with the fields ``kind`` (the JSON document's kind, e.g.
``"diagnose"``) and ``schema_version`` (:data:`robustctl.models.SCHEMA_VERSION`) and an
``exit_code`` property from :class:`robustctl.exit_codes.ExitCode`. Its JSON document is
:func:`result_json` (kept in :mod:`robustctl.models`, re-exported here); the CLI prints that with ``--json`` and renders the same object to stderr.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from robustctl.exit_codes import ExitCode
from robustctl.models import result_json

__all__ = ["CommandResult", "exit_code_of", "result_json"]


@runtime_checkable
class CommandResult(Protocol):
    """The shape every ``run_<command>`` result follows."""

    @property
    def kind(self) -> str:
        """The JSON document's ``kind``."""

    @property
    def schema_version(self) -> int:
        """The JSON document's ``schema_version``."""

    @property
    def exit_code(self) -> ExitCode:
        """The process exit code of this outcome (the one table in :mod:`robustctl.exit_codes`)."""


def exit_code_of(result: CommandResult) -> int:
    """The process exit code of ``result`` as an ``int`` (the CLI returns it)."""
    return int(result.exit_code)
