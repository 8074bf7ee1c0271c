"""Playbook files: each shipped playbook validates and its dry run renders; every class of bad input is
one line FILE:LINE naming the problem (exit 78 from ``playbook validate``)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from robustctl.cli.main import main
from robustctl.commands.playbook import run_playbook_validate
from robustctl.playbooks.catalog import catalog, find_playbook, shipped_names
from robustctl.playbooks.engine import dry_run
from robustctl.playbooks.kinds import KINDS
from robustctl.playbooks.schema import PlaybookError, parse_playbook

ROOT = Path(__file__).resolve().parent.parent.parent
SHIPPED = ("fail-slow", "gpu-lost", "hang", "job-failed", "nan-loss")

INVENTORY = """\
gpus_per_host: 2
hosts:
  - name: node[01-04]
    address: 127.0.0.[2-5]
  - name: spare1
    address: 127.0.0.10
    state: standby
jobs:
  llama:
    hosts: node[01-04]
    layout: {tp: 2, pp: 2, dp: 2}
    process: {match: train.py}
policy: {max_cluster_fraction: 1.0, max_job_fraction: 1.0, circuit_breaker_fraction: 1.0}
"""

GOOD = """\
name: good
params:
  job: {required: true}
steps:
  - id: diag
    kind: diagnose
    on_failure: continue
  - id: evict
    kind: evict
    when: steps.diag.exit_code == 2 and len(steps.diag.suspects) > 0
    args: {hosts_from: steps.diag.suspects}
"""


def errors_of(text: str) -> list[str]:
    with pytest.raises(PlaybookError) as exc:
        parse_playbook(textwrap.dedent(text), "pb.yaml")
    return list(exc.value.errors)


def test_shipped_playbooks_are_the_five_of_the_issue() -> None:
    assert [n.removesuffix(".yaml") for n in shipped_names()] == list(SHIPPED)
    assert sorted(p.name for p in (ROOT / "playbooks").glob("*.yaml")) == shipped_names()


@pytest.mark.parametrize("name", SHIPPED)
def test_each_shipped_playbook_validates(name: str) -> None:
    pb = find_playbook(name)
    assert pb.name == name and "job" in pb.spec.params
    assert run_playbook_validate(ROOT / "playbooks" / f"{name}.yaml").ok
    assert pb.destructive_steps()  # each of them acts: evict at least
    assert "evict" in {s.kind for s in pb.spec.steps}


@pytest.mark.parametrize("name", SHIPPED)
def test_each_shipped_playbook_dry_run_renders(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    argv = ["playbook", "run", name, "--job", "llama", "-i", str(inv), "--state", str(tmp_path / "s.db")]
    argv += ["--param", "hosts=node02"] if name == "gpu-lost" else []
    code = main([*argv, "--dry-run", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    pb = find_playbook(name)
    assert doc["kind"] == "playbook-dry-run" and [s["step"] for s in doc["steps"]] == [
        s.id for s in pb.spec.steps
    ]
    for s in pb.spec.steps:
        assert f"{s.id} ({s.kind})" in err
    first = doc["steps"][0]
    if name == "gpu-lost":  # reads only params: planned on the job now, nothing applied
        assert first["now"]["kind"] == "plan" and first["now"]["targets"] == ["node02"]
        assert "now: evict: 1 target(s) node02" in err
    elif first["kind"] == "diagnose":
        assert first["now"]["kind"] == "diagnose-plan"
    later = [s for s in doc["steps"] if s["reads"]]
    assert later and all(s["now"] is None and s["note"].startswith("depends on") for s in later)
    assert not (tmp_path / "s.db").exists() or main(["audit", "--state", str(tmp_path / "s.db")]) == 0


def test_job_failed_is_the_fig5_ladder() -> None:
    pb = find_playbook("job-failed")
    tree = {s.step: dict(s.branches) for s in dry_run(pb, {}, plan_now=False)}
    assert tree["restart"]["skipped"] == "reattempt"  # nothing found → reattempt
    assert tree["check"]["failed"] == "rollback"  # fails again → rollback
    assert tree["check_rollback"]["failed"] == "replay"  # still failing → replay-sdc
    assert tree["replay"]["done"] == "evict_sdc"  # → evict


def test_show_renders_the_tree(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["playbook", "show", "hang", "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["kind"] == "playbook-show" and doc["steps"][1]["branches"]["skipped"] == "standby"
    assert "when: steps.stacks.exit_code == 2" in err


def test_list_names_every_shipped_playbook(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["playbook", "list", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in doc["playbooks"]] == list(SHIPPED)
    assert all(p["origin"] == "shipped" for p in doc["playbooks"])


def test_inventory_playbook_overrides_the_shipped_one(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text(GOOD.replace("name: good", "name: hang"))
    (tmp_path / "broken.yaml").write_text("name: broken\nsteps: []\n")
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY + "playbooks: [mine.yaml, broken.yaml]\n")
    entries = catalog(inv)
    mine = [e for e in entries if e.origin == "inventory"]
    assert mine[0].name == "hang" and mine[0].overrides and mine[1].name is None
    assert "broken.yaml:2" in mine[1].error[0]
    assert find_playbook("hang", inv).source == str(tmp_path / "mine.yaml")


# --- bad input: each class is one line FILE:LINE --------------------------------------------------------


BAD = {
    "unknown kind": (
        GOOD.replace("kind: evict", "kind: evcit"),
        "pb.yaml:9: steps[1].kind: unknown step kind 'evcit'",
    ),
    "duplicate id": (
        GOOD.replace("id: evict", "id: diag"),
        "pb.yaml:8: steps[1].id: duplicate step id 'diag'",
    ),
    "goto an unknown step": (
        GOOD.replace("on_failure: continue", "on_failure: {goto: nowhere}"),
        "pb.yaml:7: steps[0].on_failure.goto: no step called 'nowhere'",
    ),
    "next an unknown step": (
        GOOD.replace("on_failure: continue", "next: nowhere"),
        "pb.yaml:7: steps[0].next: no step called 'nowhere'",
    ),
    "when does not parse": (
        GOOD.replace("when: steps.diag.exit_code == 2 and", "when: steps.diag.exit_code === 2 and"),
        "pb.yaml:10: steps[1].when: does not parse",
    ),
    "when names an unknown step": (
        GOOD.replace("steps.diag.exit_code", "steps.diagnose.exit_code"),
        "pb.yaml:10: steps[1].when: names step 'diagnose', which is not a step of this playbook",
    ),
    "when names a later step": (
        GOOD.replace(
            "    on_failure: continue\n", "    on_failure: continue\n    when: steps.evict.exit_code == 0\n"
        ),
        "pb.yaml:8: steps[0].when: names step 'evict', which cannot have run before step 'diag'",
    ),
    "args expression names an unknown step": (
        GOOD.replace("hosts_from: steps.diag.suspects", "hosts_from: steps.stacks.suspects"),
        "pb.yaml:11: steps[1].args.hosts_from: names step 'stacks'",
    ),
    "args unknown for the kind": (
        GOOD.replace("hosts_from: steps.diag.suspects", "hosts_form: steps.diag.suspects"),
        "pb.yaml:11: steps[1].args.hosts_form: unknown key 'hosts_form'",
    ),
    "args out of range": (
        GOOD.replace("kind: diagnose", "kind: diagnose\n    args: {level: 9}"),
        "pb.yaml:7: steps[0].args.level: Input should be less than or equal to 4",
    ),
    "unknown key": (
        GOOD.replace("    on_failure: continue", "    on_failur: continue"),
        "pb.yaml:7: steps[0].on_failur: unknown key 'on_failur'",
    ),
    "a cycle": (
        GOOD.replace("args: {hosts_from: steps.diag.suspects}", "args: {hosts: node01}\n    next: diag"),
        "pb.yaml:12: steps[1].next: cycle in the steps: diag → evict → diag",
    ),
    "a goto to itself": (
        GOOD.replace("on_failure: continue", "on_failure: {goto: diag}"),
        "pb.yaml:7: steps[0].on_failure.goto: a step cannot go to itself (use retries)",
    ),
    "retries unbounded": (
        GOOD.replace("on_failure: continue", "retries: 1000"),
        "pb.yaml:7: steps[0].retries: Input should be less than or equal to 10",
    ),
    "no job parameter": (
        GOOD.replace("params:\n  job: {required: true}\n", ""),
        "pb.yaml:7: steps[1].kind: kind evict acts on a job: declare the 'job' parameter",
    ),
    "method call": (
        GOOD.replace("len(steps.diag.suspects) > 0", "steps.diag.suspects.count(1) > 0"),
        "pb.yaml:10: steps[1].when: only these functions can be called",
    ),
    "bad step id": (
        GOOD.replace("id: evict", "id: Evict-Now"),
        "pb.yaml:8: steps[1].id: String should match",
    ),
    "YAML syntax": ("name: x\nsteps: [\n", "pb.yaml:3: YAML syntax error"),
    "duplicate key": (
        GOOD.replace("    on_failure: continue", "    kind: stacks"),
        "pb.yaml:7: duplicate key 'kind'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_with_file_and_line(case: str) -> None:
    text, expected = BAD[case]
    errors = errors_of(text)
    assert any(e.startswith(expected) for e in errors), errors
    assert all("\n" not in e and e.startswith("pb.yaml") for e in errors)


def test_every_error_is_reported_not_only_the_first() -> None:
    text = (
        GOOD.replace("kind: evict", "kind: evcit")
        .replace("id: diag", "id: d1")
        .replace("on_failure: continue", "on_failure: {goto: nowhere}")
    )
    errors = errors_of(text)
    assert len(errors) == 2 and errors[0].startswith("pb.yaml:7") and errors[1].startswith("pb.yaml:9")


def test_validate_exits_78_with_each_error_on_its_own_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(GOOD.replace("kind: evict", "kind: evcit").replace("on_failure: continue", "next: nowhere"))
    assert main(["playbook", "validate", str(f)]) == 78
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 2 and lines[0].startswith(f"{f}:7:") and lines[1].startswith(f"{f}:9:")
    f.write_text(GOOD)
    assert main(["playbook", "validate", str(f), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


def test_validate_refuses_special_files_and_huge_files(tmp_path: Path) -> None:
    assert run_playbook_validate(Path("/dev/zero")).exit_code == 78
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * 300_000)
    r = run_playbook_validate(big)
    assert not r.ok and "limit" in r.errors[0]


def test_run_of_a_broken_playbook_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(GOOD.replace("kind: evict", "kind: evcit"))
    assert main(["playbook", "run", str(f), "--job", "x", "--dry-run"]) == 78
    assert f"{f}:9: steps[1].kind: unknown step kind" in capsys.readouterr().err


def test_every_registered_kind_has_an_args_model_and_summary() -> None:
    assert set(KINDS) >= {
        "diagnose", "stacks", "evict", "standby-activate", "restart", "rollback", "replay-sdc",
        "wait-for-progress", "notify",
    }  # fmt: skip
    destructive = {k for k, v in KINDS.items() if v.destructive}
    assert destructive == {"evict", "standby-activate", "restart", "stop", "rollback"}
    for k in KINDS.values():
        assert k.summary and k.args.model_config.get("extra") == "forbid"


def test_restart_rollback_and_wait_steps_build_the_requests_of_their_library_calls(tmp_path: Path) -> None:
    from robustctl.commands.progress import WaitProgressRequest
    from robustctl.commands.restart import RestartRequest
    from robustctl.commands.update import RollbackRequest
    from robustctl.playbooks.kinds import StepEnv, kind

    env = StepEnv(
        tmp_path / "inv.yaml", tmp_path / "s.db", {"job": "llama"}, {}, timeout_s=120.0, playbook="p"
    )
    wait = kind("wait-for-progress")
    req = wait.build(wait.args.model_validate({"min_new_steps": 3, "timeout_s": 900, "poll_s": 0.5}), env)
    assert req == WaitProgressRequest(
        job="llama", min_new_steps=3, timeout_s=120.0, poll_s=0.5, inventory=env.inventory, state=env.state
    )
    restart = kind("restart")
    req = restart.build(restart.args.model_validate({"from_checkpoint": "40"}), env)
    assert isinstance(req, RestartRequest) and (req.job, req.from_checkpoint) == ("llama", "40")
    rollback = kind("rollback")
    req = rollback.build(rollback.args.model_validate({"to": "v1"}), env)
    assert isinstance(req, RollbackRequest) and (req.job, req.to, req.state) == ("llama", "v1", env.state)
    from robustctl.commands.restart import StopRequest

    stop = kind("stop")
    req = stop.build(stop.args.model_validate({"reason": "before stop-time checks"}), env)
    assert isinstance(req, StopRequest) and (req.job, req.state) == ("llama", env.state)
    assert "before stop-time checks" in req.reason


def test_a_job_the_inventory_does_not_hold_is_a_usage_error_before_any_step(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from robustctl.cli.main import main

    for extra in (["--dry-run"], ["--yes"]):
        assert main(["playbook", "run", "hang", "--job", "[/]nojob", *extra, "-q"]) == 64
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "unknown job '[/]nojob'" in err[0], err
