"""A fake Kubernetes API server: the handful of endpoints robustctl's ``kubernetes`` back end uses.

No API server can run on a machine without container runtimes and cluster binaries, so the back end
is tested by pointing the **real** ``kubernetes`` Python client at this HTTP server (plain HTTP on a
loopback address, bearer-token auth). It is a fake: it keeps objects in memory and implements only
what robustctl calls, but with the API's real JSON shapes, status codes and error bodies
(``metav1.Status``):

=================================================================  ==========================================
``GET /version``                                                   version info
``GET /api/v1/nodes[?labelSelector=]``                             ``NodeList``
``GET /api/v1/nodes/{name}``                                       ``Node``; 404 ``NotFound``
``PATCH /api/v1/nodes/{name}``                                     merge / strategic-merge patch (RFC 7386);
                                                                   ``metadata.resourceVersion`` in the patch
                                                                   is a precondition (409 ``Conflict``);
                                                                   taints and labels validated (422
                                                                   ``Invalid``); JSON patch: 415
``GET /api/v1/pods[?labelSelector=&fieldSelector=]``               ``PodList`` of every namespace
``GET /api/v1/namespaces/{ns}/pods[?…]``                           ``PodList`` of one namespace
``DELETE /api/v1/namespaces/{ns}/pods/{name}``                     the deleted ``Pod``
``GET /api/v1/namespaces/{ns}/pods/{name}/log[?container=&…]``     the container's log, ``text/plain``:
                                                                   ``tailLines`` then ``limitBytes``
                                                                   applied as the kubelet does; 404; 400
                                                                   when several containers and none named,
                                                                   no such container, or the pod not
                                                                   started; 422 on a bad limit
``POST /api/v1/namespaces/{ns}/pods/{name}/eviction``              ``policy/v1 Eviction``: 201 ``Success``;
                                                                   429 ``TooManyRequests`` when a
                                                                   PodDisruptionBudget forbids it (with the
                                                                   ``DisruptionBudget`` cause the real
                                                                   server sends); 404; 400 on a bad body
=================================================================  ==========================================

Field selectors support ``spec.nodeName``, ``metadata.name``, ``metadata.namespace`` and
``status.phase`` (``=``, ``==``, ``!=``; any other field is a 400, as on a real server); label
selectors the equality forms (``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``) and ``k in (a,b)``.

Beyond storage it plays two controllers, so that a drain and a standby activation can be followed
end to end: a **Job controller** (:meth:`FakeKubeApiServer.add_job`: an Indexed Job whose pods carry
the ``batch.kubernetes.io/job-completion-index`` label; a deleted or evicted pod is recreated with the
same index) and a **scheduler** (a pending pod is bound to the first node, by name, that is Ready,
schedulable, matches its ``nodeSelector``, whose ``NoSchedule``/``NoExecute`` taints it tolerates, and
that holds no other pod of the same job: one pod per machine, as an 8-GPU pod fills a node). Pods are
deleted at once (no graceful termination), and the taint manager is not modelled (a ``NoExecute``
taint does not remove pods here).

A container's log is what a test sets with :meth:`FakeKubeApiServer.set_log` (empty by default).

Faults for tests: :meth:`FakeKubeApiServer.hang` (a request that answers only after N seconds, to test
client timeouts) and :meth:`FakeKubeApiServer.fail` (the next N matching requests answer a status).
Every request is recorded (:attr:`FakeKubeApiServer.requests`) with its method, path, query, content
type and JSON body.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import re
import secrets
import socket
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["INDEX_LABEL", "FakeKubeApiServer", "Request"]

INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
"""The label (and annotation) an Indexed Job puts on each pod: its completion index (Kubernetes 1.28+)."""

_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_POD_FIELDS = ("spec.nodeName", "metadata.name", "metadata.namespace", "status.phase")


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str, details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A ``metav1.Status`` body as the API server sends it."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "code": code,
    }
    if message:
        body["message"] = message
    if reason:
        body["reason"] = reason
    if details:
        body["details"] = dict(details)
    return body


class _ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: Mapping[str, Any] | None = None):
        super().__init__(message)
        self.body = _status(code, reason, message, details)
        self.code = code


def _qualified_key_ok(key: str) -> bool:
    """A label/taint key: an optional DNS-subdomain prefix and ``/``, then a name of ≤ 63 characters."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


def _label_value_ok(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 63 and bool(_LABEL_VALUE.match(value))


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge_patch(out.get(key), value)
    return out


def _parse_label_selector(text: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """``a=b,c!=d,e,!f,g in (x,y)`` → [(key, op, values)]; raises _ApiError 400 on bad syntax."""
    out: list[tuple[str, str, tuple[str, ...]]] = []
    for part in re.split(r",(?![^()]*\))", text):
        part = part.strip()
        if not part:
            continue
        m = re.match(r"^([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)$", part)
        if m:
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            out.append((m.group(1), m.group(2), values))
        elif "!=" in part:
            k, v = part.split("!=", 1)
            out.append((k.strip(), "!=", (v.strip(),)))
        elif "==" in part or "=" in part:
            k, v = re.split(r"==?", part, maxsplit=1)
            out.append((k.strip(), "=", (v.strip(),)))
        elif part.startswith("!"):
            out.append((part[1:].strip(), "!", ()))
        else:
            out.append((part, "exists", ()))
        if not out[-1][0]:
            raise _ApiError(400, "BadRequest", f"unable to parse requirement: {part!r}")
    return out


def _labels_match(labels: Mapping[str, str], selector: list[tuple[str, str, tuple[str, ...]]]) -> bool:
    for key, op, values in selector:
        have = labels.get(key)
        if op == "=" and have != values[0]:
            return False
        if op == "!=" and have == values[0]:
            return False
        if op == "exists" and have is None:
            return False
        if op == "!" and have is not None:
            return False
        if op == "in" and have not in values:
            return False
        if op == "notin" and have in values:
            return False
    return True


def _pod_field(pod: Mapping[str, Any], name: str) -> str:
    if name == "spec.nodeName":
        return str(pod["spec"].get("nodeName") or "")
    if name == "metadata.name":
        return str(pod["metadata"]["name"])
    if name == "metadata.namespace":
        return str(pod["metadata"]["namespace"])
    return str(pod["status"].get("phase") or "")


def _parse_field_selector(text: str) -> list[tuple[str, bool, str]]:
    out: list[tuple[str, bool, str]] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.match(r"^([A-Za-z.]+)\s*(!=|==|=)\s*(.*)$", part)
        if not m:
            raise _ApiError(400, "BadRequest", f"invalid selector: {part!r}")
        if m.group(1) not in _POD_FIELDS:
            raise _ApiError(400, "BadRequest", f"field label not supported: {m.group(1)}")
        out.append((m.group(1), m.group(2) != "!=", m.group(3)))
    return out


def _tolerates(pod: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    for tol in pod["spec"].get("tolerations") or []:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists":
            if not tol.get("key") or tol["key"] == taint.get("key"):
                return True
        elif tol.get("key") == taint.get("key") and (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _active(pod: Mapping[str, Any]) -> bool:
    return pod["status"].get("phase") not in ("Succeeded", "Failed") and not pod["metadata"].get(
        "deletionTimestamp"
    )


@dataclass(frozen=True)
class Request:
    """One request the fake received: ``method``, ``path`` (decoded), ``query`` (first value of each
    parameter), ``content_type`` and the decoded JSON ``body`` (None when there was none)."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any


@dataclass
class _Job:
    namespace: str
    name: str
    completions: int
    labels: dict[str, str]
    node_selector: dict[str, str]
    tolerations: list[dict[str, Any]]
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))


@dataclass
class _Fault:
    method: str
    path: re.Pattern[str]
    status: int = 0
    delay_s: float = 0.0
    times: int = 1


class FakeKubeApiServer:
    """A fake Kubernetes API server on ``host`` (a loopback address), see the module doc.

    Use as a context manager, or :meth:`start` / :meth:`stop`. Objects are set up with
    :meth:`add_node`, :meth:`add_pod`, :meth:`add_job`, :meth:`add_pdb` and read back with
    :meth:`node` and :meth:`pods`; :meth:`write_kubeconfig` writes a kubeconfig for the real client.

    Args:
        host: address to listen on; loopback only (127.0.0.0/8).
        token: the bearer token requests must carry (401 ``Unauthorized`` otherwise).

    Raises:
        ValueError: ``host`` is not a loopback address.
    """

    def __init__(self, host: str = "127.0.0.1", token: str | None = None) -> None:
        if not host.startswith("127."):
            raise ValueError(f"FakeKubeApiServer listens on loopback addresses only, not {host!r}")
        self.host = host
        self.token = token or secrets.token_hex(16)
        self.requests: list[Request] = []
        self._nodes: dict[str, dict[str, Any]] = {}
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._jobs: dict[tuple[str, str], _Job] = {}
        self._pdbs: dict[tuple[str, str], dict[str, Any]] = {}
        self._logs: dict[tuple[str, str, str], bytes] = {}
        self._faults: list[_Fault] = []
        self._rv = itertools.count(1000)
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._connections: set[socket.socket] = set()
        self._thread: threading.Thread | None = None

    # ---- lifecycle --------------------------------------------------------------------------------

    def start(self) -> FakeKubeApiServer:
        """Listen on a free port of :attr:`host` and serve in a daemon thread."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server._connections.add(self.connection)

            def finish(self) -> None:
                with server._lock:
                    server._connections.discard(self.connection)
                super().finish()

            def _serve(self) -> None:
                server._handle(self)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve

        self._httpd = ThreadingHTTPServer((self.host, 0), Handler)
        self._httpd.daemon_threads = True
        # A short poll: stop() (socketserver's shutdown) waits up to one poll interval, 0.5 s by default.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-kube-api",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; requests held by :meth:`hang` are released."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        with self._lock:  # keep-alive connections too: a stopped server answers nothing
            for conn in list(self._connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
            self._connections.clear()

    def __enter__(self) -> FakeKubeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` of the running server."""
        assert self._httpd is not None, "start() the server first"
        return f"http://{self.host}:{self._httpd.server_address[1]}"

    def write_kubeconfig(
        self, path: str | Path, *, context: str = "fake", namespace: str = "default"
    ) -> Path:
        """Write a kubeconfig (JSON is valid YAML) whose ``context`` points at this server; return its path."""
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": {"server": self.url}}],
            "users": [{"name": context, "user": {"token": self.token}}],
            "contexts": [
                {"name": context, "context": {"cluster": context, "user": context, "namespace": namespace}}
            ],
            "current-context": context,
        }
        p = Path(path)
        p.write_text(json.dumps(cfg, indent=2))
        return p

    # ---- objects ----------------------------------------------------------------------------------

    def _next_rv(self) -> str:
        return str(next(self._rv))

    def add_node(
        self,
        name: str,
        *,
        ready: bool = True,
        labels: Mapping[str, str] | None = None,
        unschedulable: bool = False,
        taints: Iterable[Mapping[str, Any]] = (),
        address: str = "127.0.0.2",
        gpus: int = 8,
    ) -> dict[str, Any]:
        """Create a Node as a kubelet would register it (``address`` must be a loopback address)."""
        if not address.startswith("127."):
            raise ValueError(f"node addresses are loopback addresses, not {address!r}")
        node: dict[str, Any] = {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "uid": str(uuid.uuid4()),
                "resourceVersion": self._next_rv(),
                "creationTimestamp": _now(),
                "labels": {
                    "kubernetes.io/arch": "amd64",
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    **dict(labels or {}),
                },
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": {},
            "status": {
                "capacity": {
                    "cpu": "96",
                    "memory": "2113612172Ki",
                    "nvidia.com/gpu": str(gpus),
                    "pods": "110",
                },
                "allocatable": {
                    "cpu": "95",
                    "memory": "2113509772Ki",
                    "nvidia.com/gpu": str(gpus),
                    "pods": "110",
                },
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "Unknown",
                        "lastHeartbeatTime": _now(),
                        "lastTransitionTime": _now(),
                        "reason": "KubeletReady" if ready else "NodeStatusUnknown",
                        "message": "kubelet is posting ready status"
                        if ready
                        else "Kubelet stopped posting node status.",
                    }
                ],
                "addresses": [
                    {"type": "InternalIP", "address": address},
                    {"type": "Hostname", "address": name},
                ],
                "nodeInfo": {
                    "machineID": uuid.uuid4().hex,
                    "systemUUID": str(uuid.uuid4()).upper(),
                    "bootID": str(uuid.uuid4()),
                    "kernelVersion": "6.1.0-28-amd64",
                    "osImage": "Debian GNU/Linux 12 (bookworm)",
                    "containerRuntimeVersion": "containerd://1.7.20",
                    "kubeletVersion": "v1.30.4",
                    "kubeProxyVersion": "v1.30.4",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                },
            },
        }
        if unschedulable:
            node["spec"]["unschedulable"] = True
        if taints:
            node["spec"]["taints"] = [dict(t) for t in taints]
        with self._lock:
            self._nodes[name] = node
            self._schedule()
        return copy.deepcopy(node)

    def set_ready(self, name: str, ready: bool) -> None:
        """Flip a node's Ready condition (a kubelet that stops or resumes posting status)."""
        with self._lock:
            cond = self._nodes[name]["status"]["conditions"][0]
            cond["status"] = "True" if ready else "Unknown"
            self._nodes[name]["metadata"]["resourceVersion"] = self._next_rv()
            self._schedule()

    def add_pod(
        self,
        namespace: str,
        name: str,
        *,
        node: str | None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        owner_kind: str | None = None,
        owner_name: str | None = None,
        node_selector: Mapping[str, str] | None = None,
        tolerations: Iterable[Mapping[str, Any]] = (),
        phase: str | None = None,
        containers: Sequence[str] = ("trainer",),
    ) -> dict[str, Any]:
        """Create a Pod (bound to ``node``, or pending and left to the scheduler when None) with
        ``containers`` (their names)."""
        pod = self._pod_object(
            namespace, name, labels or {}, annotations or {}, node_selector or {}, list(tolerations)
        )
        image = pod["spec"]["containers"][0]["image"]
        pod["spec"]["containers"] = [{"name": c, "image": image, "resources": {}} for c in containers]
        if owner_kind:
            api = "apps/v1" if owner_kind in ("DaemonSet", "ReplicaSet", "StatefulSet") else "batch/v1"
            pod["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": api,
                    "kind": owner_kind,
                    "name": owner_name or name,
                    "uid": str(uuid.uuid4()),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        with self._lock:
            if node is not None:
                self._bind(pod, node)
            if phase is not None:
                pod["status"]["phase"] = phase
            self._pods[(namespace, name)] = pod
            self._schedule()
        return copy.deepcopy(pod)

    def add_job(
        self,
        namespace: str,
        name: str,
        *,
        completions: int,
        labels: Mapping[str, str] | None = None,
        node_selector: Mapping[str, str] | None = None,
        tolerations: Iterable[Mapping[str, Any]] = (),
    ) -> list[dict[str, Any]]:
        """Create an Indexed Job of ``completions`` pods (indexes 0…n-1) and schedule them; return them."""
        job = _Job(
            namespace,
            name,
            completions,
            dict(labels or {}),
            dict(node_selector or {}),
            [dict(t) for t in tolerations],
        )
        with self._lock:
            self._jobs[(namespace, name)] = job
            for index in range(completions):
                self._create_job_pod(job, index)
            self._schedule()
            return [copy.deepcopy(p) for p in self._job_pods(job)]

    def add_pdb(
        self,
        namespace: str,
        name: str,
        *,
        match_labels: Mapping[str, str],
        min_available: int | None = None,
        max_unavailable: int | None = None,
    ) -> None:
        """Create a PodDisruptionBudget (integer ``minAvailable`` or ``maxUnavailable``)."""
        if (min_available is None) == (max_unavailable is None):
            raise ValueError("give exactly one of min_available and max_unavailable")
        with self._lock:
            self._pdbs[(namespace, name)] = {
                "match_labels": dict(match_labels),
                "min_available": min_available,
                "max_unavailable": max_unavailable,
            }

    def set_pdb(
        self,
        namespace: str,
        name: str,
        *,
        min_available: int | None = None,
        max_unavailable: int | None = None,
    ) -> None:
        """Change a PodDisruptionBudget's limit (e.g. to unblock a waiting eviction)."""
        with self._lock:
            pdb = self._pdbs[(namespace, name)]
            pdb["min_available"], pdb["max_unavailable"] = min_available, max_unavailable

    def delete_pdb(self, namespace: str, name: str) -> None:
        """Remove a PodDisruptionBudget."""
        with self._lock:
            self._pdbs.pop((namespace, name), None)

    def node(self, name: str) -> dict[str, Any]:
        """A copy of the Node (KeyError when there is none)."""
        with self._lock:
            return copy.deepcopy(self._nodes[name])

    def pods(self, namespace: str | None = None, *, node: str | None = None) -> list[dict[str, Any]]:
        """Copies of the pods (of ``namespace``, on ``node``), by namespace and name."""
        with self._lock:
            return [
                copy.deepcopy(p)
                for (ns, _), p in sorted(self._pods.items())
                if (namespace is None or ns == namespace)
                and (node is None or p["spec"].get("nodeName") == node)
            ]

    def job_placement(self, namespace: str, name: str) -> list[str | None]:
        """The node of each index of a job's active pod (None: pending), index order."""
        with self._lock:
            job = self._jobs[(namespace, name)]
            out: list[str | None] = [None] * job.completions
            for p in self._job_pods(job):
                out[int(p["metadata"]["labels"][INDEX_LABEL])] = p["spec"].get("nodeName")
            return out

    def set_log(self, namespace: str, pod: str, text: str | bytes, *, container: str = "trainer") -> None:
        """Set the log of ``container`` of a pod (what ``GET …/pods/POD/log`` reads; bytes as they are,
        text as UTF-8). The log stays with the name: a pod recreated under it shows it again."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        with self._lock:
            self._logs[(namespace, pod, container)] = data

    def hang(self, method: str, path_regex: str, seconds: float, *, times: int = 1) -> None:
        """The next ``times`` requests matching ``method`` and ``path_regex`` answer after ``seconds``."""
        with self._lock:
            self._faults.append(_Fault(method.upper(), re.compile(path_regex), delay_s=seconds, times=times))

    def fail(self, method: str, path_regex: str, status: int, *, times: int = 1) -> None:
        """The next ``times`` requests matching ``method`` and ``path_regex`` answer ``status`` (a Status body)."""
        with self._lock:
            self._faults.append(_Fault(method.upper(), re.compile(path_regex), status=status, times=times))

    def requests_to(self, method: str, path_regex: str) -> list[Request]:
        """The recorded requests matching ``method`` and ``path_regex`` (``re.search``), in order."""
        rx = re.compile(path_regex)
        with self._lock:
            return [r for r in self.requests if r.method == method.upper() and rx.search(r.path)]

    # ---- controllers ------------------------------------------------------------------------------

    def _pod_object(
        self,
        namespace: str,
        name: str,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        node_selector: Mapping[str, str],
        tolerations: list[Any],
    ) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "containers": [{"name": "trainer", "image": "pytorch/pytorch:2.13.0", "resources": {}}],
            "restartPolicy": "Never",
            "schedulerName": "default-scheduler",
            "terminationGracePeriodSeconds": 30,
        }
        if node_selector:
            spec["nodeSelector"] = dict(node_selector)
        if tolerations:
            spec["tolerations"] = [dict(t) for t in tolerations]
        return {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "resourceVersion": self._next_rv(),
                "creationTimestamp": _now(),
                "labels": dict(labels),
                "annotations": dict(annotations),
            },
            "spec": spec,
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
                "qosClass": "BestEffort",
            },
        }

    def _create_job_pod(self, job: _Job, index: int) -> None:
        name = f"{job.name}-{index}-{secrets.token_hex(3)[:5]}"
        labels = {
            **job.labels,
            "batch.kubernetes.io/controller-uid": job.uid,
            "batch.kubernetes.io/job-name": job.name,
            "job-name": job.name,
            INDEX_LABEL: str(index),
        }
        pod = self._pod_object(
            job.namespace, name, labels, {INDEX_LABEL: str(index)}, job.node_selector, job.tolerations
        )
        pod["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": job.name,
                "uid": job.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        self._pods[(job.namespace, name)] = pod

    def _job_pods(self, job: _Job) -> list[dict[str, Any]]:
        return sorted(
            (
                p
                for (ns, _), p in self._pods.items()
                if ns == job.namespace and p["metadata"]["labels"].get("job-name") == job.name and _active(p)
            ),
            key=lambda p: int(p["metadata"]["labels"][INDEX_LABEL]),
        )

    def _bind(self, pod: dict[str, Any], node: str) -> None:
        pod["spec"]["nodeName"] = node
        pod["status"]["phase"] = "Running"
        pod["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True"},
        ]
        pod["status"]["hostIP"] = (
            self._nodes[node]["status"]["addresses"][0]["address"] if node in self._nodes else ""
        )
        pod["metadata"]["resourceVersion"] = self._next_rv()

    def _fits(self, pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
        if node["spec"].get("unschedulable"):
            return False
        if node["status"]["conditions"][0]["status"] != "True":
            return False
        labels = node["metadata"].get("labels") or {}
        if any(labels.get(k) != v for k, v in (pod["spec"].get("nodeSelector") or {}).items()):
            return False
        for taint in node["spec"].get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(pod, taint):
                return False
        job = pod["metadata"]["labels"].get("job-name")
        name = node["metadata"]["name"]
        return not any(
            _active(p)
            and p["spec"].get("nodeName") == name
            and job
            and p["metadata"]["labels"].get("job-name") == job
            for p in self._pods.values()
        )

    def _schedule(self) -> None:
        """Bind every pending pod that fits a node (first by name)."""
        for key in sorted(self._pods):
            pod = self._pods[key]
            if pod["spec"].get("nodeName") or not _active(pod):
                continue
            for name in sorted(self._nodes):
                if self._fits(pod, self._nodes[name]):
                    self._bind(pod, name)
                    break

    def _delete_pod(self, namespace: str, name: str) -> dict[str, Any]:
        pod = self._pods.pop((namespace, name))
        pod["metadata"]["deletionTimestamp"] = _now()
        pod["metadata"]["deletionGracePeriodSeconds"] = 0
        owner = next((o for o in pod["metadata"].get("ownerReferences") or [] if o.get("controller")), None)
        if owner and owner["kind"] == "Job" and (namespace, owner["name"]) in self._jobs:
            job = self._jobs[(namespace, owner["name"])]
            index = int(pod["metadata"]["labels"][INDEX_LABEL])
            if not any(int(p["metadata"]["labels"][INDEX_LABEL]) == index for p in self._job_pods(job)):
                self._create_job_pod(job, index)
        self._schedule()
        return pod

    def _pdb_blocks(self, pod: Mapping[str, Any]) -> _ApiError | None:
        ns = pod["metadata"]["namespace"]
        labels = pod["metadata"].get("labels") or {}
        matching = [
            (name, pdb)
            for (pns, name), pdb in sorted(self._pdbs.items())
            if pns == ns and all(labels.get(k) == v for k, v in pdb["match_labels"].items())
        ]
        if not matching:
            return None
        if len(matching) > 1:
            return _ApiError(
                500,
                "InternalError",
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            )
        if pod["status"].get("phase") != "Running":
            return None  # a pod that is not running may always be evicted
        name, pdb = matching[0]
        members = [
            p
            for (pns, _), p in self._pods.items()
            if pns == ns
            and all((p["metadata"].get("labels") or {}).get(k) == v for k, v in pdb["match_labels"].items())
        ]
        healthy = sum(1 for p in members if _active(p) and p["status"].get("phase") == "Running")
        if pdb["min_available"] is not None:
            desired = int(pdb["min_available"])
        else:
            desired = len(members) - int(pdb["max_unavailable"])
        if healthy - 1 >= desired:
            return None
        err = _ApiError(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
            {
                "causes": [
                    {
                        "reason": "DisruptionBudget",
                        "message": f"The disruption budget {name} needs {desired} healthy pods and has {healthy} currently",
                    }
                ]
            },
        )
        return err

    # ---- HTTP -------------------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        path = unquote(parts.path)
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        ctype = (h.headers.get("Content-Type") or "").split(";")[0].strip()
        body: Any = None
        code: int
        out: Any
        try:
            if raw:
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise _ApiError(
                        400, "BadRequest", f"the body of the request was in an unknown format: {exc}"
                    ) from None
            with self._lock:
                self.requests.append(Request(h.command, path, query, ctype, body))
                fault = next(
                    (
                        f
                        for f in self._faults
                        if f.times > 0 and f.method == h.command and f.path.search(path)
                    ),
                    None,
                )
                if fault is not None:
                    fault.times -= 1
            if fault is not None and fault.delay_s:
                self._stopping.wait(fault.delay_s)
            if fault is not None and fault.status:
                raise _ApiError(
                    fault.status,
                    "InternalError" if fault.status >= 500 else "BadRequest",
                    f"injected failure ({fault.status})",
                )
            if h.headers.get("Authorization") != f"Bearer {self.token}":
                raise _ApiError(401, "Unauthorized", "Unauthorized")
            with self._lock:
                code, out = self._route(h.command, path, query, ctype, body)
        except _ApiError as exc:
            code, out = exc.code, exc.body
        text = isinstance(out, bytes)
        data = out if isinstance(out, bytes) else json.dumps(out).encode()
        try:
            h.send_response(code)
            h.send_header("Content-Type", "text/plain" if text else "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout)

    def _route(
        self, method: str, path: str, query: Mapping[str, str], ctype: str, body: Any
    ) -> tuple[int, Any]:
        segs = [s for s in path.split("/") if s]
        if segs == ["version"] and method == "GET":
            return 200, {"major": "1", "minor": "30", "gitVersion": "v1.30.4-fake", "platform": "linux/amd64"}
        if segs[:2] == ["api", "v1"]:
            rest = segs[2:]
            if rest == ["nodes"] and method == "GET":
                return 200, self._list("NodeList", self._nodes.values(), query, fields=False)
            if len(rest) == 2 and rest[0] == "nodes":
                return self._node(method, rest[1], ctype, body)
            if rest == ["pods"] and method == "GET":
                return 200, self._list("PodList", self._pods.values(), query, fields=True)
            if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] == "pods":
                ns = rest[1]
                if len(rest) == 3 and method == "GET":
                    pods = [p for (pns, _), p in sorted(self._pods.items()) if pns == ns]
                    return 200, self._list("PodList", pods, query, fields=True)
                if len(rest) == 4 and method == "GET":
                    return 200, copy.deepcopy(self._get_pod(ns, rest[3]))
                if len(rest) == 4 and method == "DELETE":
                    self._get_pod(ns, rest[3])
                    return 200, self._delete_pod(ns, rest[3])
                if len(rest) == 5 and rest[4] == "eviction" and method == "POST":
                    return self._evict(ns, rest[3], ctype, body)
                if len(rest) == 5 and rest[4] == "log" and method == "GET":
                    return 200, self._log(ns, rest[3], query)
        raise _ApiError(404, "NotFound", "the server could not find the requested resource")

    def _list(
        self, kind: str, items: Iterable[dict[str, Any]], query: Mapping[str, str], *, fields: bool
    ) -> dict[str, Any]:
        labels = _parse_label_selector(query.get("labelSelector", ""))
        fsel = _parse_field_selector(query.get("fieldSelector", "")) if fields else []
        if query.get("fieldSelector") and not fields:
            for part in query["fieldSelector"].split(","):
                if part.strip() and not part.strip().startswith("metadata.name"):
                    raise _ApiError(400, "BadRequest", f"field label not supported: {part.split('=')[0]}")
        out = []
        for obj in items:
            if not _labels_match(obj["metadata"].get("labels") or {}, labels):
                continue
            if any((_pod_field(obj, f) == v) != eq for f, eq, v in fsel):
                continue
            item = copy.deepcopy(obj)
            item.pop("kind", None)
            item.pop("apiVersion", None)
            out.append(item)
        return {
            "kind": kind,
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(next(self._rv))},
            "items": out,
        }

    def _get_node(self, name: str) -> dict[str, Any]:
        node = self._nodes.get(name)
        if node is None:
            raise _ApiError(404, "NotFound", f'nodes "{name}" not found', {"name": name, "kind": "nodes"})
        return node

    def _get_pod(self, ns: str, name: str) -> dict[str, Any]:
        pod = self._pods.get((ns, name))
        if pod is None:
            raise _ApiError(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        return pod

    def _node(self, method: str, name: str, ctype: str, body: Any) -> tuple[int, Any]:
        node = self._get_node(name)
        if method == "GET":
            return 200, copy.deepcopy(node)
        if method != "PATCH":
            raise _ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        if ctype == "application/json-patch+json":
            raise _ApiError(415, "UnsupportedMediaType", "fake API server: JSON patch is not implemented")
        if ctype not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            raise _ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            )
        if not isinstance(body, dict):
            raise _ApiError(400, "BadRequest", "the body of the request was in an unknown format")
        want_rv = (body.get("metadata") or {}).get("resourceVersion")
        if want_rv is not None and want_rv != node["metadata"]["resourceVersion"]:
            raise _ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on nodes "{name}": the object has been modified; please apply your changes to the latest version and try again',
                {"name": name, "kind": "nodes"},
            )
        patched = _merge_patch(node, body)
        patched["metadata"]["name"] = name
        self._validate_node(patched)
        for taint in patched["spec"].get("taints") or []:
            if taint["effect"] == "NoExecute" and not taint.get("timeAdded"):
                taint["timeAdded"] = _now()
        if patched != node:
            patched["metadata"]["resourceVersion"] = self._next_rv()
        else:
            patched["metadata"]["resourceVersion"] = node["metadata"]["resourceVersion"]
        self._nodes[name] = patched
        self._schedule()
        return 200, copy.deepcopy(patched)

    def _validate_node(self, node: Mapping[str, Any]) -> None:
        name = node["metadata"]["name"]
        causes: list[dict[str, str]] = []
        for key, value in (node["metadata"].get("labels") or {}).items():
            if not _qualified_key_ok(key):
                causes.append(
                    {
                        "field": "metadata.labels",
                        "message": f"Invalid value: {key!r}: name part must consist of alphanumeric characters",
                    }
                )
            if not _label_value_ok(value):
                causes.append(
                    {
                        "field": "metadata.labels",
                        "message": f"Invalid value: {value!r}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                    }
                )
        seen: set[tuple[str, str]] = set()
        taints = node["spec"].get("taints") or []
        if not isinstance(taints, list):
            causes.append({"field": "spec.taints", "message": "must be a list"})
            taints = []
        for i, t in enumerate(taints):
            if not isinstance(t, dict) or not _qualified_key_ok(str(t.get("key", ""))):
                causes.append({"field": f"spec.taints[{i}].key", "message": f"Invalid value: {t!r}"})
                continue
            if not _label_value_ok(t.get("value", "")):
                causes.append(
                    {
                        "field": f"spec.taints[{i}].value",
                        "message": f"Invalid value: {t.get('value')!r}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (63 characters at most)",
                    }
                )
            if t.get("effect") not in _TAINT_EFFECTS:
                causes.append(
                    {
                        "field": f"spec.taints[{i}].effect",
                        "message": f'Unsupported value: {t.get("effect")!r}: supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"',
                    }
                )
            pair = (t["key"], str(t.get("effect")))
            if pair in seen:
                causes.append(
                    {
                        "field": f"spec.taints[{i}]",
                        "message": "Duplicate value: taints must be unique by key and effect pair",
                    }
                )
            seen.add(pair)
        unsched = node["spec"].get("unschedulable")
        if unsched is not None and not isinstance(unsched, bool):
            causes.append({"field": "spec.unschedulable", "message": "must be a boolean"})
        if causes:
            text = "; ".join(f"{c['field']}: {c['message']}" for c in causes)
            raise _ApiError(
                422,
                "Invalid",
                f'Node "{name}" is invalid: {text}',
                {
                    "name": name,
                    "kind": "Node",
                    "causes": [{"reason": "FieldValueInvalid", **c} for c in causes],
                },
            )

    def _log(self, ns: str, name: str, query: Mapping[str, str]) -> bytes:
        """A container's log as the API server answers ``GET …/log``: the last ``tailLines`` lines,
        then the first ``limitBytes`` bytes of them (the kubelet seeks back ``tailLines`` lines and
        stops writing after ``limitBytes``)."""
        pod = self._get_pod(ns, name)
        names = [c["name"] for c in pod["spec"].get("containers") or []]
        container = query.get("container") or ""
        if not container:
            if len(names) != 1:
                raise _ApiError(
                    400,
                    "BadRequest",
                    f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]",
                )
            container = names[0]
        if container not in names:
            raise _ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        if not pod["spec"].get("nodeName") or pod["status"].get("phase") == "Pending":
            raise _ApiError(
                400,
                "BadRequest",
                f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating',
            )
        limits: dict[str, int | None] = {}
        for key, least in (("tailLines", 0), ("limitBytes", 1)):
            raw = query.get(key)
            try:
                limits[key] = None if raw is None else int(raw)
            except ValueError:
                raise _ApiError(400, "BadRequest", f"{key}: invalid value {raw!r}: not an integer") from None
            value = limits[key]
            if value is not None and value < least:
                raise _ApiError(
                    422,
                    "Invalid",
                    f'PodLogOptions "{name}" is invalid: {key}: Invalid value: {value}: must be greater than '
                    + ("or equal to 0" if least == 0 else "0"),
                )
        data = self._logs.get((ns, name, container), b"")
        tail = limits["tailLines"]
        if tail is not None:
            lines = [line for line in re.split(rb"(?<=\n)", data) if line]  # lines end at \n only
            data = b"".join(lines[max(0, len(lines) - tail) :])
        limit = limits["limitBytes"]
        return data if limit is None else data[:limit]

    def _evict(self, ns: str, name: str, ctype: str, body: Any) -> tuple[int, Any]:
        if ctype not in ("", "application/json"):
            raise _ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {ctype!r})",
            )
        if (
            not isinstance(body, dict)
            or body.get("kind") != "Eviction"
            or body.get("apiVersion") not in ("policy/v1", "policy/v1beta1")
        ):
            raise _ApiError(400, "BadRequest", "the body of the request must be a policy/v1 Eviction")
        meta = body.get("metadata") or {}
        if meta.get("name") != name:
            raise _ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
        if meta.get("namespace") not in (None, ns):
            raise _ApiError(400, "BadRequest", "namespace in URL does not match namespace in Eviction object")
        pod = self._get_pod(ns, name)
        blocked = self._pdb_blocks(pod)
        if blocked is not None:
            raise blocked
        self._delete_pod(ns, name)
        return 201, _status(201, "", "")
