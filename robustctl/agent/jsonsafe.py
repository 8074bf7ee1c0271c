"""Any value a training script hands the agent, made something strict JSON holds, bounded.

A heartbeat is read by strict parsers (``jq``, :func:`robustctl.jobcode.progress.parse_heartbeat`,
Go's ``encoding/json``): no ``NaN`` token, no integer Python's own ``json.loads`` refuses
(``sys.int_max_str_digits``), no string or container without a bound. :func:`jsonable` maps any value
onto that, and never raises.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_BITS",
    "MAX_ITEMS",
    "MAX_TEXT_CHARS",
    "NON_FINITE_JSON",
    "jsonable",
    "loss_json",
]

NON_FINITE_JSON = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
"""How a float that JSON cannot hold is written, by ``repr(value)``: robustctl's own spelling
(``robustctl.models.NON_FINITE_JSON``, copied: the agent imports nothing of the control side), strings
strict JSON holds and ``float()`` reads back."""

MAX_TEXT_CHARS = 1024
"""Longest string kept (longer ones are cut): a heartbeat field is a label or a number, and the whole
file must stay under the progress reader's 64 KiB (``HEARTBEAT_MAX_BYTES``)."""
MAX_ITEMS = 64
"""Most items kept of one list or dict (the rest dropped): minimegatron's largest field has 4."""
MAX_DEPTH = 4
"""Deepest nesting kept; a container deeper down is written as its type name."""
MAX_INT_BITS = 1024
"""Widest integer written as a number (about 308 decimal digits, a double's range): wider ones are
written as text, since ``json.loads`` refuses integers of more than 4,300 digits by default
(``sys.int_max_str_digits``) and no other reader holds them either."""


def _float(value: float) -> float | str:
    return value if math.isfinite(value) else NON_FINITE_JSON[repr(value)]


def loss_json(loss: float | None) -> float | str | None:
    """The heartbeat's ``loss``: the number when finite, ``"NaN"``/``"Infinity"``/``"-Infinity"``
    when not (:data:`NON_FINITE_JSON`), None where there is no loss.

    Args:
        loss: the step's loss as a float, or None.

    Returns:
        The JSON value (the spelling of ``tests/jobs/minimegatron.py``'s ``loss_json``).
    """
    return None if loss is None else _float(loss)


def _text(value: str) -> str:
    plain = str.__str__(value)
    return plain if len(plain) <= MAX_TEXT_CHARS else plain[:MAX_TEXT_CHARS]


def jsonable(value: Any, depth: int = 0) -> Any:
    """``value`` as a strict-JSON value within the bounds above; never raises.

    None, bools, strings, ints and floats map to themselves (non-finite floats spelled as
    :data:`NON_FINITE_JSON`, over-wide ints as text); dicts (keys made strings), lists and tuples are
    mapped item by item; anything else that ``float()`` takes (numpy and torch scalars) becomes a
    float, and the rest its ``repr`` cut to :data:`MAX_TEXT_CHARS`.

    Args:
        value: anything.
        depth: nesting level of ``value`` (callers leave it 0).

    Returns:
        A value ``json.dumps(..., allow_nan=False)`` writes and ``json.loads`` reads back.
    """
    try:
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str):
            return _text(value)
        if isinstance(value, int):
            n = int(value)
            return n if n.bit_length() <= MAX_INT_BITS else f"<int of {n.bit_length()} bits>"
        if isinstance(value, float):
            return _float(float(value))
        if isinstance(value, (dict, list, tuple)):
            if depth >= MAX_DEPTH:
                return f"<{type(value).__name__}>"
            if isinstance(value, dict):
                out: dict[str, Any] = {}
                for k, v in list(value.items())[:MAX_ITEMS]:
                    key = _text(k) if isinstance(k, str) else _text(str(jsonable(k, MAX_DEPTH)))
                    out[key] = jsonable(v, depth + 1)
                return out
            return [jsonable(v, depth + 1) for v in list(value)[:MAX_ITEMS]]
        try:
            return _float(float(value))
        except Exception:  # not a number (or a tensor of many elements): its repr
            return _text(repr(value))
    except Exception:  # a hostile __repr__/__float__/__iter__: the value is lost, the heartbeat is not
        return "<unprintable>"
