"""NVIDIA XID events: the catalog and a kernel-log parser.

The NVIDIA driver reports GPU faults to the kernel log as ``NVRM: Xid (PCI:DDDD:BB:DD): N, ...``
lines. :func:`parse_kernel_log` finds every such line in syslog, ``dmesg`` (``[uptime]`` prefix),
``journalctl`` or bare form and :func:`classify` explains the code.

Lines as people paste them are often redacted before posting: the PCI id (``(PCI:XXXX:XX:XX)``,
``(PCI:...)``, ``(<redacted>)``, ``(****)``), the pid and process name, the host and the timestamps.
The code and the message are what matters and are always kept: an event whose device is redacted
has :attr:`XidEvent.pci` ``"redacted"`` (``"unknown"`` when the parentheses hold something that is
neither a PCI id nor a redaction), never dropped.

Sources of the catalog (codes, mnemonics, descriptions, NVIDIA's "Resolution Bucket (Immediate
Action)", the GPUs each code applies to and the driver that introduced it):

- NVIDIA, *Analyzing Xid Errors with the Xid Catalog*,
  https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (Ampere and newer: A100,
  H100, B100, GB200; the ``resolution`` field below is that page's immediate-action bucket, e.g.
  ``RESET_GPU``; codes 143 and 160-161 came with driver R575, 144-150 and 155-157 with R565, 158-172
  with later R57x/R58x drivers). Its NVLink5 sub-code table (errorStatus per unit) shows that
  144-146 and 149-150 are fatal (``RESET_GPU``) for some sub-codes and ``IGNORE`` for others, and
  that 147 (TREX, "not in production code") and 148 (NVLPW_CTRL) are ``IGNORE`` for every sub-code.
- NVIDIA, *Xid Errors* (older GPUs, cause columns "HW error / driver error / user app error"),
  https://docs.nvidia.com/deploy/xid-errors/ and *GPU Memory Error Management* (row remapping, 63/64,
  94/95, recovery action flag of XID 154),
  https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/.
- NVIDIA k8s-device-plugin ``internal/rm/health.go``: XIDs 13, 31, 43, 45, 68, 109 are treated as
  application errors that do not make a device unhealthy.

robustctl's category is the decision an SRE of a training fleet takes, which is stricter than
NVIDIA's per-application view in a few places (documented per entry): a job spans every GPU of the
host, so a GPU that needs a reset or a repair takes the host out of the job.

- :attr:`XidCategory.HARDWARE` -> ``evict``: memory (48, 63, 64, 92, 94, 95, 140, 157, 171, 172),
  interconnect (74, 136, 144-146, 149, 150), bus (79, 167), GPU firmware/GSP (110, 119, 120, 143),
  recovery action (154).
- :attr:`XidCategory.APPLICATION` -> ``check user code``: 11, 13, 25, 31, 43, 45, 68, 69, 137, and
  the engine exceptions NVIDIA buckets as ``RESTART_APP`` (copy engines 39-41, 70-72, 75-77, 85,
  126-135; NVDEC/NVJPG/OFA/NVENC 60, 82-84, 86, 88, 89, 96-105, 139, 142).
- :attr:`XidCategory.DRIVER` -> ``reset GPU`` (46, 61, 62, 109, 155, 156, 158, 169, ...) or
  ``investigate`` (8, 32, 37, 38, 147, 148, 159-166, 168, 170, ...); 121 (corrected C2C errors) is
  hardware but ``investigate``: NVIDIA documents no operational impact.
- :attr:`XidCategory.UNKNOWN` -> ``investigate``: codes outside the catalog (reported, never dropped).
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
    "DEVICE_REDACTED",
    "DEVICE_UNKNOWN",
    "XidCategory",
    "XidEvent",
    "XidInfo",
    "classify",
    "device_of",
    "iter_kernel_log",
    "log_prefix",
    "looks_redacted",
    "parse_kernel_log",
    "parse_line",
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


_NVLINK5_NOTE = (
    "NVLink5 (B100/GB200): fatal (reset GPU) or ignorable depending on the sub-code "
    "(errorStatus); decode it with NVIDIA's NVLink5 table"
)

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
        _INV,
        "C2C_ERROR",
        "IGNORE",
        "nvlink",
        "corrected errors on the C2C NVLink to the Grace CPU (GB200); no operational impact, "
        "reset the GPU at a service window to retrain the link",
    ),
    _info(
        122,
        "SPI PMU RPC read failure",
        _H,
        _INV,
        "SPI_PMU_RPC_READ_FAIL",
        "CONTACT_SUPPORT",
        "firmware",
        "NVIDIA lists it as unused on A100/H100/B100/GB200",
    ),
    _info(
        123, "SPI PMU RPC write failure", _H, _INV, "SPI_PMU_RPC_WRITE_FAIL", "CONTACT_SUPPORT", "firmware"
    ),
    _info(
        124, "SPI PMU RPC erase failure", _H, _INV, "SPI_PMU_RPC_ERASE_FAIL", "CONTACT_SUPPORT", "firmware"
    ),
    _info(
        136,
        "NVLink link training failed",
        _H,
        _EV,
        "ALI_TRAINING_FAIL",
        "RESET_GPU",
        "nvlink",
        "H100; NVIDIA's investigatory action: check the link's signal integrity",
    ),
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
    _info(
        144,
        "NVLink SAW error",
        _H,
        _EV,
        "NVLINK_SAW_ERROR",
        "WORKFLOW_NVLINK5_ERR",
        "nvlink",
        _NVLINK5_NOTE,
    ),
    _info(
        145,
        "NVLink RLW error",
        _H,
        _EV,
        "NVLINK_RLW_ERROR",
        "WORKFLOW_NVLINK5_ERR",
        "nvlink",
        _NVLINK5_NOTE,
    ),
    _info(
        146,
        "NVLink TLW error",
        _H,
        _EV,
        "NVLINK_TLW_ERROR",
        "WORKFLOW_NVLINK5_ERR",
        "nvlink",
        _NVLINK5_NOTE,
    ),
    _info(
        147,
        "NVLink TREX error",
        _H,
        _INV,
        "NVLINK_TREX_ERROR",
        "WORKFLOW_NVLINK5_ERR",
        "nvlink",
        "NVIDIA: IGNORE for every sub-code (not in production code)",
    ),
    _info(
        148,
        "NVLink NVLPW_CTRL error",
        _H,
        _INV,
        "NVLINK_NVLPW_CTRL_ERROR",
        "WORKFLOW_NVLINK5_ERR",
        "nvlink",
        "NVIDIA: IGNORE for every sub-code",
    ),
    _info(
        149,
        "NVLink NETIR error",
        _H,
        _EV,
        "NVLINK_NETIR_ERROR",
        "WORKFLOW_NVLINK5_ERR",
        "nvlink",
        _NVLINK5_NOTE,
    ),
    _info(
        150,
        "NVLink MSE error",
        _H,
        _EV,
        "NVLINK_MSE_ERROR",
        "WORKFLOW_NVLINK5_ERR",
        "nvlink",
        _NVLINK5_NOTE,
    ),
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


def _engine_exceptions() -> tuple[XidInfo, ...]:
    """Copy-engine, video and optical-flow engine exceptions: NVIDIA buckets all of them as
    ``RESTART_APP`` (investigatory ``CONTACT_SUPPORT``)."""
    engines: dict[int, tuple[str, str]] = {
        39: ("CE0", "COPY"),
        40: ("CE1", "COPY"),
        41: ("CE2", "COPY"),
        70: ("CE3", "COPY"),
        71: ("CE4", "COPY"),
        72: ("CE5", "COPY"),
        75: ("CE6", "COPY"),
        76: ("CE7", "COPY"),
        77: ("CE8", "COPY"),
        85: ("CE9", "COPY"),
        60: ("SEC2", "VIDEO"),
        82: ("NVJPG0", "VIDEO"),
        83: ("NVDEC1", "VIDEO"),
        84: ("NVDEC2", "VIDEO"),
        86: ("OFA0", "VIDEO"),
        88: ("NVDEC3", "VIDEO"),
        89: ("NVDEC4", "VIDEO"),
        96: ("NVDEC5", "VIDEO"),
        97: ("NVDEC6", "VIDEO"),
        98: ("NVDEC7", "VIDEO"),
        99: ("NVJPG1", "VIDEO"),
        100: ("NVJPG2", "VIDEO"),
        101: ("NVJPG3", "VIDEO"),
        102: ("NVJPG4", "VIDEO"),
        103: ("NVJPG5", "VIDEO"),
        104: ("NVJPG6", "VIDEO"),
        105: ("NVJPG7", "VIDEO"),
        139: ("OFA1", "VIDEO"),
        142: ("NVENC3", "VIDEO"),
    }
    engines.update({126 + i: (f"CE{10 + i}", "COPY") for i in range(10)})
    out = []
    for code, (unit, kind) in sorted(engines.items()):
        name = f"{unit} copy engine exception" if kind == "COPY" else f"{unit} engine exception"
        out.append(_info(code, name, _A, _APP, f"ROBUST_CHANNEL_{unit}_ERROR", "RESTART_APP", "engine"))
    return tuple(out)


_NEWER_ENTRIES: tuple[XidInfo, ...] = (
    _info(
        37,
        "Driver firmware error (unimplemented firmware method)",
        _D,
        _INV,
        "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD",
        "IGNORE",
        "firmware",
    ),
    _info(
        66,
        "Illegal access by driver",
        _D,
        _INV,
        "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION",
        "IGNORE",
        "firmware",
    ),
    _info(
        67,
        "Illegal access by driver",
        _D,
        _INV,
        "ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION",
        "IGNORE",
        "firmware",
    ),
    _info(
        78,
        "vGPU start error",
        _D,
        _INV,
        "VGPU_START_ERROR",
        "UPDATE_SWFW",
        "firmware",
        "update the vGPU software",
    ),
    _info(
        80,
        "Corrupted data sent to GPU (push buffer CRC mismatch)",
        _A,
        _APP,
        "PBDMA_PUSHBUFFER_CRC_MISMATCH",
        "RESTART_APP",
        "pcie",
    ),
    _info(
        93,
        "Non-fatal violation of provisioned InfoROM wear limit",
        _D,
        _INV,
        "INFOROM_ERASE_LIMIT_EXCEEDED",
        "IGNORE",
        "firmware",
        "clear the InfoROM erase limit (nvflash --elsessionclear)",
    ),
    _info(141, "CUDA fast path error", _D, _INV, "ROBUST_CHANNEL_FAST_PATH_ERROR", "IGNORE", "engine"),
    _info(
        159,
        "CHI non-data error",
        _D,
        _INV,
        "ROBUST_CHANNEL_CHI_NON_DATA_ERROR",
        "CHECK_UVM",
        "nvlink",
        "B100/GB200, on any C2C-connected GPU; NVIDIA: check UVM",
    ),
    _info(160, "Channel retirement event", _D, _INV, "CHANNEL_RETIREMENT_EVENT", "IGNORE", "engine"),
    _info(161, "Channel retirement failure", _D, _INV, "CHANNEL_RETIREMENT_FAILURE", "IGNORE", "engine"),
    _info(
        162,
        "Power smoothing circuitry re-engaged",
        _D,
        ACTION_NONE,
        "PSHC_REENGAGED",
        "",
        "power",
    ),
    _info(
        163,
        "Power smoothing circuitry disengaged",
        _D,
        _INV,
        "PSHC_DISENGAGED",
        "",
        "power",
        "no GPU reset required; resolve the thermal events, or reload the driver if it timed out",
    ),
    _info(
        164,
        "Power smoothing circuitry low lifetime",
        _H,
        _INV,
        "PSHC_LOW_LIFETIME",
        "",
        "power",
        "power smoothing will be disabled soon; plan GPU replacement if it is needed",
    ),
    _info(
        165,
        "Power smoothing circuitry lifetime exhausted",
        _H,
        _INV,
        "PSHC_ZERO_LIFETIME",
        "",
        "power",
        "power smoothing disabled, power swings will occur; replace the GPU if they are not acceptable",
    ),
    _info(
        166,
        "NVLink encrypted traffic before the link was configured (confidential computing)",
        _D,
        _INV,
        "NVLINK_SECURE_CRYPTO_ERR",
        "",
        "nvlink",
    ),
    _info(
        167,
        "PCIe fatal timeout",
        _H,
        _EV,
        "PCIE_FATAL_TIMEOUT",
        "",
        "pcie",
        "NVIDIA lists no resolution bucket; treated like a lost PCIe link",
    ),
    _info(
        168,
        "Reduced GPU memory capacity (errors in the write-protected region)",
        _H,
        _INV,
        "REDUCED_GPU_MEMORY_CAPACITY",
        "",
        "memory",
        "seen with ECC disabled: enable ECC (row remapping) or reboot",
    ),
    _info(169, "Internal micro-controller halt (SEC2)", _D, _RST, "SEC2_HALT_ERROR", "", "firmware"),
    _info(
        170,
        "NVLink interrupt in confidential-computing mode",
        _D,
        _INV,
        "NVLINK_SECURE_OTHER",
        "",
        "nvlink",
    ),
)

CATALOG: dict[int, XidInfo] = {e.xid: e for e in (*_ENTRIES, *_engine_exceptions(), *_NEWER_ENTRIES)}
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
        pci: the GPU's PCI address as the driver printed it, lower case, e.g. ``"0000:10:1c"``;
            :data:`DEVICE_REDACTED` when it was redacted, :data:`DEVICE_UNKNOWN` when absent or
            unrecognisable.
        xid: the code.
        pid: the process the driver blamed, or ``None`` (``pid='<unknown>'`` or absent).
        process: that process's name, or ``None`` (``name=<unknown>`` or absent).
        message: the text after the code and the pid/name fields.
        timestamp: wall-clock time of the log prefix (``"May 19 07:08:57"`` or ISO 8601) when present,
            else the ``dmesg`` uptime (``"219.470994"``), else ``None``.
        raw: the whole line, as read.
        info: :func:`classify` of the code, refined for XID 154 by the recovery action in the message.
        host: the host name of a syslog/journal prefix, when present (``None`` when redacted).
        device_text: what stood between the parentheses when it was not a PCI id (at most 64
            characters), e.g. ``"PCI:XXXX:XX:XX"``; ``None`` for a PCI id.
        redacted: the fields found redacted, among ``"device"``, ``"pid"``, ``"name"``, ``"host"``.
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
    device_text: str | None = None
    redacted: tuple[str, ...] = ()

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


# `NVRM: Xid (PCI:0000:07:00): 48, ...`; also `(0000:01:00)`, MIG `(PCI:0000:07:00 GPU-I:01)` and
# whatever a redaction left between the parentheses (`(PCI:XXXX:XX:XX)`, `(<redacted>)`, `(****)`,
# `(PCI:...)`, `()`), or no parentheses at all (`NVRM: Xid <redacted>: 79`, `NVRM: Xid: 79`).
_XID_RE = re.compile(
    r"NVRM:\s*Xid\b\s*(?:\((?P<dev>(?:[^()]|\([^()]{0,64}\)){0,200})\)|(?P<bare>[^:,\d][^:,]{0,64}?))?"
    r"\s*:\s*(?P<xid>\d{1,9})\b\s*(?:,\s*(?P<rest>.*))?$"
)
_PCI_RE = re.compile(
    r"^\s*(?:PCI:)?(?P<pci>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?)(?![0-9A-Za-z:])"
)
_REDACTION_SHAPE_RE = re.compile(
    r"[\sxX*#?._:\-]*|[0-9a-fA-FxX*#?]{1,8}:[0-9a-fA-FxX*#?]{1,2}:[0-9a-fA-FxX*#?]{1,2}(?:\.\S)?\s*"
)
_REDACTION_WORD_RE = re.compile(
    r"<[^<>]{0,40}>|\[[^\[\]]{0,40}\]|\{[^{}]{0,40}\}|\b(?:redact|remov|hidden|hide|mask|scrub|anonymi[sz]"
    r"|omit|censor|elided|sanitiz|xxx)",
    re.IGNORECASE,
)


def looks_redacted(value: str) -> bool:
    """Whether ``value`` is what people put in place of a field before posting a log.

    Shapes such as ``XXXX:XX:XX``, ``****``, ``...``, ``<redacted>``, ``[REMOVED]``, ``{hidden}``,
    ``masked``. Shared with the NVSwitch SXid parser (:mod:`robustctl.analysis.sxid`), so that both
    kinds of kernel-log line are redacted alike.

    Args:
        value: the field's text; only its first 128 characters are looked at.

    Returns:
        True when the field looks redacted. Never raises.
    """
    head = value[:128]
    return _REDACTION_SHAPE_RE.fullmatch(head) is not None or _REDACTION_WORD_RE.search(head) is not None


DEVICE_REDACTED = "redacted"
""":attr:`XidEvent.pci` of an event whose PCI id was redacted (``XXXX:XX:XX``, ``<redacted>``, ``****``)."""
DEVICE_UNKNOWN = "unknown"
""":attr:`XidEvent.pci` of an event whose device is neither a PCI id nor a redaction (or absent)."""
_PID_RE = re.compile(r"^pid\s*[=:]\s*'?(?P<pid>[^,']*)'?\s*(?:,\s*|$)")
_NAME_RE = re.compile(r"^name\s*[=:]\s*(?P<name>[^,]*?)\s*(?:,\s*|$)")
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


def device_of(dev: str | None) -> tuple[str, str | None]:
    """The device named between a kernel-log line's parentheses (``(PCI:0000:07:00)``).

    Shared with the NVSwitch SXid parser (:mod:`robustctl.analysis.sxid`).

    Args:
        dev: the text between the parentheses (``None`` when the line has none).

    Returns:
        ``(pci, raw)``: a lower-case PCI id, :data:`DEVICE_REDACTED` or :data:`DEVICE_UNKNOWN`;
        ``raw`` is the text when it is not a PCI id, else ``None``. Never raises.
    """
    if dev is None or not dev.strip():
        return (DEVICE_REDACTED if dev is not None else DEVICE_UNKNOWN), dev
    m = _PCI_RE.match(dev)
    if m is not None:
        return m.group("pci").lower(), None
    body = dev.strip()
    if body[:4].upper() == "PCI:":
        body = body[4:]
    if looks_redacted(body):
        return DEVICE_REDACTED, dev.strip()
    return DEVICE_UNKNOWN, dev.strip()


def _redacted_field(value: str) -> bool:
    return bool(value) and value.lower() != "<unknown>" and looks_redacted(value)


def log_prefix(prefix: str) -> tuple[str | None, str | None, bool]:
    """The wall-clock time and host of a syslog/journal prefix (``May 19 07:08:57 host kernel:``).

    Shared with the NVSwitch SXid parser (:mod:`robustctl.analysis.sxid`).

    Args:
        prefix: the text of a line before the driver's message.

    Returns:
        ``(timestamp, host, host_redacted)``: ``None`` for what the prefix does not hold; a
        redacted host name is returned as ``None`` with ``host_redacted`` True. Never raises.
    """
    sm = _SYSLOG_RE.search(prefix)
    if sm is None:
        return None, None, False
    host = sm.group("host")
    if host is not None and _redacted_field(host):
        return sm.group("ts"), None, True
    return sm.group("ts"), host, False


def parse_line(line: str) -> XidEvent | None:
    """The ``NVRM: Xid`` event of one kernel-log line.

    Args:
        line: one line, without its line end.

    Returns:
        The event, or ``None`` when the line holds no ``NVRM: Xid``. Never raises.
    """
    if "Xid" not in line:
        return None
    m = _XID_RE.search(line)
    if m is None:
        return None
    xid = int(m.group("xid"))
    dev = m.group("dev")
    if dev is None and m.group("bare") is not None:
        dev = m.group("bare")
    pci, device_text = device_of(dev)
    rest = (m.group("rest") or "").strip()
    pid: int | None = None
    process: str | None = None
    redacted: list[str] = ["device"] if pci == DEVICE_REDACTED else []
    pm = _PID_RE.match(rest)
    if pm is not None:
        value = pm.group("pid").strip()
        if value.isdigit() and len(value) <= 9:
            pid = int(value)
        elif value != "<unknown>":
            redacted.append("pid")
        rest = rest[pm.end() :]
    nm = _NAME_RE.match(rest)
    if nm is not None:
        name = nm.group("name")
        if _redacted_field(name):
            redacted.append("name")
        else:
            process = None if name in ("<unknown>", "") else name
        rest = rest[nm.end() :]
    timestamp, host, host_redacted = log_prefix(line[: m.start()])
    if host_redacted:
        redacted.append("host")
    um = _UPTIME_RE.search(line[: m.start() + len("NVRM:")])
    if timestamp is None and um is not None:
        timestamp = um.group("uptime")
    info = classify(xid)
    if xid == 154:
        info = _refine_154(info, rest)
    return XidEvent(
        pci=pci,
        xid=xid,
        pid=pid,
        process=process,
        message=rest.strip(),
        timestamp=timestamp,
        raw=line,
        info=info,
        host=host,
        device_text=device_text[:64] if device_text else None,
        redacted=tuple(redacted),
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
        event = parse_line(raw.rstrip("\r\n"))
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
