"""What every command's result has in common.

A result is a frozen dataclass with the fields ``kind`` (the JSON document's kind, e.g.
``"diagnose"``) and ``schema_version`` (:data:`robustctl.models.SCHEMA_VERSION`) and an
``exit_code`` property from :class:`robustctl.exit_codes.ExitCode`. Its JSON document is
:func:`result_json`; the CLI prints that with ``--json`` and renders the same object to stderr.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from robustctl.exit_codes import ExitCode
from robustctl.models import to_jsonable


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


def result_json(result: CommandResult) -> dict[str, Any]:
    """The JSON document of ``result``: its fields (enums and tuples made plain) plus ``exit_code``.

    A result whose document is not simply its fields defines ``to_json() -> dict``, which is used
    as it is (it carries ``exit_code`` itself where its document has one): ``diagnose`` keeps the :class:`~robustctl.models.RunReport` fields at the top level;
    the action commands give the plan or apply document (:class:`robustctl.actions.session.ActionResult`).

    Raises:
        TypeError: the document has no ``kind`` and ``schema_version``.
    """
    to_json = getattr(result, "to_json", None)
    doc = to_json() if callable(to_json) else to_jsonable(result)
    if not isinstance(doc, dict) or "kind" not in doc or "schema_version" not in doc:
        raise TypeError(f"{type(result).__name__} is not a command result (needs kind and schema_version)")
    return doc
