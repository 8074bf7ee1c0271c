"""One formatter of UNIX times for every report and every reason text: :func:`format_utc` never raises.

A foundation module (it imports only the store's time range), so the watch's decisions and the
reports print a time the same way.

A time reaches a report from the state store (checked there, :func:`robustctl.store.time_problem`),
from a clock, or from a host; whatever it is, a table or a page prints a line for it. A value that is
no time in the printable range (NaN, an infinity, ``1e300``, a negative time, text) is written as
``invalid time (VALUE)`` instead of stopping the report with an OverflowError or ValueError.
"""

from __future__ import annotations

import datetime
import math

from robustctl.store import TIME_MAX, TIME_MIN

__all__ = ["SHOWN_VALUE", "format_utc"]

SHOWN_VALUE = 40
"""Characters of a bad value's ``repr`` that ``invalid time (VALUE)`` quotes: one table cell."""

_FORMAT = "%Y-%m-%d %H:%M:%S"


def format_utc(t: object, *, zone: bool = False) -> str:
    """``t`` (UNIX seconds) as ``YYYY-MM-DD HH:MM:SS`` in UTC (`` UTC`` appended when ``zone``).

    Args:
        t: the time, UNIX seconds; any other value is shown as invalid.
        zone: append `` UTC``.

    Returns:
        The date, or ``invalid time (VALUE)`` when ``t`` is not a finite number in
        [:data:`~robustctl.store.TIME_MIN`, :data:`~robustctl.store.TIME_MAX`) (1970 to the year
        9999, what :mod:`datetime` can print): never raises.
    """
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        if (not isinstance(t, float) or math.isfinite(t)) and TIME_MIN <= t < TIME_MAX:
            try:
                when = datetime.datetime.fromtimestamp(float(t), datetime.timezone.utc)
            except (OverflowError, OSError, ValueError):  # a platform with a narrower time_t
                pass
            else:
                return when.strftime(_FORMAT) + (" UTC" if zone else "")
    shown = repr(t)
    if len(shown) > SHOWN_VALUE:
        shown = shown[: SHOWN_VALUE - 1] + "…"
    return f"invalid time ({shown})"
