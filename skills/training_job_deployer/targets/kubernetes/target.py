"""The Kubernetes target: a Kubeflow training job from the same JobSpec, of the kind its
engine names (engine.py): a PyTorchJob (Training Operator v1, pytorchjob.py) or a
TrainJob (Kubeflow Trainer v2, targets/trainjob/). plan -> submit -> follow/describe ->
logs -> cancel, plus list_jobs, delete and snapshot (the job doctor's input). Deploy
picks the engine (engines.py; auto: what the cluster serves, Trainer v2 first); the other
tools find a job whichever kind it is.

This class composes the package's pieces: plan.py (the plan, the image, what a job's
shape warns of), pod_identity.py (the pods' ServiceAccount), capacity.py (free GPUs),
cuda_gate.py (driver/CUDA gate), job_client.py (writes) over kube_monitor.py (reads),
job_state.py and rank0_log.py (a poll's state, rank 0's log), pod_logs.py, listing.py
and node_quarantine.py. submit checks the cluster serves the engine's kinds, refuses an
existing job of the name (or deletes it with replace=true), runs every check that can
refuse before a replace deletes anything, puts HF_TOKEN into a Secret the manifest
references, then creates exactly the plan's manifest."""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar

from skills.catalog.gpu_capacity import instance_gpus, require_gpus_per_node
from skills.cloud.clients import env_region
from skills.kube import namespaces
from skills.kube import pods as kube_pods
from skills.kube.engines import served_engines
from skills.kube.gpu_nodes import NodeGpuFacts, node_gpu_facts
from skills.kube.identity import reach_warnings
from skills.kube.objects import kind_path
from skills.kube.pod_metrics import job_pod_usage
from skills.kube.pods import pod_name
from skills.shared.confirm import require_confirm
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.log_tail import LastLines
from skills.shared.next_step import POLL_WAIT_S, NextStep
from skills.shared.ownership import labelled_ours, require_kube_ours
from skills.shared.paging import Key, Page
from skills.shared.progress import Progress
from skills.shared.secrets import redact
from skills.shared.waiting import poll_until
from skills.training_job_deployer import watchdog
from skills.training_job_deployer.job_spec import JobSpec, hub_endpoint
from skills.training_job_deployer.memory_estimate import (
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
from skills.training_job_deployer.targets.kubernetes import capacity, cuda_gate, listing, pod_logs
from skills.training_job_deployer.targets.kubernetes.engine import Engine
from skills.training_job_deployer.targets.kubernetes.engines import ENGINES, deploy_engine
from skills.training_job_deployer.targets.kubernetes.job_client import JobClient
from skills.training_job_deployer.targets.kubernetes.job_state import (
    job_state,
    not_started,
    posted_over,
)
from skills.training_job_deployer.targets.kubernetes.kube_monitor import read_snapshot
from skills.training_job_deployer.targets.kubernetes.manifest import (
    HF_SECRET,
    job_buckets,
    service_account,
    shm_gib,
)
from skills.training_job_deployer.targets.kubernetes.node_quarantine import quarantine_nodes
from skills.training_job_deployer.targets.kubernetes.plan import (
    KubernetesPlan,
    fit_warnings,
    hub_account,
    resolve_image,
)
from skills.training_job_deployer.targets.kubernetes.pod_identity import (
    identity_text,
    manifest_s3_paths,
    require_service_account,
)
from skills.training_job_deployer.targets.kubernetes.pod_logs import pod_path
from skills.training_job_deployer.targets.kubernetes.rank0_log import (
    LOG_HEAD_BYTES,
    LOG_POLL_BYTES,
    LOG_POLL_LINES,
    Rank0Log,
)
from skills.training_job_deployer.targets.kubernetes.render_inputs import RenderInputs
from skills.training_job_deployer.targets.kubernetes.settings import (
    KubernetesDeploySettings,
    KubernetesSettings,
)
from skills.training_job_deployer.tracking_env import (
    TRACKING_SECRET,
    secret_values,
    tracking_env,
    tracking_secrets,
)
from skills.training_job_deployer.trainer_log import RunMetrics

POLL_S = 2.0
DETACH_S = 300.0  # wait_seconds=None (a person at the CLI): detach after 5 minutes
# A poll reads the events of this many pods not yet running (one LIST each: why a job
# waits is the same on its first pods as on the rest).
EVENT_PODS = 4
REPLACE_TIMEOUT_S = 60.0
HF_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


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
        self._client: JobClient | None = None
        self._warnings: list[str] = []
        self.engine: Engine = ENGINES["pytorchjob"]  # until a plan or a job says which

    @property
    def client(self) -> JobClient:
        if self._client is None:
            self._client = JobClient(self.settings.api_client(), self.namespace)
            self._client.kind = self.engine.job_kind
        return self._client

    def _bind(self, engine: Engine) -> Engine:
        """Read and write jobs of `engine`'s kind from now on."""
        self.engine = engine
        if self._client is not None:
            self._client.kind = engine.job_kind
        return engine

    # engines ----------------------------------------------------------------------------

    def _serves(self, engine: Engine) -> bool:
        return engine.name in served_engines(self.client)

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
        engine, assumed = deploy_engine(settings.engine, lambda: served_engines(self.client))
        self._bind(engine)
        self._warnings += assumed
        secret_env = dict.fromkeys(secrets, TRACKING_SECRET)
        inputs = RenderInputs(spec, settings, image, HF_SECRET, endpoint, tracking, secret_env)
        manifest = engine.render(inputs)
        warnings, self._warnings = self._warnings, []
        account = service_account(spec)
        identity = identity_text(settings.namespace, account, job_buckets(spec))
        if account:  # best effort, as the dry run's cost is: a cluster out of reach warns
            found, checked = self._service_account_or_none(account)
            warnings += reach_warnings(job_buckets(spec), settings.namespace, found, checked)
        shape_warnings, memory = fit_warnings(spec, settings)  # refuses what cannot fit
        warnings += shape_warnings
        has_token = any(os.environ.get(name) for name in HF_ENV)
        hub, hub_warnings = hub_account(spec, settings, endpoint, has_token)
        warnings += hub_warnings
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
            log_path=pod_path(engine.rank0_pod(manifest), self.namespace),
            memory_estimate=memory,
            async_save=runtime.async_save,
            process_group=runtime.process_group,
            service_account=account,
            identity=identity,
            hub=hub,
            warnings=warnings,
        )

    def _service_account_or_none(self, name: str) -> tuple[dict[str, Any] | None, bool]:
        """(the ServiceAccount or None, whether the cluster answered: the client itself
        may be out of reach, a dry run's)."""
        path = kind_path("ServiceAccount", self.namespace, name)
        try:
            return self.client.get_or_none(path), True
        except ToolFailure:
            return None, False

    def _namespace_missing(self) -> bool | None:
        """Whether submit will create the namespace (None: the cluster could not be asked)."""
        if self.namespace in namespaces.ALWAYS_THERE:
            return False
        try:
            return namespaces.missing(self.client, self.namespace)
        except ToolFailure:
            return None

    # submit -----------------------------------------------------------------------------

    def submit(
        self, job_name: str, plan: KubernetesPlan, *, replace_corrupt_record: bool = False
    ) -> None:
        engine = self._bind(ENGINES[plan.engine])
        client = self.client
        if not self._serves(engine):
            raise engine.missing()
        existing = client.job(job_name)
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
                existing,
                kind,
                f"{self.namespace}/{job_name}",
                "Deploy under another job_name; that job is not one this suite submitted.",
                namespace=self.namespace,
            )
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
        s3_paths = manifest_s3_paths(engine, plan.manifest)
        self._warnings += require_service_account(client, plan.service_account, s3_paths)
        if plan.hf_token_secret:  # someone else's Secret of that name: refused, not replaced
            client.require_secret_ours(plan.hf_token_secret)
        if plan.tracking_secrets:
            client.require_secret_ours(TRACKING_SECRET)
        nodes = [node_gpu_facts(n) for n in client.nodes()]
        if not plan.skip_gate:
            gate = cuda_gate.gate(plan.image_uri, nodes, plan.instance_type)
            self._warnings += gate.warnings
        if existing is not None:
            self._delete_and_wait(job_name)
        self._warnings += self._quota_warnings(plan, nodes)  # after: the old job's GPUs free
        namespaces.ensure(client, self.namespace)  # the first write: everything lives in it
        if plan.hf_token_secret:
            token = next(os.environ[n] for n in HF_ENV if os.environ.get(n))
            client.put_secret(plan.hf_token_secret, {"token": token})
        if values := secret_values(os.environ, plan.tracking_secrets):
            client.put_secret(TRACKING_SECRET, values)
        for companion in plan.companions:  # created, or updated when ours and different
            client.ensure_owned(companion)
        client.create_job(plan.manifest)

    def _delete_and_wait(self, job_name: str) -> None:
        self.client.delete_job(job_name)
        gone = poll_until(lambda: self.client.job(job_name) is None, bool, REPLACE_TIMEOUT_S, 1.0)
        if not gone:
            raise ToolFailure(
                ErrorCode.CONFLICT,
                f"The old {self.engine.kind} {job_name!r} is still being deleted.",
                "Wait a little and deploy again.",
            )

    def _quota_warnings(self, plan: KubernetesPlan, nodes: list[NodeGpuFacts]) -> list[str]:
        pods = self.engine.pod_gpus(plan.manifest)
        free = capacity.free_gpus(self.client, nodes, plan.instance_type)
        return capacity.quota_warnings(pods, free, plan.instance_type)

    def retry_facts(self) -> dict[str, Any]:
        """What auto-retry's remedies need beyond the snapshot (capacity.retry_facts)."""
        return capacity.retry_facts(self.client, self.settings)

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
                    lambda: redact(self.client.log(name, limit_bytes=LOG_HEAD_BYTES)),
                    lambda: redact(self.client.log_end(name, LOG_POLL_LINES, LOG_POLL_BYTES)[0]),
                    kube_pods.restarts([rank0]),
                    progress,
                    final,
                )
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
            selector = self.client.pod_selector(job_name)  # once a call, not per poll
            state.pod_usage = job_pod_usage(self.client, self.namespace, selector)
        state.warnings = [*self._warnings, *state.warnings]
        return state

    def poll(
        self, job_name: str
    ) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
        """One poll: the job, its pods, the events of the job and of its first pods not
        yet running (what says why it waits; rank 0's log is Rank0Log's)."""
        job = self._require(job_name)
        pods = self.client.pods(job_name)
        waiting = [pod_name(p) for p in pods if not_started(p)][:EVENT_PODS]
        events = [
            e for e in self.client.events(job_name, waiting) if not kube_pods.older_than(e, job)
        ]
        return job, pods, events

    def place(self, job_name: str) -> str:
        return f"{self.namespace}/{job_name}"

    def _resolve(self, job_name: str) -> dict[str, Any] | None:
        """The job of that name, whichever engine's kind it is (the client is bound to
        its engine from then on; the first engine tried is the one bound already, so a
        follow's polls ask once); None when no kind has it."""
        order = [self.engine, *(e for e in ENGINES.values() if e is not self.engine)]
        for engine in order:
            self._bind(engine)
            job = self.client.job(job_name)
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
        state = job_state(
            self.name, self.engine, self.namespace, job_name, job, pods, events, metrics, log
        )
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

    # logs -------------------------------------------------------------------------------

    def log_path(self, job_name: str) -> str:
        self._require(job_name)
        pods = self.client.pods(job_name)
        if pods:
            return pod_path(pod_name(pods[0]), self.namespace)
        return f"{self.engine.kind.lower()}/{job_name} -n {self.namespace} (no pods yet)"

    def read_logs(self, job_name: str, tail_lines: int | None, options: LogOptions) -> str:
        """Rank 0's log, or one replica's, or the last lines of every pod (pod_logs)."""
        self._require(job_name)
        pods = self.client.pods(job_name)
        return pod_logs.read_logs(self.client, job_name, pods, tail_lines, options)

    def read_log_tail(
        self,
        job_name: str,
        tail_lines: int,
        max_bytes: int,
        before: int | None,
        options: LogOptions,
    ) -> LastLines:
        """One pod's end as the API serves it (pod_logs.read_log_tail). Every rank's
        lines and a byte cursor go the default way (no cursor here)."""
        if before is not None or options.all_ranks:
            return super().read_log_tail(job_name, tail_lines, max_bytes, before, options)
        self._require(job_name)
        pods = self.client.pods(job_name)
        return pod_logs.read_log_tail(self.client, job_name, pods, tail_lines, max_bytes, options)

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
        self.client.patch_job(job_name, self.engine.stop_patch())
        return self.describe(job_name)

    def delete(self, job_name: str) -> JobState:
        """Delete the job and its pods (checkpoints on volumes stay); returns its last
        state."""
        self._require_ours(job_name, "delete")
        state = self.describe(job_name)
        self.client.delete_job(job_name)
        state.message = f"deleted (was {state.status})"
        state.next_step = state.hint = None
        return state

    def _require_ours(self, job_name: str, what: str) -> None:
        """Refuse (not_ours) a job of either kind this suite did not submit: only its own
        are stopped or deleted, as replace deletes only its own."""
        require_kube_ours(
            self._require(job_name),
            self.engine.kind,
            self.place(job_name),
            f"The suite does not {what} a job it did not submit; its owner can (kubectl).",
            namespace=self.namespace,
        )

    def list_jobs(self, page: JobPage = EVERY_JOB) -> Page[JobState]:
        """The page of the suite's jobs in the namespace, newest first, of every engine
        (listing.list_jobs: a kind the cluster does not serve is one LIST that finds
        nothing)."""
        engines = list(ENGINES.values())
        return listing.list_jobs(self.client, engines, page, self._job_key, self.name)

    def _job_key(self, name: str) -> Key | None:
        """Where the suite's job `name` is in a list (None: no such job of the suite)."""
        job = self._resolve(name)
        return listing.creation_key(job) if job is not None and labelled_ours(job) else None

    # a failed node out of service --------------------------------------------------------

    def quarantine(
        self, nodes: list[str], reason: str, job_name: str, num_nodes: int
    ) -> Quarantined:
        """Cordon and taint each node (node_quarantine), keep the next submission off
        them (nodeAffinity: avoiding), and say when too few nodes are left."""
        return quarantine_nodes(self.client, self.settings, nodes, reason, job_name, num_nodes)

    def avoiding(self, plan: KubernetesPlan, nodes: tuple[str, ...]) -> KubernetesPlan:
        """The plan with a nodeAffinity that keeps every pod off `nodes` (the taint does
        it on a real cluster too; this makes the plan say so), as its engine places pods."""
        manifest = ENGINES[plan.engine].avoiding(plan.manifest, nodes)
        return plan.model_copy(update={"manifest": manifest})

    # the job doctor's input -------------------------------------------------------------

    def snapshot(self, job_name: str) -> dict[str, Any]:
        """{"job", "pods", "events", "logs": {"<pod>": text, "<pod>/previous": text}}: the
        objects as the API returns them (camelCase), logs' secrets masked; the same reads
        as diagnose_training_job (kube_monitor.read_snapshot)."""
        self._resolve(job_name)
        return read_snapshot(self.client, job_name)
