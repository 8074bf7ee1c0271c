"""Parse and judge ``dcgmi diag`` text output (DCGM 3.x and 4.x table layouts, and fragments).

DCGM 3.x (NVIDIA/DCGM#55, stas00/ml-engineering ``debug.md``) prints one row per test with the
result and the GPUs it applies to, continuation rows for more results, and ``Warning`` / ``Error``
/ ``Info`` rows whose text wraps over continuation rows::

    |-----  Deployment  --------+------------------------------------------------|
    | GPU Memory                | Pass - GPUs: 1, 2, 3, 4, 5, 6, 7               |
    |                           | Fail - GPU: 0                                  |
    | Warning                   | GPU 0 Thermal violations totaling 13.3 second  |
    |                           | s started at 9.7 seconds into the test for GP  |

DCGM 4.x (NVIDIA/DCGM#253, #124; DCGM user guide) prints lower-case plugin names, the overall
result, then one ``GPUn: Result`` continuation row per GPU::

    +-----  Integration  -------+------------------------------------------------+
    | pcie                      | Fail                                           |
    | Warning                   | There was an internal error during the test:   |
    |                           | GPU0: Pass                                     |

Rows without the header or the section lines (fragments pasted into tickets) parse the same way.

Verdict (:func:`evaluate`): a ``Fail`` result or an ``Error`` row -> CRITICAL, naming the GPUs that
failed or that the messages name; ``Warn`` (or a ``Warning`` row under a passing test) -> WARNING;
``Skip`` -> SKIPPED: "not checked", never OK. A failed test whose only messages are DCGM internal
errors while every GPU passed is UNKNOWN (the diagnostic itself broke, NVIDIA/DCGM#253). When no
GPU test ran (everything but the software/deployment checks skipped) the artefact is UNKNOWN.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from robustctl.analysis import Finding, Verdict, sort_findings
from robustctl.models import Status, to_jsonable

__all__ = [
    "DcgmDiag",
    "DcgmGpuResult",
    "DcgmResult",
    "DcgmTest",
    "evaluate",
    "looks_like_dcgm_diag",
    "parse_dcgm_diag",
]


class DcgmResult(str, Enum):
    """A DCGM test result."""

    PASS = "pass"  # noqa: S105 - a test result, not a password
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"
    ERROR = "error"
    """No result printed, but an ``Error`` row (e.g. a deployment check that could not run)."""

    @property
    def status(self) -> Status:
        """robustctl's state for this result (``SKIP`` is SKIPPED: not checked, never OK)."""
        return _RESULT_STATUS[self]


_RESULT_STATUS = {
    DcgmResult.PASS: Status.OK,
    DcgmResult.FAIL: Status.CRITICAL,
    DcgmResult.ERROR: Status.CRITICAL,
    DcgmResult.WARN: Status.WARNING,
    DcgmResult.SKIP: Status.SKIPPED,
}
_RESULT_WORDS = {
    "pass": DcgmResult.PASS,
    "fail": DcgmResult.FAIL,
    "warn": DcgmResult.WARN,
    "warning": DcgmResult.WARN,
    "skip": DcgmResult.SKIP,
    "error": DcgmResult.ERROR,
}


@dataclass(frozen=True)
class DcgmGpuResult:
    """The result of one test on one GPU (``gpu`` is DCGM's GPU id)."""

    gpu: int
    result: DcgmResult


@dataclass(frozen=True)
class DcgmTest:
    """One diagnostic test (a table row and its continuation rows).

    Attributes:
        name: as printed, e.g. ``"GPU Memory"`` (3.x) or ``"memory"`` (4.x); for an ``Error`` row
            with no test above it, the section name (``"Deployment"``) or ``"(unnamed)"``.
        section: ``"Deployment"``, ``"Hardware"``, ``"Integration"``, ``"Stress"`` or ``None``.
        result: the overall result: the worst of the printed results.
        gpu_results: per-GPU results (``Fail - GPU: 0``, ``GPU0: Pass``).
        all_gpus: the result printed for all GPUs (``Pass - All``), else ``None``.
        warnings, errors, info: ``Warning`` / ``Error`` / ``Info`` texts, continuation rows joined.
        gpus_named: GPU ids named in the warnings and errors (``"GPU 3 has ..."``).
        line: 1-based line of the test row.
    """

    name: str
    section: str | None
    result: DcgmResult
    gpu_results: tuple[DcgmGpuResult, ...] = ()
    all_gpus: DcgmResult | None = None
    warnings: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    info: tuple[str, ...] = ()
    gpus_named: tuple[int, ...] = ()
    line: int = 0

    @property
    def failed_gpus(self) -> tuple[int, ...]:
        """GPUs with a Fail/Error result, else those named in the messages of a failed test."""
        failed = tuple(g.gpu for g in self.gpu_results if g.result in (DcgmResult.FAIL, DcgmResult.ERROR))
        if failed:
            return failed
        if self.result in (DcgmResult.FAIL, DcgmResult.ERROR):
            return self.gpus_named
        return ()


@dataclass(frozen=True)
class DcgmDiag:
    """A parsed ``dcgmi diag`` output.

    Attributes:
        layout: ``"3.x"``, ``"4.x"`` or ``"unknown"`` (too little to tell).
        metadata: the Metadata section (``{"DCGM Version": "4.2.3", ...}``).
        tests: every test, in order.
        has_header: whether the ``| Diagnostic | Result |`` header was present.
    """

    layout: str
    metadata: dict[str, str] = field(default_factory=dict)
    tests: tuple[DcgmTest, ...] = ()
    has_header: bool = False


# --- parsing -----------------------------------------------------------------------------------

_SECTION_RE = re.compile(r"^\s*[|+]-{2,}\s+(?P<name>[A-Za-z][A-Za-z0-9 /_-]*?)\s+-+\+")
_BORDER_RE = re.compile(r"^\s*\+[-=+]+\+?\s*$")
_RESULT_RE = re.compile(
    r"^(?P<res>Pass|Fail|Warn|Warning|Skip|Error)\b\s*(?:-\s*(?:(?P<all>All)|GPUs?:\s*(?P<gpus>[\d,\s]+)))?\s*$",
    re.IGNORECASE,
)
_GPU_RESULT_RE = re.compile(
    r"^GPU\s*(?P<gpu>\d+)\s*:\s*(?P<res>Pass|Fail|Warn|Warning|Skip|Error)\s*$", re.IGNORECASE
)
_MESSAGE_LABEL_RE = re.compile(r"^(?P<label>Warning|Error|Info)\b", re.IGNORECASE)
_GPU_NAMED_RE = re.compile(r"\bGPU\s*(\d+)\b")
_METADATA_KEYS = ("dcgm version", "driver version detected", "gpu device ids detected")
_WORST = [DcgmResult.SKIP, DcgmResult.PASS, DcgmResult.WARN, DcgmResult.ERROR, DcgmResult.FAIL]


def looks_like_dcgm_diag(text: str) -> bool:
    """True when ``text`` has a ``dcgmi diag`` table row: the header or a ``| Name | Result ... |`` row."""
    for raw in text.splitlines()[:5000]:
        if "Successfully ran diagnostic" in raw:
            return True
        cells = _split_row(raw)
        if cells is None:
            continue
        left, right = cells[0].strip(), cells[1].strip()
        if left == "Diagnostic" and right.startswith("Result"):
            return True
        if _SECTION_RE.match(raw):
            return True
        if left and (_RESULT_RE.match(right) or _MESSAGE_LABEL_RE.match(left)):
            return True
    return False


class _Builder:
    """Mutable state of one test while its rows are read."""

    def __init__(self, name: str, section: str | None, line: int) -> None:
        self.name = name
        self.section = section
        self.line = line
        self.results: list[DcgmResult] = []
        self.gpu_results: list[DcgmGpuResult] = []
        self.all_gpus: DcgmResult | None = None
        self.messages: list[tuple[str, list[str]]] = []  # (label, chunks)
        self.chars = 0  # message text kept, bounded by _MAX_TEST_CHARS

    def take(self, chunk: str) -> bool:
        """True (and counted) when ``chunk`` still fits this test's message budget."""
        if self.chars + len(chunk) > _MAX_TEST_CHARS or len(self.messages) >= _MAX_ITEMS:
            return False
        self.chars += len(chunk)
        return True

    def add_result(self, text: str) -> bool:
        if len(self.results) + len(self.gpu_results) >= _MAX_ITEMS:
            return bool(_RESULT_RE.match(text) or _GPU_RESULT_RE.match(text))
        m = _RESULT_RE.match(text)
        if m is None:
            g = _GPU_RESULT_RE.match(text)
            if g is None:
                return False
            self.gpu_results.append(DcgmGpuResult(int(g.group("gpu")), _RESULT_WORDS[g.group("res").lower()]))
            return True
        res = _RESULT_WORDS[m.group("res").lower()]
        self.results.append(res)
        if m.group("all"):
            self.all_gpus = res
        elif m.group("gpus"):
            for tok in re.split(r"[,\s]+", m.group("gpus").strip()):
                if tok.isdigit():
                    self.gpu_results.append(DcgmGpuResult(int(tok), res))
        return True

    def build(self) -> DcgmTest:
        texts: dict[str, list[str]] = {"warning": [], "error": [], "info": []}
        for label, chunks in self.messages:
            texts[label].append(_join_chunks(chunks))
        results = list(self.results) + [g.result for g in self.gpu_results]
        if texts["error"]:
            results.append(DcgmResult.ERROR)
        result = max(results, key=_WORST.index) if results else DcgmResult.ERROR
        if result is DcgmResult.PASS and texts["warning"]:
            result = DcgmResult.WARN
        named: list[int] = []
        for t in texts["warning"] + texts["error"]:
            for g in _GPU_NAMED_RE.findall(t):
                if int(g) not in named:
                    named.append(int(g))
        return DcgmTest(
            name=self.name,
            section=self.section,
            result=result,
            gpu_results=tuple(self.gpu_results),
            all_gpus=self.all_gpus,
            warnings=tuple(texts["warning"]),
            errors=tuple(texts["error"]),
            info=tuple(texts["info"]),
            gpus_named=tuple(named),
            line=self.line,
        )


def _join_chunks(chunks: list[str]) -> str:
    """Rejoin text DCGM wrapped at a fixed width, mid-word (``"... 13.3 second" + "s started ..."``).

    Each chunk is the exact content of its cell (padding removed by :func:`_split_row`), so
    concatenation restores the text, spaces at chunk edges included.
    """
    return " ".join("".join(chunks).split())


def _split_row(raw: str) -> tuple[str, str] | None:
    """``(left, right)`` cells of a ``| left | right |`` row, ``None`` for other lines.

    ``right`` is the cell content without its padding: DCGM prints one space before and two after
    a fixed-width content field, and wraps long text mid-word at that width. A row cut before its
    closing ``|`` (a fragment) keeps its content as is.
    """
    line = raw.strip()
    if not line.startswith("|"):
        return None
    parts = line.split("|")
    if len(parts) < 3:
        return None
    left = parts[1]
    if len(parts) >= 4:
        inner = "|".join(parts[2:-1])
        right = inner[1:-2] if len(inner) >= 3 else inner.strip()
    else:
        right = parts[2][1:] if parts[2].startswith(" ") else parts[2]
    return left, right


MAX_TESTS = 1_000
"""Test rows kept by :func:`parse_dcgm_diag`; a real run has a few dozen (later ones are dropped)."""

_MAX_ITEMS = 256  # results, GPU results and message chunks kept per test
_MAX_META_CHARS = 64 * 1024
_MAX_TEST_CHARS = 64 * 1024  # message text kept per test (a real test's messages: a few KiB)


_VERSION_MAJOR_RE = re.compile(r"(\d{1,9})")
"""The major version at the start of ``DCGM Version`` (``4.4.2``, ``4rc1``): at most 9 digits, so
that a garbled value is never a huge integer to convert."""

_MAX_META_KEYS = 100
"""Metadata keys kept by :func:`parse_dcgm_diag`; a real run prints about ten."""


def parse_dcgm_diag(text: str | Iterable[str]) -> DcgmDiag:
    """Parse ``dcgmi diag`` text output. Never raises; lines outside the table are ignored.

    ``text`` may be the output's lines (e.g. a file being read); memory stays bounded whatever the
    input's size: at most :data:`MAX_TESTS` tests, 256 results and 64 KiB of message text
    per test, and 64 KiB per metadata value are kept.

    Args:
        text: the output, whole or as its lines (line ends stripped here).

    Returns:
        The parsed diagnostic; ``tests`` is empty when no test row was found.
    """
    parser = _DiagParser()
    lines = text.splitlines() if isinstance(text, str) else text
    for line_no, raw_line in enumerate(lines, start=1):
        parser.feed(line_no, raw_line.rstrip("\r\n"))
    return parser.finish()


class _DiagParser:
    """The state of :func:`parse_dcgm_diag` as it reads the table one line at a time."""

    def __init__(self) -> None:
        self.tests: list[DcgmTest] = []
        self.metadata: dict[str, str] = {}
        self.section: str | None = None
        self.current: _Builder | None = None
        self.message: list[str] | None = None  # chunks of the open Warning/Error/Info message
        self.has_header = False
        self.layout_4x = False
        self.layout_3x = False
        self.last_meta_key: str | None = None

    def close(self) -> None:
        """End the open test (kept while fewer than :data:`MAX_TESTS`) and its open message."""
        if self.current is not None and len(self.tests) < MAX_TESTS:
            self.tests.append(self.current.build())
        self.current, self.message = None, None

    def feed(self, line_no: int, raw: str) -> None:
        """Read one line (without its line end): a section line, a border, or a table row."""
        sm = _SECTION_RE.match(raw)
        if sm is not None:
            self.close()
            self.section = sm.group("name").strip()
            self.last_meta_key = None
            return
        if _BORDER_RE.match(raw):
            return
        cells = _split_row(raw)
        if cells is None:
            return
        left, right_raw = cells[0].strip(), cells[1]
        right = right_raw.strip()
        if left == "Diagnostic" and right.startswith("Result"):
            self.has_header = True
        elif (
            self.section is not None and self.section.lower() == "metadata"
        ) or left.lower() in _METADATA_KEYS:
            self._metadata_row(left, right)
        elif left:
            self._labelled_row(line_no, left, right_raw, right)
        else:
            self._continuation_row(line_no, right_raw, right)

    def _metadata_row(self, left: str, right: str) -> None:
        """A metadata row (``DCGM Version``, ...), or the continuation of the last one."""
        if left:
            if left in self.metadata or len(self.metadata) < _MAX_META_KEYS:
                self.metadata[left] = right[:_MAX_META_CHARS]
                self.last_meta_key = left
        elif self.last_meta_key is not None and len(self.metadata[self.last_meta_key]) < _MAX_META_CHARS:
            self.metadata[self.last_meta_key] += " " + right

    def _labelled_row(self, line_no: int, left: str, right_raw: str, right: str) -> None:
        """A row with a left cell: a ``Warning``/``Error``/``Info`` message of the open test, or
        a new test with its first result."""
        lm = _MESSAGE_LABEL_RE.match(left)
        if lm is not None and not _RESULT_RE.match(right) and not _GPU_RESULT_RE.match(right):
            if self.current is None:
                self.current = _Builder(self.section or "(unnamed)", self.section, line_no)
            self.message = [right_raw]
            if self.current.take(right_raw):
                self.current.messages.append((lm.group("label").lower(), self.message))
            else:
                self.message = None
            return
        self.close()
        current = self.current = _Builder(left, self.section, line_no)
        if right and not current.add_result(right) and current.take(right_raw):
            # A result cell we do not know: keep it as info rather than guess.
            current.messages.append(("info", [right_raw]))
        if _RESULT_RE.match(right) and "-" in right:
            self.layout_3x = True

    def _continuation_row(self, line_no: int, right_raw: str, right: str) -> None:
        """A row with an empty left cell: one more result (3.x) or GPU result (4.x) of the open
        test, the next chunk of its open message, or an info line."""
        current = self.current
        if current is None:
            if not (right and (_RESULT_RE.match(right) or _GPU_RESULT_RE.match(right))):
                return
            current = self.current = _Builder(self.section or "(unnamed)", self.section, line_no)
        if _GPU_RESULT_RE.match(right):
            self.layout_4x = True
            self.message = None
            current.add_result(right)
        elif _RESULT_RE.match(right):
            self.message = None
            current.add_result(right)
            self.layout_3x = True
        elif self.message is not None:
            if current.take(right_raw):
                self.message.append(right_raw)
        elif right and current.take(right_raw):
            current.messages.append(("info", [right_raw]))

    def finish(self) -> DcgmDiag:
        """Close the last test and name the layout: the metadata's DCGM version, else the rows
        seen (4.x ``GPUn:`` rows, 3.x ``Pass - GPUs:`` rows or capitalised test names)."""
        self.close()
        major = _VERSION_MAJOR_RE.match(self.metadata.get("DCGM Version", ""))
        if major is not None:
            layout = "4.x" if int(major.group(1)) >= 4 else "3.x"
        elif self.layout_4x:
            layout = "4.x"
        elif self.layout_3x or any(t.name[:1].isupper() for t in self.tests):
            layout = "3.x"
        else:
            layout = "unknown"
        return DcgmDiag(
            layout=layout, metadata=self.metadata, tests=tuple(self.tests), has_header=self.has_header
        )


# --- verdict -----------------------------------------------------------------------------------

_SOFTWARE_SECTIONS = {"deployment", "software"}
_INTERNAL_ERROR = "internal error"


def _test_status(test: DcgmTest) -> Status:
    status = test.result.status
    if status is Status.CRITICAL and not test.errors and test.warnings:
        gpus_ok = bool(test.gpu_results) and all(
            g.result in (DcgmResult.PASS, DcgmResult.SKIP) for g in test.gpu_results
        )
        if gpus_ok and all(_INTERNAL_ERROR in w.lower() for w in test.warnings):
            return Status.UNKNOWN
    return status


def _gpus_text(gpus: tuple[int, ...]) -> str:
    if not gpus:
        return "no GPU named"
    return ("GPU " if len(gpus) == 1 else "GPUs ") + ", ".join(str(g) for g in gpus)


def evaluate(diag: DcgmDiag) -> Verdict:
    """Judge one parsed ``dcgmi diag`` output (rules in the module docstring).

    Args:
        diag: the output as :func:`parse_dcgm_diag` parsed it.

    Returns:
        The verdict; one finding per test that did not pass (CRITICAL/WARNING/UNKNOWN/SKIPPED),
        each naming its GPUs in ``device``; ``details`` holds the parsed diagnostic.
    """
    details = dict(to_jsonable(diag))
    if not diag.tests:
        return Verdict(Status.UNKNOWN, "dcgmi diag: no test rows found", (), details)
    findings: list[Finding] = []
    counts: dict[str, int] = {}
    gpu_tests_checked = 0
    skipped: list[str] = []
    for test in diag.tests:
        status = _test_status(test)
        counts[test.result.value] = counts.get(test.result.value, 0) + 1
        software = (test.section or "").lower() in _SOFTWARE_SECTIONS or test.name.lower() == "software"
        if status is Status.SKIPPED:
            skipped.append(test.name)
            continue
        if not software:
            gpu_tests_checked += 1
        if status is Status.OK:
            continue
        gpus = test.failed_gpus if status is Status.CRITICAL else test.gpus_named
        messages = list(test.errors) + list(test.warnings)
        what = {
            Status.CRITICAL: "failed",
            Status.WARNING: "warning",
            Status.UNKNOWN: "could not run (DCGM internal error)",
        }.get(status, status.value)
        text = (
            f"{test.name}: {what} on {_gpus_text(gpus)}"
            if status is not Status.UNKNOWN
            else f"{test.name}: {what}"
        )
        if messages:
            text += f" - {messages[0]}"
        findings.append(
            Finding(
                status,
                text,
                {
                    "test": test.name,
                    "section": test.section,
                    "result": test.result.value,
                    "gpus": list(gpus),
                    "gpu_results": {str(g.gpu): g.result.value for g in test.gpu_results},
                    "errors": list(test.errors),
                    "warnings": list(test.warnings),
                },
                device=_gpus_text(gpus) if gpus else None,
            )
        )
    if skipped:
        findings.append(
            Finding(Status.SKIPPED, f"not checked (Skip): {', '.join(skipped)}", {"tests": skipped})
        )
    status = Status.worst(f.status for f in findings) if findings else Status.OK
    if status.severity <= Status.OK.severity and gpu_tests_checked == 0:
        status = Status.UNKNOWN
        findings.append(
            Finding(
                Status.UNKNOWN,
                "no GPU test ran: every hardware/integration/stress test was skipped",
                {"skipped": skipped},
            )
        )
    if status is Status.SKIPPED:
        status = Status.OK
    order = ["fail", "error", "warn", "pass", "skip"]
    parts = [f"{counts[k]} {k}" for k in order if k in counts]
    version = diag.metadata.get("DCGM Version")
    head = f"dcgmi diag ({'DCGM ' + version if version else diag.layout + ' layout'})"
    bad = [f for f in findings if f.status in (Status.CRITICAL, Status.WARNING, Status.UNKNOWN)]
    summary = f"{head}: {', '.join(parts)}"
    if bad:
        summary += f"; {bad[0].message.split(' - ')[0]}"
    return Verdict(status, summary, sort_findings(findings), details)
