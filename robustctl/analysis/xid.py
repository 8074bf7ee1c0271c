"""NVIDIA XID events: the catalog and a kernel-log parser.

The NVIDIA driver reports GPU faults to the kernel log as ``NVRM: Xid (PCI:DDDD:BB:DD): N, ...``
lines. :func:`parse_kernel_log` finds every such line in syslog, ``dmesg`` (``[uptime]`` prefix),
``journalctl`` or bare form and :func:`classify` explains the code.

Sources of the catalog (codes, mnemonics, NVIDIA's "Resolution Bucket (Immediate Action)"):

- NVIDIA, *Analyzing Xid Errors with the Xid Catalog*,
  https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (Ampere and newer; the
  ``resolution`` field below is that page's immediate-action bucket, e.g. ``RESET_GPU``).
- NVIDIA, *Xid Errors* (older GPUs, cause columns "HW error / driver error / user app error"),
  https://docs.nvidia.com/deploy/xid-errors/ and *GPU Memory Error Management* (row remapping, 63/64,
  94/95, recovery action flag of XID 154),
  https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/.
- NVIDIA k8s-device-plugin ``internal/rm/health.go``: XIDs 13, 31, 43, 45, 68, 109 are treated as
  application errors that do not make a device unhealthy.

robustctl's category is the decision an SRE of a training fleet takes, which is stricter than
NVIDIA's per-application view in a few places (documented per entry): a job spans every GPU of the
host, so a GPU that needs a reset or a repair takes the host out of the job.

- :attr:`XidCategory.HARDWARE` -> ``evict``: memory (48, 63, 64, 92, 94, 95, 140, 171, 172),
  interconnect (74, 136, 144-150), bus (79), GPU firmware/GSP (119, 120, 143), recovery action (154).
- :attr:`XidCategory.APPLICATION` -> ``check user code``: 11, 13, 25, 31, 43, 45, 68, 69, 137.
- :attr:`XidCategory.DRIVER` -> ``reset GPU`` (46, 61, 62, 109, 158, ...) or ``investigate`` (8, 32, ...).
- :attr:`XidCategory.UNKNOWN` -> ``investigate``: codes outside the catalog.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from enum import Enum

from robustctl.models import Status

__all__ = [
    "ACTION_CHECK_USER_CODE",
    "ACTION_EVICT",
    "ACTION_INVESTIGATE",
    "ACTION_NONE",
    "ACTION_RESET_GPU",
    "CATALOG",
    "XidCategory",
    "XidEvent",
    "XidInfo",
    "classify",
    "iter_kernel_log",
    "parse_kernel_log",
]

ACTION_EVICT = "evict"
"""Take the host out of the job and repair (or reset, then re-qualify) the GPU."""
ACTION_CHECK_USER_CODE = "check user code"
"""The fault is most likely in the application (bad address, illegal instruction, abort)."""
ACTION_RESET_GPU = "reset GPU"
"""The GPU needs a reset (``nvidia-smi -r``) or a node reboot before it is usable again."""
ACTION_INVESTIGATE = "investigate"
"""No single cause; restart the application and look at the other XIDs of the same GPU."""
ACTION_NONE = "none"
"""Informational; nothing to do (e.g. XID 154 recovery action back to ``None``)."""


class XidCategory(str, Enum):
    """Who is most likely at fault for an XID."""

    HARDWARE = "hardware"
    """The GPU, its memory, NVLink or PCIe link: evict the host."""
    APPLICATION = "application"
    """The user's code: check it before blaming the machine."""
    DRIVER = "driver"
    """Driver or firmware state: reset the GPU; evict if it recurs."""
    UNKNOWN = "unknown"
    """Not in the catalog."""


@dataclass(frozen=True)
class XidInfo:
    """What one XID code means.

    Attributes:
        xid: the code.
        name: short human description, e.g. ``"GPU has fallen off the bus"``.
        category: who is most likely at fault.
        action: what to do: ``"evict"``, ``"check user code"``, ``"reset GPU"``, ``"investigate"``
            or ``"none"`` (the ``ACTION_*`` constants).
        mnemonic: NVIDIA's mnemonic, e.g. ``"ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"``.
        resolution: NVIDIA's immediate-action resolution bucket, e.g. ``"RESTART_BM"``.
        subsystem: ``"memory"``, ``"nvlink"``, ``"pcie"``, ``"firmware"``, ``"engine"``, ``"power"``
            or ``""``.
        severity: the verdict a host check should give one such event: CRITICAL for ``evict`` and
            ``reset GPU``, WARNING for ``check user code`` and ``investigate``, OK for ``none``.
        note: one line of guidance, or ``""``.
    """

    xid: int
    name: str
    category: XidCategory
    action: str
    mnemonic: str = ""
    resolution: str = ""
    subsystem: str = ""
    severity: Status = Status.CRITICAL
    note: str = ""


def _info(
    xid: int,
    name: str,
    category: XidCategory,
    action: str,
    mnemonic: str,
    resolution: str,
    subsystem: str = "",
    note: str = "",
) -> XidInfo:
    if action in (ACTION_EVICT, ACTION_RESET_GPU):
        severity = Status.CRITICAL
    elif action == ACTION_NONE:
        severity = Status.OK
    else:
        severity = Status.WARNING
    return XidInfo(xid, name, category, action, mnemonic, resolution, subsystem, severity, note)


_H, _A, _D = XidCategory.HARDWARE, XidCategory.APPLICATION, XidCategory.DRIVER
_EV, _APP, _RST, _INV = ACTION_EVICT, ACTION_CHECK_USER_CODE, ACTION_RESET_GPU, ACTION_INVESTIGATE

_ENTRIES: tuple[XidInfo, ...] = (
    _info(
        8,
        "GPU stopped processing",
        _D,
        _INV,
        "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT",
        "RESTART_APP",
        "engine",
        "restart the application; contact support if it recurs",
    ),
    _info(
        11,
        "Invalid or corrupted push buffer stream",
        _A,
        _APP,
        "ROBUST_CHANNEL_GR_ERROR_MISSING_HW",
        "RESTART_APP",
        "engine",
    ),
    _info(
        13,
        "Graphics engine exception",
        _A,
        _APP,
        "ROBUST_CHANNEL_GR_EXCEPTION",
        "RESTART_APP",
        "engine",
        "usually an out-of-bounds access or illegal instruction; run compute-sanitizer memcheck",
    ),
    _info(
        25,
        "Invalid or illegal push buffer stream",
        _A,
        _APP,
        "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY",
        "RESTART_APP",
        "engine",
    ),
    _info(
        31,
        "GPU memory page fault (MMU fault)",
        _A,
        _APP,
        "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT",
        "RESTART_APP",
        "engine",
        "illegal address access, usually an application bug",
    ),
    _info(
        32,
        "Invalid or corrupted push buffer stream (PBDMA fault)",
        _D,
        _INV,
        "ROBUST_CHANNEL_PBDMA_ERROR",
        "RESTART_APP",
        "pcie",
        "NVIDIA: mostly PCIe quality issues, not the application; evict if it recurs",
    ),
    _info(
        38,
        "Driver firmware error (FECS watchdog timeout)",
        _D,
        _INV,
        "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT",
        "IGNORE",
        "firmware",
    ),
    _info(
        43,
        "GPU stopped processing (application fault, GPU healthy)",
        _A,
        _APP,
        "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR",
        "IGNORE",
        "engine",
    ),
    _info(
        44,
        "Graphics engine fault during context switch",
        _D,
        _INV,
        "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW",
        "IGNORE",
        "engine",
    ),
    _info(
        45,
        "Preemptive cleanup, due to previous errors",
        _A,
        _APP,
        "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        "WORKFLOW_XID_45",
        "engine",
        "application aborted or torn down (Ctrl-C, kill, reset); alone it is benign, "
        "otherwise follow the other XIDs of the same GPU (e.g. 48, 94, 95)",
    ),
    _info(
        46,
        "GPU stopped processing (timeout)",
        _D,
        _RST,
        "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR",
        "RESET_GPU",
        "engine",
    ),
    _info(
        48,
        "Double bit ECC error (DBE)",
        _H,
        _EV,
        "ROBUST_CHANNEL_GPU_ECC_DBE",
        "WORKFLOW_XID_48",
        "memory",
        "uncorrectable memory error; GPU reset or node reboot needed, RMA if it recurs",
    ),
    _info(
        54,
        "Auxiliary power is not connected to the GPU board",
        _H,
        _EV,
        "SILENT_RUNNING_PWR_REDUCED_CLOCKING",
        "CHECK_MECHANICALS",
        "power",
    ),
    _info(
        61,
        "Internal micro-controller breakpoint/warning",
        _D,
        _RST,
        "PMU_BREAKPOINT",
        "CONTACT_SUPPORT",
        "firmware",
    ),
    _info(62, "Internal micro-controller halt", _D, _RST, "PMU_HALT_ERROR", "RESET_GPU", "firmware"),
    _info(
        63,
        "Row remapping / page retirement event",
        _H,
        _EV,
        "INFOROM_DRAM_RETIREMENT_EVENT",
        "IGNORE",
        "memory",
        "a memory row was marked for remapping; it is applied only at the next GPU reset "
        "(NVIDIA: IGNORE for running applications; drain and reset before the next job)",
    ),
    _info(
        64,
        "Row remapping / page retirement failure",
        _H,
        _EV,
        "INFOROM_DRAM_RETIREMENT_FAILURE",
        "RESET_GPU",
        "memory",
        "remapping failed: RMA candidate if it recurs after a reset",
    ),
    _info(68, "NVDEC0 exception", _A, _APP, "ROBUST_CHANNEL_NVDEC0_ERROR", "RESTART_APP", "engine"),
    _info(
        69, "Graphics engine class error", _A, _APP, "ROBUST_CHANNEL_GR_CLASS_ERROR", "RESTART_APP", "engine"
    ),
    _info(
        74,
        "NVLink error",
        _H,
        _EV,
        "NVLINK_ERROR",
        "WORKFLOW_NVLINK_ERR",
        "nvlink",
        "link or remote-end fault; a failing peer GPU can make its neighbours report 74 too",
    ),
    _info(
        79,
        "GPU has fallen off the bus",
        _H,
        _EV,
        "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
        "RESTART_BM",
        "pcie",
        "GPU not reachable over PCIe; reboot, check PCIe/power, RMA if it recurs",
    ),
    _info(
        92,
        "High single-bit ECC error rate",
        _H,
        _EV,
        "EXCESSIVE_SBE_INTERRUPTS",
        "IGNORE",
        "memory",
        "NVIDIA: IGNORE, CONTACT_SUPPORT; a leading indicator of failing memory",
    ),
    _info(
        94,
        "Contained memory error",
        _H,
        _EV,
        "ROBUST_CHANNEL_CONTAINED_ERROR",
        "RESTART_APP",
        "memory",
        "one application affected; reset the GPU when convenient",
    ),
    _info(
        95,
        "Uncontained memory error",
        _H,
        _EV,
        "ROBUST_CHANNEL_UNCONTAINED_ERROR",
        "RESET_GPU",
        "memory",
        "all applications on the GPU affected; GPU reset required",
    ),
    _info(
        109,
        "Context switch timeout error",
        _D,
        _RST,
        "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR",
        "RESET_GPU",
        "engine",
    ),
    _info(110, "Security fault error", _H, _EV, "SEC_FAULT_ERROR", "RESET_GPU", "firmware"),
    _info(
        119,
        "GSP RPC timeout",
        _H,
        _EV,
        "GSP_RPC_TIMEOUT",
        "RESET_GPU",
        "firmware",
        "GPU System Processor did not answer; reset or power cycle, evict if it recurs",
    ),
    _info(
        120,
        "GSP error",
        _H,
        _EV,
        "GSP_ERROR",
        "RESET_GPU",
        "firmware",
        "error in code running on the GPU System Processor; reset or power cycle",
    ),
    _info(
        121,
        "C2C link corrected error",
        _H,
        _RST,
        "C2C_ERROR",
        "IGNORE",
        "nvlink",
        "corrected errors on the Grace C2C link; reset the GPU at a service window",
    ),
    _info(122, "SPI PMU RPC read failure", _H, _INV, "SPI_PMU_RPC_READ_FAIL", "CONTACT_SUPPORT", "firmware"),
    _info(
        123, "SPI PMU RPC write failure", _H, _INV, "SPI_PMU_RPC_WRITE_FAIL", "CONTACT_SUPPORT", "firmware"
    ),
    _info(
        124, "SPI PMU RPC erase failure", _H, _INV, "SPI_PMU_RPC_ERASE_FAIL", "CONTACT_SUPPORT", "firmware"
    ),
    _info(136, "NVLink link training failed", _H, _EV, "ALI_TRAINING_FAIL", "RESET_GPU", "nvlink"),
    _info(
        137, "NVLink privilege error (illegal peer access)", _A, _APP, "NVLINK_PRIV_ERR", "IGNORE", "nvlink"
    ),
    _info(
        140,
        "ECC unrecovered error",
        _H,
        _EV,
        "UNRECOVERABLE_ECC_ERROR_ESCAPE",
        "RESET_GPU",
        "memory",
        "uncorrectable memory error that escaped page offlining/row remapping",
    ),
    _info(143, "GPU initialization error", _H, _EV, "GPU_INIT_ERROR", "RESET_GPU", "firmware"),
    _info(144, "NVLink SAW error", _H, _EV, "NVLINK_SAW_ERROR", "WORKFLOW_NVLINK5_ERR", "nvlink"),
    _info(145, "NVLink RLW error", _H, _EV, "NVLINK_RLW_ERROR", "WORKFLOW_NVLINK5_ERR", "nvlink"),
    _info(146, "NVLink TLW error", _H, _EV, "NVLINK_TLW_ERROR", "WORKFLOW_NVLINK5_ERR", "nvlink"),
    _info(147, "NVLink TREX error", _H, _EV, "NVLINK_TREX_ERROR", "WORKFLOW_NVLINK5_ERR", "nvlink"),
    _info(
        148, "NVLink NVLPW_CTRL error", _H, _EV, "NVLINK_NVLPW_CTRL_ERROR", "WORKFLOW_NVLINK5_ERR", "nvlink"
    ),
    _info(149, "NVLink NETIR error", _H, _EV, "NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK5_ERR", "nvlink"),
    _info(150, "NVLink MSE error", _H, _EV, "NVLINK_MSE_ERROR", "WORKFLOW_NVLINK5_ERR", "nvlink"),
    _info(151, "Key rotation error", _D, _INV, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "RESTART_VM", "firmware"),
    _info(
        154,
        "GPU recovery action changed",
        _H,
        _EV,
        "GPU_RECOVERY_ACTION_CHANGED",
        "XID_154",
        "",
        "summarises the recovery action other XIDs need (GPU reset, node reboot, drain P2P)",
    ),
    _info(
        155, "NVLink link down (software defined)", _D, _RST, "NVLINK_SW_DEFINED_ERROR", "RESET_GPU", "nvlink"
    ),
    _info(156, "Resource retirement event", _H, _RST, "RESOURCE_RETIREMENT_EVENT", "RESET_GPU", "memory"),
    _info(
        157,
        "Resource retirement failure",
        _H,
        _EV,
        "RESOURCE_RETIREMENT_FAILURE",
        "IGNORE",
        "memory",
        "no repair resources left; the same XID will recur",
    ),
    _info(158, "GPU fatal timeout", _D, _RST, "GPU_FATAL_TIMEOUT", "RESET_GPU", "engine"),
    _info(
        171,
        "Uncorrectable DRAM error",
        _H,
        _EV,
        "UNCORRECTABLE_DRAM_ERROR",
        "",
        "memory",
        "details of an XID 48",
    ),
    _info(
        172,
        "Uncorrectable SRAM error",
        _H,
        _EV,
        "UNCORRECTABLE_SRAM_ERROR",
        "",
        "memory",
        "details of an XID 48",
    ),
)

CATALOG: dict[int, XidInfo] = {e.xid: e for e in _ENTRIES}
"""Every XID robustctl knows, by code. Read-only by convention."""


def classify(xid: int) -> XidInfo:
    """Explain one XID code.

    Args:
        xid: the number after ``Xid (PCI:...):`` in the kernel log.

    Returns:
        The catalog entry; for a code outside the catalog an :attr:`XidCategory.UNKNOWN` entry with
        action ``"investigate"`` and severity WARNING. Never raises.
    """
    info = CATALOG.get(xid)
    if info is not None:
        return info
    return XidInfo(
        xid=xid,
        name=f"XID {xid} (not in robustctl's catalog)",
        category=XidCategory.UNKNOWN,
        action=ACTION_INVESTIGATE,
        severity=Status.WARNING,
        note="look it up in NVIDIA's Xid catalog",
    )


@dataclass(frozen=True)
class XidEvent:
    """One ``NVRM: Xid`` line of a kernel log.

    Attributes:
        pci: the GPU's PCI address as the driver printed it, e.g. ``"0000:10:1c"``.
        xid: the code.
        pid: the process the driver blamed, or ``None`` (``pid='<unknown>'`` or absent).
        process: that process's name, or ``None`` (``name=<unknown>`` or absent).
        message: the text after the code and the pid/name fields.
        timestamp: wall-clock time of the log prefix (``"May 19 07:08:57"`` or ISO 8601) when present,
            else the ``dmesg`` uptime (``"219.470994"``), else ``None``.
        raw: the whole line, as read.
        info: :func:`classify` of the code, refined for XID 154 by the recovery action in the message.
        host: the host name of a syslog/journal prefix, when present.
    """

    pci: str
    xid: int
    pid: int | None
    process: str | None
    message: str
    timestamp: str | None
    raw: str
    info: XidInfo
    host: str | None = None

    @property
    def category(self) -> XidCategory:
        """Shortcut for ``info.category``."""
        return self.info.category

    @property
    def action(self) -> str:
        """Shortcut for ``info.action``."""
        return self.info.action

    @property
    def severity(self) -> Status:
        """Shortcut for ``info.severity``."""
        return self.info.severity


# `NVRM: Xid (PCI:0000:07:00): 48, ...`; also `(0000:01:00)` and MIG `(PCI:0000:07:00 GPU-I:01)`.
_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?)"
    r"(?P<extra>[^)]*)\):\s*(?P<xid>\d+)\s*(?:,\s*(?P<rest>.*))?$"
)
_PID_RE = re.compile(r"^pid\s*=\s*'?(?P<pid><unknown>|\d+)'?\s*(?:,\s*|$)")
_NAME_RE = re.compile(r"^name\s*=\s*(?P<name><unknown>|[^,]*?)\s*(?:,\s*|$)")
# syslog: `Dec  2 11:38:47 worker4 kernel:`; ISO (rsyslog/journal -o short-iso):
# `2024-05-19T07:08:57.123+00:00 host kernel:`; journal without a host: `May 18 19:02:39 kernel:`.
_SYSLOG_RE = re.compile(
    r"(?P<ts>(?:[A-Z][a-z]{2}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2})"
    r"|(?:\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?))"
    r"\s+(?:(?P<host>\S+)\s+)?kernel:"
)
_UPTIME_RE = re.compile(r"\[\s*(?P<uptime>\d+\.\d+)\]\s*NVRM:")
_RECOVERY_RE = re.compile(
    r"recovery action changed from\s+\S+\s*\([^)]*\)\s*to\s+\S+\s*\((?P<to>[^)]*)\)", re.IGNORECASE
)


def _refine_154(info: XidInfo, message: str) -> XidInfo:
    """XID 154 names the new recovery action; "None" means the GPU is usable again."""
    m = _RECOVERY_RE.search(message)
    if m is None:
        return info
    target = m.group("to").strip()
    if target.lower() == "none":
        return replace(
            info,
            name="GPU recovery action changed to None",
            action=ACTION_NONE,
            severity=Status.OK,
            note="the GPU needs no recovery action any more",
        )
    return replace(info, name=f"GPU recovery action changed to {target}")


def _parse_line(line: str) -> XidEvent | None:
    m = _XID_RE.search(line)
    if m is None:
        return None
    xid = int(m.group("xid"))
    rest = (m.group("rest") or "").strip()
    pid: int | None = None
    process: str | None = None
    pm = _PID_RE.match(rest)
    if pm is not None:
        pid = None if pm.group("pid") == "<unknown>" else int(pm.group("pid"))
        rest = rest[pm.end() :]
    nm = _NAME_RE.match(rest)
    if nm is not None:
        name = nm.group("name")
        process = None if name in ("<unknown>", "") else name
        rest = rest[nm.end() :]
    prefix = line[: m.start()]
    timestamp: str | None = None
    host: str | None = None
    sm = _SYSLOG_RE.search(prefix)
    if sm is not None:
        timestamp = sm.group("ts")
        host = sm.group("host")
    um = _UPTIME_RE.search(line[: m.start() + len("NVRM:")])
    if timestamp is None and um is not None:
        timestamp = um.group("uptime")
    info = classify(xid)
    if xid == 154:
        info = _refine_154(info, rest)
    return XidEvent(
        pci=m.group("pci").lower(),
        xid=xid,
        pid=pid,
        process=process,
        message=rest.strip(),
        timestamp=timestamp,
        raw=line,
        info=info,
        host=host,
    )


def iter_kernel_log(text: str | Iterable[str]) -> Iterator[XidEvent]:
    """Yield every ``NVRM: Xid`` event of a kernel log, one line at a time (memory flat in its size).

    Args:
        text: the log as one string, or its lines (e.g. a file being read); see
            :func:`parse_kernel_log`.

    Yields:
        The events in file order. Never raises on any text.
    """
    lines = text.splitlines() if isinstance(text, str) else text
    for raw in lines:
        if "Xid" not in raw:
            continue
        event = _parse_line(raw.rstrip("\r\n"))
        if event is not None:
            yield event


def parse_kernel_log(text: str | Iterable[str]) -> list[XidEvent]:
    """Find every ``NVRM: Xid`` event in a kernel log.

    Args:
        text: the log (``dmesg``, ``/var/log/syslog``, ``journalctl -k`` or bare lines); other lines
            (``NVRM: GPU ... RmInitAdapter failed``, unrelated messages) are ignored. For a log of
            unbounded size use :func:`iter_kernel_log`, which keeps no list.

    Returns:
        The events in file order, one per matching line; empty when there are none. Never raises
        on any text.
    """
    return list(iter_kernel_log(text))
