"""The Kubernetes back end, driven through the real ``kubernetes`` client against the fake API server.

The fake (robustctl.testing.fake_kube) keeps Nodes, Pods, an Indexed Job and PodDisruptionBudgets in
memory with the API's JSON shapes and status codes, and plays the Job controller and the scheduler, so
a drain, a PDB-refused eviction and a standby activation are followed end to end.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from robustctl.config import KubernetesSettings, SchedulerSettings
from robustctl.errors import ConfigError
from robustctl.schedulers import make_scheduler
from robustctl.schedulers.base import NodeState, SchedulerError
from robustctl.schedulers.kubernetes import REASON_ANNOTATION, Kubernetes, create, label_value
from robustctl.store import Store
from robustctl.testing.fake_kube import INDEX_LABEL, FakeKubeApiServer

JOB = "llama"
JOB_LABEL = "robustctl.io/job"
NODES = [f"node{i:02d}" for i in range(1, 9)]
STANDBYS = ["node09", "node10"]


@pytest.fixture
def kube() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        for i, name in enumerate(NODES + STANDBYS):
            labels = {JOB_LABEL: JOB} if name in NODES else {}
            server.add_node(name, labels=labels, address=f"127.0.0.{i + 2}")
        server.add_job("default", JOB, completions=8, labels={JOB_LABEL: JOB}, node_selector={JOB_LABEL: JOB})
        for name in NODES + STANDBYS:  # a device plugin on every node: drain leaves DaemonSet pods alone
            server.add_pod(
                "kube-system",
                f"nvidia-device-plugin-{name}",
                node=name,
                owner_kind="DaemonSet",
                owner_name="nvidia-device-plugin",
                tolerations=[{"operator": "Exists"}],
            )
        yield server


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "state.db")
    yield s
    s.close()


def settings(kube: FakeKubeApiServer, tmp_path: Path, timeout_s: float = 5.0, **kw: Any) -> SchedulerSettings:
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    sub = {"kubeconfig": str(kubeconfig), "eviction_retry_s": 0.05, "eviction_timeout_s": 3.0, **kw}
    return SchedulerSettings(kind="kubernetes", timeout_s=timeout_s, kubernetes=KubernetesSettings(**sub))


@pytest.fixture
def k8s(kube: FakeKubeApiServer, tmp_path: Path, store: Store) -> Kubernetes:
    return create(settings(kube, tmp_path), store=store)


def job_pod_on(kube: FakeKubeApiServer, node: str) -> dict[str, Any]:
    pods = [p for p in kube.pods("default", node=node) if p["metadata"]["labels"].get(JOB_LABEL) == JOB]
    assert len(pods) == 1, pods
    return pods[0]


def test_factory_builds_the_back_end_and_reads_node_states(
    kube: FakeKubeApiServer, tmp_path: Path, store: Store
) -> None:
    from robustctl.inventory import resolve_inventory

    inv_file = tmp_path / "inv.yaml"
    inv_file.write_text("hosts:\n  - name: node01\n    address: 127.0.0.2\n")
    sched = make_scheduler(settings(kube, tmp_path), inventory=resolve_inventory(inv_file), store=store)
    assert isinstance(sched, Kubernetes) and sched.name == "kubernetes"
    kube.set_ready("node02", False)
    kube.add_node("node11", unschedulable=True)
    states = sched.state(["node01", "node02", "node11", "nosuch"])
    assert states == {
        "node01": NodeState.ACTIVE,
        "node02": NodeState.DOWN,
        "node11": NodeState.DRAINED,
        "nosuch": NodeState.UNKNOWN,
    }


def test_drain_cordons_taints_labels_and_evicts_through_the_eviction_api(
    kube: FakeKubeApiServer, k8s: Kubernetes
) -> None:
    pod = job_pod_on(kube, "node03")
    rv = kube.node("node03")["metadata"]["resourceVersion"]
    [r] = k8s.drain(["node03"], "xid 79 on GPU 2")
    assert r.changed and r.host == "node03"
    assert "evicted 1 pod(s) (default/" in r.detail

    node = kube.node("node03")
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [
        {"key": "robustctl.io/evicted", "value": "xid-79-on-GPU-2", "effect": "NoSchedule"}
    ]
    assert node["metadata"]["labels"]["robustctl.io/state"] == "evicted"
    assert node["metadata"]["annotations"][REASON_ANNOTATION] == "xid 79 on GPU 2"

    [patch] = kube.requests_to("PATCH", "^/api/v1/nodes/node03$")
    assert patch.content_type == "application/merge-patch+json"
    assert patch.body["metadata"]["resourceVersion"] == rv  # optimistic concurrency
    assert patch.body["spec"]["unschedulable"] is True

    [evict] = kube.requests_to("POST", "/eviction$")
    assert evict.path == f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}/eviction"
    assert evict.body == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod["metadata"]["name"], "namespace": "default"},
    }
    # the job pod is gone from node03 (its replacement is pending: no free node carries the job label);
    # the DaemonSet pod stays
    names = [p["metadata"]["name"] for p in kube.pods(node="node03")]
    assert names == ["nvidia-device-plugin-node03"]
    assert kube.job_placement("default", JOB)[2] is None
    assert k8s.state(["node03"]) == {"node03": NodeState.DRAINED}


def test_drain_again_is_a_noop(kube: FakeKubeApiServer, k8s: Kubernetes) -> None:
    k8s.drain(["node03"], "xid 79")
    before = len(kube.requests)
    [r] = k8s.drain(["node03"], "another reason")
    assert not r.changed and "already drained" in r.detail
    assert not [q for q in kube.requests[before:] if q.method in ("PATCH", "POST", "DELETE")]
    assert kube.node("node03")["spec"]["taints"][0]["value"] == "xid-79"


def test_drain_waits_on_a_disruption_budget_then_evicts(kube: FakeKubeApiServer, k8s: Kubernetes) -> None:
    kube.add_pdb("default", "llama-pdb", match_labels={JOB_LABEL: JOB}, min_available=8)
    now = [0.0]
    pauses: list[float] = []

    def sleep(s: float) -> None:
        """The drain's pause after a refusal, on a fake clock; the budget allows it after the second."""
        pauses.append(s)
        now[0] += s
        if len(pauses) == 2:
            kube.set_pdb("default", "llama-pdb", min_available=7)

    k8s.sleep, k8s.clock = sleep, lambda: now[0]
    [r] = k8s.drain(["node05"], "slow NVLink")
    assert r.changed and "evicted 1 pod(s)" in r.detail and "waited 0.1 s" in r.detail, r.detail
    assert pauses == [0.05, 0.05]  # eviction_retry_s
    attempts = kube.requests_to("POST", "/eviction$")
    assert len(attempts) == 3  # refused (429) twice and retried, then allowed
    assert not [p for p in kube.pods("default", node="node05") if p["metadata"]["labels"].get(JOB_LABEL)]


def test_drain_reports_pods_a_budget_still_refuses_and_stays_cordoned(
    kube: FakeKubeApiServer, tmp_path: Path, store: Store
) -> None:
    k8s = create(settings(kube, tmp_path, eviction_timeout_s=0.4), store=store)
    now = [0.0]  # a fake clock: the pauses, not the machine's speed, spend the 0.4 s

    def sleep(s: float) -> None:
        now[0] += s

    k8s.sleep, k8s.clock = sleep, lambda: now[0]
    kube.add_pdb("default", "llama-pdb", match_labels={JOB_LABEL: JOB}, max_unavailable=0)
    pod = job_pod_on(kube, "node02")["metadata"]["name"]
    with pytest.raises(SchedulerError) as err:
        k8s.drain(["node02"], "ecc")
    msg = str(err.value)
    assert f"default/{pod}" in msg and "PodDisruptionBudget" in msg and "after 0.4 s" in msg
    assert "The disruption budget llama-pdb needs 8 healthy pods and has 8 currently" in msg
    assert kube.node("node02")["spec"]["unschedulable"] is True
    assert job_pod_on(kube, "node02")["metadata"]["name"] == pod  # still there
    assert len(kube.requests_to("POST", "/eviction$")) >= 3
    # once the budget allows it, the same drain finishes the job: no new patch, one more eviction
    kube.delete_pdb("default", "llama-pdb")
    [r] = k8s.drain(["node02"], "ecc")
    assert r.changed and "evicted 1 pod(s)" in r.detail and "cordoned" not in r.detail


def test_noexecute_effect_is_configurable(kube: FakeKubeApiServer, tmp_path: Path, store: Store) -> None:
    k8s = create(settings(kube, tmp_path, evict_taint_effect="NoExecute"), store=store)
    k8s.drain(["node04"], "xid 48")
    [taint] = kube.node("node04")["spec"]["taints"]
    assert taint["effect"] == "NoExecute" and taint["key"] == "robustctl.io/evicted"
    assert taint["timeAdded"]  # set by the API server for NoExecute taints


def test_unknown_node_changes_nothing(kube: FakeKubeApiServer, k8s: Kubernetes) -> None:
    with pytest.raises(SchedulerError, match="no such Node: nosuch"):
        k8s.drain(["node01", "nosuch"], "xid 79")
    assert not kube.requests_to("PATCH", "nodes")
    assert not kube.node("node01")["spec"].get("unschedulable")


def test_hold_standby_then_drain_then_resume(kube: FakeKubeApiServer, k8s: Kubernetes) -> None:
    [r] = k8s.hold_standby(["node09"], "warm standby pool")
    assert r.changed
    node = kube.node("node09")
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [
        {"key": "robustctl.io/standby", "value": "warm-standby-pool", "effect": "NoSchedule"}
    ]
    assert node["metadata"]["labels"]["robustctl.io/state"] == "standby"
    assert k8s.state(["node09"])["node09"] is NodeState.STANDBY
    assert not k8s.hold_standby(["node09"], "again")[0].changed
    # the device-plugin DaemonSet pod tolerates everything and stays
    assert [p["metadata"]["name"] for p in kube.pods(node="node09")] == ["nvidia-device-plugin-node09"]

    k8s.drain(["node09"], "failed its self-check")  # a standby evicted: the standby taint is replaced
    assert [t["key"] for t in kube.node("node09")["spec"]["taints"]] == ["robustctl.io/evicted"]
    assert k8s.state(["node09"])["node09"] is NodeState.DRAINED

    [r] = k8s.resume(["node09"], "repaired")
    assert r.changed and "repaired" in r.detail
    node = kube.node("node09")
    assert "unschedulable" not in node["spec"] and "taints" not in node["spec"]
    assert "robustctl.io/state" not in node["metadata"]["labels"]
    assert REASON_ANNOTATION not in node["metadata"]["annotations"]
    assert k8s.state(["node09"])["node09"] is NodeState.ACTIVE
    assert not k8s.resume(["node09"], "")[0].changed


def test_resume_keeps_other_taints(kube: FakeKubeApiServer, k8s: Kubernetes) -> None:
    kube.add_node("node11", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    k8s.drain(["node11"], "xid 79")
    assert len(kube.node("node11")["spec"]["taints"]) == 2
    k8s.resume(["node11"], "")
    assert kube.node("node11")["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]


def test_job_hosts_follow_pods_in_index_order_and_survive_a_pending_pod(
    kube: FakeKubeApiServer, k8s: Kubernetes, store: Store
) -> None:
    assert k8s.job_hosts(JOB) == NODES
    k8s.drain(["node03"], "xid 79")
    assert kube.job_placement("default", JOB)[2] is None  # recreated, pending
    assert store.job_hosts(JOB) == NODES  # recorded before the eviction
    assert k8s.job_hosts(JOB) == NODES


def test_standby_replaces_an_evicted_node_and_the_pod_follows(
    kube: FakeKubeApiServer, k8s: Kubernetes, store: Store
) -> None:
    k8s.hold_standby(["node09"], "standby")
    k8s.drain(["node03"], "xid 79")
    r = k8s.replace_host(JOB, "node03", "node09")
    assert r.changed
    assert kube.node("node09")["metadata"]["labels"][JOB_LABEL] == JOB
    assert JOB_LABEL not in kube.node("node03")["metadata"]["labels"]
    assert kube.job_placement("default", JOB)[2] is None  # node09 is still a cordoned standby
    k8s.resume(["node09"], "activated")
    expected = [*NODES[:2], "node09", *NODES[3:]]
    assert kube.job_placement("default", JOB) == expected  # the scheduler placed index 2 on node09
    assert k8s.job_hosts(JOB) == expected
    assert store.job_hosts(JOB) == expected
    assert not k8s.replace_host(JOB, "node03", "node09").changed
    with pytest.raises(SchedulerError, match="node04 is already a host"):
        k8s.replace_host(JOB, "node05", "node04")
    with pytest.raises(SchedulerError, match="node10 is not a host of job"):
        k8s.replace_host(JOB, "node10", "node03")


def test_requeue_deletes_the_job_pods_and_the_controller_recreates_them(
    kube: FakeKubeApiServer, k8s: Kubernetes
) -> None:
    before = {p["metadata"]["name"] for p in kube.pods("default")}
    r = k8s.requeue(JOB)
    assert r.changed and "deleted 8 pod(s)" in r.detail
    deletes = kube.requests_to("DELETE", "^/api/v1/namespaces/default/pods/")
    assert {d.path.rsplit("/", 1)[1] for d in deletes} == before
    after = {p["metadata"]["name"] for p in kube.pods("default")}
    assert len(after) == 8 and not after & before
    assert k8s.job_hosts(JOB) == NODES


def test_job_errors(kube: FakeKubeApiServer, k8s: Kubernetes) -> None:
    with pytest.raises(SchedulerError, match="no pod labelled robustctl.io/job=nosuch in namespace default"):
        k8s.job_hosts("nosuch")
    with pytest.raises(SchedulerError, match="no pod labelled"):
        k8s.requeue("nosuch")
    kube.add_pod("default", "stray", node="node09", labels={JOB_LABEL: "other"})
    with pytest.raises(SchedulerError, match=f"default/stray has no integer {INDEX_LABEL}"):
        k8s.job_hosts("other")


def test_pods_per_host_groups_indexes_into_machines(
    kube: FakeKubeApiServer, tmp_path: Path, store: Store
) -> None:
    for i in range(4):  # 2 pods per machine on node09/node10
        kube.add_pod(
            "default", f"tp-{i}", node=STANDBYS[i // 2], labels={JOB_LABEL: "tp", INDEX_LABEL: str(i)}
        )
    k8s = create(settings(kube, tmp_path, pods_per_host=2), store=store)
    assert k8s.job_hosts("tp") == STANDBYS
    k1 = create(settings(kube, tmp_path, pods_per_host=4), store=store)
    with pytest.raises(SchedulerError, match="run on several nodes"):
        k1.job_hosts("tp")


def test_conflict_is_retried_with_a_fresh_read(kube: FakeKubeApiServer, k8s: Kubernetes) -> None:
    kube.fail("PATCH", "/nodes/node06$", 409)
    [r] = k8s.hold_standby(["node06"], "standby")
    assert r.changed and kube.node("node06")["spec"]["unschedulable"] is True
    assert len(kube.requests_to("PATCH", "/nodes/node06$")) == 2
    assert len(kube.requests_to("GET", "/nodes/node06$")) == 2  # read, conflict, read again


def test_a_hung_api_server_times_out(kube: FakeKubeApiServer, tmp_path: Path, store: Store) -> None:
    k8s = create(settings(kube, tmp_path, timeout_s=0.5), store=store)
    kube.hang("GET", "/nodes/node01$", 5)
    with pytest.raises(SchedulerError, match=r"GET nodes/node01: timed out after 0.5 s"):
        k8s.state(["node01"])
    assert len(kube.requests_to("GET", "/nodes/node01$")) == 1  # one attempt: the HTTP layer does not retry


def test_api_errors_name_the_request(
    kube: FakeKubeApiServer, k8s: Kubernetes, tmp_path: Path, store: Store
) -> None:
    kube.fail("POST", "/eviction$", 500)
    with pytest.raises(SchedulerError, match=r"POST namespaces/default/pods/.*/eviction: HTTP 500"):
        k8s.drain(["node07"], "xid 79")
    kube.token = "rotated"
    with pytest.raises(SchedulerError, match="HTTP 401: Unauthorized"):
        k8s.state(["node01"])
    kube.stop()
    with pytest.raises(SchedulerError, match="cannot reach the API server"):
        k8s.state(["node01"])


def test_config_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    s = SchedulerSettings(kind="kubernetes", kubernetes=KubernetesSettings(kubeconfig=str(tmp_path / "nope")))
    with pytest.raises(ConfigError, match="kubeconfig .*nope does not exist"):
        create(s)
    bad = tmp_path / "kc"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    s = SchedulerSettings(kind="kubernetes", kubernetes=KubernetesSettings(kubeconfig=str(bad), context="x"))
    with pytest.raises(ConfigError, match="scheduler.kubernetes: "):
        create(s)


def test_label_value() -> None:
    assert label_value("xid 79: GPU fell off the bus") == "xid-79-GPU-fell-off-the-bus"
    assert label_value("  ") == "unspecified"
    assert label_value("a" * 80) == "a" * 63
    assert label_value("--x--") == "x"
    assert label_value("é ü") == "unspecified"


# ---- the robustctl CLI end to end with scheduler.kind: kubernetes -------------------------------------


def _cli_inventory(tmp_path: Path, kube: FakeKubeApiServer) -> Path:
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        f"""\
gpus_per_host: 2
hosts:
  - name: node[01-08]
    address: 127.0.0.[2-9]
  - name: node[09-10]
    address: 127.0.0.[10-11]
    state: standby
scheduler:
  kind: kubernetes
  timeout_s: 10
  kubernetes: {{kubeconfig: {kubeconfig}, eviction_retry_s: 0.05, eviction_timeout_s: 5}}
policy: {{max_cluster_fraction: 1.0, max_job_fraction: 1.0, circuit_breaker_fraction: 0.9}}
jobs:
  llama:
    hosts: node[01-08]
    layout: {{tp: 2, pp: 4, dp: 2}}
"""
    )
    return inv


def _cli(*args: str) -> tuple[int, str, str]:
    import contextlib
    import io

    from robustctl.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return rc, out.getvalue(), err.getvalue()


def test_cli_over_evicts_a_pp_group_and_activates_a_standby(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    import json

    inv = _cli_inventory(tmp_path, kube)
    common = ["-i", str(inv), "--state", str(tmp_path / "state.db"), "--json"]
    rc, out, err = _cli(
        "evict", "node03", "--job", JOB, "--over-evict", "pp", "--reason", "xid 79", "--dry-run", *common
    )
    assert rc == 0, err
    plan = json.loads(out)
    # PP group of node03 (ranks 4, 5) in tp=2 pp=4 dp=2, Megatron order: ranks {0,4,8,12} and {1,5,9,13}
    assert plan["targets"] == ["node01", "node03", "node05", "node07"]
    assert not kube.requests_to("PATCH", "nodes") and not kube.requests_to("POST", "eviction")

    rc, out, err = _cli(
        "evict", "node03", "--job", JOB, "--over-evict", "pp", "--reason", "xid 79", "--yes", *common
    )
    assert rc == 0, err
    drained = {n for n in NODES + STANDBYS if kube.node(n)["spec"].get("unschedulable")}
    assert drained == {"node01", "node03", "node05", "node07"}
    for n in sorted(drained):
        assert kube.node(n)["spec"]["taints"][0]["key"] == "robustctl.io/evicted"
    evicted = {r.path.split("/")[-2] for r in kube.requests_to("POST", "/eviction$")}
    assert len(evicted) == 4  # the job pod of each drained node, nothing else
    assert kube.job_placement("default", JOB)[0::2] == [None, None, None, None]

    # robustctl's view of the job: the four evicted nodes stay its hosts while their pods are pending
    rc, out, err = _cli(
        "evict", "node05", "--job", JOB, "--over-evict", "tp", "--reason", "x", "--dry-run", *common
    )
    assert rc == 0, err
    assert json.loads(out)["targets"] == ["node05"]


def test_cli_standby_activation_moves_the_pod_of_the_evicted_node(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    import json

    inv = _cli_inventory(tmp_path, kube)
    common = ["-i", str(inv), "--state", str(tmp_path / "state.db"), "--json"]
    rc, out, err = _cli("standby", "add", "node[09-10]", "--yes", *common)
    assert rc == 0, err
    assert [t["key"] for t in kube.node("node09")["spec"]["taints"]] == ["robustctl.io/standby"]
    rc, out, err = _cli("evict", "node03", "--reason", "xid 79", "--yes", *common)
    assert rc == 0, err
    assert kube.job_placement("default", JOB)[2] is None  # evicted, recreated, pending

    rc, out, err = _cli(
        "standby", "activate", "--for", "node03", "--job", JOB, "--standby", "node09", "--reason", "replace node03",
        "--force", "--force-reason", "standby not self-checked in this test", "--yes", *common,
    )  # fmt: skip
    assert rc == 0, err
    assert kube.job_placement("default", JOB) == [*NODES[:2], "node09", *NODES[3:]]
    assert kube.node("node09")["metadata"]["labels"][JOB_LABEL] == JOB
    assert "taints" not in kube.node("node09")["spec"]
    assert JOB_LABEL not in kube.node("node03")["metadata"]["labels"]
    # the host list robustctl plans with has the standby in node03's place
    rc, out, err = _cli(
        "evict", "node09", "--job", JOB, "--over-evict", "pp", "--reason", "x", "--dry-run", *common
    )
    assert rc == 0, err
    assert json.loads(out)["targets"] == ["node01", "node09", "node05", "node07"]
    rc, out, err = _cli("audit", "--state", str(tmp_path / "state.db"), "--json")
    assert rc == 0, err
    doc = json.loads(out)
    actions = [r["action"] for r in doc["records"]]
    assert actions == ["standby-add", "evict", "standby-activate"]


def test_job_hosts_map_pending_pods_to_the_free_recorded_nodes(
    kube: FakeKubeApiServer, k8s: Kubernetes
) -> None:
    for n in ("node01", "node03", "node05", "node07"):
        k8s.drain([n], "pp group of node03")
    k8s.hold_standby(["node09"], "standby")
    k8s.replace_host(JOB, "node03", "node09")
    k8s.resume(["node09"], "activated")
    placement = kube.job_placement("default", JOB)
    assert placement.count(None) == 3 and "node09" in placement  # the scheduler picked one pending pod
    hosts = k8s.job_hosts(JOB)
    assert sorted(hosts) == sorted(
        ["node01", "node02", "node09", "node04", "node05", "node06", "node07", "node08"]
    )
    assert all(p is None or p == h for p, h in zip(placement, hosts))  # bound pods are the truth


def test_grace_period_goes_into_the_eviction_body(
    kube: FakeKubeApiServer, tmp_path: Path, store: Store
) -> None:
    k8s = create(settings(kube, tmp_path, grace_period_s=120), store=store)
    pod = job_pod_on(kube, "node08")["metadata"]["name"]
    k8s.drain(["node08"], "xid 79")
    [evict] = kube.requests_to("POST", "/eviction$")
    assert evict.body == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": "default"},
        "deleteOptions": {"gracePeriodSeconds": 120},
    }


def test_inventory_rejects_a_bad_taint_key_with_its_line(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        "hosts:\n  - name: node01\nscheduler:\n  kind: kubernetes\n  kubernetes:\n"
        "    evict_taint_key: 'robustctl.io/evicted node'\n"
    )
    rc, _, err = _cli("inventory", "validate", str(inv))
    assert rc == 78
    assert f"{inv}:6" in err and "evict_taint_key" in err


def test_many_hosts_are_read_with_one_list(kube: FakeKubeApiServer, k8s: Kubernetes) -> None:
    states = k8s.state([*NODES, *STANDBYS, "nosuch"])
    assert states["nosuch"] is NodeState.UNKNOWN and states["node01"] is NodeState.ACTIVE
    assert len(kube.requests_to("GET", "^/api/v1/nodes$")) == 1
    assert not kube.requests_to("GET", "^/api/v1/nodes/")
    k8s.state(["node01", "node02"])
    assert len(kube.requests_to("GET", "^/api/v1/nodes/")) == 2


def test_cli_a_hung_api_server_fails_the_step_and_the_audit_says_so(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    import json

    inv = _cli_inventory(tmp_path, kube)
    inv.write_text(inv.read_text().replace("timeout_s: 10", "timeout_s: 0.5"))
    state = str(tmp_path / "state.db")
    kube.hang("PATCH", "^/api/v1/nodes/node05$", 5)
    rc, out, err = _cli(
        "evict", "node[03,05,07]", "--reason", "xid 79", "--yes", "-i", str(inv), "--state", state
    )
    assert rc == 3, err
    assert "PATCH nodes/node05: timed out after 0.5 s" in err
    rc, out, _ = _cli("audit", "--state", state, "--json")
    [record] = json.loads(out)["records"]
    assert record["status"] == "failed"
    steps = {s["description"]: s["status"] for s in record["steps"]}
    assert steps["drain node03 via kubernetes"] == "done"
    assert steps["drain node05 via kubernetes"] == "failed"
    assert steps.get("drain node07 via kubernetes") in (None, "skipped")  # never ran
    assert kube.node("node03")["spec"]["unschedulable"] is True
    assert not kube.node("node07")["spec"].get("unschedulable")


# ---- pod logs (the watch's log source) ----------------------------------------------------------------


class _Resp:
    """A urllib3 response as ``_preload_content=False`` returns it: read(n), close, release_conn."""

    def __init__(self, data: bytes, fail: BaseException | None = None) -> None:
        self.data, self.fail = data, fail
        self.asked: list[int] = []
        self.closed = self.released = False

    def read(self, n: int) -> bytes:
        self.asked.append(n)
        if self.fail is not None:
            raise self.fail
        return self.data[:n]

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        self.released = True


class _Core:
    """A stub ``CoreV1Api`` recording ``read_namespaced_pod_log``'s arguments."""

    def __init__(self, resp: _Resp | BaseException) -> None:
        self.resp = resp
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def read_namespaced_pod_log(self, *args: Any, **kwargs: Any) -> _Resp:
        self.calls.append((args, kwargs))
        if isinstance(self.resp, BaseException):
            raise self.resp
        return self.resp


def test_client_read_pod_log_sends_the_bounds_and_reads_at_most_the_limit() -> None:
    from robustctl.schedulers.kubernetes import MAX_POD_LOG_BYTES, ClientApi

    resp = _Resp(b"line one\n\xff\xfe bad bytes\n" + b"x" * 100)
    core = _Core(resp)
    text = ClientApi(core, 7.5).read_pod_log(
        "ml", "train-3", container="trainer", limit_bytes=30, tail_lines=5
    )
    assert text == "line one\n\ufffd\ufffd bad bytes\n" + "x" * 8  # the first 30 bytes, bad bytes replaced
    [(args, kwargs)] = core.calls
    assert args == ("train-3", "ml")
    assert kwargs == {
        "container": "trainer",
        "limit_bytes": 30,
        "tail_lines": 5,
        "_request_timeout": 7.5,
        "_preload_content": False,
    }
    assert resp.asked == [30] and resp.closed and resp.released  # the unread rest goes with the connection
    # no container: none sent (the server picks the only one); a limit past the client's cap is capped
    core = _Core(_Resp(b"ok\n"))
    assert (
        ClientApi(core, 1).read_pod_log("ml", "p", container=None, limit_bytes=1 << 40, tail_lines=9)
        == "ok\n"
    )
    [(_, kwargs)] = core.calls
    assert "container" not in kwargs and kwargs["limit_bytes"] == MAX_POD_LOG_BYTES


def test_client_read_pod_log_errors_name_the_request() -> None:
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import ReadTimeoutError

    from robustctl.schedulers.kubernetes import ApiStatus, ClientApi

    gone = ApiException(status=404, reason="Not Found")
    gone.body = '{"kind":"Status","code":404,"message":"pods \\"p\\" not found","reason":"NotFound"}'
    with pytest.raises(
        ApiStatus, match=r'GET namespaces/ml/pods/p/log\?container=c: HTTP 404: pods "p" not found'
    ):
        ClientApi(_Core(gone), 1).read_pod_log("ml", "p", container="c", limit_bytes=10, tail_lines=1)
    slow = _Resp(b"", ReadTimeoutError(None, "/log", "read timed out"))  # type: ignore[arg-type]
    with pytest.raises(SchedulerError, match=r"GET namespaces/ml/pods/p/log: timed out after 2 s"):
        ClientApi(_Core(slow), 2).read_pod_log("ml", "p", container=None, limit_bytes=10, tail_lines=1)
    assert slow.closed and slow.released


def test_fake_pod_log_applies_tail_lines_then_limit_bytes_and_the_apis_errors(
    kube: FakeKubeApiServer, k8s: Kubernetes
) -> None:
    from robustctl.schedulers.kubernetes import ApiStatus

    name = job_pod_on(kube, "node02")["metadata"]["name"]
    kube.set_log("default", name, b"one\ntwo\nthree\nfour\n")
    api = k8s.api
    assert api.read_pod_log("default", name, container=None, limit_bytes=100, tail_lines=2) == "three\nfour\n"
    assert (
        api.read_pod_log("default", name, container=None, limit_bytes=3, tail_lines=2) == "thr"
    )  # tail first
    assert api.read_pod_log("default", name, container="trainer", limit_bytes=100, tail_lines=0) == ""
    [*_, last] = kube.requests_to("GET", f"/pods/{name}/log$")
    assert last.query == {"container": "trainer", "limitBytes": "100", "tailLines": "0"}
    kube.add_pod("default", "two", node="node09", containers=("trainer", "sidecar"))
    with pytest.raises(ApiStatus, match="a container name must be specified for pod two") as bad:
        api.read_pod_log("default", "two", container=None, limit_bytes=100, tail_lines=2)
    assert bad.value.status == 400
    assert api.read_pod_log("default", "two", container="sidecar", limit_bytes=100, tail_lines=2) == ""
    with pytest.raises(ApiStatus, match="container nope is not valid for pod two"):
        api.read_pod_log("default", "two", container="nope", limit_bytes=100, tail_lines=2)
    with pytest.raises(ApiStatus, match='pods "ghost" not found') as missing:
        api.read_pod_log("default", "ghost", container=None, limit_bytes=100, tail_lines=2)
    assert missing.value.status == 404
    kube.add_pod("default", "waiting", node=None, node_selector={"no": "such"})
    with pytest.raises(ApiStatus, match="is waiting to start"):
        api.read_pod_log("default", "waiting", container=None, limit_bytes=100, tail_lines=2)


def test_cli_watch_reads_running_pods_logs_and_names_the_pod_it_could_not_read(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    import json

    inv = _cli_inventory(tmp_path, kube)
    pods = {p["metadata"]["labels"][INDEX_LABEL]: p["metadata"]["name"] for p in kube.pods("default")
            if p["metadata"]["labels"].get(JOB_LABEL) == JOB}  # fmt: skip
    watchdog = (
        "[rank7]:[E ProcessGroupNCCL.cpp:616] [Rank 7] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 "
        "milliseconds before timing out.\n"
    )
    kube.set_log("default", pods["3"], "iteration 1\n" * 20 + watchdog)
    kube.fail("GET", f"/pods/{pods['5']}/log$", 500)
    state = str(tmp_path / "state.db")
    rc, out, err = _cli(
        "watch", "--job", JOB, "--once", "--advise", "--json", "-i", str(inv), "--state", state
    )
    doc = json.loads(out)
    assert rc == 2, err
    decision = doc["decision"]
    assert decision["signal"] == "crash"
    assert (
        decision["evidence"][0]["rule"] == "log.nccl-timeout"
        and decision["evidence"][0]["values"]["rank"] == 7
    )
    why = {u["signal"]: u["why"] for u in doc["reading"]["unknown"]}
    assert pods["5"] in why["logs"] and "HTTP 500" in why["logs"] and pods["3"] not in why["logs"]
    assert len(kube.requests_to("GET", "/log$")) == 8  # every running pod's log, once
