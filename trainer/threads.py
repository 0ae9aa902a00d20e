"""Intra-op threads per CPU process: one torch-free decision, shared by the trainer
(which sets them) and the local target (which plans OMP_NUM_THREADS for its ranks
without importing torch into every CLI start)."""

from __future__ import annotations


def choose_num_threads(cpu_count: int, local_world_size: int, omp_num_threads: str | None) -> int:
    """An explicit OMP_NUM_THREADS wins where it is a whole number of at least 1, as in
    torchrun and OpenMP (which ignore 0, negatives and words). Otherwise split the cores
    evenly between the processes on this host: oversubscribing (2 procs x 2 threads on
    2 cores) makes gloo collectives and matmuls fight for cores and spin waiting."""
    explicit = (omp_num_threads or "").strip()
    if explicit.isdigit() and int(explicit) >= 1:
        return int(explicit)
    return max(1, cpu_count // max(1, local_world_size))
