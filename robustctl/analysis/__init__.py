"""Offline analysis of saved artefacts: nccl-tests output, kernel logs with XID lines, ``dcgmi diag``.

Each artefact module parses one kind of text into frozen dataclasses and judges it with a pure
``evaluate`` function that returns a :class:`Verdict`; :mod:`robustctl.analysis.detect` recognises the
kind of a file from its content and builds the ``robustctl analyze`` report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from robustctl.models import Status

__all__ = ["Finding", "Verdict"]


@dataclass(frozen=True)
class Finding:
    """One observation about an artefact, with its own verdict.

    Attributes:
        status: how bad this one observation is.
        message: one human line, e.g. ``"XID 79 on 0000:3b:00 (GPU has fallen off the bus) -> evict"``.
        evidence: the values that led to it (JSON-serialisable).
        device: the GPU (PCI address or ``"GPU 3"``) the finding is about, when there is one.
    """

    status: Status
    message: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    device: str | None = None


@dataclass(frozen=True)
class Verdict:
    """The judgement of one parsed artefact.

    Attributes:
        status: worst of the findings (or the artefact's own state when there are none).
        summary: one human line for tables.
        findings: every observation, most severe first.
        details: the parsed artefact as plain JSON-ready data.
    """

    status: Status
    summary: str
    findings: tuple[Finding, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)


def sort_findings(findings: list[Finding]) -> tuple[Finding, ...]:
    """Return ``findings`` most severe first, keeping the original order among equals."""
    return tuple(sorted(findings, key=lambda f: -f.status.severity))
