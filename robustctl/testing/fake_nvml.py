"""A fake NVML: per-GPU hardware state as frozen dataclasses, an injection file, a pynvml look-alike.

Tests (and plugin authors) describe each simulated host's GPUs with :class:`FakeGpu` and either

- write them to an **injection file** with :func:`write_injection`; the ``nvml`` probe
  (``diagnostics/nvml.py --nvml-injection FILE``, or env ``ROBUSTCTL_NVML_INJECTION``) then reads
  GPU state from that file instead of the NVML library, the way DCGM's NVML injection mode works;
- or use :class:`FakeNvml`, an object with the pynvml functions the probe calls, raising
  ``pynvml.NVMLError`` subclasses exactly where the real library does.

This module only **writes** the injection document. Its one reader is the probe's
(``InjectedNvml`` and ``load_injection`` in ``diagnostics/nvml.py``, schema in its
``INJECTION_SCHEMA``): :class:`FakeNvml` runs that reader over the document it builds, with the real
``pynvml`` error classes, so the fake and the probe cannot drift apart.

Every ``None`` field means "this GPU does not support the query" (NVML_ERROR_NOT_SUPPORTED), so the
probe reports ``null`` for that field, never 0. Semantics of the fake, all as in real NVML: calls
before ``nvmlInit`` (or after the last ``nvmlShutdown``) raise ``NVMLError_Uninitialized``; a bad
handle, GPU index, sensor, counter type or NVLink index raises ``NVMLError_InvalidArgument``;
``nvmlInit`` with ``init_error=NVML_ERROR_LIBRARY_NOT_FOUND`` raises ``NVMLError_LibraryNotFound``
(value 12, "NVML Shared Library Not Found"), as pynvml does on a machine without a driver.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from robustctl.probes import load_probe

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


def _probe() -> Any:
    """The nvml probe's module (``diagnostics/nvml.py``): the injection reader and its errors."""
    return load_probe("nvml")


def _error_classes() -> tuple[type[Exception], dict[int, type[Exception]]]:
    """pynvml's ``NVMLError`` and its per-code subclasses; the probe's look-alikes without pynvml."""
    names: dict[int, tuple[str, str]] = _probe().ERROR_NAMES
    try:
        import pynvml

        base: type[Exception] = pynvml.NVMLError
        return base, {code: getattr(pynvml, f"NVMLError_{n}", base) for code, (n, _) in names.items()}
    except ImportError:  # pragma: no cover - nvidia-ml-py is a dev dependency
        return _probe().NVMLError, dict(_probe().ERROR_CLASSES)


NVMLError, _BY_CODE = _error_classes()
"""``pynvml.NVMLError`` (or the probe's look-alike when pynvml is not installed)."""


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
    init_stall_s: float = 0.0,
) -> dict[str, Any]:
    """The injection-file document (a JSON-ready dict) for ``gpus`` in index order."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "init_error": init_error,
        "init_stall_s": init_stall_s,
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
    init_stall_s: float = 0.0,
) -> Path:
    """Write an NVML injection file for ``gpus`` (index order) and return its path.

    Args:
        path: file to create or replace (parent directories are created).
        gpus: the simulated GPUs; ``()`` simulates a driver with no GPU.
        driver_version: what ``nvmlSystemGetDriverVersion`` returns.
        nvml_version: what ``nvmlSystemGetNVMLVersion`` returns.
        cuda_driver_version: what ``nvmlSystemGetCudaDriverVersion`` returns (e.g. 12040 for CUDA 12.4).
        init_error: NVML error code that ``nvmlInit`` raises (e.g. ``NVML_ERROR_DRIVER_NOT_LOADED``)
            to simulate a broken driver; ``None`` for a working one.
        init_stall_s: seconds ``nvmlInit`` blocks before it returns or raises (a wedged driver,
            where ``nvmlInit`` and ``nvidia-smi`` hang); at most the probe's ``MAX_INIT_STALL_S``.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    doc = injection_document(
        gpus,
        driver_version=driver_version,
        nvml_version=nvml_version,
        cuda_driver_version=cuda_driver_version,
        init_error=init_error,
        init_stall_s=init_stall_s,
    )
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, p)
    return p


def load_injection(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate an injection file with the probe's reader (``diagnostics/nvml.py``).

    Args:
        path: the injection file.

    Returns:
        The injection document.

    Raises:
        ValueError: not JSON, another format or version, ``gpus`` not a list.
        OSError: unreadable.
    """
    doc: dict[str, Any] = _probe().load_injection(os.fspath(path))
    return doc


# ----------------------------------------------------------------------------------- FakeNvml
NVML_FUNCTIONS = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetNVMLVersion",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetSerial",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetTemperatureThreshold",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkErrorCounter",
)
"""The pynvml functions FakeNvml provides (names, arguments and return types as in nvidia-ml-py)."""


class FakeNvml:
    """An in-memory stand-in for the ``pynvml`` module, over :class:`FakeGpu` states.

    Exposes the pynvml functions robustctl's probe uses (:data:`NVML_FUNCTIONS`) and the constants
    they need. The calls run the nvml probe's injection reader over :func:`injection_document` of
    the GPUs, raising ``pynvml.NVMLError`` subclasses (``NVMLError_Uninitialized``,
    ``NVMLError_NotSupported``, ``NVMLError_InvalidArgument``, ...) where real NVML fails.

    Args:
        gpus: the simulated GPUs, in index order.
        driver_version: returned by ``nvmlSystemGetDriverVersion``.
        nvml_version: returned by ``nvmlSystemGetNVMLVersion``.
        cuda_driver_version: returned by ``nvmlSystemGetCudaDriverVersion``.
        init_error: NVML error code ``nvmlInit`` raises, or None.

    Attributes:
        document: the injection document the calls read. calls: every pynvml function called, in
            order (for tests).
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
        self._use(
            injection_document(
                self.gpus,
                driver_version=driver_version,
                nvml_version=nvml_version,
                cuda_driver_version=cuda_driver_version,
                init_error=init_error,
            )
        )

    def _use(self, document: dict[str, Any]) -> None:
        self.document = document
        self._reader = _probe().InjectedNvml(document, error=nvml_error, error_type=NVMLError)
        self.calls: list[str] = []

    @classmethod
    def from_injection(cls, path: str | os.PathLike[str]) -> FakeNvml:
        """A FakeNvml with the state of an injection file (read by the probe's reader).

        Its ``gpus`` is empty: the state is the file's ``document``.
        """
        fake = cls()
        fake._use(load_injection(path))
        return fake

    def _call(self, fn: str, *args: Any) -> Any:
        self.calls.append(fn)
        return getattr(self._reader, fn)(*args)

    def nvmlInit(self) -> None:
        """Initialise; raises the configured ``init_error`` (e.g. NVMLError_LibraryNotFound)."""
        self._call("nvmlInit")

    def nvmlShutdown(self) -> None:
        """Drop one reference; raises NVMLError_Uninitialized when not initialised."""
        self._call("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self._call("nvmlSystemGetDriverVersion"))

    def nvmlSystemGetNVMLVersion(self) -> str:
        return str(self._call("nvmlSystemGetNVMLVersion"))

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return int(self._call("nvmlSystemGetCudaDriverVersion"))

    def nvmlDeviceGetCount(self) -> int:
        return int(self._call("nvmlDeviceGetCount"))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        """An opaque handle for GPU ``index``; InvalidArgument out of range, GpuIsLost for a lost GPU."""
        return self._call("nvmlDeviceGetHandleByIndex", index)

    def nvmlDeviceGetName(self, handle: object) -> str:
        return str(self._call("nvmlDeviceGetName", handle))

    def nvmlDeviceGetUUID(self, handle: object) -> str:
        return str(self._call("nvmlDeviceGetUUID", handle))

    def nvmlDeviceGetSerial(self, handle: object) -> str:
        return str(self._call("nvmlDeviceGetSerial", handle))

    def nvmlDeviceGetPciInfo(self, handle: object) -> Any:
        """``busId`` (str, as pynvml decodes it), ``domain``, ``bus``, ``device``, ..."""
        return self._call("nvmlDeviceGetPciInfo", handle)

    def nvmlDeviceGetTemperature(self, handle: object, sensor: int) -> int:
        return int(self._call("nvmlDeviceGetTemperature", handle, sensor))

    def nvmlDeviceGetTemperatureThreshold(self, handle: object, threshold: int) -> int:
        return int(self._call("nvmlDeviceGetTemperatureThreshold", handle, threshold))

    def nvmlDeviceGetTotalEccErrors(self, handle: object, errorType: int, counterType: int) -> int:
        return int(self._call("nvmlDeviceGetTotalEccErrors", handle, errorType, counterType))

    def nvmlDeviceGetRetiredPages(self, handle: object, sourceFilter: int) -> list[int]:
        return cast("list[int]", self._call("nvmlDeviceGetRetiredPages", handle, sourceFilter))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: object) -> int:
        return int(self._call("nvmlDeviceGetRetiredPagesPendingStatus", handle))

    def nvmlDeviceGetRemappedRows(self, handle: object) -> tuple[int, int, int, int]:
        """(correctable rows, uncorrectable rows, pending 0/1, failure 0/1), as pynvml returns it."""
        return cast("tuple[int, int, int, int]", self._call("nvmlDeviceGetRemappedRows", handle))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int:
        return int(self._call("nvmlDeviceGetCurrentClocksEventReasons", handle))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: object) -> int:
        """Deprecated pynvml name of :meth:`nvmlDeviceGetCurrentClocksEventReasons`."""
        return int(self._call("nvmlDeviceGetCurrentClocksThrottleReasons", handle))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: object) -> int:
        return int(self._call("nvmlDeviceGetCurrPcieLinkGeneration", handle))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: object) -> int:
        return int(self._call("nvmlDeviceGetMaxPcieLinkGeneration", handle))

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: object) -> int:
        return int(self._call("nvmlDeviceGetCurrPcieLinkWidth", handle))

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: object) -> int:
        return int(self._call("nvmlDeviceGetMaxPcieLinkWidth", handle))

    def nvmlDeviceGetNvLinkState(self, handle: object, link: int) -> int:
        """NVML_FEATURE_ENABLED (1) for an active link, else 0."""
        return int(self._call("nvmlDeviceGetNvLinkState", handle, link))

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: object, link: int, counter: int) -> int:
        """Replay (0), recovery (1), CRC flit (2) or CRC data (3) errors of one link."""
        return int(self._call("nvmlDeviceGetNvLinkErrorCounter", handle, link, counter))
