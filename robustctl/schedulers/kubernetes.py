"""The Kubernetes back end: cordon, taint, label and evict pods through the API server.

It talks to the API server with the official ``kubernetes`` Python client (``pip install
'robustctl[kubernetes]'``), imported only when ``scheduler.kind: kubernetes`` is configured. Every
request carries the back end's timeout (``scheduler.timeout_s``) and is not retried by the HTTP layer
(urllib3 would otherwise retry a hung request three times, quadrupling the deadline); responses are
read as raw JSON (no model classes), so the back end depends on the API's JSON, not on one client
version's models. An HTTP error, a timeout or an unreachable server raises
:class:`~robustctl.schedulers.base.SchedulerError` naming the request.

Mapping of the :class:`~robustctl.schedulers.base.Scheduler` vocabulary (settings under
``scheduler.kubernetes``, :class:`~robustctl.config.KubernetesSettings`):

* ``drain``: one merge patch of the Node (``metadata.resourceVersion`` as precondition, re-read and
  retried on 409 Conflict) that cordons it (``spec.unschedulable: true``), adds the taint
  ``robustctl.io/evicted=<reason>:NoSchedule`` (key and effect configurable; the reason is reduced to
  a valid label value, ≤ 63 characters, and kept whole in the ``robustctl.io/reason`` annotation),
  drops a standby taint, and sets the label ``robustctl.io/state=evicted``; then every pod on the node
  is removed through the **Eviction API** (``POST …/pods/NAME/eviction``, ``policy/v1``), so
  PodDisruptionBudgets are honoured. Pods of DaemonSets, mirror pods, finished pods and pods already
  terminating are left alone (as ``kubectl drain --ignore-daemonsets`` does). An eviction refused with
  **429** (a budget allows no disruption now) is retried every ``eviction_retry_s`` until
  ``eviction_timeout_s``; the result says how long it waited. Pods still refused then raise a
  SchedulerError naming them and the budget's message: the node stays cordoned and tainted, and
  running the eviction again resumes where it stopped. A node already cordoned and tainted with no
  pod left to evict is a no-op.
* ``resume``: uncordon, remove robustctl's evict and standby taints, its state label and its
  annotations. A schedulable node without them is a no-op.
* ``hold_standby``: cordon, taint ``robustctl.io/standby=<reason>:NoSchedule``, label
  ``robustctl.io/state=standby``. Running pods are left alone (as Slurm's drain leaves a running job).
* ``state``: a standby taint → STANDBY; cordoned or evict-tainted → DRAINED; ``Ready`` condition not
  ``True`` → DOWN; else ACTIVE; no such Node → UNKNOWN. Nodes are read one ``GET`` each, or with one
  ``LIST`` of every Node when more than 8 are asked for.
* ``job_hosts``: the pods of the job are those labelled ``robustctl.io/job=JOB`` in ``namespace``;
  each pod's index (``batch.kubernetes.io/job-completion-index``, an Indexed Job's label or
  annotation) orders them; machine ``k`` is the node of pods ``k·P … k·P+P-1`` (``pods_per_host`` P).
  A machine whose pods are not bound yet (just evicted and recreated, pending) takes its node from
  robustctl's record of the job's hosts (written by ``drain``, ``requeue`` and a standby activation):
  its own recorded node when no bound pod uses it, else the next recorded node no bound pod uses (the
  Kubernetes scheduler, not robustctl, decides which pending pod lands on a freed node); with no
  record left, the call fails.
* ``replace_host``: the Kubernetes scheduler, not robustctl, places pods. robustctl steers it: the
  job's pods are expected to select their nodes with ``nodeSelector: {robustctl.io/job: JOB}``;
  replacing ``old`` by ``new`` labels ``new`` ``robustctl.io/job=JOB`` and removes that label from
  ``old``, so the pod recreated for ``old``'s index lands on ``new`` once ``new`` is schedulable
  (the standby activation resumes it next).
* ``requeue``: delete the job's pods (its controller — Job, JobSet, PyTorchJob — recreates them on
  the job's nodes). Running jobs lose their progress since the last checkpoint, as with Slurm.

The watch also reads a running pod's container log through the API (:meth:`KubeApi.read_pod_log`,
``GET …/pods/NAME/log`` with ``tailLines`` and ``limitBytes``, both applied by the server), at most
:data:`MAX_POD_LOG_BYTES` of each answer.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from robustctl.errors import ConfigError
from robustctl.inputfile import NotReadable, read_regular
from robustctl.schedulers.base import NodeState, OpResult, SchedulerError

if TYPE_CHECKING:
    from robustctl.config import KubernetesSettings, SchedulerSettings
    from robustctl.store import Store

__all__ = [
    "REASON_ANNOTATION",
    "ClientApi",
    "KubeApi",
    "Kubernetes",
    "create",
    "label_value",
    "node_state",
]

REASON_ANNOTATION = "robustctl.io/reason"
"""Node annotation holding the whole reason of an eviction or standby hold."""
AT_ANNOTATION = "robustctl.io/at"
"""Node annotation holding when robustctl changed the node (UTC, RFC 3339)."""
_NAME = "kubernetes"
_LABEL_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_CONFLICT_RETRIES = 5
_LIST_ABOVE = 8  # more hosts than this: one LIST of every Node instead of a GET per host
MAX_KUBECONFIG_BYTES = 4 << 20
"""Largest kubeconfig read, bytes. An entry with its certificate and key inline (base64) is 3-8 KiB,
so 4 MiB holds hundreds of clusters, users and contexts; kubectl's merged configs stay far below."""
MAX_KUBE_CREDENTIAL_BYTES = 1 << 20
"""Largest file a kubeconfig names (certificate-authority, client-certificate, client-key,
tokenFile, an OIDC provider's idp-certificate-authority) read, bytes: a client certificate or key is
a few KiB, a token under 8 KiB, and a bundle of every public root CA about 220 KiB."""
_KUBE_FILES: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "cluster": (("certificate-authority", "certificate-authority-data", True),),
    "user": (
        ("client-certificate", "client-certificate-data", True),
        ("client-key", "client-key-data", True),
        ("tokenFile", "token", False),
    ),
    "auth-provider": (("idp-certificate-authority", "idp-certificate-authority-data", True),),
}
"""Path-valued kubeconfig keys: (file key, the inline key the client prefers, inline value is base64)."""
MAX_POD_LOG_BYTES = 1 << 20
"""Most bytes of one pod-log answer read (:meth:`ClientApi.read_pod_log`; 1 MiB, our choice): the
server applies ``limitBytes`` but "may return slightly more or slightly less than the specified limit"
(API reference, PodLogOptions), so the client reads at most ``min(limit_bytes, MAX_POD_LOG_BYTES)``
bytes of the answer and drops the connection with the rest. 1 MiB is four of the watch's 256 KiB log
tails (:data:`robustctl.watch.logscan.MAX_TAIL_BYTES`), the watch's request
(:data:`robustctl.watch.signals.POD_LOG_LIMIT_BYTES`)."""


def label_value(text: str) -> str:
    """``text`` reduced to a valid label/taint value: ``[A-Za-z0-9._-]``, alphanumeric at both ends,
    ≤ 63 characters (Kubernetes' label value rule); ``"unspecified"`` when nothing is left.

    >>> label_value("xid 79: GPU fell off the bus")
    'xid-79-GPU-fell-off-the-bus'
    """
    value = _LABEL_BAD.sub("-", text.strip())[:63]
    value = value.strip("-._")
    return value or "unspecified"


class KubeApi(Protocol):
    """What the back end asks of the API server; every method returns the JSON object (a dict).

    Raises (every method): SchedulerError for an HTTP error, a timeout or an unreachable server;
    :class:`ApiStatus` (a SchedulerError) when the caller handles the status (404, 409, 429).
    """

    def get_node(self, name: str) -> dict[str, Any]:
        """``GET /api/v1/nodes/NAME``."""
        ...

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """``PATCH /api/v1/nodes/NAME`` with a JSON merge patch."""
        ...

    def list_nodes(self) -> list[dict[str, Any]]:
        """``GET /api/v1/nodes``: the ``items``."""
        ...

    def list_pods(
        self, namespace: str | None, *, label_selector: str = "", field_selector: str = ""
    ) -> list[dict[str, Any]]:
        """``GET /api/v1[/namespaces/NS]/pods`` with selectors: the ``items``."""
        ...

    def evict_pod(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        """``POST /api/v1/namespaces/NS/pods/NAME/eviction`` with a ``policy/v1`` Eviction."""
        ...

    def delete_pod(self, namespace: str, name: str) -> None:
        """``DELETE /api/v1/namespaces/NS/pods/NAME``."""
        ...

    def read_pod_log(
        self, namespace: str, name: str, *, container: str | None, limit_bytes: int, tail_lines: int
    ) -> str:
        """``GET /api/v1/namespaces/NS/pods/NAME/log?container=C&tailLines=T&limitBytes=L``: the text.

        The server takes the last ``tail_lines`` lines of the container's current log, then the first
        ``limit_bytes`` bytes of those (the kubelet's order). ``container`` None: the pod's only
        container (a pod of several answers 400). Raises ApiStatus for 404 (no such pod) and 400 (no
        such container, a container not named among several, a container still waiting to start).
        """
        ...


class ApiStatus(SchedulerError):
    """The API server answered an HTTP error. Attributes: status (HTTP code), body (its Status JSON)."""

    def __init__(self, command: str, status: int, body: Mapping[str, Any]) -> None:
        message = str(body.get("message") or body.get("reason") or f"HTTP {status}")
        causes = (body.get("details") or {}).get("causes") or []
        extra = "; ".join(str(c.get("message")) for c in causes if isinstance(c, dict) and c.get("message"))
        super().__init__(_NAME, command, f"HTTP {status}: {message}" + (f" ({extra})" if extra else ""))
        self.status = status
        self.body = dict(body)


class ClientApi:
    """:class:`KubeApi` over the official client's ``CoreV1Api`` (raw JSON, no retries, a timeout).

    Args:
        core: a ``kubernetes.client.CoreV1Api``.
        timeout_s: each request's deadline, seconds.
    """

    def __init__(self, core: Any, timeout_s: float) -> None:
        self.core = core
        self.timeout_s = timeout_s

    def _call(self, command: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The JSON answer of ``fn(*args, **kwargs)`` ({} when empty); errors as :meth:`_request`."""
        data = self._request(command, lambda resp: resp.data, fn, *args, **kwargs)
        if not data:
            return {}
        try:
            return json.loads(data)
        except ValueError as exc:
            raise SchedulerError(
                _NAME, command, f"API server answered something that is not JSON: {exc}"
            ) from None

    def _request(
        self, command: str, read: Callable[[Any], Any], fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """``read(response)`` of the request ``fn(*args, **kwargs)``, made under the timeout with the
        answer not preloaded, so ``read`` decides how much of it is read.

        Args:
            command: the request as messages name it (e.g. ``"GET nodes/NAME"``).
            read: takes the response and returns what it reads of it.
            fn: the client method making the request.
            *args: positional arguments of ``fn``.
            **kwargs: keyword arguments of ``fn`` (the timeout and ``_preload_content`` are added).

        Returns:
            What ``read`` returned.

        Raises:
            ApiStatus: the server answered an HTTP error.
            SchedulerError: a timeout (of the request or of reading its answer) or an unreachable server.
        """
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError, MaxRetryError, NewConnectionError
        from urllib3.exceptions import TimeoutError as Urllib3Timeout

        try:
            resp = fn(*args, _request_timeout=self.timeout_s, _preload_content=False, **kwargs)
            return read(resp)
        except ApiException as exc:
            try:
                body = json.loads(exc.body or "{}")
            except (TypeError, ValueError):
                body = {}
            if not isinstance(body, dict):
                body = {}
            body.setdefault("message", str(exc.reason or ""))
            raise ApiStatus(command, int(exc.status or 0), body) from None
        except HTTPError as exc:
            cause = exc.reason if isinstance(exc, MaxRetryError) and exc.reason is not None else exc
            if isinstance(cause, Urllib3Timeout) and not isinstance(cause, NewConnectionError):
                reason = f"timed out after {self.timeout_s:g} s (API server unreachable or hung?)"
            else:
                reason = f"cannot reach the API server: {cause}"
            raise SchedulerError(_NAME, command, reason) from None
        except OSError as exc:
            raise SchedulerError(_NAME, command, f"cannot reach the API server: {exc}") from None

    def get_node(self, name: str) -> dict[str, Any]:
        """``GET /api/v1/nodes/NAME``."""
        out: dict[str, Any] = self._call(f"GET nodes/{name}", self.core.read_node, name)
        return out

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """``PATCH /api/v1/nodes/NAME`` (``application/merge-patch+json``)."""
        out: dict[str, Any] = self._call(
            f"PATCH nodes/{name}",
            self.core.patch_node,
            name,
            dict(patch),
            _content_type="application/merge-patch+json",
        )
        return out

    def list_nodes(self) -> list[dict[str, Any]]:
        """``GET /api/v1/nodes``: the ``items``."""
        return _items(self._call("GET nodes", self.core.list_node))

    def list_pods(
        self, namespace: str | None, *, label_selector: str = "", field_selector: str = ""
    ) -> list[dict[str, Any]]:
        """``GET …/pods?labelSelector=…&fieldSelector=…``: the ``items``."""
        kwargs: dict[str, Any] = {}
        if label_selector:
            kwargs["label_selector"] = label_selector
        if field_selector:
            kwargs["field_selector"] = field_selector
        sel = ",".join(s for s in (label_selector, field_selector) if s)
        if namespace is None:
            out = self._call(f"GET pods?{sel}", self.core.list_pod_for_all_namespaces, **kwargs)
        else:
            out = self._call(
                f"GET namespaces/{namespace}/pods?{sel}", self.core.list_namespaced_pod, namespace, **kwargs
            )
        return _items(out)

    def evict_pod(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        """``POST /api/v1/namespaces/NS/pods/NAME/eviction``."""
        self._call(
            f"POST namespaces/{namespace}/pods/{name}/eviction",
            self.core.create_namespaced_pod_eviction,
            name,
            namespace,
            dict(body),
            _content_type="application/json",
        )

    def delete_pod(self, namespace: str, name: str) -> None:
        """``DELETE /api/v1/namespaces/NS/pods/NAME``."""
        self._call(
            f"DELETE namespaces/{namespace}/pods/{name}", self.core.delete_namespaced_pod, name, namespace
        )

    def read_pod_log(
        self, namespace: str, name: str, *, container: str | None, limit_bytes: int, tail_lines: int
    ) -> str:
        """``GET /api/v1/namespaces/NS/pods/NAME/log`` (``CoreV1Api.read_namespaced_pod_log``).

        ``tail_lines`` and ``limit_bytes`` (at most :data:`MAX_POD_LOG_BYTES`) are sent to the server,
        which applies them (the last ``tail_lines`` lines, then their first ``limit_bytes`` bytes); the
        answer is read as a stream, at most ``min(limit_bytes, MAX_POD_LOG_BYTES)`` bytes of it (the
        server may send slightly more), and decoded as UTF-8 with undecodable bytes replaced.

        Args:
            namespace: the pod's namespace.
            name: the pod's name.
            container: its container (None: the pod's only one).
            limit_bytes: bytes asked (≥ 1).
            tail_lines: newest lines asked (≥ 0).

        Returns:
            The log text, oldest line first.

        Raises:
            ApiStatus: an HTTP error (404 no such pod; 400 no such container, none named among several,
                or one waiting to start).
            SchedulerError: a timeout or an unreachable server.
        """
        nbytes = max(1, min(int(limit_bytes), MAX_POD_LOG_BYTES))
        kwargs: dict[str, Any] = {"limit_bytes": nbytes, "tail_lines": max(0, int(tail_lines))}
        if container is not None:
            kwargs["container"] = container
        command = f"GET namespaces/{namespace}/pods/{name}/log" + (
            f"?container={container}" if container is not None else ""
        )

        def read(resp: Any) -> bytes:
            try:
                return bytes(resp.read(nbytes) or b"")[:nbytes]
            finally:  # what is left unread goes with the connection
                resp.close()
                resp.release_conn()

        data: bytes = self._request(
            command, read, self.core.read_namespaced_pod_log, name, namespace, **kwargs
        )
        return data.decode("utf-8", "replace")


# --------------------------------------------------------------------------------------------------
# Pure helpers on the API's JSON
# --------------------------------------------------------------------------------------------------


def _items(listing: Any) -> list[dict[str, Any]]:
    """The ``items`` of a ``…List`` object."""
    items = listing.get("items") if isinstance(listing, dict) else None
    return list(items or [])


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """An object's ``metadata.labels`` ({} when none)."""
    return (obj.get("metadata") or {}).get("labels") or {}


def _active(pod: Mapping[str, Any]) -> bool:
    """Whether a pod still runs or will: not finished (Succeeded/Failed) and not terminating."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _taints(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(t) for t in (node.get("spec") or {}).get("taints") or []]


def _ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def node_state(node: Mapping[str, Any] | None, settings: KubernetesSettings) -> NodeState:
    """A Node's JSON in the Scheduler vocabulary (see the module doc); None → UNKNOWN."""
    if node is None:
        return NodeState.UNKNOWN
    keys = {t.get("key") for t in _taints(node)}
    if settings.standby_taint_key in keys:
        return NodeState.STANDBY
    if (node.get("spec") or {}).get("unschedulable") or settings.evict_taint_key in keys:
        return NodeState.DRAINED
    if not _ready(node):
        return NodeState.DOWN
    return NodeState.ACTIVE


def _evictable(pod: Mapping[str, Any]) -> bool:
    """Whether draining removes this pod: not a DaemonSet's, not a mirror pod, not finished or terminating."""
    if not _active(pod):
        return False
    meta = pod.get("metadata") or {}
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return False
    return not any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or [])


def _pod_name(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '?')}/{meta.get('name', '?')}"


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------------------
# The back end
# --------------------------------------------------------------------------------------------------


@dataclass
class Kubernetes:
    """The Kubernetes back end of the :class:`~robustctl.schedulers.base.Scheduler` protocol.

    Attributes:
        api: the API server (:class:`ClientApi`). settings: ``scheduler.kubernetes``. store: robustctl's
        store (job host lists of pending pods; None: not used). sleep / clock: injectable for tests.
    """

    api: KubeApi
    settings: KubernetesSettings
    store: Store | None = None
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    name: str = field(default=_NAME, init=False)

    # ---- nodes ------------------------------------------------------------------------------------

    def _get(self, host: str) -> dict[str, Any] | None:
        try:
            return self.api.get_node(host)
        except ApiStatus as exc:
            if exc.status == 404:
                return None
            raise

    def _nodes(self, hosts: Sequence[str]) -> dict[str, dict[str, Any] | None]:
        """Each host's Node (None: no such Node): one GET per host, or one LIST for many hosts."""
        names = list(dict.fromkeys(hosts))
        if len(names) <= _LIST_ABOVE:
            return {h: self._get(h) for h in names}
        every = {str((n.get("metadata") or {}).get("name")): n for n in self.api.list_nodes()}
        return {h: every.get(h) for h in names}

    def _require(self, hosts: Sequence[str], operation: str) -> dict[str, dict[str, Any]]:
        nodes = self._nodes(hosts)
        unknown = [h for h, n in nodes.items() if n is None]
        if unknown:
            raise SchedulerError(
                _NAME, f"{operation} {','.join(unknown)}", f"no such Node: {', '.join(unknown)}"
            )
        return {h: n for h, n in nodes.items() if n is not None}

    def state(self, hosts: Sequence[str]) -> Mapping[str, NodeState]:
        """Each host's state (UNKNOWN for a host that is not a Node)."""
        return {h: node_state(n, self.settings) for h, n in self._nodes(hosts).items()}

    def _update(
        self,
        host: str,
        node: dict[str, Any],
        want: Callable[[dict[str, Any]], dict[str, Any] | None],
    ) -> tuple[dict[str, Any], bool]:
        """Apply ``want(node)`` (a merge patch, or None when nothing is to change) with the node's
        resourceVersion as precondition; on 409 Conflict re-read and retry."""
        for _ in range(_CONFLICT_RETRIES):
            patch = want(node)
            if patch is None:
                return node, False
            patch.setdefault("metadata", {})["resourceVersion"] = (node.get("metadata") or {}).get(
                "resourceVersion"
            )
            try:
                return self.api.patch_node(host, patch), True
            except ApiStatus as exc:
                if exc.status != 409:
                    raise
            fresh = self._get(host)
            if fresh is None:
                raise SchedulerError(_NAME, f"PATCH nodes/{host}", "the Node was deleted meanwhile")
            node = fresh
        raise SchedulerError(
            _NAME, f"PATCH nodes/{host}", f"still conflicting after {_CONFLICT_RETRIES} tries (409 Conflict)"
        )

    def _mark_patch(
        self, node: Mapping[str, Any], *, taint_key: str, effect: str, drop_key: str, state: str, reason: str
    ) -> dict[str, Any] | None:
        """The merge patch that cordons ``node``, sets taint ``taint_key`` (keeping an existing one),
        drops taint ``drop_key``, labels it ``state`` and annotates ``reason``; None when already so."""
        s = self.settings
        taints = _taints(node)
        has = any(t.get("key") == taint_key for t in taints)
        drop = any(t.get("key") == drop_key for t in taints)
        labels = _labels(node)
        cordoned = bool((node.get("spec") or {}).get("unschedulable"))
        if has and not drop and cordoned and labels.get(s.state_label) == state:
            return None
        new_taints = [t for t in taints if t.get("key") not in (taint_key, drop_key)]
        keep = next((t for t in taints if t.get("key") == taint_key), None)
        new_taints.append(keep or {"key": taint_key, "value": label_value(reason), "effect": effect})
        annotations: dict[str, Any] = {}
        if keep is None:
            annotations = {REASON_ANNOTATION: " ".join(reason.split()), AT_ANNOTATION: _now()}
        patch: dict[str, Any] = {
            "metadata": {"labels": {s.state_label: state}},
            "spec": {"unschedulable": True, "taints": new_taints},
        }
        if annotations:
            patch["metadata"]["annotations"] = annotations
        return patch

    def _mark(
        self, host: str, node: dict[str, Any], taint_key: str, effect: str, state: str, reason: str
    ) -> bool:
        """Cordon ``host`` with taint ``taint_key`` (the other robustctl taint dropped) and label ``state``;
        whether it changed."""
        s = self.settings
        drop_key = s.standby_taint_key if taint_key == s.evict_taint_key else s.evict_taint_key
        _, changed = self._update(
            host,
            node,
            lambda n: self._mark_patch(
                n, taint_key=taint_key, effect=effect, drop_key=drop_key, state=state, reason=reason
            ),
        )
        return changed

    def drain(self, hosts: Sequence[str], reason: str) -> list[OpResult]:
        """Cordon, taint and label ``hosts``, then evict their pods (see the module doc).

        Args:
            hosts: the Node names.
            reason: why, put in the taint's value and the reason annotation.

        Returns:
            One result per host, in the order given: what was patched and evicted, or "already drained".

        Raises:
            SchedulerError: a host that is not a Node (nothing is changed then); a request failed or
                timed out; pods still refused by a PodDisruptionBudget after ``eviction_timeout_s``
                (the node stays cordoned and tainted; the message names the pods and the budget).
        """
        s = self.settings
        nodes = self._require(hosts, "drain")
        out: list[OpResult] = []
        for host, node in nodes.items():
            patched = self._mark(host, node, s.evict_taint_key, s.evict_taint_effect, "evicted", reason)
            pods = self.api.list_pods(None, field_selector=f"spec.nodeName={host}")
            self._remember_jobs(pods)
            evicted, waited = self._evict_all(host, [p for p in pods if _evictable(p)])
            parts = []
            if patched:
                parts.append(
                    f"cordoned, tainted {s.evict_taint_key}={label_value(reason)}:{s.evict_taint_effect}, "
                    f"labelled {s.state_label}=evicted"
                )
            if evicted:
                shown = ", ".join(evicted[:5]) + (f" and {len(evicted) - 5} more" if len(evicted) > 5 else "")
                parts.append(f"evicted {len(evicted)} pod(s) ({shown})")
            if waited > 0:
                parts.append(f"waited {waited:.1f} s on PodDisruptionBudgets")
            changed = patched or bool(evicted)
            detail = "; ".join(parts) if changed else "already drained (cordoned, tainted, no pod to evict)"
            out.append(OpResult(host, "drain", changed, detail))
        return out

    def _eviction_body(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        meta = pod.get("metadata") or {}
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
        }
        if self.settings.grace_period_s is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": self.settings.grace_period_s}
        return body

    def _evict_all(self, host: str, pods: list[dict[str, Any]]) -> tuple[list[str], float]:
        """Evict ``pods``; retry those a budget refuses (429) until the eviction timeout.

        Returns: (the pods evicted, seconds spent waiting on budgets).
        """
        start = self.clock()
        deadline = start + self.settings.eviction_timeout_s
        evicted: list[str] = []
        pending = list(pods)
        blocked: dict[str, str] = {}
        waited = 0.0
        while pending:
            still: list[dict[str, Any]] = []
            for pod in pending:
                meta = pod.get("metadata") or {}
                try:
                    self.api.evict_pod(
                        str(meta.get("namespace")), str(meta.get("name")), self._eviction_body(pod)
                    )
                    evicted.append(_pod_name(pod))
                except ApiStatus as exc:
                    if exc.status == 404:
                        continue  # gone already
                    if exc.status != 429:
                        raise
                    blocked[_pod_name(pod)] = exc.reason
                    still.append(pod)
            pending = still
            if not pending:
                break
            now = self.clock()
            if now >= deadline:
                names = ", ".join(_pod_name(p) for p in pending)
                why = blocked.get(_pod_name(pending[0]), "")
                raise SchedulerError(
                    _NAME,
                    f"evict pods of {host}",
                    f"{len(pending)} pod(s) still refused by a PodDisruptionBudget after "
                    f"{self.settings.eviction_timeout_s:g} s: {names} ({why}); the node is cordoned and "
                    f"tainted; evicted so far: {len(evicted)}; run the eviction again once the budget allows",
                )
            pause = min(self.settings.eviction_retry_s, max(0.0, deadline - now))
            self.sleep(pause)
            waited = self.clock() - start
        return evicted, waited

    def resume(self, hosts: Sequence[str], reason: str) -> list[OpResult]:
        """Uncordon ``hosts`` and remove robustctl's taints, label and annotations; no-op when schedulable.

        Args:
            hosts: the Node names.
            reason: why, shown in each result's detail (whitespace collapsed).

        Returns:
            One result per host, in the order given: changed, or "already schedulable".

        Raises:
            SchedulerError: a host that is not a Node (nothing is changed then), or a request failed.
        """
        s = self.settings
        nodes = self._require(hosts, "resume")

        def want(node: dict[str, Any]) -> dict[str, Any] | None:
            taints = _taints(node)
            ours = (s.evict_taint_key, s.standby_taint_key)
            annotations = (node.get("metadata") or {}).get("annotations") or {}
            dirty = (
                bool((node.get("spec") or {}).get("unschedulable"))
                or any(t.get("key") in ours for t in taints)
                or s.state_label in _labels(node)
                or REASON_ANNOTATION in annotations
            )
            if not dirty:
                return None
            return {
                "metadata": {
                    "labels": {s.state_label: None},
                    "annotations": {REASON_ANNOTATION: None, AT_ANNOTATION: None},
                },
                "spec": {
                    "unschedulable": None,
                    "taints": [t for t in taints if t.get("key") not in ours] or None,
                },
            }

        out = []
        why = " ".join(reason.split())
        for host, node in nodes.items():
            _, changed = self._update(host, node, want)
            detail = "uncordoned, robustctl taints and label removed" + (f" ({why})" if why else "")
            out.append(OpResult(host, "resume", changed, detail if changed else "already schedulable"))
        return out

    def hold_standby(self, hosts: Sequence[str], reason: str) -> list[OpResult]:
        """Cordon ``hosts``, taint them ``robustctl.io/standby=<reason>:NoSchedule``, label them standby.

        Args:
            hosts: the Node names.
            reason: why, put in the taint's value and the reason annotation.

        Returns:
            One result per host, in the order given.

        Raises:
            SchedulerError: a host that is not a Node (nothing is changed then), or a request failed.
        """
        s = self.settings
        nodes = self._require(hosts, "hold_standby")
        out = []
        for host, node in nodes.items():
            changed = self._mark(host, node, s.standby_taint_key, "NoSchedule", "standby", reason)
            detail = (
                f"cordoned, tainted {s.standby_taint_key}={label_value(reason)}:NoSchedule, "
                f"labelled {s.state_label}=standby"
            )
            out.append(OpResult(host, "hold_standby", changed, detail if changed else "already a standby"))
        return out

    # ---- jobs -------------------------------------------------------------------------------------

    def _job_pods(self, job: str, operation: str) -> list[dict[str, Any]]:
        """The job's active pods. Raises SchedulerError (naming ``operation``) when it has none."""
        s = self.settings
        pods = [
            p for p in self.api.list_pods(s.namespace, label_selector=f"{s.job_label}={job}") if _active(p)
        ]
        if not pods:
            raise SchedulerError(
                _NAME, f"{operation} {job}", f"no pod labelled {s.job_label}={job} in namespace {s.namespace}"
            )
        return pods

    def _index(self, pod: Mapping[str, Any]) -> int:
        meta = pod.get("metadata") or {}
        key = self.settings.index_label
        raw = (meta.get("labels") or {}).get(key, (meta.get("annotations") or {}).get(key))
        try:
            return int(str(raw))
        except ValueError:
            raise SchedulerError(
                _NAME,
                f"job pods in namespace {self.settings.namespace}",
                f"pod {_pod_name(pod)} has no integer {key} label or annotation (got {raw!r})",
            ) from None

    def _placement(self, job: str, pods: Sequence[Mapping[str, Any]]) -> list[str | None]:
        """The node of each machine of ``job`` from ``pods`` (None: its pods are not bound yet)."""
        per = self.settings.pods_per_host
        by_index: dict[int, str | None] = {}
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName") or None
            i = self._index(pod)
            if by_index.get(i) is None:
                by_index[i] = node
        if not by_index:
            return []
        machines = (max(by_index) // per) + 1
        out: list[str | None] = []
        for k in range(machines):
            nodes = {by_index.get(i) for i in range(k * per, (k + 1) * per)} - {None}
            if len(nodes) > 1:
                raise SchedulerError(
                    _NAME,
                    f"job_hosts {job}",
                    f"pods {k * per}…{(k + 1) * per - 1} of machine {k} run on several nodes "
                    f"({', '.join(sorted(str(n) for n in nodes))}); check scheduler.kubernetes.pods_per_host",
                )
            out.append(next(iter(nodes)) if nodes else None)
        return out

    def job_hosts(self, job: str) -> list[str]:
        """The job's machines in rank order (see the module doc).

        Args:
            job: the job, by the value of its pods' job label.

        Returns:
            The Node names, machine 0 first.

        Raises:
            SchedulerError: no pod of the job, a pod without an index, or a pending pod whose node
                robustctl has no record of.
        """
        return self._hosts_of(job, self._job_pods(job, "job_hosts"))

    def _hosts_of(self, job: str, pods: Sequence[Mapping[str, Any]]) -> list[str]:
        """:meth:`job_hosts` from the job's active ``pods``."""
        placement = self._placement(job, pods)
        recorded = (self.store.job_hosts(job) if self.store is not None else None) or []
        spare = [h for h in recorded if h not in placement]
        for k, node in enumerate(placement):  # a pending machine keeps its recorded node where free
            if node is None and k < len(recorded) and recorded[k] in spare:
                placement[k] = recorded[k]
                spare.remove(recorded[k])
        for k, node in enumerate(placement):  # else the job's other recorded nodes, in order
            if node is None and spare:
                placement[k] = spare.pop(0)
        out: list[str] = []
        for k, node in enumerate(placement):
            if node is None:
                raise SchedulerError(
                    _NAME,
                    f"job_hosts {job}",
                    f"machine {k} of job {job} has no node: its pod is pending and robustctl has no record of it",
                )
            out.append(node)
        return out

    def _remember_jobs(self, pods: Sequence[Mapping[str, Any]]) -> None:
        """Record the host list of each job with pods in ``pods`` before they are evicted or deleted."""
        if self.store is None:
            return
        label = self.settings.job_label
        jobs = {
            _labels(p)[label]
            for p in pods
            if _labels(p).get(label) and (p.get("metadata") or {}).get("namespace") == self.settings.namespace
        }
        for job in sorted(jobs):
            try:
                hosts = self.job_hosts(job)
            except SchedulerError:
                continue
            self.store.set_job_hosts(job, hosts)

    def replace_host(self, job: str, old: str, new: str) -> OpResult:
        """Label ``new`` as the job's node in place of ``old`` (see the module doc).

        Args:
            job: the job, by the value of its pods' job label.
            old: the Node leaving the job.
            new: the Node taking its place.

        Returns:
            The result for ``job``: changed, or not when ``new`` already replaces ``old``.

        Raises:
            SchedulerError: ``new`` is not a Node, ``old`` is not a host of the job, or ``new`` already is.
        """
        label = self.settings.job_label
        node = self._require([new], "replace_host")[new]
        hosts = self.job_hosts(job)
        where = f"replace_host {job} {old} {new}"
        if old not in hosts and new in hosts:
            return OpResult(job, "replace_host", False, f"{new} already replaces {old}")
        if old not in hosts:
            raise SchedulerError(
                _NAME, where, f"{old} is not a host of job {job} (hosts: {', '.join(hosts)})"
            )
        if new in hosts:
            raise SchedulerError(_NAME, where, f"{new} is already a host of job {job}")
        steps = []
        _, changed = self._update(
            new,
            node,
            lambda n: None if _labels(n).get(label) == job else {"metadata": {"labels": {label: job}}},
        )
        if changed:
            steps.append(f"labelled {new} {label}={job}")
        old_node = self._get(old)
        if old_node is not None:
            _, removed = self._update(
                old,
                old_node,
                lambda n: {"metadata": {"labels": {label: None}}} if _labels(n).get(label) == job else None,
            )
            if removed:
                steps.append(f"removed {label} from {old}")
        if self.store is not None:
            self.store.set_job_hosts(job, [new if h == old else h for h in hosts])
        detail = "; ".join(steps) or f"{new} already labelled for job {job}"
        return OpResult(
            job,
            "replace_host",
            True,
            f"{detail}; the pod of {old}'s index goes to {new} once it is schedulable",
        )

    def requeue(self, job: str) -> OpResult:
        """Delete the job's pods so that its controller recreates them on the job's nodes.

        Args:
            job: the job, by the value of its pods' job label.

        Returns:
            The result for ``job``, naming how many pods were deleted.

        Raises:
            SchedulerError: the job has no pod, or a deletion failed.
        """
        pods = self._job_pods(job, "requeue")
        if self.store is not None:
            with contextlib.suppress(SchedulerError):  # a job whose hosts are unknown has none to keep
                self.store.set_job_hosts(job, self._hosts_of(job, pods))
        deleted = []
        for pod in pods:
            meta = pod.get("metadata") or {}
            try:
                self.api.delete_pod(str(meta.get("namespace")), str(meta.get("name")))
                deleted.append(_pod_name(pod))
            except ApiStatus as exc:
                if exc.status != 404:
                    raise
        return OpResult(
            job, "requeue", True, f"deleted {len(deleted)} pod(s) of job {job}; its controller recreates them"
        )


def _load_client(settings: KubernetesSettings, timeout_s: float) -> ClientApi:
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
    except ImportError:
        raise ConfigError(
            "scheduler.kind kubernetes needs the kubernetes client: pip install 'robustctl[kubernetes]'"
        ) from None
    configuration = client.Configuration()
    env = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    default = Path("~/.kube/config").expanduser()
    path = Path(settings.kubeconfig or env).expanduser() if (settings.kubeconfig or env) else None
    try:
        if path is None and not default.exists() and "KUBERNETES_SERVICE_HOST" in os.environ:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            cfg_file = path or default
            origin = "scheduler.kubernetes.kubeconfig" if settings.kubeconfig else "KUBECONFIG" if env else ""
            doc = read_kubeconfig(cfg_file, origin=origin, context=settings.context)
            config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]
                doc, context=settings.context, client_configuration=configuration, persist_config=False
            )
    except ConfigException as exc:
        raise ConfigError(f"scheduler.kubernetes: {exc}") from None
    configuration.retries = False
    return ClientApi(client.CoreV1Api(client.ApiClient(configuration)), timeout_s)


def read_kubeconfig(path: Path, *, origin: str, context: str | None) -> dict[str, Any]:
    """The kubeconfig at ``path``, with every file its context's cluster and user name read and put inline.

    The kubeconfig and each file it names (:data:`_KUBE_FILES`; a relative path is relative to the
    kubeconfig's directory, as the client resolves it) are read by robustctl as bounded regular files
    (:func:`robustctl.inputfile.read_regular`, :data:`MAX_KUBECONFIG_BYTES`,
    :data:`MAX_KUBE_CREDENTIAL_BYTES`), so the client is handed data, never a path it would open
    itself (a FIFO there would block it, ``/dev/zero`` fill memory). The YAML is parsed with
    :func:`robustctl.yamlsrc.parse_yaml` (bounded nodes and depth). Only the cluster and user of
    ``context`` (default: ``current-context``) are touched, as only they are loaded; an inline value
    already there wins over the file, as in the client.

    Args:
        path: the kubeconfig.
        origin: the setting that named it, for messages ("" for the default ~/.kube/config).
        context: the context (None: the kubeconfig's ``current-context``).

    Returns:
        The document (a copy), for ``kubernetes.config.load_kube_config_from_dict``.

    Raises:
        ConfigError: the kubeconfig does not exist, is not a regular file, is too large, is not UTF-8
            YAML, or a file it names cannot be read as a bounded regular file; one line naming it.
    """
    from robustctl.yamlsrc import parse_yaml

    try:
        raw = read_regular(path, MAX_KUBECONFIG_BYTES)
    except NotReadable as exc:
        if exc.missing:
            raise ConfigError(
                f"scheduler.kubernetes: kubeconfig {path} does not exist "
                "(set scheduler.kubernetes.kubeconfig or $KUBECONFIG)"
            ) from None
        raise ConfigError(_refused(path, "kubeconfig", exc.reason, origin)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(_refused(path, "kubeconfig", f"is not UTF-8 text ({exc.reason})", origin)) from None
    data, _ = parse_yaml(text, str(path))
    if not isinstance(data, dict):
        raise ConfigError(_refused(path, "kubeconfig", "is not a mapping", origin))
    doc = copy.deepcopy(data)
    name = context or doc.get("current-context")
    ctx = next(
        (c.get("context") for c in _entries(doc, "contexts") if c.get("name") == name),
        None,
    )
    if not isinstance(ctx, dict):
        return doc  # the client reports the missing context
    base = path.parent
    for section, kind, ref in (
        ("clusters", "cluster", ctx.get("cluster")),
        ("users", "user", ctx.get("user")),
    ):
        for entry in _entries(doc, section):
            obj = entry.get(kind)
            if entry.get("name") != ref or not isinstance(obj, dict):
                continue
            where = f"{kind} {ref!r} of kubeconfig {path}"
            _inline(obj, _KUBE_FILES[kind], base, where)
            provider = obj.get("auth-provider")
            if kind == "user" and isinstance(provider, dict) and isinstance(provider.get("config"), dict):
                _inline(provider["config"], _KUBE_FILES["auth-provider"], base, f"auth-provider of {where}")
    return doc


def _refused(path: object, what: str, reason: str, origin: str = "") -> str:
    """``"PATH: WHAT is a FIFO, not a regular file (from SETTING)"``, or ``"PATH: WHAT unreadable:
    REASON (from SETTING)"`` for a reason that is not an ``is ...`` (as the SSH transport says it)."""
    why = f" {reason}" if reason.startswith("is ") else f" unreadable: {reason}"
    return f"{path}: {what}{why}" + (f" (from {origin})" if origin else "")


def _entries(doc: Mapping[str, Any], section: str) -> list[dict[str, Any]]:
    """The mapping entries of the list ``doc[section]`` (others are left to the client's checks)."""
    items = doc.get(section)
    return [e for e in items if isinstance(e, dict)] if isinstance(items, list) else []


def _inline(obj: dict[str, Any], keys: Sequence[tuple[str, str, bool]], base: Path, where: str) -> None:
    """Replace each file key of ``obj`` by its inline key, the file read as a bounded regular file.

    Args:
        obj: the cluster, user or auth-provider config, changed in place.
        keys: ``(file key, inline key, inline value is base64)`` for each path-valued key.
        base: the kubeconfig's directory, which relative paths are relative to.
        where: what ``obj`` is, for messages (e.g. ``"user 'u' of kubeconfig K"``).

    Raises:
        ConfigError: ``"FILE: client-key of user 'u' of kubeconfig K is a FIFO, not a regular file"``.
    """
    for file_key, data_key, b64 in keys:
        if file_key not in obj:
            continue
        value = obj.pop(file_key)
        if data_key in obj:  # the client takes the inline value whenever the key is there
            continue
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where}: {file_key} is not a file name")
        file = Path(os.path.normpath(os.path.join(base, value)))  # as the client resolves it
        try:
            content = read_regular(file, MAX_KUBE_CREDENTIAL_BYTES)
        except NotReadable as exc:
            raise ConfigError(_refused(file, f"{file_key} of {where}", exc.reason)) from None
        obj[data_key] = (
            base64.b64encode(content).decode("ascii") if b64 else content.decode("utf-8", "replace")
        )


def create(
    settings: SchedulerSettings, *, inventory: object = None, store: Store | None = None
) -> Kubernetes:
    """The factory :func:`robustctl.schedulers.make_scheduler` calls for ``scheduler.kind: kubernetes``.

    Args:
        settings: the inventory's ``scheduler:`` section (its ``kubernetes:`` part and ``timeout_s``).
        inventory: not used.
        store: the state store, where job host lists are recorded; None: none are.

    Returns:
        The configured back end.

    Raises:
        ConfigError: the client is not installed, or the kubeconfig is missing or invalid.
    """
    from robustctl.config import KubernetesSettings

    del inventory
    sub = settings.kubernetes or KubernetesSettings()
    return Kubernetes(_load_client(sub, float(settings.timeout_s)), sub, store)
