"""The result line of ``robustctl replay-sdc --command``: what a training script prints at its end.

Standalone (Python >= 3.8, stdlib only; torch tensors are used by duck typing, never imported).
Copy this file beside your training script, or import it from an installed robustctl
(``robustctl/_probes/replay_result.py``). The contract, one JSON line on stdout from at least one
machine of the group (the one holding global rank 0 is enough)::

    {"robustctl_replay": 1, "loss": ["0x1.0ab3bp+2", ...], "digest": "<hex>"}

- ``loss``: the per-step training loss, each as ``float.hex`` (exact bits: ``"nan"`` and ``"inf"``
  are allowed and mark the group faulty); plain JSON numbers are accepted too;
- ``digest``: any string that is equal on every healthy run, e.g. a SHA-256 of the final
  parameters (:func:`digest_tensors`, combined over ranks with :func:`combine`).

Usage in a script (rank 0, after the last step)::

    from replay_result import digest_tensors, emit
    emit(losses, digest_tensors(model.named_parameters()))
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any, Iterable, Sequence, TextIO

MARKER = "robustctl_replay"
VERSION = 1


def result_line(loss: Sequence[float], digest: str) -> str:
    """The JSON line for ``loss`` (floats, as ``float.hex``) and ``digest``."""
    return json.dumps({MARKER: VERSION, "loss": [float(v).hex() for v in loss], "digest": str(digest)})


def emit(loss: Sequence[float], digest: str, file: TextIO | None = None) -> None:
    """Print :func:`result_line` on ``file`` (default stdout) and flush."""
    out = file if file is not None else sys.stdout
    out.write(result_line(loss, digest) + "\n")
    out.flush()


def digest_tensors(named: Iterable[tuple[str, Any]]) -> str:
    """SHA-256 (hex) over ``(name, tensor)`` pairs sorted by name: name, shape, dtype and raw bytes.

    ``tensor`` is a torch tensor (read with ``detach().cpu().contiguous()`` and viewed as bytes).
    """
    h = hashlib.sha256()
    for name, t in sorted(named, key=lambda item: item[0]):
        c = t.detach().cpu().contiguous()
        h.update(f"{name}:{tuple(c.shape)}:{c.dtype}".encode())
        h.update(bytes(c.reshape(-1).view(_uint8(c)).tolist()))
    return h.hexdigest()


def combine(digests: Sequence[str]) -> str:
    """One digest of several ranks' digests, in the order given (rank order)."""
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()


def _uint8(t: Any) -> Any:
    return sys.modules[type(t).__module__.split(".")[0]].uint8
