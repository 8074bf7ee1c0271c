#!/usr/bin/env python3
"""robustctl node-side probe ``nvml``: per-GPU health through NVML (pynvml), or an injection file.

Standalone with the shared prelude ``_prelude.py``
(Python >= 3.8; stdlib + ``pynvml`` from nvidia-ml-py); never imports robustctl. Prints
exactly one JSON document (see ``diagnostics/README.md``).

GPU state comes from the NVML library through ``pynvml``, or, with ``--nvml-injection FILE`` (env
``ROBUSTCTL_NVML_INJECTION``), from a JSON injection file (schema: :data:`INJECTION_SCHEMA` below),
the way DCGM's NVML injection mode works. :class:`InjectedNvml` reads it and behaves like pynvml,
raising the same NVML error codes; it is the only reader of that file (robustctl's ``FakeNvml``,
which writes it, runs this reader in tests).

``data`` when NVML cannot be used (no pynvml, no library, driver not loaded, bad injection file)::

    {available: false, reason: str,
     reason_code: "pynvml_missing"|"library_not_found"|"driver_not_loaded"|"init_failed"
                  |"injection_error",
     nvml_error: int|null}

``data`` otherwise (``null`` = the GPU does not support the query, or the query failed: failures,
unlike NOT_SUPPORTED, are named in the GPU's ``query_errors`` and in ``errors``)::

    {available: true, source: "nvml"|"injection", driver_version: str|null,
     cuda_driver_version: int|null, nvml_version: str|null, count: int|null,
     gpus: [ {
        index: int, accessible: bool, error: str|null, error_code: int|null,  # handle failure
        name: str|null, uuid: str|null, pci_bus_id: str|null,
        temperature_c: int|null, temperature_slowdown_c: int|null, temperature_shutdown_c: int|null,
        ecc_volatile_corrected: int|null, ecc_volatile_uncorrected: int|null,
        ecc_aggregate_corrected: int|null, ecc_aggregate_uncorrected: int|null,
        retired_pages_sbe: int|null, retired_pages_dbe: int|null, retired_pages_pending: bool|null,
        remapped_rows_correctable: int|null, remapped_rows_uncorrectable: int|null,
        remapped_rows_pending: bool|null, remapped_rows_failure: bool|null,
        clocks_event_reasons: int|null, clocks_event_reason_names: [str]|null,
        pcie_current_gen: int|null, pcie_max_gen: int|null,
        pcie_current_width: int|null, pcie_max_width: int|null,
        nvlink: [ {link: int, active: bool, replay_errors: int|null, recovery_errors: int|null,
                   crc_flit_errors: int|null, crc_data_errors: int|null} ] | null,  # null: no NVLink
        query_errors: {group: "function: message"}   # groups: identity, temperature, ecc,
                                                     # retired_pages, remapped_rows, clocks, pcie, nvlink
     } ] | null}
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import time
from typing import Any, Callable, Sequence

from _prelude import Document, probe_main

PROBE = "nvml"
INJECTION_FORMAT = "robustctl-nvml-injection"
INJECTION_VERSION = 1

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15

NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_NVLINK_COUNTERS = (
    ("replay_errors", 0),
    ("recovery_errors", 1),
    ("crc_flit_errors", 2),
    ("crc_data_errors", 3),
)

CLOCK_EVENT_REASONS = (
    ("gpu_idle", 0x1),
    ("applications_clocks_setting", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake_slowdown", 0x80),
    ("display_clock_setting", 0x100),
)
"""nvmlClocksEventReason* bits (nvml.h); unknown set bits are reported as ``bit_0x...``."""

ERROR_NAMES = {
    1: ("Uninitialized", "Uninitialized"),
    2: ("InvalidArgument", "Invalid Argument"),
    3: ("NotSupported", "Not Supported"),
    4: ("NoPermission", "Insufficient Permissions"),
    5: ("AlreadyInitialized", "Already Initialized"),
    6: ("NotFound", "Not Found"),
    7: ("InsufficientSize", "Insufficient Size"),
    8: ("InsufficientPower", "Insufficient External Power"),
    9: ("DriverNotLoaded", "Driver Not Loaded"),
    10: ("Timeout", "Timeout"),
    11: ("IrqIssue", "Interrupt Request Issue"),
    12: ("LibraryNotFound", "NVML Shared Library Not Found"),
    13: ("FunctionNotFound", "Function Not Found"),
    14: ("CorruptedInforom", "Corrupted infoROM"),
    15: ("GpuIsLost", "GPU is lost"),
    16: ("ResetRequired", "GPU requires restart"),
    17: ("OperatingSystem", "The operating system has blocked the request."),
    18: ("LibRmVersionMismatch", "RM has detected an NVML/RM version mismatch."),
    20: ("Memory", "Insufficient Memory"),
    999: ("Unknown", "Unknown Error"),
}
"""NVML error codes -> (pynvml class suffix, pynvml message)."""


# --------------------------------------------------------------------------- injection reader
INJECTION_SCHEMA = """
    {
      "format": "robustctl-nvml-injection", "version": 1,
      "init_error": null,                  # NVML error code nvmlInit raises (12 LibraryNotFound,
                                           # 9 DriverNotLoaded, ...) or null
      "init_stall_s": 0,                   # seconds nvmlInit blocks first, as on a wedged driver
                                           # (at most MAX_INIT_STALL_S)
      "driver_version": "550.54.15", "nvml_version": "12.550.54.15", "cuda_driver_version": 12040,
      "gpus": [
        {
          "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-...", "serial": "1650923011234" | null,
          "pci_bus_id": "00000000:18:00.0",
          "lost": false,                   # every call on this GPU raises GPU_IS_LOST (15)
          "temperature_c": 35 | null,      # null: NOT_SUPPORTED
          "temperature_slowdown_c": 87 | null, "temperature_shutdown_c": 92 | null,
          "ecc": {"volatile": {"corrected": 0, "uncorrected": 0},
                  "aggregate": {"corrected": 0, "uncorrected": 0}} | null,
          "retired_pages": {"single_bit": [addr, ...], "double_bit": [addr, ...],
                            "pending": false} | null,
          "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": false,
                            "failure": false} | null,
          "clocks_event_reasons": 0 | null,  # bit mask, nvmlClocksEventReason*
          "pcie": {"current_gen": 5, "max_gen": 5, "current_width": 16, "max_width": 16} | null,
          "nvlink": [{"active": true, "replay": 0, "recovery": 0, "crc_flit": 0,
                      "crc_data": 0}, ...] | null,   # null: no NVLink (NOT_SUPPORTED)
          "errors": {"nvmlDeviceGetTemperature": 4}  # force an NVML error code per function
        }
      ]
    }
"""
"""The injection file (JSON). Every ``null`` means "this GPU does not support the query"
(NVML_ERROR_NOT_SUPPORTED), so the probe reports ``null`` for that field, never 0. The file is
written by ``robustctl.testing.fake_nvml.write_injection``; this module holds its only reader."""


class NVMLError(Exception):
    """An NVML error with its return code in ``value``, like ``pynvml.NVMLError``."""

    value = 999

    def __str__(self) -> str:
        return ERROR_NAMES.get(self.value, ("", f"NVML Error with code {self.value}"))[1]


ERROR_CLASSES: dict[int, type[NVMLError]] = {}
"""NVML return code -> ``NVMLError_<Name>`` subclass (pynvml's names)."""
for _code, (_suffix, _msg) in ERROR_NAMES.items():
    ERROR_CLASSES[_code] = type("NVMLError_" + _suffix, (NVMLError,), {"value": _code})


def nvml_error(code: int) -> Exception:
    """An exception for NVML return code ``code`` (a ``NVMLError_<Name>`` subclass when known)."""
    cls = ERROR_CLASSES.get(code)
    if cls is not None:
        return cls()
    exc = NVMLError()
    exc.value = code
    return exc


MAX_INIT_STALL_S = 600.0
"""Longest ``init_stall_s`` an injection file can ask for: past any probe's budget, short of forever."""

MAX_INJECTION_BYTES = 4 * 1024 * 1024
"""Largest injection file read: a GPU's state is about 3 KiB of JSON, so 4 MiB holds a thousand GPUs."""


def load_injection(path: str) -> dict[str, Any]:
    """Read and validate an injection file (see :data:`INJECTION_SCHEMA`).

    The file is opened without blocking (a FIFO with no writer would hang the probe until its
    timeout) and must be a regular file of at most :data:`MAX_INJECTION_BYTES`.

    Raises:
        OSError: unreadable. ValueError: not a regular file, too large, not JSON, another format or
            version, ``gpus`` not a list.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path}: not a regular file")
        raw = b""
        while len(raw) <= MAX_INJECTION_BYTES:
            chunk = os.read(fd, MAX_INJECTION_BYTES + 1 - len(raw))
            if not chunk:
                break
            raw += chunk
    finally:
        os.close(fd)
    if len(raw) > MAX_INJECTION_BYTES:
        raise ValueError(f"{path}: larger than {MAX_INJECTION_BYTES} bytes")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != INJECTION_FORMAT:
        raise ValueError(f"{path}: not a {INJECTION_FORMAT} file")
    if doc.get("version") != INJECTION_VERSION:
        raise ValueError(f"{path}: unsupported injection version {doc.get('version')!r}")
    if not isinstance(doc.get("gpus"), list):
        raise ValueError(f"{path}: 'gpus' must be a list")
    return doc


class PciInfo:
    """What ``nvmlDeviceGetPciInfo`` returns: ``busId`` (str, as pynvml decodes it) and its parts."""

    def __init__(self, bus_id: str) -> None:
        self.busId = bus_id
        self.busIdLegacy = bus_id[-12:] if len(bus_id) > 12 else bus_id
        dom, bus, devfn = [*bus_id.split(":"), "0", "0", "0.0"][:3]
        self.domain = int(dom or "0", 16)
        self.bus = int(bus or "0", 16)
        self.device = int(devfn.split(".")[0] or "0", 16)
        self.pciDeviceId = 0x233010DE
        self.pciSubSystemId = 0x16C110DE


class DeviceHandle:
    """An opaque device handle (pynvml's is a ``c_nvmlDevice_t`` pointer): only its reader takes it."""

    def __init__(self, owner: InjectedNvml, index: int) -> None:
        self.owner = owner
        self.index = index

    def __repr__(self) -> str:
        return f"<nvmlDevice {self.index}>"


class InjectedNvml:
    """pynvml-like view of an injection document (see :data:`INJECTION_SCHEMA`).

    Args:
        source: the injection file's path, or its document (a dict, as ``load_injection`` returns).
        error: builds the exception for an NVML return code (default :func:`nvml_error`; robustctl's
            FakeNvml passes one raising the real ``pynvml.NVMLError_*`` classes).
        error_type: the base class of what ``error`` raises (the ``NVMLError`` callers catch).

    Raises NVML errors where real NVML fails: Uninitialized before ``nvmlInit`` (or after the last
    ``nvmlShutdown``), NotSupported for ``null`` fields, InvalidArgument for bad handles, indices,
    sensors and counters, GpuIsLost for a lost GPU, and the code a GPU's ``errors`` forces.
    Construction raises ValueError/OSError for an unreadable or malformed file.
    """

    NVMLError: type[Exception] = NVMLError
    NVML_NVLINK_MAX_LINKS = 18

    def __init__(
        self,
        source: str | dict[str, Any],
        error: Callable[[int], Exception] = nvml_error,
        error_type: type[Exception] | None = None,
    ) -> None:
        self.doc = source if isinstance(source, dict) else load_injection(source)
        self.gpus: list[dict[str, Any]] = self.doc["gpus"]
        self._error = error
        if error_type is not None:
            self.NVMLError = error_type
        self._refcount = 0

    def _enter(self) -> None:
        if self._refcount <= 0:
            raise self._error(NVML_ERROR_UNINITIALIZED)

    def _gpu(self, fn: str, handle: object) -> dict[str, Any]:
        self._enter()
        if not isinstance(handle, DeviceHandle) or handle.owner is not self:
            raise self._error(NVML_ERROR_INVALID_ARGUMENT)
        g = self.gpus[handle.index]
        if g.get("lost"):
            raise self._error(NVML_ERROR_GPU_IS_LOST)
        forced = (g.get("errors") or {}).get(fn)
        if forced is not None:
            raise self._error(int(forced))
        return g

    def _supported(self, value: Any) -> Any:
        if value is None:
            raise self._error(NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlInit(self) -> None:
        stall = self.doc.get("init_stall_s")
        if isinstance(stall, (int, float)) and not isinstance(stall, bool) and stall > 0:
            time.sleep(min(float(stall), MAX_INIT_STALL_S))
        init_error = self.doc.get("init_error")
        if init_error is not None:
            raise self._error(int(init_error))
        self._refcount += 1

    def nvmlShutdown(self) -> None:
        self._enter()
        self._refcount -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter()
        return str(self.doc.get("driver_version", ""))

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._enter()
        return str(self.doc.get("nvml_version", ""))

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter()
        return int(self.doc.get("cuda_driver_version") or 0)

    def nvmlDeviceGetCount(self) -> int:
        self._enter()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> DeviceHandle:
        self._enter()
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(self.gpus):
            raise self._error(NVML_ERROR_INVALID_ARGUMENT)
        g = self.gpus[index]
        if g.get("lost"):
            raise self._error(NVML_ERROR_GPU_IS_LOST)
        forced = (g.get("errors") or {}).get("nvmlDeviceGetHandleByIndex")
        if forced is not None:
            raise self._error(int(forced))
        return DeviceHandle(self, index)

    def nvmlDeviceGetName(self, handle: object) -> str:
        return str(self._gpu("nvmlDeviceGetName", handle).get("name", ""))

    def nvmlDeviceGetUUID(self, handle: object) -> str:
        return str(self._gpu("nvmlDeviceGetUUID", handle).get("uuid", ""))

    def nvmlDeviceGetSerial(self, handle: object) -> str:
        return str(self._supported(self._gpu("nvmlDeviceGetSerial", handle).get("serial")))

    def nvmlDeviceGetPciInfo(self, handle: object) -> PciInfo:
        return PciInfo(str(self._gpu("nvmlDeviceGetPciInfo", handle).get("pci_bus_id", "")))

    def nvmlDeviceGetTemperature(self, handle: object, sensor: int) -> int:
        g = self._gpu("nvmlDeviceGetTemperature", handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise self._error(NVML_ERROR_INVALID_ARGUMENT)
        return int(self._supported(g.get("temperature_c")))

    def nvmlDeviceGetTemperatureThreshold(self, handle: object, threshold: int) -> int:
        g = self._gpu("nvmlDeviceGetTemperatureThreshold", handle)
        if threshold == NVML_TEMPERATURE_THRESHOLD_SHUTDOWN:
            return int(self._supported(g.get("temperature_shutdown_c")))
        if threshold == NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
            return int(self._supported(g.get("temperature_slowdown_c")))
        if isinstance(threshold, int) and 0 <= threshold < 8:
            raise self._error(NVML_ERROR_NOT_SUPPORTED)
        raise self._error(NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetTotalEccErrors(self, handle: object, errorType: int, counterType: int) -> int:
        g = self._gpu("nvmlDeviceGetTotalEccErrors", handle)
        if errorType not in (0, 1) or counterType not in (0, 1):
            raise self._error(NVML_ERROR_INVALID_ARGUMENT)
        ecc = self._supported(g.get("ecc"))
        counts = ecc.get("volatile" if counterType == NVML_VOLATILE_ECC else "aggregate") or {}
        key = "uncorrected" if errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED else "corrected"
        return int(counts.get(key, 0))

    def nvmlDeviceGetRetiredPages(self, handle: object, sourceFilter: int) -> list[int]:
        g = self._gpu("nvmlDeviceGetRetiredPages", handle)
        if sourceFilter not in (0, 1):
            raise self._error(NVML_ERROR_INVALID_ARGUMENT)
        rp = self._supported(g.get("retired_pages"))
        return [int(a) for a in rp.get("single_bit" if sourceFilter == 0 else "double_bit", [])]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: object) -> int:
        rp = self._supported(self._gpu("nvmlDeviceGetRetiredPagesPendingStatus", handle).get("retired_pages"))
        return 1 if rp.get("pending") else 0

    def nvmlDeviceGetRemappedRows(self, handle: object) -> tuple[int, int, int, int]:
        """(correctable rows, uncorrectable rows, pending 0/1, failure 0/1), as pynvml returns it."""
        rr = self._supported(self._gpu("nvmlDeviceGetRemappedRows", handle).get("remapped_rows"))
        return (
            int(rr.get("correctable", 0)),
            int(rr.get("uncorrectable", 0)),
            int(bool(rr.get("pending"))),
            int(bool(rr.get("failure"))),
        )

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int:
        g = self._gpu("nvmlDeviceGetCurrentClocksEventReasons", handle)
        return int(self._supported(g.get("clocks_event_reasons")))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: object) -> int:
        """Deprecated pynvml name of :meth:`nvmlDeviceGetCurrentClocksEventReasons`."""
        g = self._gpu("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return int(self._supported(g.get("clocks_event_reasons")))

    def _pcie(self, fn: str, handle: object, key: str) -> int:
        return int(self._supported(self._gpu(fn, handle).get("pcie"))[key])

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: object) -> int:
        return self._pcie("nvmlDeviceGetCurrPcieLinkGeneration", handle, "current_gen")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: object) -> int:
        return self._pcie("nvmlDeviceGetMaxPcieLinkGeneration", handle, "max_gen")

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: object) -> int:
        return self._pcie("nvmlDeviceGetCurrPcieLinkWidth", handle, "current_width")

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: object) -> int:
        return self._pcie("nvmlDeviceGetMaxPcieLinkWidth", handle, "max_width")

    def _link(self, fn: str, handle: object, link: int) -> dict[str, Any]:
        links = self._supported(self._gpu(fn, handle).get("nvlink"))
        if not isinstance(link, int) or not 0 <= link < len(links):
            raise self._error(NVML_ERROR_INVALID_ARGUMENT)
        return dict(links[link])

    def nvmlDeviceGetNvLinkState(self, handle: object, link: int) -> int:
        """NVML_FEATURE_ENABLED (1) for an active link, else 0."""
        return 1 if self._link("nvmlDeviceGetNvLinkState", handle, link).get("active") else 0

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: object, link: int, counter: int) -> int:
        """Replay (0), recovery (1), CRC flit (2) or CRC data (3) errors of one link."""
        lk = self._link("nvmlDeviceGetNvLinkErrorCounter", handle, link)
        keys = {0: "replay", 1: "recovery", 2: "crc_flit", 3: "crc_data"}
        if counter not in keys:
            if isinstance(counter, int) and 0 <= counter < 5:
                raise self._error(NVML_ERROR_NOT_SUPPORTED)
            raise self._error(NVML_ERROR_INVALID_ARGUMENT)
        return int(self._supported(lk.get(keys[counter])))


# --------------------------------------------------------------------------- collection
def decode_reasons(mask: int) -> list[str]:
    """Names of the set bits of a clocks-event-reason mask."""
    names = [name for name, bit in CLOCK_EVENT_REASONS if mask & bit]
    known = 0
    for _, bit in CLOCK_EVENT_REASONS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"bit_{bit:#x}")
            rest &= ~bit
        bit <<= 1
    return names


class Querier:
    """Calls pynvml-like functions; NOT_SUPPORTED -> None, other NVML errors -> None + query_errors."""

    def __init__(self, lib: Any, gpu: dict[str, Any]) -> None:
        self.lib = lib
        self.gpu = gpu
        self.err_type = getattr(lib, "NVMLError", NVMLError)

    def call(self, group: str, fn_name: str, *args: Any) -> Any:
        fn = getattr(self.lib, fn_name, None)
        if fn is None:
            self.fail(group, f"{fn_name}: not provided by this pynvml")
            return None
        try:
            return fn(*args)
        except self.err_type as exc:
            if getattr(exc, "value", None) == NVML_ERROR_NOT_SUPPORTED:
                return None
            self.fail(group, f"{fn_name}: {exc}")
            return None

    def fail(self, group: str, message: str) -> None:
        errs = self.gpu["query_errors"]
        if group not in errs:
            errs[group] = message
        elif message not in errs[group].split("; "):
            errs[group] = errs[group] + "; " + message


GPU_FIELDS = (
    "name uuid pci_bus_id temperature_c temperature_slowdown_c temperature_shutdown_c "
    "ecc_volatile_corrected ecc_volatile_uncorrected ecc_aggregate_corrected ecc_aggregate_uncorrected "
    "retired_pages_sbe retired_pages_dbe retired_pages_pending remapped_rows_correctable "
    "remapped_rows_uncorrectable remapped_rows_pending remapped_rows_failure clocks_event_reasons "
    "clocks_event_reason_names pcie_current_gen pcie_max_gen pcie_current_width pcie_max_width nvlink"
).split()


def collect_gpu(lib: Any, index: int) -> dict[str, Any]:
    """One GPU's record (see module docstring)."""
    gpu: dict[str, Any] = {"index": index, "accessible": True, "error": None, "error_code": None}
    for key in GPU_FIELDS:
        gpu[key] = None
    gpu["query_errors"] = {}
    err_type = getattr(lib, "NVMLError", NVMLError)
    try:
        h = lib.nvmlDeviceGetHandleByIndex(index)
    except err_type as exc:
        gpu["accessible"] = False
        gpu["error"] = f"nvmlDeviceGetHandleByIndex: {exc}"
        gpu["error_code"] = getattr(exc, "value", None)
        return gpu
    q = Querier(lib, gpu)

    gpu["name"] = q.call("identity", "nvmlDeviceGetName", h)
    gpu["uuid"] = q.call("identity", "nvmlDeviceGetUUID", h)
    pci = q.call("identity", "nvmlDeviceGetPciInfo", h)
    if pci is not None:
        bus_id = pci.busId
        gpu["pci_bus_id"] = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)

    gpu["temperature_c"] = q.call("temperature", "nvmlDeviceGetTemperature", h, NVML_TEMPERATURE_GPU)
    gpu["temperature_slowdown_c"] = q.call(
        "temperature", "nvmlDeviceGetTemperatureThreshold", h, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
    )
    gpu["temperature_shutdown_c"] = q.call(
        "temperature", "nvmlDeviceGetTemperatureThreshold", h, NVML_TEMPERATURE_THRESHOLD_SHUTDOWN
    )

    for counter_name, counter in (("volatile", NVML_VOLATILE_ECC), ("aggregate", NVML_AGGREGATE_ECC)):
        for err_name, err in (
            ("corrected", NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ("uncorrected", NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        ):
            gpu[f"ecc_{counter_name}_{err_name}"] = q.call(
                "ecc", "nvmlDeviceGetTotalEccErrors", h, err, counter
            )

    sbe = q.call(
        "retired_pages",
        "nvmlDeviceGetRetiredPages",
        h,
        NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
    )
    dbe = q.call(
        "retired_pages", "nvmlDeviceGetRetiredPages", h, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    )
    pending = q.call("retired_pages", "nvmlDeviceGetRetiredPagesPendingStatus", h)
    gpu["retired_pages_sbe"] = len(sbe) if sbe is not None else None
    gpu["retired_pages_dbe"] = len(dbe) if dbe is not None else None
    gpu["retired_pages_pending"] = bool(pending) if pending is not None else None

    rows = q.call("remapped_rows", "nvmlDeviceGetRemappedRows", h)
    if rows is not None:
        corr, unc, rpending, failure = rows
        gpu["remapped_rows_correctable"] = int(corr)
        gpu["remapped_rows_uncorrectable"] = int(unc)
        gpu["remapped_rows_pending"] = bool(rpending)
        gpu["remapped_rows_failure"] = bool(failure)

    reasons = None
    if hasattr(lib, "nvmlDeviceGetCurrentClocksEventReasons"):
        probe_q = Querier(lib, {"query_errors": {}})
        reasons = probe_q.call("clocks", "nvmlDeviceGetCurrentClocksEventReasons", h)
        if reasons is None and probe_q.gpu["query_errors"]:
            reasons = q.call("clocks", "nvmlDeviceGetCurrentClocksThrottleReasons", h)
    else:
        reasons = q.call("clocks", "nvmlDeviceGetCurrentClocksThrottleReasons", h)
    if reasons is not None:
        gpu["clocks_event_reasons"] = int(reasons)
        gpu["clocks_event_reason_names"] = decode_reasons(int(reasons))

    gpu["pcie_current_gen"] = q.call("pcie", "nvmlDeviceGetCurrPcieLinkGeneration", h)
    gpu["pcie_max_gen"] = q.call("pcie", "nvmlDeviceGetMaxPcieLinkGeneration", h)
    gpu["pcie_current_width"] = q.call("pcie", "nvmlDeviceGetCurrPcieLinkWidth", h)
    gpu["pcie_max_width"] = q.call("pcie", "nvmlDeviceGetMaxPcieLinkWidth", h)

    gpu["nvlink"] = collect_nvlink(lib, h, q, err_type)
    return gpu


def collect_nvlink(lib: Any, h: Any, q: Querier, err_type: Any) -> list[dict[str, Any]] | None:
    """Per-link state and error counters; None when the GPU has no (supported) NVLink."""
    max_links = int(getattr(lib, "NVML_NVLINK_MAX_LINKS", 18))
    links: list[dict[str, Any]] = []
    for link in range(max_links):
        try:
            state = lib.nvmlDeviceGetNvLinkState(h, link)
        except err_type as exc:
            code = getattr(exc, "value", None)
            if code in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT):
                continue  # no such link on this GPU
            q.fail("nvlink", f"nvmlDeviceGetNvLinkState({link}): {exc}")
            continue
        entry: dict[str, Any] = {"link": link, "active": bool(state)}
        for key, counter in NVML_NVLINK_COUNTERS:
            entry[key] = q.call("nvlink", "nvmlDeviceGetNvLinkErrorCounter", h, link, counter)
        links.append(entry)
    return links or None


def collect(lib: Any, doc: Document) -> None:
    """Fill ``doc`` from an initialised pynvml-like ``lib``."""
    top: dict[str, Any] = {"query_errors": {}}
    q = Querier(lib, top)
    doc.set("driver_version", q.call("system", "nvmlSystemGetDriverVersion"))
    doc.set("cuda_driver_version", q.call("system", "nvmlSystemGetCudaDriverVersion"))
    doc.set("nvml_version", q.call("system", "nvmlSystemGetNVMLVersion"))
    count = q.call("count", "nvmlDeviceGetCount")
    doc.set("count", count)
    for message in top["query_errors"].values():
        doc.error(message)
    if count is None:
        doc.set("gpus", None)
        return
    gpus: list[dict[str, Any]] = []
    doc.set("gpus", [])
    for index in range(int(count)):
        gpu = collect_gpu(lib, index)
        if gpu["error"]:
            doc.error(f"gpu {index}: {gpu['error']}")
        for message in gpu["query_errors"].values():
            doc.error(f"gpu {index}: {message}")
        gpus.append(gpu)
        doc.set("gpus", list(gpus))


def reason_code(code: int | None) -> str:
    if code == NVML_ERROR_LIBRARY_NOT_FOUND:
        return "library_not_found"
    if code == NVML_ERROR_DRIVER_NOT_LOADED:
        return "driver_not_loaded"
    return "init_failed"


def open_library(args: argparse.Namespace, doc: Document) -> tuple[Any, str | None]:
    """(lib, source) ready to use, or (None, None) after recording why NVML is unavailable."""
    if args.nvml_injection:
        try:
            return InjectedNvml(args.nvml_injection), "injection"
        except (OSError, ValueError) as exc:
            reason = f"NVML injection file: {exc}"
            doc.unavailable(reason, "injection_error")
            doc.set("nvml_error", None)
            doc.error(reason)
            return None, None
    try:
        import pynvml
    except ImportError:
        doc.unavailable("pynvml (nvidia-ml-py) is not installed", "pynvml_missing")
        doc.set("nvml_error", None)
        return None, None
    return pynvml, "nvml"


def run(args: argparse.Namespace, doc: Document) -> None:
    lib, source = open_library(args, doc)
    if lib is not None:
        run_library(lib, source, doc)


def run_library(lib: Any, source: str | None, doc: Document) -> None:
    """Initialise the pynvml-like ``lib``, collect every GPU into ``doc``, shut it down."""
    err_type = getattr(lib, "NVMLError", NVMLError)
    try:
        lib.nvmlInit()
    except err_type as exc:
        code = getattr(exc, "value", None)
        doc.unavailable(f"nvmlInit: {exc}", reason_code(code))
        doc.set("nvml_error", code)
        return
    doc.set("available", True)
    doc.set("source", source)
    try:
        collect(lib, doc)
    finally:
        try:
            lib.nvmlShutdown()
        except err_type:
            pass


def add_args(p: argparse.ArgumentParser) -> None:
    """No arguments beyond the common ones (``--nvml-injection`` chooses the injection file)."""


def main(argv: Sequence[str] | None = None) -> int:
    return probe_main(PROBE, add_args, run, argv, timeout_s=60.0)


if __name__ == "__main__":
    sys.exit(main())
