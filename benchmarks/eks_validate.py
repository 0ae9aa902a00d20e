"""manage_eks_cluster action=validate against kmock: wall time and Kubernetes API calls
for clusters of 4, 16 and 64 GPU nodes, against a baseline measured in the same run:
the per-node way (list the nodes, then read each node and list its pods by nodeName)
that a script with the generated client tends to do.

    .venv/bin/python benchmarks/eks_validate.py
Calls are counted by the server (kmock's request log), not by the client."""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from commands.manage_eks_cluster import manage_eks_cluster  # noqa: E402
from tests.services import eks_cluster as seed  # noqa: E402
from tests.services.kube import kube_server  # noqa: E402

QUICK = "--quick" in sys.argv  # 4 nodes, once (the test suite runs it)
SIZES = (4,) if QUICK else (4, 16, 64)
REPEATS = 1 if QUICK else 3


def per_node_baseline(kubeconfig: str) -> None:
    from kubernetes import client

    from skills.kube.access import kube_api_client

    core = client.CoreV1Api(kube_api_client(kubeconfig))
    for node in core.list_node().items:
        core.read_node(node.metadata.name)
        core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node.metadata.name}")


def measure(kube, fn) -> tuple[float, int]:
    requests = kube.emulator._requests
    times, calls = [], 0
    for _ in range(REPEATS):
        before = len(requests)
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        calls = len(requests) - before
    return statistics.median(times), calls


def main() -> None:
    with kube_server() as kube:
        os.environ.update(kube.env)
        config = str(kube.kubeconfig)
        seed.seed_healthy(kube)
        manage_eks_cluster(kubeconfig=config)  # warm: imports and the first connection
        print(
            f"{'nodes':>5} {'validate ms':>12} {'calls':>6} {'per-node ms':>12} {'calls':>6} "
            f"{'time ratio':>10} {'call ratio':>10}"
        )
        for size in SIZES:
            kube.reset()
            seed.seed_healthy(kube, gpu_nodes=size)
            ours, our_calls = measure(
                kube,
                lambda: manage_eks_cluster(
                    kubeconfig=config, checkpoint_pvc="ckpt", rdzv_backend="etcd"
                ),
            )
            base, base_calls = measure(kube, lambda: per_node_baseline(config))
            print(
                f"{size:>5} {ours * 1000:>12.1f} {our_calls:>6} {base * 1000:>12.1f} "
                f"{base_calls:>6} {ours / base:>10.2f} {our_calls / base_calls:>10.3f}"
            )


if __name__ == "__main__":
    main()
