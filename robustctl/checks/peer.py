"""The peer-relative rule: a value well below the median of its peers marks a suspect.

A slow GPU or host rarely crosses an absolute floor that fits every model, dtype and fabric; it is
slow *compared with identical peers*. ByteRobust (arXiv 2509.16293, §4.2) and issue #2 use "below
0.9× the fleet median"; the ratio is configurable (``Thresholds.burn_peer_ratio``,
``Thresholds.allreduce_peer_ratio``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping

from robustctl.models import Status
from robustctl.thresholds import beyond_min, ladder

__all__ = ["peer_outliers"]


def peer_outliers(
    values: Mapping[str, float], ratio: float, min_peers: int = 3
) -> dict[str, tuple[float, float]]:
    """Names whose value is below ``ratio`` × the median of all values.

    Args:
        values: name (host, device, or pair label) → a higher-is-better measurement, e.g. TFLOP/s
            or busbw in GB/s. Non-finite values (NaN, ±inf) are ignored: callers pass only
            measured values and judge failed measurements separately.
        ratio: fraction of the median below which a value is an outlier, in (0, 1]; e.g. 0.9.
        min_peers: the fewest finite values the rule needs (at least 2). With fewer it returns
            ``{}``: two values cannot tell which one is slow (the median is their mean), and one
            value has no peer. Absolute floors still apply to such small fleets.

    Returns:
        ``{name: (value, median)}`` for every name with ``value < ratio * median`` (strict: the
        limit is the least healthy value, so it goes through
        :func:`robustctl.thresholds.beyond_min` into the one ladder rule; a test pins it), where
        ``median`` is the median of all finite values, the outliers included (a robust centre: up
        to half the fleet can be slow before the median moves). Empty when the median is not
        positive. Ordered by ascending value.

    Raises:
        ValueError: ``ratio`` outside (0, 1] or ``min_peers`` < 2.
    """
    if not 0 < ratio <= 1:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    if min_peers < 2:
        raise ValueError(f"min_peers must be at least 2, got {min_peers}")
    finite = {k: float(v) for k, v in values.items() if math.isfinite(v)}
    if len(finite) < min_peers:
        return {}
    median = statistics.median(finite.values())
    if median <= 0:
        return {}
    limit = beyond_min(ratio * median)  # strictly below: the ladder's rule past a healthy floor
    slow = sorted(
        (v, k) for k, v in finite.items() if ladder(v, crit=limit, higher_is_worse=False) is Status.CRITICAL
    )
    return {k: (v, median) for v, k in slow}
