"""The kubernetes target against kmock, with tests/services/training_operator.py playing
the Kubeflow Training Operator: submit -> monitor -> Succeeded with the trainer's
metrics, the job tools (status, logs, list, cancel, delete), typed errors for bad
input, the driver/CUDA gate, image auto-detection against moto's ECR, and a canary HF
token that never shows."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import time

import boto3
import kubernetes_validate
import pytest
import yaml

from commands._cli import run_cli
from commands.cancel_training_job import cancel_training_job
from commands.delete_training_job import delete_training_job
from commands.deploy_training_job import deploy_training_job
from commands.get_training_job import get_training_job
from commands.get_training_job_logs import LOG_TEXT_BYTES, get_training_job_logs
from commands.list_training_jobs import list_training_jobs
from skills.shared.errors import ToolFailure
from skills.shared.progress import CollectingProgress
from skills.training_job_deployer.targets.base import JobPage
from skills.training_job_deployer.targets.kubernetes.settings import KubernetesSettings
from skills.training_job_deployer.targets.kubernetes.target import KubernetesTarget
from tests.services.kube import PYTORCHJOB
from tests.services.training_operator import ERROR_LOG, RUN_LOG, TrainingOperator

pytestmark = pytest.mark.integration

# Labels unreadable (nothing listens): on GPU nodes the gate refuses it (cuda_unverified),
# so the tests of other things that run on GPU nodes pass skip_gate=True.
IMAGE = "localhost:9/fsdp:v1"
CANARY = "hf_" + "CanaryToken" * 3
K8S = {"target": "kubernetes"}
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"


@pytest.fixture
def operator(kube_api) -> TrainingOperator:
    kube_api.reset()
    return TrainingOperator(kube_api)


def deploy(**kwargs):
    args = {"job_name": "llama", "num_nodes": 2, "gpu_per_node": 8, "image_uri": IMAGE,
            "instance_type": "p5.48xlarge", "max_steps": 6, "wait_seconds": 0}  # fmt: skip
    args.update(kwargs)
    return deploy_training_job(**args)


def failure(call, *args, **kwargs) -> ToolFailure:
    with pytest.raises(ToolFailure) as caught:
        call(*args, **kwargs)
    assert caught.value.hint, caught.value
    return caught.value


def exists(name: str) -> bool:
    return KubernetesTarget(KubernetesSettings()).client.job(name) is not None


def created(kube_api, name: str = "llama") -> dict:
    return kube_api.emulator.objects[PYTORCHJOB, "default", name].raw


def test_submit_monitor_succeeded_with_metrics(operator, kube_api):
    operator.add_nodes("p5.48xlarge", 2, efa=32)
    planned = deploy(dry_run=True)  # no --target: the kubernetes settings imply it
    assert planned.target == "kubernetes" and planned.status == "planned"
    state = deploy(skip_gate=True)
    assert state.status == "running" and state.target == "kubernetes"
    assert "Training Operator" in (state.message or "")
    # dry_run returned exactly what was applied.
    job = created(kube_api)
    assert job["spec"] == planned.plan.manifest["spec"]
    assert {k: job["metadata"][k] for k in ("name", "labels")} == {
        k: planned.plan.manifest["metadata"][k] for k in ("name", "labels")
    }
    pods = operator.run("llama", outcome="Succeeded")
    assert pods == ["llama-master-0", "llama-worker-0"]
    progress = CollectingProgress()
    done = get_training_job(job_name="llama", **K8S, wait_seconds=30, progress=progress)
    assert done.status == "succeeded"
    assert (done.steps, done.max_steps, done.world_size) == (6, 6, 2)
    assert done.first_loss == pytest.approx(6.29749) and done.last_loss == pytest.approx(5.13931)
    assert done.tokens_per_s == pytest.approx(10809.0)
    assert done.checkpoint_step == 6 and done.checkpoint_path == "/checkpoints/llama/step-6"
    assert done.pods == {"llama-master-0": "Succeeded", "llama-worker-0": "Succeeded"}
    assert done.conditions == ["Created", "Succeeded"] and done.restarts == 0
    assert done.log_path == "pod/llama-master-0 -n default"
    last = progress.events[-1]
    assert (last.completed, last.total) == (6, 6) and "loss 5.1393" in last.message
    listed = list_training_jobs(**K8S)
    assert [(j.job_name, j.status, j.steps, j.max_steps) for j in listed.jobs] == [
        ("llama", "succeeded", 6, 6)
    ]
    assert listed.summary_rows() == [("llama", "succeeded 6/6 steps")]


def test_list_reads_each_jobs_steps_from_the_end_of_rank_0s_log(operator):
    # A long run: its start line (max_steps) is far above the end of the log, which
    # holds the summary; the trainer was told --max_steps in the job's own command.
    lines = RUN_LOG.splitlines(keepends=True)
    noise = [f"[rank0]: step {i} stats\n" for i in range(500)]
    deploy(job_name="long", max_steps=6)
    long_log = "".join([*lines[:-1], *noise, lines[-1]])
    operator.run("long", outcome="Succeeded", rank_logs={"master-0": long_log})
    deploy(job_name="mid", max_steps=6)  # still training: step 1 logged, then a checkpoint
    operator.run("mid", outcome="Running", rank_logs={"master-0": "".join(lines[:3])})
    deploy(job_name="queued", max_steps=40)  # no pods yet: no log to read
    target = KubernetesTarget(KubernetesSettings())
    before = target.client.calls
    jobs = {j.job_name: j for j in target.list_jobs().items}
    # The jobs' keys, the page's jobs and their pods: one LIST each; then the end of each
    # started rank 0's log. And the TrainJobs' keys (issue 47): one LIST that finds none.
    assert target.client.calls - before == 3 + 2 + 1
    seen = {name: (j.status, j.steps, j.max_steps) for name, j in jobs.items()}
    assert seen == {
        "long": ("succeeded", 6, 6),
        "mid": ("running", 1, 6),
        "queued": ("running", 0, 40),
    }
    rows = dict(list_training_jobs(**K8S).summary_rows())
    assert rows["long"] == "succeeded 6/6 steps" and rows["queued"] == "running 0/40 steps"


def test_a_job_submitted_between_pages_neither_repeats_nor_hides_one(operator):
    """Issue 45: the cursor is the last job's key (creation time, name), not an offset:
    a job created after page 1 was listed does not push one of page 1 onto page 2."""
    names = [f"job-{i}" for i in range(5)]
    for name in names:
        deploy(job_name=name, max_steps=6)
    first = list_training_jobs(**K8S, limit=3)
    time.sleep(1.05)  # creationTimestamp counts seconds: newer than every job listed
    deploy(job_name="newer", max_steps=6)
    rest = list_training_jobs(**K8S, limit=10, cursor=first.next_cursor)
    listed = [j.job_name for j in first.jobs + rest.jobs]
    assert sorted(listed) == names and len(set(listed)) == len(listed), listed


def test_a_list_page_reads_logs_only_for_its_own_jobs(operator):
    """Issue 35 items 1 and 3: the requests a page makes do not grow with the namespace;
    a status filter reads no log; the rest is counted and reached by the cursor."""
    lines = RUN_LOG.splitlines(keepends=True)
    for i in range(6):
        deploy(job_name=f"job-{i}", max_steps=6)
        operator.run(f"job-{i}", outcome="Succeeded", rank_logs={"master-0": RUN_LOG})
    deploy(job_name="live", max_steps=6)
    operator.run("live", outcome="Running", rank_logs={"master-0": "".join(lines[:3])})
    target = KubernetesTarget(KubernetesSettings())
    before = target.client.calls
    listed = target.list_jobs(JobPage(limit=2))
    # keys, jobs, pods, two logs: not seven; and the (no) TrainJobs' keys
    assert target.client.calls - before == 3 + 2 + 1
    assert (len(listed.items), listed.more) == (2, 5)
    before = target.client.calls
    target.list_jobs(JobPage(limit=20, status="succeeded"))
    assert target.client.calls - before == 2 + 6 + 1  # the filter itself read no log
    page = list_training_jobs(**K8S, limit=2)
    assert len(page.jobs) == 2 and page.more == 5 and page.next_cursor
    rest = list_training_jobs(**K8S, limit=10, cursor=page.next_cursor)
    assert len(rest.jobs) == 5 and rest.more == 0 and rest.next_cursor is None
    names = [j.job_name for j in page.jobs + rest.jobs]
    assert sorted(names) == sorted([f"job-{i}" for i in range(6)] + ["live"])
    running = list_training_jobs(**K8S, status="running")
    assert [j.job_name for j in running.jobs] == ["live"] and running.more == 0
    assert dict(page.summary_rows())["5 more"] == f"cursor={page.next_cursor}"


def test_a_long_rank0_log_is_read_from_its_end_in_bounded_reads(operator, kube_api):
    """Issue 35 item 2: rank 0's log is never read whole. A 13 MiB log (a 60,000-step
    run) reports its true status and steps from its head and its end; a poll after it
    grew reads only the end again and parses only what is new."""
    lines = RUN_LOG.splitlines(keepends=True)
    start, steps = lines[0], [line for line in lines if '"event": "step"' in line]
    summary = lines[-1]
    assert '"event": "summary"' in summary and '"event": "start"' in start
    step = json.loads(steps[-1])
    body = "".join(json.dumps({**step, "step": i}) + "\n" for i in range(1, 60_001))
    pad = "[rank0]: NCCL INFO " + "x" * 700 + "\n"
    end_line = json.dumps({**json.loads(summary), "steps": 60_000}) + "\n"
    long_log = start + body + pad * 1000 + end_line
    assert len(long_log) > 12 * 2**20
    deploy(job_name="long", max_steps=60_000)
    operator.run("long", outcome="Succeeded", rank_logs={"master-0": long_log})
    before = kube_api.log_bytes_served
    state = get_training_job(job_name="long", **K8S)
    assert (state.status, state.steps) == ("succeeded", 60_000)
    assert state.first_loss == step["loss"]  # from the head
    served = kube_api.log_bytes_served - before
    assert served < 2 * 2**20, served  # the head and the end, not the log

    # Growing across polls: only the end is read, only the new lines parsed.
    from skills.training_job_deployer.targets.kubernetes.rank0_log import Rank0Log

    log = Rank0Log()
    text = start + "".join(body.splitlines(keepends=True)[:200])
    reads = []

    def end():
        reads.append(1)
        return "".join(text.splitlines(keepends=True)[-2000:])

    log.read(lambda: text, end, 0, None, False)
    assert log.follower.metrics.steps == 200 and reads == []
    text += "".join(json.dumps({**step, "step": i}) + "\n" for i in range(201, 231))
    log.read(lambda: text, end, 0, None, False)
    assert log.follower.metrics.steps == 230 and reads == [1]
    text += "".join(json.dumps({**step, "step": i}) + "\n" for i in range(231, 5_000))
    log.read(lambda: text, end, 0, None, False)  # more than a poll reads: the gap skipped
    assert log.follower.metrics.steps == 4_999
    log.read(lambda: "restarted\n" + start, end, 1, None, False)  # a new container
    assert log.follower.metrics.steps == 0 and log.tail().endswith(start.rstrip("\n"))


def test_a_failed_job_reports_the_trainers_error_and_restarts(operator):
    deploy(num_nodes=3)
    operator.run("llama", outcome="Failed", restarts={"worker-1": 2})
    state = get_training_job(job_name="llama", **K8S)
    assert state.status == "failed" and state.restarts == 2
    assert state.error["error_type"] == "ConfigError"
    assert "does not exist" in state.message and state.exit_code == 1
    assert ERROR_LOG.strip() in state.log_tail


def test_the_cli_call_creates_the_job(operator, kube_api):
    out, err = io.StringIO(), io.StringIO()
    argv = ["--kubeconfig", str(kube_api.kubeconfig), "--num_nodes", "2", "--gpu_per_node",
            "8", "--instance_type", "p5.48xlarge", "--job_name", "llama3-8b", "--model_type",
            "llama_v3_8b", "--max_steps", "1000", "--image_uri", IMAGE, "--wait_seconds", "0",
            "--json"]  # fmt: skip
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = run_cli(deploy_training_job, argv)
    assert status == 0, err.getvalue()
    result = json.loads(out.getvalue())
    assert result["target"] == "kubernetes" and result["status"] == "running"
    command = created(kube_api, "llama3-8b")["spec"]["pytorchReplicaSpecs"]["Master"]
    assert "--max_steps" in command["template"]["spec"]["containers"][0]["command"]


def test_the_issues_monitor_call_follows_the_job_to_its_end(operator, kube_api):
    """The call as the issues write it (`--monitor --auto_retry --max_retries 3`): the CLI
    follows the job with progress until the operator reports it Succeeded."""
    import threading

    argv = ["--kubeconfig", str(kube_api.kubeconfig), "--num_nodes", "2", "--gpu_per_node",
            "8", "--instance_type", "p5.48xlarge", "--job_name", "llama", "--model_type",
            "llama_v3_8b", "--max_steps", "6", "--image_uri", IMAGE, "--monitor",
            "--auto_retry", "--max_retries", "3", "--json"]  # fmt: skip
    out, err, status = io.StringIO(), io.StringIO(), []
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        cli = threading.Thread(target=lambda: status.append(run_cli(deploy_training_job, argv)))
        cli.start()
        deadline = time.monotonic() + 30
        while not exists("llama") and time.monotonic() < deadline:
            time.sleep(0.1)
        operator.run("llama", outcome="Succeeded")
        cli.join(60)
    assert status == [0], err.getvalue()
    result = json.loads(out.getvalue())
    assert (result["status"], result["steps"], result["attempts"][0]["number"]) == (
        "succeeded", 6, 1)  # fmt: skip
    # --no-monitor starts it and returns (without auto_retry: that would be an operation).
    argv[argv.index("--monitor")] = "--no-monitor"
    argv[argv.index("llama")] = "llama-2"
    del argv[argv.index("--auto_retry") : argv.index("--json")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert run_cli(deploy_training_job, argv) == 0
    assert json.loads(out.getvalue())["status"] == "running"


def test_an_existing_name_is_a_typed_error_and_replace_starts_over(operator, kube_api):
    deploy()
    first_uid = created(kube_api)["metadata"]["uid"]
    exists = failure(deploy)
    assert exists.code == "job_exists" and "replace=true" in exists.hint
    # Issue 20 item 12: replace=true deleted a RUNNING job without confirm.
    unconfirmed = failure(deploy, replace=True)
    assert unconfirmed.code == "confirmation_required" and "confirm=true" in unconfirmed.hint
    assert created(kube_api)["metadata"]["uid"] == first_uid  # still the first job
    state = deploy(replace=True, confirm=True)
    assert state.status == "running"
    assert created(kube_api)["metadata"]["uid"] != first_uid


def test_a_confirmed_replace_runs_the_gate_before_it_deletes_the_running_job(operator, kube_api):
    """Issue 30 item 6: replace=true confirm=true deleted the running job, then the CUDA
    gate refused the new image: the old job gone, nothing running. Every check that can
    refuse now runs first; the running job is untouched."""
    from tests.services import eks_cluster as seed

    deploy(skip_gate=True)  # running (the first image's gate is not this test's)
    first_uid = created(kube_api)["metadata"]["uid"]
    kube_api.emulator.objects["v1/nodes", None, "gpu-1"] = seed.node("gpu-1", "p5.48xlarge")
    refused = failure(deploy, replace=True, confirm=True)  # IMAGE's labels: unreadable
    assert refused.code == "cuda_unverified"
    assert created(kube_api)["metadata"]["uid"] == first_uid  # the old job still runs
    state = deploy(replace=True, confirm=True, skip_gate=True)
    assert state.status == "running" and created(kube_api)["metadata"]["uid"] != first_uid


def test_replace_never_deletes_a_pytorchjob_this_suite_did_not_submit(operator, kube_api):
    deploy(skip_gate=True)
    job = created(kube_api)
    job["metadata"]["labels"] = {"team": "theirs"}
    kube_api.emulator.objects[PYTORCHJOB, "default", "llama"] = job
    refused = failure(deploy, replace=True, confirm=True, skip_gate=True)
    assert refused.code == "not_ours" and "job_name" in refused.hint
    assert created(kube_api)["metadata"]["uid"] == job["metadata"]["uid"]


def test_replace_of_an_ended_job_needs_no_confirm(operator, kube_api):
    """A job that ended is only a record: replace (auto_retry's resubmission) goes on."""
    deploy()
    job = created(kube_api)
    job["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
    kube_api.emulator.objects[PYTORCHJOB, "default", "llama"] = job
    first_uid = job["metadata"]["uid"]
    assert deploy(replace=True).status == "running"
    assert created(kube_api)["metadata"]["uid"] != first_uid


def test_delete_needs_confirm(operator, kube_api):
    deploy()
    refused = failure(delete_training_job, job_name="llama", **K8S)
    assert refused.code == "confirmation_required"
    assert exists("llama")
    last = delete_training_job(job_name="llama", **K8S, confirm=True)
    assert not exists("llama")
    assert last.status == "running" and last.message == "deleted (was running)"
    gone = failure(get_training_job, job_name="llama", **K8S)
    assert gone.code == "job_not_found"
    unsupported = failure(delete_training_job, job_name="llama", confirm=True)
    assert unsupported.code == "unsupported_for_target"


def test_cancel_suspends_the_job(operator):
    deploy()
    operator.run("llama", outcome="Running")
    state = cancel_training_job(job_name="llama", **K8S, confirm=True)
    assert state.status == "cancelled"
    assert operator.job("llama")["spec"]["runPolicy"]["suspend"] is True


def test_logs_for_all_ranks_one_replica_and_a_bounded_size(operator):
    deploy(num_nodes=3)
    worker_log = "".join(f"worker-1 line {i}\n" for i in range(50))
    operator.run("llama", rank_logs={"worker-1": worker_log})
    everything = get_training_job_logs(job_name="llama", **K8S, all_ranks=True, tail_lines=30)
    for pod in ("llama-master-0", "llama-worker-0", "llama-worker-1"):
        assert f"==> {pod} <==" in everything.text
    assert '"event": "summary"' in everything.text  # rank 0's last lines
    assert "worker-1 line 49" in everything.text and "worker-1 line 0\n" not in everything.text
    one = get_training_job_logs(job_name="llama", **K8S, replica="worker-1", tail_lines=5)
    assert one.text.splitlines() == [f"worker-1 line {i}" for i in range(45, 50)]
    rank0 = get_training_job_logs(job_name="llama", **K8S)
    assert rank0.text == RUN_LOG.strip() and rank0.log_path == "pod/llama-master-0 -n default"
    missing = failure(get_training_job_logs, job_name="llama", **K8S, replica="worker-7")
    assert missing.code == "not_found" and "worker-1" in missing.hint
    huge = "".join(f"{i:08d} " + "x" * 200 + "\n" for i in range(2000))
    operator.run("llama", rank_logs={"master-0": huge})
    bounded = get_training_job_logs(job_name="llama", **K8S, tail_lines=10_000)
    assert len(bounded.text) <= LOG_TEXT_BYTES  # the last lines whole, no note among them
    assert bounded.text.splitlines() == huge.splitlines()[-bounded.lines :]
    assert bounded.tail_lines == 10_000 and bounded.lines > 100
    assert bounded.excerpt and "no cursor" in bounded.excerpt and bounded.next_step is None
    assert bounded.plain_text().startswith(f"(an excerpt: the last {bounded.lines} of")
    cursor = failure(get_training_job_logs, job_name="llama", **K8S, before=10)
    assert cursor.code == "unsupported_for_target" and cursor.details["fields"] == ["before"]
    local = failure(get_training_job_logs, job_name="llama", all_ranks=True)
    assert local.code == "unsupported_for_target"


def test_a_canary_hf_token_never_shows(operator, kube_api, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", CANARY)
    planned = deploy(dry_run=True)
    state = deploy()
    secret = kube_api.emulator.objects["v1/secrets", "default", "fsdp-eks-hf-token"].raw
    assert base64.b64decode(secret["data"]["token"]).decode() == CANARY  # it went there only
    for k8s in ("1.30", "1.33"):  # the Secret as sent, against the core schemas, strict
        kubernetes_validate.validate(dict(secret), k8s, strict=True)
    operator.run("llama", rank_logs={"master-0": RUN_LOG + f"token={CANARY}\n"})
    logs = get_training_job_logs(job_name="llama", **K8S, all_ranks=True)
    done = get_training_job(job_name="llama", **K8S)
    exists = failure(deploy)
    snapshot = KubernetesTarget(KubernetesSettings()).snapshot("llama")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        run_cli(deploy_training_job, ["--job_name", "llama", "--image_uri", IMAGE,
                                      "--namespace", "default", "--dry_run"])  # fmt: skip
    shown = [
        planned.model_dump_json(),
        yaml.safe_dump(created(kube_api)),
        state.model_dump_json(),
        logs.model_dump_json(),
        done.model_dump_json(),
        json.dumps(exists.to_dict()),
        str(exists),
        json.dumps(snapshot),
        out.getvalue(),
    ]
    assert "***" in logs.text
    for text in shown:
        assert CANARY not in text


def test_bad_input_gives_typed_errors_with_hints(operator, kube_api, monkeypatch, tmp_path):
    unknown = failure(deploy, instance_type="p9.mega")
    assert unknown.code == "invalid_input" and "p5.48xlarge" in unknown.hint
    bad_context = failure(deploy, context="nowhere")
    assert bad_context.code == "kubeconfig_invalid"
    both = failure(deploy, cluster_name="c", context="kmock")
    assert both.code == "invalid_input"
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "state"))  # nothing pushed
    no_image = failure(deploy, image_uri=None, dry_run=True)
    assert no_image.code == "invalid_input" and "repository" in no_image.hint
    operator.uninstall()
    no_crd = failure(deploy)
    # Neither engine served: the call that installs one (issue 47).
    assert no_crd.code == "training_operator_missing"
    assert "manage_eks_cluster action=auto_fix" in no_crd.hint
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    no_config = failure(get_training_job, job_name="llama", **K8S)
    assert no_config.code == "kubeconfig_invalid"


def test_the_gate_refuses_a_cu130_image_on_535_nodes(operator, kube_api, monkeypatch, registry):
    operator.add_nodes("p5.48xlarge", 2, efa=32, driver="535.104.05")
    labels = {"fsdp-eks.torch": "2.13.0", "fsdp-eks.cuda": "13.0"}
    new = registry.push_labelled_image("gate/trainer", "cu130", labels)
    monkeypatch.setenv("REGISTRY_USERNAME", registry.username)
    monkeypatch.setenv("REGISTRY_PASSWORD", registry.password)
    # The credential policy: REGISTRY_* go only to the hosts REGISTRY_HOST names.
    monkeypatch.setenv("REGISTRY_HOST", registry.host)
    refused = failure(deploy, image_uri=new)
    assert refused.code == "cuda_incompatible"
    assert "build-image --base_image pytorch/pytorch:" in refused.hint
    assert "--driver_version 535.104.05" in refused.hint
    assert not exists("llama")
    assert deploy(image_uri=new, skip_gate=True).status == "running"
    assert exists("llama")
    kube_api.reset()  # the fleet upgraded: the same image passes
    operator.add_nodes("p5.48xlarge", 2, efa=32, driver="580.65.06")
    assert deploy(image_uri=new).status == "running"


def test_image_auto_detection_takes_the_newest_in_ecr(operator, moto_server, monkeypatch):
    ecr = boto3.client("ecr", region_name="us-east-1")
    ecr.create_repository(repositoryName="fsdp-trainer")
    for tag in ("v1", "v2"):
        config = {"digest": f"sha256:{tag * 32}"[:71], "size": 1,
                  "mediaType": "application/vnd.docker.container.image.v1+json"}  # fmt: skip
        manifest = json.dumps({"schemaVersion": 2, "config": config, "layers": [],
                               "mediaType": MANIFEST_V2})  # fmt: skip
        ecr.put_image(repositoryName="fsdp-trainer", imageManifest=manifest, imageTag=tag)
        time.sleep(1.1)  # moto's imagePushedAt has whole seconds
    newest = "123456789012.dkr.ecr.us-east-1.amazonaws.com/fsdp-trainer:v2"
    planned = deploy(image_uri=None, repository="fsdp-trainer", region="us-east-1", dry_run=True)
    assert planned.plan.image_uri == newest and planned.plan.image_source == "ecr:fsdp-trainer"
    monkeypatch.setenv("ECR_REPOSITORY", "fsdp-trainer")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    assert deploy(image_uri=None, dry_run=True).plan.image_uri == newest


def test_one_request_per_kind_per_poll_whatever_the_pod_count(operator):
    target = KubernetesTarget(KubernetesSettings())
    for nodes, name in ((2, "small"), (8, "large")):
        deploy(job_name=name, num_nodes=nodes)
        operator.run(name, outcome="Running")
        before = target.client.calls
        job, pods, events = target.poll(name)
        assert len(pods) == nodes and target.client.calls - before == 3
        # The poll's three, rank 0's log, then whether the metrics API is served (once a
        # call; this cluster does not serve it: no LIST of pod metrics).
        state = target.describe(name)
        assert target.client.calls - before == 3 + 4 + 1 and state.steps > 0


def test_snapshot_is_the_api_objects_and_masked_logs(operator):
    deploy()
    operator.run("llama", outcome="Failed", restarts={"master-0": 1},
                 previous_logs={"master-0": "previous attempt\n"})  # fmt: skip
    operator.add_event("llama-master-0", "BackOff", "Back-off restarting failed container")
    snapshot = KubernetesTarget(KubernetesSettings()).snapshot("llama")
    assert set(snapshot) == {"job", "pods", "events", "logs", "nodes"}
    # The nodes are those the job's pods ran on, read for their conditions (XID evidence).
    ran_on = {p["spec"].get("nodeName") for p in snapshot["pods"]} - {None}
    assert {n["metadata"]["name"] for n in snapshot["nodes"]} <= ran_on
    assert (
        snapshot["job"]["kind"] == "PyTorchJob" and "pytorchReplicaSpecs" in snapshot["job"]["spec"]
    )
    assert [p["metadata"]["name"] for p in snapshot["pods"]] == ["llama-master-0",
                                                                 "llama-worker-0"]  # fmt: skip
    status = snapshot["pods"][0]["status"]["containerStatuses"][0]
    assert status["restartCount"] == 1 and status["state"]["terminated"]["exitCode"] == 1
    assert [e["reason"] for e in snapshot["events"]] == ["BackOff"]
    assert snapshot["events"][0]["involvedObject"]["name"] == "llama-master-0"
    assert snapshot["logs"]["llama-master-0"] == ERROR_LOG
    assert snapshot["logs"]["llama-master-0/previous"] == "previous attempt\n"
    assert "llama-worker-0/previous" not in snapshot["logs"]


def test_gpus_asked_beyond_those_free_is_a_warning_not_a_refusal(operator):
    operator.add_nodes("p5.48xlarge", 1, efa=32)
    operator.add_nodes("g5.12xlarge", 4, gpus=4)  # other instance types do not count
    state = deploy(num_nodes=2, gpu_per_node=8, skip_gate=True)
    assert state.status == "running"
    assert any("16 GPUs asked, 8 free on Ready p5.48xlarge nodes" in w for w in state.warnings)
    enough = deploy(job_name="small", num_nodes=1, gpu_per_node=8, replace=True, skip_gate=True)
    assert not any("GPUs asked" in w for w in enough.warnings)


def test_an_api_error_is_typed(operator, kube_api):
    jobs = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs"
    kube_api.emulator[f"post {jobs}"] << 403 << {"kind": "Status", "message": "RBAC: no"}
    denied = failure(deploy)
    assert denied.code == "access_denied" and "RBAC: no" in denied.message


def test_a_preempted_job_says_where_a_rerun_resumes(operator):
    deploy()
    # The trainer's lines up to its step-3 checkpoint, then its SIGTERM line (train.py:
    # it saved step 4 on the way out).
    lines = RUN_LOG.splitlines(keepends=True)
    upto = next(i for i, line in enumerate(lines) if '"checkpoint_saved"' in line)
    event = {
        "event": "preempted",
        "step": 4,
        "signal": 15,
        "checkpoint": "/checkpoints/llama/step-4",
    }
    preempted = json.dumps(event) + "\n"
    log = "".join(lines[: upto + 1]) + preempted
    operator.run("llama", outcome="Failed", exit_codes={"master-0": 143},
                 rank_logs={"master-0": log})  # fmt: skip
    state = get_training_job(job_name="llama", **K8S)
    assert state.status == "preempted" and state.exit_code == 143
    assert state.checkpoint_step == 4 and state.checkpoint_path == "/checkpoints/llama/step-4"
    assert "checkpoint saved at step 4" in state.message
    assert "replace=true" in state.hint and "step 4" in state.hint


def test_deploy_follows_a_live_job_to_the_end_with_progress(operator):
    import threading

    lines = RUN_LOG.splitlines(keepends=True)
    first_step = next(i for i, line in enumerate(lines) if '"event": "step"' in line)

    progress = CollectingProgress()

    def operator_loop() -> None:
        while not exists("llama"):
            time.sleep(0.05)
        operator.run(
            "llama", outcome="Running", rank_logs={"master-0": "".join(lines[: first_step + 1])}
        )
        # It ends once a poll has seen it mid-run (step 1), however slow the polls are.
        deadline = time.monotonic() + 25
        while 1 not in [e.completed for e in progress.events] and time.monotonic() < deadline:
            time.sleep(0.05)
        operator.run("llama", outcome="Succeeded")

    thread = threading.Thread(target=operator_loop, daemon=True)
    thread.start()
    state = deploy(wait_seconds=30, progress=progress)
    thread.join(5)
    assert state.status == "succeeded" and state.steps == 6
    steps = [event.completed for event in progress.events]
    assert 1 in steps and steps[-1] == 6  # step 1 seen while running, then the end


def test_logs_of_the_previous_container(operator):
    deploy()
    operator.run("llama", outcome="Running", restarts={"worker-0": 1},
                 previous_logs={"worker-0": "NCCL error: unhandled system error\n"})  # fmt: skip
    text = get_training_job_logs(job_name="llama", **K8S, replica="worker-0", previous=True).text
    assert text == "NCCL error: unhandled system error"


def test_the_dry_run_shows_the_memory_estimate_and_refuses_a_plan_that_cannot_fit(operator):
    planned = deploy(model_type="llama_v3_8b", dry_run=True)
    memory = planned.plan.memory_estimate
    assert memory is not None and memory["gpu_gib"] == 80
    assert 0 < memory["total_gib"] <= memory["usable_gib"]
    too_big = failure(deploy, model_type="llama_v3_8b", num_nodes=1, gpu_per_node=1,
                      seq_len=8192, dry_run=True)  # fmt: skip
    assert too_big.code == "gpu_memory_exceeded" and "activation_checkpointing" in too_big.hint
    # 8B's states alone (16 bytes a parameter) overflow one GPU: more nodes or offload.
    one_gpu = failure(deploy, model_type="llama_v3_8b", num_nodes=1, gpu_per_node=1)
    assert one_gpu.code == "gpu_memory_exceeded"
    assert "num_nodes=" in one_gpu.hint and "cpu_offload" in one_gpu.hint


def test_a_dry_run_prices_the_nodes_and_the_hours_an_earlier_attempt_measured(
    operator, kube_api, monkeypatch
):
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    first = deploy(dry_run=True, max_steps=1000)  # no job of that name yet: per hour only
    cost = first.cost
    assert cost is not None and cost["what"] == "2 x p5.48xlarge in us-east-1"
    assert cost["usd_per_hour"] == pytest.approx(2 * 55.04) and cost["total_usd"] is None
    assert cost["price_table_date"] == "2026-09"
    assert any("per hour only" in n for n in cost["notes"])
    assert not exists("llama")  # the dry run started nothing
    # An attempt runs and logs its steps (the recorded trainer log, on rank 0) ...
    deploy()
    operator.run("llama", outcome="Succeeded")
    steps = [json.loads(line) for line in RUN_LOG.splitlines() if '"event": "step"' in line]
    seconds = (steps[-1]["elapsed_s"] - steps[0]["elapsed_s"]) / (
        steps[-1]["step"] - steps[0]["step"]
    )
    # ... so the next dry run of the same job prices max_steps at that step time.
    again = deploy(dry_run=True, max_steps=1000, replace=True)
    hours = 1000 * seconds / 3600
    assert again.cost is not None and again.cost["hours"] == pytest.approx(hours)
    assert again.cost["total_usd"] == pytest.approx(2 * 55.04 * hours, abs=0.01)
    assert any(f"{seconds:.3f} s/step" in n for n in again.cost["notes"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run_cli(deploy_training_job, ["--job_name", "llama", "--image_uri", IMAGE,
                                      "--instance_type", "p5.48xlarge", "--num_nodes", "2",
                                      "--max_steps", "1000", "--dry_run"])  # fmt: skip
    assert "110.08/h on-demand" in out.getvalue() and "(prices of 2026-09)" in out.getvalue()


def test_a_dry_run_without_an_instance_type_or_a_cluster_still_answers(monkeypatch):
    # No kubeconfig at all: the earlier attempt cannot be read; the estimate says what
    # it lacks and the plan is returned all the same.
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    planned = deploy(dry_run=True, instance_type=None)
    assert planned.status == "planned" and planned.cost is not None
    assert planned.cost["usd_per_hour"] is None and planned.cost["notes"]
    priced = deploy(dry_run=True, region="ap-northeast-1")
    assert priced.cost is not None
    assert priced.cost["usd_per_hour"] == pytest.approx(2 * 55.04 * 1.4)


def _watched_log(rank: int, lag: float, end_time: float) -> str:
    """Rank 0's log as the trainer writes it: a start line, then step lines every 2 steps
    of 0.5 s whose slowest rank is `rank`, `lag` s per step behind; the last at `end_time`."""
    start = {"event": "start", "world_size": 4, "max_steps": 1000, "log_freq": 2,
             "collective_timeout_s": 300.0}  # fmt: skip
    lines = [json.dumps(start)]
    for i in range(8):
        step = 2 + 2 * i
        lines.append(json.dumps({
            "event": "step", "step": step, "loss": 3.0, "step_s": 0.5, "tokens_per_s": 1000.0,
            "elapsed_s": step * 0.5, "time": end_time - (14 - 2 * i) * 0.5,
            "slowest_rank": rank, "slowest_host": "ip-10-0-0-9", "rank_lag_s": lag,
        }))  # fmt: skip
    return "\n".join(lines) + "\n"


def test_a_running_jobs_straggler_and_hang_come_from_rank_0s_log(operator):
    # The same watchdog as the local and Slurm targets (tests/integration/test_long_runs.py
    # pauses a real rank there): here rank 0's log as the pods' stand-in serves it.
    deploy()
    log = _watched_log(rank=3, lag=0.3, end_time=time.time())
    operator.run("llama", outcome="Running", rank_logs={"master-0": log})
    state = get_training_job(job_name="llama", **K8S)
    assert state.status == "running"
    [found] = [f for f in state.findings if f.code == "straggler"]
    assert "rank 3" in found.message and "ip-10-0-0-9" in found.message
    assert "job_hung" not in [f.code for f in state.findings]  # its last step just arrived
    # The same steps, the last a minute ago (120 step times): the job is hung.
    deploy(job_name="stuck")
    log = _watched_log(rank=0, lag=0.0, end_time=time.time() - 60)
    operator.run("stuck", outcome="Running", rank_logs={"master-0": log})
    stuck = get_training_job(job_name="stuck", **K8S)
    assert [f.code for f in stuck.findings] == ["job_hung"]


def test_someone_elses_hf_token_secret_is_refused_and_keeps_its_value(
    operator, kube_api, monkeypatch
):
    """Issue 45 finding 8: a Secret of the suite's name without the suite's label is
    another user's; before, a 409 on create was followed by a patch of its data."""
    theirs = base64.b64encode(b"hf_TheirOwnToken").decode()
    kube_api.emulator.objects["v1/secrets", "default", "fsdp-eks-hf-token"] = {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": {"token": theirs},
        "metadata": {"name": "fsdp-eks-hf-token", "namespace": "default"},
    }  # fmt: skip
    deploy(job_name="first")  # no token in the environment: the Secret is not touched
    monkeypatch.setenv("HF_TOKEN", CANARY)
    refused = failure(deploy)
    assert refused.code == "not_ours" and refused.details["kind"] == "Secret"
    assert CANARY not in json.dumps(refused.to_dict())
    # A replace is refused before it deletes the running job (a member the finding did
    # not name: the check runs before any write, not only at the Secret's).
    operator.run("first", outcome="Running")
    again = failure(deploy, job_name="first", replace=True, confirm=True)
    assert again.code == "not_ours" and exists("first") and not exists("llama")
    secret = kube_api.emulator.objects["v1/secrets", "default", "fsdp-eks-hf-token"].raw
    assert secret["data"] == {"token": theirs}


def test_the_suites_own_hf_token_secret_is_updated_in_place(operator, kube_api, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", CANARY)
    deploy(job_name="one")
    monkeypatch.setenv("HF_TOKEN", CANARY + "2")
    deploy(job_name="two")
    secret = kube_api.emulator.objects["v1/secrets", "default", "fsdp-eks-hf-token"].raw
    assert base64.b64decode(secret["data"]["token"]).decode() == CANARY + "2"
