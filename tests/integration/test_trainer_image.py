"""The shipped Dockerfile, unchanged, built for real and run as a cluster runs it.

The base is a faithful stand-in of `pytorch/pytorch` (services/standin_base.py: Debian
root filesystem, python/pip/torchrun in /opt/conda/bin, the CPU torch of the base's
version) under the base's own name; `podman build --isolation chroot` runs the RUN steps
with the build arguments build_image would pass. The built image is then run as a
runtime would (services/container.py: its user, env, workdir, entrypoint): 2 ranks train
with checkpoints in s3:// (moto), a new container resumes from them, a third exports the
model to s3://, and the export loads in transformers. What the job imports must be in the
image: nothing is installed at run time (the export's python imports every one first).

Measured and printed (pytest -s): build time cold, after a code-only change and with
nothing changed, image size, time from container start to the first training step, the
base's build time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from commands.build_image import build_image
from skills.image_builder import dockerfile_reader
from skills.image_builder.image_labels import label_build_args
from tests.services.container import mounted_container
from tests.services.podman import podman_cli
from tests.unit.test_trainer_deps import OPTIONAL, run_time_imports

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "localhost/fsdp-eks-trainer:under-test"
SMALL = ["--seq_len", "64", "--train_batch_size", "4", "--validation_freq", "0"]
# Few steps: what is asserted is where checkpoints land and where training resumes, not
# how far it gets; each step is one forward/backward per rank.
SMALL += ["--log_freq", "1", "--warmup_steps", "1", "--checkpoint_freq", "2"]
MEASURED: dict[str, float | int | str] = {}


def _makefile_torch() -> str:
    pin = re.search(r"^TORCH\s*\?=\s*torch==(\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert pin, "the Makefile pins torch (TORCH ?= torch==X)"
    return pin.group(1)


def _context(tmp: Path) -> Path:
    """The checkout as a user has it (tracked and new, unignored files), in a directory
    the test may change; the Dockerfile in it is the shipped one, byte for byte."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard",
                             "-z"], capture_output=True, check=True).stdout  # fmt: skip
    context = tmp / "context"
    for name in filter(None, listed.decode().split("\0")):
        source, target = ROOT / name, context / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():  # as git checks it out: a link, not its target's bytes
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            target.write_bytes(source.read_bytes())
    assert (context / "Dockerfile").read_bytes() == (ROOT / "Dockerfile").read_bytes()
    return context


@pytest.fixture(scope="module")
def image(standin_bases, tmp_path_factory):
    """(podman CLI, the built image's inspect record)."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    base = dockerfile_reader.read(dockerfile).froms[-1].image
    analyzed = build_image(dockerfile=str(ROOT / "Dockerfile"), analyze_only=True)
    torch = analyzed.resolved.torch
    # The stand-in is the base's torch, and the one the project pins for CI.
    assert torch and torch == _makefile_torch(), (torch, _makefile_torch())
    started = time.monotonic()
    stand_in = standin_bases(base, torch=torch)
    MEASURED["base_standin"] = "reused" if stand_in.reused else "built"
    MEASURED["base_standin_build_s"] = stand_in.build_seconds or round(
        time.monotonic() - started, 1
    )
    # The build arguments build_image passes (its labels; none changes a layer).
    build_args = label_build_args(dockerfile, analyzed.labels)
    assert build_args == {"TORCH_VERSION": torch, "CUDA_VERSION": analyzed.resolved.cuda}
    context = _context(tmp_path_factory.mktemp("image"))
    with podman_cli(image_stores=[stand_in.store]) as cli:
        flags = [f"--build-arg={k}={v}" for k, v in build_args.items()]
        build = ["build", "--isolation", "chroot", *flags, "-t", IMAGE, str(context)]
        started = time.monotonic()
        cold = cli(*build, timeout=1200)
        MEASURED["build_cold_s"] = round(time.monotonic() - started, 1)
        (inspected,) = json.loads(cli("image", "inspect", IMAGE).stdout)

        # A code-only change: the dependency layer comes from the cache (the Dockerfile's
        # promise: layers from rarely to often changed).
        init = context / "trainer" / "__init__.py"
        init.write_text(init.read_text() + "\n# a code-only change\n")
        started = time.monotonic()
        again = cli(*build[:-3], "-t", IMAGE + "-code", str(context), timeout=1200)
        MEASURED["build_code_change_s"] = round(time.monotonic() - started, 1)
        steps = _steps(again.stdout)
        install = next(i for i, s in enumerate(steps) if "pip install -r" in s[0])
        assert all(cached for _, cached in steps[1 : install + 1]), steps
        copy_trainer = next(i for i, s in enumerate(steps) if s[0].startswith("COPY trainer/"))
        assert not steps[copy_trainer][1], "the changed source is copied again"
        # Nothing changed: every step from the cache.
        started = time.monotonic()
        same = cli(*build[:-3], "-t", IMAGE + "-code", str(context), timeout=1200)
        MEASURED["build_cached_s"] = round(time.monotonic() - started, 1)
        assert all(cached for _, cached in _steps(same.stdout)[1:]), _steps(same.stdout)
        assert cold.returncode == again.returncode == same.returncode == 0
        MEASURED["image_size_bytes"] = int(inspected["Size"])
        yield cli, inspected
    print("\nMEASURED " + json.dumps(MEASURED))


def _steps(log: str) -> list[tuple[str, bool]]:
    """[(instruction, came from the cache)] from a podman build log."""
    out: list[tuple[str, bool]] = []
    for line in log.splitlines():
        if match := re.match(r"STEP \d+/\d+: (.*)", line):
            out.append((match.group(1), False))
        elif line.startswith("--> Using cache") and out:
            out[-1] = (out[-1][0], True)
    return out


def test_the_image_is_the_shipped_dockerfiles_with_its_own_user_and_entrypoint(image):
    _, inspected = image
    config = inspected["Config"]
    assert config["User"] == "1000:1000" and config["WorkingDir"] == "/workspace"
    assert config["Entrypoint"] == ["torchrun"]
    assert config["Cmd"] == ["--standalone", "--nproc_per_node=gpu", "-m", "trainer"]
    assert config["Labels"]["fsdp-eks.torch"] == _makefile_torch()
    assert any(e.startswith("PATH=") and "/opt/conda/bin" in e for e in config["Env"])


def _job_env(moto_server) -> dict[str, str]:
    """What a pod gets for S3: the endpoint and credentials (no host config files)."""
    keep = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    env = {k: moto_server.env[k] for k in keep}
    return {**env, "AWS_DEFAULT_REGION": moto_server.region, "AWS_EC2_METADATA_DISABLED": "true"}


def _run(cli, args, env, *, entrypoint=None, timeout=900) -> Ran:
    """One container from IMAGE, run to its end."""
    events: list[dict] = []
    first_step: list[float] = []
    with mounted_container(cli, IMAGE) as box:
        started = time.monotonic()
        proc = box.start(args, env, entrypoint=entrypoint, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)  # fmt: skip
        err: list[str] = []
        reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
        reader.start()
        for line in proc.stdout:
            event = json.loads(line)
            if event.get("event") == "step" and not first_step:
                first_step.append(round(time.monotonic() - started, 1))
            events.append(event)
        proc.wait(timeout=timeout)
        reader.join(timeout=30)
    return Ran(events, "".join(err), proc.returncode, first_step[0] if first_step else None)


@dataclass
class Ran:
    events: list[dict]
    stderr: str
    returncode: int
    first_step_s: float | None  # from the container's start to its first `step` event

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["event"] == kind]


# The export's python imports every module the trainer imports at run time first, then runs
# `-m trainer.export` as `python -m` would: the imports check needs no container (and no
# torch start) of its own.
EXPORT = """import importlib, json, runpy, sys
modules = {modules!r}
for name in modules:
    importlib.import_module(name)
print(json.dumps({{"event": "imported", "modules": modules}}), flush=True)
runpy.run_module("trainer.export", run_name="__main__", alter_sys=True)
"""


def image_modules() -> list[str]:
    """What the trainer imports, less the modules behind one flag from an extra of their
    own (torchao: --float8), which the image leaves out and the flag names when missing."""
    return sorted(set(run_time_imports(ROOT / "trainer")) - set(OPTIONAL))


@pytest.fixture(scope="module")
def job(image, moto_server):
    """2 ranks train with checkpoints in s3://; a new container (a restarted pod: nothing of
    the first one's disk) resumes from them; a third exports the model to s3://. {name: Ran,
    "s3": client, "bucket": name, "remote": checkpoint dir}."""
    import boto3

    cli, _ = image
    bucket = f"image-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    remote = f"s3://{bucket}/ckpt"
    env = _job_env(moto_server)
    torchrun = ["--standalone", "--nproc_per_node=2", "-m", "trainer", *SMALL]
    torchrun += ["--checkpoint_dir", remote]
    trained = _run(cli, [*torchrun, "--max_steps", "4"], env)
    assert trained.returncode == 0, trained.stderr[-4000:]
    resumed = _run(cli, [*torchrun, "--max_steps", "5"], env)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    code = EXPORT.format(modules=image_modules())
    exported = _run(
        cli,
        ["-c", code, "--checkpoint", remote, "--out", f"s3://{bucket}/export"],
        env,
        entrypoint=["python"],
    )
    return {"trained": trained, "resumed": resumed, "exported": exported, "s3": s3,
            "bucket": bucket, "remote": remote}  # fmt: skip


def test_everything_the_trainer_imports_is_in_the_image(job):
    exported = job["exported"]
    imported = exported.of("imported")
    assert imported and imported[0]["modules"] == image_modules(), (
        exported.stderr[-3000:]
    )


def test_two_ranks_train_checkpoint_to_s3_resume_and_export(job, tmp_path):
    trained, resumed, exported = job["trained"], job["resumed"], job["exported"]
    s3, bucket, remote = job["s3"], job["bucket"], job["remote"]
    MEASURED["start_to_first_step_s"] = trained.first_step_s or -1
    assert trained.first_step_s is not None
    assert [e["path"] for e in trained.of("checkpoint_saved")] == [
        f"{remote}/step-2",
        f"{remote}/step-4",
    ]
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert {"ckpt/step-4/COMPLETE", "ckpt/step-4/__0_0.distcp", "ckpt/step-4/__1_0.distcp"} <= keys

    assert resumed.of("checkpoint_loaded")[0]["step"] == 4
    assert [e["step"] for e in resumed.of("step")] == [5]

    assert exported.returncode == 0, exported.stderr[-4000:]
    last = exported.events[-1]
    assert last["event"] == "exported" and last["step"] == 5, exported.events
    out = tmp_path / "export"
    out.mkdir()
    for obj in s3.list_objects_v2(Bucket=bucket, Prefix="export/")["Contents"]:
        target = out / obj["Key"].split("/", 1)[1]
        target.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, obj["Key"], str(target))
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.model_type == "llama" and sum(p.numel() for p in model.parameters())
