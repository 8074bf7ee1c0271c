"""NVSwitch SXid events: NVIDIA's SXid catalogue and a streaming kernel-log parser.

The NVSwitch driver of HGX/DGX systems reports switch faults to the kernel log the way the GPU
driver reports Xids (:mod:`robustctl.analysis.xid`), one event as up to three lines::

    nvidia-nvswitch0: SXid (PCI:0000:86:00.0): 24007, Fatal, Link 27 sourcetrack timeout error (First)
    nvidia-nvswitch0: SXid (PCI:0000:86:00.0): 24007, Severity 1 Engine instance 27 Sub-engine instance 00
    nvidia-nvswitch0: SXid (PCI:0000:86:00.0): 24007, Data {0x00000000, 0x10008100, ...}

The first line (the *header*) names the switch, its PCI address, the code, ``Fatal`` or
``Non-fatal`` and, for link errors, the link (port); the ``Severity`` and ``Data`` lines are
*continuations* of that event, attached to it and never counted as events of their own. A
continuation whose header is not in the text (an excerpt cut above it) is one event, classed by the
catalogue alone. Ids are redacted as :mod:`robustctl.analysis.xid` redacts them (same rules, same
:data:`~robustctl.analysis.xid.DEVICE_REDACTED` value).

Source of the catalogue: NVIDIA, *Fabric Manager for NVIDIA NVSwitch Systems* user guide
(DU-09883-001; https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html, PDF
https://docs.nvidia.com/datacenter/tesla/pdf/fabric-manager-user-guide.pdf; document history 0.6,
"updated SXid error details"), appendix "NVSwitch Errors", tables *Non-Fatal NVSwitch SXid Errors*,
*Fatal NVSwitch SXid Errors*, *Always Fatal NVSwitch SXid Errors* and *Other Notable NVSwitch SXid
Errors*. The guide's pages confirm the sections and the line format; the per-code names, tables and
recovery texts below were read from leptonai/gpud ``components/accelerator/nvidia/sxid/sxid.go``,
which transcribes those tables from DU-09883-001 v1.3 (October 2023) with the guide's wording, and
were not re-checked cell by cell against the PDF. NVIDIA's *Xid Errors* page says SXids "and their
usage guidance" are documented in the Fabric Manager guide.

robustctl's verdict of one event (:func:`judge`):

- NVIDIA's *fatal* and *always fatal* tables -> CRITICAL: the guide's recovery is a reset of the
  GPUs and NVSwitches (restart the guest VM / reset the partition; a fatal SXid is propagated to
  the GPU as Xid 74), and for *always fatal* codes a restart of the host.
- *non-fatal* codes whose guide entry still needs a reset -> CRITICAL, citing the guide: 11004
  (ingress invalid ACL: "GPU NVLink traffic will be stalled ... CUDA jobs aborted with Xid 45",
  restart the guest VM), 12028 (egress non-posted PRIV error: same impact, restart the guest VM),
  19084 (AN1 heartbeat timeout: "reset all GPUs and all NVSwitches"), and 10003 of the other
  notable table (host unhandled interrupt: "fatal to the fabric/system", reset all GPUs and
  NVSwitches).
- the other non-fatal codes (single-bit ECC errors the switch corrects, TX replays, thermal events,
  broken connections) -> WARNING; 22013 ("can be safely ignored") -> OK.
- a code outside the catalogue is still reported, classed by the line's own word: ``Fatal`` ->
  CRITICAL, ``Non-fatal`` (or no word) -> WARNING. A line that says ``Fatal`` is never judged below
  CRITICAL, whatever the catalogue says.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from robustctl.analysis.xid import (
    ACTION_INVESTIGATE,
    ACTION_NONE,
    DEVICE_REDACTED,
    DEVICE_UNKNOWN,
    device_of,
    log_prefix,
)
from robustctl.models import Status

__all__ = [
    "ACTION_REBOOT_HOST",
    "ACTION_RESET_FABRIC",
    "CATALOG",
    "CLASS_ALWAYS_FATAL",
    "CLASS_FATAL",
    "CLASS_NON_FATAL",
    "CLASS_NOTABLE",
    "CLASS_UNKNOWN",
    "MAX_CONTINUATION_LINES",
    "MAX_OPEN_EVENTS",
    "SWITCH_UNKNOWN",
    "SXidEvent",
    "SXidInfo",
    "SXidParser",
    "classify",
    "iter_sxid",
    "judge",
    "parse_sxid",
    "switch_label",
]

ACTION_RESET_FABRIC = "reset GPUs and NVSwitches"
"""Reset every GPU and NVSwitch of the host (or reboot it) before it runs a job again."""
ACTION_REBOOT_HOST = "reboot host"
"""NVIDIA's recovery for an always-fatal SXid: restart the host to reset the entire fabric."""

CLASS_NON_FATAL = "non-fatal"
"""The guide's *Non-Fatal NVSwitch SXid Errors* table."""
CLASS_FATAL = "fatal"
"""The guide's *Fatal NVSwitch SXid Errors* table (fatal to the partitions using the port)."""
CLASS_ALWAYS_FATAL = "always fatal"
"""The guide's *Always Fatal NVSwitch SXid Errors* table (fatal to the entire fabric/system)."""
CLASS_NOTABLE = "other notable"
"""The guide's *Other Notable NVSwitch SXid Errors* table."""
CLASS_UNKNOWN = "unknown"
"""A code outside the catalogue."""

SWITCH_UNKNOWN = "nvswitch"
""":attr:`SXidEvent.switch` of a line without the ``nvidia-nvswitchN:`` prefix."""

MAX_OPEN_EVENTS = 32
"""Events the parser holds open for their continuation lines. The driver prints an event's
``Severity`` and ``Data`` lines right after its header; a host has at most 12 NVSwitches (HGX-2:
two baseboards of 6), so 32 open events cover every switch reporting at once with room to spare,
while a flood of distinct (switch, code) pairs keeps the parser's memory flat: the oldest open event
is completed (emitted) when a 33rd opens."""

MAX_CONTINUATION_LINES = 8
"""Continuation lines kept per event (the driver prints two: ``Severity`` and ``Data``); more are
counted in :attr:`SXidEvent.continuation_count` but not kept, so an endless run of them is bounded."""

_MAX_TEXT = 512
"""Characters of a message or continuation line kept (a real one is under 200)."""


@dataclass(frozen=True)
class SXidInfo:
    """What one SXid code means.

    Attributes:
        code: the code, e.g. ``24007``.
        name: NVIDIA's name of the error, e.g. ``"sourcetrack timeout error"``.
        nvidia_class: the guide's table: :data:`CLASS_NON_FATAL`, :data:`CLASS_FATAL`,
            :data:`CLASS_ALWAYS_FATAL`, :data:`CLASS_NOTABLE` or :data:`CLASS_UNKNOWN`.
        severity: the verdict one such event gets (before the line's own ``Fatal`` word).
        action: :data:`ACTION_RESET_FABRIC`, :data:`ACTION_REBOOT_HOST`, ``"investigate"`` or
            ``"none"``.
        note: NVIDIA's impact/recovery in one line, or ``""``.
    """

    code: int
    name: str
    nvidia_class: str
    severity: Status
    action: str
    note: str = ""


_SBE_NOTE = "corrected by the NVSwitch (no guest impact, NVIDIA: recovery not applicable)"
_FATAL_NOTE = (
    "NVIDIA: fatal to the partitions using the port (propagated to the GPUs as Xid 74); reset the "
    "GPUs and NVSwitches (restart the guest VM); inspect the NVSwitch if it recurs"
)
_ALWAYS_NOTE = "NVIDIA: always fatal to the entire fabric/system; restart the host"

_NON_FATAL_SBE: tuple[int, ...] = (
    *(11012, 11021, 11022, 11023, 12021, 12023, 15008, 15011, 19049, 19055, 19057, 19059),
    *(19062, 19065, 19068, 19071, 24001, 24002, 24003),
)
"""The guide's single-bit ECC error codes (non-fatal: corrected by the switch)."""

_FATAL_NAMES: dict[int, str] = {
    11001: "ingress invalid command",
    11009: "ingress invalid VCSet",
    11013: "ingress header DBE",
    11018: "ingress RID DBE",
    11019: "ingress RLAN DBE",
    11020: "ingress control parity",
    12001: "egress crossbar overflow",
    12002: "egress packet route",
    12022: "egress input ECC DBE error",
    12024: "egress output ECC DBE error",
    12025: "egress credit overflow",
    12026: "egress destination request ID error",
    12027: "egress destination response ID error",
    12030: "egress control parity error",
    12031: "egress credit parity error",
    12032: "egress flit type mismatch",
    14017: "TS ATO timeout",
    15001: "route buffer over/underflow",
    15006: "route transdone over/underflow",
    15009: "route GLT DBE",
    15010: "route parity",
    15012: "route incoming DBE",
    15013: "route credit parity",
    19047: "NCISOC HDR ECC DBE error",
    19048: "NCISOC DAT ECC DBE error",
    19054: "HDR RAM ECC DBE error",
    19056: "DAT0 RAM ECC DBE error",
    19058: "DAT1 RAM ECC DBE error",
    19060: "CREQ RAM HDR ECC DBE error",
    19061: "CREQ RAM DAT ECC DBE error",
    19063: "Response RAM HDR ECC DBE error",
    19064: "Response RAM DAT ECC DBE error",
    19066: "COM RAM HDR ECC DBE error",
    19067: "COM RAM DAT ECC DBE error",
    19069: "RSP1 RAM HDR ECC DBE error",
    19070: "RSP1 RAM DAT ECC DBE error",
    20034: "LTSSM Fault Up",
    22012: "Minion Link NA interrupt",
    24004: "sourcetrack TCEN0 crumbstore DBE",
    24005: "sourcetrack TCEN0 TD crumbstore DBE",
    24006: "sourcetrack TCEN1 crumbstore DBE",
    24007: "sourcetrack timeout error",
}

_ALWAYS_FATAL_NAMES: dict[int, str] = {
    12020: "egress sequence ID error",
    22003: "Minion Halt",
    22011: "Minion exterror",
    23001: "ingress SRC-VC buffer overflow",
    23002: "ingress SRC-VC buffer underflow",
    23003: "egress DST-VC credit overflow",
    23004: "egress DST-VC credit underflow",
    23005: "ingress packet burst error",
    23006: "ingress packet sticky error",
    23007: "possible bubbles at ingress",
    23008: "ingress packet invalid dst error",
    23009: "ingress packet parity error",
    23010: "ingress SRC-VC buffer overflow",
    23011: "ingress SRC-VC buffer underflow",
    23012: "egress DST-VC credit overflow",
    23013: "egress DST-VC credit underflow",
    23014: "ingress packet burst error",
    23015: "ingress packet sticky error",
    23016: "possible bubbles at ingress",
    23017: "ingress credit parity error",
}

_C, _W = Status.CRITICAL, Status.WARNING

_OTHER_ENTRIES: tuple[SXidInfo, ...] = (
    SXidInfo(
        11004,
        "Ingress invalid ACL",
        CLASS_NON_FATAL,
        _C,
        ACTION_RESET_FABRIC,
        "NVIDIA: GPU NVLink traffic stalls and CUDA jobs abort with Xid 45 (an incorrect partition "
        "configuration); validate the routing with nvswitch-audit and restart the guest VM",
    ),
    SXidInfo(
        12028,
        "egress non-posted PRIV error",
        CLASS_NON_FATAL,
        _C,
        ACTION_RESET_FABRIC,
        "NVIDIA: GPU NVLink traffic stalls, GPU access hangs, CUDA jobs abort with Xid 45; "
        "restart the guest VM",
    ),
    SXidInfo(
        19084,
        "AN1 Heartbeat Timeout Error",
        CLASS_NON_FATAL,
        _C,
        ACTION_RESET_FABRIC,
        "NVIDIA: usually comes with a fatal SXid; reset all GPUs and all NVSwitches",
    ),
    SXidInfo(
        20001,
        "TX Replay Error",
        CLASS_NON_FATAL,
        _W,
        ACTION_INVESTIGATE,
        "NVIDIA: packets retransmitted, may lower the port's NVLink throughput",
    ),
    SXidInfo(
        22013,
        "Minion Link DLREQ interrupt",
        CLASS_NON_FATAL,
        Status.OK,
        ACTION_NONE,
        "NVIDIA: can be safely ignored",
    ),
    SXidInfo(
        20012,
        "Broken/inconsistent connection",
        CLASS_NOTABLE,
        _W,
        ACTION_INVESTIGATE,
        "NVIDIA: a broken connection or an uncoordinated shutdown; if not a shutdown, check the "
        "link's mechanical connections",
    ),
    SXidInfo(
        10001,
        "Host_priv_error",
        CLASS_NOTABLE,
        _W,
        ACTION_INVESTIGATE,
        "NVIDIA: not fatal, but may be followed by fatal events",
    ),
    SXidInfo(
        10002,
        "Host_priv_timeout",
        CLASS_NOTABLE,
        _W,
        ACTION_INVESTIGATE,
        "NVIDIA: not fatal, but may be followed by fatal events",
    ),
    SXidInfo(
        10003,
        "Host_unhandled_interrupt",
        CLASS_NOTABLE,
        _C,
        ACTION_RESET_FABRIC,
        "NVIDIA: never expected; if it occurs it is fatal to the fabric/system, reset all GPUs and "
        "NVSwitches",
    ),
    SXidInfo(
        10004,
        "Host_thermal_event_start",
        CLASS_NOTABLE,
        _W,
        ACTION_INVESTIGATE,
        "NVIDIA: links may drop to single-lane mode (lower NVLink throughput); check the cooling",
    ),
    SXidInfo(
        10005,
        "Host_thermal_event_end",
        CLASS_NOTABLE,
        _W,
        ACTION_INVESTIGATE,
        "NVIDIA: the thermal event ended; check the cooling",
    ),
)


def _catalogue() -> dict[int, SXidInfo]:
    out: dict[int, SXidInfo] = {}
    for code in _NON_FATAL_SBE:
        out[code] = SXidInfo(code, "Single bit ECC error", CLASS_NON_FATAL, _W, ACTION_INVESTIGATE, _SBE_NOTE)
    for code, name in _FATAL_NAMES.items():
        out[code] = SXidInfo(code, name, CLASS_FATAL, _C, ACTION_RESET_FABRIC, _FATAL_NOTE)
    for code, name in _ALWAYS_FATAL_NAMES.items():
        out[code] = SXidInfo(code, name, CLASS_ALWAYS_FATAL, _C, ACTION_REBOOT_HOST, _ALWAYS_NOTE)
    for info in _OTHER_ENTRIES:
        out[info.code] = info
    return out


CATALOG: dict[int, SXidInfo] = _catalogue()
"""Every SXid code robustctl knows, by code (NVIDIA's Fabric Manager guide). Read-only by convention."""


def classify(code: int) -> SXidInfo:
    """Explain one SXid code.

    Args:
        code: the number after ``SXid (PCI:...):``.

    Returns:
        The catalogue entry; for a code outside it a :data:`CLASS_UNKNOWN` entry, WARNING,
        ``"investigate"`` (the line's own ``Fatal`` word is applied by :func:`judge`). Never raises.
    """
    info = CATALOG.get(code)
    if info is not None:
        return info
    return SXidInfo(
        code,
        f"SXid {code} (not in robustctl's catalogue)",
        CLASS_UNKNOWN,
        Status.WARNING,
        ACTION_INVESTIGATE,
        "look it up in NVIDIA's Fabric Manager user guide (NVSwitch SXid errors)",
    )


def judge(info: SXidInfo, fatal: bool | None) -> tuple[Status, str]:
    """The verdict and action of one event: the catalogue's, raised by the line's ``Fatal`` word.

    Args:
        info: :func:`classify` of the code.
        fatal: the line's own word: True for ``Fatal``, False for ``Non-fatal``, None when absent
            (a continuation line whose header is not in the text).

    Returns:
        ``(status, action)``: CRITICAL with :data:`ACTION_RESET_FABRIC` for a ``Fatal`` line whose
        code the catalogue rates lower (or does not know), else the catalogue's. Never raises.
    """
    if fatal and info.severity is not Status.CRITICAL:
        return Status.CRITICAL, ACTION_RESET_FABRIC
    return info.severity, info.action


@dataclass(frozen=True)
class SXidEvent:
    """One NVSwitch SXid event: its header line and the continuation lines attached to it.

    Attributes:
        switch: the driver's device name, e.g. ``"nvidia-nvswitch3"`` (:data:`SWITCH_UNKNOWN`
            when the line has no such prefix).
        pci: the switch's PCI address as printed, lower case, e.g. ``"0000:05:00.0"``;
            :data:`~robustctl.analysis.xid.DEVICE_REDACTED` when it was redacted,
            :data:`~robustctl.analysis.xid.DEVICE_UNKNOWN` when absent or unrecognisable.
        code: the SXid code.
        fatal: the line's own word: True (``Fatal``), False (``Non-fatal``), None (absent).
        link: the link (port) the message names (``Link 27``), or None.
        message: the header's text after the ``Fatal``/``Non-fatal`` word (at most 512 characters),
            ``""`` for an event known only by its continuation lines.
        timestamp: the syslog/journal/ISO time of the line's prefix, else the ``dmesg`` uptime,
            else None.
        host: the host name of a syslog/journal prefix, when present and not redacted.
        raw: the header line as read (the first continuation line for an event without header).
        info: :func:`classify` of the code.
        severity: :func:`judge` of ``info`` and ``fatal``.
        action: what to do (the ``ACTION_*`` constants, ``"investigate"`` or ``"none"``).
        continuation: the ``Severity``/``Data`` lines' text after the code (at most
            :data:`MAX_CONTINUATION_LINES`).
        continuation_count: how many continuation lines were attached (kept or not).
        header_seen: False when the text holds only the event's continuation lines.
        device_text: what stood between the parentheses when it was not a PCI id (at most 64
            characters), else None.
        redacted: the fields found redacted, among ``"device"``, ``"host"``.
    """

    switch: str
    pci: str
    code: int
    fatal: bool | None
    link: int | None
    message: str
    timestamp: str | None
    host: str | None
    raw: str
    info: SXidInfo
    severity: Status
    action: str
    continuation: tuple[str, ...] = ()
    continuation_count: int = 0
    header_seen: bool = True
    device_text: str | None = None
    redacted: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str, int]:
        """``(switch, pci, code)``: what a continuation line must match to attach to this event."""
        return (self.switch, self.pci, self.code)


# `nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 34 ...`; the parentheses may
# hold a redaction (`(PCI:XXXX:XX:XX.X)`, `(<redacted>)`) or be missing, as for Xid lines.
_SXID_RE = re.compile(
    r"(?:(?P<switch>nvidia-nvswitch[^\s:()]{0,16})\s*:\s*)?SXid\b\s*"
    r"(?:\((?P<dev>(?:[^()]|\([^()]{0,64}\)){0,200})\))?\s*:\s*(?P<code>\d{1,9})\b\s*(?:,\s*(?P<rest>.*))?$"
)
_WORD_RE = re.compile(r"^(?P<word>non[- ]?fatal|fatal)\b\s*,?\s*", re.IGNORECASE)
_LINK_RE = re.compile(r"^(?:link|port)\s+#?\s*(?P<link>\d{1,5})\b\s*,?\s*", re.IGNORECASE)
_CONTINUATION_RE = re.compile(r"^(?:severity\s+\d|data\s*\{)", re.IGNORECASE)
_UPTIME_RE = re.compile(r"\[\s*(?P<uptime>\d+\.\d+)\]")
# `dmesg --time-format iso` / `dmesg -T` style prefixes the syslog rule does not take:
# `kern  :err   : 2025-01-25T10:34:54,859532+00:00 nvidia-nvswitch1: ...`.
_ISO_RE = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?")


@dataclass
class _Open:
    """An event being built: its header (or first continuation) and the continuations seen so far."""

    event: SXidEvent
    lines: list[str] = field(default_factory=list)
    count: int = 0

    def add(self, text: str) -> None:
        self.count += 1
        if len(self.lines) < MAX_CONTINUATION_LINES:
            self.lines.append(text[:_MAX_TEXT])

    def done(self) -> SXidEvent:
        e = self.event
        return SXidEvent(
            e.switch,
            e.pci,
            e.code,
            e.fatal,
            e.link,
            e.message,
            e.timestamp,
            e.host,
            e.raw,
            e.info,
            e.severity,
            e.action,
            tuple(self.lines),
            self.count,
            e.header_seen,
            e.device_text,
            e.redacted,
        )


def _parse(line: str) -> tuple[SXidEvent, str | None] | None:
    """``(event, continuation text or None)`` of one line, or None when it holds no SXid."""
    m = _SXID_RE.search(line)
    if m is None:
        return None
    code = int(m.group("code"))
    pci, device_text = device_of(m.group("dev"))
    redacted = ["device"] if pci == DEVICE_REDACTED else []
    prefix = line[: m.start()]
    timestamp, host, host_redacted = log_prefix(prefix)
    if host_redacted:
        redacted.append("host")
    if timestamp is None:
        iso = _ISO_RE.search(prefix)
        um = _UPTIME_RE.search(prefix)
        timestamp = iso.group(0) if iso is not None else um.group("uptime") if um is not None else None
    rest = (m.group("rest") or "").strip()
    continuation: str | None = None
    fatal: bool | None = None
    link: int | None = None
    message = ""
    if _CONTINUATION_RE.match(rest):
        continuation = rest
    else:
        wm = _WORD_RE.match(rest)
        if wm is not None:
            fatal = not wm.group("word").lower().startswith("non")
            rest = rest[wm.end() :]
        lm = _LINK_RE.match(rest)
        if lm is not None:
            link = int(lm.group("link"))
            rest = rest[lm.end() :]
        message = rest.strip()[:_MAX_TEXT]
    info = classify(code)
    severity, action = judge(info, fatal)
    event = SXidEvent(
        switch=m.group("switch") or SWITCH_UNKNOWN,
        pci=pci,
        code=code,
        fatal=fatal,
        link=link,
        message=message,
        timestamp=timestamp,
        host=host,
        raw=line[:4096],
        info=info,
        severity=severity,
        action=action,
        header_seen=continuation is None,
        device_text=device_text[:64] if device_text else None,
        redacted=tuple(redacted),
    )
    return event, continuation


class SXidParser:
    """Streaming SXid parser: feed it lines, collect the events it completes.

    An event stays *open* after its header so that its ``Severity``/``Data`` lines (which may come
    after unrelated lines, e.g. the GPUs' NVRM lines) attach to it; it is completed when a new
    header of the same (switch, PCI address, code) arrives, when more than :data:`MAX_OPEN_EVENTS`
    are open (the oldest first), or at :meth:`close`. Completed events come out in the order their
    first lines were read. State is bounded whatever the input: at most :data:`MAX_OPEN_EVENTS`
    open events of at most :data:`MAX_CONTINUATION_LINES` kept lines each.
    """

    def __init__(self) -> None:
        self._open: OrderedDict[tuple[str, str, int], _Open] = OrderedDict()

    def _complete_through(self, key: tuple[str, str, int]) -> list[SXidEvent]:
        """Complete every open event opened up to and including the one of ``key``."""
        out: list[SXidEvent] = []
        while self._open:
            k, ev = self._open.popitem(last=False)
            out.append(ev.done())
            if k == key:
                break
        return out

    def feed(self, line: str) -> list[SXidEvent]:
        """Read one line.

        Args:
            line: one kernel-log line, without its line end (any text).

        Returns:
            The events this line completed (usually none), in file order. Never raises.
        """
        if "SXid" not in line:
            return []
        parsed = _parse(line)
        if parsed is None:
            return []
        event, continuation = parsed
        key = event.key
        if continuation is not None:
            current = self._open.get(key)
            if current is not None:
                current.add(continuation)
                return []
        out = self._complete_through(key) if key in self._open else []
        opened = _Open(event)
        if continuation is not None:
            opened.add(continuation)
        self._open[key] = opened
        while len(self._open) > MAX_OPEN_EVENTS:
            out.append(self._open.popitem(last=False)[1].done())
        return out

    def close(self) -> list[SXidEvent]:
        """Complete every open event (the end of the log).

        Returns:
            The events still open, in file order; the parser is empty afterwards. Never raises.
        """
        out = [ev.done() for ev in self._open.values()]
        self._open.clear()
        return out

    @property
    def open_events(self) -> int:
        """How many events are waiting for continuation lines (at most :data:`MAX_OPEN_EVENTS`)."""
        return len(self._open)


def iter_sxid(text: str | Iterable[str]) -> Iterator[SXidEvent]:
    """Yield every NVSwitch SXid event of a kernel log, one line at a time (memory flat in its size).

    Args:
        text: the log as one string, or its lines (e.g. a file being read).

    Yields:
        The events in file order, each with its continuation lines. Never raises on any text.
    """
    parser = SXidParser()
    lines = text.splitlines() if isinstance(text, str) else text
    for raw in lines:
        yield from parser.feed(raw.rstrip("\r\n"))
    yield from parser.close()


def parse_sxid(text: str | Iterable[str]) -> list[SXidEvent]:
    """Find every NVSwitch SXid event in a kernel log.

    Args:
        text: the log (``dmesg``, syslog, ``journalctl -k`` or bare lines); other lines are ignored.

    Returns:
        The events in file order (continuation lines attached, not counted); empty when there are
        none. Never raises on any text.
    """
    return list(iter_sxid(text))


def switch_label(event: SXidEvent) -> str:
    """How a finding names the switch of ``event``: ``"nvidia-nvswitch3 (0000:05:00.0)"``.

    Args:
        event: the event.

    Returns:
        The switch name with its PCI address, or with what is known when that was redacted.
    """
    if event.pci == DEVICE_REDACTED:
        return f"{event.switch} (PCI id redacted)"
    if event.pci == DEVICE_UNKNOWN:
        return event.switch
    return f"{event.switch} ({event.pci})"
