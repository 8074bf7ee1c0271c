"""Property-based tests of the fleet sweep's pure pieces (robustctl/sweep/run.py): the level split, the
merged report and the exit-code ladder, over any hosts, busy sets, levels and statuses. Contract: every
swept host gets exactly one level run, a busy host never gets GPU load unless asked, the merged report
keeps the asked order and judges exactly its hosts. Seeded and bounded by the ``ci`` profile."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.config import PythonSettings, SshSettings
from robustctl.exit_codes import ExitCode
from robustctl.inventory import Host
from robustctl.models import HostReport, Outcome, RunReport, Status
from robustctl.sweep.policy import sweep_exit_code
from robustctl.sweep.run import merge_reports, split_levels

pytestmark = pytest.mark.fuzz

NAMES = st.lists(st.sampled_from([f"n{i}" for i in range(8)]), unique=True, max_size=8)
STATUSES = st.sampled_from(list(Status))


@given(names=NAMES, busy=st.frozensets(st.sampled_from([f"n{i}" for i in range(10)])), level=st.integers(0, 3),
       include_busy=st.booleans())  # fmt: skip
def test_every_host_gets_one_level_and_a_busy_host_no_load_unless_asked(
    names: list[str], busy: frozenset[str], level: int, include_busy: bool
) -> None:
    hosts = [Host(n, "127.0.0.2", "ssh", SshSettings(), PythonSettings()) for n in names]
    quick, deep = split_levels(hosts, busy, level, include_busy)
    assert sorted(quick + deep, key=hosts.index) == hosts and not set(map(id, quick)) & set(map(id, deep))
    assert quick == [h for h in hosts if h in quick] and deep == [h for h in hosts if h in deep]
    if level == 0:
        assert deep == []
    elif not include_busy:
        assert all(h.name not in busy for h in deep) and all(h.name in busy for h in quick)
    else:
        assert quick == []


@given(groups=st.lists(st.lists(st.tuples(st.sampled_from([f"n{i}" for i in range(8)]), STATUSES), max_size=4),
                       min_size=1, max_size=3),
       order=NAMES, times=st.lists(st.floats(0, 1e9), min_size=6, max_size=6))  # fmt: skip
def test_the_merged_report_is_the_asked_hosts_in_order_judged_together(
    groups: list[list[tuple[str, Status]]], order: list[str], times: list[float]
) -> None:
    seen: set[str] = set()
    reports = []
    for i, group in enumerate(groups):
        hosts = []
        for name, status in group:
            if name not in seen:  # the groups of a sweep are disjoint
                seen.add(name)
                hosts.append(HostReport(name, "127.0.0.2", status, Outcome.OK))
        start, end = sorted(times[2 * i : 2 * i + 2])
        reports.append(RunReport(Status.worst(h.status for h in hosts), tuple(hosts), (), (), (), start, end))
    merged = merge_reports(reports, order)
    assert [h.host for h in merged.hosts] == [n for n in order if n in seen]
    assert merged.status is Status.worst(h.status for h in merged.hosts)
    assert merged.suspects == tuple(h.host for h in merged.hosts if h.status is Status.CRITICAL)
    assert merged.unknown == tuple(h.host for h in merged.hosts if h.status is Status.UNKNOWN)
    assert merged.started_at == min(r.started_at for r in reports)
    assert merged.finished_at == max(r.finished_at for r in reports)


@given(named=st.booleans(), unchecked=st.booleans(), pending=st.booleans())
def test_the_exit_code_is_the_worst_thing_found(named: bool, unchecked: bool, pending: bool) -> None:
    code = sweep_exit_code(named=named, unchecked=unchecked, pending=pending)
    rank = {ExitCode.OK: 0, ExitCode.WARNING: 1, ExitCode.UNKNOWN: 2, ExitCode.CRITICAL: 3}
    assert rank[code] == max(3 * named, 2 * unchecked, 1 * pending)
