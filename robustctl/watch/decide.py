"""The watch's decisions and rails: one evaluation's verdicts + what the watcher remembers → one
:class:`Decision`, pure and deterministic (issue 22, §3 "Decisions").

:func:`decide` reads the verdicts of :mod:`robustctl.watch.rules` and :mod:`robustctl.watch.logscan`
for one job, the settings :class:`robustctl.config.WatchSettings` (``cooldown_s``,
``max_recoveries_per_hour``, ``playbook_for``, ``notify``), the watcher's remembered facts for the job
(:class:`WatchMemory`) and a few facts of this evaluation (its time, whether the playbook run in
progress has ended and when, the time of the job's newest step, ``--advise``, a person's ``resume``).
It returns exactly one :class:`Decision`: an :class:`Action`, a non-empty reason, the rail that
decided it, the evidence (the verdicts) and the new :class:`WatchMemory`. Times are UNIX seconds
passed in; the clock is never read. The same inputs give the same decision.

**Sources.** ByteRobust (arXiv 2509.16293, SOSP 2025) runs this loop in its control plane: real-time
checks feed a controller that maps what it sees to a mitigation (§3–§4), a machine named with high
confidence is evicted at once without stop-time checks (§4.2, "direct eviction"; the ``gpu-lost``
playbook), an explicit failure without a named machine goes through stop-time checks and the ladder
reattempt → rollback → replay (§4.2, Fig. 5; the ``job-failed`` and ``nan-loss`` playbooks), and a
hang or a fail-slow is localised by aggregating stacks and over-evicting the group they name (§5;
the ``hang`` and ``fail-slow`` playbooks). Its principle is rapid isolation over precise root cause:
act on the first sound signal, quickly. The table class → playbook is issue 22's
(:data:`robustctl.config.DEFAULT_WATCH_PLAYBOOKS`). The rails below (one playbook at a time, one
recovery per incident, cool-down, hourly limit and pause) are issue 22's requirements; how each is
measured is our choice, with the reason given where it is defined.

**The rules, in the order they are applied:**

1. *Clock.* ``now`` earlier than the memory's last evaluation is taken as that time (a clock stepped
   back must not reopen a cool-down or an hourly window; our choice). Recoveries older than
   :data:`RECOVERY_WINDOW_S` are forgotten.
2. *Resume.* ``resume=True`` (a person's explicit command) clears a pause and the recoveries counted
   in the sliding hour (the person takes over the judgement the limit stood for; otherwise the next
   signal would stop the watcher again at once). It does not shorten a cool-down.
3. *The run in progress.* When the playbook run in progress has ended (``run_ended_s``, the
   journal's finish time), it is no longer in progress, the cool-down runs until ``run_ended_s +
   cooldown_s`` and its incident waits for a new step.
4. *Incidents.* An incident opens when an actionable signal is seen and none is open, and keeps its
   id while open. It closes (a) when a recovery was run for it and the job made a step after that
   run ended (``newest_step_s > run end``: issue 22 "an incident stays open until the job makes a new
   step after the recovery"), or (b) when no recovery was run for it (cool-down, ``--advise``,
   pause) and an evaluation sees no verdict at all (the fault went away by itself; an ``unknown``
   verdict keeps it open: not seeing a signal is not seeing it gone).
5. *Priority.* Several verdicts at once are decided by the class of highest priority,
   :data:`PRIORITY`: crash > host-critical > nan-loss > hang > fail-slow (our choice, after
   ByteRobust's split of explicit and implicit failures, §3): an explicit error names its cause,
   and the hang or slowdown the peers show is often its effect (a rank that crashed leaves its peers
   waiting in a collective); a host-critical finding names machines but not whether the job noticed;
   a NaN loss is an explicit symptom with its own checks (L4 alignment, replay); a hang and a
   fail-slow say only that something is wrong, and a hang stops all progress while a fail-slow job
   still trains. ``unknown`` never triggers an action (a source that could not be read says nothing
   about the job) but is recorded: a decision seeing only ``unknown`` is a ``skip``, never a
   ``none``, since not checked is never healthy.
   A signal of higher priority than the open incident's reclassifies it while no recovery was run
   for it (same id: the hang seen first was the crash's effect; a handled incident keeps the class
   its recovery was chosen for); one of lower priority is decided as the open incident's class.
6. *Rails,* in order, each a ``skip`` naming itself in :attr:`Decision.rail`: ``paused`` (after the
   hourly limit, until resume); ``running`` (never two playbooks at once for one job);
   ``same-incident`` (a recovery already ran for this incident and no new step came after it: never
   a second recovery for it); either of the last two is ``lower-priority`` instead when the signal
   is of lower priority than the open incident; ``cooldown`` (``now < cool-down end``: the end itself
   is outside it); ``no-hosts`` (a host-critical signal that names no host, or more than fit a
   playbook parameter); then ``hourly-limit``: with ``max_recoveries_per_hour`` recoveries started in
   the last :data:`RECOVERY_WINDOW_S`, the decision is ``stop`` once (the watcher pauses, records why,
   and the caller runs ``notify`` with the decision on stdin), then ``skip`` with rail ``paused``.
7. *Act.* Otherwise ``run`` the class's playbook with ``job`` (every shipped playbook's parameter)
   and, for host-critical, ``hosts`` (comma-separated, from the verdicts' ``host`` / ``hosts``
   values; the ``gpu-lost`` playbook requires it). The memory records the run in progress (its
   journal id is set by the caller once the run is begun: :meth:`WatchMemory.with_run_id`), the
   recovery's start in the sliding hour, and the incident as handled.

**Advise** (``--advise``): the same decision, but a would-be ``run`` or ``stop`` is ``advise`` (the
reason says which, the playbook and parameters are those that would run), and the memory is updated
as if nothing started: no run in progress, no recovery counted, no cool-down, no pause; the incident
is still opened (its onset and class are facts), unhandled, so the next evaluation advises again
while the signal holds.

**Bad input.** A non-finite time, an empty job name or something other than a :class:`Verdict` among
the verdicts raise :class:`ValueError` (a programming error: the caller builds these). Any verdicts
and any sequence of valid times give a decision; nothing else raises.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

from robustctl.errors import ConfigError
from robustctl.models import SCHEMA_VERSION, strict_jsonable
from robustctl.timefmt import format_utc
from robustctl.watch.rules import SignalClass, Verdict

if TYPE_CHECKING:
    from robustctl.config import WatchSettings

__all__ = [
    "MAX_EVIDENCE_VERDICTS",
    "MAX_HOSTS_PARAM_CHARS",
    "MAX_MEMORY_ID_CHARS",
    "MAX_MEMORY_RECOVERIES",
    "MAX_REASON_CHARS",
    "PRIORITY",
    "RAILS",
    "RECOVERY_WINDOW_S",
    "Action",
    "Decision",
    "OpenIncident",
    "Outcome",
    "Pause",
    "Rail",
    "RunInProgress",
    "Situation",
    "WatchMemory",
    "act",
    "advance_clock",
    "apply_resume",
    "close_recovered",
    "decide",
    "end_run",
    "judge",
    "open_or_reclassify",
    "priority_of",
    "rail_cooldown",
    "rail_hourly_limit",
    "rail_no_hosts",
    "rail_paused",
    "rail_running",
    "rail_same_incident",
]

PRIORITY: tuple[SignalClass, ...] = (
    SignalClass.CRASH,
    SignalClass.HOST_CRITICAL,
    SignalClass.NAN_LOSS,
    SignalClass.HANG,
    SignalClass.FAIL_SLOW,
)
"""Actionable classes, highest priority first (module docstring, rule 5; our choice after ByteRobust
§3's explicit vs implicit failures: an explicit error names its cause, a hang may be the effect of a
crash elsewhere). :attr:`SignalClass.UNKNOWN` is not in it: it never triggers an action."""

RECOVERY_WINDOW_S = 3600.0
"""The sliding window of ``max_recoveries_per_hour``, in seconds (issue 22: "at most N recoveries per
job per hour"): a recovery started at ``t`` counts while ``now - t < 3600``."""

MAX_EVIDENCE_VERDICTS = 16
"""Most verdicts a decision keeps in :attr:`Decision.evidence` and in :attr:`Decision.also_seen`
each (the first, in priority order; the count of those left out is kept): every decision is stored
and printed, so it must stay small whatever a reading produced; the rules give at most one verdict
per rule and the log scan one per rank, and 16 is enough to show the pattern (our choice)."""

MAX_REASON_CHARS = 1024
"""Longest reason of a decision, in characters (longer is cut and ends with ``…``): a sentence or two
naming the rail, the incident, the playbook and the times; it embeds a pause reason, so it is twice
a verdict's evidence (:data:`robustctl.watch.rules.MAX_EVIDENCE_CHARS`) (our choice)."""

MAX_HOSTS_PARAM_CHARS = 4096
"""Longest ``hosts`` parameter (comma-separated host names): the playbook engine's longest parameter
value (``robustctl.playbooks.engine.MAX_PARAM_CHARS``, not imported: the watch's cores import only
foundation modules). More critical hosts than that at once is not a machine fault to evict but a
``no-hosts`` skip: the job's whole fleet looking bad is more likely an observer fault (design: the
eviction circuit breaker)."""

MAX_MEMORY_RECOVERIES = 100
"""Most recovery times :meth:`WatchMemory.from_json` accepts: the largest ``max_recoveries_per_hour``
the inventory accepts (:class:`robustctl.config.WatchSettings`, 100); :func:`decide` never keeps more
than that many in its window, so more in a stored document means it was damaged."""

MAX_MEMORY_ID_CHARS = 512
"""Longest incident id or playbook name :meth:`WatchMemory.from_json` accepts, in characters: an id is
``"<job>-<n>"`` and a playbook name at most 256 characters in the inventory (our choice: twice that)."""

_ELLIPSIS = "…"


def _cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the last one replaced by ``…`` when cut."""
    return text if len(text) <= limit else text[: limit - 1] + _ELLIPSIS


def priority_of(signal: SignalClass) -> int:
    """Rank of ``signal`` in :data:`PRIORITY`: 0 is the highest; :attr:`SignalClass.UNKNOWN` ranks
    below every actionable class (``len(PRIORITY)``)."""
    return PRIORITY.index(signal) if signal in PRIORITY else len(PRIORITY)


class Action(str, Enum):
    """What one evaluation decided (issue 22, §3)."""

    RUN = "run"
    """Start :attr:`Decision.playbook` with :attr:`Decision.params`."""
    ADVISE = "advise"
    """``--advise``: what would run (or that the watcher would stop), acting on nothing."""
    SKIP = "skip"
    """Saw something, did nothing, because of :attr:`Decision.rail`."""
    STOP = "stop"
    """The hourly recovery limit is reached: stop acting (pause), record why, run ``notify``."""
    NONE = "none"
    """Healthy: no rule fired."""


class Rail(str, Enum):
    """Why a ``skip`` (or ``stop``) did not run a playbook (module docstring, rule 6)."""

    PAUSED = "paused"
    RUNNING = "running"
    SAME_INCIDENT = "same-incident"
    LOWER_PRIORITY = "lower-priority"
    COOLDOWN = "cooldown"
    NO_HOSTS = "no-hosts"
    HOURLY_LIMIT = "hourly-limit"
    UNKNOWN_ONLY = "unknown-only"


@dataclass(frozen=True)
class RunInProgress:
    """The playbook run the watcher started for the job and has not seen end.

    Attributes:
        playbook: its name. incident: the incident it recovers. started_s: UNIX s it was decided.
        run_id: its journal id once the caller began it (:meth:`WatchMemory.with_run_id`), else None.
    """

    playbook: str
    incident: str
    started_s: float
    run_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values."""
        return {
            "playbook": self.playbook,
            "incident": self.incident,
            "started_s": self.started_s,
            "run_id": self.run_id,
        }


@dataclass(frozen=True)
class OpenIncident:
    """The job's open incident.

    Attributes:
        incident_id: ``"<job>-<n>"``, n counting the job's incidents from 1.
        signal: its class (raised when a higher-priority signal is seen while it is open).
        onset_s: UNIX s of the evaluation that first saw it (the ledger takes the last good step as
            the onset of its own record).
        playbook: the playbook run for it, None while none was.
        recovery_started_s: UNIX s that recovery was decided, None while none was.
        recovery_ended_s: UNIX s that recovery's run ended (the journal's finish time), None while it
            runs or none was.
    """

    incident_id: str
    signal: SignalClass
    onset_s: float
    playbook: str | None = None
    recovery_started_s: float | None = None
    recovery_ended_s: float | None = None

    @property
    def handled(self) -> bool:
        """A recovery was started for this incident."""
        return self.recovery_started_s is not None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values."""
        return {
            "id": self.incident_id,
            "class": self.signal.value,
            "onset_s": self.onset_s,
            "playbook": self.playbook,
            "recovery_started_s": self.recovery_started_s,
            "recovery_ended_s": self.recovery_ended_s,
        }


@dataclass(frozen=True)
class Pause:
    """The watcher stopped acting for the job: ``reason`` (the stop decision's), since ``since_s`` (UNIX s)."""

    reason: str
    since_s: float

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values."""
        return {"reason": self.reason, "since_s": self.since_s}


@dataclass(frozen=True)
class WatchMemory:
    """What the watcher remembers about one job between evaluations (kept in the store by its caller).

    Attributes:
        recoveries_s: UNIX s each recovery (a ``run``) was decided, oldest first, those within the last
            :data:`RECOVERY_WINDOW_S` (older ones are dropped at each evaluation).
        cooldown_until_s: no recovery starts before this UNIX s (None: no cool-down yet).
        running: the playbook run in progress, or None.
        incident: the open incident, or None.
        paused: set by a ``stop``; cleared only by ``resume``.
        incidents_opened: incidents opened so far (the next incident's number is this + 1).
        last_evaluated_s: the time of the last evaluation (module docstring, rule 1), None before any.
    """

    recoveries_s: tuple[float, ...] = ()
    cooldown_until_s: float | None = None
    running: RunInProgress | None = None
    incident: OpenIncident | None = None
    paused: Pause | None = None
    incidents_opened: int = 0
    last_evaluated_s: float | None = None

    def refused(self, prior: WatchMemory) -> WatchMemory:
        """This memory (a ``run`` decision's) after the playbook engine refused the run before anything
        ran (a playbook that needs a person, another run of the job unfinished, a store error): not a
        recovery. Nothing is running; the recoveries and cool-down are ``prior``'s (the refusal counts
        toward neither); the incident stays open and unhandled, so the next evaluation decides again."""
        incident = self.incident
        if incident is not None:
            incident = replace(incident, playbook=None, recovery_started_s=None, recovery_ended_s=None)
        return replace(
            self,
            running=None,
            recoveries_s=prior.recoveries_s,
            cooldown_until_s=prior.cooldown_until_s,
            incident=incident,
        )

    def with_run_id(self, run_id: int) -> WatchMemory:
        """This memory with the journal id of the run in progress set (once the caller began it).

        Args:
            run_id: the playbook run's journal id.

        Returns:
            A copy of this memory whose :attr:`running` carries ``run_id``.

        Raises:
            ValueError: no run is in progress.
        """
        if self.running is None:
            raise ValueError("no playbook run in progress to give a run id")
        return replace(self, running=replace(self.running, run_id=run_id))

    @classmethod
    def from_json(cls, doc: object) -> WatchMemory:
        """The memory :meth:`to_json` wrote, read back and checked (a stored document may be damaged).

        Every field is checked for its type and bound: times finite numbers, at most
        :data:`MAX_MEMORY_RECOVERIES` recovery times, ids and names non-empty text of at most
        :data:`MAX_MEMORY_ID_CHARS` characters, a pause reason at most :data:`MAX_REASON_CHARS`, an
        incident class one of :class:`~robustctl.watch.rules.SignalClass`'s actionable classes
        (:data:`PRIORITY`), a run id and the incident count non-negative integers.

        Args:
            doc: the decoded JSON document (an object; a missing key takes the field's default).

        Returns:
            The memory the document describes.

        Raises:
            ConfigError: ``doc`` is not such a document; the message names the field at fault.
        """
        d = _m_obj("memory", doc)
        known = {
            "recoveries_s",
            "cooldown_until_s",
            "running",
            "incident",
            "paused",
            "incidents_opened",
            "last_evaluated_s",
        }
        extra = sorted(str(k) for k in d if k not in known)
        if extra:
            raise _m_bad(extra[0], d[extra[0]])
        recoveries = d.get("recoveries_s", [])
        if not isinstance(recoveries, list) or len(recoveries) > MAX_MEMORY_RECOVERIES:
            raise _m_bad("recoveries_s", recoveries)
        rec = tuple(float(_m_time_of("recoveries_s[]", t) or 0.0) for t in recoveries)
        running = None
        if d.get("running") is not None:
            r = _m_obj("running", d["running"])
            running = RunInProgress(
                playbook=_m_text("running.playbook", r.get("playbook")),
                incident=_m_text("running.incident", r.get("incident")),
                started_s=float(_m_time_of("running.started_s", r.get("started_s")) or 0.0),
                run_id=_m_count("running.run_id", r.get("run_id"), optional=True),
            )
        incident = None
        if d.get("incident") is not None:
            i = _m_obj("incident", d["incident"])
            classes = {c.value: c for c in PRIORITY}
            if i.get("class") not in classes:
                raise _m_bad("incident.class", i.get("class"))
            playbook = i.get("playbook")
            incident = OpenIncident(
                incident_id=_m_text("incident.id", i.get("id")),
                signal=classes[i["class"]],
                onset_s=float(_m_time_of("incident.onset_s", i.get("onset_s")) or 0.0),
                playbook=None if playbook is None else _m_text("incident.playbook", playbook),
                recovery_started_s=_m_time_of(
                    "incident.recovery_started_s", i.get("recovery_started_s"), True
                ),
                recovery_ended_s=_m_time_of("incident.recovery_ended_s", i.get("recovery_ended_s"), True),
            )
        paused = None
        if d.get("paused") is not None:
            p = _m_obj("paused", d["paused"])
            paused = Pause(
                reason=_m_text("paused.reason", p.get("reason"), MAX_REASON_CHARS),
                since_s=float(_m_time_of("paused.since_s", p.get("since_s")) or 0.0),
            )
        return cls(
            recoveries_s=rec,
            cooldown_until_s=_m_time_of("cooldown_until_s", d.get("cooldown_until_s"), True),
            running=running,
            incident=incident,
            paused=paused,
            incidents_opened=_m_count("incidents_opened", d.get("incidents_opened", 0)) or 0,
            last_evaluated_s=_m_time_of("last_evaluated_s", d.get("last_evaluated_s"), True),
        )

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values (:meth:`from_json` reads them back to an equal memory)."""
        return {
            "recoveries_s": list(self.recoveries_s),
            "cooldown_until_s": self.cooldown_until_s,
            "running": None if self.running is None else self.running.to_json(),
            "incident": None if self.incident is None else self.incident.to_json(),
            "paused": None if self.paused is None else self.paused.to_json(),
            "incidents_opened": self.incidents_opened,
            "last_evaluated_s": self.last_evaluated_s,
        }


@dataclass(frozen=True)
class Decision:
    """One evaluation's decision (one event in the store; one line of ``watch --json``).

    Attributes:
        job: the job. at_s: UNIX s of the evaluation (after rule 1).
        action: what was decided. reason: why, one or two sentences, never empty (at most
            :data:`MAX_REASON_CHARS`). rail: for ``skip`` and ``stop``, the rail that decided it.
        signal: the class decided on (None for ``none`` and an unknown-only ``skip``).
        playbook, params: for ``run`` / ``advise`` of a run, the playbook and its parameters as
            ``(name, value)`` pairs; for ``skip``/``stop``, the playbook that was not run (params
            empty).
        incident: the incident concerned (None when none).
        evidence: the verdicts of :attr:`signal` (for an unknown-only skip, the unknown ones), at most
            :data:`MAX_EVIDENCE_VERDICTS`. also_seen: every other verdict of the evaluation, priority
            order, unknown last, at most :data:`MAX_EVIDENCE_VERDICTS`. left_out: verdicts not kept.
        notify: for ``stop``, the ``notify`` argv the caller runs with this decision's JSON on stdin
            (empty when none is configured).
        memory: the watcher's memory after this decision.
    """

    job: str
    at_s: float
    action: Action
    reason: str
    memory: WatchMemory
    rail: Rail | None = None
    signal: SignalClass | None = None
    playbook: str | None = None
    params: tuple[tuple[str, str], ...] = ()
    incident: str | None = None
    evidence: tuple[Verdict, ...] = ()
    also_seen: tuple[Verdict, ...] = ()
    left_out: int = 0
    notify: tuple[str, ...] = ()
    kind: str = "watch-decision"
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        """The decision as a strict-JSON document (``kind`` ``"watch-decision"``, ``schema_version``
        1): non-finite floats among the verdicts' values are spelled as strings
        (:meth:`~robustctl.watch.rules.Verdict.to_json`), so ``json.dumps(..., allow_nan=False)``
        never fails on it."""
        doc = {
            "kind": self.kind,
            "schema_version": self.schema_version,
            "job": self.job,
            "at_s": self.at_s,
            "action": self.action.value,
            "reason": self.reason,
            "rail": None if self.rail is None else self.rail.value,
            "signal": None if self.signal is None else self.signal.value,
            "playbook": self.playbook,
            "params": dict(self.params),
            "incident": self.incident,
            "evidence": [v.to_json() for v in self.evidence],
            "also_seen": [v.to_json() for v in self.also_seen],
            "left_out": self.left_out,
            "notify": list(self.notify),
            "memory": self.memory.to_json(),
        }
        out: dict[str, Any] = strict_jsonable(doc)
        return out


def _check_time(name: str, value: float | None, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of UNIX seconds, not {value!r}")


def _fmt_t(t: float) -> str:
    """A duration in seconds for a reason: ``"12.5 s"``, ``"600 s"``."""
    return f"{t:.1f} s" if t != int(t) else f"{int(t)} s"


def _at(t: float) -> str:
    """A UNIX time for a reason, in UTC to the second: ``"2026-11-26 20:59:37 UTC"``
    (:func:`robustctl.timefmt.format_utc`, the formatter of every report)."""
    return format_utc(t, zone=True)


def _hosts_of(verdicts: Sequence[Verdict]) -> list[str]:
    """The hosts the verdicts name (values ``host``, ``hosts`` comma-separated), first seen first."""
    out: list[str] = []
    for v in verdicts:
        for name in ("host", "hosts"):
            value = v.value(name)
            if not isinstance(value, str):
                continue
            for h in value.split(","):
                h = h.strip()
                if h and h not in out:
                    out.append(h)
    return out


@dataclass(frozen=True)
class Situation:
    """What the rails and the act rule judge: an actionable signal seen, after rules 1 to 5.

    Attributes:
        job: the job. now: UNIX s of the evaluation (after rule 1). settings: the ``watch:`` section.
        memory: the memory so far (the incident opened or reclassified in it). incident: the open
            incident (``memory.incident``). seen: the highest-priority class seen. signal: the class
            decided on (the open incident's when ``seen`` ranks lower). lower: ``seen`` ranks below the
            open incident's class. playbook: the class's playbook. evidence: the verdicts of
            ``signal``. hosts: the hosts the evidence names (host-critical only; else empty).
        advise: ``--advise``.
    """

    job: str
    now: float
    settings: WatchSettings
    memory: WatchMemory
    incident: OpenIncident
    seen: SignalClass
    signal: SignalClass
    lower: bool
    playbook: str
    evidence: tuple[Verdict, ...]
    hosts: tuple[str, ...] = ()
    advise: bool = False


@dataclass(frozen=True)
class Outcome:
    """One rule's verdict on a :class:`Situation`: the action, its reason and what the decision carries
    besides (the memory after it, the rail, the playbook's parameters, the notifier)."""

    action: Action
    reason: str
    memory: WatchMemory
    rail: Rail | None = None
    params: tuple[tuple[str, str], ...] = ()
    notify: tuple[str, ...] = ()


def _skip(s: Situation, rail: Rail, reason: str) -> Outcome:
    return Outcome(Action.SKIP, reason, s.memory, rail)


def _what(s: Situation) -> str:
    """How a rail's reason names the signal: a lower-priority one is said against the open incident's."""
    if s.lower:
        return f"lower-priority {s.seen.value} while {s.incident.signal.value} is open"
    return f"saw {s.seen.value}"


def rail_paused(s: Situation) -> Outcome | None:
    """Rule 6, ``paused``: after the hourly limit stopped the watcher, nothing runs until a person resumes.

    Args:
        s: the situation.

    Returns:
        A ``skip`` while paused, else None.
    """
    p = s.memory.paused
    if p is None:
        return None
    return _skip(
        s,
        Rail.PAUSED,
        f"saw {s.seen.value}, did nothing: paused since {_at(p.since_s)} ({p.reason}); "
        "a person clears it with resume",
    )


def rail_running(s: Situation) -> Outcome | None:
    """Rule 6, ``running`` (``lower-priority`` for a lower signal): never two playbooks at once for a job.

    Args:
        s: the situation.

    Returns:
        A ``skip`` while a run is in progress, else None.
    """
    run = s.memory.running
    if run is None:
        return None
    ident = "" if run.run_id is None else f" (run {run.run_id})"
    return _skip(
        s,
        Rail.LOWER_PRIORITY if s.lower else Rail.RUNNING,
        f"{_what(s)}, did nothing: playbook {run.playbook}{ident} is already running for this job "
        f"(incident {run.incident}, since {_at(run.started_s)}); never two at once",
    )


def rail_same_incident(s: Situation) -> Outcome | None:
    """Rule 6, ``same-incident`` (``lower-priority`` for a lower signal): never a second recovery for
    one incident, until the job makes a new step after the first.

    Args:
        s: the situation.

    Returns:
        A ``skip`` when the open incident was handled, else None.
    """
    inc = s.incident
    if not inc.handled:
        return None
    ended_s = inc.recovery_ended_s
    when = "" if ended_s is None else f" ended at {_at(ended_s)}"
    return _skip(
        s,
        Rail.LOWER_PRIORITY if s.lower else Rail.SAME_INCIDENT,
        f"{_what(s)}, did nothing: incident {inc.incident_id} was already handled by {inc.playbook}"
        f"{when} and the job has made no step since; never a second recovery for one incident",
    )


def rail_cooldown(s: Situation) -> Outcome | None:
    """Rule 6, ``cooldown``: no recovery starts before the cool-down's end (the end itself is outside it).

    Args:
        s: the situation.

    Returns:
        A ``skip`` within the cool-down, else None.
    """
    until = s.memory.cooldown_until_s
    if until is None or s.now >= until:
        return None
    return _skip(
        s,
        Rail.COOLDOWN,
        f"saw {s.seen.value}, did nothing: cool-down until {_at(until)} "
        f"({_fmt_t(s.settings.cooldown_s)} after the last recovery ended)",
    )


def rail_no_hosts(s: Situation) -> Outcome | None:
    """Rule 6, ``no-hosts``: a host-critical signal must name hosts that fit one playbook parameter
    (:data:`MAX_HOSTS_PARAM_CHARS`).

    Args:
        s: the situation.

    Returns:
        A ``skip`` for a host-critical signal without hosts or with too many, else None.
    """
    if s.signal is not SignalClass.HOST_CRITICAL:
        return None
    if s.hosts and len(",".join(s.hosts)) <= MAX_HOSTS_PARAM_CHARS:
        return None
    why = (
        "the verdicts name no host"
        if not s.hosts
        else f"{len(s.hosts)} hosts do not fit one parameter ({MAX_HOSTS_PARAM_CHARS} characters)"
    )
    return _skip(
        s, Rail.NO_HOSTS, f"saw {s.seen.value}, did nothing: {why}, and {s.playbook} evicts named hosts"
    )


def rail_hourly_limit(s: Situation) -> Outcome | None:
    """Rule 6, ``hourly-limit``: with ``max_recoveries_per_hour`` recoveries in the last
    :data:`RECOVERY_WINDOW_S`, ``stop`` once and pause (``advise``: say it would).

    Args:
        s: the situation.

    Returns:
        A ``stop`` (or ``advise``) at the limit, else None.
    """
    limit = s.settings.max_recoveries_per_hour
    done = len(s.memory.recoveries_s)
    if done < limit:
        return None
    reason = (
        f"saw {s.seen.value} ({s.incident.incident_id}), stopped acting: {done} recoveries "
        f"in the last {_fmt_t(RECOVERY_WINDOW_S)} reach max_recoveries_per_hour {limit}; "
        f"{s.playbook} not run; paused until a person resumes"
    )
    if s.advise:
        return Outcome(Action.ADVISE, "would stop: " + reason, s.memory, Rail.HOURLY_LIMIT)
    mem = replace(s.memory, paused=Pause(_cut(reason, MAX_REASON_CHARS // 2), s.now))
    return Outcome(Action.STOP, reason, mem, Rail.HOURLY_LIMIT, notify=tuple(s.settings.notify or ()))


def act(s: Situation) -> Outcome:
    """Rule 7: run the class's playbook with ``job`` (and ``hosts`` for host-critical); with ``advise``,
    say what would run and start nothing.

    Args:
        s: the situation (every rail let it through).

    Returns:
        A ``run`` (the memory records the run in progress, the recovery and the incident as handled)
        or an ``advise``.
    """
    params: list[tuple[str, str]] = [("job", s.job)]
    if s.signal is SignalClass.HOST_CRITICAL:
        params.append(("hosts", ",".join(s.hosts)))
    args = " ".join(f"{k}={v}" for k, v in params)
    inc = s.incident
    if s.advise:
        return Outcome(
            Action.ADVISE,
            f"would run {s.playbook} ({args}) for {s.seen.value} ({inc.incident_id}); --advise acts on nothing",
            s.memory,
            params=tuple(params),
        )
    inc = replace(inc, playbook=s.playbook, recovery_started_s=s.now, recovery_ended_s=None)
    mem = replace(
        s.memory,
        incident=inc,
        running=RunInProgress(s.playbook, inc.incident_id, s.now),
        recoveries_s=(*s.memory.recoveries_s, s.now),
    )
    return Outcome(
        Action.RUN,
        f"run {s.playbook} ({args}) for {s.signal.value} ({inc.incident_id})",
        mem,
        params=tuple(params),
    )


RAILS: tuple[Callable[[Situation], Outcome | None], ...] = (
    rail_paused,
    rail_running,
    rail_same_incident,
    rail_cooldown,
    rail_no_hosts,
    rail_hourly_limit,
)
"""The rails of rule 6, in the order they are applied: the first that returns an outcome decides;
when none does, :func:`act` does (module docstring, rules 6 and 7)."""


def judge(s: Situation) -> Outcome:
    """Rules 6 and 7: the first of :data:`RAILS` that holds decides, else :func:`act`.

    Args:
        s: the situation.

    Returns:
        The outcome.
    """
    for rail in RAILS:
        out = rail(s)
        if out is not None:
            return out
    return act(s)


def _check_inputs(
    job: str, now: float, run_ended_s: float | None, newest_step_s: float | None, verdicts: Sequence[Verdict]
) -> None:
    """Raise ValueError on an empty job, a non-finite time or something other than a verdict."""
    if not isinstance(job, str) or not job:
        raise ValueError(f"job must be a non-empty name, not {job!r}")
    _check_time("now", now, optional=False)
    _check_time("run_ended_s", run_ended_s, optional=True)
    _check_time("newest_step_s", newest_step_s, optional=True)
    for v in verdicts:
        if not isinstance(v, Verdict):
            raise ValueError(f"a verdict must be a Verdict, not {type(v).__name__}")


def advance_clock(memory: WatchMemory, now: float) -> tuple[WatchMemory, float]:
    """Rule 1: a clock stepped back is taken as the last evaluation's time; recoveries older than
    :data:`RECOVERY_WINDOW_S` are forgotten.

    Args:
        memory: the memory before the evaluation.
        now: UNIX s of the evaluation.

    Returns:
        ``(memory, now)`` after the rule.
    """
    if memory.last_evaluated_s is not None:
        now = max(float(now), memory.last_evaluated_s)
    now = float(now)
    mem = replace(
        memory,
        last_evaluated_s=now,
        recoveries_s=tuple(t for t in memory.recoveries_s if now - t < RECOVERY_WINDOW_S),
    )
    return mem, now


def apply_resume(mem: WatchMemory) -> tuple[WatchMemory, str]:
    """Rule 2: a person's resume clears a pause and the recoveries counted in the hour.

    Args:
        mem: the memory.

    Returns:
        ``(memory, note)`` after the rule.
    """
    if mem.paused is None:
        return mem, "resume asked while not paused: nothing to clear"
    return replace(
        mem, paused=None, recoveries_s=()
    ), f"resumed by a person (paused since {_at(mem.paused.since_s)})"


def end_run(mem: WatchMemory, run_ended_s: float, now: float, cooldown_s: float) -> tuple[WatchMemory, str]:
    """Rule 3: the run in progress ended: nothing runs, the cool-down runs until its end + ``cooldown_s``
    and its incident records the end (and waits for a new step).

    Args:
        mem: the memory (a run in progress).
        run_ended_s: the journal's finish time.
        now: UNIX s of the evaluation.
        cooldown_s: the inventory's ``watch.cooldown_s``.

    Returns:
        ``(memory, note)`` after the rule.
    """
    run = mem.running
    assert run is not None
    ended = min(max(float(run_ended_s), run.started_s), now)
    until = ended + cooldown_s
    if mem.cooldown_until_s is not None:
        until = max(until, mem.cooldown_until_s)
    incident = mem.incident
    if incident is not None and incident.incident_id == run.incident:
        incident = replace(incident, recovery_ended_s=ended)
    mem = replace(mem, running=None, cooldown_until_s=until, incident=incident)
    return mem, f"playbook {run.playbook} for {run.incident} ended at {_at(ended)}"


def close_recovered(mem: WatchMemory, newest_step_s: float | None) -> tuple[WatchMemory, str | None]:
    """Rule 4a: a handled incident closes once the job made a step after its recovery ended.

    Args:
        mem: the memory.
        newest_step_s: UNIX s of the job's newest step (None: unknown).

    Returns:
        ``(memory, note or None when nothing closed)``.
    """
    inc = mem.incident
    if (
        inc is None
        or mem.running is not None
        or inc.recovery_ended_s is None
        or newest_step_s is None
        or newest_step_s <= inc.recovery_ended_s
    ):
        return mem, None
    return replace(mem, incident=None), f"incident {inc.incident_id} closed: a new step after its recovery"


def open_or_reclassify(
    mem: WatchMemory, job: str, seen: SignalClass, signal: SignalClass, now: float
) -> tuple[WatchMemory, OpenIncident, str | None]:
    """Rules 4 and 5: open an incident of ``signal`` when none is open; raise an unhandled one's class to
    ``seen`` when ``seen`` outranks it.

    Args:
        mem: the memory.
        job: the job.
        seen: the highest-priority class seen.
        signal: the class decided on.
        now: UNIX s of the evaluation.

    Returns:
        ``(memory, the open incident, note or None when nothing changed)``.
    """
    inc = mem.incident
    if inc is None:
        n = mem.incidents_opened + 1
        inc = OpenIncident(f"{job}-{n}", signal, now)
        return (
            replace(mem, incident=inc, incidents_opened=n),
            inc,
            f"incident {inc.incident_id} opened ({signal.value})",
        )
    if not inc.handled and priority_of(seen) < priority_of(inc.signal):
        note = f"incident {inc.incident_id} reclassified {inc.signal.value} -> {seen.value}"
        inc = replace(inc, signal=seen)
        return replace(mem, incident=inc), inc, note
    return mem, inc, None


def _quiet(mem: WatchMemory, ordered: Sequence[Verdict]) -> tuple[WatchMemory, str | None, Outcome]:
    """No actionable verdict: an unhandled incident closes when nothing at all was seen; ``skip``
    (unknown only) or ``none``. The memory, a note, and the outcome (its memory the same)."""
    note = None
    inc = mem.incident
    if inc is not None and not inc.handled and not ordered:
        note = f"incident {inc.incident_id} ({inc.signal.value}) closed: its signal is gone"
        mem = replace(mem, incident=None)
    if ordered:
        reason = (
            f"{len(ordered)} source(s) could not tell (unknown): an unknown verdict never "
            "triggers an action, and not checked is not healthy"
        )
        return mem, note, Outcome(Action.SKIP, reason, mem, Rail.UNKNOWN_ONLY)
    return mem, note, Outcome(Action.NONE, "healthy: no rule fired", mem)


def _decision(
    job: str,
    now: float,
    ordered: Sequence[Verdict],
    notes: Sequence[str],
    out: Outcome,
    evidence: tuple[Verdict, ...],
    **kw: Any,
) -> Decision:
    """The decision of ``out``: the evidence and the other verdicts bounded by
    :data:`MAX_EVIDENCE_VERDICTS`, the notes after the reason, the reason bounded."""
    ev = evidence[:MAX_EVIDENCE_VERDICTS]
    ids = {id(v) for v in evidence}
    rest = [v for v in ordered if id(v) not in ids]
    also = tuple(rest[:MAX_EVIDENCE_VERDICTS])
    left = len(evidence) - len(ev) + len(rest) - len(also)
    text = "; ".join([out.reason, *notes]) if notes else out.reason
    return Decision(
        job=job,
        at_s=now,
        action=out.action,
        reason=_cut(text, MAX_REASON_CHARS),
        memory=out.memory,
        rail=out.rail,
        evidence=ev,
        also_seen=also,
        left_out=left,
        **kw,
    )


def decide(
    job: str,
    now: float,
    verdicts: Sequence[Verdict],
    memory: WatchMemory,
    settings: WatchSettings,
    *,
    run_ended_s: float | None = None,
    newest_step_s: float | None = None,
    advise: bool = False,
    resume: bool = False,
) -> Decision:
    """Decide one evaluation for ``job`` (module docstring: the rules, rails and their sources).

    Rules 1 to 4 update the memory (:func:`advance_clock`, :func:`apply_resume`, :func:`end_run`,
    :func:`close_recovered`); without an actionable verdict the decision is ``none`` or an
    unknown-only ``skip``; else the incident is opened or reclassified (:func:`open_or_reclassify`) and
    the first of :data:`RAILS` that holds decides, else :func:`act`.

    Args:
        job: the job's name (the playbooks' ``job`` parameter).
        now: UNIX s of this evaluation (the reading's time).
        verdicts: every verdict of this reading (rules and log scan), any order; ``unknown`` included.
        memory: the memory the previous decision returned (``WatchMemory()`` for a new job).
        settings: the inventory's ``watch:`` section.
        run_ended_s: UNIX s the playbook run in progress ended (the journal's finish time, whatever its
            status), None while it runs (ignored when no run is in progress).
        newest_step_s: UNIX s of the job's newest step on the control clock, None when unknown (closes
            a handled incident once later than its run's end).
        advise: ``--advise`` (module docstring, "Advise").
        resume: a person cleared a pause (rule 2).

    Returns:
        The :class:`Decision`, with the new memory.

    Raises:
        ValueError: a non-finite time, an empty job name, or a verdict that is not a :class:`Verdict`.
    """
    _check_inputs(job, now, run_ended_s, newest_step_s, verdicts)
    mem, now = advance_clock(memory, now)
    notes: list[str] = []
    if resume:
        mem, note = apply_resume(mem)
        notes.append(note)
    if mem.running is not None and run_ended_s is not None:
        mem, note = end_run(mem, run_ended_s, now, settings.cooldown_s)
        notes.append(note)
    mem, closed = close_recovered(mem, newest_step_s)
    notes.extend([closed] if closed is not None else [])
    ordered = sorted(verdicts, key=lambda v: priority_of(v.signal))
    actionable = [v for v in ordered if v.signal in PRIORITY]
    if not actionable:
        mem, gone, out = _quiet(mem, ordered)
        notes.extend([gone] if gone is not None else [])
        evidence = tuple(ordered) if out.action is Action.SKIP else ()
        incident = None if mem.incident is None else mem.incident.incident_id
        return _decision(job, now, ordered, notes, out, evidence, incident=incident)
    seen = actionable[0].signal
    lower = mem.incident is not None and priority_of(seen) > priority_of(mem.incident.signal)
    # the class decided on: the open incident's unless the new signal outranks it
    signal = mem.incident.signal if mem.incident is not None and lower else seen
    evidence = tuple(v for v in actionable if v.signal is signal) or tuple(
        v for v in actionable if v.signal is seen
    )
    mem, inc, changed = open_or_reclassify(mem, job, seen, signal, now)
    notes[:0] = [changed] if changed is not None else []
    hosts = tuple(_hosts_of(evidence)) if signal is SignalClass.HOST_CRITICAL else ()
    playbook = settings.playbook_for(signal.value)
    s = Situation(job, now, settings, mem, inc, seen, signal, lower, playbook, evidence, hosts, advise)
    out = judge(s)
    return _decision(
        job, now, ordered, notes, out, evidence,
        signal=signal, incident=inc.incident_id, playbook=playbook, params=out.params, notify=out.notify,
    )  # fmt: skip


def _m_bad(field: str, value: object) -> ConfigError:
    """The error of a stored watch memory whose ``field`` holds ``value``."""
    return ConfigError(f"watch memory: {field}: {value!r:.80} is not valid")


def _m_obj(field: str, value: object) -> dict[str, Any]:
    """``value`` when it is a JSON object, else :func:`_m_bad`."""
    if not isinstance(value, dict):
        raise _m_bad(field, value)
    return value


def _m_time_of(field: str, value: object, optional: bool = False) -> float | None:
    """``value`` as a finite time (None when ``optional`` and missing), else :func:`_m_bad`."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _m_bad(field, value)
    return float(value)


def _m_text(field: str, value: object, limit: int = MAX_MEMORY_ID_CHARS) -> str:
    """``value`` as non-empty text of at most ``limit`` characters, else :func:`_m_bad`."""
    if not isinstance(value, str) or not value or len(value) > limit:
        raise _m_bad(field, value)
    return value


def _m_count(field: str, value: object, optional: bool = False) -> int | None:
    """``value`` as a non-negative 64-bit count (None when ``optional`` and missing), else :func:`_m_bad`."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise _m_bad(field, value)
    return value
