"""NVSwitch SXid lines: the parser (fields, continuation lines, redaction, bounds), the catalogue,
``analyze``'s findings and the fixtures of tests/data/kernel-log/SOURCE.md (``sxid-*.txt``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from robustctl.analysis import sxid
from robustctl.analysis.detect import analyze_file, analyze_text
from robustctl.analysis.sxid import (
    ACTION_REBOOT_HOST,
    ACTION_RESET_FABRIC,
    CATALOG,
    CLASS_ALWAYS_FATAL,
    CLASS_FATAL,
    CLASS_NON_FATAL,
    CLASS_UNKNOWN,
    MAX_CONTINUATION_LINES,
    MAX_OPEN_EVENTS,
    SXidParser,
    classify,
    parse_sxid,
)
from robustctl.analysis.xid import DEVICE_REDACTED, DEVICE_UNKNOWN
from robustctl.models import Status, to_jsonable

DATA = Path(__file__).resolve().parents[1] / "data" / "kernel-log"

# The example: one fatal event printed as header + Severity + Data, and a non-fatal one.
FATAL_EVENT = [
    "nvidia-nvswitch0: SXid (PCI:0000:86:00.0): 24007, Fatal, Link 27 sourcetrack timeout error (First)",
    "nvidia-nvswitch0: SXid (PCI:0000:86:00.0): 24007, Severity 1 Engine instance 27 Sub-engine instance 00",
    "nvidia-nvswitch0: SXid (PCI:0000:86:00.0): 24007, Data {0x00000000, 0x10008100, 0x00000000}",
]
NON_FATAL = "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 34 egress non-posted PRIV error (First)"


# ----------------------------------------------------------------------------------- parser
def test_header_fields() -> None:
    (e,) = parse_sxid(FATAL_EVENT[0])
    assert (e.switch, e.pci, e.code, e.fatal, e.link) == ("nvidia-nvswitch0", "0000:86:00.0", 24007, True, 27)
    assert e.message == "sourcetrack timeout error (First)"
    assert e.header_seen and e.continuation == () and e.continuation_count == 0
    assert (e.severity, e.action, e.info.nvidia_class) == (Status.CRITICAL, ACTION_RESET_FABRIC, CLASS_FATAL)


def test_continuation_lines_attach_to_their_event_and_are_not_counted() -> None:
    events = parse_sxid("\n".join(FATAL_EVENT))
    assert len(events) == 1
    (e,) = events
    assert e.continuation_count == 2
    assert e.continuation == (FATAL_EVENT[1].split(", ", 1)[1], FATAL_EVENT[2].split(", ", 1)[1])
    assert e.raw == FATAL_EVENT[0]


def test_continuations_attach_across_other_lines_and_switches() -> None:
    other = (
        "nvidia-nvswitch1: SXid (PCI:0000:87:00.0): 24007, Fatal, Link 3 sourcetrack timeout error (First)"
    )
    lines = [
        FATAL_EVENT[0],
        other,
        "[ 12.5] NVRM: GPU at PCI:0000:48:00: GPU-5fc0bcec",
        FATAL_EVENT[1],
        other.replace("Fatal, Link 3 sourcetrack timeout error (First)", "Severity 1 Engine instance 03"),
        FATAL_EVENT[2],
    ]
    events = parse_sxid(lines)
    assert [(e.switch, e.link, e.continuation_count) for e in events] == [
        ("nvidia-nvswitch0", 27, 2),
        ("nvidia-nvswitch1", 3, 1),
    ]


def test_a_repeated_header_is_a_new_event() -> None:
    events = parse_sxid([*FATAL_EVENT, *FATAL_EVENT])
    assert [e.continuation_count for e in events] == [2, 2]


def test_continuation_without_its_header_is_one_event_classed_by_the_catalogue() -> None:
    events = parse_sxid(FATAL_EVENT[1:])
    assert len(events) == 1
    (e,) = events
    assert not e.header_seen and e.fatal is None and e.link is None and e.message == ""
    assert e.continuation_count == 2 and e.severity is Status.CRITICAL  # 24007 is in the fatal table


def test_uncatalogued_code_is_reported_and_classed_by_its_own_word() -> None:
    fatal, non_fatal = parse_sxid(
        [
            "nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): 29999, Fatal, Link 5 new error",
            "nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): 29998, Non-fatal, Link 6 newer error",
        ]
    )
    assert fatal.info.nvidia_class == CLASS_UNKNOWN and fatal.severity is Status.CRITICAL
    assert non_fatal.info.nvidia_class == CLASS_UNKNOWN and non_fatal.severity is Status.WARNING
    assert non_fatal.fatal is False and non_fatal.message == "newer error"


def test_fatal_word_never_judged_below_critical() -> None:
    (e,) = parse_sxid("nvidia-nvswitch0: SXid (PCI:0000:86:00.0): 20001, Fatal, Link 1 TX Replay Error")
    assert CATALOG[20001].severity is Status.WARNING and e.severity is Status.CRITICAL


def test_prefixes_and_timestamps() -> None:
    syslog, uptime, iso, journal = parse_sxid(
        [
            "May 19 07:08:57 dgx-01 kernel: " + NON_FATAL,
            "[ 8123.456789] " + FATAL_EVENT[0],
            "kern  :err   : 2025-01-25T10:34:54,859532+00:00 nvidia-nvswitch1: SXid (PCI:0000:84:00.0): "
            "12028, Data {0x000001c0}",
            "2024-05-19T07:08:57+00:00 dgx-02 kernel: "
            + NON_FATAL.replace("nvswitch3", "nvswitch5").replace("05:00", "06:00"),
        ]
    )
    assert (syslog.timestamp, syslog.host) == ("May 19 07:08:57", "dgx-01")
    assert uptime.timestamp == "8123.456789"
    assert iso.timestamp == "2025-01-25T10:34:54,859532+00:00" and not iso.header_seen
    assert (journal.timestamp, journal.host) == ("2024-05-19T07:08:57+00:00", "dgx-02")


@pytest.mark.parametrize(
    ("dev", "pci"),
    [("(PCI:XXXX:XX:XX.X)", DEVICE_REDACTED), ("(<redacted>)", DEVICE_REDACTED), ("(****)", DEVICE_REDACTED)],
)
def test_redacted_switch_pci_id_is_kept_as_redacted(dev: str, pci: str) -> None:
    line = f"Jun  1 10:00:00 host-REDACTED kernel: nvidia-nvswitch2: SXid {dev}: 20034, Fatal, Link 7 LTSSM Fault Up"
    (e,) = parse_sxid(line)
    assert (e.pci, e.code, e.link, e.severity) == (pci, 20034, 7, Status.CRITICAL)
    assert e.redacted == ("device", "host") and e.host is None


def test_line_without_switch_prefix_or_device() -> None:
    (e,) = parse_sxid("SXid: 22003, Fatal, Minion Halt")
    assert (e.switch, e.pci, e.code) == (sxid.SWITCH_UNKNOWN, DEVICE_UNKNOWN, 22003)
    assert e.info.nvidia_class == CLASS_ALWAYS_FATAL and e.action == ACTION_REBOOT_HOST


def test_gpu_xid_lines_are_not_sxid_lines() -> None:
    assert parse_sxid("[  12.3] NVRM: Xid (PCI:0000:07:00): 79, pid=1, GPU has fallen off the bus.") == []


# ----------------------------------------------------------------------------------- bounds
def test_open_events_are_bounded_and_emitted_in_file_order() -> None:
    parser = SXidParser()
    out = []
    n = MAX_OPEN_EVENTS * 3
    for i in range(n):
        out += parser.feed(f"nvidia-nvswitch{i}: SXid (PCI:0000:{i % 256:02x}:00.0): 24007, Fatal, Link 1 x")
        assert parser.open_events <= MAX_OPEN_EVENTS
    out += parser.close()
    assert [e.switch for e in out] == [f"nvidia-nvswitch{i}" for i in range(n)]
    assert parser.open_events == 0


def test_continuation_lines_kept_are_bounded_but_counted() -> None:
    data = FATAL_EVENT[2]
    (e,) = parse_sxid([FATAL_EVENT[0], *([data] * (MAX_CONTINUATION_LINES * 10))])
    assert (
        len(e.continuation) == MAX_CONTINUATION_LINES and e.continuation_count == MAX_CONTINUATION_LINES * 10
    )


# -------------------------------------------------------------------------------- catalogue
def test_catalogue_classes_follow_the_fabric_manager_guide() -> None:
    assert classify(24007).nvidia_class == CLASS_FATAL and classify(20034).nvidia_class == CLASS_FATAL
    assert classify(23001).nvidia_class == CLASS_ALWAYS_FATAL and classify(23001).action == ACTION_REBOOT_HOST
    for code in (11012, 12021, 12023, 24001):  # single-bit ECC, corrected by the switch
        assert (classify(code).nvidia_class, classify(code).severity) == (CLASS_NON_FATAL, Status.WARNING)
    for code in (11004, 12028, 19084):  # non-fatal, but the guide's recovery is a reset
        assert (classify(code).nvidia_class, classify(code).severity) == (CLASS_NON_FATAL, Status.CRITICAL)
    assert classify(22013).severity is Status.OK  # "can be safely ignored"
    unknown = classify(31337)
    assert (unknown.nvidia_class, unknown.severity) == (CLASS_UNKNOWN, Status.WARNING)


# ------------------------------------------------------------------------------ analyze
def test_analyze_reports_sxid_as_its_own_class() -> None:
    a = analyze_text("\n".join([*FATAL_EVENT, NON_FATAL, "[ 1.0] NVRM: Xid (PCI:0000:07:00): 13, pid=9, x"]))
    assert a.kind == "kernel-log" and a.status is Status.CRITICAL
    assert a.details["event_count"] == 1  # GPU XIDs only, as before
    section = a.details["sxid"]
    assert (section["event_count"], section["continuation_lines"], section["switches"]) == (2, 2, 2)
    by_code = {f.evidence["sxid"]: f for f in a.findings if "sxid" in f.evidence}
    assert by_code[24007].status is Status.CRITICAL and by_code[24007].evidence["links"] == [27]
    assert by_code[24007].device == "0000:86:00.0" and "fatal" in by_code[24007].message
    assert by_code[12028].evidence["nvidia_class"] == CLASS_NON_FATAL
    assert [f.evidence["xid"] for f in a.findings if "xid" in f.evidence] == [13]
    assert "1 XID event on 1 GPU, 2 NVSwitch SXid events on 2 NVSwitches" in a.summary


def test_flood_is_merged_per_code_and_switch() -> None:
    other_switch = [ln.replace("nvswitch0", "nvswitch1").replace("86:00", "87:00") for ln in FATAL_EVENT]
    lines = FATAL_EVENT * 5000 + other_switch * 3 + [NON_FATAL] * 7
    a = analyze_text("\n".join(lines))
    counts = sorted((f.evidence["sxid"], f.evidence["switch"], f.evidence["count"]) for f in a.findings)
    assert counts == [
        (12028, "nvidia-nvswitch3", 7),
        (24007, "nvidia-nvswitch0", 5000),
        (24007, "nvidia-nvswitch1", 3),
    ]
    assert a.details["sxid"]["event_count"] == 5010
    assert a.details["sxid"]["continuation_lines"] == 2 * 5003
    assert len(a.details["sxid"]["events"]) == 1000 and a.details["sxid"]["events_truncated"]


def test_clean_log_keeps_its_summary_and_gains_an_empty_sxid_section() -> None:
    a = analyze_text("\n".join(f"[ {i}.0] usb 1-1: new device" for i in range(5)))
    assert (a.kind, a.status) == ("kernel-log", Status.OK)
    assert a.summary == "kernel log: no NVIDIA XID events in 5 lines"
    assert a.details["sxid"]["event_count"] == 0


def test_existing_fixture_keys_are_kept() -> None:
    a = analyze_file(DATA / "xid-lines.txt")
    assert set(a.details) == {"lines", "event_count", "events", "events_truncated", "sxid"}
    assert a.details["sxid"]["event_count"] == 0 and a.status is Status.CRITICAL


# ------------------------------------------------------------------------------ fixtures
FIXTURES: dict[str, tuple[Status, dict[tuple[int, str], tuple[Status, int]]]] = {
    # file: (verdict, {(SXid code, switch): (finding status, events)}), as SOURCE.md says
    "sxid-a100-gsp-crash-ogkm446.txt": (Status.CRITICAL, {(24007, "nvidia-nvswitch1"): (Status.CRITICAL, 1)}),
    "sxid-gpud-pr338-12028-data.txt": (Status.CRITICAL, {(12028, "nvidia-nvswitch1"): (Status.CRITICAL, 1)}),
    "sxid-menthos-ltssm-fault.txt": (
        Status.CRITICAL,
        {
            (19084, "nvidia-nvswitch4"): (Status.CRITICAL, 1),
            (20034, "nvidia-nvswitch0"): (Status.CRITICAL, 2),
            (10002, "nvidia-nvswitch2"): (Status.WARNING, 1),
            (20034, "nvidia-nvswitch2"): (Status.CRITICAL, 1),
            (20034, "nvidia-nvswitch3"): (Status.CRITICAL, 1),
            (20034, "nvidia-nvswitch1"): (Status.CRITICAL, 1),
            (19084, "nvidia-nvswitch3"): (Status.CRITICAL, 1),
        },
    ),
    "sxid-nvsentinel-e2e-fatal.txt": (
        Status.CRITICAL,
        {
            (20009, "nvidia-nvswitch0"): (Status.WARNING, 1),
            (28006, "nvidia-nvswitch0"): (Status.WARNING, 1),
            (24007, "nvidia-nvswitch0"): (Status.CRITICAL, 1),
        },
    ),
    "sxid-nvsentinel-e2e-nonfatal.txt": (
        Status.WARNING,
        {(20009, "nvidia-nvswitch0"): (Status.WARNING, 1), (28006, "nvidia-nvswitch0"): (Status.WARNING, 1)},
    ),
}


def test_every_sxid_fixture_is_listed() -> None:
    assert {p.name for p in DATA.glob("sxid-*.txt")} == set(FIXTURES)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixture_verdict_as_its_source_judged_it(name: str) -> None:
    verdict, expected = FIXTURES[name]
    a = analyze_file(DATA / name)
    assert (a.kind, a.status) == ("kernel-log", verdict), a.summary
    got = {
        (f.evidence["sxid"], f.evidence["switch"]): (f.status, f.evidence["count"])
        for f in a.findings
        if "sxid" in f.evidence
    }
    assert got == expected
    json.dumps(to_jsonable(a), allow_nan=False)


def test_a100_fixture_counts_continuations_once() -> None:
    a = analyze_file(DATA / "sxid-a100-gsp-crash-ogkm446.txt")
    assert (a.details["sxid"]["event_count"], a.details["sxid"]["continuation_lines"]) == (1, 2)
    assert {f.evidence["xid"] for f in a.findings if "xid" in f.evidence} == {62, 45}
    (event,) = a.details["sxid"]["events"]
    assert event["header_seen"] is False and event["pci"] == "0000:aa:00.0"


def test_fixture_addresses_are_loopback_only() -> None:
    for p in DATA.glob("sxid-*.txt"):
        for ip in re.findall(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b", p.read_text()):
            assert ip.startswith("127.0.0."), (p.name, ip)
