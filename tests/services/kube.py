"""Kubernetes API stand-in: a kmock KubernetesEmulator served over HTTP from a thread.

    with kube_server() as kube:
        os.environ["KUBECONFIG"] = str(kube.kubeconfig)      # context "kmock"
        kube.emulator.objects["v1/pods", "ns", "p"] = {...}  # seed state (no watch event)
        kube.set_pod_log("ns", "p", "line 1\\n")              # text/plain, honours tailLines
        kube.call(lambda: kube.emulator[...] << b"more")     # anything touching asyncio

The emulator is stateful (create/get/list/patch/delete/watch, custom resources too) but
runs no controllers: a test plays the training operator by creating pods and patching
statuses itself. Declared kinds list as empty (200) instead of 404. On top of kmock 0.8:

* create answers 201 (the kubernetes client returns None for a 200 create) and fills
  metadata.namespace, uid, creationTimestamp, resourceVersion and generation before the
  object is stored (kmock alone drops ADDED events of objects posted without a namespace
  from namespaced watches); patches bump resourceVersion;
* discovery answers `/api/`, `/apis/`, `/version/` too (the generated clients' paths) and
  `/api` in the full shape the pydantic-based client 37 validates;
* `/api/v1/namespaces[/NAME]` works (kmock 0.8 misparses it; patched in process, once);
* server-side apply (PATCH with application/apply-patch+yaml) of a missing object
  creates it (then merges, as kmock patches);
* a CustomResourceDefinition written serves its versions' resources, deleted stops them
  (tests/services/crds.py), as the API server's discovery does;
* pods/log answers text/plain from `set_pod_log` ('' if unset, 404 for a missing pod)
  instead of the pod's JSON;
* a LIST of events honours fieldSelector (involvedObject.name=..., type!=...), every
  LIST honours labelSelector (=, ==, !=, in, notin, exists, !exists) and `limit` /
  `continue` as the API server does, a chunk read by key range (`KeyedObjects`: kmock
  alone ignores all three and scans every object), and
  every LIST is counted: `emulator.lists` by resource, `emulator.listed_objects` served;
* a LIST whose Accept asks `as=PartialObjectMetadataList` answers each object's metadata
  alone, as the API server does (counted in `emulator.listed_metadata` instead);
* `emulator.admission` holds admission webhooks: called with each create/update before
  the object is stored, one raising kmock.KubernetesError refuses the write;
* a Node keeps metadata.managedFields as an API server does for Update operations: the
  field manager (`?fieldManager=`, else the User-Agent's product, as the API server
  derives it) of a patch owns the fields it changed, others lose them, and a removed
  field is nobody's (who cordoned a node is what the quarantine release reads).

Reactions a test adds at the default priority (`kube.emulator["post /..."] << 500`) win
over these defaults; among reactions of equal priority the OLDEST wins.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import contextlib
import contextvars
import datetime
import inspect
import itertools
import json
import re
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from tests.services import crds

PYTORCHJOB = "kubeflow.org/v1/pytorchjobs"
_VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")

# Kinds declared up front: resource -> (kind, namespaced, subresources).
DECLARED: dict[str, tuple[str, bool, tuple[str, ...]]] = {
    "v1/namespaces": ("Namespace", False, ("status",)),
    "v1/nodes": ("Node", False, ("status",)),
    "v1/pods": ("Pod", True, ("status", "log", "proxy")),
    "v1/events": ("Event", True, ()),
    "v1/services": ("Service", True, ("status",)),
    "v1/configmaps": ("ConfigMap", True, ()),
    "v1/secrets": ("Secret", True, ()),
    PYTORCHJOB: ("PyTorchJob", True, ("status",)),
    "apps/v1/daemonsets": ("DaemonSet", True, ("status",)),
    "apps/v1/deployments": ("Deployment", True, ("status",)),
    "batch/v1/jobs": ("Job", True, ("status",)),
    "apiextensions.k8s.io/v1/customresourcedefinitions": ("CustomResourceDefinition", False, ()),
    "v1/persistentvolumeclaims": ("PersistentVolumeClaim", True, ("status",)),
    "v1/persistentvolumes": ("PersistentVolume", False, ("status",)),
    "storage.k8s.io/v1/storageclasses": ("StorageClass", False, ()),
    "v1/serviceaccounts": ("ServiceAccount", True, ()),
    "rbac.authorization.k8s.io/v1/clusterroles": ("ClusterRole", False, ()),
    "rbac.authorization.k8s.io/v1/clusterrolebindings": ("ClusterRoleBinding", False, ()),
    "admissionregistration.k8s.io/v1/validatingwebhookconfigurations": (
        "ValidatingWebhookConfiguration",
        False,
        (),
    ),
}
# The metrics-server's API (`kubectl top`), served once a test records a pod's use
# (`KubeService.set_pod_usage`), absent otherwise, as on a cluster without the add-on.
# Its shape follows kubernetes-sigs/metrics-server v0.9.0: pkg/api/install.go serves
# `pods` (kind PodMetrics, namespaced, get/list) in metrics.k8s.io/v1beta1; a LIST selects
# the pods by labelSelector and each PodMetrics carries its pod's labels, a timestamp, a
# window and per container usage {cpu, memory} (pkg/api/pod.go, pkg/storage/pod.go).
METRICS_PODS = "metrics.k8s.io/v1beta1/pods"
# Kinds whose writes keep metadata.managedFields here (see `managed_fields`).
MANAGED_FIELDS = ("v1/nodes",)
# Kinds whose LIST honours fieldSelector here as an API server does (equality `a.b=v`,
# `a.b==v` and `a.b!=v`, joined by commas; kmock alone ignores selectors).
FIELD_SELECTED = ("v1/events",)


def fields_match(obj: dict[str, Any], selector: str) -> bool:
    """Whether `obj` matches a field selector (every term; a missing field is '')."""
    for term in filter(None, selector.split(",")):
        negated = "!=" in term
        path, value = term.split("!=" if negated else ("==" if "==" in term else "="), 1)
        found: Any = obj
        for key in path.split("."):
            found = found.get(key) if isinstance(found, dict) else None
        if (str(found if found is not None else "") == value) == negated:
            return False
    return True


# A LIST's labelSelector as the API server parses it (kubernetes.io "Labels and
# Selectors"): terms joined by commas, each `k`, `!k`, `k=v`, `k==v`, `k!=v`,
# `k in (a,b)` or `k notin (a,b)`; `!=` and `notin` match an object without the label.
_LABEL_TERM = re.compile(
    r"^\s*(?:(?P<absent>!)\s*(?P<akey>[^\s!=,()]+)"
    r"|(?P<key>[^\s!=,()]+)(?:\s*(?P<op>==|=|!=)\s*(?P<value>[^\s,()]*)"
    r"|\s+(?P<set>in|notin)\s*\((?P<values>[^()]*)\))?)\s*$"
)


def labels_match(obj: dict[str, Any], selector: str) -> bool:
    """Whether `obj`'s labels match a label selector (every term)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in re.split(r",(?![^()]*\))", selector):
        if not term.strip():
            continue
        found = _LABEL_TERM.match(term)
        if found is None:
            raise ValueError(f"unable to parse requirement: {term!r}")
        if found["absent"]:
            ok = found["akey"] not in labels
        elif found["op"]:
            equal = labels.get(found["key"]) == found["value"]
            ok = not equal if found["op"] == "!=" else equal
        elif found["set"]:
            values = {v.strip() for v in found["values"].split(",")}
            inside = found["key"] in labels and labels[found["key"]] in values
            ok = inside if found["set"] == "in" else not inside
        else:
            ok = found["key"] in labels
        if not ok:
            return False
    return True


def _continue_token(key: tuple[str, str]) -> str:
    """An opaque `continue` token (the API server's is base64 JSON of where to start)."""
    return base64.urlsafe_b64encode(json.dumps({"start": list(key)}).encode()).decode()


def _start_after(params: Any) -> tuple[str, str] | None:
    token = params.get("continue")
    return tuple(json.loads(base64.urlsafe_b64decode(token))["start"]) if token else None


class KeyedObjects(dict):
    """kmock's store of objects (key (resource, namespace, name) -> object), keeping
    per kind its keys sorted by (namespace, name), as etcd keeps them: a chunk of a LIST
    is a key range (`chunk`: a bisect and the chunk's objects, O(limit + log n)), not a
    sort and a scan of every object per request. Kept on every write of a key (kmock's
    and a test's `emulator.objects[...] = ...` alike); an object's content is read live,
    so a patch needs nothing here."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._sorted: dict[tuple[Any, ...], list[tuple[str, str, Any]]] = {}
        for key in self:
            self._add(key)
        self.examined = 0  # objects chunks looked at (tests: a chunk's cost)

    @staticmethod
    def _kind(resource: Any) -> tuple[Any, ...]:
        return (resource.group, resource.version, resource.plural)

    def _add(self, key: tuple[Any, str | None, str]) -> None:
        resource, namespace, name = key
        bisect.insort(self._sorted.setdefault(self._kind(resource), []),
                      (namespace or "", name, key), key=_where)  # fmt: skip

    def _drop(self, key: tuple[Any, str | None, str]) -> None:
        resource, namespace, name = key
        keys = self._sorted.get(self._kind(resource), [])
        at = bisect.bisect_left(keys, (namespace or "", name), key=_where)
        while at < len(keys) and _where(keys[at]) == (namespace or "", name):
            if keys[at][2] == key:
                del keys[at]
                return
            at += 1

    def __setitem__(self, key: Any, value: Any) -> None:
        if key not in self:
            self._add(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        self._drop(key)

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self:
            self._drop(key)
        return super().pop(key, *default)

    def clear(self) -> None:
        super().clear()
        self._sorted.clear()

    def chunk(
        self,
        resource: Any,
        namespace: str | None,
        params: Any,
        keep: Callable[[dict[str, Any]], bool] | None,
        count_rest: bool,
    ) -> dict[str, Any]:
        """A LIST answer as the API server's chunking gives it (API Concepts, "Retrieving
        large results sets in chunks"): items in key order (namespace, then name), at
        most `limit`, `metadata.continue` when more follow (the next request passes it
        back with the same selectors) and `remainingItemCount` then, unless a selector
        made the count unknown. Of the live objects of `resource` (in `namespace`;
        None: every namespace) that `keep` selects (None: no selector), read from the
        key after the `continue` token on: past the deleted and unselected ones, at most
        `limit` + 1 objects are looked at. `remainingItemCount` (`count_rest`: a list
        without selectors) counts the rest by their keys, a flag each for the deleted."""
        keys = self._sorted.get(self._kind(resource), [])
        at, end = 0, len(keys)
        if namespace is not None:
            at = bisect.bisect_left(keys, (namespace, ""), key=_where)
            end = bisect.bisect_left(keys, (namespace + "\0", ""), at, key=_where)
        if (start := _start_after(params)) is not None:
            at = max(at, bisect.bisect_right(keys, start, at, end, key=_where))
        limit = int(params.get("limit") or 0)
        items: list[dict[str, Any]] = []
        metadata: dict[str, Any] = {"resourceVersion": "..."}
        last = at
        for i in range(at, end):
            obj = super().get(keys[i][2])
            self.examined += 1
            if obj is None or obj.deleted or (keep is not None and not keep(obj.raw)):
                continue
            if 0 < limit == len(items):  # one more: the chunk ends before it
                metadata["continue"] = _continue_token(_where(keys[last]))
                if count_rest:
                    live = (not self[k].deleted for *_, k in keys[i + 1 : end])
                    metadata["remainingItemCount"] = 1 + sum(live)
                break
            items.append(obj.raw)
            last = i
        return {"metadata": metadata, "items": items}


def _where(entry: tuple[Any, ...]) -> tuple[str, str]:
    """A key's place in a kind's keys: (namespace, name)."""
    return entry[0], entry[1]


# Namespaces a real cluster always has.
DEFAULT_NAMESPACES = ("default", "kube-system")


def _patch_kmock_namespaces() -> None:
    """kmock 0.8 reads /api/v1/namespaces[/NAME] as "namespace NAME, no resource" (500 on
    create/list). Route those paths, and namespaces/NAME/{status,finalize}, to the
    cluster-scoped `namespaces` resource. Idempotent; a no-op once kmock parses them."""
    from kmock._internal import parsing

    original = parsing.parse_path
    try:
        if original("/api/v1/namespaces").plural == "namespaces":
            return
    except ValueError:
        pass

    def parse_path(path: str) -> parsing.ParsedPath:
        parts = path.strip("/").split("/")
        if (
            len(parts) >= 3
            and parts[0] == "api"
            and parts[2] == "namespaces"
            and (len(parts) <= 4 or (len(parts) == 5 and parts[4] in ("status", "finalize")))
        ):
            name = parts[3] if len(parts) >= 4 else None
            subresource = parts[4] if len(parts) == 5 else None
            return parsing.ParsedPath("", parts[1], "namespaces", None, name, subresource)
        return original(path)

    parsing.parse_path = parse_path


_EMULATOR_CLASS: type | None = None

# The request whose reactions are being chosen, while the emulator alone is its history.
_ALONE: contextvars.ContextVar[Any] = contextvars.ContextVar("kmock_alone", default=None)


def _leaves(patch: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """A merge patch's leaves: (path, value); a list or a scalar is one leaf, None removes."""
    if isinstance(patch, dict) and patch:
        for key, value in patch.items():
            yield from _leaves(value, (*path, key))
    else:
        yield path, patch


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def managed_fields(
    old: dict[str, Any], patch: dict[str, Any], manager: str, api_version: str
) -> list[dict[str, Any]]:
    """`old`'s managedFields after `manager`'s merge `patch` (an Update operation): the
    fields it changes become the manager's alone, a field it removes nobody's; fields it
    sets to the value they had keep their owner (as structured-merge-diff's Update)."""
    entries = [dict(e) for e in (old.get("metadata") or {}).get("managedFields") or []]
    owned = {e["manager"]: e for e in entries}
    for path, value in _leaves(patch):
        if path[:1] == ("metadata",) and path[1:2] in (("managedFields",), ("resourceVersion",)):
            continue
        if _at(old, path) == value:
            continue
        fields = tuple(f"f:{key}" for key in path)
        for entry in entries:  # nobody else owns it now
            tree = entry.get("fieldsV1") or {}
            parents = [tree]
            for key in fields[:-1]:
                parents.append(parents[-1].get(key) if isinstance(parents[-1], dict) else None)
            if isinstance(parents[-1], dict):
                parents[-1].pop(fields[-1], None)
            for key, parent in zip(reversed(fields[:-1]), reversed(parents[:-1]), strict=True):
                if isinstance(parent, dict) and parent.get(key) == {}:
                    parent.pop(key)
        if value is not None:
            entry = owned.setdefault(manager, {"manager": manager, "fieldsV1": {}})
            if entry not in entries:
                entries.append(entry)
            tree = entry.setdefault("fieldsV1", {})
            for key in fields:
                tree = tree.setdefault(key, {})
            entry.update(operation="Update", apiVersion=api_version, fieldsType="FieldsV1",
                         time=datetime.datetime.now(datetime.timezone.utc).strftime(
                             "%Y-%m-%dT%H:%M:%SZ"))  # fmt: skip
    return [e for e in entries if e.get("fieldsV1")]


def emulator_class() -> type:
    """kmock's KubernetesEmulator, completing writes the way an API server does.

    Before kmock stores a created object (and emits its ADDED watch event) it gets
    metadata.namespace (from the URL), uid, creationTimestamp, resourceVersion and
    generation; a merge patch gets a new resourceVersion. Without the namespace, kmock
    0.8 drops the ADDED event from namespaced watches."""
    global _EMULATOR_CLASS
    if _EMULATOR_CLASS is not None:
        return _EMULATOR_CLASS
    import attrs
    import kmock

    @attrs.define(kw_only=True)
    class Emulator(kmock.KubernetesEmulator):
        _versions: Iterator[int] = attrs.field(factory=lambda: itertools.count(1), init=False)
        # LIST requests by resource, and the objects they served (a cost that must not
        # grow with what else the namespace holds is counted here).
        lists: dict[str, int] = attrs.field(factory=dict, init=False)
        listed_objects: int = attrs.field(default=0, init=False)
        listed_metadata: int = attrs.field(default=0, init=False)  # metadata-only items
        # Admission webhooks: each is called with a write request before the object is
        # stored; raising kmock.KubernetesError refuses it (nothing stored).
        admission: list[Callable[[Any], None]] = attrs.field(factory=list, init=False)

        async def _handle(self, request: Any) -> Any:
            # A CRD written or deleted serves its resources, or stops (tests/services/crds.py).
            if not crds.is_crd(request):
                return await self._handle_one(request)
            before = crds.declared_by(self, request)
            try:
                return await self._handle_one(request)
            finally:
                crds.redeclare(self, before, crds.declared_by(self, request))

        async def _handle_one(self, request: Any) -> Any:
            data, action = request.data, request.action
            if action in (kmock.action.CREATE, kmock.action.UPDATE) and isinstance(data, dict):
                for admit in self.admission:
                    admit(request)
            # Server-side apply (PATCH, application/apply-patch+yaml) creates a missing
            # object, as an API server does; kmock alone answers 404.
            apply = "apply-patch" in request.headers.get("Content-Type", "")
            if apply and action == kmock.action.UPDATE and isinstance(data, dict):
                key = (request.resource, request.namespace, request.name)
                if key not in self.objects or self.objects[key].deleted:
                    self.objects[key] = {}
            writes = (kmock.action.CREATE, kmock.action.UPDATE)
            resource = request.resource
            plural = resource and "/".join(
                filter(None, (resource.group, resource.version, resource.plural))
            )
            if (
                plural in MANAGED_FIELDS
                and action == kmock.action.UPDATE
                and isinstance(data, dict)
                and (request.resource, request.namespace, request.name) in self.objects
            ):
                old = self.objects[request.resource, request.namespace, request.name].raw
                agent = request.headers.get("User-Agent", "unknown").split("/")[0]
                manager = request.params.get("fieldManager") or agent
                group = f"{resource.group}/" if resource.group else ""
                fields = managed_fields(old, data, manager, f"{group}{resource.version}")
                data.setdefault("metadata", {})["managedFields"] = fields
            if request.resource is not None and isinstance(data, dict) and action in writes:
                meta = data.setdefault("metadata", {})
                if isinstance(meta, dict) and action == kmock.action.CREATE:
                    if request.namespace:
                        meta.setdefault("namespace", request.namespace)
                    meta.setdefault("uid", str(uuid.uuid4()))
                    now = datetime.datetime.now(datetime.timezone.utc)
                    meta.setdefault("creationTimestamp", now.strftime("%Y-%m-%dT%H:%M:%SZ"))
                    meta.setdefault("generation", 1)
                if isinstance(meta, dict):
                    meta["resourceVersion"] = str(next(self._versions))
            # kmock 0.8 picks a reaction by `request in reaction's view`, which filters every
            # request this server has ever answered: each request cost O(history), 20-60 ms
            # of the pytest process's CPU after a few hundred. Whether a request is in a view
            # of filters, priorities, groups and exclusions depends on that request alone, so
            # while a reaction is chosen (and served) the emulator iterates as if it had seen
            # only this request. A slice (`kmock['get'][:1]`) counts the history: then, not.
            if any(True for p in self._payloads for _ in p._walk(kmock.Slicer)):
                return await super()._handle(request)
            token = _ALONE.set(request)
            try:
                return await super()._handle(request)
            finally:
                _ALONE.reset(token)

        def __iter__(self) -> Iterator[Any]:
            # All requests answered (`_requests` itself is untouched), or the one being
            # matched (see `_handle`).
            alone = _ALONE.get()
            if alone is None:
                yield from super().__iter__()
            else:
                yield alone

        def __attrs_post_init__(self) -> None:
            super_init = getattr(super(), "__attrs_post_init__", None)
            if super_init is not None:
                super_init()
            # The objects kept by key, sorted per kind: a LIST chunk is a key range
            # (kmock's ObjectsArray is frozen: its dict is replaced as attrs itself sets it).
            object.__setattr__(self._objects, "_objects", KeyedObjects(self._objects._objects))

        async def _serve_list(self, request: Any) -> Any:
            # kmock's own LIST (a scan of every object, then ours sorted them again per
            # chunk) is replaced by a key-range read of the kind's sorted keys.
            if not any(known == request.resource for known in self._get_resources()):
                return await super()._serve_list(request)  # kmock's 404
            resource = request.resource
            name = "/".join(filter(None, (resource.group, resource.version, resource.plural)))
            selector = request.params.get("fieldSelector")
            labelled = request.params.get("labelSelector")
            field_selected = bool(selector) and name in FIELD_SELECTED

            def keep(obj: dict[str, Any]) -> bool:
                return (not field_selected or fields_match(obj, selector)) and (
                    not labelled or labels_match(obj, labelled)
                )

            async with self._lock:
                store = cast("KeyedObjects", self._objects._objects)
                result = store.chunk(resource, request.namespace, request.params,
                                     keep if field_selected or labelled else None,
                                     count_rest=not (selector or labelled))  # fmt: skip
            self.lists[name] = self.lists.get(name, 0) + 1
            if "as=PartialObjectMetadataList" in request.headers.get("Accept", ""):
                # The API server's metadata-only LIST (any kind, since 1.15): each item's
                # metadata alone, as client-go's metadata client asks for it.
                self.listed_metadata += len(result["items"])
                result["items"] = [
                    {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                     "metadata": o.get("metadata") or {}}
                    for o in result["items"]
                ]  # fmt: skip
                return {**result, "kind": "PartialObjectMetadataList",
                        "apiVersion": "meta.k8s.io/v1"}  # fmt: skip
            self.listed_objects += len(result["items"])
            known = resource in self.resources and self.resources[resource].kind
            result["kind"] = f"{self.resources[resource].kind}List" if known else "List"
            group = f"{resource.group}/" if resource.group else ""
            result["apiVersion"] = f"{group}{resource.version}"
            return result

    _EMULATOR_CLASS = Emulator
    return Emulator


@dataclass
class KubeService:
    emulator: Any  # kmock.KubernetesEmulator
    url: str  # "http://127.0.0.1:PORT"
    port: int
    kubeconfig: Path
    context: str
    loop: asyncio.AbstractEventLoop
    _logs: dict[tuple[str, str, str | None, bool], str] = field(default_factory=dict)
    _baseline: int = 0
    log_bytes_served: int = 0  # pod-log bytes sent to clients (bounded reads are checked)
    # A kubelet's latency per log read, and the most reads it served at once (so a test
    # sees how many a client keeps in flight).
    log_latency: float = 0.0
    logs_in_flight: int = 0
    logs_in_flight_peak: int = 0
    # The pod proxy's dial targets: (namespace, pod, port) -> a real HTTP server's URL.
    _pod_ports: dict[tuple[str, str, int], str] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {"KUBECONFIG": str(self.kubeconfig)}

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float = 10.0) -> Any:
        """Run fn(*args) (awaited if it returns an awaitable) on the emulator's event loop.

        Needed for what touches asyncio objects, e.g. feeding live streams:
        `kube.call(lambda: kube.emulator[...] << b"line\\n")`. Plain seeding of objects and
        adding reactions are safe from the test thread."""

        async def run() -> Any:
            result = fn(*args)
            return await result if inspect.isawaitable(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    def set_pod_log(
        self,
        namespace: str,
        pod: str,
        text: str,
        *,
        container: str | None = None,
        previous: bool = False,
    ) -> None:
        """What `read_namespaced_pod_log` returns for this pod (and container, if given;
        `previous=True` for `previous=True` reads). Replaces earlier text."""
        self._logs[namespace, pod, container, previous] = text

    def serve_pod_port(self, namespace: str, pod: str, port: int, url: str) -> None:
        """Where the API server's pod proxy (GET pods/NAME:PORT/proxy/PATH) reaches this
        pod's port: a real HTTP server the test runs. kmock runs no pods, so this URL
        stands for the pod IP the API server would dial; a port not served answers 503,
        as an API server that cannot dial the pod does."""
        self._pod_ports[namespace, pod, port] = url.rstrip("/")

    def set_pod_usage(
        self,
        namespace: str,
        pod: str,
        usage: dict[str, dict[str, str]],
        *,
        window: str = "15s",
    ) -> None:
        """Serve the metrics API (METRICS_PODS) and record a pod's use: `usage` is container
        -> {"cpu": "250m", "memory": "1Gi"}, as the metrics-server reports it. The
        PodMetrics carries the pod's labels (the pod must exist, as the metrics-server
        only reports pods it lists). Replaces an earlier record of the pod."""
        emulator = self.emulator
        if METRICS_PODS not in emulator.resources:
            emulator.resources[METRICS_PODS] = {
                "kind": "PodMetrics", "namespaced": True, "singular": "",
                "verbs": ("get", "list"), "subresources": (),
            }  # fmt: skip
        labels = emulator.objects["v1/pods", namespace, pod].raw["metadata"].get("labels") or {}
        emulator.objects[METRICS_PODS, namespace, pod] = {
            "apiVersion": "metrics.k8s.io/v1beta1",
            "kind": "PodMetrics",
            "metadata": {"name": pod, "namespace": namespace, "labels": labels},
            "timestamp": datetime.datetime.now(datetime.timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            ),
            "window": window,
            "containers": [{"name": name, "usage": use} for name, use in usage.items()],
        }

    def reset(self) -> None:
        """Forget objects, requests, scripted logs and reactions added since start."""
        emulator = self.emulator
        del emulator._payloads[self._baseline :]  # kmock 0.8 internals: reactions, in order
        emulator._requests.clear()
        emulator.lists.clear()
        emulator.listed_objects = 0
        emulator.listed_metadata = 0
        emulator.admission.clear()
        emulator.errors.clear()
        emulator.objects.clear()
        emulator.resources.clear()
        self._logs.clear()
        self._pod_ports.clear()
        self.log_latency, self.logs_in_flight, self.logs_in_flight_peak = 0.0, 0, 0
        _declare(emulator)

    # A reaction, run on the emulator's loop.
    async def _pod_log(self, request: Any) -> bytes:
        self.logs_in_flight += 1
        self.logs_in_flight_peak = max(self.logs_in_flight_peak, self.logs_in_flight)
        try:
            await asyncio.sleep(self.log_latency)
            return self._pod_log_now(request)
        finally:
            self.logs_in_flight -= 1

    async def _pod_proxy(self, request: Any) -> bytes:
        import aiohttp
        import kmock

        pod, _, port = (request.name or "").rpartition(":")
        key = (request.resource, request.namespace, pod)
        if key not in self.emulator.objects or self.emulator.objects[key].deleted:
            raise kmock.KubernetesObjectNotFoundError()
        target = self._pod_ports.get((request.namespace, pod, int(port or 0)))
        if target is None:
            raise kmock.KubernetesError(
                status=503, reason="ServiceUnavailable",
                message=f"error trying to reach service: dial tcp {pod}:{port}: connect: "
                "connection refused",
            )  # fmt: skip
        path = request.subresource.removeprefix("proxy")
        async with aiohttp.ClientSession() as session, session.get(target + path) as answer:
            return await answer.read()

    def _pod_log_now(self, request: Any) -> bytes:
        import kmock

        namespace, pod = request.namespace, request.name
        key = (request.resource, namespace, pod)
        if key not in self.emulator.objects or self.emulator.objects[key].deleted:
            raise kmock.KubernetesObjectNotFoundError()
        params = request.params
        previous = params.get("previous") == "true"
        text = self._logs.get((namespace, pod, params.get("container"), previous))
        if text is None:
            text = self._logs.get((namespace, pod, None, previous), "")
        if params.get("tailLines"):
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(params["tailLines"]) :]) if int(params["tailLines"]) else ""
        data = text.encode()
        if params.get("limitBytes"):  # as the kubelet: the output's first bytes, after tailLines
            data = data[: int(params["limitBytes"])]
        self.log_bytes_served += len(data)
        return data


def _declare(emulator: Any) -> None:
    for resource, (kind, namespaced, subresources) in DECLARED.items():
        emulator.resources[resource] = {
            "kind": kind,
            "namespaced": namespaced,
            "singular": kind.lower(),
            "verbs": _VERBS,
            "subresources": subresources,
        }
    for name in DEFAULT_NAMESPACES:
        emulator.objects["v1/namespaces", None, name] = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name},
            "status": {"phase": "Active"},
        }


def _kubeconfig(url: str, context: str) -> str:
    # JSON is YAML; the kubernetes client reads it as a kubeconfig.
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": {"server": url}}],
            "users": [{"name": context, "user": {"token": "kmock-dummy-token"}}],
            "contexts": [
                {
                    "name": context,
                    "context": {"cluster": context, "user": context, "namespace": "default"},
                }
            ],
            "current-context": context,
        },
        indent=2,
    )


@contextlib.contextmanager
def kube_server(*, context: str = "kmock", timeout: float = 10.0) -> Iterator[KubeService]:
    """Serve a KubernetesEmulator on 127.0.0.1:<free port> from a daemon thread."""
    import kmock

    _patch_kmock_namespaces()
    started = threading.Event()
    state: dict[str, Any] = {}

    async def serve() -> None:
        try:
            emulator = emulator_class()()  # asyncio objects inside: build on this loop
            stop = asyncio.Event()
            async with emulator, kmock.Server(emulator, host="127.0.0.1", port=0) as server:
                state.update(emulator=emulator, port=server.port, stop=stop)
                state["loop"] = asyncio.get_running_loop()
                started.set()
                await stop.wait()
        except BaseException as exc:
            state["error"] = exc
            started.set()
            raise

    thread = threading.Thread(target=asyncio.run, args=(serve(),), name="kmock", daemon=True)
    thread.start()
    if not started.wait(timeout) or "error" in state:
        raise RuntimeError(f"kmock did not start: {state.get('error')!r}")
    emulator, port, loop = state["emulator"], state["port"], state["loop"]
    try:
        with tempfile.TemporaryDirectory(prefix="fsdp-kube-") as tmp:
            url = f"http://127.0.0.1:{port}"
            kubeconfig = Path(tmp) / "kubeconfig"
            kubeconfig.write_text(_kubeconfig(url, context))
            service = KubeService(
                emulator=emulator,
                url=url,
                port=port,
                kubeconfig=kubeconfig,
                context=context,
                loop=loop,
            )
            _declare(emulator)
            # Below default-priority reactions (a test's own), above kmock's fallbacks.
            defaults = emulator**-1
            defaults[kmock.action.CREATE] << 201 << (lambda request: request.data)
            pod_log = defaults["get", kmock.resource("v1/pods"), kmock.subresource("log")]
            pod_log << {"Content-Type": "text/plain"} << service._pod_log
            # The pod proxy of a port's /metrics (what the DCGM exporter serves).
            proxy = defaults["get", kmock.resource("v1/pods"), kmock.subresource("proxy/metrics")]
            proxy << {"Content-Type": "text/plain"} << service._pod_proxy
            # kmock serves /api, /apis and /version; the generated clients ask with a slash,
            # and client 37 rejects an APIVersions without serverAddressByClientCIDRs.
            api_versions = {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{port}"}
                ],
            }
            defaults["get /api"] << api_versions
            defaults["get /api/"] << api_versions
            defaults["get /apis/"] << emulator._serve_apis
            defaults["get /version/"] << emulator._serve_server_version
            service._baseline = len(emulator._payloads)
            yield service
    finally:
        loop.call_soon_threadsafe(state["stop"].set)
        thread.join(timeout)
