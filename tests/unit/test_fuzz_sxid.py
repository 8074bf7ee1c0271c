"""Property-based tests for the NVSwitch SXid parser (robustctl.analysis.sxid).

Contract: no exception on any text; state bounded on an endless flood (open events, kept
continuation lines); every well-formed generated header line parses back to its fields, whatever
prefix (dmesg, syslog, ISO journal) and whatever continuation lines follow it. Seeded and bounded by
the ``ci`` profile (tests/conftest.py).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.analysis.sxid import (
    MAX_CONTINUATION_LINES,
    MAX_OPEN_EVENTS,
    SXidParser,
    parse_sxid,
)
from robustctl.models import Status

pytestmark = pytest.mark.fuzz

PREFIXES = st.sampled_from(
    [
        "",
        "[ 8123.456789] ",
        "May 19 07:08:57 dgx-01 kernel: ",
        "2024-05-19T07:08:57.123+00:00 dgx-01 kernel: ",
        "kern  :err   : 2025-01-25T10:34:54,859532+00:00 ",
        "127.0.0.1: kern:     err: [2026-04-22T21:25:20.466440686Z]: ",
    ]
)
HEX2 = st.integers(0, 255).map(lambda v: f"{v:02x}")
PCI = st.tuples(st.integers(0, 0xFFFF), HEX2, HEX2, st.integers(0, 7)).map(
    lambda t: f"{t[0]:04x}:{t[1]}:{t[2]}.{t[3]}"
)
# Messages as the driver prints them: words that are not a Fatal/Link/Severity/Data keyword.
MESSAGE = st.lists(
    st.text(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/-()", min_size=1, max_size=12
    ).filter(
        lambda w: (
            w.lower() not in ("fatal", "link", "port", "severity", "data", "non-fatal", "nonfatal")
            and not w.lower().startswith(("non", "fatal"))
        )
    ),
    min_size=1,
    max_size=6,
).map(" ".join)
HEADER = st.fixed_dictionaries(
    {
        "prefix": PREFIXES,
        "switch": st.integers(0, 63),
        "pci": PCI,
        "code": st.integers(10000, 99999),
        "fatal": st.booleans(),
        "link": st.none() | st.integers(0, 127),
        "message": MESSAGE,
        "continuations": st.integers(0, 3),
    }
)


@given(st.text(max_size=400))
def test_any_text_never_raises(text: str) -> None:
    for e in parse_sxid(text):
        assert isinstance(e.code, int) and e.severity in tuple(Status)


@given(
    st.text(max_size=120), st.sampled_from(["SXid", "nvidia-nvswitch1: SXid (", "SXid (PCI:", "): 24007, "])
)
def test_text_around_sxid_words_never_raises(text: str, word: str) -> None:
    parse_sxid(word + text + "\n" + text + word)


@given(HEADER)
def test_well_formed_line_parses_back_to_its_fields(h: dict[str, object]) -> None:
    word = "Fatal" if h["fatal"] else "Non-fatal"
    link = f"Link {h['link']} " if h["link"] is not None else ""
    head = f"nvidia-nvswitch{h['switch']}: SXid (PCI:{h['pci']}): {h['code']}"
    lines = [f"{h['prefix']}{head}, {word}, {link}{h['message']}"]
    n = int(h["continuations"])  # type: ignore[call-overload]
    lines += [f"{h['prefix']}{head}, Severity 1 Engine instance 03 Sub-engine instance 00"] * min(n, 1)
    lines += [f"{h['prefix']}{head}, Data {{0x00000000, 0x10008100}}"] * max(n - 1, 0)
    (e,) = parse_sxid(lines)
    assert (e.switch, e.pci, e.code) == (f"nvidia-nvswitch{h['switch']}", h["pci"], h["code"])
    assert (e.fatal, e.link, e.message) == (h["fatal"], h["link"], h["message"])
    assert e.continuation_count == n and e.header_seen
    if h["fatal"]:
        assert e.severity is Status.CRITICAL


@given(st.integers(1, 4), st.integers(0, 2**16))
def test_state_stays_bounded_on_an_endless_flood(kinds: int, seed: int) -> None:
    parser = SXidParser()
    emitted = 0
    biggest = 0
    for i in range(MAX_OPEN_EVENTS * 20):
        s = (seed + i) % (MAX_OPEN_EVENTS * 4)
        pci = f"0000:{s % 256:02x}:00.0"
        if i % kinds:
            line = f"nvidia-nvswitch{s}: SXid (PCI:{pci}): 24007, Data {{0x{i:08x}}}"
        else:
            line = (
                f"nvidia-nvswitch{s}: SXid (PCI:{pci}): 24007, Fatal, Link {i % 64} sourcetrack timeout error"
            )
        emitted += len(parser.feed(line))
        assert parser.open_events <= MAX_OPEN_EVENTS
    rest = parser.close()
    for e in rest:
        biggest = max(biggest, len(e.continuation))
    assert biggest <= MAX_CONTINUATION_LINES and emitted + len(rest) > 0
