"""XID catalog and kernel-log parser, on the real sample (tests/data/kernel-log, see SOURCE.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from robustctl.analysis.xid import (
    ACTION_CHECK_USER_CODE,
    ACTION_EVICT,
    ACTION_INVESTIGATE,
    ACTION_NONE,
    ACTION_RESET_GPU,
    CATALOG,
    XidCategory,
    classify,
    parse_kernel_log,
)
from robustctl.models import Status

DATA = Path(__file__).resolve().parents[1] / "data" / "kernel-log"


def test_real_sample_every_xid_line_parsed() -> None:
    events = parse_kernel_log((DATA / "xid-lines.txt").read_text())
    got = [(e.pci, e.xid, e.pid, e.process) for e in events]
    assert got == [
        ("0000:10:1c", 63, 1850, None),
        ("0000:90:1c", 64, None, None),
        ("0000:07:00", 48, None, None),  # pid='<unknown>', name=<unknown>
        ("0000:07:00", 64, None, None),
        ("0000:01:00", 31, None, None),
        ("0000:01:00", 31, None, None),
    ]


def test_real_sample_messages_timestamps_hosts() -> None:
    events = parse_kernel_log((DATA / "xid-lines.txt").read_text())
    first = events[0]
    assert first.message == "Row Remapper: New row marked for remapping, reset gpu to activate"
    assert first.timestamp == "May 19 07:08:57"
    assert first.host == "ip-26-0-146-100"
    assert events[1].message == "..."
    assert events[2].message.startswith("An uncorrectable double bit error (DBE)")
    assert events[2].host == "worker4"
    assert events[4].timestamp == "170.053881"  # bare dmesg: the uptime
    assert events[4].host is None
    assert events[4].message == "Ch 00000013, engmask 00000101, intr 10000000"
    assert all(e.raw.rstrip() in (DATA / "xid-lines.txt").read_text() for e in events)


def test_real_sample_categories() -> None:
    events = parse_kernel_log((DATA / "xid-lines.txt").read_text())
    cats = {e.xid: (e.category, e.action) for e in events}
    assert cats[48] == (XidCategory.HARDWARE, ACTION_EVICT)
    assert cats[63] == (XidCategory.HARDWARE, ACTION_EVICT)
    assert cats[64] == (XidCategory.HARDWARE, ACTION_EVICT)
    assert cats[31] == (XidCategory.APPLICATION, ACTION_CHECK_USER_CODE)


def test_crafted_forms() -> None:
    events = parse_kernel_log((DATA / "crafted-forms.txt").read_text())
    by_line = [(e.pci, e.xid, e.pid, e.process) for e in events]
    assert by_line == [
        ("0000:2b:00", 79, None, None),
        ("0000:3b:00", 13, 22914, "python3"),
        ("0000:3b:00", 31, 1234, "pt_main_thread"),  # MIG `GPU-I:01` suffix
        ("0000:01:00", 94, 4411, "python"),  # no `PCI:` prefix
        ("0000:b4:00", 95, None, None),
        ("0000:b4:00", 154, None, None),
        ("0000:b4:00", 154, None, None),
        ("0000:18:00", 119, 3001, "nvidia-smi"),
        ("0000:18:00", 200, 3001, "python3"),
    ]
    assert events[0].timestamp == "May 18 19:02:39" and events[0].host is None  # journal, no host
    assert events[1].timestamp == "2024-05-19T07:08:57.123456+00:00" and events[1].host == "node017"
    assert events[1].message.startswith("Graphics SM Warp Exception")


def test_xid_154_recovery_action() -> None:
    events = [e for e in parse_kernel_log((DATA / "crafted-forms.txt").read_text()) if e.xid == 154]
    to_reset, back_to_none = events
    assert to_reset.severity is Status.CRITICAL
    assert "GPU Reset Required" in to_reset.info.name
    assert back_to_none.action == ACTION_NONE and back_to_none.severity is Status.OK


@pytest.mark.parametrize(
    ("code", "category", "action"),
    [
        (48, XidCategory.HARDWARE, ACTION_EVICT),
        (63, XidCategory.HARDWARE, ACTION_EVICT),
        (64, XidCategory.HARDWARE, ACTION_EVICT),
        (74, XidCategory.HARDWARE, ACTION_EVICT),
        (79, XidCategory.HARDWARE, ACTION_EVICT),
        (92, XidCategory.HARDWARE, ACTION_EVICT),
        (94, XidCategory.HARDWARE, ACTION_EVICT),
        (95, XidCategory.HARDWARE, ACTION_EVICT),
        (119, XidCategory.HARDWARE, ACTION_EVICT),
        (120, XidCategory.HARDWARE, ACTION_EVICT),
        (136, XidCategory.HARDWARE, ACTION_EVICT),
        (140, XidCategory.HARDWARE, ACTION_EVICT),
        (143, XidCategory.HARDWARE, ACTION_EVICT),
        (154, XidCategory.HARDWARE, ACTION_EVICT),
        (13, XidCategory.APPLICATION, ACTION_CHECK_USER_CODE),
        (31, XidCategory.APPLICATION, ACTION_CHECK_USER_CODE),
        (43, XidCategory.APPLICATION, ACTION_CHECK_USER_CODE),
        (45, XidCategory.APPLICATION, ACTION_CHECK_USER_CODE),
        (68, XidCategory.APPLICATION, ACTION_CHECK_USER_CODE),
        (69, XidCategory.APPLICATION, ACTION_CHECK_USER_CODE),
        (8, XidCategory.DRIVER, ACTION_INVESTIGATE),
        (32, XidCategory.DRIVER, ACTION_INVESTIGATE),
        (61, XidCategory.DRIVER, ACTION_RESET_GPU),
        (62, XidCategory.DRIVER, ACTION_RESET_GPU),
        (109, XidCategory.DRIVER, ACTION_RESET_GPU),
    ],
)
def test_catalog_categories(code: int, category: XidCategory, action: str) -> None:
    info = classify(code)
    assert (info.xid, info.category, info.action) == (code, category, action)
    assert info.name and info.mnemonic


def test_catalog_covers_the_codes_that_matter() -> None:
    needed = {8, 13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 121, 123}
    needed |= {136, 140, 143, 144, 145, 146, 147, 148, 149, 150, 154}
    assert needed <= set(CATALOG)
    for info in CATALOG.values():
        expected = {
            ACTION_EVICT: Status.CRITICAL,
            ACTION_RESET_GPU: Status.CRITICAL,
            ACTION_CHECK_USER_CODE: Status.WARNING,
            ACTION_INVESTIGATE: Status.WARNING,
            ACTION_NONE: Status.OK,
        }[info.action]
        assert info.severity is expected, info


@pytest.mark.parametrize("code", [0, 1, 999, -5, 10**9])
def test_unknown_codes_never_raise(code: int) -> None:
    info = classify(code)
    if code not in CATALOG:
        assert info.category is XidCategory.UNKNOWN
        assert info.action == ACTION_INVESTIGATE
        assert info.severity is Status.WARNING


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no xid here\n",
        "NVRM: Xid (PCI:0000:3b:00): notanumber, x",
        "NVRM: Xid",
        "\x00\xff binary-ish NVRM: Xid (",
        "NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)",
    ],
)
def test_garbage_gives_no_event(text: str) -> None:
    assert parse_kernel_log(text) == []


def test_minimal_forms() -> None:
    (e,) = parse_kernel_log("NVRM: Xid (PCI:0000:3B:00): 79")
    assert (e.pci, e.xid, e.message, e.pid) == ("0000:3b:00", 79, "", None)
    (e,) = parse_kernel_log("NVRM: Xid (PCI:0000:3b:00): 13, pid=77, name=python3\r\n")
    assert (e.pid, e.process, e.message) == (77, "python3", "")
