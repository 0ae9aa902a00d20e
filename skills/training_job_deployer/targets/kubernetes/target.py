"""The Kubernetes target: a Kubeflow training job from the same JobSpec, of the kind its
engine names (engine.py): a PyTorchJob (Training Operator v1, kubernetes/pytorchjob.py)
or a TrainJob (Kubeflow Trainer v2, targets/trainjob/). plan -> submit ->
follow/describe -> logs -> cancel, plus list_jobs, delete and snapshot (the job
doctor's input). Deploy picks the engine (`engine`, auto: what the cluster serves,
Trainer v2 first); the other tools find a job whichever kind it is.

plan renders and validates the manifest (a dry run needs no cluster: the one read it
tries, the ServiceAccount of a job that names s3:// paths, warns when out of reach)
and refuses more GPUs per node than the instance type has (NOT_ENOUGH_GPUS); submit
checks the cluster serves the engine's kinds, refuses an existing job of the name (or deletes
it with replace=true), runs the driver/CUDA gate, warns when fewer GPUs are free than
asked (counted as describe counts them), refuses an s3:// job whose ServiceAccount
is missing (its pods could not be created), puts HF_TOKEN into a Secret the manifest
references, then creates exactly the plan's manifest. The monitor reads the job, its
pods, its events (one request per kind) and rank 0's log, parsed by the same reader as
the local target."""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, Literal

import yaml
from pydantic import Field

from skills.catalog.gpu_capacity import idle_gpu_warning, instance_gpus, require_gpus_per_node
from skills.catalog.pricing import Billing
from skills.cloud.clients import env_region
from skills.cloud.registry_credentials import ECR_HOST_PATTERN
from skills.kube import namespaces
from skills.kube import pods as kube_pods
from skills.kube.engines import served_engines
from skills.kube.gpu_nodes import gpus_requested_by_node, node_gpu_facts
from skills.kube.identity import MAKE_IT, reach_warnings, s3_buckets
from skills.kube.objects import kind_path
from skills.kube.pod_metrics import job_pod_usage
from skills.kube.pods import has_master, pod_info, pod_name, why_pod_waits
from skills.shared.confirm import require_confirm
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.log_tail import LastLines, last_lines
from skills.shared.next_step import POLL_WAIT_S, NextStep
from skills.shared.ownership import labelled_ours, require_kube_ours
from skills.shared.paging import Key, Page, keyset_stream
from skills.shared.progress import Progress
from skills.shared.secrets import redact
from skills.shared.waiting import poll_until
from skills.training_job_deployer import cuda_gate, watchdog
from skills.training_job_deployer.job_spec import JobSpec, hub_endpoint, hub_lines
from skills.training_job_deployer.kube_monitor import KubeReader, read_snapshot
from skills.training_job_deployer.memory_estimate import (
    check_fits,
    check_host_fits,
    node_runtime,
)
from skills.training_job_deployer.models import TERMINAL, JobState
from skills.training_job_deployer.targets.base import (
    EVERY_JOB,
    Capability,
    JobPage,
    LogOptions,
    Plan,
    Quarantined,
    Target,
    TargetSettings,
)
from skills.training_job_deployer.targets.kubernetes.engine import (
    Engine,
    commanded_max_steps,
    flag_values,
)
from skills.training_job_deployer.targets.kubernetes.manifest import (
    HF_SECRET,
    hub_home,
    job_buckets,
    service_account,
    shm_gib,
)
from skills.training_job_deployer.targets.kubernetes.pytorchjob import PyTorchJobEngine
from skills.training_job_deployer.targets.kubernetes.settings import (
    KubernetesDeploySettings,
    KubernetesSettings,
)
from skills.training_job_deployer.targets.trainjob.engine import TrainJobEngine
from skills.training_job_deployer.tracking_env import (
    TRACKING_SECRET,
    secret_values,
    tracking_env,
    tracking_secrets,
)
from skills.training_job_deployer.trainer_log import (
    EXIT_PREEMPTED,
    LogFollower,
    RunMetrics,
    tail_with_error,
)

POLL_S = 2.0
DETACH_S = 300.0  # wait_seconds=None (a person at the CLI): detach after 5 minutes
LOG_TAIL_LINES = 40
# Rank 0's log is read from its end (Rank0Log): each poll at most these lines and bytes,
# and a long log's head once.
LOG_POLL_LINES = 2000
LOG_POLL_BYTES = 4 * 2**20
LOG_HEAD_BYTES = 1 * 2**20
# The end of rank 0's log a listing reads: room for the trainer's summary (or its last
# step) after what torchrun and NCCL print when a run ends.
LIST_LOG_LINES = 100
LIST_READS = 8  # a list page's log reads in flight at once
MAX_LOG_CHARS = 64_000  # what one logs call returns at most
# A poll reads the events of this many pods not yet running (one LIST each: why a job
# waits is the same on its first pods as on the rest).
EVENT_PODS = 4
REPLACE_TIMEOUT_S = 60.0
HF_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
ECR_IMAGE = re.compile(rf"^{ECR_HOST_PATTERN}/(?P<repository>[^:@]+)")
# The engines, in the order a job named by the other tools is looked for.
ENGINES: dict[str, Engine] = {e.name: e for e in (PyTorchJobEngine(), TrainJobEngine())}
# engine=auto: the first of these the cluster serves (Trainer v2 is upstream's current one).
AUTO_ORDER = ("trainjob", "pytorchjob")


class KubernetesPlan(Plan):
    """Exactly what submit applies: the job (a PyTorchJob or a TrainJob: `engine`), the
    objects it needs (companions: a TrainJob's runtime), and the Secret it fills."""

    target: Literal["kubernetes"] = "kubernetes"
    engine: str = Field(default="pytorchjob", description="pytorchjob or trainjob.")
    namespace: str
    new_namespace: bool | None = Field(
        default=None, description="Submit creates the namespace (None: cluster not asked)."
    )
    image_uri: str
    image_source: str = Field(description="'image_uri', or the ECR repository it came from.")
    manifest: dict[str, Any] = Field(description="The job (PyTorchJob/TrainJob), as created.")
    companions: list[dict[str, Any]] = Field(
        default_factory=list, description="The suite's objects the job needs, as applied."
    )
    hf_token_secret: str | None = Field(
        default=None, description="Secret created/updated from HF_TOKEN (value never shown)."
    )
    tracking_secrets: list[str] = Field(
        default_factory=list,
        description=f"Variables put into Secret {TRACKING_SECRET} (values never shown).",
    )
    instance_type: str | None = None
    nodes: int = Field(default=1, description="Nodes the job asks for (num_nodes).")
    region: str | None = Field(default=None, description="AWS region, where known.")
    replace: bool = False
    confirm: bool = False
    skip_gate: bool = False
    log_path: str
    memory_estimate: dict[str, Any] | None = Field(
        default=None,
        description="Per-GPU memory estimate (GiB) on instance_type; None when unknown.",
    )
    service_account: str | None = Field(
        default=None, description="The pods' ServiceAccount (None: the namespace's default)."
    )
    identity: str = Field(default="", description="Who the pods are to AWS, in words.")
    hub: list[str] = Field(
        default_factory=list, description="Hub ids the job downloads or streams, and where."
    )
    warnings: list[str] = Field(default_factory=list)

    def billing(self) -> Billing:
        return Billing(self.instance_type, self.nodes, self.region)

    def to_display(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [
            ("image", f"{self.image_uri} ({self.image_source})"),
            ("namespace", self.namespace + _NEW_NAMESPACE.get(self.new_namespace, "")),
        ]
        if self.hf_token_secret:
            rows.append(("secret", f"{self.hf_token_secret} <- HF_TOKEN"))
        if self.tracking_secrets:
            rows.append(("secret", f"{TRACKING_SECRET} <- {', '.join(self.tracking_secrets)}"))
        rows += [("hub", line) for line in self.hub]
        if self.identity:
            rows.append(("identity", self.identity))
        if self.memory_estimate:
            m = self.memory_estimate
            rows.append(("memory/GPU", f"~{m['total_gib']} GiB of {m['usable_gib']} usable"))
        rows += [("warning", w) for w in self.warnings]
        rows.append(("manifest", "\n" + yaml.safe_dump(self.manifest, sort_keys=False)))
        rows += [("needs", "\n" + yaml.safe_dump(c, sort_keys=False)) for c in self.companions]
        return rows


_NEW_NAMESPACE = {
    True: " (created, labelled fsdp-eks: the cluster lacks it)",
    None: " (created if the cluster lacks it: not checked)",
}


def image_repository(settings: Any) -> tuple[str | None, str | None]:
    """(ECR repository, its region) for image auto-detection: `repository`, else
    ECR_REPOSITORY, else the one push_to_ecr/setup_codebuild last used (in its region)."""
    from skills.operations import remembered

    region = settings.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    repository = getattr(settings, "repository", None) or os.environ.get("ECR_REPOSITORY")
    if repository:
        return repository, region
    last = remembered.recall()
    return (last.repository, last.region) if last else (None, region)


def resolve_image(settings: KubernetesDeploySettings) -> tuple[str, str]:
    """(image_uri, where it came from): as given, or the newest in the ECR repository."""
    if settings.image_uri:
        return settings.image_uri, "image_uri"
    repository, region = image_repository(settings)
    if not repository:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            "No image: image_uri is not set and no ECR repository is named.",
            "Pass image_uri, or repository (or set ECR_REPOSITORY) to use its newest image, "
            "or push one first (push_to_ecr): deploys default to its repository.",
        )
    if not region:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"No AWS region to find the newest image of {repository!r} in.",
            "Pass region (or set AWS_REGION), or pass image_uri.",
        )
    from skills.cloud.ecr_repository import latest_image

    image = latest_image(repository, region)
    if image is None:
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"The ECR repository {repository!r} has no image yet.",
            "Push one first (build_image, then push_to_ecr), or pass image_uri.",
            {"repository": repository},
        )
    return image, f"ecr:{repository}"


def _identity_text(namespace: str, account: str | None, buckets: list[str]) -> str:
    if account is None:
        return f"ServiceAccount {namespace}/default: no AWS role of its own (the node's)"
    named = ", ".join(f"s3://{b}" for b in buckets)
    return (
        f"ServiceAccount {namespace}/{account}: the EKS Pod Identity role manage_eks_cluster "
        f"action=storage binds to its bucket (the job names {named})"
    )


def _manifest_s3_paths(engine: Engine, manifest: dict[str, Any]) -> list[str]:
    """The values of the trainer's path flags in the job's container commands."""
    flags = {"--model_name_or_path", "--dataset", "--tokenizer", "--checkpoint_dir"}
    return flag_values(engine.commands(manifest), flags)


class KubernetesTarget(Target[KubernetesPlan]):
    name: ClassVar[str] = "kubernetes"
    settings_model: ClassVar[type[TargetSettings]] = KubernetesSettings
    deploy_settings_model: ClassVar[type[TargetSettings]] = KubernetesDeploySettings
    plan_model: ClassVar[type[Plan]] = KubernetesPlan
    capabilities: ClassVar[frozenset[Capability]] = frozenset(Capability)
    poll_s: ClassVar[float] = POLL_S

    def __init__(self, settings: KubernetesSettings | None = None) -> None:
        self.settings = settings or KubernetesSettings()
        self.namespace = self.settings.namespace
        self._reader: KubeReader | None = None
        self._warnings: list[str] = []
        self.engine: Engine = ENGINES["pytorchjob"]  # until a plan or a job says which

    @property
    def reader(self) -> KubeReader:
        if self._reader is None:
            self._reader = KubeReader(self.settings.api_client(), self.namespace)
            self._reader.kind = self.engine.job_kind
        return self._reader

    def _bind(self, engine: Engine) -> Engine:
        """Read and write jobs of `engine`'s kind from now on."""
        self.engine = engine
        if self._reader is not None:
            self._reader.kind = engine.job_kind
        return engine

    # engines ----------------------------------------------------------------------------

    def _serves(self, engine: Engine) -> bool:
        return engine.name in served_engines(self.reader)

    def served_engines(self) -> list[Engine]:
        """The engines the cluster serves (their CRDs: skills.kube.engines, asked once
        per tool call), in ENGINES' order."""
        served = served_engines(self.reader)
        return [engine for engine in ENGINES.values() if engine.name in served]

    def _deploy_engine(self, settings: KubernetesDeploySettings) -> Engine:
        """The engine a deploy uses: the one `engine` names, else (auto) Trainer v2 when
        the cluster serves it, else the Training Operator v1; neither is refused with
        the call that installs one. A cluster out of reach (a dry run) plans a
        PyTorchJob and says so."""
        if settings.engine != "auto":
            return ENGINES[settings.engine]
        try:
            served = self.served_engines()
        except ToolFailure:
            self._warnings.append(
                "cluster not asked: engine=auto planned a PyTorchJob (a cluster serving "
                "Kubeflow Trainer v2 gets a TrainJob; pass engine to choose)"
            )
            return ENGINES["pytorchjob"]
        for name in AUTO_ORDER:
            if any(e.name == name for e in served):
                return ENGINES[name]
        raise ToolFailure(
            ErrorCode.TRAINING_OPERATOR_MISSING,
            "The cluster serves no training job kind: neither Kubeflow Trainer v2 "
            "(TrainJob, trainer.kubeflow.org/v1alpha1, with JobSet) nor the Training "
            "Operator v1 (PyTorchJob, kubeflow.org/v1).",
            "Run manage_eks_cluster action=auto_fix (it installs Kubeflow Trainer v2 and "
            "JobSet), then deploy again.",
            {"engines": list(ENGINES)},
        )

    # plan -------------------------------------------------------------------------------

    def _deploy_settings(self) -> KubernetesDeploySettings:
        settings = self.settings
        if not isinstance(settings, KubernetesDeploySettings):
            settings = KubernetesDeploySettings(**settings.model_dump())
        return settings

    def fitted(self, spec: JobSpec) -> JobSpec:
        """gpu_per_node left unset on a known instance type: all its GPUs (one pod per
        node holds the whole node, EFA devices included, so fewer would idle the rest)."""
        gpus = instance_gpus(self._deploy_settings().instance_type)
        if gpus is None or "gpu_per_node" in spec.model_fields_set:
            return spec
        return spec.model_copy(update={"gpu_per_node": gpus})

    def plan(self, spec: JobSpec) -> KubernetesPlan:
        settings = self._deploy_settings()
        spec = self.fitted(spec)
        if settings.instance_type:  # a shape no node can run: refused first, dry run included
            require_gpus_per_node(settings.instance_type, spec.gpu_per_node)
        image, source = resolve_image(settings)
        endpoint = hub_endpoint(os.environ)
        tracking = tracking_env(os.environ, image)  # MLflow, W&B: the user's own only
        secrets = tracking_secrets(os.environ)  # their credentials: Secret references
        engine = self._bind(self._deploy_engine(settings))
        manifest = engine.render(spec, settings, image, HF_SECRET, endpoint, tracking,
                                 dict.fromkeys(secrets, TRACKING_SECRET))  # fmt: skip
        warnings, self._warnings = self._warnings, []
        account = service_account(spec)
        identity = _identity_text(settings.namespace, account, job_buckets(spec))
        if account:  # best effort, as the dry run's cost is: a cluster out of reach warns
            found, checked = self._service_account_or_none(account)
            warnings += reach_warnings(job_buckets(spec), settings.namespace, found, checked)
        if spec.num_nodes > 1 and not (spec.checkpoint_dir or "").startswith("s3://"):
            if not settings.checkpoint_volume.startswith("pvc:"):
                warnings.append(
                    "checkpoints on a hostPath are per node: resuming a multi-node job needs "
                    "checkpoint_volume=pvc:<claim> (FSx) or an s3:// checkpoint_dir"
                )
        idle = idle_gpu_warning(settings.instance_type, spec.gpu_per_node, spec.num_nodes)
        if idle:
            warnings.append(idle)
        memory = None
        if settings.instance_type is None:
            warnings.append("no instance_type: no node selector and no EFA devices requested")
        else:  # refuses a plan that cannot fit (GPU_MEMORY_EXCEEDED), dry run included
            memory = check_fits(spec, settings.instance_type)
            # ... or whose nodes cannot hold its /dev/shm and offloaded states (HOST_...).
            shm = shm_gib(spec, settings.shm_size_gib)
            host = check_host_fits(spec, settings.instance_type, shm)
            memory = {**memory, "host": host} if memory and host else memory
        has_token = any(os.environ.get(name) for name in HF_ENV)
        home = hub_home(spec, settings)
        hub = hub_lines(
            spec,
            f"{home} (HF_HOME, on the checkpoint volume)" if home else "the pod's ~/.cache",
            (f"HF_TOKEN from Secret {HF_SECRET}" if has_token else "no HF_TOKEN")
            + (f", hub {endpoint} (HF_ENDPOINT)" if endpoint else ""),
        )
        if hub and not has_token:
            warnings.append(
                "no HF_TOKEN in this environment: a gated or private hub repo will be "
                "refused in the job (export HF_TOKEN and plan again)"
            )
        runtime = node_runtime(spec, True, shm_gib(spec, settings.shm_size_gib))
        return KubernetesPlan(
            engine=engine.name,
            namespace=settings.namespace,
            new_namespace=self._namespace_missing(),
            image_uri=image,
            image_source=source,
            manifest=manifest,
            companions=engine.companions(manifest),
            hf_token_secret=HF_SECRET if has_token else None,
            tracking_secrets=secrets,
            instance_type=settings.instance_type,
            nodes=spec.num_nodes,
            region=settings.region or env_region(),
            replace=settings.replace,
            confirm=settings.confirm,
            skip_gate=settings.skip_gate,
            log_path=self._pod_path(engine.rank0_pod(manifest)),
            memory_estimate=memory,
            async_save=runtime.async_save,
            process_group=runtime.process_group,
            service_account=account,
            identity=identity,
            hub=hub,
            warnings=warnings,
        )

    def _service_account_or_none(self, name: str) -> tuple[dict[str, Any] | None, bool]:
        """(the ServiceAccount or None, whether the cluster answered)."""
        path = kind_path("ServiceAccount", self.namespace, name)
        try:
            return self.reader.get_or_none(path), True
        except ToolFailure:
            return None, False

    def _namespace_missing(self) -> bool | None:
        """Whether submit will create the namespace (None: the cluster could not be asked)."""
        if self.namespace in namespaces.ALWAYS_THERE:
            return False
        try:
            return namespaces.missing(self.reader, self.namespace)
        except ToolFailure:
            return None

    def _require_service_account(self, plan: KubernetesPlan) -> None:
        """A pod naming a ServiceAccount that does not exist is never created (the API's
        admission refuses it, and the job waits without pods): refused here instead."""
        if not plan.service_account:
            return
        path = kind_path("ServiceAccount", self.namespace, plan.service_account)
        found = self.reader.get_or_none(path)
        if found is None:
            raise ToolFailure(
                ErrorCode.NOT_FOUND,
                f"The job names s3:// paths; its pods run as ServiceAccount "
                f"{self.namespace}/{plan.service_account}, which does not exist.",
                f"{MAKE_IT}; then deploy again.",
                {"namespace": self.namespace, "service_account": plan.service_account},
            )
        buckets = s3_buckets(_manifest_s3_paths(self.engine, plan.manifest))
        self._warnings += reach_warnings(buckets, self.namespace, found, True)

    def _pod_path(self, pod: str) -> str:
        return f"pod/{pod} -n {self.namespace}"

    # submit -----------------------------------------------------------------------------

    def submit(
        self, job_name: str, plan: KubernetesPlan, *, replace_corrupt_record: bool = False
    ) -> None:
        engine = self._bind(ENGINES[plan.engine])
        reader = self.reader
        if not self._serves(engine):
            raise engine.missing()
        existing = reader.job(job_name)
        kind = engine.kind
        if existing is not None:
            if not plan.replace:
                raise ToolFailure(
                    ErrorCode.JOB_EXISTS,
                    f"A {kind} named {job_name!r} already exists in namespace {self.namespace!r}.",
                    "Follow it with get_training_job, deploy with replace=true to start it "
                    "over (checkpoints stay), or delete_training_job it first.",
                    {"namespace": self.namespace},
                )
            require_kube_ours(  # replace deletes it: only a job this suite submitted
                existing, kind, f"{self.namespace}/{job_name}",
                "Deploy under another job_name; that job is not one this suite submitted.",
                namespace=self.namespace,
            )  # fmt: skip
            if kube_pods.job_status(existing) == "running":  # an ended job is only a record
                require_confirm(
                    plan.confirm,
                    f"{kind} {job_name!r} in namespace {self.namespace!r} is running; "
                    "replace=true would delete it (its pods stop) and start it over.",
                    "to delete the running job and start it over",
                    {"namespace": self.namespace, "job_name": job_name, "delete": True},
                )
        # Every check that can refuse runs before a replace deletes the running job: a
        # refused image must not leave the old job gone and nothing running.
        self._require_service_account(plan)
        if plan.hf_token_secret:  # someone else's Secret of that name: refused, not replaced
            reader.require_secret_ours(plan.hf_token_secret)
        if plan.tracking_secrets:
            reader.require_secret_ours(TRACKING_SECRET)
        nodes = [node_gpu_facts(n) for n in reader.nodes()]
        if not plan.skip_gate:
            gate = cuda_gate.gate(plan.image_uri, nodes, plan.instance_type)
            self._warnings += gate.warnings
        if existing is not None:
            self._delete_and_wait(job_name)
        self._warnings += self._quota_warnings(plan, nodes)  # after: the old job's GPUs free
        namespaces.ensure(reader, self.namespace)  # the first write: everything lives in it
        if plan.hf_token_secret:
            token = next(os.environ[n] for n in HF_ENV if os.environ.get(n))
            reader.put_secret(plan.hf_token_secret, {"token": token})
        if values := secret_values(os.environ, plan.tracking_secrets):
            reader.put_secret(TRACKING_SECRET, values)
        for companion in plan.companions:  # created, or updated when ours and different
            reader.ensure_owned(companion)
        reader.create_job(plan.manifest)

    def _delete_and_wait(self, job_name: str) -> None:
        self.reader.delete_job(job_name)
        gone = poll_until(lambda: self.reader.job(job_name) is None, bool, REPLACE_TIMEOUT_S, 1.0)
        if not gone:
            raise ToolFailure(
                ErrorCode.CONFLICT,
                f"The old {self.engine.kind} {job_name!r} is still being deleted.",
                "Wait a little and deploy again.",
            )

    def _quota_warnings(self, plan: KubernetesPlan, nodes: list[Any]) -> list[str]:
        """The job's pods vs free GPUs on Ready nodes of the instance type (allocatable
        less what placed pods request), node by node, since a pod's GPUs are on one node:
        a warning only (the autoscaler may add nodes)."""
        pods = self.engine.pod_gpus(plan.manifest)
        free_by_node = self._free_gpus(nodes, plan.instance_type)
        asked, free = sum(pods), sum(max(f, 0) for f in free_by_node.values())
        each = max(pods, default=0)
        fit = sum(max(f, 0) // each for f in free_by_node.values()) if each else len(pods)
        where = plan.instance_type or "GPU"
        if asked > free:
            return [
                f"{asked} GPUs asked, {free} free on Ready {where} nodes: pods stay "
                "Pending until the autoscaler adds nodes or GPUs free up"
            ]
        if fit < len(pods):
            return [
                f"{len(pods)} pod(s) of {each} GPUs asked; {free} GPUs are free on Ready "
                f"{where} nodes, but only {fit} such pod(s) fit on one node each: the rest "
                "stay Pending until the autoscaler adds nodes or GPUs free up"
            ]
        return []

    def _free_gpus(self, nodes: list[Any], instance_type: str | None) -> dict[str, int]:
        """Free GPUs per Ready node (of the instance type, when given): allocatable less
        what the pods bound there and not ended request, counted as describe counts
        (gpus_requested_by_node: limits as requests where only limits are set)."""
        matching = {
            n.name: n.gpus_allocatable
            for n in nodes
            if n.ready and (instance_type is None or n.instance_type == instance_type)
        }
        if not matching:
            return {}
        used = gpus_requested_by_node(self.reader.all_pods())
        return {node: gpus - used.get(node, 0) for node, gpus in matching.items()}

    def retry_facts(self) -> dict[str, Any]:
        """What auto-retry's remedies need beyond the snapshot (remedies.Facts): free GPUs
        per Ready node of the instance type, and the newest image in the ECR repository
        (`repository`/ECR_REPOSITORY, or the one image_uri names). Unknown ones are left
        out."""
        settings = self.settings
        instance_type = getattr(settings, "instance_type", None)
        nodes = [node_gpu_facts(n) for n in self.reader.nodes()]
        facts: dict[str, Any] = {
            "free_gpus": tuple(max(0, f) for f in self._free_gpus(nodes, instance_type).values())
        }
        image = getattr(settings, "image_uri", None)
        ecr = ECR_IMAGE.match(image or "")
        repository, region = image_repository(settings)
        if ecr:
            repository, region = ecr.group("repository"), ecr.group("region")
        if repository and region:
            from skills.cloud.ecr_repository import latest_image

            try:
                newest = latest_image(repository, region)
            except ToolFailure:
                newest = None
            if newest:
                facts["newest_image"] = newest
        return facts

    # describe / follow ------------------------------------------------------------------

    def follow(
        self, job_name: str, progress: Progress | None = None, wait_seconds: float | None = None
    ) -> JobState:
        """Poll the job (job, pods, its events, rank-0 log: four requests a poll, and one
        more per pod still waiting, up to EVENT_PODS) until it ends or `wait_seconds`
        pass; None (a person at the CLI) detaches after DETACH_S. Where the job object
        holds the trainer's progress (a TrainJob's trainerStatus), a running job's polls
        read it instead of the log, and the log is read once when the job has ended. A
        running job's pods' CPU and memory are read once a call, at the end (the metrics
        API: skills.kube.pod_metrics, a discovery read and one LIST where served)."""
        detach = wait_seconds is None
        limit = DETACH_S if wait_seconds is None else wait_seconds
        rank0_log = Rank0Log()

        def look() -> JobState:
            job, pods, events = self.poll(job_name)
            status = kube_pods.job_status(job)
            final = status != "running"
            rank0 = pods[0] if pods else None
            on_object = self.engine.progress(job)
            if on_object is not None and not final:  # the object says how far: no log read
                state = self._state(job_name, job, pods, events, on_object, "")
                if progress is not None and on_object.steps != rank0_log.reported:
                    rank0_log.reported = on_object.steps
                    progress.report(
                        on_object.steps, on_object.max_steps, on_object.progress_message()
                    )
                return state
            if rank0 is not None and (rank0.get("status") or {}).get("phase") != "Pending":
                name = pod_name(rank0)
                rank0_log.read(
                    lambda: redact(self.reader.log(name, limit_bytes=LOG_HEAD_BYTES)),
                    lambda: redact(self.reader.log_end(name, LOG_POLL_LINES, LOG_POLL_BYTES)[0]),
                    kube_pods.restarts([rank0]), progress, final,
                )  # fmt: skip
            # An ended job's log is read once, for the run's account (its error, resume and
            # checkpoint); what the trainer posted on the object wins for how far it got.
            metrics = posted_over(rank0_log.follower.metrics, on_object)
            state = self._state(job_name, job, pods, events, metrics, rank0_log.tail())
            state.findings = watchdog.findings(metrics, state.status == "running", time.time())
            return state

        state = poll_until(look, lambda state: state.status in TERMINAL, limit, self.poll_s)
        if detach and state.status not in TERMINAL:
            state.next_step = NextStep(
                tool="get_training_job",
                arguments={"job_name": job_name, **self.call_args(), "wait_seconds": POLL_WAIT_S},
                why=f"detached after {DETACH_S / 60:.0f} min (the job goes on); check on it",
            )
        if state.status == "running" and "Running" in (state.pods or {}).values():
            selector = self.reader.pod_selector(job_name)  # once a call, not per poll
            state.pod_usage = job_pod_usage(self.reader, self.namespace, selector)
        state.warnings = [*self._warnings, *state.warnings]
        return state

    def poll(
        self, job_name: str
    ) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
        """One poll: the job, its pods, the events of the job and of its first pods not
        yet running (what says why it waits; rank 0's log is Rank0Log's)."""
        job = self._require(job_name)
        pods = self.reader.pods(job_name)
        waiting = [pod_name(p) for p in pods if _not_started(p)][:EVENT_PODS]
        events = [
            e for e in self.reader.events(job_name, waiting) if not kube_pods.older_than(e, job)
        ]
        return job, pods, events

    def place(self, job_name: str) -> str:
        return f"{self.namespace}/{job_name}"

    def _resolve(self, job_name: str) -> dict[str, Any] | None:
        """The job of that name, whichever engine's kind it is (the reader is bound to
        its engine from then on; the first engine tried is the one bound already, so a
        follow's polls ask once); None when no kind has it."""
        order = [self.engine, *(e for e in ENGINES.values() if e is not self.engine)]
        for engine in order:
            self._bind(engine)
            job = self.reader.job(job_name)
            if job is not None:
                return job
        self._bind(order[0])
        return None

    def _require(self, job_name: str) -> dict[str, Any]:
        job = self._resolve(job_name)
        if job is None:
            kinds = " or ".join(e.kind for e in ENGINES.values())
            raise ToolFailure(
                ErrorCode.JOB_NOT_FOUND,
                f"No {kinds} named {job_name!r} in namespace {self.namespace!r}.",
                "Check job_name and namespace (list_training_jobs lists them), or start it "
                "with deploy_training_job.",
            )
        return job

    def _state(
        self,
        job_name: str,
        job: dict[str, Any],
        pods: list[dict[str, Any]],
        events: list[dict[str, Any]],
        metrics: RunMetrics,
        log: str,
    ) -> JobState:
        status = kube_pods.job_status(job)
        rank0 = pods[0] if pods else None
        code = kube_pods.exit_code(rank0) if rank0 else None
        condition = kube_pods.current_condition(job)
        message = None
        if status == "failed" and (metrics.preempted is not None or code == EXIT_PREEMPTED):
            status = "preempted"
        if status in ("failed", "preempted"):
            # The trainer's account first; the operator's condition when it gave none.
            message = metrics.outcome(code)
            if message is None:
                said = condition.message if condition and condition.message else "no reason given"
                message = f"failed: {said}"
        elif status == "cancelled":
            message = "cancelled (suspended: pods removed, checkpoints kept)"
        elif status == "running":
            message = self._waiting_reason(pods, events, self.engine.controller)
        max_steps = metrics.max_steps or commanded_max_steps(self.engine, job)
        state = JobState(
            job_name=job_name,
            target=self.name,
            engine=self.engine.name,
            status=status,  # type: ignore[arg-type]
            **{**metrics.state_fields(), "max_steps": max_steps},
            eta_s=self.engine.eta_s(job) if status == "running" else None,
            log_path=self._pod_path(pod_name(rank0)) if rank0 else None,
            exit_code=code,
            message=None if message is None else redact(message),
            restarts=kube_pods.restarts(pods),
            pods={pod_name(p): (p.get("status") or {}).get("phase", "Unknown") for p in pods},
            conditions=[
                str(c.get("type"))
                for c in (job.get("status") or {}).get("conditions") or []
                if c.get("status") == "True"
            ],
        )
        if status in ("failed", "preempted"):
            state.log_tail = tail_with_error(log, state.error)
        return self.with_next_step(state)

    def with_next_step(self, state: JobState) -> JobState:
        """The state with its next step: follow a running job, diagnose a failed one
        (and a hint to resume one that saved a checkpoint)."""
        state.suggest_next_step(self.call_args())
        if state.status == "failed":
            state.next_step = NextStep(
                tool="diagnose_training_job",
                arguments={"job_name": state.job_name, **self.call_args()},
                why="name the cause and its fix",
            )
        return state

    @staticmethod
    def _waiting_reason(
        pods: list[dict[str, Any]],
        events: list[dict[str, Any]],
        controller: str = PyTorchJobEngine.controller,
    ) -> str | None:
        """Why a running job is not training yet: what a pod waits for (skills.kube.pods),
        or the newest Warning event (FailedScheduling, ...)."""
        for pod in pods:
            if reason := why_pod_waits(pod):
                return reason
        warnings = [e for e in events if e.get("type") == "Warning"]
        if warnings:
            last = warnings[-1]
            return f"{last.get('reason')}: {last.get('message', '')}".strip()
        if not pods:
            return f"waiting for {controller} to create the pods"
        return None

    # logs -------------------------------------------------------------------------------

    def log_path(self, job_name: str) -> str:
        self._require(job_name)
        pods = self.reader.pods(job_name)
        if pods:
            return self._pod_path(pod_name(pods[0]))
        return f"{self.engine.kind.lower()}/{job_name} -n {self.namespace} (no pods yet)"

    def read_logs(self, job_name: str, tail_lines: int | None, options: LogOptions) -> str:
        """Rank 0's log, or one replica's ('worker-1'), or the last lines of every pod;
        at most MAX_LOG_CHARS, with a note of what was cut; secrets masked."""
        self._require(job_name)
        pods = self.reader.pods(job_name)
        if not pods:
            return ""
        replica = options.replica
        read = {"previous": options.previous, "since_seconds": options.since_seconds}
        if options.all_ranks:
            each = max(5, (tail_lines or 100) // len(pods))
            parts = []
            for pod in pods:
                text, _ = self.reader.log_end(pod_name(pod), each, MAX_LOG_CHARS, **read)
                parts.append(f"==> {pod_name(pod)} <==\n{text.rstrip()}")
            return _bounded(redact("\n".join(parts)))
        chosen = _replica(job_name, pods, replica)
        text, fewer = self.reader.log_end(
            pod_name(chosen), tail_lines or LOG_POLL_LINES, MAX_LOG_CHARS * 2, **read
        )
        if fewer and len(text) <= MAX_LOG_CHARS:  # else _bounded says what it cut
            text = (
                f"[... earlier lines cut: at most {MAX_LOG_CHARS} characters per call ...]\n{text}"
            )
        return _bounded(redact(text.rstrip("\n")))

    def read_log_tail(
        self,
        job_name: str,
        tail_lines: int,
        max_bytes: int,
        before: int | None,
        options: LogOptions,
    ) -> LastLines:
        """One pod's end as the API serves it (tailLines, limitBytes: log_end), cut to
        the budget from its end; no note line in it: the result says what was left out.
        Every rank's lines and a byte cursor go the default way (no cursor here)."""
        if before is not None or options.all_ranks:
            return super().read_log_tail(job_name, tail_lines, max_bytes, before, options)
        self._require(job_name)
        pods = self.reader.pods(job_name)
        if not pods:
            return LastLines([], None, False, False, 0)
        chosen = _replica(job_name, pods, options.replica)
        read = {"previous": options.previous, "since_seconds": options.since_seconds}
        text, fewer = self.reader.log_end(pod_name(chosen), tail_lines, max_bytes * 2, **read)
        data = redact(text).encode()
        found = last_lines(lambda at, n: data[at : at + n], len(data), tail_lines, max_bytes)
        found.earlier = found.earlier or fewer
        found.start = None  # the API has no byte offsets into a pod's log
        return found

    # cancel / delete / list -------------------------------------------------------------

    def cancel(self, job_name: str, grace_s: float = 30.0) -> JobState:
        """Suspend the job (its engine's stop_patch: a PyTorchJob's runPolicy.suspend, a
        TrainJob's spec.suspend, as each upstream documents stopping): the controller
        deletes its pods (SIGTERM, the trainer checkpoints), the job and its checkpoints
        stay. A job that ended is left as it is."""
        self._require_ours(job_name, "stop")
        state = self.describe(job_name)
        if state.status in TERMINAL:
            return state
        self.reader.patch_job(job_name, self.engine.stop_patch())
        return self.describe(job_name)

    def delete(self, job_name: str) -> JobState:
        """Delete the job and its pods (checkpoints on volumes stay); returns its last
        state."""
        self._require_ours(job_name, "delete")
        state = self.describe(job_name)
        self.reader.delete_job(job_name)
        state.message = f"deleted (was {state.status})"
        state.next_step = state.hint = None
        return state

    def _require_ours(self, job_name: str, what: str) -> None:
        """Refuse (not_ours) a job of either kind this suite did not submit: only its own
        are stopped or deleted, as replace deletes only its own."""
        require_kube_ours(
            self._require(job_name), self.engine.kind, self.place(job_name),
            f"The suite does not {what} a job it did not submit; its owner can (kubectl).",
            namespace=self.namespace,
        )  # fmt: skip

    def list_jobs(self, page: JobPage = EVERY_JOB) -> Page[JobState]:
        """The page of the suite's jobs in the namespace, newest first, of every engine
        (each says its engine; a kind the cluster does not serve is one LIST that finds
        nothing): status from the job (so a status
        filter reads no log); steps from the job object where its engine keeps progress
        there (a TrainJob's trainerStatus), else from the end of rank 0's log (the
        trainer's summary or its last step); max_steps from the trainer's start line
        there, else the job's command. Only the suite's jobs are sent (its label as the
        labelSelector). The API server has no order by creation time, so each job's key
        is read: their metadata alone in LIST chunks (whole jobs, JOB_CHUNK at a time,
        under a status filter), only the page kept; then the page's jobs and their pods
        are one LIST each by name, per kind; then one bounded log read per job of the
        page whose progress is not on its object and whose rank 0 started (concurrent).
        What a page holds and is sent of whole objects does not grow with the
        namespace."""
        filtered = page.status is not None
        engines = list(ENGINES.values())  # a kind the cluster does not serve lists nothing
        jobs = (
            (engine, job)
            for engine in engines
            for job in self.reader.suite_jobs(metadata_only=not filtered, kind=engine.job_kind)
        )
        if filtered:
            jobs = ((e, j) for e, j in jobs if kube_pods.job_status(j) == page.status)
        shown, more, last = keyset_stream(
            jobs, lambda pair: _creation_key(pair[1]), page.limit, page.cursor, self._job_key
        )
        rows: list[tuple[Engine, dict[str, Any], list[dict[str, Any]]]] = []
        for engine in engines:
            mine = [job for e, job in shown if e is engine]
            names = [(job.get("metadata") or {}).get("name", "") for job in mine]
            if not mine:
                continue
            if not filtered:  # a job deleted since its key was read is left out
                whole = self.reader.suite_jobs_named(names, engine.job_kind)
                mine = [whole[name] for name in names if name in whole]
            pods = self.reader.pods_of([_name(job) for job in mine], engine.job_kind)
            rows += [(engine, job, pods.get(_name(job), [])) for job in mine]
        rows.sort(key=lambda row: _creation_key(row[1]))

        def metrics(row: tuple[Engine, dict[str, Any], list[dict[str, Any]]]) -> RunMetrics:
            engine, job, pods = row
            found = engine.progress(job)
            return found if found is not None else self._log_end_metrics(engine, pods)

        # One bounded read per job of the page, LIST_READS at a time (each mostly waits).
        with ThreadPoolExecutor(max_workers=LIST_READS) as pool:
            read = list(pool.map(metrics, rows))
        states = []
        for (engine, job, _), found in zip(rows, read, strict=True):
            condition = kube_pods.current_condition(job)
            status = kube_pods.job_status(job)
            states.append(
                JobState(
                    job_name=_name(job),
                    target=self.name,
                    engine=engine.name,
                    status=status,  # type: ignore[arg-type]
                    steps=found.steps,
                    max_steps=found.max_steps or commanded_max_steps(engine, job),
                    last_loss=found.last_loss if engine.progress(job) else None,
                    eta_s=engine.eta_s(job) if status == "running" else None,
                    message=None if condition is None else redact(condition.message or ""),
                )
            )
        return Page(states, more, last)

    def _job_key(self, name: str) -> Key | None:
        """Where the suite's job `name` is in a list (None: no such job of the suite)."""
        job = self._resolve(name)
        return _creation_key(job) if job is not None and labelled_ours(job) else None

    def _log_end_metrics(self, engine: Engine, pods: list[dict[str, Any]]) -> RunMetrics:
        """What the last LIST_LOG_LINES lines of rank 0's log say (nothing before it runs)."""
        follower = LogFollower()
        rank0 = pods[0] if pods else None
        if rank0 is not None and (rank0.get("status") or {}).get("phase") != "Pending":
            log = self.reader.log(
                pod_name(rank0), tail_lines=LIST_LOG_LINES, container=engine.job_kind.container
            )
            follower.feed(log.encode(), final=True)
        return follower.metrics

    # a failed node out of service --------------------------------------------------------

    def quarantine(
        self, nodes: list[str], reason: str, job_name: str, num_nodes: int
    ) -> Quarantined:
        """Cordon and taint each node (skills.kube.quarantine: recorded on the node,
        released by manage_eks_cluster action=release_node), keep the next submission off
        them (nodeAffinity), and count the schedulable nodes of the instance type left: too
        few for `num_nodes` says so, with the node group's scale call where it is known."""
        from skills.kube import quarantine as kq

        records = [kq.quarantine(self.reader, n, reason, job_name) for n in nodes]
        instance_type = getattr(self.settings, "instance_type", None)
        left = sum(kq.schedulable(n, instance_type) for n in self.reader.nodes())
        if left >= num_nodes:
            return Quarantined(tuple(nodes))
        need = num_nodes - left
        where = instance_type or "GPU"
        short = (
            f"{left} schedulable {where} node(s) left for a job of {num_nodes} after "
            f"quarantining {', '.join(nodes)}: add {need} node(s), or replace the failed "
            "one (its node group's autoscaling group replaces a terminated instance), then "
            "deploy again"
        )
        group = next((r.nodegroup for r in records if r.nodegroup), None)
        cluster = getattr(self.settings, "cluster_name", None)
        if not (group and cluster):
            return Quarantined(tuple(nodes), short)
        sizes = self._nodegroup_sizes(cluster, group)
        arguments: dict[str, Any] = {"action": "scale", "cluster_name": cluster,
                                     "nodegroup": group}  # fmt: skip
        if sizes is not None:
            low, high, desired = sizes
            arguments["desired_size"] = desired + need
            if desired + need > high:
                arguments["max_size"] = desired + need
        if self.settings.region:
            arguments["region"] = self.settings.region
        step = {"tool": "manage_eks_cluster", "arguments": arguments,
                "why": f"add {need} {where} node(s) to {group} (paid: ask first)"}  # fmt: skip
        return Quarantined(tuple(nodes), short, step)

    def avoiding(self, plan: KubernetesPlan, nodes: tuple[str, ...]) -> KubernetesPlan:
        """The plan with a nodeAffinity that keeps every pod off `nodes` (the taint does
        it on a real cluster too; this makes the plan say so), as its engine places pods."""
        manifest = ENGINES[plan.engine].avoiding(plan.manifest, nodes)
        return plan.model_copy(update={"manifest": manifest})

    def _nodegroup_sizes(self, cluster: str, group: str) -> tuple[int, int, int] | None:
        """(min, max, desired) of the EKS node group; None when EKS cannot be asked."""
        from skills.cloud.clients import aws_session

        try:
            eks = aws_session(None, self.settings.region).client("eks")
            scaling = eks.describe_nodegroup(clusterName=cluster, nodegroupName=group)[
                "nodegroup"]["scalingConfig"]  # fmt: skip
            return scaling["minSize"], scaling["maxSize"], scaling["desiredSize"]
        except Exception:  # noqa: BLE001 (best effort: the call is shown without sizes)
            return None

    # the job doctor's input -------------------------------------------------------------

    def snapshot(self, job_name: str) -> dict[str, Any]:
        """{"job", "pods", "events", "logs": {"<pod>": text, "<pod>/previous": text}}: the
        objects as the API returns them (camelCase), logs' secrets masked; the same reads
        as diagnose_training_job (kube_monitor.read_snapshot)."""
        self._resolve(job_name)
        return read_snapshot(self.reader, job_name)


class Rank0Log:
    """Rank 0's log followed from its end, over the polls: each poll reads at most the
    last LOG_POLL_LINES lines (LOG_POLL_BYTES), and only the lines past the last ones
    already parsed go to the follower; the first read of a log longer than that also
    reads its head (the trainer's start line, the first loss) and skips the middle. So a
    poll's requests and memory stay bounded whatever the log's size. A container that
    restarted has a new log: it is followed from its start again."""

    def __init__(self) -> None:
        self.follower = LogFollower()
        self.last: deque[str] = deque(maxlen=3)  # the last complete lines parsed
        self.restarts: int | None = None
        self.recent: deque[str] = deque(maxlen=LOG_TAIL_LINES)
        self.reported = -1  # steps last reported: one report per poll that adds steps

    def read(
        self,
        head: Callable[[], str],
        end: Callable[[], str],
        restarts: int,
        progress: Progress | None,
        final: bool,
    ) -> None:
        """One poll's read: `head` gives the log's first LOG_HEAD_BYTES, `end` its last
        LOG_POLL_LINES lines (fewer if they are longer than LOG_POLL_BYTES)."""
        if restarts != self.restarts:
            self.follower, self.restarts = LogFollower(), restarts
            self.last.clear()
        anchor = "".join(self.last)
        if not anchor:
            start = head()
            if len(start.encode()) < LOG_HEAD_BYTES:  # the whole log
                self._take(start, final)
            else:
                complete = start[: start.rfind("\n") + 1]
                self.follower.feed(complete.encode())
                self.follower.skip(at_line_start=True)  # tailLines gives whole lines
                self._take(end(), final)
        else:
            text = end()
            at = text.rfind(anchor)
            if at < 0:  # more lines came than a poll reads: the gap is skipped
                self.follower.skip(at_line_start=True)
                self._take(text, final)
            else:
                self._take(text[at + len(anchor) :], final)
        metrics = self.follower.metrics
        if progress is not None and metrics.steps != self.reported:
            self.reported = metrics.steps
            progress.report(metrics.steps, metrics.max_steps, metrics.progress_message())

    def _take(self, text: str, final: bool) -> None:
        """Parse the complete lines of `text` (the partial last one too when `final`)."""
        cut = len(text) if final else text.rfind("\n") + 1
        complete = text[:cut]
        if not complete:
            return
        self.follower.feed(complete.encode(), None, final)
        lines = complete.splitlines(keepends=True)
        self.recent.extend(line.rstrip("\n") for line in lines)
        self.last.extend(line for line in lines if line.endswith("\n"))

    def tail(self) -> str:
        """The last LOG_TAIL_LINES lines parsed."""
        return "\n".join(self.recent)


def _replica(job_name: str, pods: list[dict[str, Any]], replica: str | None) -> dict[str, Any]:
    """The pod of `replica` ('worker-1' of a PyTorchJob, 'node-1' of a TrainJob: node
    rank 1), rank 0's by default; not_found names the rest."""
    if replica is None:
        return pods[0]
    master = has_master(None, pods)
    named = {pod_info(p, master).replica: p for p in pods}
    chosen = named.get(replica.lower())
    if chosen is None:
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"Job {job_name!r} has no replica {replica!r}.",
            "Pick one of: " + ", ".join(str(r) for r in named),
        )
    return chosen


def _bounded(text: str) -> str:
    """At most MAX_LOG_CHARS, the end kept, with a note of what was cut."""
    if len(text) <= MAX_LOG_CHARS:
        return text
    kept = text[-MAX_LOG_CHARS:]
    kept = kept[kept.find("\n") + 1 :]
    cut = text[: len(text) - len(kept)].count("\n")
    return f"[... {cut} earlier lines cut: at most {MAX_LOG_CHARS} characters per call ...]\n{kept}"


def _not_started(pod: dict[str, Any]) -> bool:
    """A pod that is not running yet (what its events would say why)."""
    return (pod.get("status") or {}).get("phase") in (None, "Pending", "Unknown")


def posted_over(logged: RunMetrics, posted: RunMetrics | None) -> RunMetrics:
    """The log's account of a run with what the trainer posted on the job object (steps,
    loss, tokens/s, max_steps) in place of the log's, where it posted them."""
    if posted is None:
        return logged
    found = {
        "steps": posted.steps or logged.steps,
        "last_loss": posted.last_loss if posted.last_loss is not None else logged.last_loss,
        "tokens_per_s": posted.tokens_per_s or logged.tokens_per_s,
        "max_steps": posted.max_steps or logged.max_steps,
    }
    return dataclasses.replace(logged, **found)


def _name(job: dict[str, Any]) -> str:
    return str((job.get("metadata") or {}).get("name", ""))


def _creation_key(job: dict[str, Any]) -> Key:
    """A job's place in a list: newest created first, then by name (a status
    change leaves both alone)."""
    meta = job.get("metadata") or {}
    created = kube_pods.api_time(meta.get("creationTimestamp"))
    return (-(created.timestamp() if created else 0.0), str(meta.get("name", "")))
