"""The order test files are handed to the xdist workers: longest first.

`make test` runs a file per worker at a time (--dist loadfile). xdist's default order
is by test count, most first, which put the few-test files that take minutes (the image
build, the agent session, the trainer's end-to-end runs) last: one worker finished alone
while the other core idled. Longest first, the short unit files fill the end and both
workers finish together. A file's weight is its seconds in the last run this checkout
timed it (pytest's cache, written by the controller at the end of a session), else the
estimate below, else nothing (a small file, most likely).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

CACHE_KEY = "fsdp-eks/file-seconds"

# Seconds per file on the 2-core dev machine with both workers busy (the sum of its tests'
# times in a full unloaded `make test`, 2026-11-26, pytest 588 s): the weights when the
# cache has none (a fresh clone, CI). Files under 10 s are left out: they fill the end in
# collected order.
ESTIMATED_SECONDS = {
    # 121 once the stand-in base exists; first anyway: on a fresh machine its first
    # use builds that base (minutes).
    "tests/integration/test_trainer_image.py": 300,
    "tests/integration/test_benchmark_quick_modes.py": 106,
    "tests/integration/test_long_runs.py": 73,
    "tests/integration/test_job_hardening.py": 70,
    # estimated: five real torchrun runs (one of 2 pods), as test_pods_run's scale
    "tests/integration/test_trainer_v2_standin.py": 60,
    "tests/integration/test_slurm_target.py": 56,
    "tests/integration/test_fuzz_tools.py": 53,
    "tests/e2e/test_agent_session.py": 47,
    "tests/integration/test_local_training.py": 47,
    "tests/trainer/test_checkpoint_resume.py": 41,
    "tests/integration/test_pods_run.py": 34,
    "tests/integration/test_build_image.py": 28,
    "tests/trainer/test_progress_status.py": 25,  # estimated: a 2-rank torchrun, 4 runs
    "tests/integration/test_model_server_local.py": 24,
    "tests/trainer/test_trainer_parallel.py": 23,
    "tests/integration/test_cuda_gate_loop.py": 20,
    "tests/integration/test_operations.py": 19,
    "tests/trainer/test_memory_estimate.py": 19,
    "tests/integration/test_eks_storage_cleanup.py": 18,
    "tests/trainer/test_hub.py": 17,
    "tests/integration/test_kubernetes_target.py": 14,
    "tests/trainer/test_families.py": 13,
    "tests/unit/test_local_target.py": 13,
    "tests/integration/test_job_tools.py": 13,
    "tests/trainer/test_trainer_e2e.py": 13,
    "tests/integration/test_shipped_configs.py": 12,
    "tests/integration/test_auto_retry.py": 12,
    "tests/integration/test_mcp_surface.py": 12,
    "tests/integration/test_one_truth.py": 12,
    "tests/unit/test_shared_reads.py": 11,
    "tests/integration/test_mcp_project.py": 10,
    # Estimated (issue 46): an install, a served dry run and a 2-step job, two servers.
    "tests/integration/test_users_packages.py": 25,
    "tests/unit/test_installer.py": 20,
    "tests/integration/test_long_logs.py": 10,
}


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def longest_first(nodeids: Sequence[str], timed: Mapping[str, float]) -> list[int]:
    """Indexes of `nodeids` reordered: whole files, heaviest first (timed seconds, else
    the estimate, else 0); within a file, and between files of equal weight, the
    collected order."""
    first_seen: dict[str, int] = {}
    for i, nodeid in enumerate(nodeids):
        first_seen.setdefault(file_of(nodeid), i)

    def seconds(path: str) -> float:
        return float(timed.get(path, ESTIMATED_SECONDS.get(path, 0)))

    files = sorted(first_seen, key=lambda path: (-seconds(path), first_seen[path]))
    rank = {path: r for r, path in enumerate(files)}
    return sorted(range(len(nodeids)), key=lambda i: (rank[file_of(nodeids[i])], i))
