"""The kubernetes target on kmock, against a bare client in the same run.

1. Time from the CLI call to the PyTorchJob created: `python commands/deploy_training_job.py
   --kubeconfig K --num_nodes 4 ... --wait_seconds 0` as a person types it (a new process:
   imports, plan, CRD schema validation, CRD discovery, existence check, node list for the
   gate and quota, create), against a new process that only imports the kubernetes
   client and POSTs the same manifest.
2. API requests per monitor poll for jobs of 2, 8 and 32 pods (counted by kmock), against
   a per-pod monitor (job + per pod: get + log).

The Training Operator is played by tests/services/training_operator.py. The image is in
the test stack's registry (Debian docker-registry), labelled as build_image labels the
project's image, so the CUDA gate reads it and passes as it would for a pushed image
(the registry's user and password reach the CLI through REGISTRY_HOST, _USERNAME and
_PASSWORD: the credential policy's environment entry). Prints medians and ratios.

`--quick` (the test suite runs it): one round, and a 2-pod job's poll; the manifest the
bare client POSTs comes from the round's own CLI call (--include_plan), not from a dry
run of its own (a CLI process fewer)."""

from __future__ import annotations

import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.services.kube import kube_server  # noqa: E402
from tests.services.registry import registry_server  # noqa: E402
from tests.services.training_operator import TrainingOperator  # noqa: E402

QUICK = "--quick" in sys.argv
ROUNDS = 1 if QUICK else 5
POLL_PODS = (2,) if QUICK else (2, 8, 32)
LABELS = {"fsdp-eks.torch": "2.13.0", "fsdp-eks.cuda": "13.0", "fsdp-eks.efa": "true"}

BARE = """
import json, sys
from kubernetes import client, config
config.load_kube_config(sys.argv[1])
manifest = json.load(open(sys.argv[2]))
client.CustomObjectsApi().create_namespaced_custom_object(
    "kubeflow.org", "v1", "default", "pytorchjobs", manifest, _preload_content=False)
"""


def _cli(
    kubeconfig: Path, image: str, job: str, dry_run: bool = False, include_plan: bool = False
) -> list[str]:
    argv = [sys.executable, str(ROOT / "commands/deploy_training_job.py"),
            "--kubeconfig", str(kubeconfig), "--num_nodes", "4", "--gpu_per_node", "8",
            "--instance_type", "p5.48xlarge", "--job_name", job, "--model_type", "llama_v3_8b",
            "--max_steps", "1000", "--image_uri", image, "--wait_seconds", "0",
            "--json"]  # fmt: skip
    return argv + ["--dry_run"] * dry_run + ["--include_plan"] * include_plan


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed: {done.stderr[-2000:]}")
    return elapsed, done.stdout


def main() -> None:
    from skills.training_job_deployer.targets.kubernetes.settings import KubernetesSettings
    from skills.training_job_deployer.targets.kubernetes.target import KubernetesTarget

    with (
        kube_server() as kube,
        registry_server(password=secrets.token_hex(12)) as registry,
        tempfile.TemporaryDirectory(prefix="fsdp-bench-") as tmp,
    ):
        image = registry.push_labelled_image("fsdp", "v1", LABELS)
        credentials = {"REGISTRY_HOST": registry.host, "REGISTRY_USERNAME": registry.username,
                       "REGISTRY_PASSWORD": registry.password}  # fmt: skip
        env = {**os.environ, **kube.env, **credentials, "PYTHONPATH": str(ROOT)}
        os.environ.update(kube.env)
        operator = TrainingOperator(kube)
        operator.add_nodes("p5.48xlarge", 4, efa=32)
        planned = None  # --quick: see the docstring
        if not QUICK:
            planned = json.loads(_timed(_cli(kube.kubeconfig, image, "planned", True), env)[1])
        manifest_file = Path(tmp) / "manifest.json"
        tool_s, bare_s = [], []
        for i in range(ROUNDS):
            argv = _cli(kube.kubeconfig, image, f"tool-{i}", include_plan=planned is None)
            elapsed, out = _timed(argv, env)
            planned = planned or json.loads(out)
            assert operator.job(f"tool-{i}")["kind"] == "PyTorchJob"
            tool_s.append(elapsed)
            manifest = {**planned["plan"]["manifest"]}
            manifest["metadata"] = {**manifest["metadata"], "name": f"bare-{i}"}
            manifest_file.write_text(json.dumps(manifest))
            code = [sys.executable, "-c", BARE, str(kube.kubeconfig), str(manifest_file)]
            bare_s.append(_timed(code, env)[0])
            assert operator.job(f"bare-{i}")["kind"] == "PyTorchJob"
        tool, bare = statistics.median(tool_s), statistics.median(bare_s)
        print(f"CLI call -> PyTorchJob created on kmock: {tool:.2f} s median of {ROUNDS}")
        print(f"  bare client POST of the same manifest (new process): {bare:.2f} s")
        print(f"  ratio tool / bare: {tool / bare:.2f}x (+{tool - bare:.2f} s for plan, CRD "
              "validation, discovery, existence check, gate, quota)")  # fmt: skip

        target = KubernetesTarget(KubernetesSettings())
        for nodes in POLL_PODS:
            name = f"poll-{nodes}"
            manifest = {**planned["plan"]["manifest"]}
            manifest["metadata"] = {**manifest["metadata"], "name": name}
            worker = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]
            manifest["spec"]["pytorchReplicaSpecs"]["Worker"] = {**worker, "replicas": nodes - 1}
            target.client.create_job(manifest)
            operator.run(name, outcome="Running")
            before = len(kube.emulator._requests)
            start = time.perf_counter()
            target.poll(name)
            poll_ms = (time.perf_counter() - start) * 1000
            requests = len(kube.emulator._requests) - before
            per_pod = 1 + 2 * nodes  # a monitor reading each pod and its log
            print(f"poll of a {nodes}-pod job: {requests} API requests ({poll_ms:.0f} ms); "
                  f"per-pod monitor: {per_pod} ({per_pod / requests:.1f}x more)")  # fmt: skip


if __name__ == "__main__":
    main()
