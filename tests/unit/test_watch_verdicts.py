"""The reading's verdicts (robustctl.watch.verdicts): the fail-slow parameters built in one place from
the watch settings, and the state a reading is judged from after a recovery.

The readings here are small stand-ins with only the fields these functions read (``progress.samples``
with ``step``/``step_time_s``, ``progress.step``); the full readings are exercised through
``tests/unit/test_watch_command.py``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from robustctl.commands import watch as watch_cmd
from robustctl.config import WatchSettings
from robustctl.watch import verdicts
from robustctl.watch.decide import OpenIncident, WatchMemory
from robustctl.watch.rules import FailSlowParams, FailSlowState, SignalClass, observe_step_time

T0 = 1_700_000_000.0


def reading(steps: list[tuple[int, float | None]], step: int | None = None) -> Any:
    """A stand-in reading whose progress shows ``steps`` as ``(step, step time)`` samples."""
    samples = tuple(SimpleNamespace(step=s, step_time_s=t) for s, t in steps)
    return SimpleNamespace(progress=SimpleNamespace(samples=samples, step=step))


def test_fail_slow_params_come_from_the_watch_settings_and_are_the_commands_too() -> None:
    settings = WatchSettings(slow_factor=2.5, persist_steps=7)
    params = verdicts.fail_slow_params(settings)
    assert params == FailSlowParams(slow_factor=2.5, persist_steps=7)
    assert watch_cmd.fail_slow_params is verdicts.fail_slow_params  # re-exported where it was asked for


def test_both_fail_slow_judgements_build_their_parameters_with_fail_slow_params(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[WatchSettings] = []
    real = verdicts.fail_slow_params

    def spy(settings: WatchSettings) -> FailSlowParams:
        calls.append(settings)
        return real(settings)

    monkeypatch.setattr(verdicts, "fail_slow_params", spy)
    settings = WatchSettings(slow_factor=3.0, persist_steps=4)
    handled = OpenIncident("j-1", SignalClass.FAIL_SLOW, T0, "p", T0 + 1, T0 + 2)
    verdicts.judged_from(
        reading([(5, 1.0)]), WatchMemory(incident=handled), FailSlowState(), 4, T0 + 2, settings
    )
    stub = SimpleNamespace(
        newest_step_time=None,
        read_at=T0,
        ranks_alive=None,
        step_times=(),
        progress=SimpleNamespace(samples=(), step=None),
        losses_after=lambda last: ((), 0),
        log_verdicts=(),
        liveness=SimpleNamespace(state=None),
        findings=SimpleNamespace(critical=()),
        unknown=(),
    )
    verdicts.reading_verdicts(stub, FailSlowState(), None, settings)
    assert calls == [settings, settings]


def test_a_reading_is_judged_from_the_stored_state_unless_a_handled_recovery_ended() -> None:
    settings = WatchSettings()
    fs = FailSlowState()
    r = reading([(10, 1.0), (11, 1.0)], step=12)
    unhandled = WatchMemory(incident=OpenIncident("j-1", SignalClass.HANG, T0))
    assert verdicts.judged_from(r, WatchMemory(), fs, 9, T0, settings) == (fs, 9)
    assert verdicts.judged_from(r, unhandled, fs, 9, T0, settings) == (fs, 9)
    handled = WatchMemory(incident=OpenIncident("j-1", SignalClass.HANG, T0, "p", T0 + 1, None))
    assert verdicts.judged_from(r, handled, fs, 9, None, settings) == (fs, 9)  # the run still runs


def test_after_a_recovery_every_step_the_reading_shows_is_skipped_and_the_slow_window_dropped() -> None:
    settings = WatchSettings(slow_factor=1.5, persist_steps=3)
    params = verdicts.fail_slow_params(settings)
    fs = FailSlowState()
    for t in [1.0] * 30 + [4.0] * 10:  # a healthy pace, then a slowdown
        fs, _ = observe_step_time(fs, t, params)
    handled = WatchMemory(incident=OpenIncident("j-1", SignalClass.FAIL_SLOW, T0, "p", T0 + 1, T0 + 2))
    state, last = verdicts.judged_from(
        reading([(50, 4.0), (51, 9.0)], step=52), handled, fs, 40, T0 + 2, settings
    )
    assert last == 52  # the old processes' last steps and the restart's warm-up are not judged
    assert state != fs
    assert verdicts.judged_from(reading([]), handled, fs, None, T0 + 2, settings)[1] is None
