"""An agent's whole session, in the repo (issue 21): one MCP client over stdio against
the real server process, spawned as the shipped `.mcp.json` spawns it, on the local
stack (moto for AWS, docker-registry for ECR's data plane and as the Docker Hub mirror,
podman's Docker API, kmock for the cluster). The client knows only tools/list: every
call's arguments are checked against the tool's listed input schema before it is sent,
and after the first call of each stage it takes the next call from the result's own
structured `next_step` (adding only what an agent is told by its user: which cluster).

Stand-ins, said plainly: kmock runs no controllers, so `ClusterPlayer` plays the
Training Operator and the kubelets for each PyTorchJob the tools create: each replica's
container runs for real (tests/services/training_operator.py `train`): the command, args
and env the rendered job gives it, plus the env the operator injects, rendezvous names
mapped to loopback, the checkpoint claim a directory every pod shares. So the jobs train
(CPU, gloo), checkpoint and resume, and a manifest that cannot train fails here. The
first job is the 2-pod world (one rendezvous, world size 2, shards on the shared claim);
the OOM job runs one pod per attempt: its diagnosis, fix and resume are the subject, and
each pod costs two torch process starts (torchrun and its rank).
The pods run this checkout's venv, not the image: the image built here has no RUN steps
(podman here cannot RUN through its API: TEST-STACK.md), so the project is this repo's
Dockerfile and sources with the RUN instructions left out; the mirror holds stand-ins
(FROM scratch + a file) of every pytorch/pytorch tag the catalogue lists as published.
The OOM job's first attempt trains for real to its first checkpoint and then crashes
with a CUDA OOM traceback that the player writes (no CUDA OOM can happen on CPU).

Asserts: every call < 60 s, every result < 40 KB, no failed call with isError=false,
the CUDA gate loop converges in one rebuild. Prints the call count and total bytes."""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import Client, StdioServerParameters

from skills.catalog import cuda
from tests.services.training_operator import LOOK_S, Injected, JobRun, TrainingOperator

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CALL_LIMIT_S = 60.0
RESULT_LIMIT = 40 * 1024
TERMINAL = {"succeeded", "failed", "cancelled", "stopped", "deleted", "ready"}
# The nodes' driver: CUDA 12.4 at most, so the repo's CUDA 13.0 image is refused.
DRIVER = "550.127.08"
INSTANCE = "p4d.24xlarge"
CLAIM = "fsx-checkpoints"
# What the agent's user told it: the cluster (kmock's kubeconfig), its nodes and the
# FSx claim checkpoints go to (a hostPath is per node: two pods' shards would split).
CLUSTER_SETTINGS = {
    "target": "kubernetes",
    "kubernetes": {"instance_type": INSTANCE, "checkpoint_volume": f"pvc:{CLAIM}"},
}
# 2 pods of 1 CPU process each, a tiny model, a checkpoint every 3 steps.
SHAPE = {"num_nodes": 2, "gpu_per_node": 1, "max_steps": 6, "checkpoint_freq": 3}

RANK0_OOM = (
    "[rank0]: Traceback (most recent call last):\n"
    '[rank0]:   File "/app/trainer/train.py", line 212, in train_step\n'
    "[rank0]:     loss.backward()\n"
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 "
    "has a total capacity of 39.38 GiB of which 1.02 GiB is free.\n"
)


def _events(log: str, kind: str) -> list[dict[str, Any]]:
    lines = (json.loads(line) for line in log.splitlines() if line.startswith('{"event"'))
    return [e for e in lines if e["event"] == kind]


# ---------------------------------------------------------------------------- the stack


def _publish_bases(registry, docker_api, work: Path) -> None:
    """Stand-ins for every pytorch/pytorch runtime tag the catalogue lists as published
    (what Docker Hub holds), in the mirror under their real names."""
    import docker

    client = docker.DockerClient(base_url=docker_api.env["DOCKER_HOST"])
    (work / "os-release").write_text("stand-in for a pytorch/pytorch image\n")
    (work / "Dockerfile").write_text("FROM scratch\nCOPY os-release /etc/os-release\n")
    images = {cuda.official_image(i.torch, i.cuda, i.cudnn, "runtime")
              for release in cuda.TORCH_RELEASES for i in release.images}  # fmt: skip
    auth = {"username": registry.username, "password": registry.password}
    first, *rest = sorted(images)
    repo, tag = f"{registry.host}/{first}".rsplit(":", 1)
    list(client.api.build(path=str(work), tag=f"{repo}:{tag}", decode=True, rm=True))
    pushed = list(client.api.push(repo, tag=tag, stream=True, decode=True, auth_config=auth))
    assert not [e for e in pushed if "error" in e], pushed
    client.api.remove_image(f"{repo}:{tag}")  # builds pull the bases through the mirror
    # The other tags name the same stand-in: tagged in the registry, not pushed again
    # (each push through podman costs more CPU than the whole HTTP tag).
    for image in rest:
        other, other_tag = image.rsplit(":", 1)
        assert other == first.rsplit(":", 1)[0], image  # one repository: its blobs are there
        registry.tag(other, tag, other_tag)


def _project(tmp: Path) -> Path:
    """This repo's image sources, its Dockerfile without RUN (podman here cannot RUN)."""
    from dockerfile_parse import DockerfileParser

    project = tmp / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md", ".mcp.json"):
        shutil.copy(ROOT / name, project / name)
    for package in ("trainer", "skills", "commands", "mcp_server"):
        shutil.copytree(ROOT / package, project / package,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    parser = DockerfileParser(fileobj=open(ROOT / "Dockerfile", "rb"))  # noqa: SIM115
    lines = parser.content.splitlines(keepends=True)
    keep: list[str] = []
    for instruction in parser.structure:
        if instruction["instruction"] != "RUN":
            keep += lines[instruction["startline"] : instruction["endline"] + 1]
    (project / "Dockerfile").write_text("".join(keep))
    return project


class ClusterPlayer:
    """The Training Operator and kubelets kmock lacks: each new PyTorchJob (one with no
    status yet) gets pods whose containers run for real, by job name one plan per
    attempt (an injected crash or none)."""

    def __init__(self, operator: TrainingOperator, plans: dict[str, list[Injected | None]]) -> None:
        self.operator, self.plans = operator, plans
        self.runs: list[tuple[str, JobRun]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    @property
    def played(self) -> list[str]:
        return [f"{name}:{run.wait(0) or 'running'}" for name, run in self.runs]

    def __enter__(self) -> ClusterPlayer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.operator.stop()

    def _loop(self) -> None:
        attempts: dict[str, int] = {}
        while not self._stop.is_set():
            jobs = self.operator.custom.list_namespaced_custom_object(
                "kubeflow.org", "v1", self.operator.namespace, "pytorchjobs"
            )["items"]
            for job in jobs:
                name = job["metadata"]["name"]
                if job.get("status") or name not in self.plans:
                    continue
                number = attempts.get(name, 0)
                attempts[name] = number + 1
                plans = self.plans[name]
                inject = plans[min(number, len(plans) - 1)]
                self.runs.append((f"{name}#{number + 1}", self.operator.train(name, inject=inject)))
            time.sleep(LOOK_S)  # a list costs kmock and this client ~20 ms of CPU


# ---------------------------------------------------------------------------- the agent


@dataclass
class Reply:
    tool: str
    is_error: bool
    data: dict[str, Any]
    seconds: float
    size: int
    text: str = ""

    @property
    def status(self) -> str | None:
        return self.data.get("status")

    @property
    def next_step(self) -> dict[str, Any] | None:
        step = self.data.get("next_step") or (self.data.get("error") or {}).get("next_step")
        return step if isinstance(step, dict) else None


@dataclass
class Agent:
    """Knows tools/list; sends only calls that validate against it; records each call."""

    client: Client
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    log: list[Reply] = field(default_factory=list)

    async def start(self) -> None:
        tools = (await self.client.list_tools()).tools
        self.schemas = {t.name: t.input_schema for t in tools}
        listed = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
        self.listing_bytes = len(json.dumps({"tools": listed}, separators=(",", ":")).encode())

    async def call(self, tool: str, arguments: dict[str, Any]) -> Reply:
        jsonschema.validate(arguments, self.schemas[tool])  # an agent's call is well-formed
        started = time.monotonic()
        with anyio.fail_after(CALL_LIMIT_S + 30):
            result = await self.client.call_tool(tool, arguments)
        seconds = time.monotonic() - started
        text = "".join(getattr(c, "text", "") for c in result.content)
        structured = result.structured_content
        data = structured if structured is not None else _json_or_empty(text)
        size = len(text.encode()) + len(json.dumps(structured or {}).encode())
        reply = Reply(tool, bool(result.is_error), data, seconds, size, text)
        self.log.append(reply)
        # The session's rules, checked on every call.
        assert seconds < CALL_LIMIT_S, (tool, seconds)
        assert size < RESULT_LIMIT, (tool, size)
        failed = bool(data.get("error")) or reply.status == "failed"
        assert reply.is_error == failed, (tool, reply.is_error, data)
        return reply

    async def follow(self, reply: Reply, **told: Any) -> Reply:
        """Call the reply's next step as given, with what the user told the agent (a job
        name, the nodes' instance type) in place of the step's own choice."""
        step = reply.next_step
        assert step, (reply.tool, reply.data)
        arguments = {**step["arguments"]}
        for key, value in told.items():
            if isinstance(value, dict) and isinstance(arguments.get(key), dict):
                arguments[key] = {**arguments[key], **value}
            else:
                arguments[key] = value
        return await self.call(step["tool"], arguments)

    async def until_settled(self, reply: Reply, limit: int = 40) -> Reply:
        """Poll as the results say (get_operation / get_training_job) until terminal."""
        for _ in range(limit):
            step = reply.next_step
            if reply.status in TERMINAL or not step or step["tool"] not in POLLERS:
                return reply
            await anyio.sleep(0.5)
            reply = await self.follow(reply)
        raise AssertionError(f"{reply.tool} never settled: {reply.data}")


POLLERS = {"get_operation", "get_training_job", "get_codebuild_build"}


def _json_or_empty(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# ---------------------------------------------------------------------------- the session


@pytest.fixture
def stack(moto_server, registry, docker_api, kube_api, tmp_path) -> Iterator[dict[str, Any]]:
    kube_api.reset()
    config_dir = tmp_path / "docker-config"
    config_dir.mkdir()
    auth = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    (config_dir / "config.json").write_text(json.dumps({"auths": {registry.host: {"auth": auth}}}))
    bases = tmp_path / "bases"
    bases.mkdir()
    _publish_bases(registry, docker_api, bases)
    operator = TrainingOperator(kube_api, root=tmp_path / "cluster")
    operator.add_nodes(INSTANCE, 2, driver=DRIVER, efa=4)
    operator.add_claim(CLAIM)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DOCKER_CONFIG": str(config_dir),
           "FSDP_EKS_BASE_MIRROR": registry.host,
           "FSDP_EKS_STATE_DIR": str(tmp_path / "state")}  # fmt: skip
    for name in ("FSDP_EKS_WORKSPACE", "FSDP_EKS_ALLOW_PATHS", "ECR_REPOSITORY"):
        env.pop(name, None)
    yield {"project": _project(tmp_path), "env": env, "operator": operator}


def _shipped_server(project: Path, env: dict[str, str]) -> StdioServerParameters:
    """The server as the shipped .mcp.json starts it, from the project directory."""
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["fsdp-eks"]
    venv = project / ".venv"
    if not venv.exists():  # the project's venv is this checkout's: the launcher finds it
        venv.symlink_to(Path(sys.prefix))
    return StdioServerParameters(
        command=entry["command"], args=entry["args"], cwd=str(project), env=env
    )


def test_an_agent_goes_from_an_empty_account_to_a_finished_job_and_a_fixed_oom(stack):
    operator = stack["operator"]
    plans: dict[str, list[Injected | None]] = {
        "llama": [None],
        # The first attempt trains to its step-6 checkpoint, then its master pod dies with
        # a CUDA OOM traceback; the retry trains for real and resumes from that checkpoint.
        "oom": [Injected("master-0", after="checkpoint_saved", log=RANK0_OOM), None],
    }
    gate_calls: list[str] = []

    async def session() -> Agent:
        async with Client(_shipped_server(stack["project"], stack["env"])) as client:
            agent = Agent(client)
            await agent.start()
            # Source -> image: the shipped config's workspace is the project.
            built = await agent.until_settled(await agent.call("build_image", {}))
            assert built.status == "succeeded", built.data
            # Image -> registry, as the build's next step says.
            pushed = await agent.until_settled(await agent.follow(built))
            assert pushed.tool == "push_to_ecr" and pushed.status == "succeeded", pushed.data
            # CI for the repository.
            # CI for the repository: the user names the project, where the source lives, and
            # the region; the repository is the one the push made.
            pushed_to = pushed.data.get("result") or pushed.data
            ci = await agent.call("setup_codebuild", {
                "project_name": "fsdp-eks-ci", "region": pushed_to["region"],
                "ecr_repository": pushed_to["repository"],
                "source_url": "https://github.com/acme/fsdp-trainer",
            })  # fmt: skip
            assert not ci.is_error, ci.data
            # The cluster.
            checked = await agent.call("manage_eks_cluster", {"action": "validate"})
            assert not checked.is_error, checked.data
            # Registry -> cluster, as the push's next step says: the gate refuses CUDA 13.
            deploy = pushed.next_step
            assert deploy and deploy["tool"] == "deploy_training_job", pushed.data
            job = {"job_name": "llama", **SHAPE}
            planned = await agent.follow(pushed, **job, **CLUSTER_SETTINGS)
            assert planned.status == "planned" and "cost" in planned.data, planned.data
            refused = await agent.follow(planned)  # the plan's own next step submits it
            gate_calls.append(refused.tool)
            assert refused.is_error and refused.data["error"]["code"] == "cuda_incompatible"
            # The gate's remedy: rebuild, push, deploy — one rebuild.
            rebuilt = await agent.until_settled(await agent.follow(refused))
            gate_calls.append(rebuilt.tool)
            assert rebuilt.tool == "build_image" and rebuilt.status == "succeeded", rebuilt.data
            repushed = await agent.until_settled(await agent.follow(rebuilt))
            gate_calls.append(repushed.tool)
            replanned = await agent.follow(repushed, **job, **CLUSTER_SETTINGS)
            gate_calls.append(replanned.tool)
            started = await agent.follow(replanned)
            gate_calls.append(started.tool)
            assert not started.is_error, started.data
            done = await agent.until_settled(started)
            assert done.status == "succeeded", done.data
            logs = await agent.call("get_training_job_logs", {"job_name": "llama",
                                                              "kubernetes": {}})  # fmt: skip
            assert not logs.is_error and '"event": "step"' in logs.text, logs.text  # said once
            # Trained for real: two pods, one world, checkpoints on the claim.
            assert _events(logs.text, "start")[0]["world_size"] == 2, logs.text
            assert [e["step"] for e in _events(logs.text, "checkpoint_saved")] == [3, 6]
            # A job that runs out of memory, with auto_retry: diagnosed, fixed, resumed.
            image = repushed.next_step["arguments"]["kubernetes"]["image_uri"]  # the fixed one
            oom = await agent.call("deploy_training_job", {
                # A checkpoint every 6 of 12 steps: the injected crash (after step 6's)
                # lands before the next one even when this host's load delays the kill.
                "job_name": "oom", **SHAPE, "num_nodes": 1, "max_steps": 12, "checkpoint_freq": 6,
                "train_batch_size": 8, "grad_accum_steps": 2,
                "auto_retry": True, "target": "kubernetes",
                "kubernetes": {**CLUSTER_SETTINGS["kubernetes"], "image_uri": image},
            })  # fmt: skip
            # Two real attempts (each one pod: 2 torch processes) and a diagnosis between.
            fixed = await agent.until_settled(oom, limit=480)
            assert fixed.status == "succeeded", json.dumps(fixed.data, indent=1)[:6000]
            assert "cuda_oom" in json.dumps(fixed.data), fixed.data
            # The retry resumed from the checkpoint the first attempt saved before it died.
            retried = await agent.call("get_training_job_logs", {"job_name": "oom",
                                                                 "kubernetes": {}})  # fmt: skip
            assert [e["step"] for e in _events(retried.text, "checkpoint_loaded")] == [6]
            assert _events(retried.text, "start")[0]["resumed_from"] == 6, retried.text
            return agent

    with ClusterPlayer(operator, plans) as player:
        agent = anyio.run(session)
    # The refused submit made no job; the OOM job ran twice (the retry resumed).
    assert player.played == ["llama#1:Succeeded", "oom#1:Failed", "oom#2:Succeeded"]
    assert (stack["operator"].root / "claims" / CLAIM / "oom" / "step-12").is_dir()
    total = sum(reply.size for reply in agent.log)
    print(f"\nagent session: {len(agent.log)} calls, {total} bytes of results, "
          f"tools/list {agent.listing_bytes} bytes; gate loop: {len(gate_calls)} calls "
          f"({' -> '.join(gate_calls)})")  # fmt: skip
    assert gate_calls.count("build_image") == 1
