"""Thresholds of every built-in check, as data (a foundation module: the inventory reads it, the
checks in :mod:`robustctl.checks` apply it).

One frozen pydantic model, :class:`Thresholds`, read from the inventory's ``thresholds:`` key
(unknown keys are errors). Every field documents its default and where that default comes from:

- *Azure azurehpc-health-checks* (AzNHC, an extension of LBNL NHC): ``customTests/azure_gpu_ecc.nhc``
  (row remap pending/failure, > 512 uncorrectable remapped rows, SRAM correctable ECC > 10000),
  ``azure_gpu_xid.nhc`` (the XID list), ``azure_gpu_nvlink.nhc`` (inactive NVLink),
  ``azure_gpu_clock_throttling.nhc`` (HW slowdown / HW thermal / power brake bits), ``conf/*.conf``
  (``check_hw_ib 400 mlx5_ib0:1``: IB port ACTIVE, LinkUp, rate).
- *NVIDIA DCGM* ``dcgm_gpu_hardware_limits.h``: ``DCGM_LIMIT_MAX_RETIRED_PAGES 63`` (SBE + DBE),
  ``DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT 15`` (DBE), ``DCGM_LIMIT_MAX_NVLINK_ERROR 1``, and "CRC
  errors only matter at rates of 100+ per second" (so cumulative CRC counters are not judged by
  default); the DCGM ``pcie`` plugin's ``min_pci_generation``/``min_pci_width`` (checked under load).
- *NVIDIA docs*: NVML ``nvmlClocksEventReasons`` (bit meanings), *GPU Memory Error Management*
  (a pending row remap or page retirement takes effect only at the next GPU reset).
- *facebookresearch/gcm* health checks: retired pages pending is CRITICAL; NVLink error thresholds.
- *nccl-tests* ``doc/PERFORMANCE.md``: busbw definition (see ``robustctl.checks.allreduce``).

Inventory data is **not** here: the expected GPU count comes from the inventory
(``gpus_per_host``). The diagnose engine passes it, with other control-side facts, to every
evaluator as a :class:`robustctl.checks.registry.CheckContext` (``expected_gpus``,
``control_time``: UNIX s at the midpoint of the probe's round trip, ``round_trip_s``,
``host_time``, ``probe_errors``). ``nvml.count`` and ``burn.verify`` read ``expected_gpus``;
``host.clock`` reads ``control_time``/``round_trip_s``; every evaluator quotes ``probe_errors``
when a sub-collection is missing.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from robustctl.models import Status

Severity = Literal["ignore", "warning", "critical"]
"""How a condition is judged: not at all, WARNING, or CRITICAL."""


def severity_status(severity: Severity) -> Status | None:
    """The :class:`Status` a :data:`Severity` setting gives, or None for ``"ignore"``."""
    return {"warning": Status.WARNING, "critical": Status.CRITICAL}.get(severity)


def ladder(
    value: float | None,
    *,
    warn: float | None = None,
    crit: float | None = None,
    higher_is_worse: bool = True,
) -> Status:
    """Where ``value`` stands on a warning/critical ladder: the one comparison rule of every check.

    The rule: a value **reaching** a threshold is at that level: ``value >= threshold`` when higher
    is worse (a temperature, an error count), ``value <= threshold`` when lower is worse (free
    space, bandwidth). ``crit`` is looked at before ``warn``. A None threshold is never reached (its
    rule is switched off). A None or NaN value is *unknown*, never healthy: the answer is UNKNOWN
    whatever the thresholds (a NaN compares false with everything and would otherwise pass).

    A threshold that names the most (``*_max``) or the least (``*_min_*``, a floor) a healthy value
    may be is not reached at that value: pass it through :func:`beyond_max` / :func:`beyond_min`,
    which give the first value past it, so that the same rule applies.

    Args:
        value: the measurement (any unit; the thresholds' unit).
        warn: the WARNING level, or None (no WARNING level).
        crit: the CRITICAL level, or None (no CRITICAL level).
        higher_is_worse: True when a larger value is worse (``>=``), False when a smaller one is
            (``<=``).

    Returns:
        ``Status.CRITICAL``, ``Status.WARNING``, ``Status.OK`` (no level reached) or
        ``Status.UNKNOWN`` (``value`` is None or NaN).
    """
    if value is None or math.isnan(value):
        return Status.UNKNOWN
    for level, status in ((crit, Status.CRITICAL), (warn, Status.WARNING)):
        if level is not None and (value >= level if higher_is_worse else value <= level):
            return status
    return Status.OK


def beyond_max(limit: float | None) -> float | None:
    """The first value past ``limit``, the most a healthy value may be (a ``*_max`` threshold).

    ``ladder(v, crit=beyond_max(m))`` is CRITICAL exactly when ``v > m``.

    Args:
        limit: the largest healthy value, or None (the rule is off). An ``int`` limit is a count,
            compared with counts: the answer is ``limit + 1``; a float limit gives the next float up.

    Returns:
        The smallest value that exceeds ``limit``, or None.
    """
    if limit is None:
        return None
    if isinstance(limit, int):
        return limit + 1
    return math.nextafter(limit, math.inf)


def beyond_min(limit: float | None) -> float | None:
    """The first value below ``limit``, the least a healthy value may be (a ``*_min_*`` floor).

    ``ladder(v, crit=beyond_min(m), higher_is_worse=False)`` is CRITICAL exactly when ``v < m``.

    Args:
        limit: the smallest healthy value, or None (the rule is off). An ``int`` limit is compared
            with integers: the answer is ``limit - 1``; a float limit gives the next float down.

    Returns:
        The largest value below ``limit``, or None.
    """
    if limit is None:
        return None
    if isinstance(limit, int):
        return limit - 1
    return math.nextafter(limit, -math.inf)


MAX_COUNT = 1 << 53
"""Upper bound of every error-counter threshold: the largest integer a JSON reader keeps exact (2^53);
NVML's 64-bit counters never come near it."""
MAX_ITEMS = 256
"""Most entries of a list threshold (ignore patterns, XID codes, throttle reasons)."""
MAX_XID = 65535
"""Largest XID code accepted in ``xid_ignore`` (NVIDIA's catalog ends below 200; room is left for
new codes)."""

THROTTLE_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
"""NVML clocks event (throttle) reason bits, from ``nvmlClocksEventReasons`` in nvml.h / pynvml."""


class Thresholds(BaseModel):
    """Every threshold of the built-in checks. Frozen; unknown keys are errors.

    Units are in the field names (``_pct``, ``_gib``, ``_s``, ``_c``, ``_gbps``, ``_tflops``).
    ``None`` switches a rule off. One comparison rule (:func:`ladder`): a measurement that reaches a
    ``*_warn*``/``*_crit*`` level (or a "warning/critical at or above" field) is at that level; a
    ``*_max`` field is the most and a ``*_min*`` field (a floor) the least a healthy value may be,
    so only a value past it is judged. Fields are grouped by check: ``disk_*``/``readonly_*``
    (``host.disk``), ``memory_*`` (``host.memory``), ``load_*`` (``host.load``), ``clock_*``
    (``host.clock``), ``xid_*`` (``host.xid``), ``nic_*``/``ib_*`` (``host.nic``, ``host.ib``),
    ``gpu_temp_*`` … ``nvlink_*`` (``nvml.*``), ``burn_*`` (``burn.*``), ``allreduce_*``
    (``allreduce.*``), ``peer_*`` (the peer-relative rule of ``robustctl.checks.peer``).

    Every number has an upper bound far above any real value (a 1 PiB filesystem, a load of 10 000
    per CPU, a year of clock skew, a 10 Tb/s NIC, 200 °C, counters of :data:`MAX_COUNT`) and every
    list at most :data:`MAX_ITEMS` entries, so what the file holds is bounded; ``.nan`` and
    ``.inf`` are refused (a NaN limit compares false with everything and would switch its rule off).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    # --- host.disk -------------------------------------------------------------------------------
    disk_warn_free_pct: float = Field(
        10.0,
        ge=0,
        le=100,
        description="WARNING when a filesystem has this percent free or less (space available to "
        "non-root users, statvfs f_bavail). Source: LBNL NHC check_fs_used examples (90% used).",
    )
    disk_crit_free_pct: float = Field(
        5.0,
        ge=0,
        le=100,
        description="CRITICAL at or below this percent free: checkpoints and NCCL shared memory fail to "
        "write. Source: AzNHC/NHC check_fs_used practice (95% used).",
    )
    disk_crit_free_gib: float | None = Field(
        None,
        le=1_048_576,
        ge=0,
        description="CRITICAL at or below this many GiB free whatever the percentage (e.g. 1 for small "
        "/dev/shm or /tmp filesystems). None (default): off, so a container's small but empty "
        "/dev/shm is not a fault by itself.",
    )
    disk_ignore_mounts: tuple[str, ...] = Field(
        (),
        max_length=MAX_ITEMS,
        description="fnmatch patterns of mount points not judged at all (space and read-only).",
    )
    readonly_allowed_mounts: tuple[str, ...] = Field(
        ("/usr", "/nix/store", "/snap/*", "/boot/efi", "/etc/*", "/run/*", "/var/run/*"),
        max_length=MAX_ITEMS,
        description="fnmatch patterns of mount points that may legitimately be read-only (container "
        "bind mounts of /etc files, immutable /usr). Any other read-only local filesystem is CRITICAL: "
        "the classic failure is ext4 remounting itself read-only after I/O errors (errors=remount-ro). "
        "Source: LBNL NHC check_fs_mount_rw.",
    )

    # --- host.memory -----------------------------------------------------------------------------
    memory_warn_available_pct: float = Field(
        10.0,
        ge=0,
        le=100,
        description="WARNING at or below this percent of MemAvailable/MemTotal (/proc/meminfo). At stop time "
        "low memory usually means leftover processes of the failed job. Source: robustctl default.",
    )
    memory_crit_available_pct: float = Field(
        5.0,
        ge=0,
        le=100,
        description="CRITICAL at or below this percent available. Source: AzNHC check_hw_physmem uses a 5% "
        "tolerance.",
    )
    memory_min_total_gib: float | None = Field(
        None,
        le=1_048_576,
        ge=0,
        description="CRITICAL when MemTotal is below this (a missing DIMM). None: off. Source: AzNHC "
        "check_hw_physmem (expected total minus 5%).",
    )

    # --- host.load -------------------------------------------------------------------------------
    load_warn_per_cpu: float | None = Field(
        8.0,
        le=10_000,
        gt=0,
        description="WARNING when the 5-minute load average per CPU reaches this. High on purpose: "
        "CPU-bound work (a test suite, the previous burn) raises load without any fault, while a "
        "pile-up of hung tasks drives it far higher. None: off. Source: robustctl default.",
    )
    load_crit_per_cpu: float | None = Field(
        None, le=10_000, gt=0, description="CRITICAL at or above this 5-minute load per CPU. None: off."
    )
    procs_blocked_warn: int | None = Field(
        32,
        le=4_194_304,
        ge=1,
        description="WARNING when at least this many tasks are in uninterruptible sleep (D state, "
        "/proc/stat procs_blocked): the signature of a hung NFS mount or a wedged GPU driver, unlike "
        "CPU load. None: off. Source: robustctl default.",
    )

    # --- host.clock ------------------------------------------------------------------------------
    clock_warn_skew_s: float | None = Field(
        2.0,
        le=31_536_000,
        gt=0,
        description="WARNING when the host clock lies this many seconds or more outside the "
        "control side's [sent, received] window. None: off. Source: chrony makestep 1 s, plus margin.",
    )
    clock_crit_skew_s: float | None = Field(
        None,
        le=31_536_000,
        gt=0,
        description="CRITICAL at or beyond this skew (e.g. 300: Kerberos' default tolerance). None: off.",
    )

    # --- host.xid --------------------------------------------------------------------------------
    xid_ignore: tuple[Annotated[int, Field(ge=0, le=MAX_XID)], ...] = Field(
        (),
        max_length=MAX_ITEMS,
        description="XID codes not reported at all. Every other XID is judged by robustctl.analysis.xid "
        "(hardware and reset-GPU XIDs CRITICAL, application/investigate XIDs WARNING). Source: AzNHC "
        "azure_gpu_xid.nhc checks 48 56 57 58 62 63 64 65 68 69 73 74 79 80 81 92 119 120.",
    )

    # --- host.nic / host.ib ----------------------------------------------------------------------
    nic_ignore: tuple[str, ...] = Field(
        (),
        max_length=MAX_ITEMS,
        description="fnmatch patterns of network interface names not judged (e.g. 'eno2').",
    )
    nic_min_speed_mbps: int | None = Field(
        None,
        le=10_000_000,
        ge=1,
        description="CRITICAL when a physical NIC that is up reports a lower speed (a link that "
        "negotiated down). None: off. Source: NHC check_hw_eth.",
    )
    ib_ignore: tuple[str, ...] = Field(
        (),
        max_length=MAX_ITEMS,
        description="fnmatch patterns of InfiniBand ports not judged, as 'device' or 'device/port' "
        "(e.g. 'mlx5_bond_*', 'mlx5_4/1').",
    )
    ib_min_rate_gbps: float | None = Field(
        None,
        le=10_000,
        gt=0,
        description="CRITICAL when an active IB port's rate is below this, e.g. 400 for NDR. None: off. "
        "Source: AzNHC conf 'check_hw_ib 400 mlx5_ib0:1'.",
    )

    # --- nvml.* ----------------------------------------------------------------------------------
    gpu_temp_warn_c: float = Field(
        85.0,
        ge=0,
        le=200,
        description="WARNING at or above this GPU temperature (°C). At stop time GPUs idle near 30-45 °C. "
        "Source: gcm gpu_temperature examples (80/85 °C).",
    )
    gpu_temp_crit_c: float = Field(
        90.0,
        ge=0,
        le=200,
        description="CRITICAL at or above this temperature, or at or above the GPU's own NVML slowdown "
        "threshold when the probe reports it. Source: NVML NVML_TEMPERATURE_THRESHOLD_SLOWDOWN "
        "(H100/A100 about 87-92 °C).",
    )
    ecc_uncorrected_volatile_max: int = Field(
        0,
        le=MAX_COUNT,
        ge=0,
        description="CRITICAL when volatile (since driver load) uncorrectable ECC errors exceed this: the "
        "GPU needs at least a reset. Source: AzNHC azure_gpu_ecc.nhc (uncorrectable SRAM > 0), NVIDIA "
        "XID 48/94/95.",
    )
    ecc_uncorrected_aggregate_max: int | None = Field(
        None,
        le=MAX_COUNT,
        ge=0,
        description="WARNING when lifetime uncorrectable ECC errors exceed this. None (default): off, "
        "because aggregate counts survive repairs and row remapping (AzNHC tolerates 20,000,000 DRAM "
        "errors on ND H100 v5).",
    )
    ecc_corrected_volatile_max: int | None = Field(
        10000,
        le=MAX_COUNT,
        ge=0,
        description="WARNING when volatile correctable ECC errors exceed this. Source: AzNHC "
        "azure_gpu_ecc.nhc SRAM correctable threshold 10000 (applied here to the total).",
    )
    row_remap_pending: Severity = Field(
        "critical",
        description="Verdict for a pending row remap (applied only at the next GPU reset). Source: AzNHC "
        "azure_gpu_ecc.nhc 'Row remap pending'; NVIDIA GPU Memory Error Management.",
    )
    row_remap_failure: Severity = Field(
        "critical",
        description="Verdict for a past row-remapping failure (no spare rows: RMA). Source: AzNHC "
        "'Row remap error', gcm row_remap_failed.",
    )
    row_remap_uncorrectable_max: int = Field(
        512,
        le=MAX_COUNT,
        ge=0,
        description="CRITICAL above this many rows remapped for uncorrectable errors. Source: AzNHC "
        "azure_gpu_ecc.nhc (> 512).",
    )
    retired_pages_pending: Severity = Field(
        "critical",
        description="Verdict for a pending page retirement (pre-Ampere; needs a reset). Source: gcm "
        "gpu_retired_pages (pending > 0 is CRITICAL).",
    )
    retired_pages_total_crit: int = Field(
        63,
        le=MAX_COUNT,
        ge=1,
        description="CRITICAL at or above this many retired pages (SBE + DBE). Source: DCGM "
        "DCGM_LIMIT_MAX_RETIRED_PAGES = 63.",
    )
    retired_pages_dbe_warn: int = Field(
        15,
        le=MAX_COUNT,
        ge=1,
        description="WARNING at or above this many pages retired for double-bit errors. Source: DCGM "
        "DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT = 15.",
    )
    throttle_critical_reasons: tuple[str, ...] = Field(
        ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"),
        max_length=MAX_ITEMS,
        description="Clock event reasons that are CRITICAL (hardware forcing clocks down by 2x or more). "
        f"Names: {', '.join(THROTTLE_REASONS)}. Source: AzNHC azure_gpu_clock_throttling.nhc, NVML docs.",
    )
    throttle_warning_reasons: tuple[str, ...] = Field(
        ("sw_thermal_slowdown",),
        max_length=MAX_ITEMS,
        description="Clock event reasons that are a WARNING. Idle, application clocks, SW power cap, "
        "sync boost and display clocks are normal and never judged.",
    )
    pcie_width_degraded: Severity = Field(
        "critical",
        description="Verdict when a GPU's current PCIe link width is below its max (a link trained "
        "down: reseat/replace). Source: DCGM pcie plugin min_pci_width.",
    )
    pcie_gen_degraded: Severity = Field(
        "warning",
        description="Verdict when the current PCIe generation is below max while the GPU is not idle "
        "(idle GPUs downshift the link to save power, so idle GPUs are not judged). Source: DCGM pcie "
        "plugin min_pci_generation.",
    )
    nvlink_inactive: Severity = Field(
        "critical",
        description="Verdict for an inactive NVLink on a GPU that has NVLinks. Source: AzNHC "
        "azure_gpu_nvlink.nhc.",
    )
    nvlink_error_max: int | None = Field(
        0,
        le=MAX_COUNT,
        ge=0,
        description="WARNING when a link's replay or recovery error counter exceeds this (cumulative "
        "counters, so not CRITICAL by default). None: off. Source: DCGM DCGM_LIMIT_MAX_NVLINK_ERROR, "
        "gcm nvlink thresholds (0).",
    )
    nvlink_crc_error_max: int | None = Field(
        None,
        le=MAX_COUNT,
        ge=0,
        description="WARNING when a link's CRC flit/data error counter exceeds this. None (default): off, "
        "DCGM: 'CRC errors only matter at rates of 100+ per second'.",
    )

    # --- burn.* ----------------------------------------------------------------------------------
    burn_max_mismatches: int = Field(
        0,
        le=MAX_COUNT,
        ge=0,
        description="CRITICAL when a device produced more wrong matmul results than this (silent data "
        "corruption). Source: gpu-burn / DCGM diag (any miscompare fails).",
    )
    burn_require_gpu: bool = Field(
        True,
        description="When the inventory expects GPUs but the burn ran on the CPU (torch without CUDA, "
        "no device visible to torch), burn.verify is UNKNOWN: the GPUs were not checked. False judges "
        "the CPU burn instead (e.g. simulated GPU hosts, or a diagnostics environment known to lack CUDA).",
    )
    burn_min_tflops: float | None = Field(
        None,
        le=1_000_000,
        gt=0,
        description="Absolute floor per device (TFLOP/s); below it CRITICAL. None (default): only the "
        "peer-relative rule applies, because the right floor depends on GPU model and dtype.",
    )
    burn_peer_ratio: float = Field(
        0.9,
        gt=0,
        le=1,
        description="A device (within a host) or a host (across the fleet) below this fraction of the "
        "median TFLOP/s of its peers is a suspect. Source: ByteRobust §4.2 / issue #2 (0.9x median).",
    )

    # --- allreduce.* -----------------------------------------------------------------------------
    allreduce_min_busbw_gbps: float | None = Field(
        None,
        le=1_000_000,
        gt=0,
        description="Absolute busbw floor (GB/s, 1e9) at the largest message size; below it CRITICAL. "
        "None (default): peer-relative only. Source: AzNHC check_nccl_allreduce (e.g. 460 on ND H100).",
    )
    allreduce_peer_ratio: float = Field(
        0.9,
        gt=0,
        le=1,
        description="A host (L2) or pair (L3) below this fraction of the fleet median busbw is a suspect.",
    )

    # --- peer rule -------------------------------------------------------------------------------
    peer_min_peers: int = Field(
        3,
        le=1_000_000,
        ge=2,
        description="The peer-relative rule needs at least this many values (a median of 2 cannot tell "
        "which one is slow); with fewer it names no outlier. See robustctl.checks.peer.",
    )
