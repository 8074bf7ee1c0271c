"""robustctl sweep, history, lemons: the history in the store, the debounce policy, --act, the outputs."""

from __future__ import annotations

import json
import math
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from robustctl.cli.main import main
from robustctl.commands.ettr import MAX_TIMELINE_INTERVALS, EttrResult, JobEttr, bounded_timeline
from robustctl.commands.history import HistoryRequest, LemonsRequest, run_history, run_lemons
from robustctl.commands.sweep import SweepHost, SweepResult, run_sweep, sweep_request
from robustctl.config import SweepSettings
from robustctl.errors import ConfigError
from robustctl.exit_codes import ExitCode
from robustctl.models import Status, strict_jsonable
from robustctl.report.atomic import write_atomic
from robustctl.report.sweep import write_sweep_files
from robustctl.store import MachineState, Store
from robustctl.sweep import history
from robustctl.sweep.history import HOST_CHECK, Observation
from robustctl.sweep.lemons import find_lemons
from robustctl.sweep.lock import SweepBusy, sweep_lock
from robustctl.sweep.policy import CheckClass, check_class, decide, record_sweep
from robustctl.testing.fake_transport import FakeTransport
from robustctl.transport.pool import TransportPool
from robustctl.watch.ledger import Cause, Incident, LedgerInterval, ProgressSample, Timeline, build_ledger
from tests.unit.test_store import set_field

REPO = Path(__file__).resolve().parents[2]
NO_GPU = {
    "available": False,
    "reason": "nvmlInit: NVML Shared Library Not Found",
    "reason_code": "library_not_found",
}
XID79 = (
    "[  170.05] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
)


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def answer(data: dict[str, Any], xid: bool = False) -> Any:
    def run(argv: Any) -> dict[str, Any]:
        import time

        d = json.loads(json.dumps(data))
        d["clock"]["time"] = time.time()
        if xid:
            d["xid"]["lines"] = [XID79]
            d["xid"]["matches"] = 1
        return d

    return run


def inventory(tmp: Path, sweep: dict[str, Any] | None = None, jobs: bool = False) -> Path:
    data: dict[str, Any] = {
        "hosts": [
            {"name": "node[1-3]", "address": "127.0.0.[2-4]"},
            {"name": "spare1", "address": "127.0.0.5", "state": "standby"},
            {"name": "gone1", "address": "127.0.0.6", "state": "evicted"},
        ],
        "policy": {"max_cluster_fraction": 1.0, "max_job_fraction": 1.0, "circuit_breaker_fraction": 1.0},
    }
    if sweep:
        data["sweep"] = sweep
    if jobs:
        data["jobs"] = {"j": {"hosts": "node[1-2]", "layout": {"dp": 2}}}
    path = tmp / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def fake(healthy: dict[str, Any], bad: str | None = "node2") -> FakeTransport:
    names = ["node1", "node2", "node3", "spare1", "gone1"]
    return FakeTransport({n: {"host": answer(healthy, xid=n == bad), "nvml": NO_GPU} for n in names})


# --- history ---------------------------------------------------------------------------------------


def obs(host: str, status: Status, check: str = "host.nic", detail: str = "eth0 down") -> list[Observation]:
    return [Observation(host, HOST_CHECK, status, detail), Observation(host, check, status, detail)]


def test_history_keeps_changes_only_and_counters(tmp_path: Path) -> None:
    clock = Clock()
    with Store.open(tmp_path / "s.db", clock=clock) as store:
        for i in range(10):
            clock.t += 300
            history.record(store, obs("n1", Status.OK), source="sweep")
        clock.t += 300
        history.record(store, obs("n1", Status.CRITICAL), source="sweep")
        clock.t += 300
        history.record(store, obs("n1", Status.OK), source="diagnose", sweep=False)
        ch = history.changes(store, host="n1")
        assert [(c.check, c.from_status, c.to_status) for c in ch] == [
            (HOST_CHECK, None, "ok"), ("host.nic", None, "ok"),
            (HOST_CHECK, "ok", "critical"), ("host.nic", "ok", "critical"),
            (HOST_CHECK, "critical", "ok"), ("host.nic", "critical", "ok"),
        ]  # fmt: skip
        assert ch[-1].source == "diagnose"
        c = history.counters(store)["n1"]
        assert (c.seen, c.failures, c.unknowns, c.last_status) == (12, 1, 0, "ok")
        assert len(history.last_sweeps(store, 100)) == 11  # the diagnose run is not a sweep
        st = history.check_states(store)[("n1", "host.nic")]
        assert st.streak == 1 and st.since == clock.t


def test_detail_is_capped_and_kept_as_data(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db", clock=Clock()) as store:
        history.record(store, obs("n1", Status.CRITICAL, detail="[red]x[/]\x1b" + "y" * 5000), source="sweep")
        (c, *_) = history.changes(store, host="n1")
        assert len(c.detail) == history.MAX_DETAIL and c.detail.startswith("[red]x[/]\x1b")


def test_clock_going_backwards_keeps_history_in_order(tmp_path: Path) -> None:
    clock = Clock()
    with Store.open(tmp_path / "s.db", clock=clock) as store:
        history.record(store, obs("n1", Status.OK), source="sweep")
        clock.t -= 3600
        rec = history.record(store, obs("n1", Status.CRITICAL), source="sweep")
        assert rec.clock_skew_s == 3600 and rec.at == clock.t + 3600
        ats = [c.at for c in history.changes(store)]
        assert ats == sorted(ats)
        assert history.last_sweeps(store)[0].clock_skew_s == 3600


def test_clock_behind_a_diagnose_run_and_several_sweeps(tmp_path: Path) -> None:
    clock = Clock()
    with Store.open(tmp_path / "s.db", clock=clock) as store:
        for _ in range(3):
            clock.t += 300
            history.record(store, obs("n1", Status.OK), source="sweep")
        clock.t += 60
        history.record(store, obs("n1", Status.OK), source="diagnose", sweep=False)
        clock.t -= 7200  # behind both the newest sweep row and the diagnose run after it
        rec = history.record(store, obs("n1", Status.OK), source="sweep")
        assert rec.clock_skew_s == 7200 and rec.at == clock.t + 7200


def test_a_replay_names_the_sweeps_host_count(tmp_path: Path) -> None:
    clock = Clock()
    with Store.open(tmp_path / "s.db", clock=clock) as store:
        history.record(store, obs("n1", Status.CRITICAL), source="sweep", hosts_swept=2000)
        history.record(store, [], source="sweep", hosts_swept=2000)
        assert [(s.hosts, s.status) for s in history.last_sweeps(store, 2)] == [
            (2000, "skipped"),
            (2000, "critical"),
        ]
        assert history.counters(store)["n1"].seen == 1


def test_prune_drops_old_changes_and_keeps_the_present(tmp_path: Path) -> None:
    clock = Clock()
    with Store.open(tmp_path / "s.db", clock=clock) as store:
        history.record(store, obs("n1", Status.CRITICAL), source="sweep")
        clock.t += 86_400 * 10
        history.record(store, obs("n1", Status.OK), source="sweep")
        assert history.prune(store, clock.t - 86_400) == 3  # two changes and one sweep row
        assert [c.to_status for c in history.changes(store)] == ["ok", "ok"]
        assert history.check_states(store)[("n1", HOST_CHECK)].status == "ok"


# --- policy ----------------------------------------------------------------------------------------


def test_check_classes() -> None:
    assert check_class("host.xid") is CheckClass.HARDWARE and check_class("nvml.count") is CheckClass.HARDWARE
    assert check_class("host.nic") is CheckClass.NETWORK and check_class("host.ib") is CheckClass.NETWORK
    assert (
        check_class("nvml.temperature") is CheckClass.SUSTAINED
        and check_class("host.clock") is CheckClass.SUSTAINED
    )


def policy_after(tmp: Path, seq: list[tuple[float, Status]], check: str, s: SweepSettings) -> Any:
    clock = Clock()
    with Store.open(tmp / f"{check}.db", clock=clock) as store:
        t0 = clock.t
        for dt, status in seq:
            clock.t = t0 + dt
            rec = history.record(store, obs("n1", status, check), source="sweep")
        return decide(history.check_states(store), ["n1"], rec.at, s)


def test_hardware_is_named_at_once(tmp_path: Path) -> None:
    (d,) = policy_after(tmp_path, [(0, Status.CRITICAL)], "host.xid", SweepSettings())
    assert d.named and "host.xid" in d.reason()


def test_network_flap_named_only_when_seen_twice_within_the_window(tmp_path: Path) -> None:
    s = SweepSettings()
    (d,) = policy_after(tmp_path, [(0, Status.CRITICAL)], "host.nic", s)
    assert not d.named and d.findings[0].check_class is CheckClass.NETWORK
    (d,) = policy_after(
        tmp_path / "..", [(0, Status.CRITICAL), (60, Status.OK), (240, Status.CRITICAL)], "host.nic", s
    )
    assert d.named
    far = [(0, Status.CRITICAL), (60, Status.OK), (900, Status.CRITICAL)]
    (d,) = policy_after(tmp_path, far, "host.ib", s)
    assert not d.named  # twice, but 15 minutes apart
    (d,) = policy_after(tmp_path, far, "host.ib2", SweepSettings(flap_window_s=1000))
    assert d.named


def test_thermal_named_only_when_sustained(tmp_path: Path) -> None:
    s = SweepSettings()
    held = [(0, Status.CRITICAL), (300, Status.CRITICAL), (600, Status.CRITICAL)]
    (d,) = policy_after(tmp_path, held, "nvml.temperature", s)
    assert not d.named  # 600 s < 900 s
    (d,) = policy_after(tmp_path, [*held, (900, Status.CRITICAL)], "nvml.throttle", s)
    assert d.named
    (d,) = policy_after(tmp_path, held, "host.clock", SweepSettings(sustained_s=600))
    assert d.named


def test_no_decision_for_what_this_sweep_did_not_see(tmp_path: Path) -> None:
    clock = Clock()
    with Store.open(tmp_path / "s.db", clock=clock) as store:
        history.record(store, obs("n1", Status.CRITICAL, "host.xid"), source="sweep")
        clock.t += 300
        rec = history.record(
            store, [Observation("n1", HOST_CHECK, Status.UNKNOWN, "unreachable")], source="sweep"
        )
        assert decide(history.check_states(store), ["n1"], rec.at, SweepSettings()) == []


# --- the sweep -------------------------------------------------------------------------------------


def test_sweep_names_the_faulty_host_and_records_history(
    tmp_path: Path, healthy_host_data: dict[str, Any]
) -> None:
    state = tmp_path / "s.db"
    req = sweep_request(inventory=inventory(tmp_path), state=state, textfile=tmp_path / "r.prom",
                        html=tmp_path / "r.html", environ={})  # fmt: skip
    tr = fake(healthy_host_data)
    res = run_sweep(req, pool=TransportPool(override=tr), clock=Clock())
    write_sweep_files(req, res)
    assert [h.host for h in res.hosts] == ["node1", "node2", "node3", "spare1"]
    assert res.skipped == ("gone1",)
    assert "gone1" not in {h for h, _, _ in tr.calls}
    assert res.exit_code == 2 and [h.host for h in res.hosts if h.named] == ["node2"]
    assert res.acted is None
    with Store.open(state) as store:
        assert store.machine("node2") is None  # without --act nothing is marked
        assert history.counters(store)["node2"].failures == 1
    # the textfile parses with the official client and says what the sweep saw
    fams = {f.name: f for f in text_string_to_metric_families((tmp_path / "r.prom").read_text())}
    named = {s.labels["host"]: s.value for s in fams["robustctl_host_named"].samples}
    assert named == {"node1": 0, "node2": 1, "node3": 0, "spare1": 0}
    assert fams["robustctl_host_failures"].type == "counter"
    assert {s.name for s in fams["robustctl_host_failures"].samples} == {"robustctl_host_failures_total"}
    grid = (tmp_path / "r.html").read_text()
    assert grid.count('class="cell ') == 4 * len(res.hosts[0].checks)
    assert 'data-host="node2" data-check="host.xid"' in grid and "<script" not in grid


def test_sweep_textfile_carries_each_jobs_ettr_best_effort(
    tmp_path: Path, healthy_host_data: dict[str, Any]
) -> None:
    """A job of the inventory with ETTR ledger data gets robustctl_job_ettr and
    robustctl_job_unproductive_seconds_total{cause}; a job whose data cannot be read is a warning and
    is left out, and the sweep still writes its textfile."""
    from robustctl.watchstore import open_incident, record_progress, update_incident

    state, prom, clock = tmp_path / "s.db", tmp_path / "r.prom", Clock()
    t0 = clock.t - 1000
    with Store.open(state, clock=clock) as store:
        for at, step in ((0, 0), (400, 40), (600, 30), (1000, 70)):
            record_progress(store, "j", at=t0 + at, step=step)
        inc = open_incident(store, "j", incident_class="crash", onset_at=t0 + 400, opened_at=t0 + 450)
        update_incident(
            store, inc.id, decision_at=t0 + 500, restart_start_at=t0 + 500, first_new_step_at=t0 + 600
        )
    req = sweep_request(inventory=inventory(tmp_path, jobs=True), state=state, textfile=prom, environ={})
    res = run_sweep(req, pool=TransportPool(override=fake(healthy_host_data, bad=None)), clock=clock)
    write_sweep_files(req, res)
    assert res.exit_code == 0 and [e.job for e in res.ettr] == ["j"]
    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    assert fams["robustctl_job_ettr"].type == "gauge"
    ((labels, ettr),) = [(s.labels, s.value) for s in fams["robustctl_job_ettr"].samples]
    # productive [0,400] and [600,1000]; crash: detection 100 s, restart 100 s (checkpoint unknown)
    assert labels == {"job": "j"} and ettr == pytest.approx(0.8)
    unproductive = fams["robustctl_job_unproductive_seconds"]
    assert unproductive.type == "counter"
    by_cause = {s.labels["cause"]: s.value for s in unproductive.samples if s.name.endswith("_total")}
    assert by_cause["detection"] == pytest.approx(100) and by_cause["restart"] == pytest.approx(100)
    assert set(by_cause) == {"detection", "localization", "eviction", "restart", "recomputation", "waiting",
                             "unaccounted"}  # fmt: skip
    # a damaged row: one warning, the job left out, the sweep and its textfile as before
    with Store.open(state, clock=clock) as store, store.transaction() as c:
        c.execute("INSERT INTO watch_progress(job, at, step) VALUES ('j', 'soon', 1)")
    res = run_sweep(req, pool=TransportPool(override=fake(healthy_host_data, bad=None)), clock=clock)
    write_sweep_files(req, res)
    assert res.exit_code == 0 and res.ettr == ()
    assert any("job 'j': no ETTR" in w and "watch_progress" in w for w in res.warnings), res.warnings
    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    assert fams["robustctl_job_ettr"].samples == [] and "robustctl_host_status" in fams


def test_sweep_act_records_suspect_then_drains_through_evict(
    tmp_path: Path, healthy_host_data: dict[str, Any]
) -> None:
    state = tmp_path / "s.db"
    req = sweep_request(inventory=inventory(tmp_path), state=state, act=True, environ={})
    res = run_sweep(req, pool=TransportPool(override=fake(healthy_host_data)))
    write_sweep_files(req, res)
    assert res.acted is not None and res.acted["suspect"] == ["node2"] and res.acted["drained"] == []
    with Store.open(state) as store:
        m = store.machine("node2")
        assert m is not None and m.state is MachineState.SUSPECT and m.reason.startswith("sweep: host.xid")
    req = sweep_request(inventory=inventory(tmp_path, {"act": "drain"}), state=state, act=True, environ={})
    res = run_sweep(req, pool=TransportPool(override=fake(healthy_host_data)))
    write_sweep_files(req, res)
    assert res.acted is not None and res.acted["drained"] == ["node2"], res.acted
    with Store.open(state) as store:
        m = store.machine("node2")
        assert m is not None and m.state is MachineState.EVICTED
        assert [a.action for a in store.audit()] == ["evict"]  # through the rails and the audit log
    # an evicted host is no longer swept
    res = run_sweep(req, pool=TransportPool(override=fake(healthy_host_data)))
    write_sweep_files(req, res)
    assert "node2" in res.skipped and res.exit_code == 0


def test_deeper_levels_never_on_busy_hosts_unless_asked(
    tmp_path: Path, healthy_host_data: dict[str, Any]
) -> None:
    inv = inventory(tmp_path, jobs=True)
    for include, expect in ((False, {"node3", "spare1"}), (True, {"node1", "node2", "node3", "spare1"})):
        tr = fake(healthy_host_data, bad=None)
        req = sweep_request(
            inventory=inv, state=tmp_path / f"{include}.db", level=1, include_busy=include, environ={}
        )
        res = run_sweep(req, pool=TransportPool(override=tr))
        write_sweep_files(req, res)
        assert {h for h, p, _ in tr.calls if p == "burn"} == expect
        assert {h.host for h in res.hosts if h.busy} == {"node1", "node2"}


def test_one_sweep_at_a_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "s.db"
    with sweep_lock(state):
        with pytest.raises(SweepBusy), sweep_lock(state):
            pass
        assert main(["sweep", "--state", str(state), "-q"]) == 3
    assert "another sweep is running" in capsys.readouterr().err
    with sweep_lock(state):  # released
        pass


def test_output_errors_exit_78_and_keep_the_old_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sweep", "--textfile", str(tmp_path / "missing" / "r.prom"), "-q"]) == 78
    assert main(["sweep", "--html", str(tmp_path / "missing" / "r.html"), "-q"]) == 78
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "does not exist" in err[0]
    old = tmp_path / "r.prom"
    old.write_text("old\n")
    with pytest.raises(ConfigError):
        write_atomic(tmp_path / "gone" / "r.prom", "x", "--textfile")
    assert old.read_text() == "old\n"
    write_atomic(old, "new\n", "--textfile")
    assert old.read_text() == "new\n" and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_html_escapes_host_text(tmp_path: Path) -> None:
    from robustctl.commands.sweep import SweepHost, SweepResult
    from robustctl.models import RunReport
    from robustctl.report.html import sweep_html

    evil = '<script>alert("x")</script>'
    h = SweepHost("n1", Status.CRITICAL, False, 0, {"host.xid": "critical"}, error=evil)
    ch = history.CheckChange("n1", "host.xid", 1.0, None, "critical", evil, "sweep")
    r = SweepResult(0.0, 1.0, (h,), (), (), None, (), {"n1": (ch,)}, {}, (evil,), "s.db",
                    RunReport(Status.OK, (), (), (), (), 0, 1))  # fmt: skip
    page = sweep_html(r)
    assert "<script" not in page and "&lt;script&gt;" in page


# --- the jobs' ETTR timelines in the page (issue 22, item 4) ---------------------------------------


class _Page(HTMLParser):
    """The timeline segments and incident rows of a sweep page, by job."""

    def __init__(self) -> None:
        super().__init__()
        self.segments: dict[str, list[tuple[str, str, str]]] = {}
        self.rows: dict[str, list[list[str]]] = {}
        self._timeline: str | None = None
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "div" and a.get("class") == "timeline":
            self._timeline = a["data-job"]
            self.segments[self._timeline] = []
        elif tag == "span" and self._timeline is not None:
            self.segments[self._timeline].append((a["class"], a["style"], a["title"]))
        elif tag == "table" and a.get("class") == "incidents":
            self._table = a["data-job"]
            self.rows[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.rows[self._table].append([])
        elif tag == "td" and self._table is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "div":
            self._timeline = None
        elif tag == "table":
            self._table = None
        elif tag == "tr" and self._table is not None and not self.rows[self._table][-1]:
            self.rows[self._table].pop()  # the header row
        elif tag == "td" and self._table is not None and self._cell is not None:
            self.rows[self._table][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def parse_page(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    parser.close()
    return parser


def width_of(style: str) -> float:
    m = re.fullmatch(r"width:(\d{1,3}\.\d{3})%", style)
    assert m, style
    return float(m.group(1))


def job_ettr(timeline: Timeline) -> JobEttr:
    """The sweep's summary of ``timeline``'s ledger, as :func:`_job_ettrs` makes it."""
    summary = EttrResult(
        timeline.job, "s.db", timeline.end_s, None, 86_400.0, build_ledger(timeline), ""
    ).summary()
    assert summary is not None
    return summary


def sweep_with_jobs(*jobs: JobEttr) -> SweepResult:
    from robustctl.models import RunReport

    h = SweepHost("n1", Status.OK, False, 0, {"host.xid": "ok"})
    return SweepResult(0.0, 1.0, (h,), (), (), None, (), {}, {}, (), "s.db",
                       RunReport(Status.OK, (), (), (), (), 0, 1), ettr=jobs)  # fmt: skip


T0 = 1_800_000_000.0


def two_incidents() -> Timeline:
    """1000 s: productive to 300, a crash (detection 300-350, restart 350-400), productive to 700,
    a hang (detection 700-720, localization to 760, eviction of two machines to 800, restart to 850),
    productive to 1000."""
    samples = [
        ProgressSample(T0 + t, s) for t, s in ((0, 0), (300, 30), (400, 31), (700, 60), (850, 61), (1000, 76))
    ]
    crash = Incident("c1", "crash", T0 + 300, decision_s=T0 + 350, restart_start_s=T0 + 350,
                     first_new_step_s=T0 + 400, playbook="job-failed")  # fmt: skip
    hang = Incident("h1", "hang", T0 + 700, decision_s=T0 + 720, localization_start_s=T0 + 720,
                    localization_end_s=T0 + 760, eviction_start_s=T0 + 760, eviction_end_s=T0 + 800,
                    machines_evicted=("node07", "node08"), restart_start_s=T0 + 800,
                    first_new_step_s=T0 + 850, playbook="hang")  # fmt: skip
    return Timeline("llm", T0, T0 + 1000, tuple(samples), (crash, hang), step_time_s=10.0)


def test_html_draws_each_jobs_timeline_legend_and_incidents() -> None:
    """One segment per ledger interval, with its cause's class and a width proportional to its
    duration (summing to 100%); one incident row per incident; the job's ETTR in words."""
    from robustctl.report.html import TIMELINE_CAUSES, sweep_html

    assert TIMELINE_CAUSES == tuple(c.value for c in Cause)
    timeline = two_incidents()
    ledger = build_ledger(timeline)
    job = job_ettr(timeline)
    assert (job.window_start_s, job.window_end_s, job.intervals_left_out) == (T0, T0 + 1000, 0)
    page = sweep_html(sweep_with_jobs(job))
    assert "<h2>Jobs</h2>" in page and "<script" not in page and 'id="no-jobs"' not in page
    parsed = parse_page(page)
    segs = parsed.segments["llm"]
    assert [c for c, _, _ in segs] == [f"seg c-{iv.cause.value}" for iv in ledger.intervals]
    assert {iv.cause for iv in ledger.intervals} >= {Cause.PRODUCTIVE, Cause.DETECTION, Cause.LOCALIZATION,
                                                     Cause.EVICTION, Cause.RESTART}  # fmt: skip
    widths = [width_of(style) for _, style, _ in segs]
    assert sum(widths) == pytest.approx(100.0, abs=1e-6)
    for iv, w in zip(ledger.intervals, widths, strict=True):
        assert w == pytest.approx(100 * iv.duration_s / 1000, abs=0.002)
    assert segs[1][2] == "detection 2027-01-15 08:05:00 UTC – 2027-01-15 08:05:50 UTC (50.0 s)"
    rows = parsed.rows["llm"]
    assert rows == [
        ["2027-01-15 08:05:00 UTC", "c1", "crash", "job-failed", "100.0", "none"],
        ["2027-01-15 08:11:40 UTC", "h1", "hang", "hang", "150.0", "node07, node08"],
    ]
    assert f"Cumulative ETTR <b>{100 * ledger.cumulative_ettr:.1f}%</b>" in page
    assert '<span class="sw c-eviction"></span>eviction: 40.0 s' in page


def test_html_lists_no_job_without_ettr_data() -> None:
    from robustctl.report.html import sweep_html

    page = sweep_html(sweep_with_jobs())
    assert "<h2>Jobs</h2>" in page and 'id="no-jobs"' in page and 'class="timeline"' not in page


def test_a_long_timeline_is_bounded_and_says_what_was_left_out() -> None:
    """A ledger of more than MAX_TIMELINE_INTERVALS intervals (a job that stalls every other
    sample): the most recent ones are kept, one hatched segment stands for the rest, and the page
    says how many were left out."""
    from robustctl.report.html import sweep_html

    n = MAX_TIMELINE_INTERVALS + 500  # alternating productive / unaccounted: 2n intervals, none mergeable
    samples = tuple(ProgressSample(T0 + 10 * k, (k + 1) // 2) for k in range(2 * n + 1))
    timeline = Timeline("long", T0, T0 + 10 * 2 * n, samples)
    assert len(build_ledger(timeline).intervals) == 2 * n
    job = job_ettr(timeline)
    left_out = 2 * n - MAX_TIMELINE_INTERVALS
    assert len(job.intervals) == MAX_TIMELINE_INTERVALS and job.intervals_left_out == left_out
    assert job.intervals[-1].end_s == T0 + 20 * n and job.intervals[0].start_s == T0 + 10 * left_out
    page = sweep_html(sweep_with_jobs(job))
    segs = parse_page(page).segments["long"]
    assert len(segs) == MAX_TIMELINE_INTERVALS + 1 and segs[0][0] == "seg c-omitted"
    assert segs[0][2].startswith(f"{left_out} earlier interval(s) left out")
    widths = [width_of(style) for _, style, _ in segs]
    assert sum(widths) == pytest.approx(100.0, abs=1e-6)
    assert widths[0] == pytest.approx(100 * left_out / (2 * n), abs=0.002)
    assert f"{left_out} earlier interval(s) (from " in page
    # The sweep's JSON carries the bounded timeline, not the whole ledger.
    doc = strict_jsonable(sweep_with_jobs(job))
    (carried,) = doc["ettr"]
    assert len(carried["intervals"]) == MAX_TIMELINE_INTERVALS and carried["intervals_left_out"] == left_out
    assert carried["intervals"][0] == {"cause": "productive", "start_s": T0 + 10 * left_out,
                                       "end_s": T0 + 10 * left_out + 10}  # fmt: skip


def test_bounded_timeline_merges_neighbours_of_one_cause_before_leaving_any_out() -> None:
    """Neighbours of the same cause that the ledger keeps apart (different incidents) are merged
    only when over the bound; what merging brings under the bound is all kept."""
    ivs = [
        LedgerInterval(T0 + k, T0 + k + 1, Cause.RESTART, f"i{k}") for k in range(MAX_TIMELINE_INTERVALS + 1)
    ]
    ivs.append(LedgerInterval(T0 + len(ivs), T0 + len(ivs) + 1, Cause.PRODUCTIVE))
    kept, left_out = bounded_timeline(ivs)
    assert left_out == 0 and [(iv.cause, iv.start_s, iv.end_s) for iv in kept] == [
        ("restart", T0, T0 + MAX_TIMELINE_INTERVALS + 1),
        ("productive", T0 + MAX_TIMELINE_INTERVALS + 1, T0 + MAX_TIMELINE_INTERVALS + 2),
    ]
    kept, left_out = bounded_timeline(ivs[:3])  # within the bound: one for one
    assert left_out == 0 and len(kept) == 3
    # Still over the bound once merged: the most recent are kept, the earlier (merged) ones counted.
    mixed = [LedgerInterval(T0, T0 + 1, Cause.RESTART, "a"), LedgerInterval(T0 + 1, T0 + 2, Cause.RESTART, "b"),
             LedgerInterval(T0 + 2, T0 + 3, Cause.PRODUCTIVE), LedgerInterval(T0 + 3, T0 + 4, Cause.WAITING)]  # fmt: skip
    kept, left_out = bounded_timeline(mixed, limit=2)
    assert left_out == 1 and [(iv.cause, iv.start_s) for iv in kept] == [
        ("productive", T0 + 2),
        ("waiting", T0 + 3),
    ]


def test_a_sweep_writes_each_jobs_timeline_in_its_page_and_the_same_textfile(
    tmp_path: Path, healthy_host_data: dict[str, Any]
) -> None:
    """A sweep with ``--html`` and ``--textfile`` over an inventory whose job has ledger data in the
    store: the page has the job's timeline and incident; the textfile is byte for byte what the
    job's numbers alone give (the timeline it carries changes nothing there)."""
    import dataclasses

    from robustctl.report.prometheus import sweep_textfile
    from robustctl.watchstore import open_incident, record_progress, update_incident

    state, page, prom, clock = tmp_path / "s.db", tmp_path / "r.html", tmp_path / "r.prom", Clock()
    t0 = clock.t - 1000
    with Store.open(state, clock=clock) as store:
        for at, step in ((0, 0), (400, 40), (600, 30), (1000, 70)):
            record_progress(store, "j", at=t0 + at, step=step)
        inc = open_incident(store, "j", incident_class="crash", onset_at=t0 + 400, opened_at=t0 + 450)
        update_incident(
            store, inc.id, decision_at=t0 + 500, restart_start_at=t0 + 500, first_new_step_at=t0 + 600
        )
    req = sweep_request(
        inventory=inventory(tmp_path, jobs=True), state=state, html=page, textfile=prom, environ={}
    )
    res = run_sweep(req, pool=TransportPool(override=fake(healthy_host_data, bad=None)), clock=clock)
    write_sweep_files(req, res)
    assert res.exit_code == 0 and [e.job for e in res.ettr] == ["j"]
    numbers_only = dataclasses.replace(
        res.ettr[0], window_start_s=None, window_end_s=None, intervals=(), incidents=()
    )
    assert prom.read_text() == sweep_textfile(dataclasses.replace(res, ettr=(numbers_only,)))
    assert 'robustctl_job_ettr{job="j"} 0.8' in prom.read_text()
    parsed = parse_page(page.read_text())
    assert [c for c, _, _ in parsed.segments["j"]] == [
        "seg c-productive",
        "seg c-detection",
        "seg c-restart",
        "seg c-productive",
    ]
    assert [width_of(s) for _, s, _ in parsed.segments["j"]] == [40.0, 10.0, 10.0, 40.0]
    assert parsed.rows["j"] == [["2027-01-15 07:50:00 UTC", "1", "crash", "none", "200.0", "none"]]


# --- lemons and history commands -------------------------------------------------------------------


def test_lemons_by_failures_and_returns(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "s.db"
    with Store.open(path, clock=clock) as store:
        for i in range(6):
            clock.t += 3600
            history.record(
                store, obs("flaky", Status.CRITICAL if i % 2 == 0 else Status.OK, "host.xid"), source="sweep"
            )
            history.record(store, obs("fine", Status.OK), source="sweep")
        for _ in range(2):
            clock.t += 60
            store.set_state("boomerang", MachineState.EVICTED, "evict: xid")
            store.set_state("boomerang", MachineState.RETURNED, "return: repaired")
            store.set_state("boomerang", MachineState.ACTIVE, "return")
        lemons = find_lemons(store, since=0, min_failures=3, min_returns=2)
        assert [(lm.host, lm.failures, lm.returns, lm.rules) for lm in lemons] == [
            ("flaky", 3, 0, ("failures",)), ("boomerang", 0, 2, ("returns",))
        ]  # fmt: skip
        assert find_lemons(store, since=clock.t - 3 * 3600, min_failures=3, min_returns=3) == []
    res = run_lemons(LemonsRequest(since_s=30 * 86_400, state=path), clock=clock)
    assert [lm.host for lm in res.lemons] == ["flaky", "boomerang"]
    hist = run_history(HistoryRequest("flaky", 86_400, path), clock=clock)
    assert hist.counters is not None and hist.counters.failures == 3 and len(hist.changes) == 12


def sweep_sequence(
    store: Store, clock: Clock, host: str, seq: list[tuple[float, Status]], check: str
) -> None:
    """Sweeps of ``host`` at ``clock.t + dt`` for each (dt, status) of ``check``, through the policy."""
    t0 = clock.t
    for dt, status in seq:
        clock.t = t0 + dt
        record_sweep(store, obs(host, status, check), SweepSettings())


def test_a_flapping_host_never_named_is_not_a_lemon(tmp_path: Path) -> None:
    clock = Clock()
    with Store.open(tmp_path / "s.db", clock=clock) as store:
        # a NIC down at one sweep in every hour for 10 hours: never twice within 5 minutes
        flaps = [
            (h * 3600 + dt, st) for h in range(10) for dt, st in ((0, Status.CRITICAL), (300, Status.OK))
        ]
        sweep_sequence(store, clock, "flappy", flaps, "host.nic")
        assert find_lemons(store, since=0, min_failures=3, min_returns=2) == []
        c = history.counters(store)["flappy"]
        assert (c.seen, c.failures) == (20, 0)
        verdicts = [ch.to_status for ch in history.changes(store, host="flappy") if ch.check == HOST_CHECK]
        assert verdicts == ["warning", "ok"] * 10
        first = next(ch for ch in history.changes(store, host="flappy") if ch.to_status == "warning")
        assert first.detail.startswith("pending: host.nic: eth0 down [1 failure(s) within 300 s")
        # the check itself keeps its raw status: the grid and the textfile show the NIC critical
        assert [ch.to_status for ch in history.changes(store, host="flappy") if ch.check == "host.nic"][:2] == [
            "critical", "ok"
        ]  # fmt: skip


def test_a_host_named_three_times_is_a_lemon(tmp_path: Path) -> None:
    clock = Clock()
    with Store.open(tmp_path / "s.db", clock=clock) as store:
        # an XID at once, three times
        xids = [(h * 3600 + dt, st) for h in range(3) for dt, st in ((0, Status.CRITICAL), (300, Status.OK))]
        sweep_sequence(store, clock, "xid", xids, "host.xid")
        # a NIC seen down at two sweeps in a row (twice within 5 minutes), three times: named at the
        # second sweep of each, so three failures, not six
        clock.t += 3600
        nic = [
            (h * 3600 + dt, st)
            for h in range(3)
            for dt, st in ((0, Status.CRITICAL), (300, Status.CRITICAL), (600, Status.OK))
        ]
        sweep_sequence(store, clock, "nic", nic, "host.nic")
        lemons = find_lemons(store, since=0, min_failures=3, min_returns=2)
        assert [(lm.host, lm.failures, lm.rules) for lm in lemons] == [
            ("nic", 3, ("failures",)), ("xid", 3, ("failures",))
        ]  # fmt: skip
        nic_verdicts = [ch.to_status for ch in history.changes(store, host="nic") if ch.check == HOST_CHECK]
        assert nic_verdicts == ["warning", "critical", "ok"] * 3
        assert history.counters(store)["nic"].failures == 3
        assert all(e.detail.startswith("sweep: host.nic: eth0 down") for e in lemons[0].evidence)


def test_a_diagnose_critical_counts_as_a_failure(tmp_path: Path) -> None:
    clock = Clock()
    with Store.open(tmp_path / "s.db", clock=clock) as store:
        xids = [(h * 3600 + dt, st) for h in range(2) for dt, st in ((0, Status.CRITICAL), (300, Status.OK))]
        sweep_sequence(store, clock, "n1", xids, "host.xid")
        assert find_lemons(store, since=0, min_failures=3, min_returns=2) == []
        # diagnose names suspects itself: its CRITICAL verdict is a failure without any debounce,
        # even of a check the sweep policy would leave pending
        clock.t += 3600
        history.record(store, obs("n1", Status.CRITICAL, "host.nic"), source="diagnose", sweep=False)
        (lemon,) = find_lemons(store, since=0, min_failures=3, min_returns=2)
        assert (lemon.host, lemon.failures) == ("n1", 3)
        assert [e.detail.split(":")[0] for e in lemon.evidence] == ["sweep", "sweep", "diagnose"]


def test_sweep_reports_a_pending_host_as_warning_and_no_failure(
    tmp_path: Path, healthy_host_data: dict[str, Any]
) -> None:
    down = json.loads(json.dumps(healthy_host_data))
    down["nics"][0].update(operstate="down", carrier=0, speed_mbps=-1)
    tr = fake(healthy_host_data, bad=None)
    tr.answers["node3"]["host"] = answer(down)
    state = tmp_path / "s.db"
    req = sweep_request(inventory=inventory(tmp_path), state=state, textfile=tmp_path / "r.prom",
                        html=tmp_path / "r.html", environ={})  # fmt: skip
    clock = Clock()
    res = run_sweep(req, pool=TransportPool(override=tr), clock=clock)
    write_sweep_files(req, res)
    (node3,) = [h for h in res.hosts if h.host == "node3"]
    assert (node3.status, node3.named, node3.pending, node3.checks["host.nic"]) == (
        Status.WARNING, False, ("host.nic",), "critical"
    )  # fmt: skip
    assert res.report.hosts[2].status is Status.CRITICAL  # the engine's own verdict is kept in the report
    assert res.exit_code == 1
    fams = {f.name: f for f in text_string_to_metric_families((tmp_path / "r.prom").read_text())}
    verdict = {s.labels["host"]: s.labels["status"] for s in fams["robustctl_host_status"].samples}
    assert verdict["node3"] == "warning"
    failures = {s.labels["host"]: s.value for s in fams["robustctl_host_failures"].samples}
    assert failures["node3"] == 0
    assert '<th title="">node3</th><td class="s-warning">warning</td>' in (tmp_path / "r.html").read_text()
    # seen down again 5 minutes later: named, one failure
    clock.t += 300
    res = run_sweep(req, pool=TransportPool(override=tr), clock=clock)
    write_sweep_files(req, res)
    (node3,) = [h for h in res.hosts if h.host == "node3"]
    assert (node3.status, node3.named, res.counters["node3"].failures) == (Status.CRITICAL, True, 1)
    hist = run_history(HistoryRequest("node3", 86_400, state), clock=clock)
    assert [c.to_status for c in hist.changes if c.check == HOST_CHECK] == ["warning", "critical"]


def test_history_and_lemons_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = str(tmp_path / "s.db")
    assert main(["history", "localhost", "--state", state]) == 0
    assert not (tmp_path / "s.db").exists()  # reading never creates the store
    assert main(["sweep", "--state", state, "-q"]) in (0, 1)
    capsys.readouterr()
    assert main(["history", "localhost", "--state", state, "--since", "1d", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "history" and doc["counters"]["seen"] == 1
    assert main(["lemons", "--state", state, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["lemons"] == []
    assert main(["history", "localhost", "--since", "soon"]) == 64
    assert main(["lemons", "--since", "99999d"]) == 64


def test_diagnose_results_feed_the_history(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    assert main(["diagnose", "--level", "0", "-q", "--state", str(state)]) in (0, 1)
    with Store.open(state) as store:
        assert {c.source for c in history.changes(store, host="localhost")} == {"diagnose"}
        assert history.last_sweeps(store) == []


def test_a_host_answering_garbage_is_unknown_and_the_old_outputs_stay_whole(
    tmp_path: Path, healthy_host_data: dict[str, Any]
) -> None:
    """Bad input of issue 13: a host that answers garbage is an UNKNOWN entry for that host (exit 3),
    never a traceback; the textfile and HTML are rewritten whole (atomically), never half-written."""
    from robustctl.transport.base import CommandResult

    state, prom, page = tmp_path / "s.db", tmp_path / "r.prom", tmp_path / "r.html"
    req = sweep_request(inventory=inventory(tmp_path), state=state, textfile=prom, html=page, environ={})
    tr = fake(healthy_host_data, bad=None)
    tr.answers["node3"]["host"] = CommandResult("node3", 0, b"\x00\xff{not json at all\n" * 50, b"", 0.01)
    res = run_sweep(req, pool=TransportPool(override=tr), clock=Clock())
    write_sweep_files(req, res)
    by = {h.host: h for h in res.hosts}
    assert by["node3"].status is Status.UNKNOWN and by["node3"].error
    assert {h: by[h].status for h in ("node1", "node2", "spare1")} == dict.fromkeys(
        ("node1", "node2", "spare1"), Status.OK
    )
    assert res.exit_code == ExitCode.UNKNOWN
    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    assert {s.labels["host"] for s in fams["robustctl_host_named"].samples} == {
        "node1",
        "node2",
        "node3",
        "spare1",
    }
    assert "node3" in page.read_text() and page.read_text().rstrip().endswith("</html>")
    with Store.open(state) as store:
        assert (
            history.counters(store)["node3"].unknowns == 1 and history.counters(store)["node3"].failures == 0
        )


def test_a_sweep_that_cannot_reach_its_store_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad input of issue 13: a store that cannot be opened (a directory in its place) is one error
    line with the design's exit code; the previous textfile is left as it was."""
    prom = tmp_path / "r.prom"
    prom.write_text("old\n")
    bad_state = tmp_path / "store-is-a-dir"
    bad_state.mkdir()
    code = main(["sweep", "--state", str(bad_state), "--textfile", str(prom), "-q"])
    assert code == ExitCode.CONFIG
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad_state) in err[0] and "Traceback" not in err[0]
    assert prom.read_text() == "old\n"


# --- times in the store (issue 21, item 6) ----------------------------------------------------------

BAD_TIMES = [1e300, -1e300, math.inf, 253_402_300_800, "NaN", "later", b"\x00"]
"""1e300, -1e300, Infinity, the year 10000, text (NaN as text: SQLite keeps a bound NaN only as NULL,
which these NOT NULL columns refuse) and a blob."""


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with one sweep of this machine (localhost, no inventory)."""
    state = tmp_path_factory.mktemp("swept") / "s.db"
    assert main(["sweep", "--state", str(state), "-q"]) in (0, 1)
    return state


@pytest.mark.parametrize("value", BAD_TIMES)
@pytest.mark.parametrize(
    ("table", "column"),
    [
        ("check_changes", "at"),
        ("check_state", "since"),
        ("host_counters", "last_seen"),
        ("sweeps", "finished_at"),
    ],
)
def test_a_bad_time_stops_sweep_html_and_history_with_one_line(
    swept: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], table: str, column: str, value: object
) -> None:
    """Before: exit 3 and an internal error (OverflowError, ValueError). Now: exit 78, one line naming
    the row; the HTML page is not written. A sweep reads every one of these (the newest time, the
    checks' states, the recent changes); ``history`` reads all but ``sweeps``, and ``check_changes``
    only within ``--since``: a change before 1970 is outside any window (not read, not shown), and
    past the retention a sweep deletes it."""
    state = tmp_path / "s.db"
    state.write_bytes(swept.read_bytes())
    set_field(state, table, column, value)
    page = tmp_path / "r.html"
    runs = {
        "sweep": (["sweep", "--state", str(state), "-q", "--html", str(page)], True),
        "history": (["history", "localhost", "--state", str(state), "--since", "3650d"], table != "sweeps"),
        "history --json": (["history", "localhost", "--state", str(state), "--json"], table != "sweeps"),
    }
    for name, (argv, reads_it) in runs.items():
        if table == "check_changes" and value == -1e300:
            reads_it = False  # before any window (history), and pruned (a sweep) before it is read
        code = main(argv)
        out, err = capsys.readouterr()
        if not reads_it:
            assert code == 0 and (page.exists() if name == "sweep" else "localhost" in out + err), name
            continue
        lines = err.strip().splitlines()
        assert code == 78 and len(lines) == 1, (name, code, err)
        assert f"table {table}, row " in lines[0] and f", column {column}: bad time" in lines[0], (name, err)
        assert name != "sweep" or not page.exists()


@pytest.mark.parametrize("recent", ["[1e300]", "[NaN]", "[Infinity]", "[-1]", '["x"]', "{}", "not json"])
def test_a_bad_list_of_critical_times_is_one_line(
    swept: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], recent: str
) -> None:
    state = tmp_path / "s.db"
    state.write_bytes(swept.read_bytes())
    set_field(state, "check_state", "recent_bad", recent, "WHERE check_name='(host)'")
    for argv in (["history", "localhost"], ["sweep", "-q"]):
        assert main([*argv, "--state", str(state)]) == 78
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and ", column recent_bad: " in lines[0], lines


@pytest.mark.parametrize("value", BAD_TIMES)
def test_a_bad_time_in_a_failure_or_a_return_stops_lemons_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: object
) -> None:
    state = tmp_path / "s.db"
    clock = Clock(1_800_000_000.0)
    with Store.open(state, clock=clock) as store:
        history.record(store, obs("n1", Status.CRITICAL), source="diagnose", sweep=False)
        store.set_state("n2", MachineState.EVICTED, "xid")
        store.set_state("n2", MachineState.RETURNED, "repaired")
    for table, column in (("check_changes", "at"), ("machine_history", "at")):
        copy = tmp_path / f"{table}.db"
        copy.write_bytes(state.read_bytes())
        set_field(copy, table, column, value)
        code = main(["lemons", "--state", str(copy), "--since", "3650d"])
        lines = capsys.readouterr().err.strip().splitlines()
        if value == -1e300:  # before any window: not read
            assert code == 0 and lines and lines[-1].startswith("no lemons"), lines
            continue
        assert code == 78 and len(lines) == 1 and f"table {table}, row 1, column {column}" in lines[0], lines


def test_lemons_and_history_show_times_up_to_the_year_9999(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "s.db"
    with Store.open(state, clock=Clock(253_402_300_799.0)) as store:
        for _ in range(3):
            history.record(store, obs("n1", Status.CRITICAL), source="diagnose", sweep=False)
            history.record(store, obs("n1", Status.OK), source="diagnose", sweep=False)
    assert main(["history", "n1", "--state", str(state), "--since", "3650d"]) == 0
    assert "9999-12-31 23:59:59" in capsys.readouterr().err


def test_the_cli_writes_the_textfile_and_the_page_after_the_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run_sweep`` writes no artefact; the CLI, its caller, writes both (report.sweep.write_sweep_files)."""
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        f"python: {{path: {sys.executable}}}\nhosts:\n  - {{name: here, address: local, transport: local}}\n"
    )
    prom, page = tmp_path / "r.prom", tmp_path / "r.html"
    code = main(["sweep", "-i", str(inv), "--state", str(tmp_path / "s.db"), "--textfile", str(prom),
                 "--html", str(page), "-q"])  # fmt: skip
    capsys.readouterr()
    assert code in (0, 1, 2, 3)
    assert "robustctl_sweep_hosts{status=" in prom.read_text() or "robustctl_" in prom.read_text()
    assert page.read_text().startswith("<!DOCTYPE html>") and "here" in page.read_text()
