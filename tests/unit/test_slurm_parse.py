"""Parsers of the Slurm back end on captured Slurm 22.05 output, and the back end over a fake runner.

The captured files and the cluster state they show are described in ``tests/data/slurm/SOURCE.md``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from robustctl.config import SchedulerSettings
from robustctl.schedulers.base import NodeState, Scheduler, SchedulerError
from robustctl.schedulers.slurm import (
    CommandOutput,
    Slurm,
    SlurmJob,
    create,
    expand_nodelist,
    job_from_scontrol,
    node_from_scontrol,
    parse_scontrol_records,
    parse_sinfo_json,
    parse_sinfo_text,
    parse_squeue_json,
)

DATA = Path(__file__).parents[1] / "data" / "slurm"

MIXED_STATES = {
    "sn1": NodeState.ACTIVE,
    "sn2": NodeState.DRAINED,
    "sn3": NodeState.STANDBY,
    "sn4": NodeState.DOWN,
    "sn5": NodeState.DRAINED,
}
MIXED_REASONS = {
    "sn1": "",
    "sn2": "robustctl: xid 79 on GPU 3",
    "sn3": "robustctl-standby: warm spare",
    "sn4": "operator: PSU swap",
    "sn5": "robustctl: fail-slow, rank=5 x=1",
}


def read(name: str) -> str:
    return (DATA / name).read_text()


# ---- parsers --------------------------------------------------------------------------------------


def test_sinfo_json_idle_cluster() -> None:
    nodes = parse_sinfo_json(read("sinfo-idle.json"))
    assert sorted(nodes) == ["sn1", "sn2", "sn3", "sn4", "sn5"]
    assert {n.node_state() for n in nodes.values()} == {NodeState.ACTIVE}
    assert all(n.state == "idle" and not n.flags and n.reason == "" for n in nodes.values())


def test_sinfo_json_mixed_states() -> None:
    nodes = parse_sinfo_json(read("sinfo-mixed.json"))
    assert {k: n.node_state() for k, n in nodes.items()} == MIXED_STATES
    assert {k: n.reason for k, n in nodes.items()} == MIXED_REASONS
    assert nodes["sn2"].state == "allocated" and nodes["sn2"].flags == {"DRAIN"}
    assert nodes["sn3"].standby and nodes["sn3"].drained
    assert nodes["sn4"].down and not nodes["sn4"].drained


def test_sinfo_text_agrees_with_json() -> None:
    nodes = parse_sinfo_text(read("sinfo-mixed.out"))
    assert {k: n.node_state() for k, n in nodes.items()} == MIXED_STATES
    assert {k: n.reason for k, n in nodes.items()} == MIXED_REASONS
    assert nodes["sn2"].state == "draining"


def test_scontrol_show_node_agrees_with_json() -> None:
    records = parse_scontrol_records(read("scontrol-show-node.out"), tail_key="Reason")
    assert len(records) == 5
    assert records[0]["OS"] == "Linux 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0"  # a value with spaces
    assert records[0]["NodeAddr"] == "127.0.0.1"
    nodes = {n.name: n for n in map(node_from_scontrol, records)}
    assert {k: n.node_state() for k, n in nodes.items()} == MIXED_STATES
    # The "[root@time]" suffix is dropped; a reason with '=' and ',' is kept whole.
    assert {k: n.reason for k, n in nodes.items()} == MIXED_REASONS
    assert nodes["sn2"].flags == {"DRAIN"} and nodes["sn2"].state == "allocated"


def test_sinfo_json_of_an_unreachable_controller_is_an_error_not_an_empty_cluster() -> None:
    # Slurm 22.05 exits 0 here with an "errors" entry and no node: reading it as "no nodes" would
    # report every host UNKNOWN.
    with pytest.raises(ValueError, match=r"reported errors .*Unspecified error \(errno -1\)"):
        parse_sinfo_json(read("sinfo-unreachable.json"))


def test_squeue_json_jobs() -> None:
    jobs = {j.name: j for j in parse_squeue_json(read("squeue.json"))}
    assert set(jobs) == {"train", "held", "waiting"}
    train, held, waiting = jobs["train"], jobs["held"], jobs["waiting"]
    assert (train.job_id, train.state, train.nodes, train.running) == ("1", "RUNNING", ("sn1", "sn2"), True)
    assert train.hosts == ("sn1", "sn2")
    assert (held.state, held.reason, held.held, held.restarts) == ("PENDING", "JobHeldUser", True, 1)
    assert (held.nodes, held.required_nodes, held.excluded_nodes) == ((), ("sn3",), ("sn5",))
    assert held.hosts == ("sn3",)  # a pending pinned job: where it will run
    assert waiting.hosts == () and not waiting.held and not waiting.finished


def test_scontrol_show_job_running_and_held() -> None:
    [rec] = parse_scontrol_records(read("scontrol-show-job-running.out"))
    assert rec["Command"] == "/tmp/slurmbed/job.sh 600"
    assert rec["AllocNode:Sid"] == "localhost:26201" and rec["CPUs/Task"] == "1"
    job = job_from_scontrol(rec)
    assert (job.job_id, job.name, job.state, job.nodes) == ("1", "train", "RUNNING", ("sn1", "sn2"))
    assert job.excluded_nodes == ()
    [rec] = parse_scontrol_records(read("scontrol-show-job-held.out"))
    held = job_from_scontrol(rec)
    assert (held.state, held.reason, held.held) == ("PENDING", "job_requeued_in_held_state", True)
    assert (held.nodes, held.required_nodes, held.excluded_nodes, held.hosts) == (
        (),
        ("sn3",),
        ("sn5",),
        ("sn3",),
    )


def test_expand_nodelist() -> None:
    assert expand_nodelist("sn[1,3-4],gpu01") == ("sn1", "sn3", "sn4", "gpu01")
    assert expand_nodelist("node[001-003]") == ("node001", "node002", "node003")
    for empty in ("", "(null)", None, "  "):
        assert expand_nodelist(empty) == ()
    with pytest.raises(ValueError, match="bad Slurm node list"):
        expand_nodelist("sn[3-1")


@pytest.mark.parametrize(
    ("parser", "text", "match"),
    [
        (parse_sinfo_json, "not json", "not JSON"),
        (parse_sinfo_json, "[]", "expected a JSON object"),
        (parse_sinfo_json, '{"errors": []}', "no 'nodes' list"),
        (parse_squeue_json, '{"jobs": [{"name": "x"}]}', "without job_id"),
        (parse_sinfo_text, "sn1 idle\n", "expected NAME|STATE|REASON"),
        (parse_scontrol_records, "garbage line\n", "expected Key=Value"),
    ],
)
def test_parsers_reject_what_they_do_not_understand(
    parser: Callable[[str], object], text: str, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        parser(text)


def test_newer_slurm_state_lists_are_understood() -> None:
    # Slurm 23.02+ prints "state": ["IDLE", "DRAIN"] and "job_state": ["RUNNING"].
    text = '{"nodes": [{"name": "n1", "state": ["IDLE", "DRAIN"], "reason": "robustctl-standby: x"}]}'
    assert parse_sinfo_json(text)["n1"].node_state() is NodeState.STANDBY
    jobs = parse_squeue_json(
        '{"jobs": [{"job_id": 7, "name": "j", "job_state": ["RUNNING"], "nodes": "n[1-2]"}]}'
    )
    assert jobs[0].state == "RUNNING" and jobs[0].nodes == ("n1", "n2")


# ---- the back end over a fake runner ---------------------------------------------------------------


class FakeSlurm:
    """A scripted runner: answers by command prefix, records every call (argv without the bin dir)."""

    def __init__(self, answers: Mapping[tuple[str, ...], object]) -> None:
        self.answers = dict(answers)
        self.calls: list[tuple[str, ...]] = []
        self.envs: list[Mapping[str, str]] = []

    def __call__(self, argv: Sequence[str], env: Mapping[str, str], timeout_s: float) -> CommandOutput:
        call = (Path(argv[0]).name, *argv[1:])
        self.calls.append(call)
        self.envs.append(env)
        for prefix in sorted(self.answers, key=len, reverse=True):
            if call[: len(prefix)] == prefix:
                answer = self.answers[prefix]
                if callable(answer):
                    answer = answer(call)
                if isinstance(answer, BaseException):
                    raise answer
                if isinstance(answer, CommandOutput):
                    return answer
                return CommandOutput(0, str(answer), "")
        return CommandOutput(0, "", "")

    def updates(self) -> list[tuple[str, ...]]:
        return [c for c in self.calls if c[:2] in {("scontrol", "update"), ("scontrol", "requeue")}]


def mixed_cluster(**extra: object) -> FakeSlurm:
    return FakeSlurm(
        {("sinfo", "--json"): read("sinfo-mixed.json"), **{tuple(k.split()): v for k, v in extra.items()}}
    )


def test_slurm_satisfies_the_protocol_and_create_reads_the_settings() -> None:
    slurm = create(SchedulerSettings(kind="slurm", timeout_s=7))
    assert isinstance(slurm, Scheduler)
    assert slurm.name == "slurm" and slurm.timeout_s == 7 and slurm.conf is None


def test_state_and_conf_and_bin_dir() -> None:
    fake = mixed_cluster()
    slurm = Slurm(conf="/etc/slurm/test.conf", bin_dir="/opt/slurm/bin", runner=fake)
    assert slurm.state(["sn1", "sn3", "sn4"]) == {
        "sn1": NodeState.ACTIVE,
        "sn3": NodeState.STANDBY,
        "sn4": NodeState.DOWN,
    }
    assert fake.envs[0]["SLURM_CONF"] == "/etc/slurm/test.conf"
    assert fake.calls == [("sinfo", "--json", "--all")]


def test_unknown_host_is_looked_up_in_scontrol_then_unknown() -> None:
    fake = mixed_cluster(**{"scontrol show node": read("scontrol-show-node.out")})
    slurm = Slurm(runner=fake)
    assert slurm.state(["sn1", "nosuch"]) == {"sn1": NodeState.ACTIVE, "nosuch": NodeState.UNKNOWN}
    assert fake.calls[-1] == ("scontrol", "show", "node", "-o")


def test_drain_is_one_scontrol_call_and_skips_drained_hosts() -> None:
    fake = mixed_cluster()
    results = Slurm(runner=fake).drain(["sn1", "sn2", "sn3", "sn5"], "  pp group\n of rank 3 ")
    assert [(r.host, r.changed) for r in results] == [
        ("sn1", True),
        ("sn2", False),  # already draining
        ("sn3", True),  # a standby: re-drained with the eviction reason
        ("sn5", False),  # already drained
    ]
    assert fake.updates() == [
        ("scontrol", "update", "nodename=sn[1,3]", "state=drain", "reason=robustctl: pp group of rank 3")
    ]
    assert "already drained (reason: robustctl: xid 79 on GPU 3)" in results[1].detail


def test_drain_of_an_unknown_host_changes_nothing() -> None:
    fake = mixed_cluster(**{"scontrol show node": read("scontrol-show-node.out")})
    with pytest.raises(SchedulerError, match=r"unknown to Slurm: nosuch"):
        Slurm(runner=fake).drain(["sn1", "nosuch"], "x")
    assert fake.updates() == []


def test_empty_host_lists_run_nothing() -> None:
    fake = mixed_cluster()
    slurm = Slurm(runner=fake)
    assert slurm.drain([], "x") == [] and slurm.resume([], "x") == [] and slurm.hold_standby([], "x") == []
    assert slurm.state([]) == {}
    assert fake.calls == []


def test_drain_refuses_an_empty_reason_and_odd_names() -> None:
    slurm = Slurm(runner=mixed_cluster())
    with pytest.raises(SchedulerError, match="reason is required"):
        slurm.drain(["sn1"], "  ")
    with pytest.raises(SchedulerError, match="not plain Slurm node names"):
        slurm.drain(["sn1 state=resume"], "x")


def test_resume_and_standby_are_idempotent() -> None:
    fake = mixed_cluster()
    slurm = Slurm(runner=fake)
    results = slurm.resume(["sn1", "sn2", "sn4"], "repaired")
    assert [(r.host, r.changed) for r in results] == [("sn1", False), ("sn2", True), ("sn4", True)]
    assert fake.updates() == [("scontrol", "update", "nodename=sn[2,4]", "state=resume")]
    fake.calls.clear()
    results = slurm.hold_standby(["sn3", "sn5"], "spare")
    assert [(r.host, r.changed) for r in results] == [("sn3", False), ("sn5", True)]
    assert fake.updates() == [
        ("scontrol", "update", "nodename=sn5", "state=drain", "reason=robustctl-standby: spare")
    ]


def test_failing_command_names_the_command_and_stderr() -> None:
    fake = FakeSlurm(
        {("scontrol", "update"): CommandOutput(1, "", "slurm_update error: Invalid node name specified\n")}
    )
    with pytest.raises(SchedulerError) as info:
        Slurm(runner=fake).run(["scontrol", "update", "nodename=x y", "state=drain"])
    assert info.value.command == "scontrol update 'nodename=x y' state=drain"
    assert info.value.reason == "slurm_update error: Invalid node name specified"
    assert str(info.value).startswith("scheduler slurm: scontrol update")


def test_timeout_and_missing_binary_are_typed_errors() -> None:
    fake = FakeSlurm({("sinfo",): subprocess.TimeoutExpired(["sinfo"], 3)})
    with pytest.raises(SchedulerError, match=r"sinfo --json --all: timed out after 3 s"):
        Slurm(runner=fake, timeout_s=3).state(["sn1"])
    with pytest.raises(SchedulerError, match=r"cannot run /nonexistent/scontrol"):
        Slurm(bin_dir="/nonexistent", timeout_s=3).run(["scontrol", "ping"])


def test_real_runner_kills_a_hanging_command_at_its_timeout(tmp_path: Path) -> None:
    hang = tmp_path / "sinfo"
    hang.write_text("#!/bin/sh\nsleep 30\n")
    hang.chmod(0o755)
    import time

    t0 = time.monotonic()
    with pytest.raises(SchedulerError, match="timed out after 0.5 s"):
        Slurm(bin_dir=tmp_path, timeout_s=0.5).state(["sn1"])
    assert time.monotonic() - t0 < 15  # the 0.5 s timeout, not the command's 30 s, on a loaded machine too


def test_text_fallback_where_sinfo_has_no_json() -> None:
    fake = FakeSlurm(
        {
            ("sinfo", "--json"): CommandOutput(1, "", "sinfo: unrecognized option '--json'\n"),
            ("sinfo", "--all", "-N"): read("sinfo-mixed.out"),
        }
    )
    slurm = Slurm(runner=fake)
    assert slurm.state(list(MIXED_STATES)) == MIXED_STATES
    assert slurm.state(["sn1"]) == {"sn1": NodeState.ACTIVE}
    assert [c[1] for c in fake.calls] == ["--json", "--all", "--all"]  # JSON tried once only


def test_sinfo_failure_other_than_missing_json_is_an_error() -> None:
    fake = FakeSlurm(
        {("sinfo",): CommandOutput(1, "", "slurm_load_partitions: Unable to contact slurm controller\n")}
    )
    with pytest.raises(SchedulerError, match="Unable to contact slurm controller"):
        Slurm(runner=fake).state(["sn1"])


def test_jobs_by_name() -> None:
    fake = FakeSlurm(
        {
            ("squeue", "--json"): read("squeue.json"),
            ("scontrol", "show", "job", "-o", "1"): read("scontrol-show-job-running.out"),
        }
    )
    slurm = Slurm(runner=fake)
    assert slurm.job_hosts("train") == ["sn1", "sn2"]
    assert slurm.job_hosts("1") == ["sn1", "sn2"]
    with pytest.raises(SchedulerError, match="no pending or running job named 'nope'"):
        slurm.job_hosts("nope")


def test_job_name_matching_several_jobs_is_refused() -> None:
    fake = FakeSlurm({("squeue", "--json"): read("squeue.json").replace('"waiting"', '"train"')})
    with pytest.raises(SchedulerError, match=r"2 jobs are named 'train' \(1, 3\): give a job id"):
        Slurm(runner=fake).resolve_job("train")


def _job_line(state: str, reason: str, nodes: str, req: str = "(null)", exc: str = "(null)") -> str:
    return (
        f"JobId=9 JobName=llama UserId=root(0) JobState={state} Reason={reason} Requeue=1 Restarts=0 "
        f"ReqNodeList={req} ExcNodeList={exc} NodeList={nodes} Command=/x/job.sh 600\n"
    )


class JobSequence:
    """Answers ``scontrol show job`` from a list of states, advancing after each requeue."""

    def __init__(self, *lines: str) -> None:
        self.lines = list(lines)

    def __call__(self, call: tuple[str, ...]) -> str:
        return self.lines[0] if len(self.lines) == 1 else self.lines.pop(0)


def test_requeue_of_a_running_job_waits_then_makes_it_eligible() -> None:
    jobs = JobSequence(
        _job_line("RUNNING", "None", "sn[1-2]"),
        _job_line("COMPLETING", "None", "sn[1-2]"),
        _job_line("PENDING", "BeginTime", ""),
    )
    fake = FakeSlurm({("scontrol", "show", "job"): jobs})
    res = Slurm(runner=fake, requeue_settle_s=0, poll_s=0).requeue("9")
    assert res.changed and res.host == "9"
    assert fake.updates() == [
        ("scontrol", "requeue", "9"),
        ("scontrol", "update", "jobid=9", "StartTime=now"),
    ]


def test_requeue_of_a_finished_job_is_refused() -> None:
    fake = FakeSlurm({("scontrol", "show", "job"): _job_line("COMPLETED", "None", "sn1")})
    with pytest.raises(SchedulerError, match="job 9 is COMPLETED"):
        Slurm(runner=fake).requeue("9")
    assert fake.updates() == []


def test_requeue_that_never_turns_pending_times_out() -> None:
    fake = FakeSlurm({("scontrol", "show", "job"): _job_line("RUNNING", "None", "sn[1-2]")})
    with pytest.raises(SchedulerError, match=r"job still RUNNING .* waiting for the requeue"):
        Slurm(runner=fake, timeout_s=0.2, poll_s=0.01).requeue("9")


def test_replace_host_of_a_running_job_requeues_held_and_pins_the_new_list() -> None:
    jobs = JobSequence(
        _job_line("RUNNING", "None", "sn[1-3]", exc="sn7"),
        _job_line("PENDING", "job_requeued_in_held_state", ""),
    )
    fake = FakeSlurm({("scontrol", "show", "job"): jobs})
    res = Slurm(runner=fake, poll_s=0).replace_host("9", "sn2", "sn9")
    assert res.changed
    assert fake.updates() == [
        ("scontrol", "update", "jobid=9", "ReqNodeList=sn[1,3,9]", "ExcNodeList=sn[2,7]"),
    ]
    assert ("scontrol", "requeuehold", "9") in fake.calls


def test_replace_host_then_requeue_releases_the_held_job() -> None:
    held = _job_line("PENDING", "job_requeued_in_held_state", "", req="sn[1,3,9]", exc="sn2")
    fake = FakeSlurm({("scontrol", "show", "job"): held})
    slurm = Slurm(runner=fake, requeue_settle_s=0)
    assert slurm.job_hosts("9") == ["sn1", "sn3", "sn9"]
    assert slurm.replace_host("9", "sn2", "sn9").changed is False  # already done
    slurm.requeue("9")
    assert [c for c in fake.calls if c[1] != "show"] == [
        ("scontrol", "release", "9"),
        ("scontrol", "update", "jobid=9", "StartTime=now"),
    ]


def test_replace_host_refuses_hosts_outside_the_job() -> None:
    fake = FakeSlurm({("scontrol", "show", "job"): _job_line("RUNNING", "None", "sn[1-3]")})
    slurm = Slurm(runner=fake)
    with pytest.raises(SchedulerError, match=r"sn8 is not a host of job 9 \(hosts: sn\[1-3\]\)"):
        slurm.replace_host("9", "sn8", "sn9")
    with pytest.raises(SchedulerError, match=r"sn3 is already a host of job 9"):
        slurm.replace_host("9", "sn1", "sn3")
    assert fake.updates() == [] and ("scontrol", "requeuehold", "9") not in fake.calls


def test_slurm_job_properties() -> None:
    job = SlurmJob(job_id="5", name="x", state="PENDING", reason="Resources")
    assert not job.running and not job.finished and not job.held and job.hosts == ()
