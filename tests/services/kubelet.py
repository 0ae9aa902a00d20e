"""The kubelets kmock lacks: a pod's container run for real, as a local process.

kmock stores pods but runs none. `Kubelet` takes a pod as the API holds it, binds it
to a node the way the scheduler would (nodeSelector, cordons, taints and required node
affinity, then free nvidia.com/gpu and EFA devices), and runs its container's command +
args with its env, the pod's logs being the process's real stdout and stderr and its
status the real exit code.

What a cluster gives a container, and how it is played here on one host:

* the image: this machine's interpreter. The PATH puts the venv's bin first, so the
  `torchrun`/`python` a trainer image holds are the ones installed here (tests that
  build images here cannot RUN their install steps: TEST-STACK.md). A command found in
  neither fails to start as on a node: exit 128, reason StartError.
* the pod network: every pod name of the namespace (the operator's per-replica Service
  names), and a pod's `<hostname>.<subdomain>` names (a JobSet's headless Service),
  resolve to 127.0.0.1, and each (pod, containerPort) to its own loopback port
  (_common.reserved_port: one no other copy of the suite hands out, outside the
  ephemeral range), so two pods that both declare 23456 do not collide. Names and ports are
  rewritten where the container's args and env spell them (`host:port`, a bare host,
  a *_PORT variable); a program that built an address from pieces would miss this.
* volumes: no mount namespace here, so a mount is a directory of this host and a path
  under a mountPath is rewritten where args and env spell it. hostPath is per node
  (`nodes/<node>/...`: a checkpoint two nodes write lands in two places, as on a
  cluster), a persistentVolumeClaim is one directory per claim shared by every pod (a
  claim the API does not have leaves the pod Pending, as an unbound claim does), an
  emptyDir is per pod. /dev/shm mounts keep this host's /dev/shm.
* the environment: only what the pod spec sets, plus PATH, HOME, LANG and
  OMP_NUM_THREADS=1 (the nodes share this host's cores); nothing of this process's
  environment (credentials, KUBECONFIG) leaks into a pod.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._common import reserved_port

LOG_PUBLISH_S = 0.3
SHM = "/dev/shm"  # noqa: S108 (a mountPath, not a file this code writes)
START_ERROR = 128  # the exit code a container that cannot start reports
GPU, EFA = "nvidia.com/gpu", "vpc.amazonaws.com/efa"


class Unschedulable(Exception):
    """No node fits the pod, or a volume it needs does not exist (it stays Pending)."""


def container_argv(container: dict[str, Any]) -> list[str]:
    """command + args, as the kubelet joins them; without a command the image's
    ENTRYPOINT would run, which no image here has."""
    command = list(container.get("command") or [])
    if not command:
        raise ValueError(f"container {container.get('name')} has no command (image ENTRYPOINT)")
    return command + list(container.get("args") or [])


@dataclass
class Network:
    """Pod names (and the DNS names a headless Service gives a pod with a hostname and
    subdomain) -> 127.0.0.1, (pod, containerPort) -> a reserved loopback port."""

    hosts: set[str] = field(default_factory=set)
    ports: dict[tuple[str, int], int] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)  # DNS name -> pod name

    def add_pod(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        self.hosts.add(name)
        for alias in dns_names(pod):
            self.hosts.add(alias)
            self.aliases[alias] = name
        for container in pod["spec"].get("containers", []):
            for port in container.get("ports") or []:
                self.ports.setdefault((name, int(port["containerPort"])), reserved_port())

    def address(self, host: str, port: int) -> str:
        host = self.aliases.get(host, host)
        mapped = self.ports.get((host, port))
        if mapped is None:  # a port no pod declares: nothing listens there on a cluster
            mapped = self.ports.setdefault((host, port), reserved_port())
        return f"127.0.0.1:{mapped}"

    def rewrite(self, value: str, own_pod: str) -> str:
        """`value` with pod addresses as this host reaches them."""
        if not self.hosts:
            return value
        names = "|".join(re.escape(h) for h in sorted(self.hosts, key=len, reverse=True))
        pattern = re.compile(rf"(?<![\w.-])({names})(?::(\d+))?(?![\w-])")

        def replace(match: re.Match[str]) -> str:
            host, port = match.group(1), match.group(2)
            return self.address(host, int(port)) if port else "127.0.0.1"

        return pattern.sub(replace, value)

    def port_env(self, name: str, value: str, master: str | None) -> str:
        """A *_PORT variable naming a declared port of the rendezvous host (MASTER_PORT,
        PET_MASTER_PORT) is that host's mapped port."""
        master = self.aliases.get(master, master) if master else master
        if master and name.endswith("_PORT") and value.isdigit():
            if (master, int(value)) in self.ports:
                return str(self.ports[master, int(value)])
        return value


def dns_names(pod: dict[str, Any]) -> list[str]:
    """The names a pod with spec.hostname and spec.subdomain has through the headless
    Service of that subdomain (Kubernetes "DNS for Services and Pods"):
    `<hostname>.<subdomain>[.<namespace>.svc[.cluster.local]]`."""
    spec, meta = pod["spec"], pod["metadata"]
    hostname, subdomain = spec.get("hostname"), spec.get("subdomain")
    if not hostname or not subdomain:
        return []
    base = f"{hostname}.{subdomain}"
    namespace = meta.get("namespace") or "default"
    return [base, f"{base}.{namespace}", f"{base}.{namespace}.svc",
            f"{base}.{namespace}.svc.cluster.local"]  # fmt: skip


@dataclass
class RunningPod:
    """A started container: its output is copied line by line into `log` (what the pod's
    log serves); a line containing `kill_on` SIGKILLs it at once (an injected crash)."""

    name: str
    node: str
    process: subprocess.Popen[bytes]
    log: Path
    kill_on: str | None = None
    killed: bool = False
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self._reader = threading.Thread(target=self._copy, daemon=True)
        self._reader.start()

    def _copy(self) -> None:
        stream = self.process.stdout
        if stream is None:
            return
        with self.log.open("ab") as out:
            for line in iter(stream.readline, b""):
                out.write(line)
                out.flush()
                if self.kill_on and not self.killed and self.kill_on.encode() in line:
                    self.killed = True
                    self._kill_all()

    def exit_code(self) -> int | None:
        """The container's exit code as the kubelet reports it (128+N for signal N);
        None while it runs. Its output is complete once this is not None."""
        code = self.process.poll()
        if code is None:
            return None
        self._reader.join(10)
        return 128 - code if code < 0 else code

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM to the container's main process (torchrun forwards it to its
        workers), then SIGKILL to everything the container started after `grace`
        (kubelet's terminationGracePeriodSeconds, shortened); grace=0: a crash, SIGKILL
        to all at once."""
        if self.process.poll() is None and grace:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(grace)
        self._kill_all()

    def _kill_all(self) -> None:
        """SIGKILL the main process and every descendant: torchrun puts its workers in
        sessions of their own, so a process group would miss them (a container's cgroup
        does not)."""
        import psutil

        try:
            main = psutil.Process(self.process.pid)
            tree = [*main.children(recursive=True), main]
        except psutil.NoSuchProcess:
            tree = []
        for proc in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(tree, timeout=10)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)


class Kubelet:
    """Binds and runs pods of one namespace on this host, under `root`."""

    def __init__(self, core: Any, kube: Any, namespace: str, root: Path) -> None:
        self.core, self.kube, self.namespace, self.root = core, kube, namespace, root
        self.network = Network()
        self.running: dict[str, RunningPod] = {}
        self.bound: dict[str, tuple[str, dict[str, int]]] = {}  # pod -> (node, devices)
        self._lock = threading.Lock()

    # scheduling ------------------------------------------------------------------------

    def bind(self, pod: dict[str, Any]) -> str:
        """The node the scheduler would pick (first fit), or Unschedulable with the
        message a FailedScheduling event carries."""
        nodes = json.loads(self.core.list_node(_preload_content=False).data)["items"]
        spec = pod["spec"]
        wanted = _requests(spec)
        selector = spec.get("nodeSelector") or {}
        matching = [
            n
            for n in nodes
            if selector.items() <= n["metadata"]["labels"].items() and placeable(spec, n)
        ]
        used = self._used()
        # The default scheduler's LeastAllocated scoring: the emptiest fitting node first.
        matching.sort(key=lambda n: used.get((n["metadata"]["name"], GPU), 0))
        for node in matching:
            name = node["metadata"]["name"]
            free = node["status"].get("allocatable", {})
            if all(int(free.get(k, 0)) - used.get((name, k), 0) >= v for k, v in wanted.items()):
                self._claims_exist(spec)
                with self._lock:
                    self.bound[pod["metadata"]["name"]] = (name, wanted)
                return name
        short = sorted(k for k, v in wanted.items() if v) or ["node selector"]
        raise Unschedulable(
            f"0/{len(nodes)} nodes are available: {len(nodes) - len(matching)} node(s) didn't "
            f"match Pod's node affinity/selector, insufficient {', '.join(short)}."
        )

    def _used(self) -> dict[tuple[str, str], int]:
        """Devices held by bound pods whose container has not ended."""
        used: dict[tuple[str, str], int] = {}
        with self._lock:
            for pod, (node, wanted) in self.bound.items():
                running = self.running.get(pod)
                if running is None or running.exit_code() is None:
                    for key, value in wanted.items():
                        used[node, key] = used.get((node, key), 0) + value
        return used

    def _claims_exist(self, spec: dict[str, Any]) -> None:
        for volume in spec.get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim and self._read("persistent_volume_claim", claim) is None:
                raise Unschedulable(f'persistentvolumeclaim "{claim}" not found')

    # running ---------------------------------------------------------------------------

    def start(self, pod: dict[str, Any], node: str, kill_on: str | None = None) -> RunningPod:
        """Run the pod's (single) container; the pod becomes Running."""
        name = pod["metadata"]["name"]
        pod = {**pod, "spec": {**pod["spec"], "nodeName": node}}  # bound: the downward API's
        spec = pod["spec"]
        container = spec["containers"][0]
        home = self.root / "pods" / name
        shutil.rmtree(home, ignore_errors=True)  # a recreated pod starts afresh
        (home / "work").mkdir(parents=True)
        mounts = self._mounts(spec, container, node, home)
        # The rendezvous host: the v1 operator's MASTER_ADDR, Trainer v2's PET_MASTER_ADDR.
        master = _env_value(container, "MASTER_ADDR") or _env_value(container, "PET_MASTER_ADDR")
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home / "work"),
            "LANG": "C.UTF-8",
            "HOSTNAME": spec.get("hostname") or name,
            # Every node is this host: its cores are shared by all the pods. The
            # trainer's own split (all of a node's cores to its one rank) would run
            # each pod with every core, oversubscribed several times over (steps took
            # 2 s instead of 0.25 s). One thread, as the tests' own processes have
            # (tests/conftest.py); a pod spec that sets it wins (below).
            "OMP_NUM_THREADS": "1",
        }
        for item in container.get("env") or []:
            value = self._env_item(item, pod)
            if value is None:
                continue
            value = self.network.port_env(item["name"], value, master)
            env[item["name"]] = _remap(self.network.rewrite(value, name), mounts)
        log = home / "container.log"
        try:
            argv = [
                _remap(self.network.rewrite(arg, name), mounts) for arg in container_argv(container)
            ]
            executable = shutil.which(argv[0], path=env["PATH"])
            if executable is None:
                raise FileNotFoundError(f'exec: "{argv[0]}": executable file not found in $PATH')
        except (ValueError, FileNotFoundError) as exc:
            log.write_text(f"{exc}\n")
            process = subprocess.Popen(  # noqa: S603 (a fixed argv: a process that exits 128)
                [sys.executable, "-c", f"import sys; sys.exit({START_ERROR})"],
                stdout=subprocess.DEVNULL,
            )
        else:
            process = subprocess.Popen(  # noqa: S603 (the pod's argv, as a kubelet runs it)
                [executable, *argv[1:]],
                cwd=home / "work",
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # no terminal signals from the test run
            )
        running = RunningPod(name, node, process, log, kill_on)
        with self._lock:
            self.running[name] = running
        return running

    def publish(self, running: RunningPod) -> None:
        """The container's output so far, as the API serves the pod's log."""
        self.kube.set_pod_log(self.namespace, running.name, running.output())

    def stop_all(self) -> None:
        with self._lock:
            pods = list(self.running.values())
        for pod in pods:
            pod.stop()

    def forget(self, name: str) -> None:
        """A deleted pod: its container is stopped."""
        with self._lock:
            running = self.running.pop(name, None)
            self.bound.pop(name, None)
        if running:
            running.stop()

    # internals ---------------------------------------------------------------------------

    def _pod(self, name: str) -> dict[str, Any]:
        found = self._read("pod", name)
        assert found is not None, name
        return found

    def _read(self, kind: str, name: str) -> dict[str, Any] | None:
        """The object as the API serves it; None when it answers 404."""
        from kubernetes.client.exceptions import ApiException

        read = getattr(self.core, f"read_namespaced_{kind}")
        try:
            return json.loads(read(name, self.namespace, _preload_content=False).data)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _mounts(
        self, spec: dict[str, Any], container: dict[str, Any], node: str, home: Path
    ) -> list[tuple[str, Path]]:
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        mounts: list[tuple[str, Path]] = []
        for mount in container.get("volumeMounts") or []:
            path, volume = mount["mountPath"].rstrip("/"), volumes[mount["name"]]
            if path == SHM:
                continue
            if "hostPath" in volume:
                host = self.root / "nodes" / node / volume["hostPath"]["path"].lstrip("/")
            elif "persistentVolumeClaim" in volume:
                host = self.root / "claims" / volume["persistentVolumeClaim"]["claimName"]
            else:  # emptyDir and anything else: the pod's own
                host = home / "volumes" / mount["name"]
            host.mkdir(parents=True, exist_ok=True)
            mounts.append((path, host))
        return sorted(mounts, key=lambda m: len(m[0]), reverse=True)

    def _env_item(self, item: dict[str, Any], pod: dict[str, Any]) -> str | None:
        if "value" in item:
            return str(item["value"])
        source = item.get("valueFrom") or {}
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            secret = self._read("secret", ref["name"])
            data = (secret or {}).get("stringData") or {}
            if ref["key"] in data:
                return data[ref["key"]]
            encoded = ((secret or {}).get("data") or {}).get(ref["key"])
            if encoded is not None:
                return base64.b64decode(encoded).decode()
            return None  # optional or missing: a missing required one would block the pod
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            # The downward API's `metadata.labels['k']` / `metadata.annotations['k']`
            # (Trainer v2 reads PET_NODE_RANK from the Job's completion-index annotation).
            keyed = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
            if keyed:
                return str((pod["metadata"].get(keyed[1]) or {}).get(keyed[2], ""))
            return {"metadata.name": pod["metadata"]["name"],
                    "metadata.namespace": self.namespace,
                    "spec.nodeName": pod["spec"].get("nodeName", ""),
                    "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
                    "status.hostIP": "127.0.0.1",
                    "status.podIP": "127.0.0.1"}.get(path, "")  # fmt: skip
        return None


def placeable(spec: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether the scheduler may put a pod of `spec` on `node` at all: not cordoned
    (spec.unschedulable), no NoSchedule/NoExecute taint the pod does not tolerate, and the
    pod's required nodeAffinity (one of its terms: every matchExpressions on the node's
    labels and matchFields on metadata.name) allows it."""
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    tolerations = spec.get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
            _tolerates(t, taint) for t in tolerations
        ):
            return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})  # fmt: skip
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    labels = node["metadata"].get("labels") or {}
    fields = {"metadata.name": node["metadata"]["name"]}
    return any(
        all(_selects(e, labels) for e in term.get("matchExpressions") or [])
        and all(_selects(e, fields) for e in term.get("matchFields") or [])
        for term in terms
    )


def _tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint.get("key")
    return toleration.get("key") == taint.get("key") and toleration.get("value") == taint.get(
        "value"
    )


def _selects(expression: dict[str, Any], values: dict[str, str]) -> bool:
    key, operator = expression["key"], expression["operator"]
    present, allowed = key in values, expression.get("values") or []
    if operator == "In":
        return present and values[key] in allowed
    if operator == "NotIn":
        return not present or values[key] not in allowed
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    raise ValueError(f"operator {operator} is not played here")


def _requests(spec: dict[str, Any]) -> dict[str, int]:
    """The extended resources (GPUs, EFA devices) the pod's containers ask for."""
    wanted: dict[str, int] = {}
    for container in spec.get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        for key in (GPU, EFA):
            if key in limits:
                wanted[key] = wanted.get(key, 0) + int(limits[key])
    return wanted


def _env_value(container: dict[str, Any], name: str) -> str | None:
    for item in container.get("env") or []:
        if item.get("name") == name and "value" in item:
            return str(item["value"])
    return None


def _remap(value: str, mounts: list[tuple[str, Path]]) -> str:
    """A path under a mountPath, where a flag or variable spells it (`/ckpt/x`,
    `--dir=/ckpt/x`), as this host holds it."""
    for path, host in mounts:
        pattern = re.compile(rf"(^|=){re.escape(path)}(?=/|$)")
        value = pattern.sub(lambda m, h=str(host): m.group(1) + h, value)
    return value
