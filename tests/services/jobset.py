"""Plays JobSet v0.12.0's controller, the Kubernetes Job controller (batch/v1, Indexed
completion) and the kubelets on kmock, for tests/services/trainer_v2.py (kmock runs no
controllers). Each behaviour names the upstream file it follows; JobSet's are in
kubernetes-sigs/jobset at v0.12.0 (`pkg/controllers/jobset_controller.go`: "jobset_controller"
below), the Job controller's in kubernetes/kubernetes `pkg/controller/job`.

A JobSet `js` with replicatedJob `node` (replicas 1, parallelism = completions = 2) gives:

    Service  js                    headless (clusterIP None), selector jobset-name=js
    Job      js-node-0             Indexed, labelled and annotated as jobset_controller does
    Pods     js-node-0-0-<5 chars> hostname js-node-0-0, subdomain js (DNS js-node-0-0.js)
             js-node-0-1-<5 chars> completion index 1 (label and annotation)

Pods really run (tests/services/kubelet.py): their logs are the containers' output, and
the Job, JobSet and (through trainer_v2) TrainJob end as the exit codes say. What a
single loop cannot play is said where it is left out (failurePolicy restarts, startup
order, TTL, exclusive placement: not played)."""

from __future__ import annotations

import datetime
import hashlib
import json
import secrets
import string
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from tests.services.kubelet import Kubelet, Unschedulable

JOBSET = "jobset.x-k8s.io/v1alpha2/jobsets"
JOB = "batch/v1/jobs"
POD = "v1/pods"
SERVICE = "v1/services"
CONFIGMAP = "v1/configmaps"

# api/jobset/v1alpha2/jobset_types.go (v0.12.0)
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
GLOBAL_REPLICAS = "jobset.sigs.k8s.io/global-replicas"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
GROUP_NAME = "jobset.sigs.k8s.io/group-name"
GROUP_REPLICAS = "jobset.sigs.k8s.io/group-replicas"
JOB_GROUP_INDEX = "jobset.sigs.k8s.io/job-group-index"
RESTARTS = "jobset.sigs.k8s.io/restart-attempt"  # pkg/constants/constants.go
# The Job controller's (k8s.io/api batch/v1 types.go).
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_NAME = "batch.kubernetes.io/job-name"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"

# pkg/constants/constants.go (v0.12.0): JobSet condition reasons and messages.
FAILED_JOBS = ("FailedJobs", "jobset failed due to one or more job failures")
ALL_JOBS_COMPLETED = ("AllJobsCompleted", "jobset completed successfully")
JOBSET_SUSPENDED = ("SuspendedJobs", "jobset is suspended")
JOBSET_RESUMED = ("ResumeJobs", "jobset is resumed")
# The Job controller's condition reasons and messages (pkg/controller/job/job_controller.go).
JOB_COMPLETE = ("CompletionsReached", "Reached expected number of succeeded pods")
JOB_FAILED = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
JOB_SUSPENDED = ("JobSuspended", "Job suspended")
JOB_RESUMED = ("JobResumed", "Job resumed")
DEFAULT_BACKOFF_LIMIT = 6  # batch/v1 Job's default
OOM_EXIT = 137


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return item
    return None


def is_true(obj: dict[str, Any], kind: str) -> bool:
    found = condition(obj, kind)
    return bool(found and found.get("status") == "True")


def set_condition(obj: dict[str, Any], kind: str, status: bool, reason: str, message: str) -> bool:
    """meta.SetStatusCondition (apimachinery): replace the condition of that type, keeping
    its lastTransitionTime while its status does not change. Whether it changed."""
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    value = "True" if status else "False"
    new = {"type": kind, "status": value, "reason": reason, "message": message,
           "lastTransitionTime": now()}  # fmt: skip
    for i, old in enumerate(conditions):
        if old.get("type") == kind:
            if old.get("status") == value:
                new["lastTransitionTime"] = old.get("lastTransitionTime", new["lastTransitionTime"])
            changed = {k: old.get(k) for k in ("status", "reason", "message")} != {
                k: new[k] for k in ("status", "reason", "message")}  # fmt: skip
            conditions[i] = new
            return changed
    conditions.append(new)
    return True


def owner(obj: dict[str, Any]) -> dict[str, Any]:
    """A controller ownerReference to `obj` (blockOwnerDeletion, as controllers set it)."""
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
            "name": obj["metadata"]["name"], "uid": obj["metadata"].get("uid", ""),
            "controller": True, "blockOwnerDeletion": True}  # fmt: skip


class Api:
    """Objects as a controller reads and writes them: JSON dicts through the API server
    (kmock), by resource ("v1/pods", "batch/v1/jobs", "<group>/<version>/<plural>")."""

    _CORE = {"pods": "pod", "services": "service", "configmaps": "config_map",
             "events": "event", "secrets": "secret"}  # fmt: skip

    def __init__(self, kubeconfig: str) -> None:
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(kubeconfig, client_configuration=configuration)
        api = client.ApiClient(configuration)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def _call(self, verb: str, resource: str, namespace: str | None, *args: Any) -> Any:
        group_version, plural = resource.rsplit("/", 1)
        if group_version == "v1":
            core_verb = "read" if verb == "get" else verb
            method = getattr(self.core, f"{core_verb}_namespaced_{self._CORE[plural]}")
            if verb in ("list", "create"):
                return method(namespace, *args, _preload_content=False)
            name, *rest = args
            return method(name, namespace, *rest, _preload_content=False)
        group, version = group_version.rsplit("/", 1)
        scope = "namespaced_custom_object" if namespace else "cluster_custom_object"
        where = (group, version, namespace, plural) if namespace else (group, version, plural)
        return getattr(self.custom, f"{verb}_{scope}")(*where, *args, _preload_content=False)

    def get(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._call("get", resource, namespace, name).data)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, resource: str, namespace: str | None) -> list[dict[str, Any]]:
        try:
            return json.loads(self._call("list", resource, namespace).data)["items"]
        except ApiException as exc:
            if exc.status == 404:  # the kind is not served (not installed)
                return []
            raise

    def create(self, resource: str, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        response = self._call("create", resource, namespace, body)
        return json.loads(response.data) if response.data else body

    def patch(self, resource: str, namespace: str | None, name: str, body: dict[str, Any]) -> None:
        self._call("patch", resource, namespace, name, body)

    def patch_status(
        self, resource: str, namespace: str, name: str, status: dict[str, Any]
    ) -> None:
        group_version, plural = resource.rsplit("/", 1)
        if group_version == "v1":
            method = getattr(self.core, f"patch_namespaced_{self._CORE[plural]}_status")
            method(name, namespace, {"status": status}, _preload_content=False)
            return
        group, version = group_version.rsplit("/", 1)
        self.custom.patch_namespaced_custom_object_status(
            group, version, namespace, plural, name, {"status": status}, _preload_content=False
        )

    def delete(self, resource: str, namespace: str | None, name: str) -> None:
        try:
            self._call("delete", resource, namespace, name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def jobset_defaults(jobset: dict[str, Any]) -> dict[str, Any]:
    """What JobSet's mutating webhook adds (pkg/webhooks/jobset_webhook.go Default, and
    the CRD's defaults: replicas 1, groupName "default"): successPolicy All, startupPolicy
    AnyOrder, Indexed completion, restartPolicy OnFailure, DNS hostnames on,
    publishNotReadyAddresses on."""
    spec = jobset["spec"]
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    for rjob in spec.get("replicatedJobs") or []:
        rjob.setdefault("replicas", 1)
        rjob.setdefault("groupName", "default")
        job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
        job_spec.setdefault("completionMode", "Indexed")
        job_spec.setdefault("template", {}).setdefault("spec", {}).setdefault(
            "restartPolicy", "OnFailure"
        )
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    return jobset


def subdomain(jobset: dict[str, Any]) -> str:
    """jobset_controller GetSubdomain: spec.network.subdomain, else the JobSet's name."""
    return (jobset["spec"].get("network") or {}).get("subdomain") or jobset["metadata"]["name"]


def job_name(jobset: str, rjob: str, index: int) -> str:
    """pkg/util/placement GenJobName: `<jobset>-<replicatedJob>-<jobIndex>`."""
    return f"{jobset}-{rjob}-{index}"


@dataclass(frozen=True)
class Injected:
    """A failure played into a real run, for what a CPU run cannot produce (a CUDA OOM):
    once `after` (a trainer event name) is in `replica`'s log ("node-0-0": the pod's
    hostname without `<jobset>-`), its container is SIGKILLed and reported terminated
    with `exit_code` and `reason`, `log` appended to its log. Fires once."""

    replica: str
    after: str
    log: str
    exit_code: int = OOM_EXIT
    reason: str = "OOMKilled"


class JobSetController:
    """One reconcile pass (`reconcile`) over a namespace's JobSets, their Jobs and Pods."""

    def __init__(
        self,
        api: Api,
        kubelet: Callable[[], Kubelet],
        namespace: str,
    ) -> None:
        self.api, self._kubelet, self.namespace = api, kubelet, namespace
        self.injections: dict[str, Injected] = {}  # by JobSet name
        self.replayed: set[str] = set()  # JobSets whose pods a test moves (nothing runs)
        # The JobSets whose pods the kubelets run (all when None): the others' pods stay
        # Pending, unbound, until a test plays them.
        self.playing: set[str] | None = set()
        self._fired: dict[str, Injected] = {}  # pod name -> the injection that killed it
        self._reported: set[str] = set()  # pods whose FailedScheduling was reported
        self._events: set[tuple[str, str, str]] = set()  # (uid, reason, message) recorded
        self.restart_delay_s = 0.0  # kubelet's CrashLoopBackOff (10 s doubling), shortened

    @property
    def kubelet(self) -> Kubelet:
        return self._kubelet()

    # the JobSet controller -------------------------------------------------------------

    def reconcile(self, jobset: dict[str, Any], jobs: list[dict], pods: list[dict]) -> None:
        """jobset_controller reconcile, in its order: statuses of the replicated jobs; a
        finished JobSet deletes its active Jobs; a failed Job fails the JobSet (no
        failurePolicy: "FailedJobs"; restarts under a failurePolicy are not played); all
        Jobs succeeded completes it (successPolicy All); the headless Service; missing
        Jobs created; suspend / resume."""
        name = jobset["metadata"]["name"]
        mine = [
            j
            for j in jobs
            if j["metadata"].get("labels", {}).get(JOBSET_NAME) == name
            and j["metadata"].get("labels", {}).get(JOBSET_UID) == jobset["metadata"]["uid"]
        ]
        before = json.dumps(jobset.get("status") or {}, sort_keys=True)
        status = jobset.setdefault("status", {})
        status.setdefault("restarts", 0)
        active = [j for j in mine if not _job_finished(j)]
        failed = [j for j in mine if is_true(j, "Failed")]
        succeeded = [j for j in mine if is_true(j, "Complete")]
        status["replicatedJobsStatus"] = _replicated_statuses(jobset, active, succeeded, failed)
        for job in mine:  # the Job controller and the kubelets, for this JobSet's Jobs
            self.reconcile_job(name, job, [p for p in pods if _owned_by(p, job)])
        if is_true(jobset, "Completed") or is_true(jobset, "Failed"):
            for job in active:
                self._delete_job(job, pods)
        elif failed:
            first = min(failed, key=lambda j: (condition(j, "Failed") or {}).get(
                "lastTransitionTime", ""))  # fmt: skip
            reason, message = FAILED_JOBS
            message = f"{message} (first failed job: {first['metadata']['name']})"
            if set_condition(jobset, "Failed", True, reason, message):
                self.event(jobset, reason, message, "Warning")
            status["terminalState"] = "Failed"
        elif len(succeeded) == _expected_jobs(jobset):
            if set_condition(jobset, "Completed", True, *ALL_JOBS_COMPLETED):
                self.event(jobset, *ALL_JOBS_COMPLETED)
            status["terminalState"] = "Completed"
        else:
            self._service(jobset)
            existing = {j["metadata"]["name"] for j in mine}
            for rjob in jobset["spec"]["replicatedJobs"]:
                for index in range(int(rjob.get("replicas", 1))):
                    if job_name(name, rjob["name"], index) not in existing:
                        self._create_job(jobset, rjob, index)
            suspend = bool(jobset["spec"].get("suspend"))
            for job in active:
                if bool(job["spec"].get("suspend")) != suspend:
                    self.api.patch(JOB, self.namespace, job["metadata"]["name"],
                                   {"spec": {"suspend": suspend}})  # fmt: skip
            if suspend:
                if set_condition(jobset, "Suspended", True, *JOBSET_SUSPENDED):
                    self.event(jobset, *JOBSET_SUSPENDED)
            elif condition(jobset, "Suspended"):
                if set_condition(jobset, "Suspended", False, *JOBSET_RESUMED):
                    self.event(jobset, *JOBSET_RESUMED)
        if json.dumps(status, sort_keys=True) != before:
            self.api.patch_status(JOBSET, self.namespace, name, status)

    def _service(self, jobset: dict[str, Any]) -> None:
        """jobset_controller createHeadlessSvcIfNecessary: with DNS hostnames on, a
        headless Service named after the subdomain selecting the JobSet's pods."""
        network = jobset["spec"].get("network") or {}
        if not network.get("enableDNSHostnames", True):
            return
        name = subdomain(jobset)
        if self.api.get(SERVICE, self.namespace, name) is not None:
            return
        self.api.create(SERVICE, self.namespace, {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": self.namespace,
                         "ownerReferences": [owner(jobset)]},
            "spec": {"clusterIP": "None",
                     "selector": {JOBSET_NAME: jobset["metadata"]["name"]},
                     "publishNotReadyAddresses": network.get("publishNotReadyAddresses", True)},
        })  # fmt: skip

    def _create_job(self, jobset: dict[str, Any], rjob: dict[str, Any], index: int) -> None:
        """jobset_controller constructJob + labelAndAnnotateObject: the replicated job's
        template, labels and annotations on the Job and its pod template, the subdomain,
        suspend as the JobSet's."""
        name = job_name(jobset["metadata"]["name"], rjob["name"], index)
        template = json.loads(json.dumps(rjob["template"]))
        spec = template["spec"]
        marks = _jobset_marks(jobset, rjob, index, name)
        meta = template.get("metadata") or {}
        pod_template = spec.setdefault("template", {})
        pod_meta = pod_template.setdefault("metadata", {})
        for target in (meta, pod_meta):
            target["labels"] = {**(target.get("labels") or {}), **marks}
            target["annotations"] = {**(target.get("annotations") or {}), **marks}
        if (jobset["spec"].get("network") or {}).get("enableDNSHostnames", True):
            pod_template.setdefault("spec", {})["subdomain"] = subdomain(jobset)
        spec["suspend"] = bool(jobset["spec"].get("suspend"))
        spec.setdefault("parallelism", 1)
        spec.setdefault("completions", spec["parallelism"])
        spec.setdefault("backoffLimit", DEFAULT_BACKOFF_LIMIT)
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {**meta, "name": name, "namespace": self.namespace,
                            "ownerReferences": [owner(jobset)]},
               "spec": spec}  # fmt: skip
        self.api.create(JOB, self.namespace, job)

    def _delete_job(self, job: dict[str, Any], pods: list[dict]) -> None:
        for pod in pods:
            if _owned_by(pod, job):
                self.delete_pod(pod["metadata"]["name"])
        self.api.delete(JOB, self.namespace, job["metadata"]["name"])

    # the Job controller and the kubelets -------------------------------------------------

    def reconcile_job(self, jobset: str, job: dict[str, Any], pods: list[dict]) -> None:
        """The Job controller for an Indexed Job, and the kubelets of its pods: a
        suspended Job has no pods (they are deleted: containers SIGTERMed); otherwise one
        pod per completion index not yet succeeded, bound and started, its exit ending
        it; a container that fails restarts in place (restartPolicy OnFailure) or its
        index gets a new pod (Never) while the failures stay within backoffLimit, else
        the Job fails and its active pods are deleted; all indexes succeeded: Complete."""
        if _job_finished(job):
            return
        name, spec = job["metadata"]["name"], job["spec"]
        before = json.dumps(job.get("status") or {}, sort_keys=True)
        status = job.setdefault("status", {})
        live = [p for p in pods if p["status"].get("phase") in ("Pending", "Running")]
        if spec.get("suspend"):
            for pod in live:
                self.delete_pod(pod["metadata"]["name"])
            set_condition(job, "Suspended", True, *JOB_SUSPENDED)
            status.update(active=0, ready=0)
            status.pop("startTime", None)
        else:
            if is_true(job, "Suspended"):
                set_condition(job, "Suspended", False, *JOB_RESUMED)
            status.setdefault("startTime", now())
            used = [_failures(pods)]
            pods = [self._kubelet_pass(jobset, job, pod, used) for pod in pods]
            done = {_index(p) for p in pods if p["status"].get("phase") == "Succeeded"}
            live = [p for p in pods if p["status"].get("phase") in ("Pending", "Running")]
            completions = int(spec.get("completions") or 1)
            if _failures(pods) > int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)):
                for pod in live:  # the Job controller deletes a failed Job's active pods
                    self.delete_pod(pod["metadata"]["name"])
                set_condition(job, "Failed", True, *JOB_FAILED)
                self.event(job, *JOB_FAILED, "Warning")
                live = []
            elif len(done) >= completions:
                set_condition(job, "Complete", True, *JOB_COMPLETE)
            else:
                covered = done | {_index(p) for p in live}
                live += [self._create_pod(job, i) for i in range(completions) if i not in covered]
            status.update(
                active=len(live), succeeded=len(done),
                failed=sum(1 for p in pods if p["status"].get("phase") == "Failed"),
                ready=sum(1 for p in live if p["status"].get("phase") == "Running"),
                completedIndexes=_ranges(sorted(done)),
            )  # fmt: skip
            if _job_finished(job):
                status["completionTime"] = now()
        if json.dumps(status, sort_keys=True) != before:
            self.api.patch_status(JOB, self.namespace, name, status)

    def _create_pod(self, job: dict[str, Any], index: int) -> dict[str, Any]:
        """The Job controller's pod for a completion index (pkg/controller/job,
        indexed_job_utils.go): named `<job>-<index>-<random>`, hostname `<job>-<index>`,
        the index as label and annotation, JOB_COMPLETION_INDEX in every container's env
        (from the annotation, as the Job controller adds it), owned by the Job."""
        name = job["metadata"]["name"]
        template = json.loads(json.dumps(job["spec"]["template"]))
        meta, spec = template.get("metadata") or {}, template["spec"]
        suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(5))
        labels = {**(meta.get("labels") or {}), COMPLETION_INDEX: str(index),
                  JOB_NAME: name, "job-name": name,
                  CONTROLLER_UID: job["metadata"].get("uid", ""),
                  "controller-uid": job["metadata"].get("uid", "")}  # fmt: skip
        annotations = {**(meta.get("annotations") or {}), COMPLETION_INDEX: str(index)}
        spec.setdefault("hostname", f"{name}-{index}")
        index_env = {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}}  # fmt: skip
        for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
            env = container.setdefault("env", [])
            if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
                env.append(index_env)
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"{name}-{index}-{suffix}", "namespace": self.namespace,
                            "labels": labels, "annotations": annotations,
                            "ownerReferences": [owner(job)]},
               "spec": spec, "status": {"phase": "Pending"}}  # fmt: skip
        created = self.api.create(POD, self.namespace, pod)
        created.setdefault("status", {"phase": "Pending"})
        self.kubelet.network.add_pod(created)
        return created

    def _kubelet_pass(
        self, jobset: str, job: dict[str, Any], pod: dict[str, Any], used: list[int]
    ) -> dict[str, Any]:
        """One look of the kubelet (and scheduler) at a pod: bind and start a Pending
        one, publish a running one's log, end it (or restart its container) on exit.
        Returns the pod with the status it now has."""
        name, phase = pod["metadata"]["name"], pod["status"].get("phase")
        if jobset in self.replayed or (self.playing is not None and jobset not in self.playing):
            return pod
        kubelet = self.kubelet
        running = kubelet.running.get(name)
        if phase == "Pending" and running is None:
            kubelet.network.add_pod(pod)
            try:
                node = kubelet.bind(pod)
            except Unschedulable as exc:
                if name not in self._reported:
                    self._reported.add(name)
                    self.event(pod, "FailedScheduling", str(exc), "Warning")
                return pod
            self.api.patch(POD, self.namespace, name, {"spec": {"nodeName": node}})
            self.event(pod, "Scheduled", f"Successfully assigned {self.namespace}/{name} to {node}")
            running = kubelet.start(pod, node, self._kill_on(jobset, pod))
            return self._set_pod(pod, "Running", restarts=0)
        if phase != "Running" or running is None:
            return pod
        kubelet.publish(running)
        code = running.exit_code()
        if code is None:
            return pod
        injected = self._fired.pop(name, None) if running.killed else None
        text = running.output()
        reason = "Completed" if code == 0 else "Error"
        if injected is not None:
            text, code, reason = text + injected.log, injected.exit_code, injected.reason
        self.api_log(name, text)
        restarts = _restarts(pod)
        policy = pod["spec"].get("restartPolicy", "Always")
        limit = int(job["spec"].get("backoffLimit", DEFAULT_BACKOFF_LIMIT))
        # OnFailure: the kubelet restarts the container in its pod and the restart counts
        # against the Job's backoffLimit. Here a restart that the Job controller would
        # answer at once by failing the Job (over the limit) is not started.
        if code != 0 and policy == "OnFailure" and used[0] + 1 <= limit:
            used[0] += 1
            self.api_log(name, text, previous=True)  # the last run's log is `previous`
            container = pod["spec"]["containers"][0]["name"]
            message = f"Back-off restarting failed container {container} in pod {name}"
            self.event(pod, "BackOff", message, "Warning")
            time.sleep(self.restart_delay_s)
            last = _terminated(code, reason)
            kubelet.running.pop(name, None)
            running = kubelet.start(pod, pod["spec"].get("nodeName") or running.node,
                                    self._kill_on(jobset, pod))  # fmt: skip
            return self._set_pod(pod, "Running", restarts + 1, last=last)
        return self._set_pod(pod, "Succeeded" if code == 0 else "Failed", restarts,
                             terminated=_terminated(code, reason))  # fmt: skip

    def _kill_on(self, jobset: str, pod: dict[str, Any]) -> str | None:
        inject = self.injections.get(jobset)
        if inject and pod["spec"].get("hostname") == f"{jobset}-{inject.replica}":
            del self.injections[jobset]
            self._fired[pod["metadata"]["name"]] = inject
            return f'"event": "{inject.after}"'
        return None

    def _set_pod(
        self,
        pod: dict[str, Any],
        phase: str,
        restarts: int,
        *,
        terminated: dict[str, Any] | None = None,
        last: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        container = pod["spec"]["containers"][0]
        state = {"terminated": terminated} if terminated else {"running": {"startedAt": now()}}
        entry = {"name": container["name"], "image": container.get("image", ""), "imageID": "",
                 "ready": phase == "Running", "started": phase == "Running",
                 "restartCount": restarts, "state": state}  # fmt: skip
        previous = ((pod["status"].get("containerStatuses") or [{}])[0]).get("lastState")
        if last or previous:
            entry["lastState"] = {"terminated": last} if last else previous
        status = {"phase": phase, "hostIP": "127.0.0.1", "podIP": "127.0.0.1",
                  "startTime": pod["status"].get("startTime") or now(),
                  "containerStatuses": [entry]}  # fmt: skip
        self.api.patch_status(POD, self.namespace, pod["metadata"]["name"], status)
        return {**pod, "status": {**pod["status"], **status}}

    def event(self, obj: dict[str, Any], reason: str, message: str, type_: str = "Normal") -> None:
        """An Event about `obj`, as its controller (or the scheduler, or a kubelet) records
        one: named `<object>.<random hex>` as client-go's recorder names them; a repeat
        of the same event is not recorded again (the recorder counts it instead)."""
        meta = obj["metadata"]
        key = (meta.get("uid") or meta["name"], reason, message)
        if key in self._events:
            return
        self._events.add(key)
        self.api.create("v1/events", self.namespace, {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{secrets.token_hex(8)}",
                         "namespace": self.namespace},
            "involvedObject": {"apiVersion": obj.get("apiVersion", "v1"),
                               "kind": obj.get("kind", "Pod"), "name": meta["name"],
                               "namespace": self.namespace, "uid": meta.get("uid", "")},
            "reason": reason, "message": message, "type": type_,
            "firstTimestamp": now(), "lastTimestamp": now(), "count": 1,
            "source": {"component": "stand-in"}})  # fmt: skip

    def api_log(self, pod: str, text: str, previous: bool = False) -> None:
        self.kubelet.kube.set_pod_log(self.namespace, pod, text, previous=previous)

    def delete_pod(self, name: str) -> None:
        """A pod deleted (by its controller or the garbage collector): its container is
        SIGTERMed, then SIGKILLed after the (shortened) grace period."""
        self.kubelet.forget(name)
        self.api.delete(POD, self.namespace, name)


def _jobset_marks(jobset: dict[str, Any], rjob: dict[str, Any], index: int, job: str) -> dict:
    """jobset_controller labelAndAnnotateObject: the labels (also set as annotations) on a
    child Job and its pod template."""
    rjobs = jobset["spec"]["replicatedJobs"]
    group = rjob.get("groupName", "default")
    before = sum(int(r.get("replicas", 1)) for r in rjobs[: rjobs.index(rjob)])
    in_group = [r for r in rjobs if r.get("groupName", "default") == group]
    group_before = sum(int(r.get("replicas", 1)) for r in in_group[: in_group.index(rjob)])
    namespace = jobset["metadata"].get("namespace", "default")
    return {
        JOBSET_NAME: jobset["metadata"]["name"],
        JOBSET_UID: jobset["metadata"].get("uid", ""),
        REPLICATED_JOB: rjob["name"],
        RESTARTS: str((jobset.get("status") or {}).get("restarts", 0)),
        REPLICATED_JOB_REPLICAS: str(rjob.get("replicas", 1)),
        GLOBAL_REPLICAS: str(sum(int(r.get("replicas", 1)) for r in rjobs)),
        JOB_INDEX: str(index),
        JOB_KEY: hashlib.sha1(f"{namespace}/{job}".encode()).hexdigest(),  # noqa: S324 (upstream's key)
        JOB_GLOBAL_INDEX: str(before + index),
        GROUP_NAME: group,
        GROUP_REPLICAS: str(sum(int(r.get("replicas", 1)) for r in in_group)),
        JOB_GROUP_INDEX: str(group_before + index),
    }


def _replicated_statuses(
    jobset: dict[str, Any], active: list[dict], succeeded: list[dict], failed: list[dict]
) -> list[dict[str, Any]]:
    """jobset_controller calculateReplicatedJobStatuses."""
    keys: tuple[str, ...] = ("ready", "succeeded", "failed", "active", "suspended")
    counts: dict[str, dict[str, int]] = {
        r["name"]: dict.fromkeys(keys, 0) for r in jobset["spec"]["replicatedJobs"]
    }

    def rjob(job: dict[str, Any]) -> dict[str, int] | None:
        return counts.get(job["metadata"].get("labels", {}).get(REPLICATED_JOB, ""))

    for job in active:
        if (found := rjob(job)) is None:
            continue
        status, spec = job.get("status") or {}, job["spec"]
        pods = min(int(spec.get("parallelism", 1)), int(spec.get("completions") or 1 << 30))
        found["ready"] += int(status.get("succeeded", 0)) + int(status.get("ready", 0)) >= pods
        found["active"] += int(status.get("active", 0)) > 0
        found["suspended"] += bool(spec.get("suspend"))
    for jobs, key in ((succeeded, "succeeded"), (failed, "failed")):
        for job in jobs:
            if (found := rjob(job)) is not None:
                found[key] += 1
    return [{"name": name, **values} for name, values in counts.items()]


def _expected_jobs(jobset: dict[str, Any]) -> int:
    """success_policy.go numJobsExpectedToSucceed for operator All (targets: every
    replicated job unless targetReplicatedJobs names some)."""
    targets = (jobset["spec"].get("successPolicy") or {}).get("targetReplicatedJobs") or []
    return sum(int(r.get("replicas", 1)) for r in jobset["spec"]["replicatedJobs"]
               if not targets or r["name"] in targets)  # fmt: skip


def _job_finished(job: dict[str, Any]) -> bool:
    return is_true(job, "Complete") or is_true(job, "Failed")


def _owned_by(obj: dict[str, Any], parent: dict[str, Any]) -> bool:
    uid = parent["metadata"].get("uid")
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or [])


def _index(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["annotations"][COMPLETION_INDEX])


def _failures(pods: list[dict[str, Any]]) -> int:
    """What counts against a Job's backoffLimit: failed pods and container restarts."""
    return sum(_restarts(p) + (p["status"].get("phase") == "Failed") for p in pods)


def _restarts(pod: dict[str, Any]) -> int:
    return sum(int(c.get("restartCount", 0)) for c in pod["status"].get("containerStatuses") or [])


def _terminated(code: int, reason: str) -> dict[str, Any]:
    return {"exitCode": code, "reason": reason, "startedAt": now(), "finishedAt": now()}


def _ranges(indexes: list[int]) -> str:
    """A Job's status.completedIndexes: "0-2,4"."""
    parts: list[str] = []
    for i in indexes:
        if parts and "-" not in parts[-1].split(",")[-1] and int(parts[-1]) == i - 1:
            parts[-1] = f"{parts[-1]}-{i}"
        elif parts and "-" in parts[-1] and int(parts[-1].split("-")[1]) == i - 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{i}"
        else:
            parts.append(str(i))
    return ",".join(parts)
