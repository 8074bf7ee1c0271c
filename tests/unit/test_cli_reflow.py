"""Command help is reflowed: a docstring's paragraphs fill the terminal, not the source's width."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from robustctl.cli.help import reflow
from robustctl.cli.main import app


def test_lines_of_a_paragraph_are_joined_and_paragraphs_kept() -> None:
    doc = """Summary line.

    First paragraph wrapped
    at the source's width.

    Second one.
    Exit: 0 fine, 2 not.
    """
    assert reflow(doc) == (
        "Summary line.\n\nFirst paragraph wrapped at the source's width.\n\nSecond one.\nExit: 0 fine, 2 not."
    )


def test_indented_and_verbatim_paragraphs_are_kept() -> None:
    doc = "Summary.\n\nSteps:\n  1. one\n  2. two\n\n\b\nkeep\nthese"
    assert reflow(doc) == "Summary.\n\nSteps:\n  1. one\n  2. two\n\n\b\nkeep\nthese"


@pytest.mark.parametrize("argv", [["stacks", "--help"], ["analyze", "--help"], ["ckpt", "status", "--help"]])
def test_help_paragraphs_are_not_cut_at_the_sources_width(argv: list[str]) -> None:
    out = CliRunner().invoke(app, argv, env={"COLUMNS": "200", "NO_COLOR": "1"}).output
    body = [
        ln.strip()
        for ln in out.splitlines()
        if ln.strip() and not ln.lstrip().startswith(("│", "╭", "╰", "Usage"))
    ]
    long_lines = [ln for ln in body if len(ln) > 110]
    assert long_lines, out  # at 200 columns a paragraph runs past the source's ~100-character lines
