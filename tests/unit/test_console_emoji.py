"""The stderr console shows text from hosts as it is: no emoji codes, no markup from data."""

from __future__ import annotations

import pytest
from rich.markup import escape

from robustctl.report.console import stderr_console


def test_emoji_codes_in_host_text_stay_text(capsys: pytest.CaptureFixture[str]) -> None:
    console = stderr_console()
    console.print(escape("node1:1234:1234 [0] NCCL WARN NET/IB : :smile: :thumbs_up:"))
    err = capsys.readouterr().err
    assert "node1:1234:1234 [0] NCCL WARN NET/IB : :smile: :thumbs_up:" in err
    assert "\N{INPUT SYMBOL FOR NUMBERS}" not in err
