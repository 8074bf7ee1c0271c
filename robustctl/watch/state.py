"""What ``robustctl watch`` keeps per job in the store between evaluations (``watch_state``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from robustctl.errors import ConfigError
from robustctl.watch.decide import WatchMemory
from robustctl.watch.rules import FailSlowState

__all__ = ["STATE_VERSION", "WatchState"]

STATE_VERSION = 1
"""Version of the per-job state document the watcher keeps in ``watch_state``."""


@dataclass(frozen=True)
class WatchState:
    """What the watcher keeps per job: the decision memory, the fail-slow detector, the newest step
    judged (fail-slow and loss rules judge only steps after it), the store's open incident id.

    Attributes:
        memory: the decision memory. fail_slow: the fail-slow detector's state. last_step: the newest
            step judged (None: none yet). incident_id: the store's id of the job's open incident.
    """

    memory: WatchMemory = field(default_factory=WatchMemory)
    fail_slow: FailSlowState = field(default_factory=FailSlowState)
    last_step: int | None = None
    incident_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The stored document (``version`` :data:`STATE_VERSION`)."""
        return {
            "version": STATE_VERSION,
            "memory": self.memory.to_json(),
            "fail_slow": self.fail_slow.to_json(),
            "last_step": self.last_step,
            "incident_id": self.incident_id,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any] | None, where: str) -> WatchState:
        """Read back a stored document (None: a new job's empty state).

        Args:
            doc: the stored document (None: none stored yet).
            where: the store and job, for the error.

        Returns:
            The state.

        Raises:
            ConfigError: a damaged document; the message names ``where``.
        """
        if doc is None:
            return cls()
        try:
            if doc.get("version") != STATE_VERSION:
                raise ConfigError(f"version {doc.get('version')!r:.20} is not {STATE_VERSION}")
            last, inc = doc.get("last_step"), doc.get("incident_id")
            for name, v in (("last_step", last), ("incident_id", inc)):
                if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**63):
                    raise ConfigError(f"{name}: {v!r:.40} is not a non-negative integer")
            return cls(
                WatchMemory.from_json(doc.get("memory")),
                FailSlowState.from_json(doc.get("fail_slow")),
                last,
                inc,
            )
        except ConfigError as exc:
            raise ConfigError(f"{where}: the watcher's state is damaged: {exc}") from None
