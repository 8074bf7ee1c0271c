"""robustctl.testing.fake_nvml: pynvml-like semantics over the probe's own injection reader
(diagnostics/nvml.py: InjectedNvml, the only reader of the file the fake writes)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pynvml
import pytest

from robustctl.probes import load_probe
from robustctl.testing.fake_nvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    Ecc,
    EccCounts,
    FakeGpu,
    FakeNvml,
    NvLink,
    Pcie,
    RemappedRows,
    RetiredPages,
    healthy_gpus,
    injection_document,
    load_injection,
    write_injection,
)

REPO = Path(__file__).resolve().parents[2]


nvml_probe = load_probe("nvml")

VARIED_GPUS: tuple[FakeGpu, ...] = (
    FakeGpu(),
    FakeGpu(
        name="Tesla V100-SXM2-32GB",
        ecc=Ecc(EccCounts(corrected=12, uncorrected=1), EccCounts(corrected=400, uncorrected=3)),
        retired_pages=RetiredPages(single_bit=(0x1000, 0x2000), double_bit=(0x3000,), pending=True),
        remapped_rows=None,
        clocks_event_reasons=0x48,
        pcie=Pcie(current_gen=3, max_gen=3, current_width=8, max_width=16),
        nvlink=(NvLink(), NvLink(active=False, replay=7, recovery=2, crc_flit=None, crc_data=5)),
        temperature_slowdown_c=None,
        serial=None,
    ),
    FakeGpu(
        remapped_rows=RemappedRows(correctable=3, uncorrectable=2, pending=True, failure=True),
        temperature_c=None,
        ecc=None,
        pcie=None,
        nvlink=None,
        clocks_event_reasons=None,
        errors={"nvmlDeviceGetTemperatureThreshold": NVML_ERROR_NO_PERMISSION},
    ),
    FakeGpu(lost=True),
)


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    """What a call did: ("ok", value) or ("error", (class name, NVML code))."""
    try:
        value = fn(*args)
    except Exception as exc:
        return "error", (type(exc).__name__, getattr(exc, "value", None))
    if hasattr(value, "busId"):
        value = value.busId
    if isinstance(value, tuple):
        value = list(value)
    return "ok", value


# ------------------------------------------------------------------------------------ semantics
def test_calls_before_init_raise_uninitialized_like_pynvml() -> None:
    fake = FakeNvml(healthy_gpus(1))
    with pytest.raises(pynvml.NVMLError_Uninitialized) as info:
        fake.nvmlDeviceGetCount()
    assert info.value.value == pynvml.NVML_ERROR_UNINITIALIZED
    assert str(info.value) == "Uninitialized"
    fake.nvmlInit()
    assert fake.nvmlDeviceGetCount() == 1
    fake.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetHandleByIndex(0)


def test_init_error_is_the_real_pynvml_class() -> None:
    fake = FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
    with pytest.raises(pynvml.NVMLError_LibraryNotFound) as info:
        fake.nvmlInit()
    assert str(info.value) == "NVML Shared Library Not Found"
    assert isinstance(info.value, pynvml.NVMLError)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


def test_unsupported_bad_index_lost_and_forced_errors() -> None:
    gpus = (
        FakeGpu(retired_pages=None, nvlink=None),
        FakeGpu(lost=True),
        FakeGpu(errors={"nvmlDeviceGetName": 4}),
    )
    fake = FakeNvml(gpus)
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetRetiredPages(h, 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetNvLinkState(h, 0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetHandleByIndex(3)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetTemperature(h, 7)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetHandleByIndex(1)
    h2 = fake.nvmlDeviceGetHandleByIndex(2)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        fake.nvmlDeviceGetName(h2)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetName("not a handle")


def test_return_shapes_match_pynvml() -> None:
    fake = FakeNvml(VARIED_GPUS[:2])
    fake.nvmlInit()
    h0, h1 = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    assert fake.nvmlDeviceGetPciInfo(h0).busId == "00000000:18:00.0"
    assert fake.nvmlDeviceGetRemappedRows(h0) == (0, 0, 0, 0)
    assert fake.nvmlDeviceGetRetiredPages(h1, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR) == [
        0x3000
    ]
    assert fake.nvmlDeviceGetRetiredPagesPendingStatus(h1) == pynvml.NVML_FEATURE_ENABLED
    assert (
        fake.nvmlDeviceGetTotalEccErrors(
            h1, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC
        )
        == 3
    )
    assert fake.nvmlDeviceGetTemperature(h0, pynvml.NVML_TEMPERATURE_GPU) == 34
    assert fake.nvmlDeviceGetNvLinkState(h1, 1) == 0
    assert fake.nvmlDeviceGetNvLinkErrorCounter(h1, 1, pynvml.NVML_NVLINK_ERROR_DL_REPLAY) == 7
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetNvLinkErrorCounter(h1, 1, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetNvLinkState(h1, 2)
    assert fake.nvmlDeviceGetCurrentClocksEventReasons(h1) == (
        pynvml.nvmlClocksEventReasonHwSlowdown | pynvml.nvmlClocksEventReasonHwThermalSlowdown
    )


def test_function_names_exist_in_real_pynvml() -> None:
    names = [n for n in dir(FakeNvml) if n.startswith("nvml")]
    assert len(names) >= 25
    missing = [n for n in names if not hasattr(pynvml, n)]
    assert missing == []
    for const in (n for n in dir(FakeNvml) if n.startswith("NVML_") and n != "NVML_NVLINK_MAX_LINKS"):
        assert getattr(FakeNvml, const) == getattr(pynvml, const), const


# ------------------------------------------------------------------------------- injection file
def test_injection_round_trip(tmp_path: Path) -> None:
    path = write_injection(tmp_path / "h1" / "nvml.json", VARIED_GPUS, driver_version="535.1")
    doc = load_injection(path)
    assert doc["format"] == "robustctl-nvml-injection" and doc["driver_version"] == "535.1"
    assert doc == injection_document(VARIED_GPUS, driver_version="535.1")
    again = FakeNvml.from_injection(path)
    assert again.document == doc
    again.nvmlInit()
    assert again.nvmlDeviceGetCount() == len(VARIED_GPUS)
    # ids are filled in from the index when written
    assert again.nvmlDeviceGetPciInfo(again.nvmlDeviceGetHandleByIndex(1)).busId == "00000000:28:00.0"


def test_the_fake_reads_with_the_probe_reader_only() -> None:
    """One reader: the fake has no parser of its own, it runs the probe's over its document."""
    import robustctl.testing.fake_nvml as fake_nvml

    source = Path(fake_nvml.__file__).read_text()
    assert "json.load" not in source and "InjectedNvml(" in source
    assert load_injection is not None and load_injection.__module__ == "robustctl.testing.fake_nvml"
    fake = FakeNvml(healthy_gpus(1))
    assert type(fake._reader).__name__ == "InjectedNvml"
    assert type(fake._reader).__module__ == nvml_probe.__name__


def test_load_injection_rejects_other_files(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"format": "something-else", "version": 1, "gpus": []}))
    with pytest.raises(ValueError):
        load_injection(p)
    p.write_text("{not json")
    with pytest.raises(ValueError):
        load_injection(p)


# -------------------------------------------------------------- agreement with the probe reader
CALLS: list[tuple[str, tuple[Any, ...]]] = [
    ("nvmlDeviceGetName", ()),
    ("nvmlDeviceGetUUID", ()),
    ("nvmlDeviceGetSerial", ()),
    ("nvmlDeviceGetPciInfo", ()),
    *[("nvmlDeviceGetTemperature", (s,)) for s in (0, 1)],
    *[("nvmlDeviceGetTemperatureThreshold", (t,)) for t in (0, 1, 3, 99)],
    *[("nvmlDeviceGetTotalEccErrors", (e, c)) for e, c in itertools.product((0, 1, 2), (0, 1))],
    *[("nvmlDeviceGetRetiredPages", (c,)) for c in (0, 1, 2)],
    ("nvmlDeviceGetRetiredPagesPendingStatus", ()),
    ("nvmlDeviceGetRemappedRows", ()),
    ("nvmlDeviceGetCurrentClocksEventReasons", ()),
    ("nvmlDeviceGetCurrentClocksThrottleReasons", ()),
    ("nvmlDeviceGetCurrPcieLinkGeneration", ()),
    ("nvmlDeviceGetMaxPcieLinkGeneration", ()),
    ("nvmlDeviceGetCurrPcieLinkWidth", ()),
    ("nvmlDeviceGetMaxPcieLinkWidth", ()),
    *[("nvmlDeviceGetNvLinkState", (link,)) for link in (0, 1, 2, 17, 18)],
    *[("nvmlDeviceGetNvLinkErrorCounter", (link, c)) for link in (0, 1, 5) for c in (0, 1, 2, 3, 4, 9)],
]


def test_fake_and_probe_reader_give_the_same_answers(tmp_path: Path) -> None:
    path = write_injection(tmp_path / "nvml.json", VARIED_GPUS)
    fake = FakeNvml.from_injection(path)
    reader = nvml_probe.InjectedNvml(str(path))
    # before init: both refuse
    assert _outcome(fake.nvmlDeviceGetCount) == _outcome(reader.nvmlDeviceGetCount)
    fake.nvmlInit()
    reader.nvmlInit()
    for fn in ("nvmlDeviceGetCount", "nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion"):
        assert _outcome(getattr(fake, fn)) == _outcome(getattr(reader, fn)), fn
    compared = 0
    for index in range(len(VARIED_GPUS) + 1):
        fh = _outcome(fake.nvmlDeviceGetHandleByIndex, index)
        rh = _outcome(reader.nvmlDeviceGetHandleByIndex, index)
        assert fh[0] == rh[0] and (fh[0] == "ok" or fh == rh), (index, fh, rh)
        if fh[0] != "ok":
            continue
        for fn, args in CALLS:
            f = _outcome(getattr(fake, fn), fh[1], *args)
            r = _outcome(getattr(reader, fn), rh[1], *args)
            assert f == r, (index, fn, args, f, r)
            compared += 1
    assert compared > 100


def test_probe_collection_agrees_over_fake_and_reader(tmp_path: Path) -> None:
    """The probe's collect() gives the same data from FakeNvml (pynvml errors) and from its reader."""
    path = write_injection(tmp_path / "nvml.json", VARIED_GPUS)

    def collect(lib: Any) -> dict[str, Any]:
        doc = nvml_probe.Document("nvml")
        lib.nvmlInit()
        nvml_probe.collect(lib, doc)
        return dict(doc.data), list(doc.errors)  # type: ignore[return-value]

    via_fake = collect(FakeNvml.from_injection(path))
    via_reader = collect(nvml_probe.InjectedNvml(str(path)))
    assert via_fake == via_reader
    data, errors = via_fake  # type: ignore[misc]
    assert data["count"] == 4
    v100 = data["gpus"][1]
    assert v100["retired_pages_dbe"] == 1 and v100["retired_pages_pending"] is True
    assert v100["remapped_rows_pending"] is None  # unsupported: null, not 0
    assert [lk["active"] for lk in v100["nvlink"]] == [True, False]
    assert v100["nvlink"][1]["crc_flit_errors"] is None
    assert errors == [
        "gpu 2: nvmlDeviceGetTemperatureThreshold: Insufficient Permissions",
        "gpu 3: nvmlDeviceGetHandleByIndex: GPU is lost",
    ]


def test_driver_not_loaded_via_injection(tmp_path: Path) -> None:
    path = write_injection(tmp_path / "nvml.json", healthy_gpus(8), init_error=NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        FakeNvml.from_injection(path).nvmlInit()
    reader = nvml_probe.InjectedNvml(str(path))
    with pytest.raises(nvml_probe.NVMLError) as info:
        reader.nvmlInit()
    assert info.value.value == NVML_ERROR_DRIVER_NOT_LOADED
