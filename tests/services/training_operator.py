"""Plays the Kubeflow Training Operator (and the nodes' kubelets) on kmock, through the
Kubernetes API like a controller: kmock runs no controllers, so a test creates the pods
of a submitted PyTorchJob, moves them and the job through their phases and conditions,
and serves the pods' logs.

    operator = TrainingOperator(kube_api)            # the `kube_api` fixture's service
    operator.add_nodes("p5.48xlarge", 2, driver="580.65.06")
    ... deploy_training_job(...) creates the PyTorchJob ...
    operator.run("llama", outcome="Succeeded")       # pods, statuses, rank-0 log
    operator.run("llama", outcome="Failed", exit_codes={"master-0": 1},
                 rank_logs={"master-0": ERROR_LOG}, restarts={"worker-1": 2})

`run` replays: logs default to RUN_LOG, JSON lines the real trainer printed (trainer/,
`torchrun --nproc_per_node=2 -m trainer --model_type debug --max_steps 6
--checkpoint_freq 3`, recorded once; ERROR_LOG from a run with a missing dataset).
`train` runs instead: each replica's container, as the job renders it and with the env
the operator injects, runs for real on this host (tests/services/kubelet.py); its pod
log is the container's output and the job ends as the exit codes say:

    handle = operator.train("llama")                 # returns at once; handle.wait()
    operator.train("oom", inject=Injected("master-0", after="checkpoint_saved",
                                          log=OOM_TRACEBACK))

Replicas are named as the operator names them: "master-0", "worker-0", ... (pod
`<job>-<replica>`)."""

from __future__ import annotations

import datetime
import json
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tests.services.kube import PYTORCHJOB, KubeService
from tests.services.kubelet import Kubelet, RunningPod, Unschedulable

DATA = Path(__file__).with_name("data")
RUN_LOG = (DATA / "trainer_run.jsonl").read_text()
ERROR_LOG = (DATA / "trainer_error.jsonl").read_text()
OTHER_RANK_LOG = "[rank1]: torch.distributed: worker started\n"

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
Outcome = Literal["Running", "Succeeded", "Failed"]
PORT_NAME = "pytorchjob-port"  # the port the operator reads MASTER_PORT / the rdzv port from
START_ORDER_S = 60.0  # how long later replicas wait for rank 0's rendezvous port
FAIL_GRACE_S = 10.0  # after one replica fails, how long the others get to exit on their own
# How often the stand-in looks at the API: each request to kmock (in this process, as the
# client is) costs 20-60 ms of CPU, so a 20 Hz look is a third of a core.
LOOK_S = 0.5


def operator_env(job: dict[str, Any], kind: str, index: int) -> list[dict[str, str]]:
    """The variables the Training Operator (v1.9, pkg/controller.v1/pytorch/envvar.go,
    master.go, elastic.go) appends to a replica's container: PYTHONUNBUFFERED; with a
    Master, MASTER_ADDR/MASTER_PORT, WORLD_SIZE (pods x nprocPerNode), RANK,
    PET_NPROC_PER_NODE and PET_NODE_RANK (Workers count from 1); PET_NNODES (the pod
    count, or min:max with an elasticPolicy, which also sets the PET_RDZV_* variables)."""
    spec = job["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    total = sum(int(r.get("replicas", 1)) for r in replicas.values())
    nproc = str(spec.get("nprocPerNode", "auto"))
    env = [{"name": "PYTHONUNBUFFERED", "value": "0"}]
    if "Master" in replicas:
        rank = index + 1 if kind == "Worker" else index
        env += [
            {"name": "MASTER_PORT", "value": str(_port(replicas["Master"]))},
            {"name": "MASTER_ADDR", "value": f"{job['metadata']['name']}-master-0"},
            {"name": "WORLD_SIZE", "value": str(total * (int(nproc) if nproc.isdigit() else 1))},
            {"name": "RANK", "value": str(rank)},
            {"name": "PET_NPROC_PER_NODE", "value": nproc},
            {"name": "PET_NODE_RANK", "value": str(rank)},
        ]
    policy = spec.get("elasticPolicy")
    if policy is None:
        return [*env, {"name": "PET_NNODES", "value": str(total)}]
    host = policy.get("rdzvHost") or f"{job['metadata']['name']}-worker-0"
    port = policy.get("rdzvPort") or _port(replicas["Worker"])
    low, high = policy.get("minReplicas"), policy.get("maxReplicas")
    nnodes = f"{low}:{high}" if low or high else str(replicas["Worker"].get("replicas", 1))
    env += [
        {"name": "PET_RDZV_ENDPOINT", "value": f"{host}:{port}"},
        {"name": "PET_RDZV_BACKEND", "value": policy.get("rdzvBackend") or "c10d"},
        {"name": "PET_NNODES", "value": nnodes},
    ]
    if policy.get("maxRestarts") is not None:
        env.append({"name": "PET_MAX_RESTARTS", "value": str(policy["maxRestarts"])})
    if policy.get("nProcPerNode") is not None:
        env.append({"name": "PET_N_PROC_PER_NODE", "value": str(policy["nProcPerNode"])})
    if policy.get("rdzvId"):
        env.append({"name": "PET_RDZV_ID", "value": policy["rdzvId"]})
    return env


def _port(replica: dict[str, Any]) -> int:
    for container in replica["template"]["spec"]["containers"]:
        for port in container.get("ports") or []:
            if port.get("name") == PORT_NAME:
                return int(port["containerPort"])
    raise ValueError("port not found")  # the operator's own error for such a job


@dataclass(frozen=True)
class Injected:
    """A failure played into a real run, for what a CPU run cannot produce (a CUDA OOM):
    once `after` (a trainer event name) is in `replica`'s log, every container is killed
    and `replica` ends with `log` appended and `exit_code`."""

    replica: str
    after: str
    log: str
    exit_code: int = 1


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class TrainingOperator:
    def __init__(
        self, kube: KubeService, namespace: str = "default", root: Path | None = None
    ) -> None:
        from kubernetes import client, config

        self.kube = kube
        self.namespace = namespace
        self.root = root or Path(tempfile.mkdtemp(prefix="fsdp-cluster-"))
        self._kubelet: Kubelet | None = None
        self.runs: list[JobRun] = []
        configuration = client.Configuration()
        config.load_kube_config(str(kube.kubeconfig), client_configuration=configuration)
        api = client.ApiClient(configuration)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    # the cluster ---------------------------------------------------------------------

    def uninstall(self) -> None:
        """No Training Operator: the cluster serves no PyTorchJob kind."""
        self.kube.emulator.resources.pop(PYTORCHJOB, None)

    def add_nodes(
        self,
        instance_type: str,
        count: int = 1,
        *,
        gpus: int = 8,
        efa: int = 0,
        driver: str | None = "580.65.06",
        compute: tuple[int, int] | None = None,
    ) -> list[str]:
        """Ready GPU nodes as gpu-feature-discovery labels them."""
        names = []
        for i in range(count):
            name = f"{instance_type.replace('.', '-')}-{len(self.nodes())}-{i}"
            labels = {"node.kubernetes.io/instance-type": instance_type}
            if driver:
                labels["nvidia.com/cuda.driver-version.full"] = driver
            if compute:
                labels["nvidia.com/gpu.compute.major"] = str(compute[0])
                labels["nvidia.com/gpu.compute.minor"] = str(compute[1])
            allocatable = {"nvidia.com/gpu": str(gpus), "cpu": "192", "memory": "2000Gi"}
            if efa:
                allocatable["vpc.amazonaws.com/efa"] = str(efa)
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "status": {
                    "allocatable": allocatable,
                    "capacity": allocatable,
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
            self.core.create_node(node, _preload_content=False)
            names.append(name)
        return names

    def add_claim(self, name: str) -> None:
        """A bound PersistentVolumeClaim (an FSx claim): every pod mounting it shares it."""
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"accessModes": ["ReadWriteMany"],
                     "resources": {"requests": {"storage": "1200Gi"}}},
            "status": {"phase": "Bound"},
        }  # fmt: skip
        self.core.create_namespaced_persistent_volume_claim(
            self.namespace, claim, _preload_content=False
        )

    @property
    def kubelet(self) -> Kubelet:
        if self._kubelet is None:
            self._kubelet = Kubelet(self.core, self.kube, self.namespace, self.root)
        return self._kubelet

    def stop(self) -> None:
        """Stop every run and every container still running."""
        for run in self.runs:
            run.stop()
        if self._kubelet:
            self._kubelet.stop_all()

    def nodes(self) -> list[dict[str, Any]]:
        return json.loads(self.core.list_node(_preload_content=False).data)["items"]

    # a job -------------------------------------------------------------------------------

    def job(self, name: str) -> dict[str, Any]:
        response = self.custom.get_namespaced_custom_object(
            "kubeflow.org", "v1", self.namespace, "pytorchjobs", name, _preload_content=False
        )
        return json.loads(response.data)

    def replicas(self, name: str) -> list[tuple[str, int, dict[str, Any]]]:
        """(replica type, index, pod template) of every pod the job asks for."""
        specs = self.job(name)["spec"]["pytorchReplicaSpecs"]
        return [
            (kind, index, spec["template"])
            for kind in ("Master", "Worker")
            if (spec := specs.get(kind))
            for index in range(int(spec.get("replicas", 1)))
        ]

    def create_pods(self, name: str) -> list[str]:
        """The job's pods as the operator creates them: Pending, labelled, one per replica."""
        pods = []
        job = self.job(name)
        for kind, index, template in self.replicas(name):
            pod_name = f"{name}-{kind.lower()}-{index}"
            labels = {
                **(template.get("metadata") or {}).get("labels", {}),
                JOB_NAME_LABEL: name,
                REPLICA_TYPE_LABEL: kind.lower(),
                REPLICA_INDEX_LABEL: str(index),
            }
            if kind == "Master" or (index == 0 and kind == "Worker"):
                labels["training.kubeflow.org/job-role"] = "master"
            spec = json.loads(json.dumps(template["spec"]))
            for container in spec.get("containers", []):
                container["env"] = [*(container.get("env") or []),
                                    *operator_env(job, kind, index)]  # fmt: skip
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod_name, "namespace": self.namespace, "labels": labels},
                "spec": spec,
                "status": {"phase": "Pending"},
            }
            self.core.create_namespaced_pod(self.namespace, pod, _preload_content=False)
            pods.append(pod_name)
        self._conditions(name, [("Created", "PyTorchJobCreated")], {})
        return pods

    def run(
        self,
        name: str,
        *,
        outcome: Outcome = "Succeeded",
        rank_logs: dict[str, str] | None = None,
        exit_codes: dict[str, int] | None = None,
        restarts: dict[str, int] | None = None,
        previous_logs: dict[str, str] | None = None,
        message: str | None = None,
    ) -> list[str]:
        """Create the job's pods (if not yet), serve their logs and move pods and job to
        `outcome`. rank_logs/exit_codes/restarts/previous_logs are keyed by replica
        ("master-0", "worker-1"); rank 0 logs RUN_LOG (ERROR_LOG when Failed) unless
        given, the others a plain line. A Failed job's failing replicas are those with a
        non-zero exit code (default: rank 0 with 1)."""
        existing = {p["metadata"]["name"] for p in self._pods(name)}
        pod_names = [f"{name}-{k.lower()}-{i}" for k, i, _ in self.replicas(name)]
        if not set(pod_names) <= existing:
            self.create_pods(name)
        rank0 = pod_names[0].removeprefix(f"{name}-")
        logs = {rank0: ERROR_LOG if outcome == "Failed" else RUN_LOG, **(rank_logs or {})}
        codes = dict(exit_codes or {})
        if outcome == "Failed" and not any(codes.values()):
            codes[rank0] = 1
        for pod in pod_names:
            replica = pod.removeprefix(f"{name}-")
            self.kube.set_pod_log(self.namespace, pod, logs.get(replica, OTHER_RANK_LOG))
            if previous_logs and replica in previous_logs:
                self.kube.set_pod_log(self.namespace, pod, previous_logs[replica], previous=True)
            code = codes.get(replica, 0)
            self._pod_status(pod, outcome, code, (restarts or {}).get(replica, 0))
        steps = [("Created", "PyTorchJobCreated"), ("Running", "PyTorchJobRunning")]
        if outcome == "Succeeded":
            steps.append(("Succeeded", "PyTorchJobSucceeded"))
        elif outcome == "Failed":
            steps.append(("Failed", "PyTorchJobFailed"))
        counts: dict[str, dict[str, int]] = {}
        for kind, _, _ in self.replicas(name):
            key = {"Succeeded": "succeeded", "Failed": "failed"}.get(outcome, "active")
            counts.setdefault(kind, {}).setdefault(key, 0)
            counts[kind][key] += 1
        self._conditions(name, steps, counts, message)
        return pod_names

    def train(self, name: str, *, inject: Injected | None = None) -> JobRun:
        """Create the job's pods and run their containers for real (returns at once)."""
        for pod in self._pods(name):
            self.kubelet.forget(pod["metadata"]["name"])
            self.core.delete_namespaced_pod(
                pod["metadata"]["name"], self.namespace, _preload_content=False
            )
        uid = self.job(name)["metadata"].get("uid")
        # Created here, not on the run's thread: the job has a status before this returns.
        run = JobRun(self, name, uid, self.create_pods(name), inject)
        self.runs.append(run)
        run.start()
        return run

    def add_event(
        self, involved: str, reason: str, message: str, kind: str = "Pod", type_: str = "Warning"
    ) -> None:
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{involved}.{reason.lower()}", "namespace": self.namespace},
            "involvedObject": {"kind": kind, "name": involved, "namespace": self.namespace},
            "reason": reason,
            "message": message,
            "type": type_,
            "lastTimestamp": _now(),
            "count": 1,
        }
        self.core.create_namespaced_event(self.namespace, event, _preload_content=False)

    # internals ---------------------------------------------------------------------------

    def _pods(self, name: str) -> list[dict[str, Any]]:
        listed = json.loads(
            self.core.list_namespaced_pod(self.namespace, _preload_content=False).data
        )
        return [
            p
            for p in listed["items"]
            if p["metadata"].get("labels", {}).get(JOB_NAME_LABEL) == name
        ]

    def _pod_status(self, pod: str, outcome: Outcome, code: int, restarts: int) -> None:
        if outcome == "Running":
            phase, state = "Running", {"running": {"startedAt": _now()}}
        else:
            phase = "Succeeded" if code == 0 else "Failed"
            reason = "Completed" if code == 0 else "Error"
            state = {"terminated": {"exitCode": code, "reason": reason, "finishedAt": _now()}}
        status = {
            "phase": phase,
            "containerStatuses": [
                {"name": "pytorch", "ready": phase == "Running", "restartCount": restarts,
                 "state": state, "image": "trainer", "imageID": "", "started": True}
            ],
        }  # fmt: skip
        self.core.patch_namespaced_pod_status(
            pod, self.namespace, {"status": status}, _preload_content=False
        )

    def _conditions(
        self,
        name: str,
        steps: list[tuple[str, str]],
        counts: dict[str, dict[str, int]],
        message: str | None = None,
    ) -> None:
        conditions = [
            {"type": kind, "status": "True", "reason": reason,
             "message": message if message and i == len(steps) - 1
             else f"PyTorchJob {name} is {kind.lower()}.",
             "lastTransitionTime": _now(), "lastUpdateTime": _now()}
            for i, (kind, reason) in enumerate(steps)
        ]  # fmt: skip
        for earlier in conditions[:-1]:
            if earlier["type"] == "Running" and conditions[-1]["type"] != "Running":
                earlier["status"] = "False"
        status = {"conditions": conditions, "replicaStatuses": counts, "startTime": _now()}
        if steps[-1][0] in ("Succeeded", "Failed"):
            status["completionTime"] = _now()
        self.custom.patch_namespaced_custom_object_status(
            "kubeflow.org", "v1", self.namespace, "pytorchjobs", name, {"status": status},
            _preload_content=False,
        )  # fmt: skip


class JobRun:
    """One attempt of a PyTorchJob played for real: pods bound and started (rank 0
    first, so it hosts the c10d store as on a cluster where the others connect to its
    Service), logs published as they grow, pod phases and the job's conditions set from
    the exit codes. Ends early, touching nothing, when the job is deleted."""

    def __init__(
        self,
        operator: TrainingOperator,
        name: str,
        uid: str | None,
        pod_names: list[str],
        inject: Injected | None,
    ) -> None:
        self.operator, self.name, self.inject = operator, name, inject
        self.uid, self.pod_names = uid, pod_names
        self.kubelet = operator.kubelet
        self.outcome: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._play, name=f"job-{name}", daemon=True)
        self.pods: dict[str, RunningPod] = {}

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def wait(self, timeout: float = 300) -> str | None:
        self._thread.join(timeout)
        return self.outcome

    # the play ------------------------------------------------------------------------

    def _play(self) -> None:
        operator, uid, names = self.operator, self.uid, self.pod_names
        pods = {p: self._pod(p) for p in names}
        for pod in pods.values():
            self.kubelet.network.add_pod(pod)
        nodes = self._bind(pods)
        if nodes is None:
            return
        first, *rest = names
        self._start(pods[first], nodes[first])
        self._await_listening(first)
        for pod in rest:
            self._start(pods[pod], nodes[pod])
        operator._conditions(
            self.name, [("Created", "PyTorchJobCreated"), ("Running", "PyTorchJobRunning")],
            self._counts(),
        )  # fmt: skip
        failed_at: float | None = None
        injected: RunningPod | None = None
        while not self._stop.is_set():
            if not self._same_job(uid):
                for running in self.pods.values():
                    running.stop()
                return
            for running in self.pods.values():
                self.kubelet.publish(running)
            injected = self._injected()
            codes = {n: r.exit_code() for n, r in self.pods.items()}
            if injected is not None:  # a crash: every container dies at once, no SIGTERM
                for running in self.pods.values():
                    running.stop(grace=0)
                break
            if any(c not in (None, 0) for c in codes.values()):
                failed_at = failed_at or time.monotonic()
                if time.monotonic() - failed_at > FAIL_GRACE_S:
                    for running in self.pods.values():
                        running.stop()
                    break
            if all(c is not None for c in codes.values()):
                break
            time.sleep(LOOK_S)
        else:
            return
        self._finish(injected)

    def _bind(self, pods: dict[str, dict[str, Any]]) -> dict[str, str] | None:
        """Nodes for every pod; while one does not fit, a FailedScheduling event and the
        pod stays Pending (None when the run is stopped meanwhile)."""
        nodes: dict[str, str] = {}
        reported: set[str] = set()
        while not self._stop.is_set():
            for name, pod in pods.items():
                if name in nodes:
                    continue
                try:
                    nodes[name] = self.kubelet.bind(pod)
                except Unschedulable as exc:
                    if name not in reported:
                        reported.add(name)
                        self.operator.add_event(name, "FailedScheduling", str(exc))
            if len(nodes) == len(pods):
                return nodes
            time.sleep(0.5)
        return None

    def _start(self, pod: dict[str, Any], node: str) -> None:
        name = pod["metadata"]["name"]
        core, namespace = self.operator.core, self.operator.namespace
        core.patch_namespaced_pod(name, namespace, {"spec": {"nodeName": node}},
                                  _preload_content=False)  # fmt: skip
        kill_on = None
        if self.inject and name == f"{self.name}-{self.inject.replica}":
            kill_on = f'"event": "{self.inject.after}"'
        self.pods[name] = self.kubelet.start(pod, node, kill_on)
        self.operator._pod_status(name, "Running", 0, 0)

    def _await_listening(self, name: str) -> None:
        ports = [port for (pod, _), port in self.kubelet.network.ports.items() if pod == name]
        deadline = time.monotonic() + START_ORDER_S
        while time.monotonic() < deadline and self.pods[name].exit_code() is None:
            for port in ports:
                with socket.socket() as s:
                    s.settimeout(0.2)
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        return
            time.sleep(0.2)

    def _injected(self) -> RunningPod | None:
        """The replica the injected crash killed, once it did."""
        if self.inject:
            running = self.pods.get(f"{self.name}-{self.inject.replica}")
            if running and running.killed:
                return running
        return None

    def _finish(self, injected: RunningPod | None) -> None:
        operator = self.operator
        codes: dict[str, int] = {}
        for name, running in self.pods.items():
            code = running.exit_code()
            code = 137 if code is None else code
            text = running.output()
            if injected is running and self.inject:
                text, code = text + self.inject.log, self.inject.exit_code
            operator.kube.set_pod_log(operator.namespace, name, text)
            codes[name] = code
            operator._pod_status(name, "Succeeded" if code == 0 else "Failed", code, 0)
        failed = {n for n, c in codes.items() if c}
        if injected is not None:  # the injected replica is the one that failed first
            failed = {injected.name}
        counts = self._counts(codes)
        steps = [("Created", "PyTorchJobCreated"), ("Running", "PyTorchJobRunning")]
        message = None
        if failed:
            kinds = sorted({n.removeprefix(f"{self.name}-").split("-")[0].capitalize()
                            for n in failed})  # fmt: skip
            message = (f"PyTorchJob {self.name} is failed because {len(failed)} "
                       f"{'/'.join(kinds)} replica(s) failed.")  # fmt: skip
            steps.append(("Failed", "PyTorchJobFailed"))
            self.outcome = "Failed"
        else:
            steps.append(("Succeeded", "PyTorchJobSucceeded"))
            self.outcome = "Succeeded"
        operator._conditions(self.name, steps, counts, message)

    def _counts(self, codes: dict[str, int] | None = None) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for kind, index, _ in self.operator.replicas(self.name):
            pod = f"{self.name}-{kind.lower()}-{index}"
            code = (codes or {}).get(pod)
            key = "active" if code is None else ("succeeded" if code == 0 else "failed")
            counts.setdefault(kind, {}).setdefault(key, 0)
            counts[kind][key] += 1
        return counts

    def _pod(self, name: str) -> dict[str, Any]:
        core, namespace = self.operator.core, self.operator.namespace
        return json.loads(core.read_namespaced_pod(name, namespace, _preload_content=False).data)

    def _same_job(self, uid: str | None) -> bool:
        try:
            job = self.operator.job(self.name)
        except Exception:  # noqa: BLE001 (deleted: the API answers 404)
            return False
        return job["metadata"].get("uid") == uid


def current_job(operator: TrainingOperator, name: str = "llama") -> dict | None:
    """The PyTorchJob as the API has it now, or None (not created yet, or being replaced)."""
    from kubernetes.client.exceptions import ApiException

    try:
        return operator.job(name)
    except ApiException:
        return None


Attempt = dict[str, Any] | Callable[[], None]


def play_attempts(
    operator: TrainingOperator, attempts: list[Attempt], name: str = "llama"
) -> Callable[[], tuple[list[dict], list[dict[str, str | None]]]]:
    """A thread that plays the operator over a job's attempts: for each new PyTorchJob
    `name` (one the operator has not touched: no status), the old pods go (as garbage
    collection would have it; the kubelet forgets them), then the attempt plays
    (operator.run's arguments, or a function that plays it). Returns a join() that stops
    the thread and gives each attempt's job as created and where its pods were placed."""
    seen: list[dict] = []
    placed: list[dict[str, str | None]] = []
    stop = threading.Event()

    def loop() -> None:
        for attempt in attempts:
            job = None
            while not stop.is_set():
                job = current_job(operator, name)
                if job is not None and not job.get("status"):
                    break
                time.sleep(LOOK_S / 2)
            if stop.is_set() or job is None:
                return
            seen.append(job)
            for pod in operator._pods(name):
                if operator._kubelet:
                    operator._kubelet.forget(pod["metadata"]["name"])
                operator.core.delete_namespaced_pod(
                    pod["metadata"]["name"], operator.namespace, _preload_content=False
                )
            if callable(attempt):
                attempt()
            else:
                operator.run(name, **attempt)
            placed.append({p["metadata"]["name"]: p["spec"].get("nodeName")
                           for p in operator._pods(name)})  # fmt: skip

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()

    def join() -> tuple[list[dict], list[dict[str, str | None]]]:
        stop.set()
        thread.join(10)
        assert not thread.is_alive()
        return seen, placed

    return join
