"""The global ``-v`` state, and the shared options under their former home.

The options are declared in :mod:`robustctl.cli.options`; the names stay importable from here.
"""

from __future__ import annotations

from robustctl.cli.options import InventoryOpt, JsonOpt, NoRecordOpt, OutputOpt, StateOpt


class State:
    """Global options: ``-v``/``--verbose`` (anywhere on the command line, counted by ``main``), and
    the command being run (``"diagnose"``, ``"standby add"``), for the line an interruption prints."""

    verbose: int = 0
    command: str = ""


__all__ = [
    "InventoryOpt",
    "JsonOpt",
    "NoRecordOpt",
    "OutputOpt",
    "State",
    "StateOpt",
]
