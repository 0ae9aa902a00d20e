"""The Slurm batch script as a pure function of the job, its settings and what the
partition's nodes have (PartitionInfo): no scheduler is asked here, so the script for
a 4 x 8-GPU EFA partition is unit-tested on a machine with no GPU.

GPU or CPU is decided from the partition, by the local target's rule: nodes with GPUs
(Gres gpu:N) get `--gpus-per-node` and one process per GPU; nodes without GPUs run
gpu_per_node CPU processes (the trainer then picks gloo). EFA (NCCL over libfabric) is
set up when every node of the partition has the feature `efa` (ParallelCluster and
most AWS Slurm setups tag EFA nodes so).

Values typed by a user reach the script in two ways only: in `#SBATCH` lines, which
sbatch reads without a shell, after strict patterns (job name, partition, account,
time, log directory); and in the shell body, always through shlex.quote.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import jinja2

from skills.catalog.instances import instance_spec
from skills.kube.efa import efa_env, has_rdma
from skills.shared.errors import ErrorCode, ToolFailure

TEMPLATE = "slurm_batch.sh.j2"
# Seconds between the time limit's SIGTERM and the kill: the trainer's checkpoint.
GRACE_S = 120
# Set where the nodes have EFA (see CUDA-AND-FAILURES: "EFA not used"), next to the
# EFA variables of skills.kube.efa: the host's own interfaces include docker's.
NCCL_SOCKET_IFNAME = "^lo,docker"
# A path sbatch reads in `#SBATCH --output=` (no shell, no quoting): plain characters
# only, and no '%' (Slurm's filename patterns).
SBATCH_PATH = r"^[A-Za-z0-9_./+=@-]+$"
_GRES_GPU = re.compile(r"(?:^|,)gpu(?::[A-Za-z0-9_.-]+)?:(\d+)")


@dataclass(frozen=True)
class PartitionInfo:
    """What the nodes of a partition have (the least of each, over its nodes)."""

    name: str
    nodes: int
    cpus_per_node: int | None  # None: not read (a dry run without Slurm: see assumed)
    gpus_per_node: int = 0
    efa: bool = False
    # RDMA read: every node names a catalogue instance type with it among its features
    # (ParallelCluster lists the instance type there).
    rdma: bool = False
    # The catalogue instance type every node names among its features (one for all the
    # partition's nodes), else None: what a dry run prices.
    instance_type: str | None = None

    @classmethod
    def from_sinfo(cls, name: str, lines: list[tuple[str, str, str, str]]) -> PartitionInfo:
        """From `sinfo --format=%c|%G|%f|%D` rows of one partition (CPUs, Gres,
        features, node count; one row per group of alike nodes)."""
        gpus = [_gpus(gres) for _, gres, _, _ in lines]
        return cls(
            name=name,
            nodes=sum(int(count) for *_, count in lines),
            cpus_per_node=min(int(cpus.rstrip("+")) for cpus, *_ in lines),
            gpus_per_node=min(gpus),
            efa=all("efa" in features.lower().split(",") for _, _, features, _ in lines),
            rdma=all(
                any(has_rdma(f) for f in features.lower().split(",")) for _, _, features, _ in lines
            ),
            instance_type=_one_instance_type([features for _, _, features, _ in lines]),
        )

    @classmethod
    def assumed(cls, name: str, num_nodes: int, gpu_per_node: int) -> PartitionInfo:
        """A partition that sinfo could not read, taken to be what the job asks for:
        `num_nodes` nodes of `gpu_per_node` GPUs; CPUs, EFA and instance type unknown, so
        the script claims none of them (a dry run's preview; submit reads the real one)."""
        return cls(name=name, nodes=num_nodes, cpus_per_node=None, gpus_per_node=gpu_per_node)

    @staticmethod
    def facts_not_read(partition_named: bool) -> list[str]:
        """What `assumed` does not know, as the dry run names it."""
        facts = ["node count", "GPUs per node", "CPUs per node", "EFA", "instance type"]
        return facts if partition_named else ["default partition", *facts]


def _one_instance_type(feature_lists: list[str]) -> str | None:
    """The catalogue instance type named in every node group's features, if one."""
    names: set[str | None] = set()
    for features in feature_lists:
        known = {name for name in map(_catalogue_name, features.lower().split(",")) if name}
        names.add(known.pop() if len(known) == 1 else None)
    return names.pop() if len(names) == 1 else None


def _catalogue_name(feature: str) -> str | None:
    try:
        return instance_spec(feature).name
    except ToolFailure:  # most features are not instance types ("efa", "static", ...)
        return None


def _gpus(gres: str) -> int:
    return sum(int(n) for n in _GRES_GPU.findall(gres))


@dataclass(frozen=True)
class Layout:
    """How the job sits on the nodes."""

    nodes: int
    nproc_per_node: int
    gpus_per_node: int | None  # None: CPU processes
    cpus_per_task: int | None  # None: not known (the script asks for none)

    @property
    def omp_threads(self) -> int | None:
        if self.cpus_per_task is None:
            return None
        return max(1, self.cpus_per_task // self.nproc_per_node)


def layout(num_nodes: int, gpu_per_node: int, partition: PartitionInfo) -> Layout:
    """The job's shape on this partition, or a typed failure when it does not fit."""
    where = f"partition {partition.name!r}"
    if num_nodes > partition.nodes:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"num_nodes={num_nodes} but {where} has {partition.nodes} node(s).",
            f"Use num_nodes={partition.nodes} or fewer, or another partition.",
            {"partition": partition.name, "nodes": partition.nodes},
        )
    if partition.gpus_per_node:
        if gpu_per_node > partition.gpus_per_node:
            raise ToolFailure(
                ErrorCode.NOT_ENOUGH_GPUS,
                f"gpu_per_node={gpu_per_node} but the nodes of {where} have "
                f"{partition.gpus_per_node} GPU(s).",
                f"Use gpu_per_node={partition.gpus_per_node} or fewer.",
                {"partition": partition.name, "gpus": partition.gpus_per_node},
            )
        gpus: int | None = gpu_per_node
    else:
        # A partition without GPUs was read (an assumed one has the job's GPUs).
        assert partition.cpus_per_node is not None
        if gpu_per_node > partition.cpus_per_node:
            raise ToolFailure(
                ErrorCode.NOT_ENOUGH_GPUS,
                f"gpu_per_node={gpu_per_node} but the nodes of {where} have no GPU and "
                f"{partition.cpus_per_node} CPU(s): each process would be a CPU worker.",
                f"Use gpu_per_node={min(partition.cpus_per_node, 2)} or a GPU partition.",
                {"partition": partition.name, "gpus": 0, "cpus": partition.cpus_per_node},
            )
        gpus = None
    return Layout(num_nodes, gpu_per_node, gpus, partition.cpus_per_node)


def _flags(argv: list[str]) -> list[list[str]]:
    """argv cut into one `--flag value...` group per line, for people to read."""
    groups: list[list[str]] = []
    for arg in argv:
        if arg.startswith("--") or not groups:
            groups.append([arg])
        else:
            groups[-1].append(arg)
    return groups


@cache
def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # a shell script, not HTML: values are shell-quoted instead
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.filters["flags"] = _flags
    return env.get_template(TEMPLATE)


def batch_env(efa: bool, rdma: bool) -> dict[str, str]:
    """The variables the batch script exports for NCCL: skills.kube.efa's, and the
    interfaces NCCL's bootstrap may use."""
    env = efa_env(efa, rdma)
    return {**env, "NCCL_SOCKET_IFNAME": NCCL_SOCKET_IFNAME} if env else {}


def render(
    *,
    job_name: str,
    layout: Layout,
    trainer_args: list[str],
    log_dir: str,
    launcher: list[str],
    max_restarts: int = 0,
    partition: str | None = None,
    account: str | None = None,
    time_limit: str | None = None,
    efa: bool = False,
    rdma: bool = False,
    container_args: list[str] | None = None,
    code_dir: str | None = None,
    job_env: dict[str, str] | None = None,
) -> str:
    """The batch script. Values for `#SBATCH` lines must already match their patterns
    (the settings model checks them); this re-checks, so no caller can slip one by."""
    for what, value, pattern in (
        ("job_name", job_name, r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
        ("partition", partition, r"^[A-Za-z0-9_.-]+$"),
        ("account", account, r"^[A-Za-z0-9_.-]+$"),
        ("time_limit", time_limit, r"^[0-9:-]+$"),
        ("log_dir", log_dir, SBATCH_PATH),
    ):
        if value is not None and not re.fullmatch(pattern, value):
            raise ToolFailure(
                ErrorCode.INVALID_INPUT,
                f"{what} cannot go into an #SBATCH line: it must match {pattern}.",
                f"Pick a {what} of plain characters.",
                {"field": what},
            )
    return _template().render(
        job_name=job_name,
        nodes=layout.nodes,
        nproc_per_node=layout.nproc_per_node,
        gpus_per_node=layout.gpus_per_node,
        cpus_per_task=layout.cpus_per_task,
        omp_threads=layout.omp_threads,
        partition=partition,
        account=account,
        time_limit=time_limit,
        grace_s=GRACE_S,
        log_dir=log_dir,
        # The job's own variables (JobSpec.env) last: they replace the suite's.
        env={**batch_env(efa and bool(layout.gpus_per_node), rdma), **(job_env or {})},
        code_dir=code_dir,
        container_args=container_args or [],
        launcher=launcher,
        max_restarts=max_restarts,
        trainer_args=trainer_args,
    )
