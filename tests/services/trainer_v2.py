"""Plays Kubeflow Trainer v2.3.0 (and, through tests/services/jobset.py, JobSet v0.12.0,
the Job controller and the kubelets) on kmock, through the Kubernetes API like its
controllers. Upstream files named below are kubeflow/trainer's at v2.3.0.

    install(kube_api)                                # serve the CRDs (+ torch-distributed)
    trainer = TrainerV2(kube_api, root=tmp_path / "cluster")
    trainer.add_nodes("p5.48xlarge", 2)
    ... a TrainJob is created (by hand or by deploy_training_job) ...
    handle = trainer.train("tiny")                   # play the controllers; returns at once
    handle.wait()                                    # "Complete" / "Failed" (its conditions)
    trainer.train("tiny", inject=Injected("node-0-0", after="checkpoint_saved", log=OOM))
    trainer.run("tiny", outcome="Failed", exit_codes={"node-0-0": 1})   # replay, no process

`install`/`uninstall` decide what API discovery shows (the product picks its engine from
it): Trainer v2 alone (`TrainingOperator(kube).uninstall()` too), v1 alone (no install),
both, or neither. Once started (`train` or `start`), the controllers play every TrainJob
of the namespace, as a cluster's would: suspend stops its pods and resume recreates
them, deleting it deletes what it owns (the garbage collector). The kubelets run the
pods of the TrainJobs `train` names (another's stay Pending, unbound), or after `start`
of every one (a resubmitted job runs again: auto-retry).

Replicas are named by their pod's hostname without `<trainjob>-`: "node-0-0",
"node-0-1" (pods `<trainjob>-node-0-<index>-<random>`; rank = completion index).

Not played: the initializer jobs (dataset/model), the MPI, JAX, XGBoost and Flux
plugins, torchtune's command mutation, gang scheduling, TTL, failurePolicy restarts.
Upstream v2.3.0 sets no "Created" or "Running" condition on a TrainJob: only Suspended,
Complete and Failed (pkg/apis/trainer/v1alpha1/trainjob_types.go)."""

from __future__ import annotations

import calendar
import contextlib
import copy
import functools
import gzip
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import yaml
from kubernetes.client.exceptions import ApiException

from tests.services.jobset import (
    CONFIGMAP,
    JOB,
    JOBSET,
    JOBSET_NAME,
    POD,
    SERVICE,
    Api,
    Injected,
    JobSetController,
    condition,
    is_true,
    jobset_defaults,
    now,
    owner,
    set_condition,
)
from tests.services.kube import _VERBS, DECLARED, PYTORCHJOB, KubeService
from tests.services.trainer_status import TrainerStatusServer
from tests.services.trainer_v2_render import render_jobset
from tests.services.trainer_v2_webhook import admission
from tests.services.training_operator import ERROR_LOG, OTHER_RANK_LOG, RUN_LOG, TrainingOperator

__all__ = ["Injected", "TrainerV2", "cluster", "install", "serve_engines", "uninstall"]

CRDS = Path(__file__).parents[2] / "skills/training_job_deployer/targets/trainjob/crds"
GROUP = "trainer.kubeflow.org"
TRAINJOB = f"{GROUP}/v1alpha1/trainjobs"
TRAINING_RUNTIME = f"{GROUP}/v1alpha1/trainingruntimes"
CLUSTER_TRAINING_RUNTIME = f"{GROUP}/v1alpha1/clustertrainingruntimes"
CRD = "apiextensions.k8s.io/v1/customresourcedefinitions"
CRD_FILES = (
    "trainer.kubeflow.org_trainjobs.v2.3.0.yaml.gz",
    "trainer.kubeflow.org_trainingruntimes.v2.3.0.yaml.gz",
    "trainer.kubeflow.org_clustertrainingruntimes.v2.3.0.yaml.gz",
    "jobset.x-k8s.io_jobsets.v0.12.0.yaml.gz",
)
# pkg/util/trainjob/trainjob.go: the managedBy value of the built-in controller.
CONTROLLER_NAME = "trainer.kubeflow.org/trainjob-controller"
# pkg/constants/constants.go
SUSPENDED = ("Suspended", "TrainJob is suspended")
RESUMED = ("Resumed", "TrainJob is resumed")
DEADLINE = ("DeadlineExceeded", "TrainJob exceeded its active deadline")
SNAPSHOT_SUFFIX = "-runtime-snapshot"  # pkg/runtime/core/snapshot.go
LOOK_S = 0.5  # how often the controllers look (each look is 1-4 LISTs to kmock)


def crds() -> list[dict[str, Any]]:
    """The vendored upstream CRDs (byte-identical to the tags: SOURCES.yaml there)."""
    return copy.deepcopy(_crds())


@functools.cache
def _crds() -> list[dict[str, Any]]:
    # 1.2 MB of YAML: the C loader (libyaml) reads it in ~1 s, the pure-Python one in ~13 s.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [yaml.load(gzip.decompress((CRDS / f).read_bytes()), Loader=loader)  # noqa: S506 (a safe loader)
            for f in CRD_FILES]  # fmt: skip


def torch_distributed() -> dict[str, Any]:
    """Upstream's `torch-distributed` ClusterTrainingRuntime (manifests/base/runtimes)."""
    return yaml.safe_load((CRDS / "torch_distributed.v2.3.0.yaml").read_text())


def _resources() -> dict[str, dict[str, Any]]:
    """kmock resource declarations from the CRDs: group/version/plural -> kind, scope,
    subresources."""
    declared = {}
    for crd in _crds():
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served", True):
                declared[f"{spec['group']}/{version['name']}/{spec['names']['plural']}"] = {
                    "kind": spec["names"]["kind"],
                    "namespaced": spec["scope"] == "Namespaced",
                    "singular": spec["names"].get("singular", spec["names"]["kind"].lower()),
                    "verbs": _VERBS,
                    "subresources": tuple(version.get("subresources") or {}),
                }
    return declared


def install(kube: KubeService, *, runtime: bool = True) -> None:
    """Trainer v2 and JobSet installed: their kinds served (API discovery lists the
    groups), their CRD objects created, and upstream's torch-distributed runtime (unless
    runtime=False)."""
    kube.emulator.resources.update(_resources())
    if not any(getattr(admit, "trainer_v2", False) for admit in kube.emulator.admission):
        kube.emulator.admission.append(admission(kube.emulator))
    api = Api(str(kube.kubeconfig))
    for crd in crds():
        with contextlib.suppress(ApiException):  # already installed: 409
            api.create(CRD, None, crd)
    if runtime:
        with contextlib.suppress(ApiException):
            api.create(CLUSTER_TRAINING_RUNTIME, None, torch_distributed())


def uninstall(kube: KubeService) -> None:
    """Neither Trainer v2 nor JobSet: their kinds, CRDs and objects gone."""
    declared = _resources()
    for resource in declared:
        kube.emulator.resources.pop(resource, None)
    kube.emulator.admission[:] = [
        a for a in kube.emulator.admission if not getattr(a, "trainer_v2", False)
    ]
    names = {crd["metadata"]["name"] for crd in _crds()}
    for key in list(kube.emulator.objects):
        resource = "/".join(filter(None, (key[0].group, key[0].version, key[0].plural)))
        if resource in declared or (resource == CRD and key[2] in names):
            del kube.emulator.objects[key]


def serve_engines(kube: KubeService, *, v1: bool, v2: bool) -> None:
    """What API discovery shows: the Training Operator v1's kind (kubeflow.org
    PyTorchJob, which kmock serves by default) and/or Trainer v2's and JobSet's."""
    if v1:
        kind, namespaced, subresources = DECLARED[PYTORCHJOB]
        kube.emulator.resources[PYTORCHJOB] = {
            "kind": kind, "namespaced": namespaced, "singular": kind.lower(),
            "verbs": _VERBS, "subresources": subresources}  # fmt: skip
    else:
        kube.emulator.resources.pop(PYTORCHJOB, None)
    if v2:
        install(kube)
    else:
        uninstall(kube)


@contextlib.contextmanager
def cluster(kube: KubeService, root: Path, *, progress: bool = False) -> Iterator[TrainerV2]:
    """kmock (reset) serving Trainer v2 and JobSet alone, their controllers played by a
    TrainerV2 whose pods run under `root`; with progress=True the TrainJobStatus gate is
    on (a tests/services/trainer_status.py server). Every container stopped after."""
    kube.reset()
    serve_engines(kube, v1=False, v2=True)
    with contextlib.ExitStack() as stack:
        server = None
        if progress:
            server = stack.enter_context(TrainerStatusServer(on_status=lambda *_: None))
        trainer = TrainerV2(kube, root=root, status_server=server)
        stack.callback(trainer.stop)
        yield trainer


class StatusServer(Protocol):
    """What the controller uses of a status server stand-in (tests/services/trainer_status.py):
    the env the TrainJobStatus plugin injects, and the write it calls with each status
    (set to TrainerV2.write_trainer_status)."""

    on_status: Callable[[str, str, dict[str, Any]], object]

    def pod_env(self, namespace: str, trainjob: str) -> list[dict[str, str]]: ...


def runtime_ref(trainjob: dict[str, Any]) -> tuple[str, str, str]:
    """(apiGroup, kind, name) of spec.runtimeRef with the CRD's defaults."""
    ref = trainjob["spec"].get("runtimeRef") or {}
    return ref.get("apiGroup", GROUP), ref.get("kind", "ClusterTrainingRuntime"), ref["name"]


class TrainerV2:
    def __init__(
        self,
        kube: KubeService,
        namespace: str = "default",
        root: Path | None = None,
        *,
        status_server: StatusServer | None = None,
    ) -> None:
        # Nodes, claims, events and the kubelet are the cluster's, as for the v1 operator.
        self.cluster = TrainingOperator(kube, namespace, root)
        self.kube, self.namespace, self.root = kube, namespace, self.cluster.root
        self.api = Api(str(kube.kubeconfig))
        self.jobsets = JobSetController(self.api, lambda: self.cluster.kubelet, namespace)
        self.status_server = status_server
        if status_server is not None:  # it calls back with each status a trainer posts
            status_server.on_status = self.write_trainer_status
        self._children = False  # whether the last pass saw objects the controllers own
        self._owners: set[str] = set()  # uids of the TrainJobs and JobSets seen then
        self.errors: list[str] = []  # reconcile errors, as a controller's log would have
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # the cluster -----------------------------------------------------------------------

    def add_nodes(self, *args: Any, **kwargs: Any) -> list[str]:
        return self.cluster.add_nodes(*args, **kwargs)

    def add_claim(self, name: str) -> None:
        self.cluster.add_claim(name)

    def add_event(self, *args: Any, **kwargs: Any) -> None:
        self.cluster.add_event(*args, **kwargs)

    def trainjob(self, name: str) -> dict[str, Any] | None:
        return self.api.get(TRAINJOB, self.namespace, name)

    def pods(self, name: str) -> list[dict[str, Any]]:
        """The TrainJob's pods, by completion order of their hostnames."""
        pods = [p for p in self.api.list(POD, self.namespace)
                if p["metadata"].get("labels", {}).get(JOBSET_NAME) == name]  # fmt: skip
        return sorted(pods, key=lambda p: p["spec"].get("hostname", ""))

    # playing -----------------------------------------------------------------------------

    def start(self) -> None:
        """The controllers run (idempotent) until `stop`, and the kubelets run the pods of
        every TrainJob, as a cluster's would (a resubmitted job too)."""
        self.jobsets.playing = None
        self._run_loop()

    def _run_loop(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="trainer-v2", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Controllers stopped, every container stopped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self.cluster.stop()

    def train(self, name: str, *, inject: Injected | None = None) -> TrainRun:
        """Play TrainJob `name` (as it is now) for real: the controllers run and the
        kubelets run its pods (another TrainJob's stay Pending until it is played too);
        returns at once."""
        job = self.trainjob(name)
        assert job is not None, f"no TrainJob {name}"
        if inject is not None:
            self.jobsets.injections[name] = inject
        self.jobsets.replayed.discard(name)
        if self.jobsets.playing is not None:
            self.jobsets.playing.add(name)
        self._run_loop()
        return TrainRun(self, name, job["metadata"]["uid"])

    def inject(self, name: str, inject: Injected) -> None:
        """Arm a failure for the next pods of TrainJob `name` (one not created yet)."""
        self.jobsets.injections[name] = inject

    def run(
        self,
        name: str,
        *,
        outcome: str = "Complete",
        rank_logs: dict[str, str] | None = None,
        exit_codes: dict[str, int] | None = None,
    ) -> list[str]:
        """Replay: the TrainJob's JobSet, Jobs and pods as the controllers create them,
        then pods, Jobs, JobSet and TrainJob moved to `outcome` ("Running", "Complete",
        "Failed") with no process: rank 0 logs RUN_LOG (ERROR_LOG when Failed) unless
        rank_logs says otherwise, the others a plain line; a Failed run's failing
        replicas are those with a non-zero exit code (default rank 0 with 1)."""
        with self._lock:
            self.jobsets.replayed.add(name)
            for _ in range(3):  # TrainJob -> JobSet -> Jobs -> Pods
                self.reconcile()
            pods = self.pods(name)
            if not pods:  # suspended, or not schedulable
                return []
            replicas = [p["spec"]["hostname"].removeprefix(f"{name}-") for p in pods]
            codes = dict(exit_codes or {})
            if outcome == "Failed" and not any(codes.values()):
                codes[replicas[0]] = 1
            logs = {replicas[0]: ERROR_LOG if outcome == "Failed" else RUN_LOG, **(rank_logs or {})}
            for pod, replica in zip(pods, replicas, strict=True):
                self.kube.set_pod_log(self.namespace, pod["metadata"]["name"],
                                      logs.get(replica, OTHER_RANK_LOG))  # fmt: skip
                code = codes.get(replica, 0)
                phase = "Running" if outcome == "Running" else ("Failed" if code else "Succeeded")
                state = ({"running": {"startedAt": now()}} if phase == "Running" else
                         {"terminated": {"exitCode": code, "finishedAt": now(),
                                         "reason": "Error" if code else "Completed"}})  # fmt: skip
                container = pod["spec"]["containers"][0]
                self.api.patch_status(POD, self.namespace, pod["metadata"]["name"], {
                    "phase": phase, "containerStatuses": [
                        {"name": container["name"], "image": container.get("image", ""),
                         "imageID": "", "ready": phase == "Running", "started": True,
                         "restartCount": 0, "state": state}]})  # fmt: skip
            for job in self.api.list(JOB, self.namespace):
                if job["metadata"].get("labels", {}).get(JOBSET_NAME) == name:
                    job["spec"]["backoffLimit"] = 0  # a replayed failure fails the Job
                    self.jobsets.reconcile_job(name, job, [
                        p for p in self.api.list(POD, self.namespace)
                        if p["metadata"].get("labels", {}).get(JOBSET_NAME) == name])  # fmt: skip
            for _ in range(2):  # Jobs -> JobSet -> TrainJob
                self.reconcile()
            return [p["metadata"]["name"] for p in pods]

    def write_trainer_status(
        self, namespace: str, trainjob: str, trainer_status: dict[str, Any]
    ) -> None:
        """The status server's write (pkg/statusserver/server.go): status.trainerStatus
        applied whole by one field manager, so a field the post leaves out is removed
        (here: set to null in the merge patch). A missing TrainJob raises LookupError, a
        refused write ValueError (what tests/services/trainer_status.py answers 404 / 422)."""
        current = self.api.get(TRAINJOB, namespace, trainjob)
        if current is None:
            raise LookupError(f'trainjobs.{GROUP} "{trainjob}" not found')
        old = (current.get("status") or {}).get("trainerStatus") or {}
        patch = {**dict.fromkeys(old), **trainer_status}
        try:
            self.api.patch_status(TRAINJOB, namespace, trainjob, {"trainerStatus": patch})
        except ApiException as exc:
            if exc.status == 404:
                raise LookupError(f'trainjobs.{GROUP} "{trainjob}" not found') from exc
            if exc.status == 422:
                raise ValueError(str(exc.body)) from exc
            raise

    # the loop ------------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                try:
                    self.reconcile()
                except Exception as exc:  # noqa: BLE001 (a controller logs and requeues)
                    self.errors.append(repr(exc))
            self._stop.wait(LOOK_S)

    def reconcile(self) -> None:
        """One pass of every controller over the namespace: the garbage collector, the
        TrainJob controller, then JobSet's (with the Job controller and kubelets)."""
        trainjobs = self.api.list(TRAINJOB, self.namespace)
        if not trainjobs and not self._children:
            return
        found = {r: self.api.list(r, self.namespace) for r in (JOBSET, JOB, POD)}
        self._collect_garbage(trainjobs, found)
        for trainjob in trainjobs:
            try:
                if self.reconcile_trainjob(trainjob, found[JOBSET]):
                    found[JOBSET] = self.api.list(JOBSET, self.namespace)
            except ApiException as exc:
                self.errors.append(f"{trainjob['metadata']['name']}: {exc.status} {exc.reason}")
        for jobset in found[JOBSET]:
            try:
                self.jobsets.reconcile(jobset, found[JOB], found[POD])
            except ApiException as exc:
                self.errors.append(f"{jobset['metadata']['name']}: {exc.status} {exc.reason}")

    def _collect_garbage(self, trainjobs: list[dict], found: dict[str, list[dict]]) -> None:
        """The garbage collector (background cascading deletion): an object whose
        controller owner (a TrainJob, JobSet or Job) is gone is deleted, owners before
        what they own in one pass; a pod's container is stopped. `found` keeps what is
        left."""
        live = {t["metadata"]["uid"] for t in trainjobs}
        owners = live | {j["metadata"]["uid"] for j in found[JOBSET]}
        gone = self._owners - owners  # then Services and ConfigMaps may be orphans too
        resources = (JOBSET, JOB, POD, SERVICE, CONFIGMAP) if gone else (JOBSET, JOB, POD)
        self._children = False
        for resource in resources:
            objects = found.get(resource)
            if objects is None:
                objects = self.api.list(resource, self.namespace)
            kept = []
            for obj in objects:
                refs = [
                    r
                    for r in obj["metadata"].get("ownerReferences") or []
                    if r.get("controller") and r.get("kind") in ("TrainJob", "JobSet", "Job")
                ]
                if refs and refs[0]["uid"] not in live:
                    if resource == POD:
                        self.jobsets.delete_pod(obj["metadata"]["name"])
                    else:
                        self.api.delete(resource, self.namespace, obj["metadata"]["name"])
                    continue
                if refs:
                    self._children = True
                    live.add(obj["metadata"]["uid"])
                kept.append(obj)
            if resource in found:
                found[resource] = kept
        self._owners = live & owners

    # the TrainJob controller -----------------------------------------------------------------

    def reconcile_trainjob(self, trainjob: dict[str, Any], jobsets: list[dict[str, Any]]) -> bool:
        """pkg/controller/trainjob_controller.go Reconcile: skip a TrainJob another
        controller manages (spec.managedBy); clear a Failed condition (not a deadline's);
        an unsupported runtimeRef fails it ("TrainingRuntimeNotSupported"); else, while not
        finished, build its objects (errors: a TrainJobResourcesCreationFailed event);
        the Suspended condition; the status from the JobSet; activeDeadlineSeconds.
        Whether it created or changed the JobSet."""
        spec, meta = trainjob["spec"], trainjob["metadata"]
        if spec.get("managedBy", CONTROLLER_NAME) != CONTROLLER_NAME:
            return False
        name, built = meta["name"], False
        previous = json.loads(json.dumps(trainjob.get("status") or {}))
        status = trainjob.setdefault("status", {})
        failed = condition(trainjob, "Failed")
        if failed and failed.get("reason") != DEADLINE[0]:
            status["conditions"].remove(failed)
        group, kind, _ = runtime_ref(trainjob)
        key = f"{kind}.{group}"  # schema.GroupKind String()
        finished = is_true(trainjob, "Complete") or is_true(trainjob, "Failed")
        if kind not in ("TrainingRuntime", "ClusterTrainingRuntime") or group != GROUP:
            set_condition(trainjob, "Failed", True, "TrainingRuntimeNotSupported",
                          f"unsupported runtime: {key}")  # fmt: skip
        elif not finished:
            try:
                built = self._reconcile_objects(trainjob, jobsets)
            except (LookupError, ApiException) as exc:
                message = f"TrainJob resources reconciliation failed: {str(exc)[:950]}"
                if len(str(exc)) > 950:
                    message += " ..."
                self.jobsets.event(trainjob, "TrainJobResourcesCreationFailed", message, "Warning")
        if spec.get("suspend"):
            set_condition(trainjob, "Suspended", True, *SUSPENDED)
        elif is_true(trainjob, "Suspended"):
            set_condition(trainjob, "Suspended", False, *RESUMED)
        self._status_from_jobset(trainjob, jobsets)
        self._deadline(trainjob)
        # A merge patch of what changed (client.MergeFrom(prev)): trainerStatus, written
        # by the status server meanwhile, is left as it is.
        changed = {k: v for k, v in status.items() if previous.get(k) != v}
        if changed:
            self.api.patch_status(TRAINJOB, self.namespace, name, changed)
        return built

    def _runtime(self, trainjob: dict[str, Any]) -> dict[str, Any]:
        """pkg/runtime/core/{trainingruntime,clustertrainingruntime}.go NewObjects: the
        runtime from the TrainJob's snapshot ConfigMap (snapshot.go), else from the API
        (then snapshotted, owned by the TrainJob)."""
        _, kind, ref = runtime_ref(trainjob)
        name = trainjob["metadata"]["name"]
        snapshot = self.api.get(CONFIGMAP, self.namespace, name + SNAPSHOT_SUFFIX)
        if snapshot is not None:
            return yaml.safe_load(snapshot["data"]["runtime"])
        if kind == "TrainingRuntime":
            runtime = self.api.get(TRAINING_RUNTIME, self.namespace, ref)
            missing = "TrainingRuntime specified in TrainJob is not found"
        else:
            runtime = self.api.get(CLUSTER_TRAINING_RUNTIME, None, ref)
            missing = "not found ClusterTrainingRuntime specified in TrainJob"
        if runtime is None:
            raise LookupError(f'{missing}: {kind.lower()}s.{GROUP} "{ref}" not found')
        self.api.create(CONFIGMAP, self.namespace, {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name + SNAPSHOT_SUFFIX, "namespace": self.namespace,
                         "ownerReferences": [owner(trainjob)]},
            "data": {"runtime": yaml.safe_dump(runtime)}})  # fmt: skip
        return runtime

    def _reconcile_objects(self, trainjob: dict[str, Any], jobsets: list[dict[str, Any]]) -> bool:
        """reconcileObjects with the JobSet plugin's Build (plugins/jobset/jobset.go): a
        JobSet of the TrainJob's name, rebuilt only while either is suspended."""
        name = trainjob["metadata"]["name"]
        old = next((j for j in jobsets if j["metadata"]["name"] == name), None)
        if (
            old is not None
            and not trainjob["spec"].get("suspend")
            and not old["spec"].get("suspend")
        ):
            return False
        status_env = None
        if self.status_server is not None:  # the TrainJobStatus feature gate on
            status_env = self.status_server.pod_env(self.namespace, name)
        jobset = jobset_defaults(render_jobset(trainjob, self._runtime(trainjob), status_env))
        if old is None:
            self.api.create(JOBSET, self.namespace, jobset)
            return True
        if old["spec"] == jobset["spec"]:
            return False
        self.api.patch(JOBSET, self.namespace, name, {"spec": jobset["spec"]})
        return True

    def _status_from_jobset(self, trainjob: dict[str, Any], jobsets: list[dict[str, Any]]) -> None:
        """The JobSet plugin's Status: its Completed (as Complete) and Failed conditions
        when True, and each replicated job's counts as jobsStatus."""
        jobset = next(
            (
                j
                for j in jobsets
                if j["metadata"]["name"] == trainjob["metadata"]["name"]
                and any(
                    r.get("uid") == trainjob["metadata"]["uid"]
                    for r in j["metadata"].get("ownerReferences") or []
                )
            ),
            None,
        )
        if jobset is None:
            return
        status = trainjob["status"]
        for source, target in (("Completed", "Complete"), ("Failed", "Failed")):
            found = condition(jobset, source)
            if found and found.get("status") == "True":
                set_condition(trainjob, target, True, found["reason"], found["message"])
        statuses = (jobset.get("status") or {}).get("replicatedJobsStatus")
        if statuses is not None:
            status["jobsStatus"] = [
                {
                    k: s.get(k, 0)
                    for k in ("name", "ready", "succeeded", "failed", "active", "suspended")
                }
                for s in statuses
            ]

    def _deadline(self, trainjob: dict[str, Any]) -> None:
        """reconcileDeadline: past spec.activeDeadlineSeconds from creation (or the last
        resume), Failed "DeadlineExceeded" and the JobSet deleted."""
        seconds = trainjob["spec"].get("activeDeadlineSeconds")
        if not seconds or trainjob["spec"].get("suspend"):
            return
        if is_true(trainjob, "Complete") or is_true(trainjob, "Failed"):
            return
        started = trainjob["metadata"].get("creationTimestamp", now())
        suspended = condition(trainjob, "Suspended")
        if suspended and suspended.get("status") == "False":
            started = suspended["lastTransitionTime"]
        begun = calendar.timegm(time.strptime(started, "%Y-%m-%dT%H:%M:%SZ"))
        if time.time() > begun + int(seconds):
            set_condition(trainjob, "Failed", True, *DEADLINE)
            self.api.delete(JOBSET, self.namespace, trainjob["metadata"]["name"])


class TrainRun:
    """A TrainJob being played: wait() for its end."""

    def __init__(self, trainer: TrainerV2, name: str, uid: str) -> None:
        self.trainer, self.name, self.uid = trainer, name, uid

    def wait(self, timeout: float = 300) -> str | None:
        """The outcome, "Complete" or "Failed", once the TrainJob has that condition; None at the
        timeout or when the TrainJob is deleted or replaced."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.trainer.trainjob(self.name)
            if job is None or job["metadata"]["uid"] != self.uid:
                return None
            for kind in ("Complete", "Failed"):
                if is_true(job, kind):
                    return kind
            time.sleep(LOOK_S)
        return None
