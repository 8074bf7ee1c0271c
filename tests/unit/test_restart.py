"""``restart`` and ``stop`` with real processes on the local transport (``tests/jobs/heartbeat.py``).

Two inventory hosts on the local transport (both this machine) run a 4-rank job, 2 ranks per host.
Every process of a test carries a unique ``--tag`` that its ``process.match`` selects, so a test only
ever sees and stops its own processes; a finalizer kills whatever a failing test left.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from robustctl.actions import ActionContext
from robustctl.actions.plan import Plan, Step, StepKind, apply_plan
from robustctl.actions.restart import RestartSpec, parse_from_checkpoint, plan_restart, restart_runners
from robustctl.actions.session import Outcome, always
from robustctl.cli.main import main
from robustctl.commands.restart import RestartRequest, StopRequest, run_restart, run_stop
from robustctl.errors import ConfigError, UsageError
from robustctl.exit_codes import ExitCode
from robustctl.inventory import load_inventory
from robustctl.schedulers.base import OpResult
from robustctl.store import Store
from robustctl.transport.pool import TransportPool

REPO = Path(__file__).resolve().parents[2]


class Job:
    """One heartbeat job of a test: its inventory, tag, heartbeat directory and store."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.tag = f"hb-{uuid.uuid4().hex[:10]}"
        self.beats = tmp / "beats"
        self.logs = tmp / "logs"
        self.state = tmp / "state.db"
        self.inventory = tmp / "inv.yaml"

    def write(
        self, *, launch: Mapping[str, Any] | None = None, args: tuple[str, ...] = (), **job: Any
    ) -> Path:
        """Write the inventory: job ``hb`` with a per-rank launch of the heartbeat (``launch`` merged in)."""
        spec: dict[str, Any] = {
            "command": [sys.executable, "-m", "tests.jobs.heartbeat", "--dir", str(self.beats),
                        "--every-s", "0.1", *args, "--tag", self.tag],
            "per": "rank",
            "cwd": str(REPO),
            "log_dir": str(self.logs),
            "stop_grace_s": 5,
            "start_timeout_s": 20,
        }  # fmt: skip
        spec.update(launch or {})
        entry: dict[str, Any] = {
            "hosts": "n[1-2]",
            "ranks_per_host": 2,
            "layout": {"dp": 4},
            "process": {"match": rf"tests\.jobs\.heartbeat .*--tag {self.tag}"},
            "launch": spec,
        }
        entry.update(job)
        data = {
            "hosts": [{"name": "n1", "transport": "local"}, {"name": "n2", "transport": "local"}],
            "python": {"path": sys.executable},
            "jobs": {"hb": entry, "plain": {"hosts": "n[1-2]", "layout": {"dp": 2}}},
        }
        self.inventory.write_text(yaml.safe_dump(data, sort_keys=False))
        return self.inventory

    def restart(self, **kw: Any) -> Any:
        req = RestartRequest(job="hb", inventory=self.inventory, state=self.state, **kw)
        return run_restart(req, confirm=always)

    def stop(self) -> Any:
        return run_stop(StopRequest(job="hb", inventory=self.inventory, state=self.state), confirm=always)

    def processes(self) -> list[psutil.Process]:
        out = []
        for p in psutil.process_iter(["cmdline", "status"]):
            if self.tag in " ".join(p.info["cmdline"] or ()) and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p)
        return out

    def heartbeats(self, wait_for: int = 0, timeout: float = 20.0) -> dict[str, dict[str, Any]]:
        """``{file stem: document}`` once at least ``wait_for`` files exist."""
        deadline = time.monotonic() + timeout
        while True:
            out = {}
            for f in self.beats.glob("*.json"):
                with contextlib.suppress(ValueError, FileNotFoundError):
                    out[f.stem] = json.loads(f.read_text())
            if len(out) >= wait_for or time.monotonic() > deadline:
                return out
            time.sleep(0.05)

    def kill_all(self) -> None:
        procs = self.processes()
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(procs, timeout=5)


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    j = Job(tmp_path)
    j.write()
    yield j
    j.kill_all()


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def step_results(result: Any) -> dict[str, tuple[str, str]]:
    """``{step kind: (status, detail)}`` of an applied restart."""
    kinds = [s.kind.value for s in result.plan.steps]
    return {k: (r.status, r.detail) for k, r in zip(kinds, result.applied.results, strict=True)}


# -------------------------------------------------------------------------------------------- launch
def test_per_rank_launch_gives_each_rank_its_environment_and_runs_detached(job: Job) -> None:
    job.write(
        launch={"env": {"HB_EXTRA": "r{rank}-of-{world_size}-ckpt-{ckpt_iter}"}}, args=("--children", "1")
    )
    result = job.restart(from_checkpoint="1200")
    assert result.outcome is Outcome.APPLIED, result.applied.results if result.applied else result
    beats = job.heartbeats(wait_for=8)
    for rank in range(4):
        env = beats[f"rank{rank}"]["env"]
        assert env == {
            "RANK": str(rank),
            "WORLD_SIZE": "4",
            "LOCAL_RANK": str(rank % 2),
            "LOCAL_WORLD_SIZE": "2",
            "NODE_RANK": str(rank // 2),
            "NNODES": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29500",
            "HB_EXTRA": f"r{rank}-of-4-ckpt-1200",
        }
        assert beats[f"rank{rank}"]["cwd"] == str(REPO)
        assert (job.logs / f"hb-rank{rank:05d}.log").exists()
    # detached: the launch returned, its probe is gone, the ranks lead their own sessions
    mains = {beats[f"rank{r}"]["pid"] for r in range(4)}
    for pid in mains:
        proc = psutil.Process(pid)
        assert proc.ppid() != psutil.Process().pid
        assert __import__("os").getsid(pid) == pid
    statuses = step_results(result)
    assert statuses["pick_checkpoint"] == (
        "noop",
        "iteration 1200: iteration 1200, as asked (job has no ckpt section: not checked)",
    )
    assert statuses["launch"][0] == "done" and "n1: started 2 process(es)" in statuses["launch"][1]
    assert statuses["wait_running"] == ("noop", statuses["wait_running"][1])
    assert "all 4 rank(s) running" in statuses["wait_running"][1]


def test_per_host_launch_gives_node_environment_and_its_workers_are_found(job: Job) -> None:
    job.write(launch={"per": "host"}, args=("--ranks", "{nproc_per_node}"))
    result = job.restart(from_checkpoint="none")
    assert result.outcome is Outcome.APPLIED, result.applied.results if result.applied else result
    beats = job.heartbeats(wait_for=4)
    for rank in range(4):
        env = beats[f"rank{rank}"]["env"]
        # RANK/LOCAL_RANK come from the per-host launcher (the heartbeat's --ranks), the rest from robustctl
        assert env == {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank % 2),
            "NODE_RANK": str(rank // 2),
            "NNODES": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29500",
        }
    assert sorted(p.name for p in job.logs.iterdir()) == ["hb-node0000.log", "hb-node0001.log"]


# ---------------------------------------------------------------------------------------------- stop
def test_restart_again_stops_every_old_tree_children_included(job: Job) -> None:
    job.write(args=("--children", "2"))
    assert job.restart().outcome is Outcome.APPLIED
    old = {name: doc["pid"] for name, doc in job.heartbeats(wait_for=12).items()}
    assert len(old) == 12  # 4 ranks and 2 children each
    for f in job.beats.iterdir():
        f.unlink(missing_ok=True)  # a heartbeat being renamed into place may be gone already
    result = job.restart(reason="second")
    assert result.outcome is Outcome.APPLIED, result.applied.results if result.applied else result
    status, detail = step_results(result)["stop_job"]
    assert status == "done" and "ended by SIGTERM" in detail
    assert not [pid for pid in old.values() if alive(pid)]
    new = {name: doc["pid"] for name, doc in job.heartbeats(wait_for=12).items()}
    assert len(new) == 12 and not set(new.values()) & set(old.values())


def test_stop_kills_a_job_that_ignores_sigterm_after_the_grace(job: Job) -> None:
    job.write(launch={"stop_grace_s": 0.5}, args=("--ignore-term", "--children", "1"))
    assert job.restart().outcome is Outcome.APPLIED
    pids = [doc["pid"] for doc in job.heartbeats(wait_for=8).values()]
    result = job.stop()
    assert result.outcome is Outcome.APPLIED, result.applied.results if result.applied else result
    detail = result.applied.results[0].detail
    assert "killed (SIGKILL) after the grace" in detail and "STILL RUNNING" not in detail
    assert not [pid for pid in pids if alive(pid)]
    assert not job.processes()
    again = job.stop()  # nothing left: a no-op, not an error
    assert again.outcome is Outcome.NOTHING_TO_DO
    assert again.applied.results[0].detail == "n1: nothing of the job running; n2: nothing of the job running"


# ---------------------------------------------------------------------------------------- failures
def test_wait_names_the_ranks_that_did_not_start(job: Job) -> None:
    job.write(launch={"start_timeout_s": 3}, args=("--fail-ranks", "1,2"))
    result = job.restart()
    assert result.outcome is Outcome.FAILED and result.exit_code is ExitCode.UNKNOWN
    status, detail = step_results(result)["wait_running"]
    assert status == "failed"
    assert "2 of 4 rank(s) not running" in detail
    assert "n1: rank(s) 1" in detail and "n2: rank(s) 2" in detail
    assert "failing at start" in (job.logs / "hb-rank00001.log").read_text()


def test_a_launch_that_fails_on_one_host_stops_what_started_on_the_others(job: Job) -> None:
    (job.tmp / "cwd0").mkdir()
    job.write(launch={"cwd": str(job.tmp / "cwd{node_rank}")})  # n2's directory does not exist
    result = job.restart()
    assert result.outcome is Outcome.FAILED
    status, detail = step_results(result)["launch"]
    assert status == "failed"
    assert "n2: started 0 process(es)" in detail and "No such file or directory" in detail
    assert "what started was stopped again" in detail
    assert step_results(result)["wait_running"][0] == "skipped"
    assert not job.processes()


def test_a_program_that_does_not_exist_fails_the_launch(job: Job) -> None:
    job.write(launch={"command": [str(job.tmp / "no-such-trainer"), "--tag", job.tag]})
    result = job.restart()
    assert result.outcome is Outcome.FAILED
    assert "no-such-trainer" in step_results(result)["launch"][1]


# ------------------------------------------------------------------------------ plan, dry run, audit
def test_dry_run_shows_the_plan_and_starts_and_records_nothing(job: Job) -> None:
    shown: list[Plan] = []
    req = RestartRequest(job="hb", inventory=job.inventory, state=job.state, dry_run=True)
    result = run_restart(req, confirm=None, show=shown.append)
    assert result.outcome is Outcome.DRY_RUN and shown == [result.plan]
    assert [s.kind for s in result.plan.steps] == [
        StepKind.STOP_JOB,
        StepKind.PICK_CHECKPOINT,
        StepKind.LAUNCH,
        StepKind.WAIT_RUNNING,
    ]
    assert result.plan.targets == ("n1", "n2")
    assert "4 process(es), one per rank, on 2 host(s)" in result.plan.steps[2].describe()
    # run_restart has returned: a launch would have left its log files and its detached ranks by now
    # (the launch probe opens each log and starts each process before it answers)
    assert not job.logs.exists() and not job.processes() and not job.beats.exists()
    with Store.open(job.state) as store:
        assert store.audit() == []


def test_nobody_to_confirm_is_a_usage_error_and_starts_nothing(job: Job) -> None:
    req = RestartRequest(job="hb", inventory=job.inventory, state=job.state)
    with pytest.raises(UsageError, match="--yes"):
        run_restart(req, confirm=None)
    assert not job.processes()


def test_every_step_is_an_audit_record(job: Job) -> None:
    result = job.restart(reason="after eviction")
    with Store.open(job.state) as store:
        (record,) = store.audit()
    assert record.action == "restart" and record.status == "applied" and record.reason == "after eviction"
    assert record.targets == ("n1", "n2") and record.id == result.audit_id
    assert [s.status for s in record.steps] == ["noop", "noop", "done", "noop"]
    assert record.steps[2].description.startswith("launch job hb")


def test_a_job_step_without_its_runner_fails_instead_of_passing(job: Job) -> None:
    plan = Plan("restart", ("n1",), (Step(StepKind.LAUNCH, "hb", "local", job="hb"),), "r", "inventory")
    inv = load_inventory(job.inventory)
    with Store.open(job.state) as store:
        from robustctl.schedulers import make_scheduler

        applied = apply_plan(plan, make_scheduler(inv.scheduler, inventory=inv, store=store), store)
    assert applied.status == "failed" and "no runner" in applied.results[0].detail


# ----------------------------------------------------------------------------------- bad input, CLI
def cli(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, err.getvalue()


def test_a_job_without_launch_is_refused_with_exit_78_in_one_line(job: Job) -> None:
    code, err = cli("restart", "--job", "plain", "-i", str(job.inventory), "--state", str(job.state), "--yes")
    assert code == 78, err
    assert "jobs.plain: no launch: section" in err and len(err.strip().splitlines()) == 1
    with Store.open(job.state) as store:
        assert store.audit() == []


def test_cli_dry_run_json_is_the_plan(job: Job) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["restart", "--job", "hb", "-i", str(job.inventory), "--state", str(job.state),
                     "--dry-run", "--json", "--from-checkpoint", "7"])  # fmt: skip
    doc = json.loads(out.getvalue())
    assert code == 0 and doc["kind"] == "plan" and doc["action"] == "restart"
    assert [s["kind"] for s in doc["steps"]] == ["stop_job", "pick_checkpoint", "launch", "wait_running"]
    assert "iteration 7, as asked" in doc["steps"][1]["description"]


@pytest.mark.parametrize("value", ["latest", "-1", "1e3", "", "12a", "9" * 14])
def test_bad_from_checkpoint_is_a_usage_error(value: str, job: Job) -> None:
    with pytest.raises(UsageError, match="--from-checkpoint"):
        parse_from_checkpoint(value)
    code, _ = cli("restart", "--job", "hb", "-i", str(job.inventory), "--state", str(job.state),
                  "--from-checkpoint", value, "--dry-run")  # fmt: skip
    assert code == 64


def test_from_checkpoint_values() -> None:
    assert parse_from_checkpoint("latest-complete") == "latest-complete"
    assert parse_from_checkpoint("NONE") == "none"
    assert parse_from_checkpoint("0001200") == 1200


@pytest.mark.parametrize(
    ("launch", "message"),
    [
        ({"command": ["train", "{rnak}"]}, "unknown placeholder {rnak}"),
        ({"command": ["train", "{rank}"], "per": "host"}, "needs per: rank"),
        ({"command": ["train", "{job!r}"]}, "conversions are not supported"),
        ({"command": ["train", "{rank.real}"]}, "unknown placeholder"),
        ({"command": ["train", "{}"]}, "unknown placeholder {}"),
        ({"command": ["train", "{rank:q}"]}, "Unknown format code"),
        ({"command": ["train", "{rank"]}, "bad template"),
        ({"command": ["train"], "env": {"RANK": "3"}}, "set by the launcher"),
        ({"command": ["train"], "env": {"A-B": "3"}}, "not a valid name"),
        ({"command": ["train"], "cwd": "/x/{host}"}, "cwd: unknown placeholder {host}"),
        ({"command": []}, "at least 1 item"),
        ({"command": ["train"], "stop_grace_s": 0}, "greater than 0"),
        ({"command": ["train"], "master_port": 70000}, "less than or equal to 65535"),
    ],
)
def test_bad_launch_sections_are_config_errors_with_file_and_line(
    launch: dict[str, Any], message: str, tmp_path: Path
) -> None:
    j = Job(tmp_path)
    j.write(launch=launch)
    data = yaml.safe_load(j.inventory.read_text())
    data["jobs"]["hb"]["launch"] = launch
    j.inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError, match=rf"^{j.inventory}:\d+: jobs\.hb\.launch") as err:
        load_inventory(j.inventory)
    assert message in str(err.value)


def test_launch_without_process_is_refused_at_load(tmp_path: Path) -> None:
    j = Job(tmp_path)
    data = yaml.safe_load(j.write().read_text())
    del data["jobs"]["hb"]["process"]
    j.inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError, match=r"jobs\.hb: launch: needs a process: section"):
        load_inventory(j.inventory)


# --------------------------------------------------------------------------- scheduler back ends
class FakeSlurm:
    """Enough of the Slurm back end for a restart: requeue, job state, host list."""

    name = "slurm"

    def __init__(self, states: list[str]) -> None:
        self.states = states
        self.requeued: list[str] = []

    def requeue(self, job: str) -> OpResult:
        self.requeued.append(job)
        return OpResult("42", "requeue", True, "scontrol requeue 42")

    def job_hosts(self, job: str) -> list[str]:
        return ["n1", "n2"]

    def job(self, job: str) -> Any:
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]

        class Info:
            job_id = "42"
            running = state == "RUNNING"
            finished = state in ("FAILED", "CANCELLED")
            reason = "None"

        info = Info()
        info.state = state  # type: ignore[attr-defined]
        return info


def slurm_ctx(job: Job, sched: FakeSlurm, store: Store) -> ActionContext:
    inv = load_inventory(job.inventory)
    return ActionContext(inv, inv.scheduler, inv.policy, store, sched)  # type: ignore[arg-type]


def test_slurm_restart_is_a_requeue_then_waits_until_the_job_runs(job: Job) -> None:
    sched = FakeSlurm(["PENDING", "PENDING", "RUNNING"])
    with Store.open(job.state) as store:
        ctx = slurm_ctx(job, sched, store)
        spec = RestartSpec(job="hb", reason="r")
        plan = plan_restart(spec, ctx)
        assert [s.kind for s in plan.steps] == [StepKind.REQUEUE, StepKind.WAIT_RUNNING]
        with contextlib.closing(TransportPool()) as pool:
            runners = restart_runners(ctx, spec, pool, sleep=lambda s: None)
            applied = apply_plan(plan, sched, store, runners=runners)  # type: ignore[arg-type]
    assert applied.status == "applied" and sched.requeued == ["hb"]
    assert "Slurm job 42 RUNNING" in applied.results[1].detail


def test_slurm_restart_reports_a_job_that_never_runs(job: Job) -> None:
    sched = FakeSlurm(["FAILED"])
    with Store.open(job.state) as store:
        ctx = slurm_ctx(job, sched, store)
        spec = RestartSpec(job="hb", reason="r")
        with contextlib.closing(TransportPool()) as pool:
            runners = restart_runners(ctx, spec, pool, sleep=lambda s: None)
            applied = apply_plan(plan_restart(spec, ctx), sched, store, runners=runners)  # type: ignore[arg-type]
    assert applied.status == "failed" and "is FAILED: it did not run" in applied.results[1].detail


def test_a_checkpoint_choice_the_scheduler_cannot_honour_is_refused(job: Job) -> None:
    with Store.open(job.state) as store:
        ctx = slurm_ctx(job, FakeSlurm(["RUNNING"]), store)
        with pytest.raises(UsageError, match="cannot take effect on scheduler.kind slurm"):
            plan_restart(RestartSpec(job="hb", want=12), ctx)


def test_kubernetes_restart_deletes_the_pods_and_says_it_cannot_wait(job: Job, tmp_path: Path) -> None:
    from robustctl.testing.fake_kube import FakeKubeApiServer

    with FakeKubeApiServer() as api:
        for i, node in enumerate(("n1", "n2")):
            api.add_node(node, labels={"robustctl.io/job": "hb"}, address=f"127.0.0.{i + 2}")
        api.add_job("default", "hb", completions=2, labels={"robustctl.io/job": "hb"},
                    node_selector={"robustctl.io/job": "hb"})  # fmt: skip
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        data = yaml.safe_load(job.inventory.read_text())
        data["scheduler"] = {"kind": "kubernetes", "kubernetes": {"kubeconfig": str(kubeconfig)}}
        job.inventory.write_text(yaml.safe_dump(data, sort_keys=False))
        result = job.restart()
        assert result.outcome is Outcome.APPLIED, result.applied.results if result.applied else result
        assert [s.kind for s in result.plan.steps] == [StepKind.REQUEUE]
        assert any("cannot tell when the recreated pods train" in n for n in result.plan.notes)
        assert "deleted 2 pod(s)" in result.applied.results[0].detail
        code, err = cli("stop", "--job", "hb", "-i", str(job.inventory), "--state", str(job.state), "--yes")
        assert code == 78 and "stop the job through the scheduler" in err


def test_the_readme_launch_example_loads_and_plans(tmp_path: Path) -> None:
    text = (REPO / "README.md").read_text()
    block = re.search(r"### Restart.*?```yaml\n(.*?)```", text, re.S)
    assert block
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        "gpus_per_host: 8\nhosts:\n  - name: node[001-064]\n    address: 127.0.0.[2-65]\n" + block.group(1)
    )
    result = run_restart(RestartRequest(job="llama70b", inventory=inv, state=tmp_path / "s.db", dry_run=True))
    assert result.outcome is Outcome.DRY_RUN
    launch = result.plan.steps[2].describe()
    assert (
        "64 process(es), one per host" in launch and "/var/log/train/llama70b/llama70b-node0000.log" in launch
    )


def test_restart_after_a_standby_replaced_a_host_launches_on_the_new_list_and_stops_the_old(job: Job) -> None:
    data = yaml.safe_load(job.inventory.read_text())
    data["hosts"].append({"name": "spare1", "transport": "local", "state": "standby"})
    job.inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    with Store.open(job.state) as store:
        store.set_job_hosts("hb", ["spare1", "n2"])  # what `standby activate --for n1` records
    result = job.restart()
    assert result.outcome is Outcome.APPLIED, result.applied
    assert result.plan.targets == ("spare1", "n2")
    assert "former host(s) n1" in result.plan.steps[0].describe()
    steps = step_results(result)
    assert "former host(s): n1: nothing of the job running" in steps["stop_job"][1]
    assert steps["launch"][1].startswith("spare1: started 2 process(es)")
    assert job.heartbeats(wait_for=4)["rank0"]["env"]["NODE_RANK"] == "0"


def _shard_bytes(rank: int, iteration: int) -> bytes:
    """The content of rank ``rank``'s shard of ``iteration``: its own bytes, so a copy can be checked."""
    return bytes((rank * 31 + iteration + i) % 251 for i in range(3000 + 7 * rank))


def _save(root: Path, host: str, iteration: int, ranks: Sequence[int], *, tracker: bool = True) -> None:
    """Megatron-layout shards ``iter_NNNNNNN/rank_RRRRR.pt`` of ``ranks`` in ``root/host``."""
    d = root / host / f"iter_{iteration:07d}"
    d.mkdir(parents=True, exist_ok=True)
    for r in ranks:
        (d / f"rank_{r:05d}.pt").write_bytes(_shard_bytes(r, iteration))
    if tracker:
        (root / host / "latest_checkpointed_iteration.txt").write_text(str(iteration))


def test_restart_starts_from_the_newest_complete_checkpoint_not_the_torn_one(job: Job) -> None:
    ckpt = job.tmp / "ckpt"
    job.write(
        launch={"env": {"HB_EXTRA": "ckpt-{ckpt_iter}"}},
        ckpt={"dir": str(ckpt) + "/{host}"},
    )
    for it in (20, 40):
        _save(ckpt, "n1", it, range(0, 2))
    _save(ckpt, "n2", 20, range(2, 4))
    _save(ckpt, "n2", 40, range(2, 3))  # rank 3's shard of iteration 40 is missing: a torn save
    result = job.restart()
    assert result.outcome is Outcome.APPLIED, result.applied.results if result.applied else result
    beats = job.heartbeats(wait_for=4)
    assert {beats[f"rank{r}"]["env"]["HB_EXTRA"] for r in range(4)} == {"ckpt-20"}
    _status, detail = step_results(result)["pick_checkpoint"]
    assert "tracker says 40" in detail and "rank 3" in detail and "20" in detail, detail


def test_restart_with_no_complete_checkpoint_is_refused_before_anything_stops(job: Job) -> None:
    ckpt = job.tmp / "ckpt"
    job.write(ckpt={"dir": str(ckpt) + "/{host}"})
    assert job.restart(from_checkpoint="none").outcome is Outcome.APPLIED
    before = {p.pid for p in job.processes()}
    assert before
    _save(ckpt, "n1", 10, range(0, 2))  # ranks 2 and 3 never saved
    (ckpt / "n2").mkdir()
    argv = ["restart", "--job", "hb", "-i", str(job.inventory), "--state", str(job.state), "--yes", "-q"]
    code = main(argv)
    assert code == ExitCode.CRITICAL
    assert {p.pid for p in job.processes()} == before  # nothing stopped, nothing started


def _git(cwd: Path, *args: str) -> str:
    import os
    import subprocess

    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    out = subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True, env=env)
    return out.stdout.strip()


def _code_trees(job: Job) -> list[str]:
    """A repository with commits v1 and v2 and one clone per host (``code-n1``, ``code-n2``) at v1."""
    origin = job.tmp / "origin"
    origin.mkdir()
    _git(origin, "init", "-q", "-b", "main")
    commits = []
    for text in ("v1", "v2"):
        (origin / "train.py").write_text(text)
        _git(origin, "add", "train.py")
        _git(origin, "commit", "-q", "-m", text)
        commits.append(_git(origin, "rev-parse", "HEAD"))
    for host in ("n1", "n2"):
        _git(job.tmp, "clone", "-q", str(origin), f"code-{host}")
        _git(job.tmp / f"code-{host}", "checkout", "-q", "--detach", commits[0])
    return commits


def test_restart_applies_a_staged_update_on_every_host_and_records_the_version(job: Job) -> None:
    from robustctl.commands.update import UpdateStageRequest, run_update_stage
    from robustctl.jobcode.records import ChangeState, changes, versions

    commits = _code_trees(job)
    job.write(code={"path": str(job.tmp) + "/code-{host}", "stable_after_steps": 5})
    staged = run_update_stage(
        UpdateStageRequest(job="hb", ref=commits[1], reason="v2", inventory=job.inventory, state=job.state),
        confirm=always,
    )
    assert staged.exit_code == ExitCode.OK
    result = job.restart(from_checkpoint="none")
    assert result.outcome is Outcome.APPLIED, result.applied.results if result.applied else result
    assert [s.kind.value for s in result.plan.steps][:2] == ["stop_job", "apply_update"]
    for host in ("n1", "n2"):
        assert _git(job.tmp / f"code-{host}", "rev-parse", "HEAD") == commits[1]
    with Store.open(job.state) as store:
        assert [c.state for c in changes(store, "hb")] == [ChangeState.APPLIED]
        assert [v.commit for v in versions(store, "hb")] == [commits[1]]
    again = job.restart(from_checkpoint="none")  # nothing pending any more: no update step
    assert "apply_update" not in [s.kind.value for s in again.plan.steps]


def test_update_apply_restarts_only_when_the_lazy_change_is_due(job: Job) -> None:
    from robustctl.commands.update import (
        UpdateApplyRequest,
        UpdateStageRequest,
        run_update_apply,
        run_update_stage,
    )
    from robustctl.jobcode.records import ChangeState, changes

    commits = _code_trees(job)
    job.write(code={"path": str(job.tmp) + "/code-{host}", "stable_after_steps": 5, "update_window_s": 3600})
    common = {"inventory": job.inventory, "state": job.state}
    assert run_update_apply(UpdateApplyRequest(job="hb", **common)).commit is None  # nothing pending
    run_update_stage(UpdateStageRequest(job="hb", ref=commits[1], reason="v2", **common), confirm=always)
    early = run_update_apply(UpdateApplyRequest(job="hb", **common), confirm=always)
    assert (
        early.commit == commits[1]
        and not early.due
        and not early.restarted
        and early.exit_code == ExitCode.OK
    )
    assert early.due_at is not None and early.due_at > time.time() + 3000
    assert not job.processes() and _git(job.tmp / "code-n1", "rev-parse", "HEAD") == commits[0]
    now = run_update_apply(UpdateApplyRequest(job="hb", now=True, **common), confirm=always)
    assert now.restarted and not now.due and now.exit_code == ExitCode.OK, now.restart
    assert len(job.heartbeats(wait_for=4)) >= 4
    for host in ("n1", "n2"):
        assert _git(job.tmp / f"code-{host}", "rev-parse", "HEAD") == commits[1]
    # a change staged under a 1 s window is forced by the first run after it
    job.write(code={"path": str(job.tmp) + "/code-{host}", "stable_after_steps": 5, "update_window_s": 1})
    back = run_update_stage(
        UpdateStageRequest(job="hb", ref=commits[0], reason="back", **common), confirm=always
    )
    assert back.change is not None and back.change.due_at == back.change.staged_at + 1
    deadline = time.monotonic() + 30
    while time.time() <= back.change.due_at:  # the store's clock: until the window has passed
        assert time.monotonic() < deadline
        time.sleep(0.05)
    due = run_update_apply(UpdateApplyRequest(job="hb", **common), confirm=always)
    assert due.due and due.restarted and due.exit_code == ExitCode.OK, due.restart
    for host in ("n1", "n2"):
        assert _git(job.tmp / f"code-{host}", "rev-parse", "HEAD") == commits[0]
    with Store.open(job.state) as store:
        assert [c.state for c in changes(store, "hb")] == [ChangeState.APPLIED, ChangeState.FORCED]


# ---- local checkpoint directories: shards staged onto a warm standby --------------------------------


def test_restart_on_a_standby_copies_the_shards_its_ranks_load_from_the_backup_peer(job: Job) -> None:
    """n1 (ranks 0-1) was replaced by spare1. Each host kept its own shards and a backup of the other
    host's (ByteRobust §6.3): iteration 30 is complete on the new host list, and the restart copies
    ranks 0 and 1's shards from n2 onto spare1, whole and renamed into place, before it launches."""
    ckpt = job.tmp / "ckpt"
    job.write(launch={"env": {"HB_EXTRA": "ckpt-{ckpt_iter}"}}, ckpt={"dir": str(ckpt) + "/{host}"})
    data = yaml.safe_load(job.inventory.read_text())
    data["hosts"].append({"name": "spare1", "transport": "local", "state": "standby"})
    job.inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    _save(ckpt, "n1", 30, [0, 1, 2, 3])
    _save(ckpt, "n2", 30, [2, 3, 0, 1])
    (ckpt / "spare1").mkdir()
    with Store.open(job.state) as store:
        store.set_job_hosts("hb", ["spare1", "n2"])
    dry = run_restart(RestartRequest(job="hb", inventory=job.inventory, state=job.state, dry_run=True))
    kinds = [s.kind.value for s in dry.plan.steps]
    assert kinds.index("pick_checkpoint") < kinds.index("stage_checkpoint") < kinds.index("launch"), kinds
    stage = dry.plan.steps[kinds.index("stage_checkpoint")].describe()
    assert stage.startswith("stage the checkpoint's shards of job hb via robustctl: onto the hosts"), stage
    assert "rank 0's shard (rank_00000.pt" in stage, stage
    assert not (ckpt / "spare1" / "iter_0000030").exists()  # a dry run copies nothing

    result = job.restart()
    assert result.outcome is Outcome.APPLIED, result.applied
    status, detail = step_results(result)["stage_checkpoint"]
    assert status == "done" and "copied 2 shard(s) of ranks 0-1 to spare1" in detail, detail
    for r in (0, 1):
        assert (ckpt / "spare1" / "iter_0000030" / f"rank_{r:05d}.pt").read_bytes() == _shard_bytes(r, 30)
    assert sorted(p.name for p in (ckpt / "spare1" / "iter_0000030").iterdir()) == [
        "rank_00000.pt",
        "rank_00001.pt",
    ]  # no temporary file left
    assert (ckpt / "spare1" / "latest_checkpointed_iteration.txt").read_text() == "30"
    beats = job.heartbeats(wait_for=4)
    assert {beats[f"rank{r}"]["env"]["HB_EXTRA"] for r in range(4)} == {"ckpt-30"}

    again = job.restart()  # spare1 now holds its shards: nothing to copy
    assert step_results(again)["stage_checkpoint"] == ("noop", "every host holds the shards it loads")


def test_a_shard_copy_that_fails_launches_nothing_and_leaves_no_partial_file(job: Job) -> None:
    ckpt = job.tmp / "ckpt"
    job.write(ckpt={"dir": str(ckpt) + "/{host}"})
    data = yaml.safe_load(job.inventory.read_text())
    data["hosts"].append({"name": "spare1", "transport": "local", "state": "standby"})
    job.inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    _save(ckpt, "n2", 30, [2, 3, 0, 1])
    (ckpt / "spare1").mkdir()
    (ckpt / "spare1" / "iter_0000030").write_text("a file where the iteration's directory must go")
    with Store.open(job.state) as store:
        store.set_job_hosts("hb", ["spare1", "n2"])
    result = job.restart()
    assert result.outcome is Outcome.FAILED, result
    status, detail = step_results(result)["stage_checkpoint"]
    assert status == "failed" and "not staged" in detail and "spare1" in detail, detail
    assert step_results(result)["launch"][0] == "skipped"
    assert job.processes() == []
    assert sorted(p.name for p in (ckpt / "spare1").iterdir()) == ["iter_0000030"]
