"""A fake NVML: per-GPU hardware state as frozen dataclasses, an injection file, a pynvml look-alike.

Tests (and plugin authors) describe each simulated host's GPUs with :class:`FakeGpu` and either

- write them to an **injection file** with :func:`write_injection`; the ``nvml`` probe
  (``diagnostics/nvml.py --nvml-injection FILE``, or env ``ROBUSTCTL_NVML_INJECTION``) then reads
  GPU state from that file instead of the NVML library, the way DCGM's NVML injection mode works;
- or use :class:`FakeNvml`, an object with the pynvml functions the probe calls, raising
  ``pynvml.NVMLError`` subclasses exactly where the real library does.

The probe carries its own reader of the same file (it cannot import robustctl); the unit tests
check that both give the same answers.

Injection file schema (JSON, ``"format": "robustctl-nvml-injection"``, ``"version": 1``)::

    {
      "format": "robustctl-nvml-injection", "version": 1,
      "init_error": null,                  # NVML error code nvmlInit raises (12 LibraryNotFound,
                                           # 9 DriverNotLoaded, ...) or null
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

Every ``null`` means "this GPU does not support the query" (NVML_ERROR_NOT_SUPPORTED), so the
probe reports ``null`` for that field, never 0. Semantics of the fake, all as in real NVML: calls
before ``nvmlInit`` (or after the last ``nvmlShutdown``) raise ``NVMLError_Uninitialized``; a bad
GPU index, sensor, counter type or NVLink index raises ``NVMLError_InvalidArgument``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "FORMAT",
    "NVML_ERROR_DRIVER_NOT_LOADED",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_GPU_IS_LOST",
    "NVML_ERROR_INVALID_ARGUMENT",
    "NVML_ERROR_LIBRARY_NOT_FOUND",
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_UNINITIALIZED",
    "VERSION",
    "Ecc",
    "EccCounts",
    "FakeGpu",
    "FakeNvml",
    "NVMLError",
    "NvLink",
    "Pcie",
    "RemappedRows",
    "RetiredPages",
    "healthy_gpus",
    "injection_document",
    "load_injection",
    "write_injection",
]

FORMAT = "robustctl-nvml-injection"
VERSION = 1

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15

_ERROR_NAMES: dict[int, tuple[str, str]] = {
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
"""NVML error codes → (pynvml class suffix, pynvml message), from pynvml's ``NVMLError``."""


def _error_classes() -> tuple[type[Exception], dict[int, type[Exception]]]:
    """pynvml's ``NVMLError`` and its per-code subclasses; a compatible hierarchy without pynvml."""
    try:
        import pynvml

        base: type[Exception] = pynvml.NVMLError
        return base, {code: getattr(pynvml, f"NVMLError_{n}", base) for code, (n, _) in _ERROR_NAMES.items()}
    except ImportError:  # pragma: no cover - nvidia-ml-py is a dev dependency

        class _NVMLError(Exception):
            value = 999

            def __str__(self) -> str:
                return _ERROR_NAMES.get(self.value, ("", f"NVML Error with code {self.value}"))[1]

        subclasses: dict[int, type[Exception]] = {}
        for code, (suffix, _) in _ERROR_NAMES.items():
            cls = type(f"NVMLError_{suffix}", (_NVMLError,), {"value": code})
            cls.__module__ = __name__
            subclasses[code] = cls
        return _NVMLError, subclasses


NVMLError, _BY_CODE = _error_classes()
"""``pynvml.NVMLError`` (or a look-alike when pynvml is not installed)."""


def nvml_error(code: int) -> Exception:
    """The exception real pynvml raises for NVML return code ``code`` (e.g. NVMLError_NotSupported)."""
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls()
    if NVMLError.__module__ == "pynvml":
        return NVMLError(code)
    exc = NVMLError()
    exc.value = code  # type: ignore[attr-defined]
    return exc


# ------------------------------------------------------------------------------- GPU state model
@dataclass(frozen=True)
class EccCounts:
    """ECC error counters of one counter type (``volatile``: since driver load; ``aggregate``: lifetime)."""

    corrected: int = 0
    uncorrected: int = 0


@dataclass(frozen=True)
class Ecc:
    """ECC counters as returned by ``nvmlDeviceGetTotalEccErrors``."""

    volatile: EccCounts = field(default_factory=EccCounts)
    aggregate: EccCounts = field(default_factory=EccCounts)


@dataclass(frozen=True)
class RetiredPages:
    """Dynamic page retirement (pre-Ampere GPUs): page addresses per cause, and the pending flag."""

    single_bit: tuple[int, ...] = ()
    double_bit: tuple[int, ...] = ()
    pending: bool = False


@dataclass(frozen=True)
class RemappedRows:
    """Row remapping (Ampere and newer), as ``nvmlDeviceGetRemappedRows`` returns it."""

    correctable: int = 0
    uncorrectable: int = 0
    pending: bool = False
    failure: bool = False


@dataclass(frozen=True)
class Pcie:
    """PCIe link: current and maximum generation and width (lanes)."""

    current_gen: int = 5
    max_gen: int = 5
    current_width: int = 16
    max_width: int = 16


@dataclass(frozen=True)
class NvLink:
    """One NVLink: state and the cumulative error counters (``nvmlDeviceGetNvLinkErrorCounter``)."""

    active: bool = True
    replay: int | None = 0
    recovery: int | None = 0
    crc_flit: int | None = 0
    crc_data: int | None = 0


def _links(n: int) -> tuple[NvLink, ...]:
    return tuple(NvLink() for _ in range(n))


@dataclass(frozen=True)
class FakeGpu:
    """One simulated GPU. Defaults: a healthy, idle H100 SXM with 18 active NVLinks.

    A field set to ``None`` makes the matching NVML query raise ``NVMLError_NotSupported``.
    ``pci_bus_id``/``uuid`` ``None`` are filled from the GPU's index by :func:`write_injection`
    and :class:`FakeNvml`. ``errors`` forces an NVML error code for a pynvml function name, e.g.
    ``{"nvmlDeviceGetTemperature": 4}`` (NO_PERMISSION). ``lost=True`` makes every call on the
    GPU, including ``nvmlDeviceGetHandleByIndex``, raise ``NVMLError_GpuIsLost``.
    """

    name: str = "NVIDIA H100 80GB HBM3"
    pci_bus_id: str | None = None
    uuid: str | None = None
    serial: str | None = "1650923000000"
    lost: bool = False
    temperature_c: int | None = 34
    temperature_slowdown_c: int | None = 87
    temperature_shutdown_c: int | None = 92
    ecc: Ecc | None = field(default_factory=Ecc)
    retired_pages: RetiredPages | None = None
    remapped_rows: RemappedRows | None = field(default_factory=RemappedRows)
    clocks_event_reasons: int | None = 0x1
    pcie: Pcie | None = field(default_factory=Pcie)
    nvlink: tuple[NvLink, ...] | None = field(default_factory=lambda: _links(18))
    errors: Mapping[str, int] = field(default_factory=dict)


def healthy_gpus(n: int = 8, **changes: Any) -> tuple[FakeGpu, ...]:
    """``n`` healthy default GPUs, each with ``changes`` applied (e.g. ``name=...``)."""
    return tuple(FakeGpu(**changes) for _ in range(n))


def default_pci_bus_id(index: int) -> str:
    """PCI bus id given to GPU ``index`` when its ``pci_bus_id`` is None (``00000000:18:00.0``, ...)."""
    return f"00000000:{(0x18 + 0x10 * index) % 0x100:02X}:00.0"


def default_uuid(index: int) -> str:
    """UUID given to GPU ``index`` when its ``uuid`` is None."""
    return f"GPU-00000000-0000-4000-8000-{index:012x}"


# ------------------------------------------------------------------------------- injection file
def _gpu_doc(index: int, g: FakeGpu) -> dict[str, Any]:
    def ecc_doc(e: Ecc) -> dict[str, Any]:
        return {
            "volatile": {"corrected": e.volatile.corrected, "uncorrected": e.volatile.uncorrected},
            "aggregate": {"corrected": e.aggregate.corrected, "uncorrected": e.aggregate.uncorrected},
        }

    return {
        "name": g.name,
        "uuid": g.uuid or default_uuid(index),
        "serial": g.serial,
        "pci_bus_id": g.pci_bus_id or default_pci_bus_id(index),
        "lost": g.lost,
        "temperature_c": g.temperature_c,
        "temperature_slowdown_c": g.temperature_slowdown_c,
        "temperature_shutdown_c": g.temperature_shutdown_c,
        "ecc": ecc_doc(g.ecc) if g.ecc is not None else None,
        "retired_pages": (
            {
                "single_bit": list(g.retired_pages.single_bit),
                "double_bit": list(g.retired_pages.double_bit),
                "pending": g.retired_pages.pending,
            }
            if g.retired_pages is not None
            else None
        ),
        "remapped_rows": (
            {
                "correctable": g.remapped_rows.correctable,
                "uncorrectable": g.remapped_rows.uncorrectable,
                "pending": g.remapped_rows.pending,
                "failure": g.remapped_rows.failure,
            }
            if g.remapped_rows is not None
            else None
        ),
        "clocks_event_reasons": g.clocks_event_reasons,
        "pcie": (
            {
                "current_gen": g.pcie.current_gen,
                "max_gen": g.pcie.max_gen,
                "current_width": g.pcie.current_width,
                "max_width": g.pcie.max_width,
            }
            if g.pcie is not None
            else None
        ),
        "nvlink": (
            [
                {
                    "active": link.active,
                    "replay": link.replay,
                    "recovery": link.recovery,
                    "crc_flit": link.crc_flit,
                    "crc_data": link.crc_data,
                }
                for link in g.nvlink
            ]
            if g.nvlink is not None
            else None
        ),
        "errors": dict(g.errors),
    }


def injection_document(
    gpus: Iterable[FakeGpu],
    *,
    driver_version: str = "550.54.15",
    nvml_version: str = "12.550.54.15",
    cuda_driver_version: int = 12040,
    init_error: int | None = None,
) -> dict[str, Any]:
    """The injection-file document (a JSON-ready dict) for ``gpus`` in index order."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "init_error": init_error,
        "driver_version": driver_version,
        "nvml_version": nvml_version,
        "cuda_driver_version": cuda_driver_version,
        "gpus": [_gpu_doc(i, g) for i, g in enumerate(gpus)],
    }


def write_injection(
    path: str | os.PathLike[str],
    gpus: Iterable[FakeGpu],
    *,
    driver_version: str = "550.54.15",
    nvml_version: str = "12.550.54.15",
    cuda_driver_version: int = 12040,
    init_error: int | None = None,
) -> Path:
    """Write an NVML injection file for ``gpus`` (index order) and return its path.

    Args:
        path: file to create or replace (parent directories are created).
        gpus: the simulated GPUs; ``()`` simulates a driver with no GPU.
        driver_version, nvml_version, cuda_driver_version: what the nvmlSystemGet* calls return.
        init_error: NVML error code that ``nvmlInit`` raises (e.g. ``NVML_ERROR_DRIVER_NOT_LOADED``)
            to simulate a broken driver; ``None`` for a working one.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    doc = injection_document(
        gpus,
        driver_version=driver_version,
        nvml_version=nvml_version,
        cuda_driver_version=cuda_driver_version,
        init_error=init_error,
    )
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, p)
    return p


def load_injection(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate an injection file. Raises ValueError on a wrong format/version or bad JSON."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise ValueError(f"{path}: not a {FORMAT} version {VERSION} file")
    if not isinstance(doc.get("gpus"), list):
        raise ValueError(f"{path}: 'gpus' must be a list")
    return doc


def _gpu_from_doc(d: Mapping[str, Any]) -> FakeGpu:
    ecc = d.get("ecc")
    rp = d.get("retired_pages")
    rr = d.get("remapped_rows")
    pcie = d.get("pcie")
    nvl = d.get("nvlink")
    return FakeGpu(
        name=d.get("name", "NVIDIA GPU"),
        pci_bus_id=d.get("pci_bus_id"),
        uuid=d.get("uuid"),
        serial=d.get("serial"),
        lost=bool(d.get("lost", False)),
        temperature_c=d.get("temperature_c"),
        temperature_slowdown_c=d.get("temperature_slowdown_c"),
        temperature_shutdown_c=d.get("temperature_shutdown_c"),
        ecc=(
            Ecc(EccCounts(**ecc.get("volatile", {})), EccCounts(**ecc.get("aggregate", {})))
            if isinstance(ecc, Mapping)
            else None
        ),
        retired_pages=(
            RetiredPages(
                tuple(rp.get("single_bit", ())), tuple(rp.get("double_bit", ())), bool(rp.get("pending"))
            )
            if isinstance(rp, Mapping)
            else None
        ),
        remapped_rows=RemappedRows(**rr) if isinstance(rr, Mapping) else None,
        clocks_event_reasons=d.get("clocks_event_reasons"),
        pcie=Pcie(**pcie) if isinstance(pcie, Mapping) else None,
        nvlink=tuple(NvLink(**link) for link in nvl) if isinstance(nvl, list) else None,
        errors=dict(d.get("errors") or {}),
    )


# ----------------------------------------------------------------------------------- FakeNvml
@dataclass(frozen=True)
class _Handle:
    index: int


class _PciInfo:
    """What ``nvmlDeviceGetPciInfo`` returns: ``busId`` (str, as pynvml decodes it) and its parts."""

    def __init__(self, bus_id: str) -> None:
        self.busId = bus_id
        self.busIdLegacy = bus_id[-12:] if len(bus_id) > 12 else bus_id
        dom, bus, devfn = [*bus_id.split(":"), "0", "0", "0.0"][:3]
        self.domain = int(dom, 16)
        self.bus = int(bus, 16)
        self.device = int(devfn.split(".")[0], 16)
        self.pciDeviceId = 0x233010DE
        self.pciSubSystemId = 0x16C110DE


class FakeNvml:
    """An in-memory stand-in for the ``pynvml`` module, over :class:`FakeGpu` states.

    Exposes the pynvml functions robustctl's probe uses (names and return types as in nvidia-ml-py)
    and the constants they need. Errors are ``pynvml.NVMLError`` subclasses
    (``NVMLError_Uninitialized``, ``NVMLError_NotSupported``, ``NVMLError_InvalidArgument``, ...).

    Args:
        gpus: the simulated GPUs, in index order.
        driver_version, nvml_version, cuda_driver_version: returned by the nvmlSystemGet* calls.
        init_error: NVML error code ``nvmlInit`` raises, or None.
    """

    NVMLError = NVMLError
    NVML_FEATURE_DISABLED = 0
    NVML_FEATURE_ENABLED = 1
    NVML_TEMPERATURE_GPU = 0
    NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_NVLINK_ERROR_DL_REPLAY = 0
    NVML_NVLINK_ERROR_DL_RECOVERY = 1
    NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
    NVML_NVLINK_ERROR_DL_CRC_DATA = 3

    def __init__(
        self,
        gpus: Sequence[FakeGpu] = (),
        *,
        driver_version: str = "550.54.15",
        nvml_version: str = "12.550.54.15",
        cuda_driver_version: int = 12040,
        init_error: int | None = None,
    ) -> None:
        self.gpus = tuple(gpus)
        self.driver_version = driver_version
        self.nvml_version = nvml_version
        self.cuda_driver_version = cuda_driver_version
        self.init_error = init_error
        self._refcount = 0
        self.calls: list[str] = []
        """Every pynvml function called, in order (for tests)."""

    @classmethod
    def from_injection(cls, path: str | os.PathLike[str]) -> FakeNvml:
        """A FakeNvml with the state of an injection file (see :func:`write_injection`)."""
        doc = load_injection(path)
        return cls(
            [_gpu_from_doc(g) for g in doc["gpus"]],
            driver_version=doc.get("driver_version", ""),
            nvml_version=doc.get("nvml_version", ""),
            cuda_driver_version=int(doc.get("cuda_driver_version") or 0),
            init_error=doc.get("init_error"),
        )

    # -- plumbing ---------------------------------------------------------------------------------
    def _enter(self, fn: str) -> None:
        self.calls.append(fn)
        if self._refcount <= 0:
            raise nvml_error(NVML_ERROR_UNINITIALIZED)

    def _gpu(self, fn: str, handle: object) -> FakeGpu:
        self._enter(fn)
        if not isinstance(handle, _Handle) or not 0 <= handle.index < len(self.gpus):
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        g = self.gpus[handle.index]
        if g.lost:
            raise nvml_error(NVML_ERROR_GPU_IS_LOST)
        if fn in g.errors:
            raise nvml_error(int(g.errors[fn]))
        return g

    @staticmethod
    def _supported(value: Any) -> Any:
        if value is None:
            raise nvml_error(NVML_ERROR_NOT_SUPPORTED)
        return value

    # -- library ----------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        """Initialise; raises the configured ``init_error`` (e.g. NVMLError_LibraryNotFound)."""
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise nvml_error(int(self.init_error))
        self._refcount += 1

    def nvmlShutdown(self) -> None:
        """Drop one reference; raises NVMLError_Uninitialized when not initialised."""
        self._enter("nvmlShutdown")
        self._refcount -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._enter("nvmlSystemGetNVMLVersion")
        return self.nvml_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda_driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        """A handle for GPU ``index``; InvalidArgument out of range, GpuIsLost for a lost GPU."""
        self._enter("nvmlDeviceGetHandleByIndex")
        if not isinstance(index, int) or not 0 <= index < len(self.gpus):
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        g = self.gpus[index]
        if g.lost:
            raise nvml_error(NVML_ERROR_GPU_IS_LOST)
        if "nvmlDeviceGetHandleByIndex" in g.errors:
            raise nvml_error(int(g.errors["nvmlDeviceGetHandleByIndex"]))
        return _Handle(index)

    # -- identity ---------------------------------------------------------------------------------
    def nvmlDeviceGetName(self, handle: object) -> str:
        return self._gpu("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle: object) -> str:
        g = self._gpu("nvmlDeviceGetUUID", handle)
        assert isinstance(handle, _Handle)
        return g.uuid or default_uuid(handle.index)

    def nvmlDeviceGetSerial(self, handle: object) -> str:
        return str(self._supported(self._gpu("nvmlDeviceGetSerial", handle).serial))

    def nvmlDeviceGetPciInfo(self, handle: object) -> _PciInfo:
        g = self._gpu("nvmlDeviceGetPciInfo", handle)
        assert isinstance(handle, _Handle)
        return _PciInfo(g.pci_bus_id or default_pci_bus_id(handle.index))

    # -- health -----------------------------------------------------------------------------------
    def nvmlDeviceGetTemperature(self, handle: object, sensor: int) -> int:
        g = self._gpu("nvmlDeviceGetTemperature", handle)
        if sensor != self.NVML_TEMPERATURE_GPU:
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        return int(self._supported(g.temperature_c))

    def nvmlDeviceGetTemperatureThreshold(self, handle: object, threshold: int) -> int:
        g = self._gpu("nvmlDeviceGetTemperatureThreshold", handle)
        if threshold == self.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN:
            return int(self._supported(g.temperature_shutdown_c))
        if threshold == self.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
            return int(self._supported(g.temperature_slowdown_c))
        if isinstance(threshold, int) and 0 <= threshold < 8:
            raise nvml_error(NVML_ERROR_NOT_SUPPORTED)
        raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetTotalEccErrors(self, handle: object, errorType: int, counterType: int) -> int:
        g = self._gpu("nvmlDeviceGetTotalEccErrors", handle)
        if errorType not in (0, 1) or counterType not in (0, 1):
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        ecc: Ecc = self._supported(g.ecc)
        counts = ecc.volatile if counterType == self.NVML_VOLATILE_ECC else ecc.aggregate
        return (
            counts.uncorrected if errorType == self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else counts.corrected
        )

    def nvmlDeviceGetRetiredPages(self, handle: object, sourceFilter: int) -> list[int]:
        g = self._gpu("nvmlDeviceGetRetiredPages", handle)
        if sourceFilter not in (0, 1):
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        rp: RetiredPages = self._supported(g.retired_pages)
        return list(rp.single_bit if sourceFilter == 0 else rp.double_bit)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: object) -> int:
        g = self._gpu("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        rp: RetiredPages = self._supported(g.retired_pages)
        return self.NVML_FEATURE_ENABLED if rp.pending else self.NVML_FEATURE_DISABLED

    def nvmlDeviceGetRemappedRows(self, handle: object) -> tuple[int, int, int, int]:
        """(correctable rows, uncorrectable rows, pending 0/1, failure 0/1), as pynvml returns it."""
        g = self._gpu("nvmlDeviceGetRemappedRows", handle)
        rr: RemappedRows = self._supported(g.remapped_rows)
        return (rr.correctable, rr.uncorrectable, int(rr.pending), int(rr.failure))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int:
        g = self._gpu("nvmlDeviceGetCurrentClocksEventReasons", handle)
        return int(self._supported(g.clocks_event_reasons))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: object) -> int:
        """Deprecated pynvml name of :meth:`nvmlDeviceGetCurrentClocksEventReasons`."""
        g = self._gpu("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return int(self._supported(g.clocks_event_reasons))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: object) -> int:
        pcie: Pcie = self._supported(self._gpu("nvmlDeviceGetCurrPcieLinkGeneration", handle).pcie)
        return pcie.current_gen

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: object) -> int:
        pcie: Pcie = self._supported(self._gpu("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie)
        return pcie.max_gen

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: object) -> int:
        pcie: Pcie = self._supported(self._gpu("nvmlDeviceGetCurrPcieLinkWidth", handle).pcie)
        return pcie.current_width

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: object) -> int:
        pcie: Pcie = self._supported(self._gpu("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie)
        return pcie.max_width

    def _link(self, fn: str, handle: object, link: int) -> NvLink:
        g = self._gpu(fn, handle)
        links: tuple[NvLink, ...] = self._supported(g.nvlink)
        if not isinstance(link, int) or not 0 <= link < len(links):
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    def nvmlDeviceGetNvLinkState(self, handle: object, link: int) -> int:
        """NVML_FEATURE_ENABLED (1) for an active link, else 0."""
        return int(self._link("nvmlDeviceGetNvLinkState", handle, link).active)

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: object, link: int, counter: int) -> int:
        """Replay (0), recovery (1), CRC flit (2) or CRC data (3) errors of one link."""
        lk = self._link("nvmlDeviceGetNvLinkErrorCounter", handle, link)
        values = {0: lk.replay, 1: lk.recovery, 2: lk.crc_flit, 3: lk.crc_data}
        if counter not in values:
            if isinstance(counter, int) and 0 <= counter < 5:
                raise nvml_error(NVML_ERROR_NOT_SUPPORTED)
            raise nvml_error(NVML_ERROR_INVALID_ARGUMENT)
        return int(self._supported(values[counter]))
