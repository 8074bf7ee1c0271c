"""Property-based tests of the sweep's inputs: the ``sweep:`` inventory section, the history's inputs
(any detail text, status sequence and clock, backwards included) and the ``--since`` of history and
lemons. Contract: no traceback, an exit code from the table, nothing written outside the store's
directory, history rows in order and bounded. Seeded and bounded by the ``ci`` profile."""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from robustctl.cli.main import main
from robustctl.errors import ConfigError
from robustctl.inventory import load_inventory
from robustctl.models import Status
from robustctl.store import Store
from robustctl.sweep import history
from robustctl.sweep.history import HOST_CHECK, MAX_DETAIL, Observation
from robustctl.sweep.policy import decide

pytestmark = pytest.mark.fuzz

VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**20), 10**20), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20), st.lists(st.integers(), max_size=3), st.sampled_from(["suspect", "drain", "evict"]),
)  # fmt: skip
KEYS = st.sampled_from([
    "retention_days", "flap_count", "flap_window_s", "sustained_s", "act", "lemon_failures",
    "lemon_returns", "lemon_days", "lemon_no_standby", "unknown_key",
])  # fmt: skip


@given(section=st.one_of(st.dictionaries(KEYS, VALUES, max_size=4), VALUES))
def test_sweep_section_loads_or_names_file_and_line(section: Any) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "inv.yaml"
        path.write_text(yaml.safe_dump({"hosts": [{"name": "n1", "address": "127.0.0.2"}], "sweep": section}))
        try:
            inv = load_inventory(path, environ={})
        except ConfigError as exc:
            assert str(exc).startswith(f"{path}:"), exc
            return
        s = inv.sweep
        assert 1 <= s.flap_count <= 16 and 0 < s.retention_days <= 3650 and s.act in ("suspect", "drain")


STATUSES = st.sampled_from(
    [Status.OK, Status.WARNING, Status.CRITICAL, Status.UNKNOWN, Status.NOT_APPLICABLE]
)
STEPS = st.lists(
    st.tuples(st.floats(-1e6, 1e6), STATUSES, st.text(max_size=400), st.sampled_from(["host.nic", "host.xid", "nvml.temperature"])),
    min_size=1, max_size=12,
)  # fmt: skip


@given(steps=STEPS)
def test_history_accepts_any_sequence_and_stays_ordered(steps: list[tuple[float, Status, str, str]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        now = [1_800_000_000.0]
        with Store.open(Path(d) / "s.db", clock=lambda: now[0]) as store:
            for dt, status, detail, check in steps:
                now[0] += dt
                rec = history.record(store, [Observation("n1", HOST_CHECK, status, detail),
                                             Observation("n1", check, status, detail)], source="sweep")  # fmt: skip
                assert rec.clock_skew_s >= 0
                decide(history.check_states(store), ["n1"], rec.at, load_default_settings())
            ch = history.changes(store)
            assert [c.at for c in ch] == sorted(c.at for c in ch)
            assert all(len(c.detail) <= MAX_DETAIL for c in ch)
            assert all(len(s.recent_bad) <= history.RECENT_BAD for s in history.check_states(store).values())
        assert {p.name for p in Path(d).iterdir()} <= {"s.db", "s.db-wal", "s.db-shm"}


def load_default_settings() -> Any:
    from robustctl.config import SweepSettings

    return SweepSettings()


@given(since=st.text(max_size=12), cmd=st.sampled_from(["history", "lemons"]))
def test_since_never_reaches_the_catch_all(since: str, cmd: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        argv = [
            cmd,
            *(["n1"] if cmd == "history" else []),
            "--since",
            since,
            "--state",
            str(Path(d) / "s.db"),
        ]
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(argv)
        assert code in (0, 64), err.getvalue()
        assert "internal error" not in err.getvalue()
        assert list(Path(d).iterdir()) == []  # reading never creates the store
