"""Property-based tests of the store's API: any text a module writes through a transaction reads back
as :func:`~robustctl.store.clean_text` makes it (lone surrogates as their escape, nothing else changed),
and the raw text finds the row again; the sweep history keeps any host and detail text this way.

Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.models import Status
from robustctl.store import Store, clean_text
from robustctl.sweep import history
from robustctl.sweep.history import HOST_CHECK, MAX_DETAIL, Observation

pytestmark = pytest.mark.fuzz

TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=40) | st.sampled_from(
    ["\udcff", "\ud800x", "a\udc80\udc81", "[bold]x[/]", "'; DROP TABLE sweeps; --", "\x00"]
)
"""Any text, lone surrogates (undecodable bytes under ``surrogateescape``) and NUL included."""


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-store-api")


def _one_line(text: str) -> str:
    """The detail line the history keeps: whitespace runs one space, cut at MAX_DETAIL characters."""
    line = " ".join(text.split())
    return line if len(line) <= MAX_DETAIL else line[: MAX_DETAIL - 1] + "…"


@given(TEXT, st.lists(TEXT, max_size=4))
def test_text_through_a_transaction_reads_back_cleaned(store_dir: Path, job: str, hosts: list[str]) -> None:
    with Store.open(store_dir / "tx.db") as s:
        s.set_job_hosts(job, hosts)
        assert s.job_hosts(job) == ([clean_text(h) for h in hosts] or None)
        with s.transaction() as c:
            c.execute("DELETE FROM job_hosts WHERE job=?", (job,))
        assert s.job_hosts(job) is None


@given(TEXT, TEXT, st.sampled_from([Status.OK, Status.CRITICAL, Status.UNKNOWN]))
def test_any_host_and_detail_text_reaches_the_history(
    store_dir: Path, host: str, detail: str, status: Status
) -> None:
    path = store_dir / f"h-{os.urandom(4).hex()}.db"
    with Store.open(path) as s:
        rec = history.record(s, [Observation(host, HOST_CHECK, status, detail)], source="sweep")
        assert [(c.host, c.detail) for c in rec.changes] == [(host, _one_line(detail))]
        state = history.check_states(s, [host])[(clean_text(host), HOST_CHECK)]
        assert (state.status, state.detail) == (status.value, clean_text(_one_line(detail)))
        assert history.counters(s)[clean_text(host)].seen == 1
    for p in store_dir.glob(path.name + "*"):
        p.unlink()
