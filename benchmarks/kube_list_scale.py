"""Issue 49 item 2: list_training_jobs on Kubernetes (a page of 20, and a status filter
that matches none) while the namespace holds 62 / 250 / 1,000 of the suite's jobs (two
pods each) and as many jobs of other users with their pods, plus as many ConfigMaps
(`objects`: all the namespace holds, 7 a job of the suite's).

The API server is kmock in a child process, so what is measured here is the list's own
work: per call, the requests the server got, the whole objects it sent (metadata-only
items apart), the wall time and the list's CPU time (medians of 3), the peak traced
memory of the call (a fourth call, traced), then the growth exponent k of CPU time,
wall time and memory against the suite's jobs (log ratio over log 16). The wall time
includes kmock's, which reads a chunk by key range from its continue key as an API
server does (tests/services/kube.py `KeyedObjects`; it filtered every object per chunk).

`--quick` runs the smallest size once (the test suite runs it)."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUICK = "--quick" in sys.argv
SIZES = [62] if QUICK else [62, 250, 1_000]
ROUNDS = 1 if QUICK else 3
PAGE = 20
LOG = '{"event": "summary", "steps": 6, "max_steps": 6}\n'


# --- the API server's process ------------------------------------------------------------


def _job(name: str, second: int, labels: dict[str, str]) -> dict[str, Any]:
    """A PyTorchJob as the suite renders one (its command, env, volumes), ended."""
    from skills.training_job_deployer.job_spec import JobSpec
    from skills.training_job_deployer.targets.kubernetes.manifest import render
    from skills.training_job_deployer.targets.kubernetes.render_inputs import RenderInputs
    from skills.training_job_deployer.targets.kubernetes.settings import (
        KubernetesDeploySettings,
    )

    global _TEMPLATE
    if _TEMPLATE is None:
        spec = JobSpec(job_name="template", num_nodes=2, gpu_per_node=8, max_steps=6)
        settings = KubernetesDeploySettings(instance_type="p5.48xlarge")
        _TEMPLATE = render(RenderInputs(spec, settings, "localhost:9/fsdp:v1", None))
    job = json.loads(json.dumps(_TEMPLATE).replace("template", name))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_700_000_000 + second))
    job["metadata"].update(namespace="default", labels=labels, creationTimestamp=stamp)
    job["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    return job


_TEMPLATE: dict[str, Any] | None = None


def _seed(kube: Any, start: int, end: int) -> None:
    from skills.kube.pods import JOB_NAME_LABEL
    from skills.shared.ownership import managed_labels
    from skills.training_job_deployer.targets.kubernetes.manifest import LABEL_JOB
    from tests.services.kube import PYTORCHJOB

    objects = kube.emulator.objects
    for i in range(start, end):
        for name, labels in (
            (f"ours-{i:05d}", managed_labels(**{LABEL_JOB: f"ours-{i:05d}"})),
            (f"theirs-{i:05d}", {"team": "others"}),
        ):
            objects[PYTORCHJOB, "default", name] = _job(name, i, labels)
            for replica in ("master-0", "worker-0"):
                pod = f"{name}-{replica}"
                objects["v1/pods", "default", pod] = {
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": pod, "namespace": "default",
                                 "labels": {JOB_NAME_LABEL: name}},
                    "status": {"phase": "Succeeded"},
                }  # fmt: skip
                kube.set_pod_log("default", pod, LOG)
        objects["v1/configmaps", "default", f"cm-{i:05d}"] = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i:05d}", "namespace": "default"}, "data": {"k": "v"},
        }  # fmt: skip


def serve() -> None:
    """The child: kmock; reads `seed END` / `count` lines, answers one JSON line each."""
    from tests.services.kube import kube_server

    with kube_server() as kube:
        print(json.dumps({"kubeconfig": str(kube.kubeconfig)}), flush=True)
        seeded = 0
        for line in sys.stdin:
            word, *rest = line.split()
            if word == "seed":
                end = int(rest[0])
                _seed(kube, seeded, end)
                seeded = end
            emulator = kube.emulator
            print(json.dumps({"requests": len(emulator._requests),
                              "served": emulator.listed_objects,
                              "metadata": emulator.listed_metadata}), flush=True)  # fmt: skip


# --- the client's process ----------------------------------------------------------------


class Server:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, cwd=ROOT,
        )  # fmt: skip
        self.kubeconfig = self._answer()["kubeconfig"]

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        return json.loads(self.process.stdout.readline())

    def ask(self, line: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return self._answer()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(30)


def _row(*cells: Any) -> None:
    print(" | ".join(f"{c:>9}" for c in cells))


def _exponent(sizes: list[int], values: list[float]) -> float:
    return math.log(values[-1] / values[0]) / math.log(sizes[-1] / sizes[0])


def main() -> None:
    server = Server()
    os.environ["KUBECONFIG"] = server.kubeconfig
    from commands.list_training_jobs import list_training_jobs

    calls = {
        "page": lambda: list_training_jobs(target="kubernetes", limit=PAGE),
        "none": lambda: list_training_jobs(target="kubernetes", limit=PAGE, status="failed"),
    }
    measured: dict[str, list[tuple[float, float, float]]] = {name: [] for name in calls}
    try:
        print(f"list_training_jobs (Kubernetes, a page of {PAGE}; 'none': a status filter "
              "that matches none)")  # fmt: skip
        _row("jobs", "objects", "call", "requests", "served", "metadata", "wall ms",
             "cpu ms", "peak MiB", "shown")  # fmt: skip
        for size in SIZES:
            server.ask(f"seed {size}")
            for name, call in calls.items():
                before = server.ask("count")
                result = call()
                after = server.ask("count")
                walls, cpus = [], []
                for _ in range(ROUNDS):
                    start, cpu = time.perf_counter(), time.process_time()
                    call()
                    walls.append(time.perf_counter() - start)
                    cpus.append(time.process_time() - cpu)
                tracemalloc.start()
                call()
                peak = tracemalloc.get_traced_memory()[1] / 2**20
                tracemalloc.stop()
                wall, cpu = statistics.median(walls), statistics.median(cpus)
                measured[name].append((cpu, wall, peak))
                _row(size, 7 * size, name,
                     *(after[k] - before[k] for k in ("requests", "served", "metadata")),
                     f"{wall * 1000:.0f}", f"{cpu * 1000:.0f}", f"{peak:.2f}",
                     len(result.jobs))  # fmt: skip
    finally:
        server.close()
    if len(SIZES) > 1:
        for name, values in measured.items():
            k = [_exponent(SIZES, [v[i] for v in values]) for i in range(3)]
            print(f"{name}: growth exponent over {SIZES[-1] // SIZES[0]}x jobs: "
                  f"cpu {k[0]:.2f}, wall {k[1]:.2f}, memory {k[2]:.2f}")  # fmt: skip
    else:
        print("growth exponent: needs 3 sizes (run without --quick)")


if __name__ == "__main__":
    serve() if "--serve" in sys.argv else main()
