#!/usr/bin/env python3
"""robustctl node-side probe ``nvml``: per-GPU health through NVML (pynvml), or an injection file.

Standalone (Python >= 3.8; stdlib + ``pynvml`` from nvidia-ml-py); never imports robustctl. Prints
exactly one JSON document (see ``diagnostics/README.md``).

GPU state comes from the NVML library through ``pynvml``, or, with ``--nvml-injection FILE`` (env
``ROBUSTCTL_NVML_INJECTION``), from a JSON injection file whose schema is defined by
``robustctl/testing/fake_nvml.py`` (:class:`InjectedNvml` below reads it and behaves like pynvml,
raising the same NVML error codes; robustctl's unit tests keep the two in agreement).

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
import socket
import sys
import threading
import time

PROBE = "nvml"
VERSION = 1
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


# --------------------------------------------------------------------------- document plumbing
class Document:
    """The probe's one JSON document; :meth:`emit` prints it at most once (thread-safe)."""

    def __init__(self, probe):
        self.probe = probe
        self.started = time.monotonic()
        self.data = {}
        self.errors = []
        self._lock = threading.Lock()
        self._emitted = False

    def set(self, key, value):
        with self._lock:
            self.data[key] = value

    def error(self, message):
        with self._lock:
            self.errors.append(str(message))

    def emit(self, extra_error=None):
        with self._lock:
            if self._emitted:
                return
            self._emitted = True
            errors = list(self.errors)
            if extra_error:
                errors.append(extra_error)
            doc = {
                "probe": self.probe,
                "version": VERSION,
                "hostname": socket.gethostname(),
                "time": time.time(),
                "elapsed_s": round(time.monotonic() - self.started, 6),
                "data": json.loads(json.dumps(self.data, default=str)),
                "errors": errors,
            }
            sys.stdout.write(json.dumps(doc) + "\n")
            sys.stdout.flush()


def start_watchdog(doc, timeout_s):
    """After ``timeout_s`` print what was collected (plus a timeout error) and exit 0."""

    def fire():
        doc.emit(f"timeout: probe ran past its {timeout_s:.1f} s budget; partial data")
        os._exit(0)

    timer = threading.Timer(timeout_s, fire)
    timer.daemon = True
    timer.start()
    return timer


# --------------------------------------------------------------------------- injection reader
class NVMLError(Exception):
    """An NVML error with its return code in ``value``, like ``pynvml.NVMLError``."""

    value = 999

    def __str__(self):
        return ERROR_NAMES.get(self.value, ("", f"NVML Error with code {self.value}"))[1]


ERROR_CLASSES = {}
for _code, (_suffix, _msg) in ERROR_NAMES.items():
    ERROR_CLASSES[_code] = type("NVMLError_" + _suffix, (NVMLError,), {"value": _code})


def nvml_error(code):
    """An exception for NVML return code ``code`` (a ``NVMLError_<Name>`` subclass when known)."""
    cls = ERROR_CLASSES.get(code)
    if cls is not None:
        return cls()
    exc = NVMLError()
    exc.value = code
    return exc


class PciInfo:
    """Subset of pynvml's ``nvmlPciInfo_t`` (``busId`` as a str)."""

    def __init__(self, bus_id):
        self.busId = bus_id


class InjectedNvml:
    """pynvml-like view of an injection file (schema: ``robustctl/testing/fake_nvml.py``).

    Raises :class:`NVMLError` subclasses where real NVML fails: Uninitialized before ``nvmlInit``,
    NotSupported for ``null`` fields, InvalidArgument for bad indices, GpuIsLost for a lost GPU.
    Construction raises ValueError/OSError for an unreadable or malformed file.
    """

    NVMLError = NVMLError
    NVML_NVLINK_MAX_LINKS = 18

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if not isinstance(doc, dict) or doc.get("format") != INJECTION_FORMAT:
            raise ValueError(f"{path}: not a {INJECTION_FORMAT} file")
        if doc.get("version") != INJECTION_VERSION:
            raise ValueError(f"{path}: unsupported injection version {doc.get('version')!r}")
        if not isinstance(doc.get("gpus"), list):
            raise ValueError(f"{path}: 'gpus' must be a list")
        self.doc = doc
        self.gpus = doc["gpus"]
        self._refcount = 0

    def _enter(self):
        if self._refcount <= 0:
            raise nvml_error(NVML_ERROR_UNINITIALIZED)

    def _gpu(self, fn, handle):
        self._enter()
        if not isinstance(handle, int) or isinstance(handle, bool) or not 0 <= handle < len(self.gpus):
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        g = self.gpus[handle]
        if g.get("lost"):
            raise nvml_error(NVML_ERROR_GPU_IS_LOST)
        forced = (g.get("errors") or {}).get(fn)
        if forced is not None:
            raise nvml_error(int(forced))
        return g

    @staticmethod
    def _supported(value):
        if value is None:
            raise nvml_error(NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlInit(self):
        init_error = self.doc.get("init_error")
        if init_error is not None:
            raise nvml_error(int(init_error))
        self._refcount += 1

    def nvmlShutdown(self):
        self._enter()
        self._refcount -= 1

    def nvmlSystemGetDriverVersion(self):
        self._enter()
        return self.doc.get("driver_version", "")

    def nvmlSystemGetNVMLVersion(self):
        self._enter()
        return self.doc.get("nvml_version", "")

    def nvmlSystemGetCudaDriverVersion(self):
        self._enter()
        return int(self.doc.get("cuda_driver_version") or 0)

    def nvmlDeviceGetCount(self):
        self._enter()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._enter()
        if not isinstance(index, int) or not 0 <= index < len(self.gpus):
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        g = self.gpus[index]
        if g.get("lost"):
            raise nvml_error(NVML_ERROR_GPU_IS_LOST)
        forced = (g.get("errors") or {}).get("nvmlDeviceGetHandleByIndex")
        if forced is not None:
            raise nvml_error(int(forced))
        return index

    def nvmlDeviceGetName(self, handle):
        return self._gpu("nvmlDeviceGetName", handle).get("name", "")

    def nvmlDeviceGetUUID(self, handle):
        return self._gpu("nvmlDeviceGetUUID", handle).get("uuid", "")

    def nvmlDeviceGetSerial(self, handle):
        return str(self._supported(self._gpu("nvmlDeviceGetSerial", handle).get("serial")))

    def nvmlDeviceGetPciInfo(self, handle):
        return PciInfo(self._gpu("nvmlDeviceGetPciInfo", handle).get("pci_bus_id", ""))

    def nvmlDeviceGetTemperature(self, handle, sensor):
        g = self._gpu("nvmlDeviceGetTemperature", handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        return int(self._supported(g.get("temperature_c")))

    def nvmlDeviceGetTemperatureThreshold(self, handle, threshold):
        g = self._gpu("nvmlDeviceGetTemperatureThreshold", handle)
        if threshold == NVML_TEMPERATURE_THRESHOLD_SHUTDOWN:
            return int(self._supported(g.get("temperature_shutdown_c")))
        if threshold == NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
            return int(self._supported(g.get("temperature_slowdown_c")))
        if isinstance(threshold, int) and 0 <= threshold < 8:
            raise nvml_error(NVML_ERROR_NOT_SUPPORTED)
        raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetTotalEccErrors(self, handle, errorType, counterType):
        g = self._gpu("nvmlDeviceGetTotalEccErrors", handle)
        if errorType not in (0, 1) or counterType not in (0, 1):
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        ecc = self._supported(g.get("ecc"))
        counts = ecc.get("volatile" if counterType == NVML_VOLATILE_ECC else "aggregate") or {}
        key = "uncorrected" if errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED else "corrected"
        return int(counts.get(key, 0))

    def nvmlDeviceGetRetiredPages(self, handle, sourceFilter):
        g = self._gpu("nvmlDeviceGetRetiredPages", handle)
        if sourceFilter not in (0, 1):
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        rp = self._supported(g.get("retired_pages"))
        return [int(a) for a in rp.get("single_bit" if sourceFilter == 0 else "double_bit", [])]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle):
        rp = self._supported(self._gpu("nvmlDeviceGetRetiredPagesPendingStatus", handle).get("retired_pages"))
        return 1 if rp.get("pending") else 0

    def nvmlDeviceGetRemappedRows(self, handle):
        rr = self._supported(self._gpu("nvmlDeviceGetRemappedRows", handle).get("remapped_rows"))
        return (
            int(rr.get("correctable", 0)),
            int(rr.get("uncorrectable", 0)),
            int(bool(rr.get("pending"))),
            int(bool(rr.get("failure"))),
        )

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        g = self._gpu("nvmlDeviceGetCurrentClocksEventReasons", handle)
        return int(self._supported(g.get("clocks_event_reasons")))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        g = self._gpu("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return int(self._supported(g.get("clocks_event_reasons")))

    def _pcie(self, fn, handle, key):
        return int(self._supported(self._gpu(fn, handle).get("pcie"))[key])

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return self._pcie("nvmlDeviceGetCurrPcieLinkGeneration", handle, "current_gen")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return self._pcie("nvmlDeviceGetMaxPcieLinkGeneration", handle, "max_gen")

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self._pcie("nvmlDeviceGetCurrPcieLinkWidth", handle, "current_width")

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return self._pcie("nvmlDeviceGetMaxPcieLinkWidth", handle, "max_width")

    def _link(self, fn, handle, link):
        links = self._supported(self._gpu(fn, handle).get("nvlink"))
        if not isinstance(link, int) or not 0 <= link < len(links):
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    def nvmlDeviceGetNvLinkState(self, handle, link):
        return 1 if self._link("nvmlDeviceGetNvLinkState", handle, link).get("active") else 0

    def nvmlDeviceGetNvLinkErrorCounter(self, handle, link, counter):
        lk = self._link("nvmlDeviceGetNvLinkErrorCounter", handle, link)
        keys = {0: "replay", 1: "recovery", 2: "crc_flit", 3: "crc_data"}
        if counter not in keys:
            if isinstance(counter, int) and 0 <= counter < 5:
                raise nvml_error(NVML_ERROR_NOT_SUPPORTED)
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        return int(self._supported(lk.get(keys[counter])))


# --------------------------------------------------------------------------- collection
def decode_reasons(mask):
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

    def __init__(self, lib, gpu):
        self.lib = lib
        self.gpu = gpu
        self.err_type = getattr(lib, "NVMLError", NVMLError)

    def call(self, group, fn_name, *args):
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

    def fail(self, group, message):
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


def collect_gpu(lib, index):
    """One GPU's record (see module docstring)."""
    gpu = {"index": index, "accessible": True, "error": None, "error_code": None}
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


def collect_nvlink(lib, h, q, err_type):
    """Per-link state and error counters; None when the GPU has no (supported) NVLink."""
    max_links = int(getattr(lib, "NVML_NVLINK_MAX_LINKS", 18))
    links = []
    for link in range(max_links):
        try:
            state = lib.nvmlDeviceGetNvLinkState(h, link)
        except err_type as exc:
            code = getattr(exc, "value", None)
            if code in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT):
                continue  # no such link on this GPU
            q.fail("nvlink", f"nvmlDeviceGetNvLinkState({link}): {exc}")
            continue
        entry = {"link": link, "active": bool(state)}
        for key, counter in NVML_NVLINK_COUNTERS:
            entry[key] = q.call("nvlink", "nvmlDeviceGetNvLinkErrorCounter", h, link, counter)
        links.append(entry)
    return links or None


def collect(lib, doc):
    """Fill ``doc`` from an initialised pynvml-like ``lib``."""
    top = {"query_errors": {}}
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
    gpus = []
    doc.set("gpus", [])
    for index in range(int(count)):
        gpu = collect_gpu(lib, index)
        if gpu["error"]:
            doc.error(f"gpu {index}: {gpu['error']}")
        for message in gpu["query_errors"].values():
            doc.error(f"gpu {index}: {message}")
        gpus.append(gpu)
        doc.set("gpus", list(gpus))


def reason_code(code):
    if code == NVML_ERROR_LIBRARY_NOT_FOUND:
        return "library_not_found"
    if code == NVML_ERROR_DRIVER_NOT_LOADED:
        return "driver_not_loaded"
    return "init_failed"


def open_library(args, doc):
    """(lib, source) ready to use, or (None, None) after recording why NVML is unavailable."""
    if args.nvml_injection:
        try:
            return InjectedNvml(args.nvml_injection), "injection"
        except (OSError, ValueError) as exc:
            reason = f"NVML injection file: {exc}"
            doc.set("available", False)
            doc.set("reason", reason)
            doc.set("reason_code", "injection_error")
            doc.set("nvml_error", None)
            doc.error(reason)
            return None, None
    try:
        import pynvml
    except ImportError:
        doc.set("available", False)
        doc.set("reason", "pynvml (nvidia-ml-py) is not installed")
        doc.set("reason_code", "pynvml_missing")
        doc.set("nvml_error", None)
        return None, None
    return pynvml, "nvml"


def run(args, doc):
    lib, source = open_library(args, doc)
    if lib is not None:
        run_library(lib, source, doc)


def run_library(lib, source, doc):
    """Initialise the pynvml-like ``lib``, collect every GPU into ``doc``, shut it down."""
    err_type = getattr(lib, "NVMLError", NVMLError)
    try:
        lib.nvmlInit()
    except err_type as exc:
        code = getattr(exc, "value", None)
        doc.set("available", False)
        doc.set("reason", f"nvmlInit: {exc}")
        doc.set("reason_code", reason_code(code))
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


def parse_args(argv):
    p = argparse.ArgumentParser(prog="nvml.py", description="robustctl NVML probe (one JSON document).")
    p.add_argument("--root", default=os.environ.get("ROBUSTCTL_PROBE_ROOT", "/"))
    p.add_argument(
        "--nvml-injection",
        default=os.environ.get("ROBUSTCTL_NVML_INJECTION") or None,
        help="read GPU state from this injection file instead of NVML",
    )
    p.add_argument("--timeout", type=float, default=60.0, help="time budget, seconds (default 60)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    doc = Document(PROBE)
    timer = start_watchdog(doc, args.timeout)
    run(args, doc)
    timer.cancel()
    doc.emit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
